// Q4_K (ggml block_q4_K, 144 bytes, 256 values): f16 d, f16 dmin, 12 bytes of packed
// 6-bit scales/mins (8 sub-blocks of 32), 128 bytes of nibbles.
// Sub-block s: y = d*sc[s] * q - dmin*m[s]; nibbles of byte qs[32*(s/2) + l], low for even s.

fn decode32(rb: u32, c: u32) {
    let bb = rb + (c >> 3u) * 144u;
    let s = c & 7u;
    let dm = unpack2x16float(w[bb >> 2u]);
    let sm = scale_min_k4(bb, s);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let qb = ((bb + 16u) >> 2u) + (s >> 1u) * 8u;
    let sh = (s & 1u) * 4u;
    for (var i = 0u; i < 8u; i++) {
        let q = w[qb + i] >> sh;
        dq[4u * i] = d * f32(q & 0xfu) - m;
        dq[4u * i + 1u] = d * f32((q >> 8u) & 0xfu) - m;
        dq[4u * i + 2u] = d * f32((q >> 16u) & 0xfu) - m;
        dq[4u * i + 3u] = d * f32((q >> 24u) & 0xfu) - m;
    }
}

fn dec8(rb: u32, k: u32) -> W8 {
    let bb = rb + (k >> 8u) * 144u;
    let s = (k >> 5u) & 7u;
    let dm = unpack2x16float(w[bb >> 2u]);
    let sm = scale_min_k4(bb, s);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let qw = ((bb + 16u) >> 2u) + (s >> 1u) * 8u + ((k & 31u) >> 2u);
    let sh = (s & 1u) * 4u;
    return W8(d * nib4(w[qw] >> sh) - m, d * nib4(w[qw + 1u] >> sh) - m);
}

// Prefetch pair for `matmul_coop` (loads of the next step in flight during the products):
// `raw8` reads the block header (d/dmin and the 12 scale bytes) and the two words of
// nibbles of values k .. k + 8; `cvt8` decodes them without further loads.
struct R8 {
    h: vec4<u32>,
    q: vec2<u32>,
}

fn raw8(rb: u32, k: u32) -> R8 {
    let bw = (rb + (k >> 8u) * 144u) >> 2u;
    let s = (k >> 5u) & 7u;
    let qw = bw + 4u + (s >> 1u) * 8u + ((k & 31u) >> 2u);
    return R8(vec4<u32>(w[bw], w[bw + 1u], w[bw + 2u], w[bw + 3u]), vec2<u32>(w[qw], w[qw + 1u]));
}

fn cvt8(r: R8, k: u32) -> W8 {
    let s = (k >> 5u) & 7u;
    let dm = unpack2x16float(r.h.x);
    let sm = kscale_min(r.h.y, r.h.z, r.h.w, s);
    let d = dm.x * sm.x;
    let m = dm.y * sm.y;
    let nsh = (s & 1u) * 4u;
    return W8(d * nib4(r.q.x >> nsh) - m, d * nib4(r.q.y >> nsh) - m);
}

