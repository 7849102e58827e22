// 8-bit x for the one-token Q4_K products (q4_k_q8.wgsl, q4_k_q8_pair.wgsl): the
// workgroup's x quantized into workgroup memory before its rows (`mv_prologue`). Per run
// of 32 values (one Q4_K sub-block) the scale d = max|x| / 127, the values q = round(x / d)
// as packed int8 (`pack4x8snorm(x / max|x|)`) and d · Σ q. Q8K (the deepest product's
// depth, a multiple of 256) sizes the arrays.
var<workgroup> xq: array<u32, Q8K / 4u>;        // x as int8, 4 a word
var<workgroup> xds: array<vec2<f32>, Q8K / 32u>; // (d, d · Σ q) per run of 32

fn mv_prologue(x0: u32, k: u32, li: u32) {
    for (var b = li; b < k / 32u; b += 256u) {
        let base = x0 + 8u * b;
        let a0 = act[base];
        let a1 = act[base + 1u];
        let a2 = act[base + 2u];
        let a3 = act[base + 3u];
        let a4 = act[base + 4u];
        let a5 = act[base + 5u];
        let a6 = act[base + 6u];
        let a7 = act[base + 7u];
        let m4 = max(max(max(abs(a0), abs(a1)), max(abs(a2), abs(a3))),
                     max(max(abs(a4), abs(a5)), max(abs(a6), abs(a7))));
        let amax = max(max(m4.x, m4.y), max(m4.z, m4.w));
        let inv = select(0.0, 1.0 / amax, amax > 0.0);
        let q = 8u * b;
        var sq = 0;
        for (var j = 0u; j < 8u; j++) {
            let v = pack4x8snorm(act[base + j] * inv);
            xq[q + j] = v;
            sq += dot4I8Packed(v, 0x01010101u);
        }
        let d = amax / 127.0;
        xds[b] = vec2<f32>(d, d * f32(sq));
    }
    workgroupBarrier();
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
