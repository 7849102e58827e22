// Decode time mix core in one dispatch (RWKV_x070), for passes whose sequences have few
// tokens: per (head, sequence), for each of the sequence's tokens in order,
//   kk = normalize(k * k_k);  k' = k * (1 + (a - 1) * k_a);  w = exp(-DECAY_SCALE σ(w_raw))
//   v' = layer 0: v (saved as v_first);  else v + (v_first - v) * v_mix
//   S = S diag(w) + (S (-kk)) (kk a)^T + v' k'^T,   y = S r
//   o = (GroupNorm_H(y) (ln_x) + (Σ_j r_j k'_j r_k[j]) v') * g
// i.e. `wkv_prep` → `wkv` → `wkv_out`, without their dispatches between. Threads as in
// `wkv` (TPR per row of S, the row's NV vec4 columns in registers); the GroupNorm over
// the head's HEAD_SIZE rows goes through workgroup memory. HEAD_SIZE (64) and DECAY_SCALE
// (e^-0.5 = 0.606531) come from the engine's constants of the same names.

// Parameters, bindings, sizes and the row helpers: shaders/wkv_fused/params.wgsl.

var<workgroup> ys: array<f32, HEAD_SIZE>;

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
    let col = h * HV + q;         // first vec4 column of this thread's keys (stride TPR)
    let ch = h * HEAD_SIZE + i;   // channel of this thread's row
    for (var n = 0u; n < len; n++) {
        let t = start + n;
        let g = t * (p.c >> 2u) + col;
        var kk: array<vec4<f32>, NV>;
        var kp: array<vec4<f32>, NV>;
        var av: array<vec4<f32>, NV>;
        var wd: array<vec4<f32>, NV>;
        var rr: array<vec4<f32>, NV>;
        var nrm = 0.0;
        for (var j = 0u; j < NV; j++) {
            let k = act[(p.k_off >> 2u) + g + j * TPR];
            let a = act[(p.a_off >> 2u) + g + j * TPR];
            let kr = k * vecs[(p.kkw_off >> 2u) + col + j * TPR];
            kk[j] = kr;
            nrm += dot(kr, kr);
            kp[j] = k * (1.0 + (a - 1.0) * vecs[(p.ka_off >> 2u) + col + j * TPR]);
            av[j] = a;
            let wr = act[(p.w_off >> 2u) + g + j * TPR];
            wd[j] = exp(-DECAY_SCALE / (1.0 + exp(-wr)));
            rr[j] = act[(p.r_off >> 2u) + g + j * TPR];
        }
        let inv = 1.0 / max(sqrt(tpr_sum(nrm)), 1e-12);
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
        var sa = 0.0;
        for (var j = 0u; j < NV; j++) {
            kk[j] *= inv;
            sa -= dot(s[j], kk[j]);
        }
        sa = tpr_sum(sa);
        var y = 0.0;
        var bonus = 0.0;
        for (var j = 0u; j < NV; j++) {
            s[j] = s[j] * wd[j] + sa * (kk[j] * av[j]) + v * kp[j];
            y += dot(s[j], rr[j]);
            bonus += dot(rr[j] * kp[j], vecs[(p.rk_off >> 2u) + col + j * TPR]);
        }
        y = tpr_sum(y);
        bonus = tpr_sum(bonus);
        if (q == 0u) {
            ys[i] = y;
        }
        workgroupBarrier();
        var mean = 0.0;
        for (var e = 0u; e < HEAD_SIZE; e++) {
            mean += ys[e];
        }
        mean /= f32(HEAD_SIZE);
        var var_ = 0.0;
        for (var e = 0u; e < HEAD_SIZE; e++) {
            let dv = ys[e] - mean;
            var_ += dv * dv;
        }
        var_ /= f32(HEAD_SIZE);
        let gn = (y - mean) * inverseSqrt(var_ + p.eps) * vec1(p.lnx_off + ch)
            + vec1(p.lnx_off + p.c + ch);
        if (q == 0u) {
            let o = p.o_off + vi;
            act[o >> 2u][o & 3u] = (gn + bonus * v) * act1(p.g_off + vi);
        }
        workgroupBarrier();
    }
    store_row(sb, s);
}
