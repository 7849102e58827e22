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

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::error::{EngineError, Result};
use crate::format::gguf_write::{world_gguf_tokens, GgufTensorSpec, GgufWriter};
use crate::format::{DType, MetaValue};
use crate::model::config::{LoraRanks, Rwkv7Config};
use crate::quant;

/// RWKV-7 head size N (every released model).
pub const HEAD_SIZE: usize = 64;

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
    /// ([`quant::quantize_q4_k_rtn`]). Same format either way; a random model gains
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

// ---------------------------------------------------------------------------------------
// Random values, keyed by (seed, BlinkDL tensor name, row).

/// SplitMix64 (Steele, Lea & Flood 2014): one 64-bit state, fast, good enough for weights.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn sym(&mut self) -> f32 {
        ((self.next() >> 40) as f32) * (2.0 / 16_777_216.0) - 1.0
    }

    /// Approximately N(0, 1): Irwin–Hall sum of four 16-bit uniforms, centred and scaled to
    /// unit variance (bounded by ±3.46, so no outlier overflows f16).
    fn gauss(&mut self) -> f32 {
        let x = self.next();
        let s: u32 = (0..4).map(|i| ((x >> (16 * i)) & 0xffff) as u32).sum();
        (s as f32 / 65536.0 - 2.0) * 3f32.sqrt()
    }
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Generates BlinkDL tensors row by row.
struct Init {
    cfg: Rwkv7Config,
    seed: u64,
}

/// A BlinkDL tensor: name and row-major shape.
#[derive(Debug, Clone)]
struct Blink {
    name: String,
    shape: Vec<usize>,
}

impl Blink {
    fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        Blink {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }
    fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
    fn rows(&self) -> usize {
        self.shape.iter().rev().skip(1).product()
    }
}

impl Init {
    fn rng(&self, name: &str, row: usize) -> SplitMix64 {
        let mut s = SplitMix64(
            self.seed
                ^ fnv1a(name).rotate_left(17)
                ^ (row as u64).wrapping_mul(0xd6e8_feb8_6659_fd93),
        );
        s.next();
        SplitMix64(s.next())
    }

