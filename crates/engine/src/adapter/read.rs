//! Reading LoRA adapter files: RWKV-PEFT / BlinkDL checkpoints (`.pth`, `.safetensors`)
//! and llama.cpp GGUF adapters, sniffed by content (GGUF magic, zip for `.pth`, else
//! SafeTensors) through the engine's own readers in [`crate::format`].
//!
//! Names accepted (anything else is an error naming the tensor):
//!
//! | format | tensor | stored shape (row-major) |
//! |---|---|---|
//! | RWKV-PEFT | `blocks.N.att.{receptance,key,value,output}.lora_A` | `[r, in]` |
//! | RWKV-PEFT | `blocks.N.att.{…}.lora_B`, `blocks.N.ffn.{key,value}.lora_B` | `[out, r]` |
//! | GGUF | `blk.N.{time_mix_{receptance,key,value,output},channel_mix_{key,value}}.weight.lora_a` | ne `[in, r]` = `[r, in]` |
//! | GGUF | `….weight.lora_b` | ne `[r, out]` = `[out, r]` |
//!
//! RWKV-PEFT (`rwkvt/peft/rwkvLinear.py`, `LoraLinear`) stores `lora_A` `[r, in]`,
//! `lora_B` `[out, r]` and applies `scaling · B (A x)` with `scaling = alpha / r`, alpha
//! given on its command line and not saved; llama.cpp (`src/llama-adapter.cpp`) checks
//! `W.ne[0] == a.ne[0]`, `W.ne[1] == b.ne[1]`, `a.ne[1] == b.ne[0]` and reads alpha from
//! `adapter.lora.alpha`. A SafeTensors `__metadata__` entry `lora_alpha` (or `alpha`) is
//! read as alpha too.

use std::collections::BTreeMap;
use std::path::Path;

use super::{AdapterFormat, LoraAdapter, LoraBase, LoraMatrix, LoraTarget};
use crate::error::{EngineError, Result};
use crate::format::{DType, FileFormat, MetaValue, ModelFile, TensorInfo};

/// Most layers an adapter may name (as a model may have).
const MAX_LAYER: usize = crate::config::MAX_LAYERS;

/// Which factor of a pair a tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Factor {
    A,
    B,
}

/// The display name of a file: its file name, else the path.
pub(crate) fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A RWKV-PEFT / BlinkDL LoRA tensor name → (layer, target, factor).
fn parse_peft(name: &str) -> Option<(usize, LoraTarget, Factor)> {
    let rest = name.strip_prefix("blocks.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer = parse_layer(layer)?;
    let (module, factor) = if let Some(m) = rest.strip_suffix(".lora_A") {
        (m, Factor::A)
    } else {
        (rest.strip_suffix(".lora_B")?, Factor::B)
    };
    let target = LoraTarget::ALL.into_iter().find(|t| t.name() == module)?;
    Some((layer, target, factor))
}

/// llama.cpp's tensor name of a target (`src/llama-arch.cpp`, RWKV-7).
pub(crate) fn gguf_name(t: LoraTarget) -> &'static str {
    match t {
        LoraTarget::Receptance => "time_mix_receptance",
        LoraTarget::Key => "time_mix_key",
        LoraTarget::Value => "time_mix_value",
        LoraTarget::Output => "time_mix_output",
        LoraTarget::FfnKey => "channel_mix_key",
        LoraTarget::FfnValue => "channel_mix_value",
    }
}

/// A llama.cpp GGUF adapter tensor name → (layer, target, factor).
fn parse_gguf(name: &str) -> Option<(usize, LoraTarget, Factor)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer = parse_layer(layer)?;
    let (module, factor) = if let Some(m) = rest.strip_suffix(".weight.lora_a") {
        (m, Factor::A)
    } else {
        (rest.strip_suffix(".weight.lora_b")?, Factor::B)
    };
    let target = LoraTarget::ALL
        .into_iter()
        .find(|&t| gguf_name(t) == module)?;
    Some((layer, target, factor))
}

/// A decimal layer number without sign or leading zeros, below [`MAX_LAYER`].
fn parse_layer(s: &str) -> Option<usize> {
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse::<usize>().ok().filter(|&l| l < MAX_LAYER)
}

