// The WKV-7 recurrence, token by token for each (head, sequence):
//   S = S * diag(w) + (S (-kk)) (kk * a)^T + v k^T,   y = S r
// S[i][j] pairs value index i with key index j (RWKV_x070 RNN mode; fixtures' layout).
// One workgroup of 64 per (head, sequence); thread i keeps row i of S in registers.

struct Params {
    c: u32,
    r_off: u32,
    w_off: u32,       // decay in (0, 1)
    k_off: u32,       // k after the k_a mix
    v_off: u32,       // v after the value residual
    kk_off: u32,      // normalized kk
    a_off: u32,       // a (in-context learning rate)
    y_off: u32,       // out [T, C]
    state_off: u32,   // offset of this layer's S [H, N, N] inside a slot
    slot_len: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> tmeta: array<u32>;        // sequences
@group(0) @binding(3) var<storage, read_write> state: array<f32>;  // [slots, slot_len]
@group(0) @binding(4) var<storage, read_write> act: array<f32>;    // activations

var<workgroup> sr: array<f32, 64>;
var<workgroup> sw: array<f32, 64>;
var<workgroup> sk: array<f32, 64>;
var<workgroup> skk: array<f32, 64>;
var<workgroup> ska: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) i: u32) {
    let h = wid.x;
    let b = wid.y;
    if (b >= d.n_seqs) {
        return;
    }
    let start = tmeta[d.off_seqs + 4u * b];
    let len = tmeta[d.off_seqs + 4u * b + 1u];
    let slot = tmeta[d.off_seqs + 4u * b + 2u];
    let base = slot * p.slot_len + p.state_off + (h * 64u + i) * 64u;
    var s: array<f32, 64>;
    for (var j = 0u; j < 64u; j++) {
        s[j] = state[base + j];
    }
    for (var n = 0u; n < len; n++) {
        let idx = (start + n) * p.c + h * 64u + i;
        sr[i] = act[p.r_off + idx];
        sw[i] = act[p.w_off + idx];
        sk[i] = act[p.k_off + idx];
        let kk = act[p.kk_off + idx];
        skk[i] = kk;
        ska[i] = kk * act[p.a_off + idx];
        let v = act[p.v_off + idx];
        workgroupBarrier();
        var sa = 0.0;
        for (var j = 0u; j < 64u; j++) {
            sa -= s[j] * skk[j];
        }
        var y = 0.0;
        for (var j = 0u; j < 64u; j++) {
            let e = s[j] * sw[j] + sa * ska[j] + v * sk[j];
            s[j] = e;
            y += e * sr[j];
        }
        act[p.y_off + idx] = y;
        workgroupBarrier();
    }
    for (var j = 0u; j < 64u; j++) {
        state[base + j] = s[j];
    }
}
