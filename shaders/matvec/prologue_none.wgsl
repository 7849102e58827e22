// `matvec` without a prologue: the step reads x from the activations directly.
fn mv_prologue(x0: u32, k: u32, li: u32) {}
