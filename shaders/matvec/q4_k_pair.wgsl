// The weights of one 16-value step g of a Q4_K row at byte rb, for the matrix × vector
// kernels (shaders/matvec/q4_k.wgsl, q4_k_q8.wgsl, q4_k_wide_step.wgsl, which come after
// this file; it reads `w4`, which they bind): block g / 16,
// sub-block pair pr = (g % 16) / 4, nibble words i and i + 1 (i = 2 (g % 4)) of the
// pair's eight. Their low nibbles are values 4i .. 4i + 8 of sub-block 2 pr, their high
// nibbles the same values of sub-block 2 pr + 1; y = d·sc·q − dmin·m per sub-block.
struct Q4kPair {
    dm: vec2<f32>, // the block's (d, dmin)
    s0: vec2<f32>, // (scale, min) of sub-block 2 pr
    s1: vec2<f32>, // (scale, min) of sub-block 2 pr + 1
    q: vec2<u32>,  // nibble words i, i + 1
    pr: u32,
    i: u32,
}

fn q4k_pair(rb: u32, g: u32) -> Q4kPair {
    // Blocks are 144 bytes (9 × 16) from a row start that is a multiple of 16: the header
    // is one 16-byte load (`w4`, bound by every kernel that takes this step), the pair's
    // words i, i + 1 half of another.
    let b4 = (rb >> 4u) + (g >> 4u) * 9u;
    let pr = (g & 15u) >> 2u;
    let i = 2u * (g & 3u);
    let hd = w4[b4];
    let q4 = w4[b4 + 1u + 2u * pr + (i >> 2u)];
    let q = select(q4.xy, q4.zw, (i & 2u) != 0u);
    return Q4kPair(unpack2x16float(hd.x), kscale_min(hd.y, hd.z, hd.w, 2u * pr),
                   kscale_min(hd.y, hd.z, hd.w, 2u * pr + 1u), q, pr, i);
}
