// `wkv_fused` with att.output's LoRA first products (LO != 0; `ops::lora_out`,
// common.wgsl): the head's 64 values of o through workgroup memory, then each stacked
// row's partial over the head's 64 columns of A, added in fixed point.
var<workgroup> lo_o: array<f32, 64>;

// h[t, rr] += s_a · Σ_i A_a[rr − j0_a, 64 h + i] o[t, 64 h + i] for every stacked row rr
// (`o` is row i's value; every invocation of the workgroup calls it).
fn lo_head(li: u32, i: u32, q: u32, o: f32, h: u32, t: u32) {
    if (q == 0u) {
        lo_o[i] = o;
    }
    workgroupBarrier();
    let rows = lo.j0[lo.count - 1u] + lo.rank[lo.count - 1u];
    for (var rr = li; rr < rows; rr += WG) {
        let a = lo_adapter(rr);
        let base = ((rr - lo.j0[a]) * lo.n_in + h * 64u) >> 1u;
        var s = 0.0;
        for (var e = 0u; e < 32u; e++) {
            let w2 = la_pair(a, base + e);
            s += w2.x * lo_o[2u * e] + w2.y * lo_o[2u * e + 1u];
        }
        fx_add(lo.h_off + t * lo.h_stride + 2u * rr, lo.scale[a] * s);
    }
}
