// The WKV-7 recurrence over chunks of L = 16 tokens for each (head, sequence):
//   S_t = S_{t-1} G_t + v_t k_t^T,   G_t = diag(w_t) + â_t b̂_t^T,   y_t = S_t r_t
// with â = -kk and b̂ = kk * a (RWKV_x070; S[i][j] pairs value index i with key index j).
//
// Chunked form (the diagonal-plus-low-rank recurrence as flash-linear-attention's
// chunk_dplr computes it, derived here for this layout). Within a chunk starting from
// S_0, with Γ_t = w_0 ⊙ … ⊙ w_t (Γ_{-1} = 1) and z_t = S_{t-1} â_t (a column over i),
//   S_t = S_0 Γ_t + Σ_{u≤t} (z_u b̂_u^T + v_u k_u^T) Γ_t Γ_u^{-1}
// so, with Ã_t = Γ_{t-1} â_t, R̃_t = Γ_t r_t, B̄_u = b̂_u / Γ_u, K̄_u = k_u / Γ_u:
//   z_t = S_0 Ã_t + Σ_{u<t} (z_u Mab[t][u] + v_u Mak[t][u]),  Mab = Ã·B̄, Mak = Ã·K̄
//       → z = X (S_0 Ã^T + V Mak^T) per row, X = (I - Mab)^{-1} (unit lower triangular)
//   y_t = S_0 R̃_t + Σ_{u≤t} (z_u Qbr[t][u] + v_u Qkr[t][u]),  Qbr = R̃·B̄, Qkr = R̃·K̄
//   S_L = Γ_L ⊙ (S_0 + Σ_u z_u B̄_u^T + v_u K̄_u^T)   (Γ_L applied per column j)
// The 16×16 matrices depend on the chunk only, not on S: the scan's dependent chain is
// one step a chunk, not one a token. RWKV-7's decays are ≥ exp(-e^{-0.5}) ≈ 0.545, so
// Γ over 16 tokens stays ≥ 6e-5 and the divisions by Γ are exact to rounding in f32.
// Tokens past a sequence's end pad the last chunk as identities (w = 1, every other
// vector 0): they leave S as it is and their y is not written.
//
// One workgroup of 64 × TPR threads per (head, sequence): TPR threads per row i of S,
// each keeping NV = 16 / TPR vec4s of the row in registers and summing its partial dot
// products with the row's other threads through subgroup shuffles (TPR > 1). The next
// chunk's vectors are loaded into registers while the current one is computed.

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

const L: u32 = 16u;          // tokens a chunk
const NV: u32 = 16u / TPR;   // vec4s of a row of S a thread keeps
const WG: u32 = 64u * TPR;
const E: u32 = 256u / WG;    // (token, vec4 column) elements of a chunk a thread loads

