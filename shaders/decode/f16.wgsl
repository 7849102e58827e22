// F16 rows (row length even, so rows start on a word).
fn decode32(rb: u32, c: u32) {
    let b = (rb >> 2u) + c * 16u;
    for (var l = 0u; l < 16u; l++) {
        let v = unpack2x16float(w[b + l]);
        dq[2u * l] = v.x;
        dq[2u * l + 1u] = v.y;
    }
}

fn dec8(rb: u32, k: u32) -> W8 {
    let b = (rb >> 2u) + (k >> 1u);
    return W8(
        vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + 1u])),
        vec4<f32>(unpack2x16float(w[b + 2u]), unpack2x16float(w[b + 3u])),
    );
}
