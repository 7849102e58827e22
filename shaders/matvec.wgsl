// Matrix × vector for few tokens (decode): y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k]
// + bias). 8 rows × 32 lanes per workgroup, up to 4 tokens per workgroup (grid y), W
// read once per workgroup in its file encoding; lanes reduced through workgroup memory.
// Same Params and bindings as `matmul`.

struct Params {
    k: u32,
    n: u32,
    row0: u32,
    row_bytes: u32,
    x_off: u32,
    x_stride: u32,
    y_off: u32,
    y_stride: u32,
    act: u32,
    accumulate: u32,
    bias_off: u32,
    rows_sel: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<u32>;          // [N, K] encoded
@group(0) @binding(3) var<storage, read> vecs: array<f32>;       // bias vectors
@group(0) @binding(4) var<storage, read_write> act: array<f32>;  // activations

const ROWS: u32 = 8u;
const TOK: u32 = 4u;
var<workgroup> red: array<f32, 1024>; // [TOK, ROWS, 32]

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
    let lane = li % 32u;
    let rl = li / 32u;
    let r = wid.x * ROWS + rl;
    let t0 = wid.y * TOK;
    var acc: array<f32, 4>;
    let chunks = p.k / 32u;
    if (r < p.n) {
        for (var c = lane; c < chunks; c += 32u) {
            decode32(r * p.row_bytes, c);
            for (var j = 0u; j < TOK; j++) {
                let t = t0 + j;
                if (t < t_count) {
                    let xb = p.x_off + t * p.x_stride + c * 32u;
                    var s = 0.0;
                    for (var l = 0u; l < 32u; l++) {
                        s += dq[l] * act[xb + l];
                    }
                    acc[j] += s;
                }
            }
        }
    }
    for (var j = 0u; j < TOK; j++) {
        red[(j * ROWS + rl) * 32u + lane] = acc[j];
    }
    workgroupBarrier();
    for (var s = 16u; s > 0u; s >>= 1u) {
        if (lane < s) {
            for (var j = 0u; j < TOK; j++) {
                let o = (j * ROWS + rl) * 32u;
                red[o + lane] += red[o + lane + s];
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u && r < p.n) {
        for (var j = 0u; j < TOK; j++) {
            let t = t0 + j;
            if (t < t_count) {
                let idx = p.y_off + t * p.y_stride + p.row0 + r;
                var v = finish(red[(j * ROWS + rl) * 32u], r);
                if (p.accumulate == 1u) {
                    v += y_load(idx);
                }
                y_store(idx, v);
            }
        }
    }
}
