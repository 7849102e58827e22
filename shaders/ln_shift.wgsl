// LayerNorm + token shift + shift-state save, one workgroup per token (RWKV_x070):
//   xn[t]  = LayerNorm(x[t]) (ln1 / ln2, eps as torch)
//   prev   = xn[t-1] of the same sequence, or the saved shift state for its first token
//   out_m[t] = xn[t] + (prev - xn[t]) * mix_m            (m < n_mix: 6 time-mix, 1 channel-mix)
//   state  ← xn[last token of the sequence]
// One workgroup per token, or for passes of few tokens (decode) one per (token, slice of
// 4 · WG channels): each computes the row statistics it needs over all C channels (cheap,
// from cache; one pass and one workgroup sum for both rows, one row where the two are the
// same: a decode step's tokens) and writes its slice, so a decode step spreads over
// C / (4 · WG) workgroups. A thread takes 4 channels at a time (vec4 loads of x and
// stores of the mixes: C and the offsets in `act` are multiples of 4), so its loads of a
// row are few and all in flight together (the row loads of a scalar loop, one L2 round
// trip each, were the kernel's time: an H200, 2.9B, 27 µs a dispatch in a step of 128).
// The previous token's LayerNorm is recomputed here (cheaper than a dispatch). The first
// token's workgroups are the only readers of the old shift state, so they also write the
// new one, each its own slice after reading it.
// The entry point and the workgroup sum `wg_sum` come with the variant: subgroup sums
// (ln_shift/subgroups.wgsl) or a tree in workgroup memory (ln_shift/tree.wgsl); the
// writes of a workgroup's channels, `write_mixes`, 4 channels a thread
// (ln_shift/out_vec4.wgsl) or one (ln_shift/out_scalar.wgsl, on llvmpipe).

struct Params {
    c: u32,
    n_mix: u32,
    mix_off: u32,     // vec offset of the mixes [n_mix, C]
    ln_off: u32,      // vec offset of the LayerNorm weight [C]; bias follows at + C
    x_off: u32,       // act offset of x [T, C] (the residual stream), in f32
    out_off: u32,     // act offset of out_0; out_m at out_off + m * out_stride (f32)
    out_stride: u32,
    state_off: u32,   // offset of this shift vector inside a state slot
    slot_len: u32,
    eps: f32,
    slices: u32,      // workgroups per token: 1, or ceil(C / (4 · WG)) (each its slice)
    _p0: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> vecs: array<f32>;         // weights, mixes
@group(0) @binding(3) var<storage, read> tmeta: array<u32>;        // token metadata
@group(0) @binding(4) var<storage, read_write> state: array<f32>;  // [slots, slot_len]
@group(0) @binding(5) var<storage, read_write> act: array<vec4<f32>>; // activations

const WG: u32 = 256u;

// The kernel for invocation `li` of workgroup `wid` (`sgid`, `sgs`: its subgroup
// invocation id and the subgroup size, for `wg_sum`; 0 where there are no subgroups).
fn ln_shift(wid: vec3<u32>, nwg: vec3<u32>, li: u32, sgid: u32, sgs: u32) {
    let wgi = linear_wg(wid, nwg);
    let t = wgi / p.slices;
    if (t >= d.n_tokens) {
        return; // uniform for the whole workgroup
    }
    let c4 = p.c / 4u;
    let q0 = (wgi % p.slices) * WG; // first output vec4 of this workgroup
    let q1 = select(min(q0 + WG, c4), c4, p.slices == 1u);
    let b = tmeta[d.off_tok_seq + t];
    let pos = tmeta[d.off_tok_pos + t];
    let sm = seq_meta(b);
    let start = sm.x;
    let len = sm.y;
    let slot = sm.z;
    let first = pos == 0u;
    // The other row whose LayerNorm we need: the previous token's, or for a sequence's
    // first token its last one (the new shift state; the token itself when it is alone).
    // Both as vec4 indices.
    let rt = (p.x_off + t * p.c) / 4u;
    let ro = select(rt - c4, (p.x_off + (start + len - 1u) * p.c) / 4u, first);
    // Both rows' statistics in one pass and one workgroup sum: Σ e and Σ e² of e = x − x[0]
    // (a value of the row itself, so that the variance E[e²] − E[e]² does not cancel).
    // A row is summed the same way whichever of the two it is, so a token's LayerNorm has
    // the same bits in its own workgroup and in its successor's.
    let k0 = vec2<f32>(act[rt].x, act[ro].x);
    let one = vec4<f32>(1.0);
    var a = vec4<f32>(0.0);
    if (ro == rt) {
        // A sequence of one token (a decode step): one row.
        for (var i = li; i < c4; i += WG) {
            let e = act[rt + i] - k0.x;
            let s = dot(e, one);
            let q = dot(e, e);
            a += vec4<f32>(s, s, q, q);
        }
    } else {
        for (var i = li; i < c4; i += WG) {
            let e = act[rt + i] - k0.x;
            let f = act[ro + i] - k0.y;
            a += vec4<f32>(dot(e, one), dot(f, one), dot(e, e), dot(f, f));
        }
    }
    let st = wg_sum(a, li, sgid, sgs) / f32(p.c);
    let mean = k0 + st.xy;
    let rstd = inverseSqrt(max(st.zw - st.xy * st.xy, vec2<f32>(0.0)) + p.eps);
    let sb = slot * p.slot_len + p.state_off;
    write_mixes(t, q0 + li, q1, rt, ro, vec4<f32>(mean, rstd), first, sb);
}
