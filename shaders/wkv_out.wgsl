// After the recurrence, per token and head (RWKV_x070):
//   o = GroupNorm_H(y) (eps 64e-5, ln_x affine) + (Σ_j r_j k_j r_k[h, j]) v,   o *= g
// One workgroup of HEAD_SIZE (64, the engine's `HEAD_SIZE`) per (token, head).

struct Params {
    c: u32,
    n_head: u32,
    y_off: u32,
    r_off: u32,
    k_off: u32,
    v_off: u32,
    g_off: u32,
    o_off: u32,     // out [T, C]
    rk_off: u32,    // vec offset of r_k [H*N]
    lnx_off: u32,   // vec offset of ln_x weight [C]; bias follows at + C
    eps: f32,
    _p0: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> vecs: array<f32>;       // layer vectors
@group(0) @binding(3) var<storage, read_write> act: array<f32>;  // activations

const WG: u32 = HEAD_SIZE;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let g = linear_wg(wid, nwg);
    if (g >= d.n_tokens * p.n_head) {
        return;
    }
    let t = g / p.n_head;
    let h = g % p.n_head;
    let ch = h * HEAD_SIZE + li;
    let idx = t * p.c + ch;
    let y = act[p.y_off + idx];
    let mean = wg_sum1(li, y) / f32(HEAD_SIZE);
    let e = y - mean;
    let var_ = wg_sum1(li, e * e) / f32(HEAD_SIZE);
    let gn = e * inverseSqrt(var_ + p.eps) * vecs[p.lnx_off + ch] + vecs[p.lnx_off + p.c + ch];
    let r = act[p.r_off + idx];
    let k = act[p.k_off + idx];
    let bonus = wg_sum1(li, r * k * vecs[p.rk_off + ch]);
    act[p.o_off + idx] = (gn + bonus * act[p.v_off + idx]) * act[p.g_off + idx];
}
