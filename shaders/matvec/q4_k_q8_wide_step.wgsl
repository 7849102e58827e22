// The shared body of the 8-token Q4_K kernels with 8-bit x (`shaders/matvec/q4_k_wide.wgsl`
// for one product, `shaders/matvec_group/wide.wgsl` for a group, with this file in place of
// q4_k_wide_step.wgsl): `q4_wide_rows`, up to 8 tokens × two rows a lane group. The
// workgroup takes the depth in chunks of KC values: it first quantizes the chunk of x of
// its tokens into workgroup memory as q4_k_q8_x.wgsl does for one token (per run of 32
// values d = max|x| / 127, q = round(x / d) as packed int8, and d · Σ q), then each lane
// takes whole sub-block pairs of its two rows (64 values: one vec4 load of the block
// header and two of the pair's eight nibble words) and, for every token, sixteen 4 × int8
// dot products a row (`dot4I8Packed`) against the token's 8-bit run. The f32 body
// (q4_k_wide_step.wgsl) converts every nibble to float and takes 8 × 64 multiply-adds a
// pair and row where this one takes 8 × 16 dot products, and loads x as f32 (4 bytes a
// value a token) where this one reads it as bytes from workgroup memory. Needs LANES, KC,
// `w4` (rows on 16-byte boundaries: Q4_K rows are 144-byte blocks), `act`, `kscale_min`
// and `wide_sum` (shaders/matvec/wide_sum_*.wgsl).

const RUNS: u32 = KC / 64u; // sub-block pairs of a chunk

// A chunk of x of up to 8 tokens, per token and sub-block pair (64 values) five vec4s:
// the 64 values as int8 (four a word: the low sub-block's 32, then the high one's) and
// (d0, d0 · Σ q0, d1, d1 · Σ q1) as f32 bits. 80 bytes a pair, so the eight lanes of a
// quarter-subgroup reading consecutive pairs hit different banks.
var<workgroup> xq8: array<vec4<u32>, 8u * RUNS * 5u>;

// Quantizes values [c0, c0 + KC) of x of the nt tokens from vec4 x0 (stride xstr vec4s)
// into `xq8`; every invocation calls it.
fn quantize_chunk(x0: u32, xstr: u32, c0: u32, nt: u32, li: u32) {
    workgroupBarrier(); // the previous chunk's reads are done
    for (var task = li; task < nt * RUNS; task += 256u) {
        let j = task / RUNS;
        let run = task % RUNS;
        let base = x0 + j * xstr + ((c0 + 64u * run) >> 2u);
        let at = (j * RUNS + run) * 5u;
        var sc = vec4<f32>(0.0);
        for (var h = 0u; h < 2u; h++) {
            let b = base + 8u * h;
            var m4 = vec4<f32>(0.0);
            for (var i = 0u; i < 8u; i++) {
                m4 = max(m4, abs(act[b + i]));
            }
            let amax = max(max(m4.x, m4.y), max(m4.z, m4.w));
            let inv = select(0.0, 1.0 / amax, amax > 0.0);
            var sq = 0;
            for (var i = 0u; i < 8u; i += 4u) {
                let q = vec4<u32>(pack4x8snorm(act[b + i] * inv), pack4x8snorm(act[b + i + 1u] * inv),
                                  pack4x8snorm(act[b + i + 2u] * inv), pack4x8snorm(act[b + i + 3u] * inv));
                sq += dot4I8Packed(q.x, 0x01010101u) + dot4I8Packed(q.y, 0x01010101u)
                    + dot4I8Packed(q.z, 0x01010101u) + dot4I8Packed(q.w, 0x01010101u);
                xq8[at + 2u * h + (i >> 2u)] = q;
            }
            let dd = amax / 127.0;
            sc[2u * h] = dd;
            sc[2u * h + 1u] = dd * f32(sq);
        }
        xq8[at + 4u] = bitcast<vec4<u32>>(sc);
    }
    workgroupBarrier();
}

// One row's sub-block pair G (block G / 4, pair G % 4) at byte rb: the low and high
// nibbles of its eight words as int8 lanes, and d · (sc0, sc1), dmin · (m0, m1).
struct Q8Pair {
    lo0: vec4<u32>,
    lo1: vec4<u32>,
    hi0: vec4<u32>,
    hi1: vec4<u32>,
    ds: vec2<f32>,
    dm: vec2<f32>,
}

