// Where a LoRA first product folded into its input's producer writes (`Fold` member `lf`
// of the producer's Params; rank 0 when it folds none). See shaders/lora/fold.wgsl.
struct Fold {
    rank: u32,      // rows of A
    k: u32,         // columns of A: the producer's channels (a multiple of 64)
    h_off: u32,     // act offset of h [T, h_stride]
    h_stride: u32,
    scale: f32,
    count: u32,     // this site's counter in `lf_count`
    _p0: u32,
    _p1: u32,
}
