// Matrix × vector for few tokens (decode): y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k]
// + bias). LANES lanes per row, MVR · 256 / LANES rows per workgroup, up to 4 tokens per
// workgroup (grid y). The lanes of a row take consecutive steps of MV_STEP weights (a few
// words: `mv_row` of shaders/matvec/row.wgsl over `mv_step`, from the encoding's snippet
// in shaders/matvec/; x read as vec4s), so a subgroup's loads read contiguous runs, and
// the lanes of a row are summed by `row_sum` (subgroup shuffles, or workgroup memory).
// `mv_prologue`: 8-bit x in workgroup memory (q4_k_q8_x.wgsl), made from a LayerNorm +
// token shift of the residual first (q8_x_ln.wgsl), or nothing; `ln_save`: the new shift
// state from the residual before its add (ln_save.wgsl) or nothing (ln_none.wgsl);
// `mv_epilogue`: the next block's LayerNorm + token shift in the dispatch's last workgroups
// (ln_next.wgsl), the output handed on as 8-bit x (x8_out.wgsl, with the rows kept by
// `mv_row_out`), or nothing (epilogue_none.wgsl).
// `Params`, `p` and
// `finish`: product/; `act` is seen as vec4s, the weights also as `w4`.
// The LoRA term: shaders/matvec/lora.wgsl, or lora_hprod.wgsl (HPROD = 1) where the
// first workgroups make its h in the same dispatch.

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(2) var<storage, read> w: array<u32>;             // [N, K] encoded
@group(0) @binding(3) var<storage, read> vecs: array<f32>;          // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<vec4<f32>>; // activations
@group(0) @binding(5) var<storage, read> w4: array<vec4<u32>>;      // the same weights

const ROWS: u32 = 256u / LANES;


@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    // Both views of the weights stay in the layout whichever one the encoding reads.
    _ = arrayLength(&w);
    _ = arrayLength(&w4);
    let p = &g.seg[gs];
    mv_first_wg = wid.x == 0u && wid.y == 0u;
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let lane = li % LANES;
    let t0 = wid.y * 4u;
    // NT1 = 1: passes of one token only (the count folds to a constant).
    let nt = select(min(t_count - min(t0, t_count), 4u), 1u, NT1 == 1u);
    let xb = mv_xb(p.x_off, p.x_stride, t0);
    // HPROD = 1: the first workgroups make the LoRA term's h (shaders/matvec/lora_hprod.wgsl).
    var wg = wid.x;
    if (HPROD == 1u) {
        if (wg < hp_wgs()) {
            h_produce(wg, li, xb.x);
            return; // uniform: the whole workgroup
        }
        wg -= hp_wgs();
        hp_enter(xb.x);
    }
    // With 8-bit x (Q8K): the token's x quantized first (shaders/matvec/q4_k_q8_x.wgsl).
    mv_prologue(xb.x, p.k, li);
    // MVR rows a lane group: workgroup wg computes rows [wg·MVR·ROWS, (wg + 1)·MVR·ROWS),
    // which spreads a prologue over more rows.
    for (var rr = 0u; rr < MVR; rr++) {
        let r = (wg * MVR + rr) * ROWS + li / LANES;
        var acc = vec4<f32>(0.0);
        if (r < p.n) {
            // This lane's columns of the LoRA term (summed with the row below); the first
            // token's first pair loaded ahead of the row.
            let h0 = p.lora_h + t0 * p.lora_stride;
            let pre = lora_pre(p.lora_b, h0, p.lora_rank, r, lane);
            acc = mv_row(r * p.row_bytes, p.k, lane, xb, nt);
            acc[0] += lora_sum(pre, p.lora_b, h0, p.lora_rank, r, lane, LANES);
            for (var j = 1u; j < nt; j++) {
                let h = h0 + j * p.lora_stride;
                let q = lora_pre(p.lora_b, h, p.lora_rank, r, lane);
                acc[j] += lora_sum(q, p.lora_b, h, p.lora_rank, r, lane, LANES);
            }
        }
        let sum = row_sum(acc, li, nt);
        if (lane == 0u && r < p.n) {
            for (var j = 0u; j < nt; j++) {
                let idx = p.y_off + (t0 + j) * p.y_stride + p.row0 + r;
                var v: f32;
                if (p.accumulate == 2u) {
                    v = finish(sum[j] + y_load(idx), r);
                } else {
                    v = finish(sum[j], r);
                    if (p.accumulate == 1u) {
                        let x = y_load(idx);
                        ln_save(r, x);
                        v += x;
                    }
                }
                y_store(idx, v);
                if (j == 0u) {
                    mv_row_out(rr * ROWS + li / LANES, v); // the row, for the epilogue
                }
            }
        }
        if (MVR > 1u) {
            workgroupBarrier(); // the row sums' workgroup memory is reused
        }
    }
    // After the rows: nothing, the next block's LayerNorm + token shift in the last
    // workgroups (matvec/ln_next.wgsl), or the rows handed on as 8-bit x (x8_out.wgsl).
    mv_epilogue(wg, li);
}
