//! Synthetic RWKV-7 models of any real shape with seeded random weights, written as GGUF in
//! exactly llama.cpp's layout (what `convert_hf_to_gguf.py` writes for F16, and what
//! `llama-quantize` writes for Q8_0 and Q4_K_M) or as SafeTensors with BlinkDL's names
//! (f16, as `shared/fixtures/tools/make_model.py` writes them).
//!
//! Values follow `make_model.py`'s init (RWKV-LM's train init plus seeded noise, the
//! matrices the train code zeroes made small and random): token-shift mixes in [0, 1],
//! `w0` from −6 to 0 plus noise, `k_k` ≈ 0.7, `k_a` ≈ 1, `r_k` ≈ −0.04 ± 0.3, norms ≈ 1,
//! matrices uniform in ±1/√in, embedding N(0, 1), head N(0, 9/C). Every value is rounded
//! to f16, so an F16 GGUF and the SafeTensors of the same seed hold identical numbers and
//! the F32 tensors of a GGUF equal their f16 SafeTensors counterparts.
//!
//! Each tensor row draws from its own SplitMix64 stream keyed by (seed, BlinkDL name,
//! row): the values do not depend on the output format, tensor order or thread count.
//! Big matrices are generated, quantized and written in row chunks by several threads
//! (`std::thread::scope`), streaming through a `BufWriter`: memory stays a few MB per
//! thread whatever the model size.
//!
//! The writers live here, beside their callers (`rwkv synth`, the engine's tests and
//! benchmarks), not in the engine the app ships. Modules: [`init`] (the values, row by
//! row), [`gguf`] (llama.cpp's tensor table and metadata), [`safetensors`] (BlinkDL's
//! names), [`gguf_write`] (a streaming GGUF v3 writer), [`vocab`] (the World vocabulary as
//! llama.cpp embeds it).

use std::path::Path;

use rwkv_engine::{EngineError, LoraRanks, Result, Rwkv7Config};

pub mod gguf;
pub mod gguf_write;
pub mod init;
pub mod lora;
pub mod safetensors;
pub mod vocab;

pub use self::safetensors::write_safetensors;
pub use gguf::write_gguf;
pub use lora::write_lora;

/// RWKV-7 head size N (every released model; the engine's kernels need it).
pub use rwkv_engine::HEAD_SIZE;

/// Encoding of the big matrices of a synthetic GGUF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthType {
    /// `convert_hf_to_gguf.py --outtype f16` (`general.file_type` 1).
    F16,
    /// `llama-quantize … Q8_0` (file type 7): every big matrix and the head Q8_0.
    Q8_0,
    /// `llama-quantize … Q4_K_M` (file type 15): big matrices Q4_K, head Q6_K; rows whose
    /// length is not a multiple of 256 fall back as llama.cpp does (Q4_K → Q5_0,
    /// Q6_K → Q8_0).
    Q4KM,
}

impl SynthType {
    /// Parses `F16`, `Q8_0`, `Q4_K` / `Q4_K_M` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "F16" => Some(SynthType::F16),
            "Q8_0" => Some(SynthType::Q8_0),
            "Q4_K" | "Q4_K_M" => Some(SynthType::Q4KM),
            _ => None,
        }
    }

    /// llama.cpp `llama_ftype` stored as `general.file_type`.
    pub fn file_type(self) -> u32 {
        match self {
            SynthType::F16 => 1,
            SynthType::Q8_0 => 7,
            SynthType::Q4KM => 15,
        }
    }
}

/// What to synthesise.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthOptions {
    pub n_layer: usize,
    /// C, a multiple of [`HEAD_SIZE`].
    pub n_embd: usize,
    /// Channel-mix width; `None` = 4C.
    pub ffn: Option<usize>,
    pub vocab: usize,
    /// `None` = RWKV-LM's formulas ([`lora_ranks`]).
    pub lora: Option<LoraRanks>,
    pub dtype: SynthType,
    pub seed: u64,
    /// `general.name`; `None` = `rwkv7-synth-L{L}-C{C}`.
    pub name: Option<String>,
    /// Worker threads; 0 = all available cores.
    pub threads: usize,
    /// Quantize Q4_K / Q6_K with llama.cpp's full reference search
    /// (`quantize_row_q4_K_ref`, ~10× slower) instead of its round-to-nearest variant
    /// ([`rwkv_engine::quant::quantize_q4_k_rtn`]). Same format either way; a random model gains
    /// nothing from the search, so the default is off.
    pub reference_quant: bool,
}

