// The parameters of one matrix product (mirrored by `Params` in
// crates/engine/src/ops/matmul/mod.rs), read by the product kernels (matmul, matvec,
// matmul_coop, matmul_reduce) as `p`, a pointer to this workgroup's entry of the table
// at binding 1 (product/one.wgsl: a single product; product/group.wgsl: a group's). The
// one-token products that make their LoRA term's h themselves add fields
// (matvec/params_hprod.wgsl).

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
}
