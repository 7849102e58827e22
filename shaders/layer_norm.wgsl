// LayerNorm over rows of C: y = (x - mean) / sqrt(var + eps) * weight + bias
// (biased variance, as torch.nn.functional.layer_norm). One workgroup per row; may run
// in place (x_off == y_off): every element is read before the row is written.

struct Params {
    c: u32,
    x_off: u32,     // act offset of x [rows, C]
    y_off: u32,     // act offset of y [rows, C]
    w_off: u32,     // vec offset of weight [C]; bias follows at w_off + C
    rows_sel: u32,  // 0: rows = tokens (T), 1: rows = gathered rows (R)
    eps: f32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> vecs: array<f32>;        // weight/bias vectors
@group(0) @binding(3) var<storage, read_write> act: array<f32>;  // activations

const WG: u32 = 256u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row = linear_wg(wid, nwg);
    let rows = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    if (row >= rows) {
        return; // uniform for the whole workgroup
    }
    let xb = p.x_off + row * p.c;
    var s = 0.0;
    for (var i = li; i < p.c; i += WG) {
        s += act[xb + i];
    }
    let mean = wg_sum1(li, s) / f32(p.c);
    var v = 0.0;
    for (var i = li; i < p.c; i += WG) {
        let e = act[xb + i] - mean;
        v += e * e;
    }
    let rstd = inverseSqrt(wg_sum1(li, v) / f32(p.c) + p.eps);
    let yb = p.y_off + row * p.c;
    for (var i = li; i < p.c; i += WG) {
        act[yb + i] = (act[xb + i] - mean) * rstd * vecs[p.w_off + i] + vecs[p.w_off + p.c + i];
    }
}
