// Sum over the LANES lanes of a row (consecutive invocations) for `matvec` and
// `matvec_group`: subgroup shuffles, where a subgroup is known to hold whole rows
// (`RowSum::Subgroup`). (row_sum_sg32.wgsl: rows wider than a subgroup; row_sum_wg.wgsl:
// a tree in workgroup memory.)

fn row_sum(v: vec4<f32>, li: u32, nt: u32) -> vec4<f32> {
    var s = v;
    if (nt == 1u) {
        // One token (decode): a quarter of the shuffles.
        for (var o = LANES / 2u; o > 0u; o >>= 1u) {
            s.x += subgroupShuffleXor(s.x, o);
        }
        return s;
    }
    for (var o = LANES / 2u; o > 0u; o >>= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}
