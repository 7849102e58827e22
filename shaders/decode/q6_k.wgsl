// Q6_K (ggml block_q6_K, 210 bytes, 256 values): ql[128] low nibbles, qh[64] high 2-bit
// pairs, i8 scales[16], f16 d (last). On the GPU the blocks lie Q6_BLOCK = 212 bytes
// apart (2 zero bytes after each: ops/gpu_layout.rs), so every word of a block
// is an aligned u32, read as one load. Chunk c = 32 values: half n = c/4 (128 values
// each), quarter g = c%4. Value l of the chunk: low nibble of ql[64n + l + 32(g&1)]
// (high nibble when g ≥ 2), high bits (qh[32n + l] >> 2g) & 3, scale sc[8n + l/16 + 2g];
// y = d * sc * (q - 32).
const Q6_BLOCK: u32 = 212u;

fn decode32(rb: u32, c: u32) {
    let bb = rb + (c >> 3u) * Q6_BLOCK;
    let s = c & 7u;
    let n = s >> 2u;
    let g = s & 3u;
    let d = rd_f16(bb + 208u);
    let qlb = bb + 64u * n + 32u * (g & 1u);
    let nib = (g >> 1u) * 4u;
    let qhb = bb + 128u + 32u * n;
    let sc0 = d * sext8(rd_u8(bb + 192u + 8u * n + 2u * g));
    let sc1 = d * sext8(rd_u8(bb + 192u + 8u * n + 2u * g + 1u));
    for (var i = 0u; i < 8u; i++) {
        let ql = w[(qlb >> 2u) + i] >> nib;
        let qh = w[(qhb >> 2u) + i] >> (2u * g);
        let sc = select(sc1, sc0, i < 4u);
        for (var j = 0u; j < 4u; j++) {
            let q = ((ql >> (8u * j)) & 0xfu) | (((qh >> (8u * j)) & 3u) << 4u);
            dq[4u * i + j] = sc * (f32(q) - 32.0);
        }
    }
}

fn q6x4(ql: u32, qh: u32) -> vec4<f32> {
    return u2f4(bytes4((ql & 0x0f0f0f0fu) | ((qh & 0x03030303u) << 4u), 0xffu), 32.0);
}

fn dec8(rb: u32, k: u32) -> W8 {
    let bb = rb + (k >> 8u) * Q6_BLOCK;
    let s = (k >> 5u) & 7u;
    let n = s >> 2u;
    let g = s & 3u;
    let within = k & 31u;
    let d = rd_f16(bb + 208u);
    let sc = d * sext8(rd_u8(bb + 192u + 8u * n + 2u * g + (within >> 4u)));
    let qlb = bb + 64u * n + 32u * (g & 1u) + within;
    let nib = (g >> 1u) * 4u;
    let qhb = bb + 128u + 32u * n + within;
    let hs = 2u * g;
    return W8(
        sc * q6x4(w[qlb >> 2u] >> nib, w[qhb >> 2u] >> hs),
        sc * q6x4(w[(qlb >> 2u) + 1u] >> nib, w[(qhb >> 2u) + 1u] >> hs),
    );
}

// For `matvec`'s 16-value steps (matvec/q6_k*.wgsl): d times the scales of step g's four
// runs, bytes 8n + l / 16 + 0, 2, 4, 6 of the block's scales (byte 192), from the two
// aligned words that hold them; d is at byte 208.
fn q6_step_scales(rb: u32, g: u32) -> vec4<f32> {
    let bw = (rb + (g >> 4u) * Q6_BLOCK) >> 2u;
    let n = (g >> 3u) & 1u;
    let o = 8u * ((g >> 2u) & 1u);
    let d = unpack2x16float(w[bw + 52u]).x;
    let s0 = w[bw + 48u + 2u * n] >> o;
    let s1 = w[bw + 49u + 2u * n] >> o;
    return d * vec4<f32>(sext8(s0), sext8(s0 >> 16u), sext8(s1), sext8(s1 >> 16u));
}
