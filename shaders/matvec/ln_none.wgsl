// A product with neither end of the fused LayerNorm + token shift (matvec/q8_x_ln.wgsl,
// matvec/ln_save.wgsl): nothing to save.
var<private> mv_first_wg: bool;

fn ln_save(r: u32, x: f32) {}
