// Sum over the TPR threads of a row of S (`wkv`, `wkv_fused`; TPR > 1): subgroup shuffles.

fn tpr_sum(v: f32) -> f32 {
    var s = v;
    for (var o = TPR / 2u; o > 0u; o >>= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}
