// 8-bit x a vec4 a thread (shaders/matvec/q4_k_q8_x_sg.wgsl says how): `q8_put` stores
// thread li's vec4 `a`, x[4i .. 4i + 4], into the workgroup's arrays; every invocation of
// the subgroup calls it together (`live` false past the end: its shuffles still run).
// Q8K (the deepest product's depth, a multiple of 256) sizes the arrays.
var<workgroup> xq: array<u32, Q8K / 4u>;        // x as int8, 4 a word
var<workgroup> xds: array<vec2<f32>, Q8K / 32u>; // (d, d · Σ q) per run of 32

fn q8_put(a: vec4<f32>, i: u32, live: bool, li: u32) {
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
    if (live) {
        xq[i] = v;
        if ((li & 7u) == 0u) {
            let d = amax / 127.0;
            xds[i / 8u] = vec2<f32>(d, d * f32(sq));
        }
    }
}
