// Tiled matrix product for T > 1 (prefill): y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k]
// + bias[row0 + r]). W stays in its file encoding (`decode32` of the prepended decode
// snippet turns a 32-value chunk of a row into f32 in registers); 64 rows × 64 tokens
// per workgroup, 4×4 outputs per thread, K in steps of 32 through workgroup memory.
// `y_load` / `y_store` come from the prelude: into `act`, or into a separate `out`.

struct Params {
    k: u32,           // K: input features (multiple of 32)
    n: u32,           // rows of W in this binding
    row0: u32,        // output column of W's first row
    row_bytes: u32,   // bytes of one encoded row of W
    x_off: u32,       // act offset of x [T, K] (row stride x_stride)
    x_stride: u32,
    y_off: u32,       // offset of y [T, *] (row stride y_stride)
    y_stride: u32,
    act: u32,         // 0 none, 1 tanh, 2 sigmoid, 3 relu²
    accumulate: u32,  // 1: y += result (residual add)
    bias_off: u32,    // vec offset of bias [N], or 0xffffffff for none
    rows_sel: u32,    // 0: T tokens, 1: R gathered rows
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [N, K] encoded
@group(0) @binding(3) var<storage, read> vecs: array<f32>;       // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<f32>;  // activations

const BR: u32 = 64u;
const BT: u32 = 64u;
const LD: u32 = 33u; // padded row of a tile (32 + 1) against bank conflicts

var<workgroup> ws: array<f32, 2112>; // [BR, LD]
var<workgroup> xs: array<f32, 2112>; // [BT, LD]

fn finish(v: f32, r: u32) -> f32 {
    var y = v;
    if (p.bias_off != 0xffffffffu) {
        y += vecs[p.bias_off + p.row0 + r];
    }
    switch p.act {
        case 1u: { y = tanh_safe(y); }
        case 2u: { y = sigmoid(y); }
        case 3u: { let q = max(y, 0.0); y = q * q; }
        default: {}
    }
    return y;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let r0 = wid.x * BR;
    let t0 = wid.y * BT;
    let tr = li % 16u;
    let tt = li / 16u;
    var acc: array<f32, 16>;
    let chunks = p.k / 32u;
    for (var c = 0u; c < chunks; c++) {
        if (li < BR) {
            let r = r0 + li;
            if (r < p.n) {
                decode32(r * p.row_bytes, c);
                for (var l = 0u; l < 32u; l++) {
                    ws[li * LD + l] = dq[l];
                }
            } else {
                for (var l = 0u; l < 32u; l++) {
                    ws[li * LD + l] = 0.0;
                }
            }
        }
        for (var i = 0u; i < 8u; i++) {
            let e = li + 256u * i;
            let tk = e / 32u;
            let l = e % 32u;
            let t = t0 + tk;
            var v = 0.0;
            if (t < t_count) {
                v = act[p.x_off + t * p.x_stride + c * 32u + l];
            }
            xs[tk * LD + l] = v;
        }
        workgroupBarrier();
        for (var l = 0u; l < 32u; l++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = ws[(tr + 16u * i) * LD + l];
                b[i] = xs[(tt + 16u * i) * LD + l];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + tr + 16u * i;
        for (var j = 0u; j < 4u; j++) {
            let t = t0 + tt + 16u * j;
            if (r < p.n && t < t_count) {
                let idx = p.y_off + t * p.y_stride + p.row0 + r;
                var v = finish(acc[i * 4u + j], r);
                if (p.accumulate == 1u) {
                    v += y_load(idx);
                }
                y_store(idx, v);
            }
        }
    }
}
