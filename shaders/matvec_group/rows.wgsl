// One lane's share of a row of a group's second encoding (`mv_row2` over `mv_step2`) and
// of its second buffer (`mv_row3` over `mv_step3`): `mv_row` of matvec/row.wgsl over
// their steps (steps g = lane, lane + LANES, … of MV_STEP2 / MV_STEP3 weights, UNR of
// them issued together; a step past the row repeats its last one, not added).

fn mv_row2(rb: u32, k: u32, lane: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    let steps = k / MV_STEP2;
    let last = steps - 1u;
    let zero = vec4<f32>(0.0);
    for (var g = lane; g < steps; g += UNR * LANES) {
        for (var u = 0u; u < UNR; u++) {
            let gu = g + u * LANES;
            acc += select(zero, mv_step2(rb, min(gu, last), xb, nt), gu < steps);
        }
    }
    return acc;
}

fn mv_row3(rb: u32, k: u32, lane: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    let steps = k / MV_STEP3;
    let last = steps - 1u;
    let zero = vec4<f32>(0.0);
    for (var g = lane; g < steps; g += UNR * LANES) {
        for (var u = 0u; u < UNR; u++) {
            let gu = g + u * LANES;
            acc += select(zero, mv_step3(rb, min(gu, last), xb, nt), gu < steps);
        }
    }
    return acc;
}