// The chunk's vectors of this head, [L][16] vec4s each (element t * 16 + column / 4).
var<workgroup> ca: array<vec4<f32>, 256>; // kk, then Ã_t = -Γ_{t-1} kk_t
var<workgroup> cr: array<vec4<f32>, 256>; // r, then R̃_t = Γ_t r_t
var<workgroup> cb: array<vec4<f32>, 256>; // kk a, then B̄_t = kk_t a_t / Γ_t
var<workgroup> ck: array<vec4<f32>, 256>; // k, then K̄_t = k_t / Γ_t
var<workgroup> cg: array<vec4<f32>, 256>; // w, then Γ_t
var<workgroup> cv: array<vec4<f32>, 256>; // v
// 16×16 matrices [t][u], a row as 4 vec4s.
var<workgroup> mab: array<vec4<f32>, 64>;
var<workgroup> mak: array<vec4<f32>, 64>;
var<workgroup> qbr: array<vec4<f32>, 64>;
var<workgroup> qkr: array<vec4<f32>, 64>;
var<workgroup> xin: array<vec4<f32>, 64>; // X = (I - Mab)^{-1}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let h = wid.x;
    let b = wid.y;
    if (b >= d.n_seqs) {
        return; // uniform per workgroup
    }
    let start = tmeta[d.off_seqs + 4u * b];
    let len = tmeta[d.off_seqs + 4u * b + 1u];
    let slot = tmeta[d.off_seqs + 4u * b + 2u];
    let i = li / TPR;  // row of S (value index) within the head
    let q = li % TPR;  // which NV vec4s of the row
    let sb = ((slot * p.slot_len + p.state_off) >> 2u) + (h * 64u + i) * 16u + q * NV;
    var s: array<vec4<f32>, NV>;
    for (var j = 0u; j < NV; j++) {
        s[j] = state[sb + j];
    }
    let c4 = p.c >> 2u;
    // Registers for one chunk's loads: r, w, k, kk, kk a, v of E elements.
    var pr: array<vec4<f32>, E>;
    var pw: array<vec4<f32>, E>;
    var pk: array<vec4<f32>, E>;
    var pkk: array<vec4<f32>, E>;
    var pb: array<vec4<f32>, E>;
    var pv: array<vec4<f32>, E>;
    for (var x = 0u; x < E; x++) {
        let e = li + x * WG;
        let tn = e / 16u;
        pr[x] = vec4<f32>(0.0);
        pw[x] = vec4<f32>(1.0);
        pk[x] = vec4<f32>(0.0);
        pkk[x] = vec4<f32>(0.0);
        pb[x] = vec4<f32>(0.0);
        pv[x] = vec4<f32>(0.0);
        if (tn < len) {
            let g = (start + tn) * c4 + h * 16u + e % 16u;
            pr[x] = act[(p.r_off >> 2u) + g];
            pw[x] = act[(p.w_off >> 2u) + g];
            pk[x] = act[(p.k_off >> 2u) + g];
            pkk[x] = act[(p.kk_off >> 2u) + g];
            pb[x] = pkk[x] * act[(p.a_off >> 2u) + g];
            pv[x] = act[(p.v_off >> 2u) + g];
        }
    }
    for (var n0 = 0u; n0 < len; n0 += L) {
        for (var x = 0u; x < E; x++) {
            let e = li + x * WG;
            cr[e] = pr[x];
            cg[e] = pw[x];
            ck[e] = pk[x];
            ca[e] = pkk[x];
            cb[e] = pb[x];
            cv[e] = pv[x];
        }
        workgroupBarrier();
        // The next chunk's loads, in flight while this one is computed.
        for (var x = 0u; x < E; x++) {
            let e = li + x * WG;
            let tn = n0 + L + e / 16u;
            pr[x] = vec4<f32>(0.0);
            pw[x] = vec4<f32>(1.0);
            pk[x] = vec4<f32>(0.0);
            pkk[x] = vec4<f32>(0.0);
            pb[x] = vec4<f32>(0.0);
            pv[x] = vec4<f32>(0.0);
            if (tn < len) {
                let g = (start + tn) * c4 + h * 16u + e % 16u;
                pr[x] = act[(p.r_off >> 2u) + g];
                pw[x] = act[(p.w_off >> 2u) + g];
                pk[x] = act[(p.k_off >> 2u) + g];
                pkk[x] = act[(p.kk_off >> 2u) + g];
                pb[x] = pkk[x] * act[(p.a_off >> 2u) + g];
                pv[x] = act[(p.v_off >> 2u) + g];
            }
        }
        // Γ_{t-1} and Γ_t of each element, then the scaled vectors in place.
        var gp: array<vec4<f32>, E>;
        var gt: array<vec4<f32>, E>;
        for (var x = 0u; x < E; x++) {
            let e = li + x * WG;
            let tn = e / 16u;
            let col = e % 16u;
            var g = vec4<f32>(1.0);
            for (var u = 0u; u < L; u++) {
                if (u < tn) {
                    g *= cg[u * 16u + col];
                }
            }
            gp[x] = g;
            gt[x] = g * cg[e];
        }
        workgroupBarrier();
        for (var x = 0u; x < E; x++) {
            let e = li + x * WG;
            let inv = 1.0 / gt[x];
            cg[e] = gt[x];
            ca[e] = -gp[x] * ca[e];
            cr[e] = gt[x] * cr[e];
            cb[e] = cb[e] * inv;
            ck[e] = ck[e] * inv;
        }
        workgroupBarrier();
        // Mab, Mak (u < t) and Qbr, Qkr (u ≤ t): one (t, u) pair a thread at a time.
        for (var e = li; e < 256u; e += WG) {
            let t = e / 16u;
            let u = e % 16u;
            var s1 = 0.0;
            var s2 = 0.0;
            var s3 = 0.0;
            var s4 = 0.0;
            for (var j = 0u; j < 16u; j++) {
                let at = ca[t * 16u + j];
                let rt = cr[t * 16u + j];
                let bu = cb[u * 16u + j];
                let ku = ck[u * 16u + j];
                s1 += dot(at, bu);
                s2 += dot(at, ku);
                s3 += dot(rt, bu);
                s4 += dot(rt, ku);
            }
            let m = t * 4u + u / 4u;
            mab[m][u % 4u] = select(0.0, s1, u < t);
            mak[m][u % 4u] = select(0.0, s2, u < t);
            qbr[m][u % 4u] = select(0.0, s3, u <= t);
            qkr[m][u % 4u] = select(0.0, s4, u <= t);
        }
        workgroupBarrier();
        // X = (I - Mab)^{-1} by forward substitution, one column u a thread: x_t = δ_tu
        // for t ≤ u, x_t = Σ_{m<t} Mab[t][m] x_m after (Mab is 0 on and above the diagonal).
        if (li < 16u) {
            var xc: array<vec4<f32>, 4>;
            for (var m = 0u; m < 4u; m++) {
                xc[m] = vec4<f32>(0.0);
            }
            xc[li / 4u][li % 4u] = 1.0;
            for (var t = 1u; t < L; t++) {
                let v = dot(mab[t * 4u], xc[0]) + dot(mab[t * 4u + 1u], xc[1])
                    + dot(mab[t * 4u + 2u], xc[2]) + dot(mab[t * 4u + 3u], xc[3]);
                xc[t / 4u][t % 4u] = select(xc[t / 4u][t % 4u], v, t > li);
            }
            for (var t = 0u; t < L; t++) {
                xin[t * 4u + li / 4u][li % 4u] = xc[t / 4u][t % 4u];
            }
        }
        // This row's v over the chunk, and c = S_0 Ã^T + V Mak^T.
        var vv: array<vec4<f32>, 4>;
        for (var u = 0u; u < L; u++) {
            let vi = u * 64u + i;
            vv[u / 4u][u % 4u] = cv[vi >> 2u][vi & 3u];
        }
        var cc: array<vec4<f32>, 4>;
        for (var t = 0u; t < L; t++) {
            var pc = 0.0;
            for (var j = 0u; j < NV; j++) {
                pc += dot(s[j], ca[t * 16u + q * NV + j]);
            }
            cc[t / 4u][t % 4u] = tpr_sum(pc) + dot(mak[t * 4u], vv[0])
                + dot(mak[t * 4u + 1u], vv[1]) + dot(mak[t * 4u + 2u], vv[2])
                + dot(mak[t * 4u + 3u], vv[3]);
        }
        workgroupBarrier();
        // z = X c, then y = S_0 R̃^T + Qbr z + Qkr v.
        var zz: array<vec4<f32>, 4>;
        for (var t = 0u; t < L; t++) {
            zz[t / 4u][t % 4u] = dot(xin[t * 4u], cc[0]) + dot(xin[t * 4u + 1u], cc[1])
                + dot(xin[t * 4u + 2u], cc[2]) + dot(xin[t * 4u + 3u], cc[3]);
        }
        for (var t = 0u; t < L; t++) {
            var py = 0.0;
            for (var j = 0u; j < NV; j++) {
                py += dot(s[j], cr[t * 16u + q * NV + j]);
            }
            let y = tpr_sum(py) + dot(qbr[t * 4u], zz[0]) + dot(qbr[t * 4u + 1u], zz[1])
                + dot(qbr[t * 4u + 2u], zz[2]) + dot(qbr[t * 4u + 3u], zz[3])
                + dot(qkr[t * 4u], vv[0]) + dot(qkr[t * 4u + 1u], vv[1])
                + dot(qkr[t * 4u + 2u], vv[2]) + dot(qkr[t * 4u + 3u], vv[3]);
            if (q == t % TPR && n0 + t < len) {
                let yi = p.y_off + (start + n0 + t) * p.c + h * 64u + i;
                act[yi >> 2u][yi & 3u] = y;
            }
        }
        // S_L = Γ_L ⊙ (S_0 + Σ_u z_u B̄_u^T + v_u K̄_u^T).
        for (var j = 0u; j < NV; j++) {
            let col = q * NV + j;
            var acc = s[j];
            for (var u = 0u; u < L; u++) {
                acc += zz[u / 4u][u % 4u] * cb[u * 16u + col] + vv[u / 4u][u % 4u] * ck[u * 16u + col];
            }
            s[j] = acc * cg[(L - 1u) * 16u + col];
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < NV; j++) {
        state[sb + j] = s[j];
    }
}
