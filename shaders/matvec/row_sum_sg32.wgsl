// Sum over the LANES lanes of a row for rows wider than a subgroup (LANES = 64–256,
// subgroups of ≥ 32; `RowSum::Subgroup32`): shuffles within each 32 lanes, then the row's
// LANES / 32 partial sums through workgroup memory (one barrier instead of a tree's
// log2(LANES)).

var<workgroup> red: array<vec4<f32>, 8>;

fn row_sum(v: vec4<f32>, li: u32, nt: u32) -> vec4<f32> {
    var s = v;
    if (nt == 1u) {
        for (var o = 16u; o > 0u; o >>= 1u) {
            s.x += subgroupShuffleXor(s.x, o);
        }
    } else {
        for (var o = 16u; o > 0u; o >>= 1u) {
            s += subgroupShuffleXor(s, o);
        }
    }
    if (li % 32u == 0u) {
        red[li / 32u] = s;
    }
    workgroupBarrier();
    var t = vec4<f32>(0.0);
    let first = (li / LANES) * (LANES / 32u);
    for (var i = 0u; i < LANES / 32u; i++) {
        t += red[first + i];
    }
    return t;
}
