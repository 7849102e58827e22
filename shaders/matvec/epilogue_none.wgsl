// A product that ends with its rows (no fused LayerNorm after it: matvec/ln_next.wgsl).

fn mv_epilogue(li: u32) {}
