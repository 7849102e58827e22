// Q5_K (ggml block_q5_K, 176 bytes, 256 values): f16 d, f16 dmin, 12 scale bytes (as
// Q4_K), qh[32] (5th bits), qs[128] nibbles. Sub-block s: low 4 bits from the nibble of
// qs[32*(s/2) + l], 5th bit = bit s of qh[l]; y = d*sc*q - dmin*m.

fn decode32(rb: u32, c: u32) {
    let bb = rb + (c >> 3u) * 176u;
    let s = c & 7u;
    let dm = unpack2x16float(w[bb >> 2u]);
    let sm = scale_min_k4(bb, s);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let hb = (bb + 16u) >> 2u;
    let qb = ((bb + 48u) >> 2u) + (s >> 1u) * 8u;
    let sh = (s & 1u) * 4u;
    for (var i = 0u; i < 8u; i++) {
        let q = w[qb + i] >> sh;
        let h = w[hb + i] >> s;
        for (var j = 0u; j < 4u; j++) {
            let v = ((q >> (8u * j)) & 0xfu) | (((h >> (8u * j)) & 1u) << 4u);
            dq[4u * i + j] = d * f32(v) - m;
        }
    }
}

fn hi4(h: u32, s: u32) -> vec4<f32> {
    let x = h >> s;
    return vec4<f32>(f32(x & 1u), f32((x >> 8u) & 1u), f32((x >> 16u) & 1u), f32((x >> 24u) & 1u)) * 16.0;
}

fn dec8(rb: u32, k: u32) -> W8 {
    let bb = rb + (k >> 8u) * 176u;
    let s = (k >> 5u) & 7u;
    let dm = unpack2x16float(w[bb >> 2u]);
    let sm = scale_min_k4(bb, s);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let within = (k & 31u) >> 2u;
    let hw = ((bb + 16u) >> 2u) + within;
    let qw = ((bb + 48u) >> 2u) + (s >> 1u) * 8u + within;
    let sh = (s & 1u) * 4u;
    return W8(
        d * (nib4(w[qw] >> sh) + hi4(w[hw], s)) - m,
        d * (nib4(w[qw + 1u] >> sh) + hi4(w[hw + 1u], s)) - m,
    );
}
