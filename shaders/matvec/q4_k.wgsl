// Q4_K for `matvec`: a step is two words of nibbles of a 256-value block (144 bytes: f16
// d, dmin, 12 scale bytes, 128 bytes of nibbles), read by `q4k_pair`
// (shaders/decode/q4_k.wgsl): step g is block g / 16, sub-block pair pr = (g % 16) / 4,
// words i, i + 1 (i = 2 (g % 4)) of the pair's eight — low nibbles are values 4i .. 4i + 8
// of sub-block 2 pr, high nibbles the same of sub-block 2 pr + 1. So the lanes of a row
// read consecutive 8-byte runs of nibbles and consecutive vec4s of x.
// y = d·sc·q − dmin·m per sub-block, so a step needs Σ q·x and Σ x of each sub-block.
const MV_STEP: u32 = 16u;

// (Σ q_lo·x_lo, Σ x_lo, Σ q_hi·x_hi, Σ x_hi) of one word of nibbles.
fn q4k_term(q: u32, xl: vec4<f32>, xh: vec4<f32>) -> vec4<f32> {
    let one = vec4<f32>(1.0);
    return vec4<f32>(dot(nib4(q), xl), dot(xl, one), dot(nib4(q >> 4u), xh), dot(xh, one));
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let st = q4k_pair(rb, g);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 64u * (g >> 4u) + 16u * st.pr + st.i;
            let s = q4k_term(st.q.x, act[x], act[x + 8u]) + q4k_term(st.q.y, act[x + 1u], act[x + 9u]);
            out[j] = st.dm.x * (st.s0.x * s.x + st.s1.x * s.z) - st.dm.y * (st.s0.y * s.y + st.s1.y * s.w);
        }
    }
    return out;
}
