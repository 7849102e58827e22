// BF16 rows: a bf16 is the high half of an f32.
fn decode32(rb: u32, c: u32) {
    let b = (rb >> 2u) + c * 16u;
    for (var l = 0u; l < 16u; l++) {
        let v = w[b + l];
        dq[2u * l] = bitcast<f32>(v << 16u);
        dq[2u * l + 1u] = bitcast<f32>(v & 0xffff0000u);
    }
}

fn bf2(v: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u));
}

fn dec8(rb: u32, k: u32) -> W8 {
    let b = (rb >> 2u) + (k >> 1u);
    return W8(vec4<f32>(bf2(w[b]), bf2(w[b + 1u])), vec4<f32>(bf2(w[b + 2u]), bf2(w[b + 3u])));
}
