// Q4_K for one-token `matvec` / `matvec_group` passes with 8-bit activations. The
// workgroup first quantizes its x into workgroup memory (`mv_prologue`): per run of 32
// values (one Q4_K sub-block) the scale d = max|x| / 127, the values q = round(x / d) as
// packed int8 (`pack4x8snorm(x / max|x|)`) and d · Σ q. A step (`q4k_pair`, as in q4_k.wgsl:
// two words of nibbles, values 4i .. 4i + 8 of sub-blocks 2p and 2p + 1) is then four
// 4 × int8 dot products (`dot4I8Packed`: SPIR-V SDot where the device has it):
//   Σ_sub w · x  ≈  d_w·sc · d · Σ (nibble · q)  −  dmin·m · d · Σ q,
// the second term added once a sub-block (by the step with i = 0). The format and the
// dot products follow llama.cpp's (ggml-cuda `quantize_q8_1`, `vec_dot_q4_K_q8_1`), but
// with d · Σ q where llama.cpp keeps the exact Σ x: the product is then exactly W times
// the rounded x, whose error Σ w · (d q − x) is about half of what the exact Σ x leaves,
// Σ d_w·sc·nibble · (d q − x), where weights are centred (the nibble part spans twice
// their range). Q8K (the deepest product's depth, a multiple of 256) sizes the arrays.
const MV_STEP: u32 = 16u;

var<workgroup> xq: array<u32, Q8K / 4u>;        // x as int8, 4 a word
var<workgroup> xds: array<vec2<f32>, Q8K / 32u>; // (d, d · Σ q) per run of 32

fn mv_prologue(x0: u32, k: u32, li: u32) {
    for (var b = li; b < k / 32u; b += 256u) {
        let base = x0 + 8u * b;
        let a0 = act[base];
        let a1 = act[base + 1u];
        let a2 = act[base + 2u];
        let a3 = act[base + 3u];
        let a4 = act[base + 4u];
        let a5 = act[base + 5u];
        let a6 = act[base + 6u];
        let a7 = act[base + 7u];
        let m4 = max(max(max(abs(a0), abs(a1)), max(abs(a2), abs(a3))),
                     max(max(abs(a4), abs(a5)), max(abs(a6), abs(a7))));
        let amax = max(max(m4.x, m4.y), max(m4.z, m4.w));
        let inv = select(0.0, 1.0 / amax, amax > 0.0);
        let q = 8u * b;
        var sq = 0;
        for (var j = 0u; j < 8u; j++) {
            let v = pack4x8snorm(act[base + j] * inv);
            xq[q + j] = v;
            sq += dot4I8Packed(v, 0x01010101u);
        }
        let d = amax / 127.0;
        xds[b] = vec2<f32>(d, d * f32(sq));
    }
    workgroupBarrier();
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let st = q4k_pair(rb, g);
    let sb = 8u * (g >> 4u) + 2u * st.pr; // x run of sub-block 2 pr
    let xa = 8u * sb + st.i;
    let lo = dot4I8Packed(st.q.x & 0x0f0f0f0fu, xq[xa]) + dot4I8Packed(st.q.y & 0x0f0f0f0fu, xq[xa + 1u]);
    let hi = dot4I8Packed((st.q.x >> 4u) & 0x0f0f0f0fu, xq[xa + 8u])
        + dot4I8Packed((st.q.y >> 4u) & 0x0f0f0f0fu, xq[xa + 9u]);
    let x0 = xds[sb];
    let x1 = xds[sb + 1u];
    let mins = select(0.0, st.s0.y * x0.y + st.s1.y * x1.y, st.i == 0u);
    let v = st.dm.x * (st.s0.x * x0.x * f32(lo) + st.s1.x * x1.x * f32(hi)) - st.dm.y * mins;
    return vec4<f32>(v, 0.0, 0.0, 0.0);
}
