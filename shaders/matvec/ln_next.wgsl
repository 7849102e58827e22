// The epilogue of a residual add that also opens the LayerNorm + token shift after it:
// the channel-mix value opening the next block (`LnEnd::Next`, after matvec/ln_save.wgsl;
// `LnEnd::NextOnly`, after matvec/ln_none.wgsl and matvec/ln_meta.wgsl), or the time mix's
// output opening its own block's channel mix (`NextOnly`). Once every workgroup has added
// its rows to the residual, the dispatch's last p.nx_tail workgroups to finish run that
// LayerNorm + token shift (RWKV_x070's steps 1–3 with six lerps, or 13–15 with one) for
// the pass's one token, in place of its `ln_shift` dispatch, each a slice of 256 vec4s
// (one a thread):
//   xn      = LayerNorm(x) (weight p.nx_ln_w, bias p.nx_ln_b of that block's vectors,
//             eps p.ln_eps; x: the residual this dispatch wrote, p.n values at p.y_off)
//   out_m   = xn + (prev − xn) · mix_m   (m < p.nx_mixes ≤ 6: the mixes at p.nx_mix,
//             out_m at p.nx_out + m · p.nx_out_stride; prev: that shift state)
//   state   ← xn
// The order is a counter in the activations (u32 index p.ln_done, 0 between dispatches):
// each workgroup, after its rows are written, makes them visible at device scope
// (storageBarrier: an acquire-release fence of storage memory at device scope, then the
// workgroup barrier) and takes a ticket. The last p.nx_tail tickets load their slice of
// the next block's vectors and state first, wait (one invocation polling, bounded) until
// every workgroup has taken one (the last ticket waits for none), fence again (acquire)
// so that every row is visible to their loads, and each takes the row statistics over
// the whole row (`ln_row_stats`, matvec/ln_row_stats.wgsl: the same bits in each; ln_shift's
// sum's order differs, ≈ 1e-7 relative). Each then counts once more;
// the last of them puts the counter back to 0. A waiting workgroup only waits for fewer
// than p.nx_tail others, all of which can run (every other workgroup of the grid is done);
// the host gives llvmpipe, whose few threads run workgroups to completion, a tail of one.
// A dispatch less a block (ops/matmul/ln_fuse/mod.rs).

@group(0) @binding(12) var<storage, read> nvecs4: array<vec4<f32>>;        // the next block's vectors
@group(0) @binding(13) var<storage, read_write> nstate4: array<vec4<f32>>; // its state part
@group(0) @binding(14) var<storage, read_write> done: array<atomic<u32>>;  // `act` as u32

// Polls of the counter before a tail workgroup goes on regardless (never reached while
// the GPU runs the grid: its other workgroups are done or running).
const NX_SPIN: u32 = 1048576u;

var<workgroup> nx_ticket: u32;

// The new residual, rows other workgroups of this dispatch wrote, for the tail's
// statistics (matvec/ln_row_stats.wgsl) and its LayerNorm: atomic loads, which go to the
// device's coherent level. A plain load may be answered by this SM's L1 with a line some
// workgroup here cached before those writes (a line holds 32 rows: several workgroups'),
// fences or not — storage buffers carry no Coherent decoration (naga emits none). Seen on
// an H200 as a lerp 1 % off now and then with other work on the GPU (the op test at four
// threads).
fn ln_x4(i: u32) -> vec4<f32> {
    let j = 4u * i;
    return vec4<f32>(
        bitcast<f32>(atomicLoad(&done[j])),
        bitcast<f32>(atomicLoad(&done[j + 1u])),
        bitcast<f32>(atomicLoad(&done[j + 2u])),
        bitcast<f32>(atomicLoad(&done[j + 3u])));
}

fn mv_row_out(rl: u32, v: f32) {}

fn mv_epilogue(wg: u32, li: u32) {
    let p = &g.seg[gs];
    let n = p.nx_wgs;
    let k = p.nx_tail;
    storageBarrier(); // this workgroup's rows, before its ticket
    if (li == 0u) {
        nx_ticket = atomicAdd(&done[p.ln_done], 1u);
    }
    let ticket = workgroupUniformLoad(&nx_ticket);
    if (ticket + k < n) {
        return; // uniform: the whole workgroup
    }
    // This workgroup's slice, one vec4 a thread (k · 256 vec4s cover the row), and its
    // loads that do not wait for the rows.
    let c4 = p.n / 4u;
    let i = (ticket + k - n) * 256u + li;
    let live = i < c4;
    let sb = (seq_meta(tmeta[d.off_tok_seq]).z * p.nx_slot_len + p.nx_state) / 4u + i;
    var lw = vec4<f32>(0.0);
    var lb = vec4<f32>(0.0);
    var prev = vec4<f32>(0.0);
    var mix: array<vec4<f32>, 6>;
    if (live) {
        lw = nvecs4[p.nx_ln_w / 4u + i];
        lb = nvecs4[p.nx_ln_b / 4u + i];
        prev = nstate4[sb];
        for (var m = 0u; m < 6u; m++) {
            if (m < p.nx_mixes) {
                mix[m] = nvecs4[p.nx_mix / 4u + m * c4 + i];
            }
        }
    }
    if (li == 0u) {
        var seen = atomicLoad(&done[p.ln_done]);
        for (var s = 0u; seen < n && s < NX_SPIN; s++) {
            seen = atomicLoad(&done[p.ln_done]);
        }
    }
    storageBarrier(); // every other workgroup's rows
    let x0 = p.y_off / 4u;
    let st = ln_row_stats(x0, p.n, p.ln_eps, li);
    let mean = st.x;
    let rstd = st.y;
    if (live) {
        let xn = (ln_x4(x0 + i) - mean) * rstd * lw + lb;
        let dx = prev - xn;
        nstate4[sb] = xn;
        let o = p.nx_out / 4u + i;
        for (var m = 0u; m < 6u; m++) {
            if (m < p.nx_mixes) {
                act[o + m * (p.nx_out_stride / 4u)] = xn + dx * mix[m];
            }
        }
    }
    // The tail's second count: its last puts the counter back for the next dispatch
    // (every tail workgroup has seen n by then).
    if (li == 0u && atomicAdd(&done[p.ln_done], 1u) + 1u == n + k) {
        atomicStore(&done[p.ln_done], 0u);
    }
}
