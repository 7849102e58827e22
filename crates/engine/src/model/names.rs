//! Tensor-name mapping to [`Rwkv7Weights`]: GGUF names (llama.cpp's converter) and BlinkDL
//! names (RWKV-LM `.pth`, SafeTensors), every shape declared and checked.
//!
//! | BlinkDL (`.pth`, SafeTensors)           | GGUF (llama.cpp)                         | notes |
//! |-----------------------------------------|------------------------------------------|-------|
//! | `emb.weight` `[V, C]`                   | `token_embd.weight` ne `[C, V]`          | |
//! | `blocks.0.ln0.{weight,bias}`            | `token_embd_norm.{weight,bias}`          | |
//! | `blocks.N.ln1` / `ln2`                  | `blk.N.attn_norm` / `attn_norm_2`        | |
//! | `blocks.N.att.x_{r,w,k,v,a,g}` `[1,1,C]`| `blk.N.time_mix_lerp_fused.weight` ne `[C,1,1,6]` | stacked r,w,k,v,a,g |
//! | `att.{w0,a0,v0,k_k,k_a}` `[1,1,C]`      | `time_mix_{w0,a0,v0,k_k,k_a}.weight` `[C]` | |
//! | `att.r_k` `[H, N]`                      | `time_mix_r_k.weight` `[C]`              | flattened |
//! | `att.{w,a,v,g}1` `[C, D]` (InOut)       | `time_mix_{w,a,v,g}1.weight` ne `[C, D]` (OutIn `[D, C]`) | |
//! | `att.{w,a,v,g}2` `[D, C]` (InOut)       | `time_mix_{w,a,v,g}2.weight` ne `[D, C]` (OutIn `[C, D]`) | |
//! | `att.{receptance,key,value,output}.weight` `[C, C]` | `time_mix_{receptance,key,value,output}.weight` | |
//! | `att.ln_x.{weight,bias}`                | `time_mix_ln.{weight,bias}`              | GroupNorm |
//! | `ffn.x_k` `[1,1,C]`                     | `channel_mix_lerp_k.weight` `[C]`        | |
//! | `ffn.key.weight` `[F, C]`, `ffn.value.weight` `[C, F]` | `channel_mix_key` / `channel_mix_value` | |
//! | `ln_out`, `head.weight` `[V, C]`        | `output_norm`, `output.weight`           | |
//!
//! Shapes above are row-major (outermost first), as in [`crate::format::TensorInfo`],
//! except where "ne" gives GGUF's order. Layer 0's `v0/v1/v2` are dummies in both
//! namings (layer 0 makes `v_first` instead) and map to `None`.
//!
//! The config comes from the shapes and, for GGUF, from the `rwkv7.*` metadata; the two
//! are cross-checked: every tensor is checked against the config, so a disagreement is an
//! [`EngineError::Shape`] naming the tensor.

use std::path::PathBuf;

use crate::config::{LoraRanks, Rwkv7Config, HEAD_SIZE, MAX_LAYERS};
use crate::error::{EngineError, Result};
use crate::format::{DType, FileFormat, ModelFile, TensorView};
use crate::model::weights::{
    Block, ChannelMix, Matrix, MatrixLayout, Norm, Rwkv7Weights, TimeMix, Vector,
};

/// Which tensor names a file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp's GGUF names (`token_embd.weight`, `blk.N.time_mix_*`).
    Gguf,
    /// BlinkDL's names (`emb.weight`, `blocks.N.att.*`).
    BlinkDl,
}

/// The naming `file` uses, if either: `token_embd.weight` → GGUF, `emb.weight` → BlinkDL.
pub fn naming(file: &ModelFile) -> Option<Naming> {
    if file.has("token_embd.weight") {
        Some(Naming::Gguf)
    } else if file.has("emb.weight") {
        Some(Naming::BlinkDl)
    } else {
        None
    }
}

impl<'a> Rwkv7Weights<'a> {
    /// Maps `file`'s tensors (GGUF names or BlinkDL names) to the typed description,
    /// inferring the config from shapes and metadata and checking every shape.
    ///
    /// Errors: [`crate::EngineError::NotRwkv7`], [`crate::EngineError::MissingTensor`],
    /// [`crate::EngineError::Shape`], [`crate::EngineError::UnsupportedType`], each
    /// naming the file and the tensor.
    pub fn from_file(file: &'a ModelFile) -> Result<Self> {
        map_rwkv7(file)
    }
}