    /// BlinkDL tensor list in `make_model.py`'s (RWKV-LM's) order.
    fn blink_tensors(&self) -> Vec<Blink> {
        let c = &self.cfg;
        let (cc, v, f, l) = (c.n_embd, c.vocab_size, c.ffn_dim, &c.lora);
        let vec3 = [1, 1, cc];
        let mut t = vec![Blink::new("emb.weight", &[v, cc])];
        for i in 0..c.n_layer {
            let p = format!("blocks.{i}.");
            for n in ["ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"] {
                t.push(Blink::new(format!("{p}{n}"), &[cc]));
            }
            if i == 0 {
                t.push(Blink::new(format!("{p}ln0.weight"), &[cc]));
                t.push(Blink::new(format!("{p}ln0.bias"), &[cc]));
            }
            let a = format!("{p}att.");
            for n in ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"] {
                t.push(Blink::new(format!("{a}{n}"), &vec3));
            }
            t.push(Blink::new(format!("{a}w1"), &[cc, l.decay_w]));
            t.push(Blink::new(format!("{a}w2"), &[l.decay_w, cc]));
            t.push(Blink::new(format!("{a}w0"), &vec3));
            t.push(Blink::new(format!("{a}a1"), &[cc, l.iclr_a]));
            t.push(Blink::new(format!("{a}a2"), &[l.iclr_a, cc]));
            t.push(Blink::new(format!("{a}a0"), &vec3));
            t.push(Blink::new(format!("{a}v1"), &[cc, l.value_v]));
            t.push(Blink::new(format!("{a}v2"), &[l.value_v, cc]));
            t.push(Blink::new(format!("{a}v0"), &vec3));
            t.push(Blink::new(format!("{a}g1"), &[cc, l.gate_g]));
            t.push(Blink::new(format!("{a}g2"), &[l.gate_g, cc]));
            t.push(Blink::new(format!("{a}k_k"), &vec3));
            t.push(Blink::new(format!("{a}k_a"), &vec3));
            t.push(Blink::new(format!("{a}r_k"), &[c.n_head, c.head_size]));
            for n in ["receptance", "key", "value", "output"] {
                t.push(Blink::new(format!("{a}{n}.weight"), &[cc, cc]));
            }
            t.push(Blink::new(format!("{a}ln_x.weight"), &[cc]));
            t.push(Blink::new(format!("{a}ln_x.bias"), &[cc]));
            t.push(Blink::new(format!("{p}ffn.x_k"), &vec3));
            t.push(Blink::new(format!("{p}ffn.key.weight"), &[f, cc]));
            t.push(Blink::new(format!("{p}ffn.value.weight"), &[cc, f]));
        }
        t.push(Blink::new("ln_out.weight", &[cc]));
        t.push(Blink::new("ln_out.bias", &[cc]));
        t.push(Blink::new("head.weight", &[v, cc]));
        t
    }

    /// Fills `out` (one row, `cols` long) of BlinkDL tensor `name` (make_model.py's init),
    /// rounded to f16.
    fn fill_row(&self, name: &str, row: usize, out: &mut [f32]) {
        let c = &self.cfg;
        let cc = c.n_embd as f32;
        let l = c.n_layer;
        let mut rng = self.rng(name, row);
        let (layer, rest) = match name.strip_prefix("blocks.").and_then(|r| r.split_once('.')) {
            Some((i, rest)) => (i.parse::<usize>().unwrap_or(0), rest),
            None => (0, name),
        };
        let r01 = if l > 1 {
            layer as f32 / (l - 1) as f32
        } else {
            0.0
        };
        let r10 = 1.0 - layer as f32 / l as f32;
        // Per-channel ramps of make_model.py (k = channel index).
        let ddd = |k: usize| k as f32 / cc;
        let lin = |k: usize| k as f32 / (cc - 1.0).max(1.0) - 0.5;
        let zz = |k: usize| {
            let half = (HEAD_SIZE as f32 - 1.0) / 2.0;
            let z = ((k % HEAD_SIZE) as f32 - half) / half;
            z * z.abs()
        };
        let uni = |rng: &mut SplitMix64, out: &mut [f32], b: f32| {
            out.iter_mut().for_each(|o| *o = b * rng.sym())
        };
        let gau = |rng: &mut SplitMix64, out: &mut [f32], s: f32| {
            out.iter_mut().for_each(|o| *o = s * rng.gauss())
        };
        let lora_in = |k: usize| 1.0 / (k as f32).sqrt();
        match rest {
            "emb.weight" => gau(&mut rng, out, 1.0),
            "head.weight" => gau(&mut rng, out, 3.0 / cc.sqrt()),
            "ln1.weight" | "ln2.weight" | "ln0.weight" | "ln_out.weight" => {
                out.iter_mut().for_each(|o| *o = 1.0 + 0.1 * rng.gauss())
            }
            "ln1.bias" | "ln2.bias" | "ln0.bias" | "ln_out.bias" => gau(&mut rng, out, 0.1),
            "att.x_r" | "att.x_w" | "att.x_k" | "att.x_v" | "att.x_a" | "att.x_g" => {
                let e = match rest {
                    "att.x_r" | "att.x_g" => 0.2,
                    "att.x_w" | "att.x_a" => 0.9,
                    _ => 0.7,
                };
                for (k, o) in out.iter_mut().enumerate() {
                    *o = (1.0 - ddd(k).powf(e * r10) + 0.05 * rng.gauss()).clamp(0.0, 1.0);
                }
            }
            "att.w0" => {
                for (k, o) in out.iter_mut().enumerate() {
                    let www =
                        -6.0 + 6.0 * (k as f32 / (cc - 1.0).max(1.0)).powf(1.0 + r01.powf(0.3));
                    *o = www + 0.5 + zz(k) * 2.5 + 0.5 * rng.gauss();
                }
            }
            "att.a0" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = -0.19 + zz(k) * 0.3 + lin(k) * 0.4 + 0.3 * rng.gauss();
                }
            }
            "att.v0" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = 0.73 - lin(k) * 0.4 + 0.3 * rng.gauss();
                }
            }
            "att.k_k" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = 0.71 - lin(k) * 0.1 + 0.1 * rng.gauss();
                }
            }
            "att.k_a" => out.iter_mut().for_each(|o| *o = 1.02 + 0.1 * rng.gauss()),
            "att.r_k" => out.iter_mut().for_each(|o| *o = -0.04 + 0.3 * rng.gauss()),
            // LoRA: first matrices [C, D] (in = C), second [D, C] (in = D).
            "att.w1" | "att.a1" | "att.v1" | "att.g1" => uni(&mut rng, out, lora_in(c.n_embd)),
            "att.w2" | "att.a2" | "att.v2" => uni(&mut rng, out, lora_in(self.lora_rank(rest))),
            "att.g2" => uni(&mut rng, out, 2.0 / (c.lora.gate_g as f32).sqrt()),
            "att.receptance.weight" | "att.key.weight" | "att.value.weight" | "ffn.key.weight" => {
                uni(&mut rng, out, 1.0 / cc.sqrt())
            }
            "att.output.weight" => uni(&mut rng, out, 0.5 / cc.sqrt()),
            "ffn.value.weight" => uni(&mut rng, out, 0.5 / (c.ffn_dim as f32).sqrt()),
            "att.ln_x.weight" => {
                let s = ((1 + layer) as f32 / l as f32).powf(0.7);
                out.iter_mut()
                    .for_each(|o| *o = s * (1.0 + 0.1 * rng.gauss()))
            }
            "att.ln_x.bias" => gau(&mut rng, out, 0.05),
            "ffn.x_k" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = (1.0 - ddd(k).powf(r10.powi(4)) + 0.05 * rng.gauss()).clamp(0.0, 1.0);
                }
            }
            _ => out.iter_mut().for_each(|o| *o = 0.0),
        }
        // Round to f16 in slices (half's vectorised F16C path where the CPU has it).
        let mut buf = [f16::ZERO; 256];
        for chunk in out.chunks_mut(256) {
            let b = &mut buf[..chunk.len()];
            b.convert_from_f32_slice(chunk);
            b.convert_to_f32_slice(chunk);
        }
    }

    fn lora_rank(&self, rest: &str) -> usize {
        let l = &self.cfg.lora;
        match rest {
            "att.w2" => l.decay_w,
            "att.a2" => l.iclr_a,
            _ => l.value_v,
        }
    }

    /// Rows `rows` of tensor `t`, concatenated.
    fn rows(&self, t: &Blink, rows: std::ops::Range<usize>) -> Vec<f32> {
        let cols = t.cols();
        let mut out = vec![0.0f32; rows.len() * cols];
        for (i, chunk) in out.chunks_exact_mut(cols).enumerate() {
            self.fill_row(&t.name, rows.start + i, chunk);
        }
        out
    }

    fn full(&self, t: &Blink) -> Vec<f32> {
        self.rows(t, 0..t.rows())
    }
}

