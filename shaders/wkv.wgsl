// The WKV-7 recurrence, token by token for each (head, sequence):
//   S = S * diag(w) + (S (-kk)) (kk * a)^T + v k^T,   y = S r
// S[i][j] pairs value index i with key index j (RWKV_x070 RNN mode; fixtures' layout).
// Rows of S are independent: one workgroup of 64 × TPR per (head, sequence), TPR
// threads per row i, each keeping NV = 16 / TPR vec4s of the row in registers and
// summing its partial dot products with the row's other threads through subgroup
// shuffles (TPR > 1). No workgroup memory, no barriers; the next token's vectors are
// loaded before the current token's update.

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
@group(0) @binding(2) var<storage, read> tmeta: array<u32>;              // sequences
@group(0) @binding(3) var<storage, read_write> state: array<vec4<f32>>;  // [slots, slot_len]
@group(0) @binding(4) var<storage, read_write> act: array<vec4<f32>>;    // activations

const NV: u32 = 16u / TPR;

// One token's vectors as this thread sees them: its NV vec4s of r, w, k, kk and kk·a,
// and v of its row.
struct Tok {
    r: array<vec4<f32>, NV>,
    w: array<vec4<f32>, NV>,
    k: array<vec4<f32>, NV>,
    kk: array<vec4<f32>, NV>,
    ka: array<vec4<f32>, NV>,
    v: f32,
}

fn load_tok(e: u32, row: u32) -> Tok {
    var t: Tok;
    for (var j = 0u; j < NV; j++) {
        t.r[j] = act[(p.r_off >> 2u) + e + j];
        t.w[j] = act[(p.w_off >> 2u) + e + j];
        t.k[j] = act[(p.k_off >> 2u) + e + j];
        let kk = act[(p.kk_off >> 2u) + e + j];
        t.kk[j] = kk;
        t.ka[j] = kk * act[(p.a_off >> 2u) + e + j];
    }
    let vi = p.v_off + row;
    t.v = act[vi >> 2u][vi & 3u];
    return t;
}

@compute @workgroup_size(64u * TPR)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let h = wid.x;
    let b = wid.y;
    if (b >= d.n_seqs) {
        return; // uniform per workgroup
    }
    let start = tmeta[d.off_seqs + 4u * b];
    let len = tmeta[d.off_seqs + 4u * b + 1u];
    let slot = tmeta[d.off_seqs + 4u * b + 2u];
    let i = li / TPR;       // row of S (value index) within the head
    let q = li % TPR;       // which NV vec4s of the row
    let sb = ((slot * p.slot_len + p.state_off) >> 2u) + (h * 64u + i) * 16u + q * NV;
    var s: array<vec4<f32>, NV>;
    for (var j = 0u; j < NV; j++) {
        s[j] = state[sb + j];
    }
    let c4 = p.c >> 2u;
    let col = h * 16u + q * NV; // vec4 column of this thread's keys in a token row
    var cur: Tok;
    if (len > 0u) {
        cur = load_tok(start * c4 + col, start * p.c + h * 64u + i);
    }
    for (var n = 0u; n < len; n++) {
        let t = start + n;
        var next: Tok;
        if (n + 1u < len) {
            next = load_tok((t + 1u) * c4 + col, (t + 1u) * p.c + h * 64u + i);
        }
        var sa = 0.0;
        for (var j = 0u; j < NV; j++) {
            sa -= dot(s[j], cur.kk[j]);
        }
        sa = tpr_sum(sa);
        var y = 0.0;
        for (var j = 0u; j < NV; j++) {
            s[j] = s[j] * cur.w[j] + sa * cur.ka[j] + cur.v * cur.k[j];
            y += dot(s[j], cur.r[j]);
        }
        y = tpr_sum(y);
        if (q == 0u) {
            let yi = p.y_off + t * p.c + h * 64u + i;
            act[yi >> 2u][yi & 3u] = y;
        }
        cur = next;
    }
    for (var j = 0u; j < NV; j++) {
        state[sb + j] = s[j];
    }
}