/// What a tensor that is not a LoRA factor says about the file, for the error message.
fn stray_hint(name: &str) -> &'static str {
    if name.ends_with("att.time_state") {
        " — this file holds a state-tuned initial state (RWKV-PEFT `time_state`), not a LoRA: \
         load it as an initial state (--init-state)"
    } else if matches!(
        name,
        "emb.weight" | "token_embd.weight" | "head.weight" | "output.weight"
    ) || name.ends_with("att.key.weight")
        || name.ends_with("time_mix_key.weight")
    {
        " — this looks like a base model, not a LoRA adapter"
    } else if name.starts_with("blocks.") || name.starts_with("blk.") {
        " — a full tensor, not a LoRA factor (RWKV-PEFT saves these when trained with \
         --train_parts ln/time/emb/head): a run-time adapter cannot replace base tensors; \
         merge such a checkpoint with RWKV-PEFT's merge script, or retrain with an empty --train_parts"
    } else {
        ""
    }
}

/// Encodings a factor may have: what RWKV-PEFT (F32 / F16 / BF16) and llama.cpp's
/// `convert_lora_to_gguf.py` (F32 / F16 / BF16 / Q8_0) write. Decoding to f32 so takes at
/// most 3.8× the factor's bytes (Q8_0: 34 bytes per 32 values); the 4-bit block types
/// (7× and more) are refused before anything is decoded.
pub const FACTOR_TYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::Q8_0];

/// One pair of factors, checked, not yet decoded.
struct Planned<'t> {
    layer: usize,
    target: LoraTarget,
    rank: usize,
    n_in: usize,
    n_out: usize,
    a: &'t TensorInfo,
    b: &'t TensorInfo,
}

impl LoraAdapter {
    /// Reads a LoRA adapter file: RWKV-PEFT / BlinkDL `.pth` or `.safetensors`, or a
    /// llama.cpp GGUF adapter, chosen by content. Every factor is decoded to f32 (from
    /// F32, F16, BF16 or Q8_0). Matrices come out sorted by (layer, target); `name` is the
    /// file name; alpha as the module docs say.
    ///
    /// This checks the file alone (pairs complete, ranks equal and at most
    /// `min(n_in, n_out)`, encodings, values finite, names known) before decoding;
    /// [`LoraAdapter::open_for`] also checks it against a base model first, and
    /// [`LoraAdapter::check`] checks a read adapter against one.
    ///
    /// Errors: [`EngineError::Io`] / [`EngineError::Malformed`] (unreadable, truncated or
    /// corrupt container, naming the file), [`EngineError::UnsupportedType`], and
    /// [`EngineError::Adapter`] naming the file and tensor for: a base model or an initial
    /// state passed as an adapter, a GGUF whose `general.type` is not `adapter` or whose
    /// `adapter.type` is not `lora`, unknown tensor names, a factor without its pair,
    /// factors that are not matrices, `lora_A`/`lora_B` ranks that differ or exceed
    /// `min(n_in, n_out)`, a factor encoding other than F32/F16/BF16/Q8_0, non-finite
    /// values, no LoRA tensors at all, no memory for the decoded factors.
    pub fn open(path: impl AsRef<Path>) -> Result<LoraAdapter> {
        let path = path.as_ref();
        let file = ModelFile::open(path)?;
        Self::from_file(&file)
    }

    /// As [`LoraAdapter::open`], and every factor checked against `base` before any is
    /// decoded: its layer exists, `n_in`/`n_out` are the base matrix's, and the decoded
    /// factors fit `base.max_decoded_bytes` — so a file with huge factors is refused
    /// before anything large is allocated. What [`crate::Engine::read_lora`] calls.
    ///
    /// Errors: as [`LoraAdapter::open`]; [`EngineError::Adapter`] naming the tensor, the
    /// adapter's and the model's sizes, or the decoded size and the budget.
    pub fn open_for(path: impl AsRef<Path>, base: &LoraBase) -> Result<LoraAdapter> {
        let file = ModelFile::open(path.as_ref())?;
        Self::read(&file, Some(base))
    }

    /// As [`LoraAdapter::open`], from bytes held in memory (`name` names them in errors).
    ///
    /// Errors: as [`LoraAdapter::open`].
    pub fn from_bytes(name: impl AsRef<Path>, bytes: &[u8]) -> Result<LoraAdapter> {
        let file = ModelFile::from_bytes(name.as_ref(), bytes)?;
        Self::from_file(&file)
    }

