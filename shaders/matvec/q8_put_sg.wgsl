// 8-bit x a vec4 a thread (shaders/matvec/q4_k_q8_x_sg.wgsl says how): `q8_put` stores
// thread li's vec4 `a`, x[4i .. 4i + 4], into the workgroup's arrays; every invocation of
// the subgroup calls it together (`live` false past the end: its shuffles still run).
// Q8K (the deepest product's depth, a multiple of 256) sizes the arrays.
var<workgroup> xq: array<u32, Q8K / 4u>;        // x as int8, 4 a word
var<workgroup> xds: array<vec2<f32>, Q8K / 32u>; // (d, d · Σ q) per run of 32

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

fn q8_put(a: vec4<f32>, i: u32, live: bool, li: u32) {
    let q = q8_run(a);
    if (live) {
        xq[i] = q.v;
        if ((li & 7u) == 0u) {
            xds[i / 8u] = vec2<f32>(q.d, q.dsq);
        }
    }
}

// The 64-value step's reads (q4_k_q8_pair.wgsl): words 4v .. 4v + 4 of x, and the
// (d, d · Σ q) of runs sb and sb + 1.
fn xq4(v: u32) -> vec4<u32> {
    let i = 4u * v;
    return vec4<u32>(xq[i], xq[i + 1u], xq[i + 2u], xq[i + 3u]);
}

fn xds4(sb: u32) -> vec4<f32> {
    return vec4<f32>(xds[sb], xds[sb + 1u]);
}
