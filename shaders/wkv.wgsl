// The WKV-7 recurrence, token by token for each (head, sequence):
//   S = S * diag(w) + (S (-kk)) (kk * a)^T + v k^T,   y = S r
// S[i][j] pairs value index i with key index j (RWKV_x070 RNN mode; fixtures' layout).
// Rows of S are independent: one workgroup of RB × TPR threads per (block of RB rows of
// a head, sequence), TPR threads per row i, each keeping NV = HV / TPR vec4s of the row
// in registers and summing its partial dot products with the row's other threads
// through subgroup shuffles (TPR > 1). Tokens go in chunks of CH: the chunk's r, w, k,
// kk, kk·a and v of its head are in workgroup memory (copied coalesced), and the steps
// read only workgroup memory; the next chunk's loads are issued into registers before
// the current chunk's steps, so their latency hides behind them.
// The head size HEAD_SIZE (64, from the engine's `HEAD_SIZE`) gives rows of HV = 16 vec4s.
// A token's step is a short dependent chain run by few warps: splitting a head's 64 rows
// over 64 / RB workgroups and each row over TPR threads spreads the scan over more SMs
// and warps (H100: 16 threads a row, one vec4 each, ran the 2.9B scan in 6.2 ms against
// 8.2 with 4).

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

const HV: u32 = HEAD_SIZE / 4u; // vec4s of a row of S (and of a head's part of a token)
const NV: u32 = HV / TPR;
const CH: u32 = 16u;
const WG: u32 = RB * TPR;
const BLOCKS: u32 = HEAD_SIZE / RB; // row blocks per head

// The chunk's vectors of this head: [CH][HV] vec4s each, v as [CH][HEAD_SIZE].
var<workgroup> cr: array<vec4<f32>, CH * HV>;
var<workgroup> cw: array<vec4<f32>, CH * HV>;
var<workgroup> ck: array<vec4<f32>, CH * HV>;
var<workgroup> ckk: array<vec4<f32>, CH * HV>;
var<workgroup> cka: array<vec4<f32>, CH * HV>;
var<workgroup> cv: array<vec4<f32>, CH * HV>;

const PER: u32 = CH * HV / WG; // chunk elements each thread copies

// Loads the chunk of tokens n0.. (of the sequence at `start`, `len` tokens) of head h
// into registers: element e = u · WG + li is (token e / HV, vec4 column e % HV); r, w, k,
// kk, kk · a, v. All loads are issued before any is used.
fn fetch(pf: ptr<function, array<array<vec4<f32>, 6>, PER>>, start: u32, n0: u32, len: u32,
         h: u32, c4: u32, li: u32) {
    for (var u = 0u; u < PER; u++) {
        let e = u * WG + li;
        if (n0 + e / HV < len) {
            let g = (start + n0 + e / HV) * c4 + h * HV + e % HV;
            (*pf)[u][0] = act[(p.r_off >> 2u) + g];
            (*pf)[u][1] = act[(p.w_off >> 2u) + g];
            (*pf)[u][2] = act[(p.k_off >> 2u) + g];
            (*pf)[u][3] = act[(p.kk_off >> 2u) + g];
            (*pf)[u][4] = act[(p.a_off >> 2u) + g];
            (*pf)[u][5] = act[(p.v_off >> 2u) + g];
        }
    }
}

// The fetched chunk into workgroup memory (past the sequence's end: stale values no
// step reads).
fn put(pf: ptr<function, array<array<vec4<f32>, 6>, PER>>, li: u32) {
    for (var u = 0u; u < PER; u++) {
        let e = u * WG + li;
        cr[e] = (*pf)[u][0];
        cw[e] = (*pf)[u][1];
        ck[e] = (*pf)[u][2];
        ckk[e] = (*pf)[u][3];
        cka[e] = (*pf)[u][3] * (*pf)[u][4];
        cv[e] = (*pf)[u][5];
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let h = wid.x / BLOCKS;
    let b = wid.y;
    if (b >= d.n_seqs) {
        return; // uniform per workgroup
    }
    let sm = seq_meta(b);
    let start = sm.x;
    let len = sm.y;
    let slot = sm.z;
    let i = (wid.x % BLOCKS) * RB + li / TPR; // row of S (value index) within the head
    let q = li % TPR;       // which NV vec4s of the row
    let sb = ((slot * p.slot_len + p.state_off) >> 2u) + (h * HEAD_SIZE + i) * HV + q * NV;
    var s: array<vec4<f32>, NV>;
    for (var j = 0u; j < NV; j++) {
        s[j] = state[sb + j];
    }
    let c4 = p.c >> 2u;
    // The first chunk's vectors, then each next one's loads issued before the steps of
    // the current one (in registers while it runs).
    var pf: array<array<vec4<f32>, 6>, PER>;
    fetch(&pf, start, 0u, len, h, c4, li);
    put(&pf, li);
    workgroupBarrier();
    for (var n0 = 0u; n0 < len; n0 += CH) {
        let m = min(CH, len - n0);
        let more = n0 + CH < len;
        if (more) {
            fetch(&pf, start, n0 + CH, len, h, c4, li);
        }
        for (var tn = 0u; tn < m; tn++) {
            let e0 = tn * HV + q * NV;
            let vi = tn * HEAD_SIZE + i;
            let v = cv[vi >> 2u][vi & 3u];
            var sa = 0.0;
            for (var j = 0u; j < NV; j++) {
                sa -= dot(s[j], ckk[e0 + j]);
            }
            sa = tpr_sum(sa);
            var y = 0.0;
            for (var j = 0u; j < NV; j++) {
                s[j] = s[j] * cw[e0 + j] + sa * cka[e0 + j] + v * ck[e0 + j];
                y += dot(s[j], cr[e0 + j]);
            }
            y = tpr_sum(y);
            if (q == 0u) {
                let yi = p.y_off + (start + n0 + tn) * p.c + h * HEAD_SIZE + i;
                act[yi >> 2u][yi & 3u] = y;
            }
        }
        workgroupBarrier();
        if (more) {
            put(&pf, li);
            workgroupBarrier();
        }
    }
    for (var j = 0u; j < NV; j++) {
        state[sb + j] = s[j];
    }
}
