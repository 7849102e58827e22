// Q6_K (ggml block_q6_K, 210 bytes, 256 values): ql[128] low nibbles, qh[64] high 2-bit
// pairs, i8 scales[16], f16 d (last). Chunk c = 32 values: half n = c/4 (128 values
// each), quarter g = c%4. Value l of the chunk: low nibble of ql[64n + l + 32(g&1)]
// (high nibble when g ≥ 2), high bits (qh[32n + l] >> 2g) & 3, scale sc[8n + l/16 + 2g];
// y = d * sc * (q - 32).
fn decode32(rb: u32, c: u32) {
    let bb = rb + (c >> 3u) * 210u;
    let s = c & 7u;
    let n = s >> 2u;
    let g = s & 3u;
    let d = rd_f16(bb + 208u);
    let qlb = bb + 64u * n + 32u * (g & 1u);
    let nib = (g >> 1u) * 4u;
    let qhb = bb + 128u + 32u * n;
    let sc0 = d * sext8(rd_u8(bb + 192u + 8u * n + 2u * g));
    let sc1 = d * sext8(rd_u8(bb + 192u + 8u * n + 2u * g + 1u));
    for (var i = 0u; i < 8u; i++) {
        let ql = rd_u32(qlb + 4u * i) >> nib;
        let qh = rd_u32(qhb + 4u * i) >> (2u * g);
        let sc = select(sc1, sc0, i < 4u);
        for (var j = 0u; j < 4u; j++) {
            let q = ((ql >> (8u * j)) & 0xfu) | (((qh >> (8u * j)) & 3u) << 4u);
            dq[4u * i + j] = sc * (f32(q) - 32.0);
        }
    }
}

fn q6x4(ql: u32, qh: u32) -> vec4<f32> {
    return u2f4(bytes4((ql & 0x0f0f0f0fu) | ((qh & 0x03030303u) << 4u), 0xffu), 32.0);
}

fn dec8(rb: u32, k: u32) -> W8 {
    let bb = rb + (k >> 8u) * 210u;
    let s = (k >> 5u) & 7u;
    let n = s >> 2u;
    let g = s & 3u;
    let within = k & 31u;
    let d = rd_f16(bb + 208u);
    let sc = d * sext8(rd_u8(bb + 192u + 8u * n + 2u * g + (within >> 4u)));
    let qlb = bb + 64u * n + 32u * (g & 1u) + within;
    let nib = (g >> 1u) * 4u;
    let qhb = bb + 128u + 32u * n + within;
    let hs = 2u * g;
    return W8(
        sc * q6x4(rd_u32(qlb) >> nib, rd_u32(qhb) >> hs),
        sc * q6x4(rd_u32(qlb + 4u) >> nib, rd_u32(qhb + 4u) >> hs),
    );
}
