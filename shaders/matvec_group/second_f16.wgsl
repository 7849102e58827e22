// A group's second encoding (source 1): F16 matrices beside F32 ones in the group's
// buffer, read by `mv_row2`. The F16 step of matvec/f16.wgsl under its own names.
const MV_STEP2: u32 = 8u;

fn h4_2(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

fn mv_step2(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let q = w4[(rb >> 4u) + g];
    let a0 = h4_2(q.x, q.y);
    let a1 = h4_2(q.z, q.w);
    var out = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (j < nt) {
            let x = xb[j] + 2u * g;
            out[j] = dot(a0, act[x]) + dot(a1, act[x + 1u]);
        }
    }
    return out;
}