    /// As [`LoraAdapter::open_for`], from bytes held in memory.
    ///
    /// Errors: as [`LoraAdapter::open_for`].
    pub fn from_bytes_for(
        name: impl AsRef<Path>,
        bytes: &[u8],
        base: &LoraBase,
    ) -> Result<LoraAdapter> {
        let file = ModelFile::from_bytes(name.as_ref(), bytes)?;
        Self::read(&file, Some(base))
    }

    /// As [`LoraAdapter::open`], from a file already mapped.
    ///
    /// Errors: as [`LoraAdapter::open`].
    pub fn from_file(file: &ModelFile) -> Result<LoraAdapter> {
        Self::read(file, None)
    }

    /// As [`LoraAdapter::open_for`], from a file already mapped.
    ///
    /// Errors: as [`LoraAdapter::open_for`].
    pub fn from_file_for(file: &ModelFile, base: &LoraBase) -> Result<LoraAdapter> {
        Self::read(file, Some(base))
    }

    fn read(file: &ModelFile, base: Option<&LoraBase>) -> Result<LoraAdapter> {
        let name = display_name(file.path());
        let err = |what: String| EngineError::Adapter {
            name: name.clone(),
            what,
        };
        let (format, alpha) = match file.format() {
            FileFormat::Gguf => (AdapterFormat::Gguf, gguf_header(file, &err)?),
            FileFormat::SafeTensors => (AdapterFormat::SafeTensors, safetensors_alpha(file, &err)?),
            FileFormat::Pth => (AdapterFormat::Pth, None),
        };
        if let Some(t) = [
            "emb.weight",
            "token_embd.weight",
            "head.weight",
            "blocks.0.att.key.weight",
        ]
        .into_iter()
        .find(|t| file.has(t))
        {
            return Err(err(format!(
                "holds `{t}`: this is a base model, not a LoRA adapter"
            )));
        }
        if let Some(a) = alpha {
            if !a.is_finite() {
                return Err(err(format!("alpha {a} is not finite")));
            }
        }
        let plans = plan(file, format, base, &err)?;
        let mut matrices = Vec::new();
        matrices
            .try_reserve_exact(plans.len())
            .map_err(|_| err(format!("no memory for {} matrices", plans.len())))?;
        let decode = |t: &TensorInfo| -> Result<Vec<f32>> {
            let view = file.tensor(&t.name)?;
            let n = view.numel();
            let mut v = Vec::new();
            v.try_reserve_exact(n)
                .map_err(|_| err(format!("`{}`: no memory to decode {n} values", t.name)))?;
            v.resize(n, 0.0);
            crate::quant::dequantize(view.dtype, view.bytes, &mut v)
                .map_err(|e| err(format!("`{}`: {e}", t.name)))?;
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(err(format!(
                    "`{}` holds a non-finite value ({}) at element {i}",
                    t.name, v[i]
                )));
            }
            Ok(v)
        };
        for p in plans {
            matrices.push(LoraMatrix {
                layer: p.layer,
                target: p.target,
                rank: p.rank,
                n_in: p.n_in,
                n_out: p.n_out,
                a: decode(p.a)?,
                b: decode(p.b)?,
            });
        }
        Ok(LoraAdapter {
            name,
            format,
            alpha,
            matrices,
        })
    }
}

/// Pairs the factors up and checks every pair — names, shapes, ranks, encodings and, with
/// `base`, layers, sizes and the decoded total — before any factor is decoded.
fn plan<'f>(
    file: &'f ModelFile,
    format: AdapterFormat,
    base: Option<&LoraBase>,
    err: &dyn Fn(String) -> EngineError,
) -> Result<Vec<Planned<'f>>> {
    let pairs = factor_pairs(file, format, err)?;
    let mut plans = Vec::with_capacity(pairs.len());
    let mut decoded: u64 = 0;
    for ((layer, target), pair) in pairs {
        let (a, b) = match pair {
            (Some(a), Some(b)) => (a, b),
            (Some(one), None) | (None, Some(one)) => {
                return Err(err(format!(
                    "`{}` has no matching {} factor",
                    one.name,
                    if pair.0.is_some() { "B" } else { "A" }
                )))
            }
            (None, None) => continue,
        };
        let (rank, n_in, n_out) = check_pair(layer, target, a, b, base, err)?;
        // rank ≤ min(n_in, n_out) and both are tensor dimensions that fit the file: exact.
        decoded = decoded.saturating_add(4 * (rank * n_in + n_out * rank) as u64);
        plans.push(Planned {
            layer,
            target,
            rank,
            n_in,
            n_out,
            a,
            b,
        });
    }
    if let Some(base) = base {
        if decoded > base.max_decoded_bytes() {
            return Err(err(format!(
                "its factors decode to {decoded} bytes of f32, more than the {} allowed beside \
                 the base model (the model file's {} bytes + {} MiB)",
                base.max_decoded_bytes(),
                base.model_file_bytes,
                super::LORA_HEADROOM_BYTES >> 20
            )));
        }
    }
    Ok(plans)
}

