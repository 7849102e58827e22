// Shared by `matvec` and `matvec_group`: the x rows of up to 4 tokens from t0 (vec4
// units; offsets and strides are multiples of 4), and one lane's share of a row's dot
// products: steps g = lane, lane + LANES, … of MV_STEP weights (`mv_step`). The lanes of
// a row take consecutive steps, so each load instruction of a subgroup reads one
// contiguous run of the row and of x (a step is a few words of weights: 4–16 values).
// A lane issues UNR steps LANES apart together (2 for float weights, 1 for block-quantized:
// `mv_unroll` in ops/matmul/tiles.rs; a step past the row repeats its last one, not added).
fn mv_xb(x_off: u32, x_stride: u32, t0: u32) -> vec4<u32> {
    let xs = x_stride >> 2u;
    let x0 = (x_off >> 2u) + t0 * xs;
    return vec4<u32>(x0, x0 + xs, x0 + 2u * xs, x0 + 3u * xs);
}

// The lane of the row being summed, for steps that keep per-lane values (q4_k_q8_pair.wgsl).
var<private> mv_lane: u32;

fn mv_row(rb: u32, k: u32, lane: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    mv_lane = lane;
    var acc = vec4<f32>(0.0);
    let steps = k / MV_STEP;
    let last = steps - 1u;
    let zero = vec4<f32>(0.0);
    for (var g = lane; g < steps; g += UNR * LANES) {
        for (var u = 0u; u < UNR; u++) {
            let gu = g + u * LANES;
            let s = mv_step(rb, min(gu, last), xb, nt);
            if (NT1 == 1u) {
                // One token: only x's sum (the other three stay 0, not 0 + 0 each step).
                acc.x += select(0.0, s.x, gu < steps);
            } else {
                acc += select(zero, s, gu < steps);
            }
        }
    }
    return acc;
}
