// No second buffer in the group: `mv_row3` is never called; this keeps its call site
// valid.
const MV_STEP3: u32 = 32u;

fn mv_step3(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> { return vec4<f32>(0.0); }