/// A LoRA site's factors as found: (A, B), either possibly missing.
type Pair<'t> = (Option<&'t TensorInfo>, Option<&'t TensorInfo>);

/// The file's tensors paired by site (layer, target); a tensor that is not a LoRA factor
/// this engine applies, or a file with none, is an error naming it.
fn factor_pairs<'f>(
    file: &'f ModelFile,
    format: AdapterFormat,
    err: &dyn Fn(String) -> EngineError,
) -> Result<BTreeMap<(usize, LoraTarget), Pair<'f>>> {
    let mut pairs: BTreeMap<(usize, LoraTarget), Pair<'_>> = BTreeMap::new();
    for t in file.tensors() {
        let parsed = match format {
            AdapterFormat::Gguf => parse_gguf(&t.name),
            _ => parse_peft(&t.name),
        };
        let Some((layer, target, factor)) = parsed else {
            let expected = match format {
                AdapterFormat::Gguf => "`blk.N.<time_mix_{receptance,key,value,output}|channel_mix_{key,value}>.weight.lora_a/lora_b`",
                _ => "`blocks.N.att.{receptance,key,value,output}.lora_A/lora_B` or `blocks.N.ffn.{key,value}.lora_A/lora_B`",
            };
            return Err(err(format!(
                "tensor `{}` is not a LoRA factor this engine applies (expected {expected}){}",
                t.name,
                stray_hint(&t.name)
            )));
        };
        let slot = pairs.entry((layer, target)).or_default();
        match factor {
            Factor::A => slot.0 = Some(t),
            Factor::B => slot.1 = Some(t),
        }
    }
    if pairs.is_empty() {
        return Err(err("holds no LoRA tensors".into()));
    }
    Ok(pairs)
}

/// The (rank, n_in, n_out) of the factors `a` `[r, in]` and `b` `[out, r]` of site
/// (`layer`, `target`), each checked: matrices of one rank, no empty dimension, a type
/// the engine reads, a rank within min(in, out), and (with a base) a layer and shape the
/// base has.
fn check_pair(
    layer: usize,
    target: LoraTarget,
    a: &TensorInfo,
    b: &TensorInfo,
    base: Option<&LoraBase>,
    err: &dyn Fn(String) -> EngineError,
) -> Result<(usize, usize, usize)> {
    let (&[rank, n_in], &[n_out, rank_b]) = (a.shape.as_slice(), b.shape.as_slice()) else {
        return Err(err(format!(
            "`{}` is {:?} and `{}` is {:?}: LoRA factors are matrices (A [r, in], B [out, r])",
            a.name, a.shape, b.name, b.shape
        )));
    };
    if rank != rank_b {
        return Err(err(format!(
            "rank mismatch: `{}` is [{rank}, {n_in}] (rank {rank}) but `{}` is [{n_out}, {rank_b}] (rank {rank_b})",
            a.name, b.name
        )));
    }
    if rank == 0 || n_in == 0 || n_out == 0 {
        return Err(err(format!(
            "`{}` / `{}` have an empty dimension ([{rank}, {n_in}], [{n_out}, {rank_b}])",
            a.name, b.name
        )));
    }
    if let Some(t) = [a, b]
        .into_iter()
        .find(|t| !FACTOR_TYPES.contains(&t.dtype))
    {
        return Err(err(format!(
            "`{}` is {}: LoRA factors are read as F32, F16, BF16 or Q8_0",
            t.name, t.dtype
        )));
    }
    // A rank past min(n_in, n_out) adds nothing a full-rank delta does not, and only
    // makes the factors larger than the matrix they adapt.
    if rank > n_in.min(n_out) {
        return Err(err(format!(
            "`{}`: rank {rank} exceeds min(n_in, n_out) = {} of a {n_out}×{n_in} matrix",
            a.name,
            n_in.min(n_out)
        )));
    }
    let t = format!("blocks.{layer}.{}", target.name());
    if let Some(base) = base {
        let cfg = base.config;
        if layer >= cfg.n_layer {
            return Err(err(format!(
                "`{t}`: layer {layer} but the model has {} layers",
                cfg.n_layer
            )));
        }
        let (m_out, m_in) = target.shape(cfg);
        if (n_out, n_in) != (m_out, m_in) {
            return Err(err(format!(
                "`{t}`: the adapter is for a {n_out}×{n_in} matrix, the model's is {m_out}×{m_in}"
            )));
        }
    }
    Ok((rank, n_in, n_out))
}

