// Q8_0 (ggml block_q8_0, 34 bytes): f16 d, 32 × i8 q; y = d * q.
fn decode32(rb: u32, c: u32) {
    let bb = rb + c * 34u;
    let d = rd_f16(bb);
    for (var i = 0u; i < 8u; i++) {
        let q = rd_u32(bb + 2u + 4u * i);
        dq[4u * i] = d * sext8(q);
        dq[4u * i + 1u] = d * sext8(q >> 8u);
        dq[4u * i + 2u] = d * sext8(q >> 16u);
        dq[4u * i + 3u] = d * sext8(q >> 24u);
    }
}

fn dec8(rb: u32, k: u32) -> W8 {
    let bb = rb + (k >> 5u) * 34u;
    let d = rd_f16(bb);
    let o = bb + 2u + (k & 31u);
    return W8(d * i8x4(rd_u32(o)), d * i8x4(rd_u32(o + 4u)));
}
