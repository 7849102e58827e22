//! Adapters on a base model: LoRA (`y = W x + s · B (A x)` on the six large matrices of a
//! block) and state-tuned initial states (RWKV-PEFT `blocks.N.att.time_state`).
//!
//! This module holds the host side: the adapter and initial-state files read into f32
//! arrays and checked against a base [`Rwkv7Config`]. The GPU side (upload, the low-rank
//! products in the forward pass) is `model::lora`.
//!
//! Sources of the math and the layouts: RWKV-PEFT (`lora_A` `[r, in]`, `lora_B`
//! `[out, r]`, delta `s · B A` with `s = alpha / r`), llama.cpp `llama-adapter.cpp`
//! (`blk.N.<name>.weight.lora_a` ne `[in, r]`, `lora_b` ne `[r, out]`,
//! `adapter.lora.alpha`), BlinkDL `RWKV_x070` (the WKV state `[H, N, N]`).

use serde::Serialize;

mod read;
mod state;

pub(crate) use read::display_name;
pub use read::FACTOR_TYPES;

use crate::config::Rwkv7Config;
use crate::error::{EngineError, Result};

/// The matrices of a block a LoRA may adapt (BlinkDL names, without `blocks.N.`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LoraTarget {
    /// `att.receptance` `[C, C]`.
    Receptance,
    /// `att.key` `[C, C]`.
    Key,
    /// `att.value` `[C, C]`.
    Value,
    /// `att.output` `[C, C]`.
    Output,
    /// `ffn.key` `[F, C]`.
    FfnKey,
    /// `ffn.value` `[C, F]`.
    FfnValue,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 6] = [
        LoraTarget::Receptance,
        LoraTarget::Key,
        LoraTarget::Value,
        LoraTarget::Output,
        LoraTarget::FfnKey,
        LoraTarget::FfnValue,
    ];

    /// The BlinkDL name within a block, e.g. `att.key`.
    pub fn name(self) -> &'static str {
        match self {
            LoraTarget::Receptance => "att.receptance",
            LoraTarget::Key => "att.key",
            LoraTarget::Value => "att.value",
            LoraTarget::Output => "att.output",
            LoraTarget::FfnKey => "ffn.key",
            LoraTarget::FfnValue => "ffn.value",
        }
    }

    /// `(n_out, n_in)` of the base matrix in a model of `cfg`.
    pub fn shape(self, cfg: &Rwkv7Config) -> (usize, usize) {
        let (c, f) = (cfg.n_embd, cfg.ffn_dim);
        match self {
            LoraTarget::FfnKey => (f, c),
            LoraTarget::FfnValue => (c, f),
            _ => (c, c),
        }
    }

    /// Index in [`LoraTarget::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One adapted matrix: `delta = B A`, `A` `[rank, n_in]`, `B` `[n_out, rank]`, both
/// row-major f32 (decoded from the file's encoding).
#[derive(Debug, Clone)]
pub struct LoraMatrix {
    pub layer: usize,
    pub target: LoraTarget,
    pub rank: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
}

/// Bytes an adapter's decoded factors may take beyond its base model's file size: with the
/// adapter's own pages (at most its file size) this keeps reading any adapter of S bytes
/// within S + the model's size + 256 MiB of peak memory (`docs/reliability.md`), and no
/// real adapter comes near it (rank 64 on every matrix of a 7B model: 0.6 GB of f32
/// against a ≥ 4 GB model file).
pub const LORA_HEADROOM_BYTES: u64 = 128 << 20;

/// The base model an adapter file is checked against before any factor is decoded
/// ([`LoraAdapter::open_for`]): its shapes, and a budget for the decoded factors of the
/// model file's size + [`LORA_HEADROOM_BYTES`].
#[derive(Debug, Clone, Copy)]
pub struct LoraBase<'a> {
    pub config: &'a Rwkv7Config,
    /// Size of the base model's file in bytes.
    pub model_file_bytes: u64,
}

impl<'a> LoraBase<'a> {
    pub fn new(config: &'a Rwkv7Config, model_file_bytes: u64) -> Self {
        LoraBase {
            config,
            model_file_bytes,
        }
    }

    /// Most bytes the adapter's factors may take decoded to f32.
    pub fn max_decoded_bytes(&self) -> u64 {
        self.model_file_bytes.saturating_add(LORA_HEADROOM_BYTES)
    }
}

/// The file format an adapter or initial state was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AdapterFormat {
    /// RWKV-PEFT / BlinkDL PyTorch checkpoint.
    Pth,
    SafeTensors,
    /// llama.cpp GGUF adapter (`general.type = adapter`).
    Gguf,
}

