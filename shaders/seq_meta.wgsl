// A sequence's entry in the pass's metadata (`tmeta`, laid out as `Dims` in common.wgsl
// says): sequence b's (first token, tokens, state slot). For the kernels that bind `tmeta`
// and find a token's sequence and state (ln_shift, wkv, wkv_fused, wkv_fused_staged).

fn seq_meta(b: u32) -> vec3<u32> {
    let o = d.off_seqs + 4u * b;
    return vec3<u32>(tmeta[o], tmeta[o + 1u], tmeta[o + 2u]);
}
