// The 8-bit quantizer of x on subgroup shuffles, shared by the prologues that quantize x in
// workgroup memory (matvec/q8_put_sg.wgsl, which comes after this file) and by the
// epilogues that hand 8-bit x to the next product (matvec/x8_out.wgsl, matvec/ln_next.wgsl).
// One run's share of 8-bit x for thread li's vec4 `a` (the 8 threads of the run call it
// together: shuffles within runs of 8 invocations): the packed int8 word of `a`, and the
// run's d = max|x| / 127 and d · Σ q (the same in all 8).
struct Q8Run {
    v: u32,
    d: f32,
    dsq: f32,
}

fn q8_run(a: vec4<f32>) -> Q8Run {
    let m = abs(a);
    var amax = max(max(m.x, m.y), max(m.z, m.w));
    amax = max(amax, subgroupShuffleXor(amax, 1u));
    amax = max(amax, subgroupShuffleXor(amax, 2u));
    amax = max(amax, subgroupShuffleXor(amax, 4u));
    let inv = select(0.0, 1.0 / amax, amax > 0.0);
    let v = pack4x8snorm(a * inv);
    var sq = dot4I8Packed(v, 0x01010101u);
    sq += subgroupShuffleXor(sq, 1u);
    sq += subgroupShuffleXor(sq, 2u);
    sq += subgroupShuffleXor(sq, 4u);
    let d = amax / 127.0;
    return Q8Run(v, d, d * f32(sq));
}

