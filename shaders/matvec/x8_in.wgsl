// The prologue of a one-token Q4_K product (or group segment) whose 8-bit x the dispatch
// before it handed over in the activations (`Q8Handoff::Reads`: the channel-mix value
// after the key's matvec/x8_out.wgsl; r, k, v after the previous block's value wrote their
// lerps so, matvec/ln_next.wgsl): nothing to quantize, no barrier. x's offset (`x0`, vec4
// index) is then that of its 8-bit form: the k / 4 words of int8 values, then (d, d · Σ q)
// of each run of 32 as f32 pairs; the steps (q4_k_q8.wgsl, q4_k_q8_pair.wgsl) read them
// through `xq2`, `xq4`, `xds4`.

@group(0) @binding(15) var<storage, read_write> act_u4: array<vec4<u32>>; // `act` as vec4<u32>

var<private> x8_at: u32; // vec4 index of the words
var<private> x8_ds: u32; // vec4 index of the pairs

fn mv_prologue(x0: u32, k: u32, li: u32) {
    x8_at = x0;
    x8_ds = x0 + k / 16u;
}

fn xq2(i: u32) -> vec2<u32> {
    let v = act_u4[x8_at + i / 4u];
    return select(v.xy, v.zw, (i & 2u) != 0u);
}

fn xq4(v: u32) -> vec4<u32> {
    return act_u4[x8_at + v];
}

fn xds4(sb: u32) -> vec4<f32> {
    return act[x8_ds + sb / 2u];
}
