// Matrix × vector for passes of 2–8 tokens on Q4_K weights (the batched decode steps of a
// server): y[t, row0 + r] (+)= finish(Σ_k W[r, k] x[t, k]) for up to 8 tokens a workgroup
// (grid y) and two rows a lane group (rows r and r + HALF), so each step's weights are
// decoded once for 8 tokens and each x load serves two rows (`matvec` takes 4 tokens and
// one row a lane group: every weight decoded twice for 8 tokens, x loaded once a row).
// The body, `q4_wide_rows`: with 8-bit x shaders/matvec/q4_k_q8_wide_step.wgsl
// (`wide_q8_pays` in ops/matmul/matvec.rs), else with f32 x q4_k_wide_step.wgsl (lanes by
// shape: `wide_lanes`); LANES lanes a row summed by `wide_sum` (subgroup shuffles or
// workgroup memory: shaders/matvec/wide_sum_*).
// No LoRA term (products with an adapter's term take `matvec`).

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(2) var<storage, read> w: array<u32>;             // [N, K] Q4_K blocks
@group(0) @binding(3) var<storage, read> vecs: array<f32>;          // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<vec4<f32>>; // activations
@group(0) @binding(5) var<storage, read> w4: array<vec4<u32>>;      // the same weights

const HALF: u32 = 256u / LANES; // lane groups of a workgroup: its first rows
const ROWS: u32 = 2u * HALF;    // rows of a workgroup: two a lane group

fn emit_row(r: u32, t0: u32, nt: u32, s0: vec4<f32>, s1: vec4<f32>) {
    let p = &g.seg[gs];
    for (var j = 0u; j < 8u; j++) {
        if (j < nt) {
            let raw = select(s1[j & 3u], s0[j & 3u], j < 4u);
            let idx = p.y_off + (t0 + j) * p.y_stride + p.row0 + r;
            var v: f32;
            if (p.accumulate == 2u) {
                v = finish(raw + y_load(idx), r);
            } else {
                v = finish(raw, r);
                if (p.accumulate == 1u) {
                    v += y_load(idx);
                }
            }
            y_store(idx, v);
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    // Both views of the weights stay in the layout whichever one the encoding reads.
    _ = arrayLength(&w);
    _ = arrayLength(&w4);
    let p = &g.seg[gs];
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let lane = li % LANES;
    let t0 = wid.y * 8u;
    let nt = min(t_count - min(t0, t_count), 8u);
    let xs = p.x_stride >> 2u;
    let x0 = (p.x_off >> 2u) + t0 * xs;
    let r0 = wid.x * ROWS + li / LANES;
    let r1 = r0 + HALF;
    // A row past the matrix reads the last row (its sums are never written): the lanes
    // stay in step for `row_sum`.
    let rb0 = min(r0, p.n - 1u) * p.row_bytes;
    let rb1 = min(r1, p.n - 1u) * p.row_bytes;
    let sums = q4_wide_rows(rb0, rb1, p.k, x0, xs, nt, lane, li);
    if (lane == 0u) {
        if (r0 < p.n) {
            emit_row(r0, t0, nt, sums[0], sums[1]);
        }
        if (r1 < p.n) {
            emit_row(r1, t0, nt, sums[2], sums[3]);
        }
    }
}
