// F16 rows (row length even, so rows start on a word).
fn decode32(rb: u32, c: u32) {
    let b = (rb >> 2u) + c * 16u;
    for (var l = 0u; l < 16u; l++) {
        let v = unpack2x16float(w[b + l]);
        dq[2u * l] = v.x;
        dq[2u * l + 1u] = v.y;
    }
}
