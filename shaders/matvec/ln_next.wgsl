// The epilogue of the channel-mix value that also opens the next block (`LnEnd::Next`,
// after matvec/ln_save.wgsl): once every workgroup has added its rows to the residual,
// the dispatch's last workgroup to finish runs the next block's time-mix LayerNorm +
// token shift (RWKV_x070's steps 1–3) for the pass's one token, in place of that block's
// `ln_shift` dispatch:
//   xn      = LayerNorm(x) (weight p.nx_ln_w, bias p.nx_ln_b of the next block's vectors,
//             eps p.ln_eps; x: the residual this dispatch wrote, p.n values at p.y_off)
//   out_m   = xn + (prev − xn) · mix_m   (m < 6: the mixes at p.nx_mix, out_m at
//             p.nx_out + m · p.nx_out_stride; prev: that block's shift state)
//   state   ← xn
// "Last" is a counter in the activations (u32 index p.ln_done, 0 between dispatches):
// each workgroup, after its rows are written, makes them visible at device scope
// (storageBarrier: an acquire-release fence of storage memory at device scope, then the
// workgroup barrier) and adds 1; the one that reads p.nx_wgs − 1 has seen every other
// workgroup's add, fences again (acquire) so their rows are visible to its loads, resets
// the counter and normalizes the whole row with 256 invocations (4 channels a thread).
// The row statistics as ln_shift takes them (Σ e, Σ e² of e = x − x[0]); the sum's order
// differs (≈ 1e-7 relative). A dispatch less a block (ops/matmul/ln_fuse/mod.rs).

@group(0) @binding(12) var<storage, read> nvecs4: array<vec4<f32>>;        // the next block's vectors
@group(0) @binding(13) var<storage, read_write> nstate4: array<vec4<f32>>; // its state part
@group(0) @binding(14) var<storage, read_write> done: array<atomic<u32>>;  // `act` as u32

var<workgroup> nx_last: u32;
var<workgroup> nx_part: array<vec2<f32>, 32>; // Σ e, Σ e² of each run of 8 invocations

fn mv_epilogue(li: u32) {
    let p = &g.seg[gs];
    storageBarrier(); // this workgroup's rows, before its add
    if (li == 0u) {
        let before = atomicAdd(&done[p.ln_done], 1u);
        nx_last = select(0u, 1u, before + 1u == p.nx_wgs);
    }
    if (workgroupUniformLoad(&nx_last) == 0u) {
        return; // uniform: the whole workgroup
    }
    storageBarrier(); // every other workgroup's rows
    if (li == 0u) {
        atomicStore(&done[p.ln_done], 0u);
    }
    let c4 = p.n / 4u;
    let x0 = p.y_off / 4u;
    let k0 = act[x0].x;
    let one = vec4<f32>(1.0);
    var a = vec2<f32>(0.0);
    for (var i = li; i < c4; i += 256u) {
        let e = act[x0 + i] - k0;
        a += vec2<f32>(dot(e, one), dot(e, e));
    }
    a += subgroupShuffleXor(a, 1u);
    a += subgroupShuffleXor(a, 2u);
    a += subgroupShuffleXor(a, 4u);
    if ((li & 7u) == 0u) {
        nx_part[li / 8u] = a;
    }
    workgroupBarrier();
    var s = vec2<f32>(0.0);
    for (var j = 0u; j < 32u; j++) {
        s += nx_part[j];
    }
    s /= f32(p.n);
    let mean = k0 + s.x;
    let rstd = inverseSqrt(max(s.y - s.x * s.x, 0.0) + p.ln_eps);
    // vec4 indices (the offsets are multiples of 4: ops/matmul/ln_fuse/mod.rs).
    let sb = (seq_meta(tmeta[d.off_tok_seq]).z * p.nx_slot_len + p.nx_state) / 4u;
    let lw = p.nx_ln_w / 4u;
    let lb = p.nx_ln_b / 4u;
    let lm = p.nx_mix / 4u;
    let o0 = p.nx_out / 4u;
    let os = p.nx_out_stride / 4u;
    for (var i = li; i < c4; i += 256u) {
        let xn = (act[x0 + i] - mean) * rstd * nvecs4[lw + i] + nvecs4[lb + i];
        let dx = nstate4[sb + i] - xn;
        nstate4[sb + i] = xn;
        for (var m = 0u; m < 6u; m++) {
            act[o0 + m * os + i] = xn + dx * nvecs4[lm + m * c4 + i];
        }
    }
}
