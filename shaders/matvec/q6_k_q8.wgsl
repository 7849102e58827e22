// Q6_K for one-token `matvec` passes with 8-bit activations: x quantized into workgroup
// memory first (q4_k_q8_x.wgsl: per run of 32, d = max|x| / 127, int8 values). A step is
// q6_k.wgsl's — 16 values of a 256-value block (ql[128], qh[64], i8 scales[16], f16 d,
// 212 bytes apart on the GPU), four values l = 4 (g % 8) .. + 4 of each of the four runs y[128n + 32q + l] —
// whose 6-bit values (0–63, as int8) meet x's 8-bit run q word l / 4 in a 4 × int8 dot
// product, the offset of 32 through the same run's sum:
//   Σ w · x  ≈  d·sc · d_x · (Σ q6 · q  −  32 Σ q)
// per run (one scale a 16 values, so one for the step's four). The f32 step takes eight
// vec4 dot products and four vec4 loads of x a token; this one four words of 8-bit x.
const MV_STEP: u32 = 16u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let u = g & 15u;
    let n = u >> 3u;
    let l4 = u & 7u;
    let sc = q6_step_scales(rb, g);
    let bw = (rb + (g >> 4u) * Q6_BLOCK) >> 2u; // the block's first word
    let a = w[bw + 16u * n + l4]; // ql byte 64n + 4 l4
    let b = w[bw + 16u * n + 8u + l4]; // ql byte 64n + 32 + 4 l4
    let h = w[bw + 32u + 8u * n + l4]; // qh byte 32n + 4 l4
    let lo = 0x0f0f0f0fu;
    let two = 0x03030303u;
    let q0 = (a & lo) | ((h & two) << 4u);
    let q1 = (b & lo) | (((h >> 2u) & two) << 4u);
    let q2 = ((a >> 4u) & lo) | (((h >> 4u) & two) << 4u);
    let q3 = ((b >> 4u) & lo) | (((h >> 6u) & two) << 4u);
    // x's runs 8 · block + 4n + q, word l4 of each.
    let r0 = 8u * (g >> 4u) + 4u * n;
    let w0 = xq[8u * r0 + l4];
    let w1 = xq[8u * (r0 + 1u) + l4];
    let w2 = xq[8u * (r0 + 2u) + l4];
    let w3 = xq[8u * (r0 + 3u) + l4];
    let ones = 0x01010101u;
    let s = vec4<f32>(
        f32(dot4I8Packed(q0, w0) - 32 * dot4I8Packed(w0, ones)),
        f32(dot4I8Packed(q1, w1) - 32 * dot4I8Packed(w1, ones)),
        f32(dot4I8Packed(q2, w2) - 32 * dot4I8Packed(w2, ones)),
        f32(dot4I8Packed(q3, w3) - 32 * dot4I8Packed(w3, ones)));
    let dx = vec4<f32>(xds[r0].x, xds[r0 + 1u].x, xds[r0 + 2u].x, xds[r0 + 3u].x);
    return vec4<f32>(dot(sc * dx, s), 0.0, 0.0, 0.0);
}
