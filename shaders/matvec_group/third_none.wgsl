// No second buffer in the group: `mv_row3` and `wb4_at` are never called; this keeps
// their call sites valid.
const MV_STEP3: u32 = 32u;

fn mv_step3(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> { return vec4<f32>(0.0); }

fn wb4_at(i: u32) -> vec4<u32> { return vec4<u32>(0u); }
