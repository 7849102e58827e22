// Shared by the matrix-product kernels (matmul, matvec, matmul_coop, matmul_reduce):
// their parameters (mirrored by `Params` in crates/engine/src/ops/matmul/mod.rs) and the
// epilogue `finish` (scale, bias, then the activation) of output row r. The matrix ×
// vector kernel of a product with LoRA adds `Σ_j B[r, j] h[t, j]` (`lora_sum`, the
// low-rank second product of the active adapters, `h = s · A x` from an earlier
// dispatch) to its raw sum before `finish`; larger passes add it with a product of
// their own.

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
    /*HP_FIELDS*/
}

fn finish(v: f32, r: u32) -> f32 {
    var y = v * p.scale;
    if (p.bias_off != 0xffffffffu) {
        y += vecs[p.bias_off + p.row0 + r];
    }
    return activation(y, p.act);
}
