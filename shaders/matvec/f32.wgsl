// F32 rows for `matvec`: a step is 4 weights, one 16-byte load (rows are 128-byte
// multiples since K % 32 == 0), and one vec4 of x.
const MV_STEP: u32 = 4u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let a = bitcast<vec4<f32>>(w4[(rb >> 4u) + g]);
    var out = vec4<f32>(0.0);
    for (var t = 0u; t < 4u; t++) {
        if (t < nt) {
            out[t] = dot(a, act[xb[t] + g]);
        }
    }
    return out;
}
