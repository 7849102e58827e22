// Q6_K for `matvec`: a step is 16 values of a 256-value block (ggml dequantize_row_q6_K:
// ql[128], qh[64], i8 scales[16], f16 d — 210 bytes, laid 212 apart on the GPU so that
// every word of a block is an aligned u32: ops/gpu_layout.rs): step g is block
// g / 16, half n = (g % 16) / 8 and l = 4 (g % 8) .. + 4 of the four runs y[128n + 32q + l],
// q = 0..3, each run with its scale — one word of ql for runs 0 and 2 (low and high
// nibbles), one for runs 1 and 3, one of qh (two bits a run). So the lanes of a row read
// consecutive words of ql and qh and consecutive vec4s of x.
const MV_STEP: u32 = 16u;

fn u8x4(q: u32) -> vec4<f32> {
    return u2f4(bytes4(q, 0xffu), 0.0);
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let u = g & 15u;
    let n = u >> 3u;
    let l4 = u & 7u;
    let sc = q6_step_scales(rb, g);
    let bw = (rb + (g >> 4u) * Q6_BLOCK) >> 2u; // the block's first word
    let a = w[bw + 16u * n + l4]; // ql byte 64n + 4 l4
    let b = w[bw + 16u * n + 8u + l4]; // ql byte 64n + 32 + 4 l4
    let h = w[bw + 32u + 8u * n + l4]; // qh byte 32n + 4 l4
    let lo = 0x0f0f0f0fu;
    let two = 0x03030303u;
    let q0 = (a & lo) | ((h & two) << 4u);
    let q1 = (b & lo) | (((h >> 2u) & two) << 4u);
    let q2 = ((a >> 4u) & lo) | (((h >> 4u) & two) << 4u);
    let q3 = ((b >> 4u) & lo) | (((h >> 6u) & two) << 4u);
    let one = vec4<f32>(1.0);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 64u * (g >> 4u) + 32u * n + l4;
            let x0 = act[x];
            let x1 = act[x + 8u];
            let x2 = act[x + 16u];
            let x3 = act[x + 24u];
            // Σ q·x and Σ x of each run
            let sq = vec4<f32>(dot(u8x4(q0), x0), dot(u8x4(q1), x1), dot(u8x4(q2), x2), dot(u8x4(q3), x3));
            let sx = vec4<f32>(dot(x0, one), dot(x1, one), dot(x2, one), dot(x3, one));
            out[j] = dot(sc, sq - 32.0 * sx);
        }
    }
    return out;
}

