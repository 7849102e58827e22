// The fields a one-token product at an end of the fused LayerNorm + token shift
// (`LnEnd::In`: matvec/q8_x_ln.wgsl; `LnEnd::Out`: matvec/ln_save.wgsl; `LnEnd::Next`:
// also matvec/ln_next.wgsl, the nx_ fields) adds to `Params` of product/params.wgsl,
// inside its braces (`params_with` in crates/engine/src/ops/matmul/matvec.rs; mirrored by
// `LnParams` in crates/engine/src/ops/matmul/ln_fuse/mod.rs).
    ln_w: u32,        // vec offset of the LayerNorm weight [C]
    ln_b: u32,        // vec offset of its bias [C]
    ln_mix: u32,      // vec offset of the lerp's mix [C] (the key)
    ln_state: u32,    // offset of the shift state inside a state slot
    ln_slot_len: u32, // f32 of a state slot
    ln_eps: f32,      // the LayerNorm's eps (the key; the next block's)
    ln_stats: u32,    // act f32 offset of (mean, rstd) of the normalized row (a multiple of 4)
    ln_done: u32,     // act u32 index of the counter of finished workgroups (Next)
    nx_ln_w: u32,     // the tail's LayerNorm weight [C], bias [C] (offsets in its block's vectors)
    nx_ln_b: u32,
    nx_mix: u32,      // its lerps' mixes [nx_mixes, C]
    nx_state: u32,    // its shift state inside a slot of its state part
    nx_slot_len: u32, // f32 of a slot of that part
    nx_out: u32,      // act f32 offset of the first lerp's output [C]
    nx_out_stride: u32, // f32 from one lerp's output to the next
    nx_wgs: u32,      // workgroups of the dispatch
    nx_tail: u32,     // workgroups that run the tail's LayerNorm (their slices: 256 vec4s)
    x8: u32,          // act u32 index of the output as 8-bit x (the key), of x as 8-bit x (the value)
    nx_mixes: u32,    // lerps the tail writes: 6 (the next block's time mix) or 1 (this block's channel mix)
    _nx2: u32,
