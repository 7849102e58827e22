// F32 rows: chunk c of the row starting at byte `rb`.
fn decode32(rb: u32, c: u32) {
    let b = (rb >> 2u) + c * 32u;
    for (var l = 0u; l < 32u; l++) {
        dq[l] = bitcast<f32>(w[b + l]);
    }
}

fn dec8(rb: u32, k: u32) -> W8 {
    let b = (rb >> 2u) + k;
    return W8(
        vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u])),
        vec4<f32>(bitcast<f32>(w[b + 4u]), bitcast<f32>(w[b + 5u]), bitcast<f32>(w[b + 6u]), bitcast<f32>(w[b + 7u])),
    );
}
