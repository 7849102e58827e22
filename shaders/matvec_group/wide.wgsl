// The group kernel for passes of 2–8 tokens on Q4_K weights (r, k and v of a batched
// decode step): segments as in shaders/matvec_group.wgsl (all from the group's buffer, no
// LoRA term), each workgroup up to 8 tokens (grid y) × 2 · 256 / LANES rows, two a lane
// group (`q4_wide_rows`, shaders/matvec/q4_k_wide_step.wgsl).

const HALF: u32 = 256u / LANES; // lane groups of a workgroup: its first rows
const ROWS: u32 = 2u * HALF;    // rows of a workgroup: two a lane group

fn emit_row(sg: Seg, r: u32, t0: u32, nt: u32, s0: vec4<f32>, s1: vec4<f32>) {
    for (var j = 0u; j < 8u; j++) {
        if (j < nt) {
            let raw = select(s1[j & 3u], s0[j & 3u], j < 4u);
            y_store(sg.y_off + (t0 + j) * sg.y_stride + r, finish(raw, r, sg));
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    // Both views of the weights stay in the layout whichever one the encoding reads.
    _ = arrayLength(&w);
    _ = arrayLength(&w4);
    let sg = p.seg[seg_of(wid.x)];
    let lane = li % LANES;
    let t0 = wid.y * 8u;
    let nt = min(d.n_tokens - min(t0, d.n_tokens), 8u);
    let xs = sg.x_stride >> 2u;
    let x0 = (sg.x_off >> 2u) + t0 * xs;
    let r0 = (wid.x - sg.wg0) * ROWS + li / LANES;
    let r1 = r0 + HALF;
    // A row past the matrix reads the last row (its sums are never written).
    let rb0 = sg.w_off + min(r0, sg.n - 1u) * sg.row_bytes;
    let rb1 = sg.w_off + min(r1, sg.n - 1u) * sg.row_bytes;
    let sums = q4_wide_rows(rb0, rb1, sg.k, x0, xs, nt, lane, li);
    if (lane == 0u) {
        if (r0 < sg.n) {
            emit_row(sg, r0, t0, nt, sums[0], sums[1]);
        }
        if (r1 < sg.n) {
            emit_row(sg, r1, t0, nt, sums[2], sums[3]);
        }
    }
}