/// Checks a GGUF adapter's header keys; returns `adapter.lora.alpha` (0 or absent = none,
/// as llama.cpp treats it).
fn gguf_header(file: &ModelFile, err: &dyn Fn(String) -> EngineError) -> Result<Option<f32>> {
    let s = |k: &str| file.meta(k).and_then(MetaValue::as_str);
    match s("general.type") {
        Some("adapter") => {}
        other => {
            let base = file.has("token_embd.weight") || other == Some("model");
            return Err(err(format!(
                "GGUF general.type is {}, not \"adapter\"{}",
                other.map_or_else(|| "absent".to_string(), |t| format!("{t:?}")),
                if base {
                    " — this is a base model, not a LoRA adapter"
                } else {
                    ""
                }
            )));
        }
    }
    match s("adapter.type") {
        Some("lora") => {}
        other => {
            return Err(err(format!(
                "GGUF adapter.type is {}, not \"lora\" (control vectors and other adapters are not LoRA)",
                other.map_or_else(|| "absent".to_string(), |t| format!("{t:?}"))
            )))
        }
    }
    match s("general.architecture") {
        Some("rwkv7") | None => {}
        Some(a) => {
            return Err(err(format!(
                "GGUF adapter is for architecture {a:?}, not \"rwkv7\""
            )))
        }
    }
    match file.meta("adapter.lora.alpha") {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            // llama.cpp writes 0 when the converter had no alpha: "none".
            Some(a) => Ok((a != 0.0).then_some(a as f32)),
            None => Err(err(format!("adapter.lora.alpha is {v:?}, not a number"))),
        },
    }
}

/// Alpha from a SafeTensors `__metadata__` entry `lora_alpha` or `alpha`, if any.
fn safetensors_alpha(file: &ModelFile, err: &dyn Fn(String) -> EngineError) -> Result<Option<f32>> {
    for key in ["lora_alpha", "alpha"] {
        if let Some(v) = file.meta(key).and_then(MetaValue::as_str) {
            return v
                .trim()
                .parse::<f32>()
                .map(Some)
                .map_err(|_| err(format!("__metadata__ `{key}` is {v:?}, not a number")));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(
            parse_peft("blocks.3.att.key.lora_A"),
            Some((3, LoraTarget::Key, Factor::A))
        );
        assert_eq!(
            parse_peft("blocks.0.ffn.value.lora_B"),
            Some((0, LoraTarget::FfnValue, Factor::B))
        );
        assert_eq!(
            parse_gguf("blk.12.channel_mix_key.weight.lora_a"),
            Some((12, LoraTarget::FfnKey, Factor::A))
        );
        assert_eq!(
            parse_gguf("blk.1.time_mix_output.weight.lora_b"),
            Some((1, LoraTarget::Output, Factor::B))
        );
        for bad in [
            "blocks.01.att.key.lora_A",
            "blocks.-1.att.key.lora_A",
            "blocks.1.att.gate.lora_A",
            "blocks.1.att.key.lora_C",
            "blocks.1.att.key.weight",
            "blk.1.time_mix_key.weight.lora_a",
            "blocks.99999.att.key.lora_A",
        ] {
            assert_eq!(parse_peft(bad), None, "{bad}");
        }
        assert_eq!(parse_gguf("blocks.1.att.key.lora_A"), None);
        assert_eq!(parse_gguf("blk.1.time_mix_key.lora_a"), None);
    }
}
