// F16 rows for `matvec`: a step is 8 weights, one 16-byte load (rows are 64-byte
// multiples since K % 32 == 0), and two vec4s of x.
const MV_STEP: u32 = 8u;

fn h4(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let q = w4[(rb >> 4u) + g];
    let a0 = h4(q.x, q.y);
    let a1 = h4(q.z, q.w);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 2u * g;
            out[j] = dot(a0, act[x]) + dot(a1, act[x + 1u]);
        }
    }
    return out;
}
