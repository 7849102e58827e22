// The fields a one-token product that makes its LoRA term's first product itself
// (`HPROD = 1`, matvec/lora_hprod.wgsl) adds to `Params` of product/params.wgsl, inside
// its braces (`params_with` in crates/engine/src/ops/matmul/matvec.rs; mirrored by
// `HParams` in crates/engine/src/ops/matmul/hprod.rs).
    hp_wgs: u32,      // workgroups making h (one column each): the term's rank R₃₂
    hp_rows: u32,     // rows of A (columns of h past them are 0)
    hp_set: u32,      // u32 offset of this product's h set in `hs`
    hp_reset: u32,    // u32 offset of the set this product empties for the next one
    hp_scale: f32,    // the adapter's scale s: h = s · A x
    hp_spin: u32,     // polls of an unpublished h value before a lane makes it itself
    _hp0: u32,
    _hp1: u32,