// ---------------------------------------------------------------------------------------
// GGUF layout.

/// Where a GGUF tensor's values come from.
#[derive(Debug, Clone)]
enum Src {
    /// A BlinkDL tensor with the same row-major element order.
    Same(Blink),
    /// A BlinkDL `[a, b]` LoRA matrix, stored transposed (`[b, a]` row-major).
    Transposed(Blink),
    /// `time_mix_lerp_fused`: x_r, x_w, x_k, x_v, x_a, x_g of one layer, stacked.
    LerpFused(Vec<Blink>),
}

#[derive(Debug, Clone)]
struct Entry {
    spec: GgufTensorSpec,
    src: Src,
}

/// Encoding of a big matrix with row length `ne0` under `ty` (llama.cpp's fallbacks for
/// rows that are not whole 256-blocks).
fn big_dtype(ty: SynthType, is_head: bool, ne0: usize) -> DType {
    let want = match ty {
        SynthType::F16 => DType::F16,
        SynthType::Q8_0 => DType::Q8_0,
        SynthType::Q4KM if is_head => DType::Q6_K,
        SynthType::Q4KM => DType::Q4_K,
    };
    if ne0 % 256 != 0 {
        match want {
            DType::Q4_K => return DType::Q5_0,
            DType::Q6_K => return DType::Q8_0,
            _ => {}
        }
    }
    want
}

