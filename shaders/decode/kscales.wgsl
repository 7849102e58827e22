// The 6-bit scale and min of sub-block j (0–7) of a Q4_K / Q5_K block, from its 12
// packed scale bytes held in three words (ggml get_scale_min_k4): sub-blocks 0–3 keep 6
// bits of bytes j and j + 4; 4–7 take 4 bits of byte j + 4 and the top 2 bits of bytes
// j − 4 and j. No branches (lanes of a subgroup take different sub-blocks).
fn kscale_min(w0: u32, w1: u32, w2: u32, j: u32) -> vec2<f32> {
    let sh = 8u * (j & 3u);
    let b0 = (w0 >> sh) & 0xffu;
    let b1 = (w1 >> sh) & 0xffu;
    let b2 = (w2 >> sh) & 0xffu;
    let hi = j >= 4u;
    let sc = select(b0 & 63u, (b2 & 0xfu) | ((b0 >> 6u) << 4u), hi);
    let m = select(b1 & 63u, (b2 >> 4u) | ((b1 >> 6u) << 4u), hi);
    return vec2<f32>(f32(sc), f32(m));
}

// (scale, min) of sub-block j of the block at byte bb of `w` (its scale words follow the
// f16 d and dmin).
fn scale_min_k4(bb: u32, j: u32) -> vec2<f32> {
    let sw = (bb >> 2u) + 1u;
    return kscale_min(w[sw], w[sw + 1u], w[sw + 2u], j);
}
