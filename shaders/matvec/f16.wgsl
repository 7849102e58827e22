// F16 rows for `matvec`: a step is 32 weights, four 16-byte loads (rows are 64-byte
// multiples since K % 32 == 0).
const MV_STEP: u32 = 32u;

fn h4(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

fn mv_step(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let i = (rb >> 4u) + 4u * g;
    let q0 = w4[i];
    let q1 = w4[i + 1u];
    let q2 = w4[i + 2u];
    let q3 = w4[i + 3u];
    let a0 = h4(q0.x, q0.y);
    let a1 = h4(q0.z, q0.w);
    let a2 = h4(q1.x, q1.y);
    let a3 = h4(q1.z, q1.w);
    let a4 = h4(q2.x, q2.y);
    let a5 = h4(q2.z, q2.w);
    let a6 = h4(q3.x, q3.y);
    let a7 = h4(q3.z, q3.w);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 8u * g;
            out[j] = dot(a0, act[x]) + dot(a1, act[x + 1u]) + dot(a2, act[x + 2u])
                + dot(a3, act[x + 3u]) + dot(a4, act[x + 4u]) + dot(a5, act[x + 5u])
                + dot(a6, act[x + 6u]) + dot(a7, act[x + 7u]);
        }
    }
    return out;
}
