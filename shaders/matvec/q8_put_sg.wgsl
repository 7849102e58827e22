// 8-bit x a vec4 a thread (shaders/matvec/q4_k_q8_x_sg.wgsl says how): `q8_put` stores
// thread li's vec4 `a`, x[4i .. 4i + 4], into the workgroup's arrays; every invocation of
// the subgroup calls it together (`live` false past the end: its shuffles still run).
// Q8K (the deepest product's depth, a multiple of 256) sizes the arrays.
var<workgroup> xq: array<u32, Q8K / 4u>;        // x as int8, 4 a word
var<workgroup> xds: array<vec2<f32>, Q8K / 32u>; // (d, d · Σ q) per run of 32

fn q8_put(a: vec4<f32>, i: u32, live: bool, li: u32) {
    let q = q8_run(a);
    if (live) {
        xq[i] = q.v;
        if ((li & 7u) == 0u) {
            xds[i / 8u] = vec2<f32>(q.d, q.dsq);
        }
    }
}

// The steps' reads of 8-bit x (q4_k_q8.wgsl, q4_k_q8_pair.wgsl): words i, i + 1 (i even),
// words 4v .. 4v + 4, and the (d, d · Σ q) of runs sb and sb + 1 (sb even).
fn xq2(i: u32) -> vec2<u32> {
    return vec2<u32>(xq[i], xq[i + 1u]);
}

fn xq4(v: u32) -> vec4<u32> {
    let i = 4u * v;
    return vec4<u32>(xq[i], xq[i + 1u], xq[i + 2u], xq[i + 3u]);
}

fn xds4(sb: u32) -> vec4<f32> {
    return vec4<f32>(xds[sb], xds[sb + 1u]);
}
