// Q4_K for `matvec`: a step is one pair of 32-value sub-blocks (2p, 2p + 1) of a
// 256-value block: the pair's 32 bytes of nibbles in two 16-byte loads (low nibbles:
// sub-block 2p, high: 2p + 1), with d, dmin and the 12 scale bytes. Blocks are 144
// bytes, so rows and nibbles are 16-byte aligned. y = d·sc·q − dmin·m per sub-block,
// so a step needs Σ q·x and Σ x of each sub-block.
const MV_STEP: u32 = 64u;

// (Σ q_lo·x_lo, Σ x_lo, Σ q_hi·x_hi, Σ x_hi) of one word of nibbles.
fn q4k_term(q: u32, xl: vec4<f32>, xh: vec4<f32>) -> vec4<f32> {
    let one = vec4<f32>(1.0);
    return vec4<f32>(dot(nib4(q), xl), dot(xl, one), dot(nib4(q >> 4u), xh), dot(xh, one));
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let bb = rb + (g >> 2u) * 144u;
    let pr = g & 3u;
    let bw = bb >> 2u;
    let dm = unpack2x16float(w[bw]);
    let sc = vec3<u32>(w[bw + 1u], w[bw + 2u], w[bw + 3u]);
    let s0 = kscale_min(sc.x, sc.y, sc.z, 2u * pr);
    let s1 = kscale_min(sc.x, sc.y, sc.z, 2u * pr + 1u);
    let qi = (bb + 16u + 32u * pr) >> 4u;
    let qa = w4[qi];
    let qb = w4[qi + 1u];
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 16u * g;
            let s = q4k_term(qa.x, act[x], act[x + 8u]) + q4k_term(qa.y, act[x + 1u], act[x + 9u])
                + q4k_term(qa.z, act[x + 2u], act[x + 10u]) + q4k_term(qa.w, act[x + 3u], act[x + 11u])
                + q4k_term(qb.x, act[x + 4u], act[x + 12u]) + q4k_term(qb.y, act[x + 5u], act[x + 13u])
                + q4k_term(qb.z, act[x + 6u], act[x + 14u]) + q4k_term(qb.w, act[x + 7u], act[x + 15u]);
            out[j] = dm.x * (s0.x * s.x + s1.x * s.z) - dm.y * (s0.y * s.y + s1.y * s.w);
        }
    }
    return out;
}
