// The fused decode time mix of `shaders/wkv_fused.wgsl` (same math, same Params and
// bindings), with each token's per-channel work done once a workgroup instead of once a
// row: HV threads compute the head's kk, kk·a, k', decay, r and the partial sums of |kk|²
// and the bonus Σ r k' r_k for one vec4 column each into workgroup memory (the decay's
// three exponentials were computed by all 64 rows' threads: 64× the special-function
// work), and the GroupNorm's mean and variance come from HV partial sums of the rows'
// y (each thread read all 64 y twice). Four workgroup barriers a token instead of two.
// Thread q of a row holds the row's vec4 columns q, q + TPR, … (as the unstaged kernel).

// Parameters, bindings, sizes and the row helpers: shaders/wkv_fused/params.wgsl.

const RPC: u32 = HEAD_SIZE / HV; // rows of y each column thread sums (4)

var<workgroup> ckk: array<vec4<f32>, HV>;  // k · k_k (not yet normalized)
var<workgroup> cka: array<vec4<f32>, HV>;  // k · k_k · a
var<workgroup> ckp: array<vec4<f32>, HV>;  // k' = k (1 + (a - 1) k_a)
var<workgroup> cwd: array<vec4<f32>, HV>;  // decay exp(-DECAY_SCALE σ(w))
var<workgroup> cr: array<vec4<f32>, HV>;   // r
var<workgroup> part: array<vec2<f32>, HV>; // per column: (|k · k_k|², Σ r k' r_k)
var<workgroup> ys: array<f32, HEAD_SIZE>;
var<workgroup> ysum: array<vec2<f32>, HV>; // per RPC rows: (Σ e, Σ e²), e = y - y[0]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let h = wid.x;
    let b = wid.y;
    if (b >= d.n_seqs) {
        return; // uniform per workgroup
    }
    let m = seq_meta(b);
    let start = m.x;
    let len = m.y;
    let i = li / TPR;
    let q = li % TPR;
    let sb = row_base(m.z, h, i, q);
    var s = load_row(sb);
    let ch = h * HEAD_SIZE + i;   // channel of this thread's row
    let c4 = h * HV + li;         // the column of a column thread (li < HV)
    for (var n = 0u; n < len; n++) {
        let t = start + n;
        if (li < HV) {
            let g = t * (p.c >> 2u) + c4;
            let k = act[(p.k_off >> 2u) + g];
            let a = act[(p.a_off >> 2u) + g];
            let wr = act[(p.w_off >> 2u) + g];
            let r = act[(p.r_off >> 2u) + g];
            let kr = k * vecs[(p.kkw_off >> 2u) + c4];
            let kp = k * (1.0 + (a - 1.0) * vecs[(p.ka_off >> 2u) + c4]);
            ckk[li] = kr;
            cka[li] = kr * a;
            ckp[li] = kp;
            cwd[li] = exp(-DECAY_SCALE / (1.0 + exp(-wr)));
            cr[li] = r;
            part[li] = vec2<f32>(dot(kr, kr), dot(r * kp, vecs[(p.rk_off >> 2u) + c4]));
        }
        let vi = t * p.c + ch;
        var v = act1(p.v_off + vi);
        if (p.layer0 == 1u) {
            if (q == 0u) {
                let o = p.vfirst_off + vi;
                act[o >> 2u][o & 3u] = v;
            }
        } else {
            v += (act1(p.vfirst_off + vi) - v) * act1(p.vmix_off + vi);
        }
        workgroupBarrier();
        var nb = vec2<f32>(0.0);
        for (var e = 0u; e < HV; e++) {
            nb += part[e];
        }
        let inv = 1.0 / max(sqrt(nb.x), 1e-12);
        var sa = 0.0;
        for (var j = 0u; j < NV; j++) {
            sa -= dot(s[j], ckk[q + j * TPR]);
        }
        sa = tpr_sum(sa) * inv;
        var y = 0.0;
        for (var j = 0u; j < NV; j++) {
            let cj = q + j * TPR;
            s[j] = s[j] * cwd[cj] + (sa * inv) * cka[cj] + v * ckp[cj];
            y += dot(s[j], cr[cj]);
        }
        y = tpr_sum(y);
        if (q == 0u) {
            ys[i] = y;
        }
        workgroupBarrier();
        if (li < HV) {
            var e = vec2<f32>(0.0);
            for (var u = 0u; u < RPC; u++) {
                let dv = ys[li * RPC + u] - ys[0];
                e += vec2<f32>(dv, dv * dv);
            }
            ysum[li] = e;
        }
        workgroupBarrier();
        var st = vec2<f32>(0.0);
        for (var e = 0u; e < HV; e++) {
            st += ysum[e];
        }
        st /= f32(HEAD_SIZE);
        let mean = ys[0] + st.x;
        let var_ = max(st.y - st.x * st.x, 0.0);
        let gn = (y - mean) * inverseSqrt(var_ + p.eps) * vec1(p.lnx_off + ch)
            + vec1(p.lnx_off + p.c + ch);
        if (q == 0u) {
            let o = p.o_off + vi;
            act[o >> 2u][o & 3u] = (gn + nb.y * v) * act1(p.g_off + vi);
        }
        workgroupBarrier();
    }
    store_row(sb, s);
}
