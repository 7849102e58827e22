// The fields a one-token product at either end of the fused LayerNorm + token shift
// (`LnEnd::In`: matvec/q8_x_ln.wgsl; `LnEnd::Out`: matvec/ln_save.wgsl) adds to `Params`
// of product/params.wgsl, inside its braces (`params_with` in
// crates/engine/src/ops/matmul/matvec.rs; mirrored by `LnParams` in
// crates/engine/src/ops/matmul/ln_fuse/mod.rs).
    ln_w: u32,        // vec offset of the LayerNorm weight [C]
    ln_b: u32,        // vec offset of its bias [C]
    ln_mix: u32,      // vec offset of the lerp's mix [C] (the key)
    ln_state: u32,    // offset of the shift state inside a state slot
    ln_slot_len: u32, // f32 of a state slot
    ln_eps: f32,      // the LayerNorm's eps (the key)
    ln_stats: u32,    // act f32 offset of (mean, rstd) of the normalized row (a multiple of 4)
    _ln0: u32,
