// The prologue of a one-token product whose x is a token shift of a LayerNorm (`LnEnd::In`:
// the channel-mix key of a decode step, in place of the `ln_shift` dispatch before it),
// RWKV_x070's steps 13–14 for the pass's one token, then 8-bit x as q4_k_q8_x_sg.wgsl:
//   xn = LayerNorm(x) (weight p.ln_w, bias p.ln_b, eps as torch; x: the residual row at
//        x0, vec4 index, k values)
//   x' = xn + (prev − xn) · mix    (prev: the shift state of the token's slot; mix at p.ln_mix)
// Every workgroup computes the row's statistics itself (`ln_row_stats`,
// matvec/ln_row_stats.wgsl: the same bits in every workgroup), and the dispatch's first workgroup
// writes (mean, rstd) at act f32 offset p.ln_stats for the product after it that saves
// the new shift state (matvec/ln_save.wgsl). The shift state itself is only read here:
// other workgroups of this dispatch read it too. The LayerNorm's vectors, the mix and the
// shift state are read as vec4s (a second view of each; their offsets are multiples of 4:
// ops/matmul/ln_fuse/mod.rs): with four scalar loads each the 640 workgroups of a 2.9B key
// cost the dispatch the time the fusion saves (H200, benchmarks.md). Mirrors
// ops/ln_shift.rs's math (its reduction order differs: ≈ 1e-7 relative).

@group(0) @binding(9) var<storage, read> tmeta: array<u32>;            // token metadata
@group(0) @binding(10) var<storage, read> lstate4: array<vec4<f32>>;  // [slots, slot_len / 4]
@group(0) @binding(11) var<storage, read> vecs4: array<vec4<f32>>;    // `vecs` as vec4s

// The residual row, written by an earlier dispatch: plain loads (matvec/ln_row_stats.wgsl).
fn ln_x4(i: u32) -> vec4<f32> {
    return act[i];
}

// Whether this workgroup is the dispatch's first (set by `main`).
var<private> mv_first_wg: bool;

fn mv_prologue(x0: u32, k: u32, li: u32) {
    let p = &g.seg[gs];
    let n4 = k / 4u;
    let st = ln_row_stats(x0, k, p.ln_eps, li);
    let mean = st.x;
    let rstd = st.y;
    if (mv_first_wg && li == 0u) {
        act[p.ln_stats / 4u] = vec4<f32>(mean, rstd, 0.0, 0.0);
    }
    // vec4 indices (the offsets are multiples of 4: ops/matmul/ln_fuse/mod.rs).
    let sb = (seq_meta(tmeta[d.off_tok_seq]).z * p.ln_slot_len + p.ln_state) / 4u;
    let lw = p.ln_w / 4u;
    let lb = p.ln_b / 4u;
    let lm = p.ln_mix / 4u;
    for (var i0 = 0u; i0 < n4; i0 += 256u) {
        let i = i0 + li;
        let live = i < n4;
        var v = vec4<f32>(0.0);
        if (live) {
            let xn = (act[x0 + i] - mean) * rstd * vecs4[lw + i] + vecs4[lb + i];
            v = xn + (lstate4[sb + i] - xn) * vecs4[lm + i];
        }
        q8_put(v, i, live, li);
    }
    workgroupBarrier();
}

// Not this product's: the shift state is saved by the one after it.
fn ln_save(r: u32, x: f32) {}
