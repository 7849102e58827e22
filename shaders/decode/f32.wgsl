// F32 rows: chunk c of the row starting at byte `rb`.
fn decode32(rb: u32, c: u32) {
    let b = (rb >> 2u) + c * 32u;
    for (var l = 0u; l < 32u; l++) {
        dq[l] = bitcast<f32>(w[b + l]);
    }
}
