// The active adapters' first products `h = s · A x` of the next product, computed by the
// kernel that produces x (decode passes; `ops::lora_out`): its params, the adapters' `A`
// matrices and the fixed-point accumulation. The host prepends the binding numbers
// (LO_U: the params; LO_A + a: adapter a's A; LO_ACC: the activations as i32) and
// `la_pair`, which reads a pair of A's halves from the binding of adapter a.
//
// Fixed point (O and V, whose h sums partials of many workgroups): a partial p adds
// hi = round(p · 2⁸) and lo = round((p − hi · 2⁻⁸) · 2²⁴) to two i32 words; the consumer
// reads h = f32(hi) · 2⁻⁸ + f32(lo) · 2⁻²⁴ (`shaders/lora_fixed.wgsl`). Integer sums do not
// depend on the order of the adds, so h is the same bits every run. Range: |h| < 2²³
// (hi fits i32); h is exact to 2⁻²⁵ per partial, and f32(hi) is exact while |h| < 2¹⁶.

struct LoraOut {
    h_off: u32,       // act offset of h: f32 [T, h_stride] (K), or i32 pairs [T, h_stride / 2, 2]
    h_stride: u32,    // f32 elements per token
    n_in: u32,        // columns of every A (its row length in halves)
    count: u32,       // adapters (1–4)
    rank: vec4<u32>,  // rows of each adapter's A
    j0: vec4<u32>,    // first column of each adapter's h (the adapters stacked, in order)
    wg0: vec4<u32>,   // (K) first of each adapter's row workgroups
    scale: vec4<f32>, // each adapter's scale s
}

// The adapter of stacked row `rr` (j0 is ascending).
fn lo_adapter(rr: u32) -> u32 {
    var a = 0u;
    for (var i = 1u; i < lo.count; i++) {
        if (rr >= lo.j0[i]) {
            a = i;
        }
    }
    return a;
}

// -- fixed point --
// Adds `v` in fixed point to the pair of words at act offset `i` (see above).
fn fx_add(i: u32, v: f32) {
    let hi = i32(round(v * 256.0));
    let lo_ = i32(round((v - f32(hi) * (1.0 / 256.0)) * 16777216.0));
    if (hi != 0) {
        atomicAdd(&lacc[i], hi);
    }
    if (lo_ != 0) {
        atomicAdd(&lacc[i + 1u], lo_);
    }
}
