// `Params` of product/params.wgsl with the fields of a one-token product at either end
// of the fused LayerNorm + token shift (`LnEnd::In`: matvec/q8_x_ln.wgsl; `LnEnd::Out`:
// matvec/ln_save.wgsl; mirrored by `LnParams` in crates/engine/src/ops/matmul/ln_fuse.rs).

struct Params {
    k: u32,           // K: input features (multiple of 32)
    n: u32,           // rows of W in this binding
    row0: u32,        // output column of W's first row
    row_bytes: u32,   // bytes of one encoded row of W
    x_off: u32,       // act offset of x [T, K] (row stride x_stride)
    x_stride: u32,
    y_off: u32,       // offset of y [T, *] (row stride y_stride)
    y_stride: u32,
    act: u32,         // 0 none, 1 tanh, 2 sigmoid, 3 relu²
    accumulate: u32,  // 1: y += result (residual add); 2: y = act(y + raw) (LoRA B h first)
    bias_off: u32,    // vec offset of bias [N], or 0xffffffff for none
    rows_sel: u32,    // 0: T tokens, 1: R gathered rows
    scale: f32,       // multiplies the raw sum (LoRA first products: the adapter's scale)
    lora_rank: u32,   // R: columns of h and of B (0: no LoRA term)
    lora_h: u32,      // act offset of h [T, R] (row stride lora_stride)
    lora_stride: u32,
    lora_b: u32,      // offset of B [N, R] in `lora`
    ksplit: u32,      // k slices (grouped products; a single product's are KSPLIT)
    part_off: u32,    // f32 offset of this product's slices in the scratch (grouped)
    w_off: u32,       // byte offset of W in the weights binding (grouped)
    ln_w: u32,        // vec offset of the LayerNorm weight [C]
    ln_b: u32,        // vec offset of its bias [C]
    ln_mix: u32,      // vec offset of the lerp's mix [C] (the key)
    ln_state: u32,    // offset of the shift state inside a state slot
    ln_slot_len: u32, // f32 of a state slot
    ln_eps: f32,      // the LayerNorm's eps (the key)
    ln_stats: u32,    // act f32 offset of (mean, rstd) of the normalized row (a multiple of 4)
    _ln0: u32,
}
