// Q4_K with 8-bit x (q4_k_q8_x.wgsl), a step a whole sub-block pair: 64 values, the
// eight nibble words of pair pr = g % 4 of block g / 4 — low nibbles sub-block 2 pr, high
// nibbles 2 pr + 1 — under one read of the block's header, where q4_k_q8.wgsl reads it
// for every 16 values. Sixteen 4 × int8 dot products a step, the mins term once.
const MV_STEP: u32 = 64u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    // Blocks are 144 bytes (9 × 16) from a row start that is a multiple of 16, so the
    // header and the pair's eight nibble words are three 16-byte loads (`w4`).
    let b4 = (rb >> 4u) + (g >> 2u) * 9u;
    let pr = g & 3u;
    let hd = w4[b4];
    let dm = unpack2x16float(hd.x);
    let s0 = kscale_min(hd.y, hd.z, hd.w, 2u * pr);
    let s1 = kscale_min(hd.y, hd.z, hd.w, 2u * pr + 1u);
    let qa = w4[b4 + 1u + 2u * pr];
    let qb = w4[b4 + 2u + 2u * pr];
    let sb = 8u * (g >> 2u) + 2u * pr; // x run of sub-block 2 pr (even)
    // x's words of runs sb (lo) and sb + 1 (hi): 8-bit x from the prologue's workgroup
    // memory, or handed over in the activations (`xq4`, `xds4`).
    let xv = 2u * sb; // runs are 8 words: two vec4s
    let xl0 = xq4(xv);
    let xl1 = xq4(xv + 1u);
    let xh0 = xq4(xv + 2u);
    let xh1 = xq4(xv + 3u);
    var lo = 0;
    var hi = 0;
    for (var k = 0u; k < 4u; k++) {
        lo += dot4I8Packed(qa[k] & 0x0f0f0f0fu, xl0[k]);
        hi += dot4I8Packed((qa[k] >> 4u) & 0x0f0f0f0fu, xh0[k]);
        lo += dot4I8Packed(qb[k] & 0x0f0f0f0fu, xl1[k]);
        hi += dot4I8Packed((qb[k] >> 4u) & 0x0f0f0f0fu, xh1[k]);
    }
    let xs = xds4(sb);
    let x0 = xs.xy;
    let x1 = xs.zw;
    let v = dm.x * (s0.x * x0.x * f32(lo) + s1.x * x1.x * f32(hi))
        - dm.y * (s0.y * x0.y + s1.y * x1.y);
    return vec4<f32>(v, 0.0, 0.0, 0.0);
}
