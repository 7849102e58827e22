// BF16 rows: a bf16 is the high half of an f32.
fn decode32(rb: u32, c: u32) {
    let b = (rb >> 2u) + c * 16u;
    for (var l = 0u; l < 16u; l++) {
        let v = w[b + l];
        dq[2u * l] = bitcast<f32>(v << 16u);
        dq[2u * l + 1u] = bitcast<f32>(v & 0xffff0000u);
    }
}
