//! RWKV-7 hyper-parameters, inferred from tensor shapes and (for GGUF) metadata.

use serde::{Deserialize, Serialize};

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
