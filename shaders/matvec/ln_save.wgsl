// The epilogue of the one-token product that adds to the residual after a product with
// the LayerNorm prologue (`LnEnd::Out`: the channel-mix value after the key of
// matvec/q8_x_ln.wgsl): `ln_save(r, x)`, called with row r's residual x before the add,
// saves the token's LayerNorm of it as the new shift state, state ← xn (RWKV_x070's step
// 15): (x − mean) · rstd · weight + bias with the (mean, rstd) the key's first workgroup
// left at act f32 offset p.ln_stats. Row r is read and written by this invocation only,
// so the residual it saves is the one the key normalized.

@group(0) @binding(9) var<storage, read> tmeta: array<u32>;         // token metadata
@group(0) @binding(10) var<storage, read_write> lstate: array<f32>; // [slots, slot_len]

// Unused here (only the key's prologue needs it); set by `main`.
var<private> mv_first_wg: bool;

fn ln_save(r: u32, x: f32) {
    let p = &g.seg[gs];
    let st = act[p.ln_stats / 4u];
    let c = p.row0 + r;
    let sb = seq_meta(tmeta[d.off_tok_seq]).z * p.ln_slot_len + p.ln_state;
    lstate[sb + c] = (x - st.x) * st.y * vecs[p.ln_w + c] + vecs[p.ln_b + c];
}
