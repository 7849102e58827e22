// A product that ends with its rows (no fused LayerNorm after it: matvec/ln_next.wgsl).

fn mv_row_out(rl: u32, v: f32) {}

fn mv_epilogue(wg: u32, li: u32) {}
