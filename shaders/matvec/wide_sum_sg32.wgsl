// The row sums of the 8-token kernels for rows wider than a subgroup (LANES = 64–256 on
// subgroups of at least 32: `RowSum::Subgroup32`): the four vec4s of a lane (row 0
// tokens 0–3, 4–7; row 1 tokens 0–3, 4–7) summed by shuffles within each 32 lanes, then
// the row's LANES / 32 partials of all four through workgroup memory under one barrier.
// A workgroup of 256 has 8 such partials; each lane group reads its own.

var<workgroup> wred: array<array<vec4<f32>, 4>, 8>;

fn wide_sum(v: array<vec4<f32>, 4>, li: u32) -> array<vec4<f32>, 4> {
    var s = v;
    for (var o = 16u; o > 0u; o >>= 1u) {
        for (var c = 0u; c < 4u; c++) {
            s[c] += subgroupShuffleXor(s[c], o);
        }
    }
    if (li % 32u == 0u) {
        wred[li / 32u] = s;
    }
    workgroupBarrier();
    var t = array<vec4<f32>, 4>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    let first = (li / LANES) * (LANES / 32u);
    for (var i = 0u; i < LANES / 32u; i++) {
        for (var c = 0u; c < 4u; c++) {
            t[c] += wred[first + i][c];
        }
    }
    return t;
}