/// A LoRA adapter read from a file: every adapted matrix, sorted by (layer, target).
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    /// File name, for messages and the UI.
    pub name: String,
    pub format: AdapterFormat,
    /// Alpha from the file (GGUF `adapter.lora.alpha`, a `lora_alpha` entry), if any.
    pub alpha: Option<f32>,
    pub matrices: Vec<LoraMatrix>,
}

impl LoraAdapter {
    /// The largest rank of its matrices.
    pub fn rank(&self) -> usize {
        self.matrices.iter().map(|m| m.rank).max().unwrap_or(0)
    }

    /// The scale used when the user gives none: `alpha / rank` when the file holds alpha,
    /// else 1.
    pub fn default_scale(&self) -> f32 {
        match self.alpha {
            Some(a) if self.rank() > 0 => a / self.rank() as f32,
            _ => 1.0,
        }
    }

    /// Checks every matrix against a base model: layer in range, `n_in`/`n_out` equal to
    /// the base matrix's, `a`/`b` lengths consistent, rank ≥ 1, values finite, no
    /// matrix twice.
    ///
    /// Errors: [`EngineError::Adapter`] naming the adapter and the tensor.
    pub fn check(&self, cfg: &Rwkv7Config) -> Result<()> {
        let err = |what: String| EngineError::Adapter {
            name: self.name.clone(),
            what,
        };
        if self.matrices.is_empty() {
            return Err(err("holds no LoRA matrices".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for m in &self.matrices {
            let t = format!("blocks.{}.{}", m.layer, m.target.name());
            if m.layer >= cfg.n_layer {
                return Err(err(format!(
                    "`{t}`: layer {} but the model has {} layers",
                    m.layer, cfg.n_layer
                )));
            }
            if !seen.insert((m.layer, m.target)) {
                return Err(err(format!("`{t}` is adapted twice")));
            }
            let (n_out, n_in) = m.target.shape(cfg);
            if (m.n_out, m.n_in) != (n_out, n_in) {
                return Err(err(format!(
                    "`{t}`: the adapter is for a {}×{} matrix, the model's is {n_out}×{n_in}",
                    m.n_out, m.n_in
                )));
            }
            if m.rank == 0 || m.a.len() != m.rank * m.n_in || m.b.len() != m.n_out * m.rank {
                return Err(err(format!(
                    "`{t}`: rank {} with lora_A of {} and lora_B of {} values",
                    m.rank,
                    m.a.len(),
                    m.b.len()
                )));
            }
            if m.a.iter().chain(&m.b).any(|v| !v.is_finite()) {
                return Err(err(format!("`{t}`: a value is not finite")));
            }
        }
        Ok(())
    }
}

/// A state-tuned initial state: the WKV state of every layer, `[L, H, N, N]` f32 with
/// `S[l][h][i][j]` pairing value channel `i` with key channel `j` (the engine's and the
/// `rwkv` package's orientation). The token-shift parts of the state start at zero.
#[derive(Debug, Clone)]
pub struct InitState {
    pub name: String,
    pub format: AdapterFormat,
    pub n_layer: usize,
    pub n_head: usize,
    pub head_size: usize,
    pub wkv: Vec<f32>,
}

impl InitState {
    /// Checks the shape against a base model.
    ///
    /// Errors: [`EngineError::Adapter`] naming the file and what differs.
    pub fn check(&self, cfg: &Rwkv7Config) -> Result<()> {
        let got = (self.n_layer, self.n_head, self.head_size);
        let want = (cfg.n_layer, cfg.n_head, cfg.head_size);
        if got != want {
            return Err(EngineError::Adapter {
                name: self.name.clone(),
                what: format!(
                    "initial state for {} layers × {} heads × {}, the model has {} × {} × {}",
                    got.0, got.1, got.2, want.0, want.1, want.2
                ),
            });
        }
        let n = self.n_layer * self.n_head * self.head_size * self.head_size;
        if self.wkv.len() != n || self.wkv.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::Adapter {
                name: self.name.clone(),
                what: format!("{} values (need {n}, all finite)", self.wkv.len()),
            });
        }
        Ok(())
    }

    /// The whole state vector of one sequence (`Rwkv7Config::state_len` f32, the layout of
    /// [`crate::Engine::write_state`]): zero token shifts, this WKV state.
    ///
    /// Errors: as [`InitState::check`].
    pub fn to_state(&self, cfg: &Rwkv7Config) -> Result<Vec<f32>> {
        self.check(cfg)?;
        let c = cfg.n_embd;
        let per = cfg.state_len_per_layer();
        let hnn = cfg.n_head * cfg.head_size * cfg.head_size;
        let mut s = vec![0f32; cfg.state_len()];
        for l in 0..cfg.n_layer {
            s[l * per + c..l * per + c + hnn].copy_from_slice(&self.wkv[l * hnn..(l + 1) * hnn]);
        }
        Ok(s)
    }
}
