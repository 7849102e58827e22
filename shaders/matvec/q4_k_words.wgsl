// Q4_K for `matvec`, word loads: a step is one pair of 32-value sub-blocks (2p, 2p + 1)
// of a 256-value block, its 32 bytes of nibbles read as eight words of `w` (low nibbles:
// sub-block 2p, high: 2p + 1), d/dmin and the 12 scale bytes as four more; the pair's
// scales and mins unpacked without branches (ggml get_scale_min_k4: sub-blocks 0–3 keep
// 6 bits of bytes j, j + 4; 4–7 take 4 bits of byte j + 4 and the top 2 bits of bytes
// j − 4, j). y = d·sc·q − dmin·m per sub-block, so a step needs Σ q·x and Σ x of each.
const MV_STEP: u32 = 64u;

// (scale, min) of sub-blocks 2p and 2p + 1 as (sc0, m0, sc1, m1).
fn q4k_pair_scales(w0: u32, w1: u32, w2: u32, pr: u32) -> vec4<f32> {
    let hi = pr >= 2u;
    let i0 = (2u * pr) & 3u;
    var out = vec4<u32>(0u);
    for (var e = 0u; e < 2u; e++) {
        let sh = 8u * (i0 + e);
        let b0 = (w0 >> sh) & 0xffu;
        let b1 = (w1 >> sh) & 0xffu;
        let b2 = (w2 >> sh) & 0xffu;
        let sc = select(b0 & 63u, (b2 & 0xfu) | ((b0 >> 6u) << 4u), hi);
        let m = select(b1 & 63u, (b2 >> 4u) | ((b1 >> 6u) << 4u), hi);
        out[2u * e] = sc;
        out[2u * e + 1u] = m;
    }
    return vec4<f32>(out);
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let bw = (rb + (g >> 2u) * 144u) >> 2u;
    let pr = g & 3u;
    let dm = unpack2x16float(w[bw]);
    let s = q4k_pair_scales(w[bw + 1u], w[bw + 2u], w[bw + 3u], pr);
    let qw = bw + 4u + 8u * pr;
    var q: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) {
        q[i] = w[qw + i];
    }
    let one = vec4<f32>(1.0);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 16u * g;
            var acc = vec4<f32>(0.0); // Σ q_lo·x_lo, Σ x_lo, Σ q_hi·x_hi, Σ x_hi
            for (var i = 0u; i < 8u; i++) {
                let xl = act[x + i];
                let xh = act[x + 8u + i];
                acc += vec4<f32>(dot(nib4(q[i]), xl), dot(xl, one), dot(nib4(q[i] >> 4u), xh), dot(xh, one));
            }
            out[j] = dm.x * (s.x * acc.x + s.z * acc.z) - dm.y * (s.y * acc.y + s.w * acc.w);
        }
    }
    return out;
}
