// Q8_0 (ggml block_q8_0: f16 d, 32 × i8 q; y = d * q), as the loader lays a row out on
// the GPU (ops/gpu_layout.rs): its blocks in groups of eight, each group 272 bytes — the
// eight f16 scales (16 bytes), then the eight runs of 32 int8 (a row's last group of
// m < 8 blocks: the 16-byte scales, then m runs). Block b of a row at byte rb: group
// b / 8, its scale at rb + 272 (b / 8) + 2 (b % 8), its run 16 + 32 (b % 8) after the
// group's start. Rows start on 16 bytes, so every word read here is aligned.
fn q8_0_d(rb: u32, b: u32) -> f32 {
    let gw = (rb + (b >> 3u) * 272u) >> 2u;
    let j = b & 7u;
    return unpack2x16float(w[gw + (j >> 1u)])[j & 1u];
}

// Word index of the first word of block b's run.
fn q8_0_run(rb: u32, b: u32) -> u32 {
    return ((rb + (b >> 3u) * 272u + 16u + 32u * (b & 7u)) >> 2u);
}

fn decode32(rb: u32, c: u32) {
    let d = q8_0_d(rb, c);
    let q0 = q8_0_run(rb, c);
    for (var i = 0u; i < 8u; i++) {
        let q = w[q0 + i];
        dq[4u * i] = d * sext8(q);
        dq[4u * i + 1u] = d * sext8(q >> 8u);
        dq[4u * i + 2u] = d * sext8(q >> 16u);
        dq[4u * i + 3u] = d * sext8(q >> 24u);
    }
}

fn dec8(rb: u32, k: u32) -> W8 {
    let b = k >> 5u;
    let d = q8_0_d(rb, b);
    let o = q8_0_run(rb, b) + ((k & 31u) >> 2u);
    return W8(d * i8x4(w[o]), d * i8x4(w[o + 1u]));
}
