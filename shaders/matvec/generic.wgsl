// Any encoding with a `dec8` (BF16, Q8_0, Q5_K) for `matvec`: a step is the 8 weights
// one `dec8` decodes, and two vec4s of x.
const MV_STEP: u32 = 8u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let w0 = dec8(rb, 8u * g);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 2u * g;
            out[j] = dot(w0.a, act[x]) + dot(w0.b, act[x + 1u]);
        }
    }
    return out;
}