/// Maps `file`'s tensors to the typed RWKV-7 description (views into the mapping; nothing
/// is copied or decoded).
///
/// Errors, each naming the file: [`EngineError::NotRwkv7`] (GGUF `general.architecture`
/// other than `rwkv7`, neither naming present, an RWKV-4/5/6 checkpoint, unusable
/// metadata), [`EngineError::MissingTensor`], [`EngineError::Shape`] (naming the tensor,
/// expected and got), [`EngineError::UnsupportedType`] (a vector not F32/F16/BF16).
fn map_rwkv7(file: &ModelFile) -> Result<Rwkv7Weights<'_>> {
    let path = file.path().to_path_buf();
    let not_rwkv7 = |what: String| EngineError::NotRwkv7 {
        path: path.clone(),
        what,
    };
    if file.format() == FileFormat::Gguf {
        match file.meta("general.architecture") {
            Some(v) if v.as_str() == Some("rwkv7") => {}
            Some(v) => {
                return Err(not_rwkv7(format!(
                    "general.architecture is {}, not \"rwkv7\"",
                    v.as_str()
                        .map_or_else(|| format!("{v:?}"), |s| format!("{s:?}"))
                )))
            }
            None => return Err(not_rwkv7("the GGUF has no general.architecture".into())),
        }
    }
    let naming = naming(file).ok_or_else(|| {
        not_rwkv7("neither `emb.weight` (BlinkDL) nor `token_embd.weight` (GGUF) is present".into())
    })?;
    if naming == Naming::BlinkDl && !file.has("blocks.0.att.k_k") {
        let hint = if file.has("blocks.0.att.time_maa_x") {
            " (it looks like RWKV-6: `att.time_maa_x`)"
        } else if file.has("blocks.0.att.time_mix_k") {
            " (it looks like RWKV-4/5: `att.time_mix_k`)"
        } else {
            ""
        };
        return Err(not_rwkv7(format!(
            "no `blocks.0.att.k_k`: not an RWKV-7 (x070) checkpoint{hint}"
        )));
    }
    let m = Mapper { file, path, naming };
    let config = m.config()?;
    m.weights(config)
}

struct Mapper<'a> {
    file: &'a ModelFile,
    path: PathBuf,
    naming: Naming,
}

/// Tensor names of one layer, in either naming.
struct Names {
    naming: Naming,
    layer: usize,
}

impl Names {
    fn ln(&self, which: u8, part: &str) -> String {
        match (self.naming, which) {
            (Naming::Gguf, 1) => format!("blk.{}.attn_norm.{part}", self.layer),
            (Naming::Gguf, _) => format!("blk.{}.attn_norm_2.{part}", self.layer),
            (Naming::BlinkDl, w) => format!("blocks.{}.ln{w}.{part}", self.layer),
        }
    }
    /// Time-mix tensor `field` (BlinkDL spelling: `w0`, `receptance.weight`, `ln_x.bias`…).
    fn att(&self, field: &str) -> String {
        let i = self.layer;
        match self.naming {
            Naming::BlinkDl => format!("blocks.{i}.att.{field}"),
            Naming::Gguf => match field {
                "ln_x.weight" => format!("blk.{i}.time_mix_ln.weight"),
                "ln_x.bias" => format!("blk.{i}.time_mix_ln.bias"),
                f => format!("blk.{i}.time_mix_{}.weight", f.trim_end_matches(".weight")),
            },
        }
    }
    fn ffn(&self, field: &str) -> String {
        let i = self.layer;
        match (self.naming, field) {
            (Naming::BlinkDl, f) => format!("blocks.{i}.ffn.{f}"),
            (Naming::Gguf, "x_k") => format!("blk.{i}.channel_mix_lerp_k.weight"),
            (Naming::Gguf, f) => format!(
                "blk.{i}.channel_mix_{}.weight",
                f.trim_end_matches(".weight")
            ),
        }
    }
}

impl<'a> Mapper<'a> {
    fn names(&self, layer: usize) -> Names {
        Names {
            naming: self.naming,
            layer,
        }
    }

