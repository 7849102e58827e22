// A LayerNorm's row statistics for the fused LayerNorm + token shift (the key's prologue,
// matvec/q8_x_ln.wgsl; the value's tail, matvec/ln_next.wgsl): one load of the row, Σ e
// and Σ e² of e = x − x[0] (a value of the row, so that E[e²] − E[e]² does not cancel, as
// ln_shift does), shuffles within runs of 8 invocations, 32 partial sums through
// workgroup memory — the same order in every workgroup, so the same bits. The row is read
// through `ln_x4` (vec4 index), which the including file defines: plain loads where an
// earlier dispatch wrote the row (the key), coherent ones where other workgroups of the
// same dispatch did (the value's tail).

var<workgroup> lnp: array<vec2<f32>, 32>; // Σ e, Σ e² of each run of 8 invocations

// (mean, rstd) of the n values (a multiple of 4) at vec4 index x0, eps as torch's.
// Every invocation of the workgroup calls it.
fn ln_row_stats(x0: u32, n: u32, eps: f32, li: u32) -> vec2<f32> {
    let k0 = ln_x4(x0).x;
    let one = vec4<f32>(1.0);
    var a = vec2<f32>(0.0);
    for (var i = li; i < n / 4u; i += 256u) {
        let e = ln_x4(x0 + i) - k0;
        a += vec2<f32>(dot(e, one), dot(e, e));
    }
    a += subgroupShuffleXor(a, 1u);
    a += subgroupShuffleXor(a, 2u);
    a += subgroupShuffleXor(a, 4u);
    if ((li & 7u) == 0u) {
        lnp[li / 8u] = a;
    }
    workgroupBarrier();
    var s = vec2<f32>(0.0);
    for (var j = 0u; j < 32u; j++) {
        s += lnp[j];
    }
    s /= f32(n);
    return vec2<f32>(k0 + s.x, inverseSqrt(max(s.y - s.x * s.x, 0.0) + eps));
}