/// llama.cpp's tensor table for `cfg` under `ty`: names, ne, types, in file order —
/// `convert_hf_to_gguf.py`'s order for F16, `llama-quantize`'s (by layer, then by name)
/// for the quantized types.
fn gguf_entries(cfg: &Rwkv7Config, ty: SynthType) -> Vec<Entry> {
    let (c, v, f, l) = (cfg.n_embd, cfg.vocab_size, cfg.ffn_dim, &cfg.lora);
    let vec3 = [1, 1, c];
    let big = |name: &str, src: Blink, is_head: bool| {
        let ne0 = src.cols();
        let ne: Vec<u64> = src.shape.iter().rev().map(|&d| d as u64).collect();
        Entry {
            spec: GgufTensorSpec {
                name: name.to_string(),
                ne,
                dtype: big_dtype(ty, is_head, ne0),
            },
            src: Src::Same(src),
        }
    };
    let vector = |name: String, src: Blink| Entry {
        spec: GgufTensorSpec {
            name,
            ne: vec![c as u64],
            dtype: DType::F32,
        },
        src: Src::Same(src),
    };
    // GGUF stores the LoRA matrix `[a, b]` transposed: row-major [b, a], ne = [a, b].
    let lora = |name: String, src: Blink, dtype: DType| {
        let ne = vec![src.shape[0] as u64, src.shape[1] as u64];
        Entry {
            spec: GgufTensorSpec { name, ne, dtype },
            src: Src::Transposed(src),
        }
    };
    let mut s = vec![
        big("output.weight", Blink::new("head.weight", &[v, c]), true),
        big(
            "token_embd.weight",
            Blink::new("emb.weight", &[v, c]),
            false,
        ),
    ];
    for i in 0..cfg.n_layer {
        let g = format!("blk.{i}.");
        let a = format!("blocks.{i}.att.");
        let p = format!("blocks.{i}.");
        let a1 = lora(
            format!("{g}time_mix_a1.weight"),
            Blink::new(format!("{a}a1"), &[c, l.iclr_a]),
            DType::F16,
        );
        let a0 = vector(
            format!("{g}time_mix_a0.weight"),
            Blink::new(format!("{a}a0"), &vec3),
        );
        let a2 = lora(
            format!("{g}time_mix_a2.weight"),
            Blink::new(format!("{a}a2"), &[l.iclr_a, c]),
            DType::F16,
        );
        let gs = [
            lora(
                format!("{g}time_mix_g1.weight"),
                Blink::new(format!("{a}g1"), &[c, l.gate_g]),
                DType::F16,
            ),
            lora(
                format!("{g}time_mix_g2.weight"),
                Blink::new(format!("{a}g2"), &[l.gate_g, c]),
                DType::F16,
            ),
        ];
        let mid = [
            vector(
                format!("{g}time_mix_ln.bias"),
                Blink::new(format!("{a}ln_x.bias"), &[c]),
            ),
            vector(
                format!("{g}time_mix_ln.weight"),
                Blink::new(format!("{a}ln_x.weight"), &[c]),
            ),
            vector(
                format!("{g}time_mix_k_a.weight"),
                Blink::new(format!("{a}k_a"), &vec3),
            ),
            vector(
                format!("{g}time_mix_k_k.weight"),
                Blink::new(format!("{a}k_k"), &vec3),
            ),
            big(
                &format!("{g}time_mix_key.weight"),
                Blink::new(format!("{a}key.weight"), &[c, c]),
                false,
            ),
            big(
                &format!("{g}time_mix_output.weight"),
                Blink::new(format!("{a}output.weight"), &[c, c]),
                false,
            ),
            vector(
                format!("{g}time_mix_r_k.weight"),
                Blink::new(format!("{a}r_k"), &[cfg.n_head, cfg.head_size]),
            ),
            big(
                &format!("{g}time_mix_receptance.weight"),
                Blink::new(format!("{a}receptance.weight"), &[c, c]),
                false,
            ),
        ];
        let val = big(
            &format!("{g}time_mix_value.weight"),
            Blink::new(format!("{a}value.weight"), &[c, c]),
            false,
        );
        let lerp = Entry {
            spec: GgufTensorSpec {
                name: format!("{g}time_mix_lerp_fused.weight"),
                ne: vec![c as u64, 1, 1, 6],
                dtype: DType::F32,
            },
            src: Src::LerpFused(
                ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"]
                    .iter()
                    .map(|n| Blink::new(format!("{a}{n}"), &vec3))
                    .collect(),
            ),
        };
        let tail = [
            lora(
                format!("{g}time_mix_w1.weight"),
                Blink::new(format!("{a}w1"), &[c, l.decay_w]),
                DType::F32,
            ),
            vector(
                format!("{g}time_mix_w0.weight"),
                Blink::new(format!("{a}w0"), &vec3),
            ),
            lora(
                format!("{g}time_mix_w2.weight"),
                Blink::new(format!("{a}w2"), &[l.decay_w, c]),
                DType::F32,
            ),
            lerp,
            vector(
                format!("{g}attn_norm.bias"),
                Blink::new(format!("{p}ln1.bias"), &[c]),
            ),
            vector(
                format!("{g}attn_norm.weight"),
                Blink::new(format!("{p}ln1.weight"), &[c]),
            ),
            big(
                &format!("{g}channel_mix_key.weight"),
                Blink::new(format!("{p}ffn.key.weight"), &[f, c]),
                false,
            ),
            big(
                &format!("{g}channel_mix_value.weight"),
                Blink::new(format!("{p}ffn.value.weight"), &[c, f]),
                false,
            ),
            vector(
                format!("{g}channel_mix_lerp_k.weight"),
                Blink::new(format!("{p}ffn.x_k"), &vec3),
            ),
            vector(
                format!("{g}attn_norm_2.bias"),
                Blink::new(format!("{p}ln2.bias"), &[c]),
            ),
            vector(
                format!("{g}attn_norm_2.weight"),
                Blink::new(format!("{p}ln2.weight"), &[c]),
            ),
        ];
        if i == 0 {
            // The converter gives layer 0 dummy v0/v1/v2, copies of a0/a1/a2, each written
            // just before its source.
            let copy = |e: &Entry, name: String| Entry {
                spec: GgufTensorSpec {
                    name,
                    ..e.spec.clone()
                },
                src: e.src.clone(),
            };
            s.push(copy(&a1, format!("{g}time_mix_v1.weight")));
            s.push(a1);
            s.push(copy(&a0, format!("{g}time_mix_v0.weight")));
            s.push(a0);
            s.push(copy(&a2, format!("{g}time_mix_v2.weight")));
            s.push(a2);
            s.extend(gs);
            s.extend(mid);
            s.push(val);
            s.extend(tail);
            s.push(vector(
                "token_embd_norm.bias".into(),
                Blink::new(format!("{p}ln0.bias"), &[c]),
            ));
            s.push(vector(
                "token_embd_norm.weight".into(),
                Blink::new(format!("{p}ln0.weight"), &[c]),
            ));
        } else {
            s.push(a1);
            s.push(a0);
            s.push(a2);
            s.extend(gs);
            s.extend(mid);
            s.push(lora(
                format!("{g}time_mix_v1.weight"),
                Blink::new(format!("{a}v1"), &[c, l.value_v]),
                DType::F16,
            ));
            s.push(vector(
                format!("{g}time_mix_v0.weight"),
                Blink::new(format!("{a}v0"), &vec3),
            ));
            s.push(lora(
                format!("{g}time_mix_v2.weight"),
                Blink::new(format!("{a}v2"), &[l.value_v, c]),
                DType::F16,
            ));
            s.push(val);
            s.extend(tail);
        }
    }
    s.push(vector(
        "output_norm.bias".into(),
        Blink::new("ln_out.bias", &[c]),
    ));
    s.push(vector(
        "output_norm.weight".into(),
        Blink::new("ln_out.weight", &[c]),
    ));
    if ty != SynthType::F16 {
        // llama-quantize's `weights_map` comparator: layer number (-1 for non-block
        // tensors), then the name.
        let layer = |n: &str| -> i64 {
            n.strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|i| i.parse().ok())
                .unwrap_or(-1)
        };
        s.sort_by(|a, b| {
            layer(&a.spec.name)
                .cmp(&layer(&b.spec.name))
                .then_with(|| a.spec.name.cmp(&b.spec.name))
        });
    }
    s
}

