// LayerNorm + token shift + shift-state save, one workgroup per token (RWKV_x070):
//   xn[t]  = LayerNorm(x[t]) (ln1 / ln2, eps as torch)
//   prev   = xn[t-1] of the same sequence, or the saved shift state for its first token
//   out_m[t] = xn[t] + (prev - xn[t]) * mix_m            (m < n_mix: 6 time-mix, 1 channel-mix)
//   state  ← xn[last token of the sequence]
// One workgroup per token, or for passes of few tokens (decode) one per (token, slice of
// WG channels): each computes the row statistics it needs over all C channels (cheap,
// from cache; one pass and one workgroup sum for both rows) and writes its slice, so a
// decode step spreads over C / WG workgroups. The previous token's LayerNorm is recomputed
// here (cheaper than a dispatch). The first token's workgroups are the only readers of the
// old shift state, so they also write the new one, each its own slice after reading it.
// The entry point and the workgroup sum `wg_sum` come with the variant: subgroup sums
// (ln_shift/subgroups.wgsl) or a tree in workgroup memory (ln_shift/tree.wgsl).

struct Params {
    c: u32,
    n_mix: u32,
    mix_off: u32,     // vec offset of the mixes [n_mix, C]
    ln_off: u32,      // vec offset of the LayerNorm weight [C]; bias follows at + C
    x_off: u32,       // act offset of x [T, C] (the residual stream)
    out_off: u32,     // act offset of out_0; out_m at out_off + m * out_stride
    out_stride: u32,
    state_off: u32,   // offset of this shift vector inside a state slot
    slot_len: u32,
    eps: f32,
    slices: u32,      // workgroups per token: 1, or ceil(C / WG) (each its channel slice)
    _p0: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> vecs: array<f32>;         // weights, mixes
@group(0) @binding(3) var<storage, read> tmeta: array<u32>;        // token metadata
@group(0) @binding(4) var<storage, read_write> state: array<f32>;  // [slots, slot_len]
@group(0) @binding(5) var<storage, read_write> act: array<f32>;    // activations

const WG: u32 = 256u;

// The kernel for invocation `li` of workgroup `wid` (`sgid`, `sgs`: its subgroup
// invocation id and the subgroup size, for `wg_sum`; 0 where there are no subgroups).
fn ln_shift(wid: vec3<u32>, nwg: vec3<u32>, li: u32, sgid: u32, sgs: u32) {
    let wgi = linear_wg(wid, nwg);
    let t = wgi / p.slices;
    if (t >= d.n_tokens) {
        return; // uniform for the whole workgroup
    }
    let c0 = (wgi % p.slices) * WG; // first output channel of this workgroup
    let c1 = select(min(c0 + WG, p.c), p.c, p.slices == 1u);
    let b = tmeta[d.off_tok_seq + t];
    let pos = tmeta[d.off_tok_pos + t];
    let start = tmeta[d.off_seqs + 4u * b];
    let len = tmeta[d.off_seqs + 4u * b + 1u];
    let slot = tmeta[d.off_seqs + 4u * b + 2u];
    let first = pos == 0u;
    // The other row whose LayerNorm we need: the previous token's, or for a sequence's
    // first token its last one (the new shift state; the token itself when it is alone).
    let rt = p.x_off + t * p.c;
    let ro = select(rt - p.c, p.x_off + (start + len - 1u) * p.c, first);
    // Both rows' statistics in one pass and one workgroup sum: Σ e and Σ e² of e = x − x[0]
    // (a value of the row itself, so that the variance E[e²] − E[e]² does not cancel).
    let k0 = vec2<f32>(act[rt], act[ro]);
    var a = vec4<f32>(0.0);
    for (var i = li; i < p.c; i += WG) {
        let e = vec2<f32>(act[rt + i], act[ro + i]) - k0;
        a += vec4<f32>(e, e * e);
    }
    let st = wg_sum(a, li, sgid, sgs) / f32(p.c);
    let mean = k0 + st.xy;
    let rstd = inverseSqrt(max(st.zw - st.xy * st.xy, vec2<f32>(0.0)) + p.eps);
    let sb = slot * p.slot_len + p.state_off;
    for (var i = c0 + li; i < c1; i += WG) {
        let wt = vecs[p.ln_off + i];
        let bs = vecs[p.ln_off + p.c + i];
        let xn = (act[rt + i] - mean.x) * rstd.x * wt + bs;
        let xo = (act[ro + i] - mean.y) * rstd.y * wt + bs;
        var prev: f32;
        if (first) {
            prev = state[sb + i];
            state[sb + i] = xo;
        } else {
            prev = xo;
        }
        let dx = prev - xn;
        for (var m = 0u; m < p.n_mix; m++) {
            act[p.out_off + m * p.out_stride + t * p.c + i] = xn + dx * vecs[p.mix_off + m * p.c + i];
        }
    }
}
