// No second encoding in the group: `mv_row2` is never called; this keeps its call site
// valid.
const MV_STEP2: u32 = 32u;

fn mv_step2(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> { return vec4<f32>(0.0); }