fn q8_pair_of(rb: u32, gp: u32) -> Q8Pair {
    let bv = (rb + (gp >> 2u) * 144u) >> 4u; // the block's first vec4 (its header)
    let pr = gp & 3u;
    let hd = w4[bv];
    let q0 = w4[bv + 1u + 2u * pr];
    let q1 = w4[bv + 2u + 2u * pr];
    let dm = unpack2x16float(hd.x);
    let s0 = kscale_min(hd.y, hd.z, hd.w, 2u * pr);
    let s1 = kscale_min(hd.y, hd.z, hd.w, 2u * pr + 1u);
    let m = vec4<u32>(0x0f0f0f0fu);
    return Q8Pair(q0 & m, q1 & m, (q0 >> vec4<u32>(4u)) & m, (q1 >> vec4<u32>(4u)) & m,
                  dm.x * vec2<f32>(s0.x, s1.x), dm.y * vec2<f32>(s0.y, s1.y));
}

// Σ over the pair's 64 values of W·x for the token whose 8-bit run is at xq8[at].
fn q8_pair_dot(q: Q8Pair, x0: vec4<u32>, x1: vec4<u32>, x2: vec4<u32>, x3: vec4<u32>,
               sc: vec4<f32>) -> f32 {
    let lo = dot4I8Packed(q.lo0.x, x0.x) + dot4I8Packed(q.lo0.y, x0.y)
        + dot4I8Packed(q.lo0.z, x0.z) + dot4I8Packed(q.lo0.w, x0.w)
        + dot4I8Packed(q.lo1.x, x1.x) + dot4I8Packed(q.lo1.y, x1.y)
        + dot4I8Packed(q.lo1.z, x1.z) + dot4I8Packed(q.lo1.w, x1.w);
    let hi = dot4I8Packed(q.hi0.x, x2.x) + dot4I8Packed(q.hi0.y, x2.y)
        + dot4I8Packed(q.hi0.z, x2.z) + dot4I8Packed(q.hi0.w, x2.w)
        + dot4I8Packed(q.hi1.x, x3.x) + dot4I8Packed(q.hi1.y, x3.y)
        + dot4I8Packed(q.hi1.z, x3.z) + dot4I8Packed(q.hi1.w, x3.w);
    return q.ds.x * sc.x * f32(lo) + q.ds.y * sc.z * f32(hi) - (q.dm.x * sc.y + q.dm.y * sc.w);
}

// Σ_k W[r, k] x[t, k] for rows at byte offsets rb0 and rb1 (depth k, a multiple of KC) and
// the nt ≤ 8 tokens of x from vec4 x0 (stride xstr vec4s), summed over the LANES lanes of
// each row: [row 0 tokens 0–3, row 0 tokens 4–7, row 1 tokens 0–3, row 1 tokens 4–7].
// Every lane of the workgroup calls it (barriers).
fn q4_wide_rows(rb0: u32, rb1: u32, k: u32, x0: u32, xstr: u32, nt: u32, lane: u32,
                li: u32) -> array<vec4<f32>, 4> {
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var b0 = vec4<f32>(0.0);
    var b1 = vec4<f32>(0.0);
    for (var c0 = 0u; c0 < k; c0 += KC) {
        quantize_chunk(x0, xstr, c0, nt, li);
        for (var s = lane; s < RUNS; s += LANES) {
            let gp = (c0 >> 6u) + s;
            let u = q8_pair_of(rb0, gp);
            let v = q8_pair_of(rb1, gp);
            for (var j = 0u; j < 8u; j++) {
                if (j < nt) {
                    let at = (j * RUNS + s) * 5u;
                    let x0v = xq8[at];
                    let x1v = xq8[at + 1u];
                    let x2v = xq8[at + 2u];
                    let x3v = xq8[at + 3u];
                    let sc = bitcast<vec4<f32>>(xq8[at + 4u]);
                    let yu = q8_pair_dot(u, x0v, x1v, x2v, x3v, sc);
                    let yv = q8_pair_dot(v, x0v, x1v, x2v, x3v, sc);
                    if (j < 4u) {
                        a0[j] += yu;
                        b0[j] += yv;
                    } else {
                        a1[j - 4u] += yu;
                        b1[j - 4u] += yv;
                    }
                }
            }
        }
    }
    return wide_sum(array<vec4<f32>, 4>(a0, a1, b0, b1), li);
}
