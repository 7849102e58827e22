// Any encoding with a `dec8` (F32, BF16, Q8_0, Q5_K) for `matvec`: a step is 32
// weights, decoded 8 at a time.
const MV_STEP: u32 = 32u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let k = 32u * g;
    let w0 = dec8(rb, k);
    let w1 = dec8(rb, k + 8u);
    let w2 = dec8(rb, k + 16u);
    let w3 = dec8(rb, k + 24u);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 8u * g;
            out[j] = dot(w0.a, act[x]) + dot(w0.b, act[x + 1u]) + dot(w1.a, act[x + 2u])
                + dot(w1.b, act[x + 3u]) + dot(w2.a, act[x + 4u]) + dot(w2.b, act[x + 5u])
                + dot(w3.a, act[x + 6u]) + dot(w3.b, act[x + 7u]);
        }
    }
    return out;
}
