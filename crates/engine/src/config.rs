//! RWKV-7 constants and hyper-parameters: what every layer of the engine may read.
//!
//! The constants are the architecture's fixed numbers (BlinkDL `RWKV_x070`, llama.cpp
//! `rwkv7.cpp`); [`Rwkv7Config`] is one model's shape, inferred from its tensors and (for
//! GGUF) metadata by `model::names`.

use serde::{Deserialize, Serialize};

/// Head size N of the WKV kernels: every released RWKV-7 uses 64, and the kernels are
/// written for it (a head is one workgroup of N lanes holding an N×N state). A model with
/// another head size is refused at load ([`crate::EngineError::NotRwkv7`], "unsupported
/// head size"). Also the default when a GGUF lacks `rwkv7.wkv.head_size`.
pub const HEAD_SIZE: usize = 64;

/// LayerNorm eps of `ln0`, `ln1`, `ln2` and `ln_out` (torch's default, as `RWKV_x070`).
pub const LN_EPS: f32 = 1e-5;

/// GroupNorm eps of `ln_x` (the WKV output norm): `64e-5`, i.e. `1e-5 · head_size`, as
/// `RWKV_x070` (`F.group_norm(..., eps=64e-5)`) and llama.cpp.
pub const GN_EPS: f32 = 64e-5;

/// e^-0.5, the scale of the decay: `w = exp(-e^-0.5 · σ(w0 + tanh(x_w W1) W2))`, so each
/// step keeps between e^(-e^-0.5) ≈ 0.545 and 1 of the state (`RWKV_x070`: `-0.606531 *
/// sigmoid(...)`; llama.cpp `rwkv7.cpp`).
pub const DECAY_SCALE: f32 = 0.606531;

/// Most layers accepted in a model or an adapter (released models have at most 61).
pub const MAX_LAYERS: usize = 4096;

/// Low-rank (LoRA) dimensions of the time-mix: decay `w`, in-context learning rate `a`,
/// value residual `v` and gate `g` (RWKV-LM `RWKV_Tmix_x070`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoraRanks {
    pub decay_w: usize,
    pub iclr_a: usize,
    pub value_v: usize,
    pub gate_g: usize,
}

/// Shape of an RWKV-7 model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rwkv7Config {
    /// Number of blocks (layers).
    pub n_layer: usize,
    /// Embedding width C.
    pub n_embd: usize,
    /// Head size N (64 for every released RWKV-7).
    pub head_size: usize,
    /// Heads H = C / N.
    pub n_head: usize,
    /// Channel-mix hidden size (4C in released models).
    pub ffn_dim: usize,
    /// Vocabulary size (65536 for the World tokenizer).
    pub vocab_size: usize,
    pub lora: LoraRanks,
}

impl Rwkv7Config {
    /// f32 elements of one sequence's state for one layer:
    /// `[att_shift C | wkv H×N×N | ffn_shift C]`.
    pub fn state_len_per_layer(&self) -> usize {
        2 * self.n_embd + self.n_head * self.head_size * self.head_size
    }

    /// f32 elements of one sequence's whole state.
    pub fn state_len(&self) -> usize {
        self.n_layer * self.state_len_per_layer()
    }
}
