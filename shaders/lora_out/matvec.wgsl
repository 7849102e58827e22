// `matvec` with the next product's LoRA first products (LO != 0; `ops::lora_out`,
// common.wgsl): the rows of this workgroup's y through workgroup memory, then every
// (token, stacked row) pair's partial over them, added in fixed point.
var<workgroup> lo_y: array<vec4<f32>, ROWS>;

// h[t, rr] += s_a · Σ_rows A_a[rr − j0_a, row] y[t, row] for every stacked row rr.
fn lo_rows(li: u32, lane: u32, yv: vec4<f32>, r0: u32, t0: u32, nt: u32) {
    if (lane == 0u) {
        lo_y[li / LANES] = yv;
    }
    workgroupBarrier();
    let rows = lo.j0[lo.count - 1u] + lo.rank[lo.count - 1u];
    let pairs = min(ROWS, p.n - min(r0, p.n)) / 2u; // A's columns r0, r0 + 1, … (n even)
    for (var e = li; e < rows * nt; e += 256u) {
        let j = e / rows;
        let rr = e % rows;
        let a = lo_adapter(rr);
        let base = ((rr - lo.j0[a]) * lo.n_in + r0) >> 1u;
        var s = 0.0;
        for (var q = 0u; q < pairs; q++) {
            let w2 = la_pair(a, base + q);
            s += w2.x * lo_y[2u * q][j] + w2.y * lo_y[2u * q + 1u][j];
        }
        fx_add(lo.h_off + (t0 + j) * lo.h_stride + 2u * rr, lo.scale[a] * s);
    }
}
