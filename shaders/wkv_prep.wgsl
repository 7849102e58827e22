// Per token and head, before the WKV recurrence (RWKV_x070 time mix):
//   kk = normalize(k * k_k)                 (L2 over the head, eps 1e-12)
//   k  = k * (1 + (a - 1) * k_a)
//   v  = layer 0: v_first = v;  else v + (v_first - v) * v_mix
//   w  = exp(-DECAY_SCALE * sigmoid(w_raw)) (DECAY_SCALE = e^-0.5 = 0.606531)
// One workgroup of HEAD_SIZE (64) per (token, head); both constants come from the
// engine's constants of the same names.

struct Params {
    c: u32,
    n_head: u32,
    layer0: u32,     // 1 in layer 0 (writes v_first), else 0 (mixes with v_first)
    k_off: u32,
    v_off: u32,
    a_off: u32,      // sigmoid(a0 + lora) [T, C]
    w_off: u32,      // raw decay in, decay out [T, C]
    vmix_off: u32,   // sigmoid(v0 + lora) [T, C] (unused in layer 0)
    vfirst_off: u32, // v of layer 0 [T, C]
    kk_off: u32,     // out [T, C]
    kk_w_off: u32,   // vec offset of k_k [C]
    ka_off: u32,     // vec offset of k_a [C]
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> vecs: array<f32>;       // layer vectors
@group(0) @binding(3) var<storage, read_write> act: array<f32>;  // activations

var<workgroup> red: array<f32, HEAD_SIZE>;

@compute @workgroup_size(HEAD_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let g = linear_wg(wid, nwg);
    if (g >= d.n_tokens * p.n_head) {
        return; // uniform per workgroup
    }
    let t = g / p.n_head;
    let h = g % p.n_head;
    let ch = h * HEAD_SIZE + li;
    let idx = t * p.c + ch;
    let k = act[p.k_off + idx];
    let kk = k * vecs[p.kk_w_off + ch];
    red[li] = kk * kk;
    workgroupBarrier();
    for (var s = HEAD_SIZE / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
    let norm = max(sqrt(red[0]), 1e-12);
    act[p.kk_off + idx] = kk / norm;
    let a = act[p.a_off + idx];
    act[p.k_off + idx] = k * (1.0 + (a - 1.0) * vecs[p.ka_off + ch]);
    let v = act[p.v_off + idx];
    if (p.layer0 == 1u) {
        act[p.vfirst_off + idx] = v;
    } else {
        act[p.v_off + idx] = v + (act[p.vfirst_off + idx] - v) * act[p.vmix_off + idx];
    }
    act[p.w_off + idx] = exp(-DECAY_SCALE * sigmoid(act[p.w_off + idx]));
}
