// Matrix × matrix on cooperative matrices (tensor cores): y[t, row0 + n] (+)=
// act(Σ_k W[n, k] x[t, k] + bias) for 64 tokens × 64 rows per workgroup. Per step of
// 32 in k, the workgroup decodes W's 64 × 32 block (`dec8`) and converts x's 64 × 32 block
// into f16 tiles in workgroup memory (array<f16>: the element type the NVIDIA driver
// compiles coopLoad from); four subgroups of 32 each multiply a 32 × 32 quarter as 2 × 2
// 16×16×16 f16 products accumulated in f32. The epilogue goes through a per-subgroup f32
// tile. Same Params and bindings as `matmul`; needs subgroups of exactly 32.

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

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;
const LD: u32 = 40u; // tile row stride in halves (BK + 8: 80 bytes, 16-byte aligned)

var<workgroup> sa: array<f16, 2560>; // x tile [BM][LD]
var<workgroup> sb: array<f16, 2560>; // W tile [BN][LD] (column-major B = W^T)
var<workgroup> sc: array<f32, 1024>; // one 16 × 16 result per subgroup

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

// Writes the 16 × 16 result a subgroup left in `sc` at tokens tm.., rows tn...
fn emit(sg: u32, lane: u32, tm: u32, tn: u32, t_count: u32) {
    for (var u = 0u; u < 8u; u++) {
        let e = lane * 8u + u;
        let t = tm + e / 16u;
        let n = tn + e % 16u;
        if (t < t_count && n < p.n) {
            let idx = p.y_off + t * p.y_stride + p.row0 + n;
            var v = finish(sc[sg * 256u + e], n);
            if (p.accumulate == 1u) {
                v += y_load(idx);
            }
            y_store(idx, v);
        }
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t_count = select(d.n_tokens, d.n_rows, p.rows_sel == 1u);
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    let sg = li / 32u;
    let lane = li % 32u;
    let wm0 = (sg / 2u) * 32u;
    let wn0 = (sg % 2u) * 32u;
    // Tile filling: thread li fills row li / 2, 16 values from k = 16 · (li % 2).
    let lr = li >> 1u;
    let lk = (li & 1u) * 16u;
    let ta = m0 + lr;
    let nb = n0 + lr;
    let a_ok = ta < t_count;
    let b_ok = nb < p.n;
    let xrow = p.x_off + ta * p.x_stride + lk;
    let rb = nb * p.row_bytes;
    let to = lr * LD + lk;
    var acc00: coop_mat16x16<f32, C>;
    var acc01: coop_mat16x16<f32, C>;
    var acc10: coop_mat16x16<f32, C>;
    var acc11: coop_mat16x16<f32, C>;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var u = 0u; u < 16u; u++) {
            var v = 0.0;
            if (a_ok) {
                v = act[xrow + k0 + u];
            }
            sa[to + u] = f16(v);
        }
        var w0 = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        var w1 = w0;
        if (b_ok) {
            w0 = dec8(rb, k0 + lk);
            w1 = dec8(rb, k0 + lk + 8u);
        }
        for (var u = 0u; u < 4u; u++) {
            sb[to + u] = f16(w0.a[u]);
            sb[to + 4u + u] = f16(w0.b[u]);
            sb[to + 8u + u] = f16(w1.a[u]);
            sb[to + 12u + u] = f16(w1.b[u]);
        }
        workgroupBarrier();
        for (var s = 0u; s < BK; s += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[wm0 * LD + s], LD);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sa[(wm0 + 16u) * LD + s], LD);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&sb[wn0 * LD + s], LD);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&sb[(wn0 + 16u) * LD + s], LD);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
        }
        workgroupBarrier();
    }
    let tm = m0 + wm0;
    let tn = n0 + wn0;
    coopStoreT(acc00, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm, tn, t_count);
    workgroupBarrier();
    coopStoreT(acc01, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm, tn + 16u, t_count);
    workgroupBarrier();
    coopStoreT(acc10, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm + 16u, tn, t_count);
    workgroupBarrier();
    coopStoreT(acc11, &sc[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, tm + 16u, tn + 16u, t_count);
}
