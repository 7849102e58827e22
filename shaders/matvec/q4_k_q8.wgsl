// Q4_K for one-token `matvec` / `matvec_group` passes with 8-bit activations: x is
// quantized into workgroup memory first (q4_k_q8_x.wgsl: per run of 32, d = max|x| / 127,
// int8 values, d · Σ q). A step (`q4k_pair`, as in q4_k.wgsl: two words of nibbles,
// values 4i .. 4i + 8 of sub-blocks 2p and 2p + 1) is then four 4 × int8 dot products
// (`dot4I8Packed`: SPIR-V SDot where the device has it):
//   Σ_sub w · x  ≈  d_w·sc · d · Σ (nibble · q)  −  dmin·m · d · Σ q,
// the second term added once a sub-block (by the step with i = 0). The format and the
// dot products follow llama.cpp's (ggml-cuda `quantize_q8_1`, `vec_dot_q4_K_q8_1`), but
// with d · Σ q where llama.cpp keeps the exact Σ x: the product is then exactly W times
// the rounded x, whose error Σ w · (d q − x) is about half of what the exact Σ x leaves,
// Σ d_w·sc·nibble · (d q − x), where weights are centred (the nibble part spans twice
// their range).
const MV_STEP: u32 = 16u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let st = q4k_pair(rb, g);
    let sb = 8u * (g >> 4u) + 2u * st.pr; // x run of sub-block 2 pr
    let xa = 8u * sb + st.i;
    let lo = dot4I8Packed(st.q.x & 0x0f0f0f0fu, xq[xa]) + dot4I8Packed(st.q.y & 0x0f0f0f0fu, xq[xa + 1u]);
    let hi = dot4I8Packed((st.q.x >> 4u) & 0x0f0f0f0fu, xq[xa + 8u])
        + dot4I8Packed((st.q.y >> 4u) & 0x0f0f0f0fu, xq[xa + 9u]);
    let x0 = xds[sb];
    let x1 = xds[sb + 1u];
    let mins = select(0.0, st.s0.y * x0.y + st.s1.y * x1.y, st.i == 0u);
    let v = st.dm.x * (st.s0.x * x0.x * f32(lo) + st.s1.x * x1.x * f32(hi)) - st.dm.y * mins;
    return vec4<f32>(v, 0.0, 0.0, 0.0);
}