/// gguf-py `model_weight_count_rounded_notation(n, min_digits=2)`: "17M", "2.9B", "191M".
fn size_label(n: u64) -> String {
    let n = n as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    let int_digits = format!("{}", scaled.round_ties_even() as u64)
        .trim_start_matches('0')
        .len();
    let fix = 2usize.saturating_sub(int_digits);
    format!("{scaled:.fix$}{suffix}")
}

/// llama.cpp's chat template for RWKV World models (as the converter embeds it).
pub const RWKV_CHAT_TEMPLATE: &str = include_str!("../assets/rwkv7_chat_template.jinja");

/// The metadata of `convert_hf_to_gguf.py` (F16) / `llama-quantize` (quantized types) for
/// an RWKV-7 World model, keys in their order and with their value types.
fn gguf_metadata(
    cfg: &Rwkv7Config,
    opts: &SynthOptions,
    params: u64,
) -> Result<Vec<(String, MetaValue)>> {
    let (tokens, types) = world_gguf_tokens(cfg.vocab_size)?;
    let name = opts
        .name
        .clone()
        .unwrap_or_else(|| format!("rwkv7-synth-L{}-C{}", cfg.n_layer, cfg.n_embd));
    let s = |v: &str| MetaValue::String(v.to_string());
    let u = |v: usize| MetaValue::U32(v as u32);
    let mut m: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), s("rwkv7")),
        ("general.type".into(), s("model")),
        ("general.name".into(), MetaValue::String(name)),
        (
            "general.size_label".into(),
            MetaValue::String(size_label(params)),
        ),
        ("rwkv7.context_length".into(), u(1_048_576)),
        ("rwkv7.embedding_length".into(), u(cfg.n_embd)),
        ("rwkv7.block_count".into(), u(cfg.n_layer)),
        (
            "rwkv7.attention.layer_norm_epsilon".into(),
            MetaValue::F32(1e-5),
        ),
        ("rwkv7.wkv.head_size".into(), u(cfg.head_size)),
        (
            "rwkv7.attention.decay_lora_rank".into(),
            u(cfg.lora.decay_w),
        ),
        ("rwkv7.attention.iclr_lora_rank".into(), u(cfg.lora.iclr_a)),
        (
            "rwkv7.attention.value_residual_mix_lora_rank".into(),
            u(cfg.lora.value_v),
        ),
        ("rwkv7.attention.gate_lora_rank".into(), u(cfg.lora.gate_g)),
        ("rwkv7.feed_forward_length".into(), u(cfg.ffn_dim)),
    ];
    let file_type = (
        "general.file_type".to_string(),
        MetaValue::U32(opts.dtype.file_type()),
    );
    let head_count = ("rwkv7.attention.head_count".to_string(), MetaValue::U32(0));
    let qver = (
        "general.quantization_version".to_string(),
        MetaValue::U32(2),
    );
    let tok = vec![
        ("tokenizer.ggml.model".to_string(), s("rwkv")),
        (
            "tokenizer.ggml.tokens".to_string(),
            MetaValue::Array(tokens.into_iter().map(MetaValue::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".to_string(), MetaValue::U32(0)),
        ("tokenizer.ggml.eos_token_id".to_string(), MetaValue::U32(0)),
        (
            "tokenizer.ggml.eot_token_id".to_string(),
            MetaValue::U32(261),
        ),
        ("tokenizer.chat_template".to_string(), s(RWKV_CHAT_TEMPLATE)),
    ];
    if opts.dtype == SynthType::F16 {
        m.push(file_type);
        m.push(head_count);
        m.push(qver);
        m.extend(tok);
    } else {
        // llama-quantize copies the source keys, then sets the quantization version and
        // file type (removing and re-adding them moves both to the end).
        m.push(head_count);
        m.extend(tok);
        m.push(qver);
        m.push(file_type);
    }
    Ok(m)
}

// ---------------------------------------------------------------------------------------
// Encoding and parallel generation.

/// `data` (whole rows) in `dtype`'s bytes; `reference`: the full llama.cpp search for
/// Q4_K / Q6_K (else round to nearest).
fn encode(dtype: DType, data: &[f32], reference: bool) -> Vec<u8> {
    match dtype {
        DType::F32 => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => {
            let mut out = vec![0u8; data.len() * 2];
            quant::encode_f16_bytes(data, &mut out);
            out
        }
        DType::Q8_0 => bytemuck::cast_slice(&quant::quantize_q8_0(data)).to_vec(),
        DType::Q5_0 => bytemuck::cast_slice(&quant::quantize_q5_0(data)).to_vec(),
        DType::Q4_K if reference => bytemuck::cast_slice(&quant::quantize_q4_k(data)).to_vec(),
        DType::Q4_K => bytemuck::cast_slice(&quant::quantize_q4_k_rtn(data)).to_vec(),
        DType::Q6_K if reference => bytemuck::cast_slice(&quant::quantize_q6_k(data)).to_vec(),
        DType::Q6_K => bytemuck::cast_slice(&quant::quantize_q6_k_rtn(data)).to_vec(),
        // Not produced by `gguf_entries`.
        _ => Vec::new(),
    }
}

fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = x[r * cols + c];
        }
    }
    t
}

