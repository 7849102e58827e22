// Several matrix × vector products in one dispatch (decode: the first products of the
// four low-rank chains w, a, g, v with the LoRA first products of r, k, v; or the second
// products of the chains; or r, k, v): up to 8 segments, each its own matrix, input,
// output, epilogue (scale, LoRA term, bias, activation). A matrix is read from one of
// three sources (`src`): 0, the group's buffer in its first encoding (`mv_row` over
// `mv_step`); 1, the same buffer in the second encoding (F16 beside F32: `mv_row2`);
// 2, a second buffer of F16 matrices (an adapter's `A`, binding 8: `mv_row3`), at
// byte offset w_off in its buffer. Workgroups [wg0 of segment s, wg0 of s + 1) compute
// segment s exactly as `matvec` does (LANES lanes per row and `row_sum`).

// The table of segments (and `seg_of`), the bindings and `finish`: shaders/matvec_group/head.wgsl.

const ROWS: u32 = 256u / LANES;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    // Both views of the weights stay in the layout whichever one the encoding reads.
    _ = arrayLength(&w);
    _ = arrayLength(&w4);
    let sg = p.seg[seg_of(wid.x)];
    let t_count = d.n_tokens;
    let lane = li % LANES;
    let r = (wid.x - sg.wg0) * ROWS + li / LANES;
    let t0 = wid.y * 4u;
    // NT1 = 1: passes of one token only (the count folds to a constant).
    let nt = select(min(t_count - min(t0, t_count), 4u), 1u, NT1 == 1u);
    let xb = mv_xb(sg.x_off, sg.x_stride, t0);
    // With 8-bit x (Q8K): the segment's x quantized first (shaders/matvec/q4_k_q8_x.wgsl)
    // where its matrix is in the first encoding (`sg` is the workgroup's: uniform).
    if (sg.src == 0u) {
        mv_prologue(xb.x, sg.k, li);
    }
    var acc = vec4<f32>(0.0);
    if (r < sg.n) {
        let rb = sg.w_off + r * sg.row_bytes;
        // The first token's first LoRA pair loaded ahead of the row (see `lora_pre`).
        let h0 = sg.lora_h + t0 * sg.lora_stride;
        let pre = lora_pre(sg.lora_b, h0, sg.lora_rank, r, lane);
        if (sg.src == 2u) {
            acc = mv_row3(rb, sg.k, lane, xb, nt);
        } else if (sg.src == 1u) {
            acc = mv_row2(rb, sg.k, lane, xb, nt);
        } else {
            acc = mv_row(rb, sg.k, lane, xb, nt);
        }
        acc[0] += lora_sum(pre, sg.lora_b, h0, sg.lora_rank, r, lane, LANES);
        for (var j = 1u; j < nt; j++) {
            let h = h0 + j * sg.lora_stride;
            let q = lora_pre(sg.lora_b, h, sg.lora_rank, r, lane);
            acc[j] += lora_sum(q, sg.lora_b, h, sg.lora_rank, r, lane, LANES);
        }
    }
    let sum = row_sum(acc, li, nt);
    if (lane == 0u && r < sg.n) {
        for (var j = 0u; j < nt; j++) {
            let idx = sg.y_off + (t0 + j) * sg.y_stride + r;
            y_store(idx, finish(sum[j], r, sg));
        }
    }
}
