// A group's second encoding (source 1): F32 matrices beside F16 ones in the group's
// buffer (llama.cpp keeps the decay LoRA F32), read by `mv_row2`. The F32 step of
// matvec/f32.wgsl under its own names.
const MV_STEP2: u32 = 4u;

fn mv_step2(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> {
    let a = bitcast<vec4<f32>>(w4[(rb >> 4u) + g]);
    var out = vec4<f32>(0.0);
    for (var t = 0u; t < 4u; t++) {
        if (t < nt) {
            out[t] = dot(a, act[xb[t] + g]);
        }
    }
    return out;
}