impl SynthOptions {
    /// `n_layer × n_embd` with every other option at its default (vocab 65536, F16, seed 0).
    pub fn new(n_layer: usize, n_embd: usize) -> Self {
        SynthOptions {
            n_layer,
            n_embd,
            ffn: None,
            vocab: 65536,
            lora: None,
            dtype: SynthType::F16,
            seed: 0,
            name: None,
            threads: 0,
            reference_quant: false,
        }
    }

    /// The model's shape.
    ///
    /// Errors: [`EngineError::InvalidInput`] for zero sizes, `n_embd` not a multiple of 64,
    /// an FFN width not a multiple of 32, or LoRA ranks not multiples of 32 (the ggml
    /// block length: every matrix row must be whole Q8_0 blocks).
    pub fn config(&self) -> Result<Rwkv7Config> {
        let c = self.n_embd;
        if self.n_layer == 0 || c == 0 || c % HEAD_SIZE != 0 {
            return Err(EngineError::invalid(format!(
                "synth: {} layers × {c}: need ≥ 1 layer and a width that is a positive multiple of {HEAD_SIZE}",
                self.n_layer
            )));
        }
        let ffn = self.ffn.unwrap_or(4 * c);
        let lora = self.lora.unwrap_or_else(|| lora_ranks(c));
        for (what, v) in [
            ("ffn", ffn),
            ("decay LoRA", lora.decay_w),
            ("iclr LoRA", lora.iclr_a),
            ("value LoRA", lora.value_v),
            ("gate LoRA", lora.gate_g),
        ] {
            if v == 0 || v % 32 != 0 {
                return Err(EngineError::invalid(format!(
                    "synth: {what} width {v} is not a positive multiple of 32"
                )));
            }
        }
        if self.vocab == 0 || self.vocab > 1 << 24 {
            return Err(EngineError::invalid(format!("synth: vocab {}", self.vocab)));
        }
        Ok(Rwkv7Config {
            n_layer: self.n_layer,
            n_embd: c,
            head_size: HEAD_SIZE,
            n_head: c / HEAD_SIZE,
            ffn_dim: ffn,
            vocab_size: self.vocab,
            lora,
        })
    }
}

/// RWKV-LM's LoRA ranks for width `c` (RWKV-v7 train code as of the World/G1 releases;
/// llama.cpp's converter uses the same defaults): `max(32, round(m · c^e / 32) · 32)` with
/// (m, e) = (1.8, 0.5) decay and iclr, (1.3, 0.5) value, (0.6, 0.8) gate; Python's `round`
/// (half to even).
pub fn lora_ranks(c: usize) -> LoraRanks {
    let r =
        |m: f64, e: f64| ((m * (c as f64).powf(e) / 32.0).round_ties_even() as usize * 32).max(32);
    LoraRanks {
        decay_w: r(1.8, 0.5),
        iclr_a: r(1.8, 0.5),
        value_v: r(1.3, 0.5),
        gate_g: r(0.6, 0.8),
    }
}

/// What a write produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthReport {
    /// File size, bytes.
    pub bytes: u64,
    pub tensors: usize,
    /// Elements over all tensors of the file.
    pub params: u64,
    /// Wall time of the write, seconds.
    pub seconds: f64,
    pub config: Rwkv7Config,
}

impl SynthReport {
    /// The report of a finished write of `path` started at `t0`.
    fn of_written(
        path: &Path,
        tensors: usize,
        params: u64,
        t0: std::time::Instant,
        config: Rwkv7Config,
    ) -> Result<Self> {
        let bytes = std::fs::metadata(path)
            .map_err(|e| EngineError::io(path, e))?
            .len();
        Ok(SynthReport {
            bytes,
            tensors,
            params,
            seconds: t0.elapsed().as_secs_f64(),
            config,
        })
    }
}

/// Writes a synthetic model to `path`: GGUF for a `.gguf` extension, SafeTensors (f16,
/// BlinkDL names; `opts.dtype` ignored) for `.safetensors`.
///
/// Errors: [`EngineError::InvalidInput`] for bad options or another extension;
/// [`EngineError::Io`] naming `path`.
pub fn write(opts: &SynthOptions, path: impl AsRef<Path>) -> Result<SynthReport> {
    let path = path.as_ref();
    match path.extension().and_then(|e| e.to_str()) {
        Some("gguf") => write_gguf(opts, path),
        Some("safetensors") => write_safetensors(opts, path),
        _ => Err(EngineError::invalid(format!(
            "synth: {}: the extension must be .gguf or .safetensors",
            path.display()
        ))),
    }
}

pub(crate) fn threads(opts: &SynthOptions) -> usize {
    if opts.threads > 0 {
        opts.threads
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests;
