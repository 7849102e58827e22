// Q6_K for `matvec`: a step is 64 values of a 256-value block (210 bytes: ql[128],
// qh[64], i8 scales[16], f16 d): half n = s / 2 and l in l0 .. l0 + 16 (l0 = 16·(s % 2))
// of the four runs y[128n + 32q + l], q = 0..3 (ggml dequantize_row_q6_K), each run with
// one scale. Blocks are only 2-byte aligned, so words are read with `rd_u32`.
const MV_STEP: u32 = 64u;

fn u8x4(q: u32) -> vec4<f32> {
    return u2f4(bytes4(q, 0xffu), 0.0);
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let bb = rb + (g >> 2u) * 210u;
    let s = g & 3u;
    let n = s >> 1u;
    let l0 = (s & 1u) * 16u;
    let d = rd_f16(bb + 208u);
    let scb = bb + 192u + 8u * n + (s & 1u);
    let sc = d * vec4<f32>(
        sext8(rd_u8(scb)),
        sext8(rd_u8(scb + 2u)),
        sext8(rd_u8(scb + 4u)),
        sext8(rd_u8(scb + 6u)),
    );
    let ql = bb + 64u * n + l0;
    let qh = bb + 128u + 32u * n + l0;
    let a = vec4<u32>(rd_u32(ql), rd_u32(ql + 4u), rd_u32(ql + 8u), rd_u32(ql + 12u));
    let b = vec4<u32>(rd_u32(ql + 32u), rd_u32(ql + 36u), rd_u32(ql + 40u), rd_u32(ql + 44u));
    let h = vec4<u32>(rd_u32(qh), rd_u32(qh + 4u), rd_u32(qh + 8u), rd_u32(qh + 12u));
    let lo = 0x0f0f0f0fu;
    let two = 0x03030303u;
    let one = vec4<f32>(1.0);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 64u * (g >> 2u) + 32u * n + (l0 >> 2u);
            // Σ q·x and Σ x of each run
            var sq = vec4<f32>(0.0);
            var sx = vec4<f32>(0.0);
            for (var i = 0u; i < 4u; i++) {
                let x0 = act[x + i];
                let x1 = act[x + 8u + i];
                let x2 = act[x + 16u + i];
                let x3 = act[x + 24u + i];
                let q0 = (a[i] & lo) | ((h[i] & two) << 4u);
                let q1 = (b[i] & lo) | (((h[i] >> 2u) & two) << 4u);
                let q2 = ((a[i] >> 4u) & lo) | (((h[i] >> 4u) & two) << 4u);
                let q3 = ((b[i] >> 4u) & lo) | (((h[i] >> 6u) & two) << 4u);
                sq += vec4<f32>(dot(u8x4(q0), x0), dot(u8x4(q1), x1), dot(u8x4(q2), x2), dot(u8x4(q3), x3));
                sx += vec4<f32>(dot(x0, one), dot(x1, one), dot(x2, one), dot(x3, one));
            }
            out[j] = dot(sc, sq - 32.0 * sx);
        }
    }
    return out;
}
