// F32 rows for `matvec`: a step is 32 weights, eight 16-byte loads (rows are 128-byte
// multiples since K % 32 == 0).
const MV_STEP: u32 = 32u;

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let i = (rb >> 4u) + 8u * g;
    var a: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        a[j] = bitcast<vec4<f32>>(w4[i + j]);
    }
    var out = vec4<f32>(0.0);
    for (var t = 0u; t < 4u; t++) {
        if (t < nt) {
            let x = xb[t] + 8u * g;
            var s = 0.0;
            for (var j = 0u; j < 8u; j++) {
                s += dot(a[j], act[x + j]);
            }
            out[t] = s;
        }
    }
    return out;
}
