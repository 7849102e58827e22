// `matmul_coop`'s prefetch pair for encodings without one of their own (Q4_K has its own
// in shaders/decode/q4_k.wgsl): nothing is loaded ahead, `cvt8` decodes as `dec8`.

struct R8 { rb: u32, k: u32 }

fn raw8(rb: u32, k: u32) -> R8 { return R8(rb, k); }
fn cvt8(r: R8, k: u32) -> W8 { return dec8(r.rb, r.k); }
