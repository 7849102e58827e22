// The prologue of a one-token Q4_K product whose 8-bit x the product before it handed over
// in the activations (`Q8Handoff::Reads`: the channel-mix value after the key's
// matvec/x8_out.wgsl): nothing to quantize, no barrier; the 64-value step
// (q4_k_q8_pair.wgsl) reads x's int8 words and each run's (d, d · Σ q) from act u32 index
// p.x8 (the words of p.k values, then the pairs: a multiple of 4, so vec4 loads).

@group(0) @binding(15) var<storage, read_write> act_u4: array<vec4<u32>>; // `act` as vec4<u32>

fn mv_prologue(x0: u32, k: u32, li: u32) {}

fn xq4(v: u32) -> vec4<u32> {
    return act_u4[g.seg[gs].x8 / 4u + v];
}

// (d, d · Σ q) of runs sb and sb + 1 (sb even).
fn xds4(sb: u32) -> vec4<f32> {
    let p = &g.seg[gs];
    return act[(p.x8 + p.k / 4u) / 4u + sb / 2u];
}
