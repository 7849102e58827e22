// Q4_K for one-token `matvec` / `matvec_group` passes with 8-bit x (q4_k_q8_x.wgsl, or
// handed over: x8_in.wgsl), a step a whole sub-block pair: 64 values, the
// eight nibble words of pair pr = g % 4 of block g / 4 — low nibbles sub-block 2 pr, high
// nibbles 2 pr + 1 — under one read of the block's header, where q4_k_q8.wgsl reads it
// for every 16 values. Sixteen 4 × int8 dot products a step, the mins term once.
const MV_STEP: u32 = 64u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    // Blocks are 144 bytes (9 × 16) from a row start that is a multiple of 16, so the
    // header and the pair's eight nibble words are three 16-byte loads (`w4`).
    let b4 = (rb >> 4u) + (g >> 2u) * 9u;
    // g % 4 is the lane's: lanes are a multiple of 4 and take steps lanes apart, so the
    // pair, and with it every shift and mask of its scales, stays put along the row
    // (a step past the row, whose result is dropped, reads this pair of the last block).
    let pr = mv_lane & 3u;
    let hd = w4[b4];
    let dm = unpack2x16float(hd.x);
    let sm = kscales_pair(hd.y, hd.z, hd.w, pr);
    let s0 = sm.xz;
    let s1 = sm.yw;
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

// (scale, scale, min, min) of sub-blocks 2 pr and 2 pr + 1 of a Q4_K block from its three
// scale words, the same 6-bit values as `kscale_min` (shaders/decode/kscales.wgsl) but for
// both sub-blocks at once: they sit in adjacent bytes (16 pr mod 32 bits up). Pairs 0–1
// keep 6 bits of w0 (scales) and w1 (mins); pairs 2–3 take w2's low (scales) or high
// (mins) nibbles and the top 2 bits of w0's / w1's bytes as bits 4–5. With pr fixed per
// lane the selects' conditions, shifts and masks are loop-invariant.
fn kscales_pair(w0: u32, w1: u32, w2: u32, pr: u32) -> vec4<f32> {
    let hi = pr >= 2u;
    let q = 16u * (pr & 1u);
    let low = select(0x3f3fu, 0x0f0fu, hi);
    let top = select(0u, 0x3030u, hi);
    let sc = ((select(w0, w2, hi) >> q) & low) | ((w0 >> (q + 2u)) & top);
    let m = ((select(w1, w2, hi) >> (q + select(0u, 4u, hi))) & low) | ((w1 >> (q + 2u)) & top);
    return vec4<f32>(f32(sc & 0xffu), f32(sc >> 8u), f32(m & 0xffu), f32(m >> 8u));
}
