// Matrix × vector for few tokens (decode): y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k]
// + bias). 8 rows × 32 lanes per workgroup, up to 4 tokens per workgroup (grid y, the 4
// tokens' sums in one vec4); each lane decodes 8 weights at a time (`dec8`), lanes of a
// row read consecutive groups (coalesced), and are reduced through workgroup memory.
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
var<workgroup> red: array<vec4<f32>, 256>; // [ROWS, 32 lanes], one vec4 = 4 tokens

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

fn xdot(t: u32, t_count: u32, k: u32, wv: W8) -> f32 {
    if (t >= t_count) {
        return 0.0;
    }
    let o = p.x_off + t * p.x_stride + k;
    let xa = vec4<f32>(act[o], act[o + 1u], act[o + 2u], act[o + 3u]);
    let xb = vec4<f32>(act[o + 4u], act[o + 5u], act[o + 6u], act[o + 7u]);
    return dot(wv.a, xa) + dot(wv.b, xb);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let lane = li & 31u;
    let rl = li >> 5u;
    let r = wid.x * ROWS + rl;
    let t0 = wid.y * 4u;
    var acc = vec4<f32>(0.0);
    if (r < p.n) {
        let rb = r * p.row_bytes;
        let groups = p.k / 8u;
        for (var g = lane; g < groups; g += 32u) {
            let wv = dec8(rb, g * 8u);
            acc += vec4<f32>(
                xdot(t0, t_count, g * 8u, wv),
                xdot(t0 + 1u, t_count, g * 8u, wv),
                xdot(t0 + 2u, t_count, g * 8u, wv),
                xdot(t0 + 3u, t_count, g * 8u, wv),
            );
        }
    }
    red[li] = acc;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s >>= 1u) {
        if (lane < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && r < p.n) {
        let sum = red[li];
        for (var j = 0u; j < 4u; j++) {
            let t = t0 + j;
            if (t < t_count) {
                let idx = p.y_off + t * p.y_stride + p.row0 + r;
                var v = finish(sum[j], r);
                if (p.accumulate == 1u) {
                    v += y_load(idx);
                }
                y_store(idx, v);
            }
        }
    }
}
