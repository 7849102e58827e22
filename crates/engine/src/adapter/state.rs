//! Reading RWKV-PEFT state-tuning files: `blocks.N.att.time_state` `[H, N, N]` for every
//! layer `N` (`.pth` or `.safetensors`, F32 / F16 / BF16).
//!
//! Orientation: RWKV-PEFT's `RWKV_Tmix_x070_State` passes `time_state` to its WKV kernels
//! as the initial state. Its fla path (`rwkvt/operator/rwkvop.py`, `RUN_RWKV7_STATE`) hands
//! `time_state.transpose(1, 2)` to `chunk_rwkv7`, whose states are `[K, V]` (key rows), so
//! `time_state[h][i][j]` pairs value `i` with key `j`; its Triton path updates
//! `state += v^T (k·w)` with value rows likewise. That is the `rwkv` package's `RWKV_x070`
//! orientation (`state[h] += v.view(N,1) @ k.view(1,N)`), which the engine shares: the
//! values are taken as stored, no transpose. (RWKV-6 state files are the other way round
//! against the RWKV-6 package, which is why ChatRWKV transposes those; it does not apply
//! here.) `tests/fixtures/adapters` checks the engine from such a state against the `rwkv`
//! package started from the same state.

use std::path::Path;

use super::read::display_name;
use super::{AdapterFormat, InitState};
use crate::error::{EngineError, Result};
use crate::format::{FileFormat, ModelFile};

impl InitState {
    /// Reads a RWKV-PEFT state file: exactly the tensors `blocks.0.att.time_state` …
    /// `blocks.{L-1}.att.time_state`, each `[H, N, N]` with the same `H` and `N`, values
    /// decoded to f32 and finite.
    ///
    /// Errors: [`EngineError::Io`] / [`EngineError::Malformed`] (unreadable, truncated or
    /// corrupt container, naming the file), [`EngineError::UnsupportedType`], and
    /// [`EngineError::Adapter`] naming the file and tensor for: a GGUF file, a LoRA adapter
    /// or a base model passed as a state, any other tensor, a missing layer, shapes that
    /// are not `[H, N, N]` or differ between layers, non-finite values.
    pub fn open(path: impl AsRef<Path>) -> Result<InitState> {
        let file = ModelFile::open(path.as_ref())?;
        Self::from_file(&file)
    }

    /// As [`InitState::open`], from bytes held in memory (`name` names them in errors).
    ///
    /// Errors: as [`InitState::open`].
    pub fn from_bytes(name: impl AsRef<Path>, bytes: &[u8]) -> Result<InitState> {
        let file = ModelFile::from_bytes(name.as_ref(), bytes)?;
        Self::from_file(&file)
    }

    /// As [`InitState::open`], from a file already mapped.
    ///
    /// Errors: as [`InitState::open`].
    pub fn from_file(file: &ModelFile) -> Result<InitState> {
        let name = display_name(file.path());
        let err = |what: String| EngineError::Adapter {
            name: name.clone(),
            what,
        };
        let format = match file.format() {
            FileFormat::Pth => AdapterFormat::Pth,
            FileFormat::SafeTensors => AdapterFormat::SafeTensors,
            FileFormat::Gguf => {
                let what = if file.meta("general.type").and_then(|v| v.as_str()) == Some("adapter")
                {
                    "a GGUF LoRA adapter, not an initial state: load it as a LoRA (--lora)"
                } else {
                    "a GGUF file, not an initial state (RWKV-PEFT state files are .pth or .safetensors with `blocks.N.att.time_state`)"
                };
                return Err(err(what.into()));
            }
        };
        if let Some(t) = ["emb.weight", "token_embd.weight", "head.weight"]
            .into_iter()
            .find(|t| file.has(t))
        {
            return Err(err(format!(
                "holds `{t}`: this is a model, not an initial state"
            )));
        }
        if let Some(t) = file.tensors().iter().find(|t| t.name.contains(".lora_")) {
            return Err(err(format!(
                "holds `{}`: this is a LoRA adapter, not an initial state: load it as a LoRA (--lora)",
                t.name
            )));
        }
        let n_layer = file.tensors().len();
        if n_layer == 0 {
            return Err(err("holds no tensors".into()));
        }
        for t in file.tensors() {
            let ok = t
                .name
                .strip_prefix("blocks.")
                .and_then(|r| r.strip_suffix(".att.time_state"))
                .and_then(|l| l.parse::<usize>().ok())
                .is_some_and(|l| l < n_layer && t.name == format!("blocks.{l}.att.time_state"));
            if !ok {
                let hint = if t.name.ends_with("att.time_state") {
                    " (layers must be numbered 0 to L-1 without gaps)"
                } else {
                    ""
                };
                return Err(err(format!(
                    "tensor `{}` is not `blocks.N.att.time_state` for N in 0..{n_layer}{hint}",
                    t.name
                )));
            }
        }
        let first = file.tensor("blocks.0.att.time_state")?;
        let (h, n) = match *first.shape {
            [h, n, n2] if n == n2 && h > 0 && n > 0 => (h, n),
            _ => {
                return Err(err(format!(
                    "`blocks.0.att.time_state` is {:?}, not [H, N, N]",
                    first.shape
                )))
            }
        };
        let per = h * n * n;
        // Every layer's tensor exists with this shape, so the file bounds the size; the
        // reservation can still fail, and then it is an error, not an abort.
        let mut wkv = Vec::new();
        wkv.try_reserve_exact(per.saturating_mul(n_layer))
            .map_err(|_| err(format!("no memory for {n_layer} layers of [{h}, {n}, {n}]")))?;
        for l in 0..n_layer {
            let tname = format!("blocks.{l}.att.time_state");
            let v = file.tensor(&tname)?;
            if v.shape != [h, n, n] {
                return Err(err(format!(
                    "`{tname}` is {:?} but `blocks.0.att.time_state` is [{h}, {n}, {n}]",
                    v.shape
                )));
            }
            let vals = crate::quant::dequantize_to_vec(v.dtype, v.bytes, per)
                .map_err(|e| err(format!("`{tname}`: {e}")))?;
            if let Some(i) = vals.iter().position(|x| !x.is_finite()) {
                return Err(err(format!(
                    "`{tname}` holds a non-finite value ({}) at element {i}",
                    vals[i]
                )));
            }
            wkv.extend_from_slice(&vals);
        }
        Ok(InitState {
            name,
            format,
            n_layer,
            n_head: h,
            head_size: n,
            wkv,
        })
    }
}
