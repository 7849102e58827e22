// Tiled matrix product for T > 1 (prefill): y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k]
// + bias[row0 + r]). W stays in its file encoding: each thread decodes 8 weights
// (`dec8` of the prepended decode snippet) straight into workgroup memory. 64 rows × 64
// tokens per workgroup, K in steps of 32; tiles are stored k-major as vec4s so that each
// thread's 4 rows and 4 tokens are one vec4 load each, and its 4×4 outputs live in four
// vec4 registers (no arrays, nothing indexed at run time).
// `y_load` / `y_store`: into `act` (product/out_act.wgsl), or into a separate `out`
// (product/out_logits5.wgsl); `Params`, `p` and `finish`: product/.

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [N, K] encoded
@group(0) @binding(3) var<storage, read> vecs: array<f32>;       // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<f32>;  // activations

const BR: u32 = 64u;
const BT: u32 = 64u;

var<workgroup> ws: array<vec4<f32>, 512>; // [32 k][16 row groups of 4]
var<workgroup> xs: array<vec4<f32>, 512>; // [32 k][16 token groups of 4]


fn store(r: u32, t: u32, t_count: u32, v: f32) {
    let p = &g.seg[gs];
    if (r < p.n && t < t_count) {
        let idx = p.y_off + t * p.y_stride + p.row0 + r;
        var y: f32;
        if (p.accumulate == 2u) {
            y = finish(v + y_load(idx), r);
        } else {
            y = finish(v, r);
            if (p.accumulate == 1u) {
                y += y_load(idx);
            }
        }
        y_store(idx, y);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let p = &g.seg[gs];
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let r0 = wid.x * BR;
    let t0 = wid.y * BT;
    let tr = li & 15u;
    let tt = li >> 4u;
    // Loader roles: row / token `li / 4`, k offset `(li % 4) * 8` within the 32-chunk.
    let lr = li >> 2u;
    let lk = (li & 3u) * 8u;
    let w_ok = r0 + lr < p.n;
    let x_ok = t0 + lr < t_count;
    let rb = (r0 + lr) * p.row_bytes;
    let xb = p.x_off + (t0 + lr) * p.x_stride + lk;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    let chunks = p.k / 32u;
    for (var c = 0u; c < chunks; c++) {
        var wv = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (w_ok) {
            wv = dec8(rb, c * 32u + lk);
        }
        let wi = lk * 16u + (lr >> 2u);
        let wc = lr & 3u;
        ws[wi][wc] = wv.a.x;
        ws[wi + 16u][wc] = wv.a.y;
        ws[wi + 32u][wc] = wv.a.z;
        ws[wi + 48u][wc] = wv.a.w;
        ws[wi + 64u][wc] = wv.b.x;
        ws[wi + 80u][wc] = wv.b.y;
        ws[wi + 96u][wc] = wv.b.z;
        ws[wi + 112u][wc] = wv.b.w;
        var xa = vec4<f32>(0.0);
        var xb2 = vec4<f32>(0.0);
        if (x_ok) {
            let o = xb + c * 32u;
            xa = vec4<f32>(act[o], act[o + 1u], act[o + 2u], act[o + 3u]);
            xb2 = vec4<f32>(act[o + 4u], act[o + 5u], act[o + 6u], act[o + 7u]);
        }
        xs[wi][wc] = xa.x;
        xs[wi + 16u][wc] = xa.y;
        xs[wi + 32u][wc] = xa.z;
        xs[wi + 48u][wc] = xa.w;
        xs[wi + 64u][wc] = xb2.x;
        xs[wi + 80u][wc] = xb2.y;
        xs[wi + 96u][wc] = xb2.z;
        xs[wi + 112u][wc] = xb2.w;
        workgroupBarrier();
        for (var k = 0u; k < 32u; k++) {
            let a = ws[k * 16u + tr];
            let b = xs[k * 16u + tt];
            acc0 += a.x * b;
            acc1 += a.y * b;
            acc2 += a.z * b;
            acc3 += a.w * b;
        }
        workgroupBarrier();
    }
    let r = r0 + tr * 4u;
    let t = t0 + tt * 4u;
    for (var j = 0u; j < 4u; j++) {
        store(r, t + j, t_count, acc0[j]);
        store(r + 1u, t + j, t_count, acc1[j]);
        store(r + 2u, t + j, t_count, acc2[j]);
        store(r + 3u, t + j, t_count, acc3[j]);
    }
}