fn threads(opts: &SynthOptions) -> usize {
    if opts.threads > 0 {
        opts.threads
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

/// Generates rows of `t` and encodes them as `dtype` in chunks of about 1 M elements,
/// `n_threads` chunks at a time, handing each encoded chunk to `sink` in row order.
fn stream_rows(
    init: &Init,
    t: &Blink,
    dtype: DType,
    n_threads: usize,
    reference: bool,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let rows = t.rows();
    let cols = t.cols().max(1);
    let chunk = ((1 << 20) / cols).max(1);
    let mut start = 0;
    while start < rows {
        let ranges: Vec<std::ops::Range<usize>> = (0..n_threads)
            .map(|i| {
                let a = (start + i * chunk).min(rows);
                a..(a + chunk).min(rows)
            })
            .filter(|r| !r.is_empty())
            .collect();
        let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = ranges
                .iter()
                .map(|r| s.spawn(move || encode(dtype, &init.rows(t, r.clone()), reference)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        for (p, r) in parts.iter().zip(&ranges) {
            // A panicked worker (a bug) would have returned no bytes: report, never write
            // a short tensor.
            let want = dtype.bytes_for(r.len() * cols).unwrap_or(usize::MAX);
            if p.len() != want {
                return Err(EngineError::Op {
                    op: "synth",
                    what: format!(
                        "`{}` rows {r:?}: encoded {} bytes, expected {want}",
                        t.name,
                        p.len()
                    ),
                });
            }
            sink(p)?;
        }
        start = ranges.last().map(|r| r.end).unwrap_or(rows);
    }
    Ok(())
}

/// Writes a synthetic RWKV-7 GGUF (see the module docs) to `path`.
///
/// Errors: as [`write()`].
pub fn write_gguf(opts: &SynthOptions, path: impl AsRef<Path>) -> Result<SynthReport> {
    let path = path.as_ref();
    let t0 = Instant::now();
    let cfg = opts.config()?;
    let init = Init {
        cfg,
        seed: opts.seed,
    };
    let entries = gguf_entries(&cfg, opts.dtype);
    let params: u64 = entries.iter().map(|e| e.spec.numel()).sum();
    let meta = gguf_metadata(&cfg, opts, params)?;
    let specs: Vec<GgufTensorSpec> = entries.iter().map(|e| e.spec.clone()).collect();
    let mut w = GgufWriter::create(path, &meta, specs)?;
    let n_threads = threads(opts);
    for e in &entries {
        let dtype = e.spec.dtype;
        match &e.src {
            Src::Same(b) => {
                stream_rows(&init, b, dtype, n_threads, opts.reference_quant, |bytes| {
                    w.write_tensor_data(bytes)
                })?
            }
            Src::Transposed(b) => {
                let x = transpose(&init.full(b), b.rows(), b.cols());
                w.write_tensor_data(&encode(dtype, &x, false))?;
            }
            Src::LerpFused(parts) => {
                let x: Vec<f32> = parts.iter().flat_map(|b| init.full(b)).collect();
                w.write_tensor_data(&encode(dtype, &x, false))?;
            }
        }
    }
    w.finish()?;
    let bytes = std::fs::metadata(path)
        .map_err(|e| EngineError::io(path, e))?
        .len();
    Ok(SynthReport {
        bytes,
        tensors: entries.len(),
        params,
        seconds: t0.elapsed().as_secs_f64(),
        config: cfg,
    })
}

/// A BlinkDL tensor whose f16 bytes are generated when the SafeTensors writer asks.
struct LazyF16<'a> {
    init: &'a Init,
    t: Blink,
    threads: usize,
}

impl safetensors::View for LazyF16<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors::Dtype::F16
    }
    fn shape(&self) -> &[usize] {
        &self.t.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let mut out = Vec::with_capacity(self.data_len());
        // F16 encoding cannot fail; the sink only appends.
        let _ = stream_rows(self.init, &self.t, DType::F16, self.threads, false, |b| {
            out.extend_from_slice(b);
            Ok(())
        });
        Cow::Owned(out)
    }
    fn data_len(&self) -> usize {
        self.t.shape.iter().product::<usize>() * 2
    }
}

/// Writes a synthetic RWKV-7 SafeTensors file (BlinkDL names and shapes, f16, metadata
/// `{"format": "pt"}` as `make_model.py`) to `path`. `opts.dtype` is ignored.
///
/// Errors: as [`write()`].
pub fn write_safetensors(opts: &SynthOptions, path: impl AsRef<Path>) -> Result<SynthReport> {
    let path = path.as_ref();
    let t0 = Instant::now();
    let cfg = opts.config()?;
    let init = Init {
        cfg,
        seed: opts.seed,
    };
    let tensors = init.blink_tensors();
    let params: u64 = tensors
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum();
    let n = tensors.len();
    let n_threads = threads(opts);
    let views = tensors.into_iter().map(|t| {
        (
            t.name.clone(),
            LazyF16 {
                init: &init,
                t,
                threads: n_threads,
            },
        )
    });
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(io) => EngineError::io(path, io),
        other => EngineError::invalid(format!("synth: {}: {other}", path.display())),
    })?;
    let bytes = std::fs::metadata(path)
        .map_err(|e| EngineError::io(path, e))?
        .len();
    Ok(SynthReport {
        bytes,
        tensors: n,
        params,
        seconds: t0.elapsed().as_secs_f64(),
        config: cfg,
    })
}

#[cfg(test)]
mod tests;