    fn emb_name(&self) -> &'static str {
        match self.naming {
            Naming::Gguf => "token_embd.weight",
            Naming::BlinkDl => "emb.weight",
        }
    }

    fn shape_err(&self, tensor: &str, expected: &[usize], got: &[usize]) -> EngineError {
        EngineError::Shape {
            path: self.path.clone(),
            tensor: tensor.to_string(),
            expected: expected.to_vec(),
            got: got.to_vec(),
        }
    }

    fn not_rwkv7(&self, what: String) -> EngineError {
        EngineError::NotRwkv7 {
            path: self.path.clone(),
            what,
        }
    }

    fn view(&self, name: &str) -> Result<TensorView<'a>> {
        self.file.tensor(name)
    }

    /// A GGUF `rwkv7.*` integer, if present (always `None` for other formats).
    fn meta_usize(&self, key: &str) -> Result<Option<usize>> {
        if self.file.format() != FileFormat::Gguf {
            return Ok(None);
        }
        match self.file.meta(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| self.not_rwkv7(format!("metadata `{key}` is {v:?}, not a size"))),
        }
    }

    /// A dimension from metadata if present, else from `fallback` (a tensor's shape).
    fn dim(&self, key: &str, fallback: impl FnOnce() -> Result<usize>) -> Result<usize> {
        match self.meta_usize(key)? {
            Some(v) => Ok(v),
            None => fallback(),
        }
    }

    /// `shape[axis]` of tensor `name`, requiring rank `rank`.
    fn axis(&self, name: &str, rank: usize, axis: usize) -> Result<usize> {
        let v = self.view(name)?;
        if v.shape.len() != rank {
            // Report the expected rank with this tensor's own sizes where they exist.
            let mut expected = vec![0; rank];
            for (e, g) in expected.iter_mut().zip(v.shape) {
                *e = *g;
            }
            return Err(self.shape_err(name, &expected, v.shape));
        }
        Ok(v.shape[axis])
    }

    /// Infers the config from shapes and (GGUF) metadata.
    fn config(&self) -> Result<Rwkv7Config> {
        let gguf = self.naming == Naming::Gguf;
        let emb = self.emb_name();
        let vocab_size = self.axis(emb, 2, 0)?;
        let n_embd = self.dim("rwkv7.embedding_length", || self.axis(emb, 2, 1))?;

        let counted = (0..MAX_LAYERS)
            .take_while(|&i| self.file.has(&self.names(i).ln(1, "weight")))
            .count();
        let n_layer = self.dim("rwkv7.block_count", || Ok(counted))?;
        if n_layer == 0 || n_layer > MAX_LAYERS {
            return Err(self.not_rwkv7(format!("{n_layer} layers (1 to {MAX_LAYERS} allowed)")));
        }
        let extra = self.names(n_layer).ln(1, "weight");
        if self.file.has(&extra) {
            return Err(self.not_rwkv7(format!(
                "rwkv7.block_count is {n_layer} but the file also has `{extra}`"
            )));
        }

        let head_size = self.dim("rwkv7.wkv.head_size", || {
            if gguf {
                Ok(HEAD_SIZE)
            } else {
                self.axis(&self.names(0).att("r_k"), 2, 1)
            }
        })?;
        if head_size == 0 || n_embd % head_size != 0 {
            return Err(self.not_rwkv7(format!(
                "embedding width {n_embd} is not a multiple of head size {head_size}"
            )));
        }
        let l0 = self.names(0);
        let ffn_dim = self.dim("rwkv7.feed_forward_length", || {
            self.axis(&l0.ffn("key.weight"), 2, 0)
        })?;
        // Low-rank sizes: GGUF stores `x1` as [D, C] (OutIn), BlinkDL as [C, D] (InOut);
        // web-rwkv's converted SafeTensors keep BlinkDL names with [D, C]. The rank is the
        // axis that is not C.
        let rank = |key: &str, name: String| {
            self.dim(key, || {
                let (a, b) = (self.axis(&name, 2, 0)?, self.axis(&name, 2, 1)?);
                Ok(if gguf || b == n_embd { a } else { b })
            })
        };
        // Layer 0's v1 is a dummy (a copy of a1 in GGUF): take the value rank from layer 1.
        let v_layer = if n_layer > 1 { 1 } else { 0 };
        let lora = LoraRanks {
            decay_w: rank("rwkv7.attention.decay_lora_rank", l0.att("w1"))?,
            iclr_a: rank("rwkv7.attention.iclr_lora_rank", l0.att("a1"))?,
            value_v: rank(
                "rwkv7.attention.value_residual_mix_lora_rank",
                self.names(v_layer).att("v1"),
            )?,
            gate_g: rank("rwkv7.attention.gate_lora_rank", l0.att("g1"))?,
        };
        Ok(Rwkv7Config {
            n_layer,
            n_embd,
            head_size,
            n_head: n_embd / head_size,
            ffn_dim,
            vocab_size,
            lora,
        })
    }

    /// Matrix `name` with `y = W x`, `x` of `n_in`, `y` of `n_out`, stored with `layout`
    /// (expected shape `[n_out, n_in]` for OutIn, `[n_in, n_out]` for InOut).
    fn matrix(
        &self,
        name: &str,
        n_out: usize,
        n_in: usize,
        layout: MatrixLayout,
    ) -> Result<Matrix<'a>> {
        let v = self.view(name)?;
        let expected = match layout {
            MatrixLayout::OutIn => [n_out, n_in],
            MatrixLayout::InOut => [n_in, n_out],
        };
        if v.shape != expected {
            return Err(self.shape_err(name, &expected, v.shape));
        }
        if layout == MatrixLayout::InOut && v.dtype.is_quantized() {
            // Quantization blocks run along the stored rows; an InOut block matrix would
            // need a transpose through f32, which nothing writes.
            return Err(self.unsupported(name, v.dtype, "a block-quantized [in, out] matrix"));
        }
        Ok(Matrix {
            name: v.name,
            dtype: v.dtype,
            n_out,
            n_in,
            layout,
            bytes: v.bytes,
        })
    }

    /// The usual low-rank / square / FFN matrix: GGUF stores everything OutIn; BlinkDL's
    /// low-rank `x1`/`x2` are InOut, its `nn.Linear` weights OutIn.
    fn lora(&self, name: &str, n_out: usize, n_in: usize) -> Result<Matrix<'a>> {
        let layout = match self.naming {
            Naming::Gguf => MatrixLayout::OutIn,
            // BlinkDL's own files are [in, out]; web-rwkv's converter transposes them to
            // [out, in]. Square low-rank matrices cannot be told apart: BlinkDL's order.
            Naming::BlinkDl => match self.view(name) {
                Ok(v) if n_in != n_out && v.shape == [n_out, n_in] => MatrixLayout::OutIn,
                _ => MatrixLayout::InOut,
            },
        };
        self.matrix(name, n_out, n_in, layout)
    }

    fn unsupported(&self, name: &str, dtype: DType, why: &str) -> EngineError {
        EngineError::UnsupportedType {
            path: self.path.clone(),
            tensor: name.to_string(),
            dtype: format!("{dtype} ({why})"),
        }
    }

    /// Vector `name` of `len` elements, F32/F16/BF16. Accepted shapes: `[len]`, `len` with
    /// leading 1s (`[1, 1, len]`), or any of `also`. `canonical` is what errors report.
    fn vector(
        &self,
        name: &str,
        len: usize,
        canonical: &[usize],
        also: &[&[usize]],
    ) -> Result<Vector<'a>> {
        let v = self.view(name)?;
        let squeezed: &[usize] = {
            let lead = v
                .shape
                .iter()
                .take_while(|&&d| d == 1)
                .count()
                .min(v.shape.len().saturating_sub(1));
            &v.shape[lead..]
        };
        if squeezed != [len] && !also.contains(&v.shape) {
            return Err(self.shape_err(name, canonical, v.shape));
        }
        if v.dtype.is_quantized() {
            return Err(self.unsupported(name, v.dtype, "vectors must be F32, F16 or BF16"));
        }
        Ok(Vector {
            name: v.name.to_string(),
            dtype: v.dtype,
            len,
            bytes: v.bytes,
        })
    }

    /// A `[C]` vector in the naming's usual shape (`[1, 1, C]` for BlinkDL's mixes).
    fn vec_c(&self, name: &str, c: usize, blink_3d: bool) -> Result<Vector<'a>> {
        if blink_3d && self.naming == Naming::BlinkDl {
            self.vector(name, c, &[1, 1, c], &[])
        } else {
            self.vector(name, c, &[c], &[])
        }
    }

    fn norm(&self, weight: String, bias: String, c: usize) -> Result<Norm<'a>> {
        Ok(Norm {
            weight: self.vec_c(&weight, c, false)?,
            bias: self.vec_c(&bias, c, false)?,
        })
    }

    /// GGUF's `time_mix_lerp_fused` ne `[C, 1, 1, 6]`: the six mixes r, w, k, v, a, g.
    fn fused_lerp(&self, name: &str, c: usize) -> Result<[Vector<'a>; 6]> {
        let v = self.view(name)?;
        let canonical = [6, 1, 1, c];
        if v.shape != canonical && v.shape != [6, c] {
            return Err(self.shape_err(name, &canonical, v.shape));
        }
        if v.dtype.is_quantized() {
            return Err(self.unsupported(name, v.dtype, "vectors must be F32, F16 or BF16"));
        }
        let es = v.dtype.block_bytes();
        let part = |k: usize| -> Result<Vector<'a>> {
            let bytes = v
                .bytes
                .get(k * c * es..(k + 1) * c * es)
                .ok_or_else(|| self.shape_err(name, &canonical, v.shape))?;
            Ok(Vector {
                name: format!("{name}[{k}]"),
                dtype: v.dtype,
                len: c,
                bytes,
            })
        };
        Ok([part(0)?, part(1)?, part(2)?, part(3)?, part(4)?, part(5)?])
    }

    fn weights(&self, config: Rwkv7Config) -> Result<Rwkv7Weights<'a>> {
        let c = config.n_embd;
        let v = config.vocab_size;
        let f = config.ffn_dim;
        let r = config.lora;
        let (h, n) = (config.n_head, config.head_size);
        let gguf = self.naming == Naming::Gguf;

        let emb = self.matrix(self.emb_name(), v, c, MatrixLayout::OutIn)?;
        let ln0 = if gguf {
            self.norm(
                "token_embd_norm.weight".into(),
                "token_embd_norm.bias".into(),
                c,
            )?
        } else {
            self.norm("blocks.0.ln0.weight".into(), "blocks.0.ln0.bias".into(), c)?
        };

        let mut blocks = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let nm = self.names(i);
            let ln1 = self.norm(nm.ln(1, "weight"), nm.ln(1, "bias"), c)?;
            let ln2 = self.norm(nm.ln(2, "weight"), nm.ln(2, "bias"), c)?;

            let [x_r, x_w, x_k, x_v, x_a, x_g] = if gguf {
                self.fused_lerp(&format!("blk.{i}.time_mix_lerp_fused.weight"), c)?
            } else {
                let x = |m: &str| self.vec_c(&nm.att(m), c, true);
                [
                    x("x_r")?,
                    x("x_w")?,
                    x("x_k")?,
                    x("x_v")?,
                    x("x_a")?,
                    x("x_g")?,
                ]
            };
            let (v0, v1, v2) = if i == 0 {
                (None, None, None)
            } else {
                (
                    Some(self.vec_c(&nm.att("v0"), c, true)?),
                    Some(self.lora(&nm.att("v1"), r.value_v, c)?),
                    Some(self.lora(&nm.att("v2"), c, r.value_v)?),
                )
            };
            let r_k_name = nm.att("r_k");
            let r_k = if gguf {
                self.vector(&r_k_name, c, &[c], &[&[h, n]])?
            } else {
                self.vector(&r_k_name, c, &[h, n], &[&[h, n]])?
            };
            let att = TimeMix {
                x_r,
                x_w,
                x_k,
                x_v,
                x_a,
                x_g,
                w0: self.vec_c(&nm.att("w0"), c, true)?,
                w1: self.lora(&nm.att("w1"), r.decay_w, c)?,
                w2: self.lora(&nm.att("w2"), c, r.decay_w)?,
                a0: self.vec_c(&nm.att("a0"), c, true)?,
                a1: self.lora(&nm.att("a1"), r.iclr_a, c)?,
                a2: self.lora(&nm.att("a2"), c, r.iclr_a)?,
                v0,
                v1,
                v2,
                g1: self.lora(&nm.att("g1"), r.gate_g, c)?,
                g2: self.lora(&nm.att("g2"), c, r.gate_g)?,
                k_k: self.vec_c(&nm.att("k_k"), c, true)?,
                k_a: self.vec_c(&nm.att("k_a"), c, true)?,
                r_k,
                receptance: self.matrix(&nm.att("receptance.weight"), c, c, MatrixLayout::OutIn)?,
                key: self.matrix(&nm.att("key.weight"), c, c, MatrixLayout::OutIn)?,
                value: self.matrix(&nm.att("value.weight"), c, c, MatrixLayout::OutIn)?,
                output: self.matrix(&nm.att("output.weight"), c, c, MatrixLayout::OutIn)?,
                ln_x: self.norm(nm.att("ln_x.weight"), nm.att("ln_x.bias"), c)?,
            };
            let ffn = ChannelMix {
                x_k: self.vec_c(&nm.ffn("x_k"), c, true)?,
                key: self.matrix(&nm.ffn("key.weight"), f, c, MatrixLayout::OutIn)?,
                value: self.matrix(&nm.ffn("value.weight"), c, f, MatrixLayout::OutIn)?,
            };
            blocks.push(Block { ln1, ln2, att, ffn });
        }

        let ln_out = if gguf {
            self.norm("output_norm.weight".into(), "output_norm.bias".into(), c)?
        } else {
            self.norm("ln_out.weight".into(), "ln_out.bias".into(), c)?
        };
        let head_name = if gguf { "output.weight" } else { "head.weight" };
        let head = self.matrix(head_name, v, c, MatrixLayout::OutIn)?;
        Ok(Rwkv7Weights {
            config,
            emb,
            ln0,
            blocks,
            ln_out,
            head,
        })
    }
}
