//! A synthetic model as llama.cpp writes RWKV-7 GGUF: its tensor table (names, shapes,
//! types, order), its metadata, and the streamed write.

use std::path::Path;
use std::time::Instant;

use rwkv_engine::format::MetaValue;
use rwkv_engine::{DType, Result, Rwkv7Config};

use crate::gguf_write::{GgufTensorSpec, GgufWriter};
use crate::init::{encode, stream_rows, Blink, Init};
use crate::vocab::world_gguf_tokens;
use crate::{threads, SynthOptions, SynthReport, SynthType};

/// Where a GGUF tensor's values come from.
#[derive(Debug, Clone)]
pub(crate) enum Src {
    /// A BlinkDL tensor with the same row-major element order.
    Same(Blink),
    /// A BlinkDL `[a, b]` LoRA matrix, stored transposed (`[b, a]` row-major).
    Transposed(Blink),
    /// `time_mix_lerp_fused`: x_r, x_w, x_k, x_v, x_a, x_g of one layer, stacked.
    LerpFused(Vec<Blink>),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) spec: GgufTensorSpec,
    pub(crate) src: Src,
}

/// Encoding of a big matrix with row length `ne0` under `ty` (llama.cpp's fallbacks for
/// rows that are not whole 256-blocks).
pub(crate) fn big_dtype(ty: SynthType, is_head: bool, ne0: usize) -> DType {
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
pub(crate) fn gguf_entries(cfg: &Rwkv7Config, ty: SynthType) -> Vec<Entry> {
    let m = Maker { cfg, ty };
    let (c, v) = (cfg.n_embd, cfg.vocab_size);
    let mut s = vec![
        m.big("output.weight", Blink::new("head.weight", &[v, c]), true),
        m.big(
            "token_embd.weight",
            Blink::new("emb.weight", &[v, c]),
            false,
        ),
    ];
    for i in 0..cfg.n_layer {
        layer_entries(&m, i, &mut s);
    }
    s.push(m.vector("output_norm.bias".into(), Blink::new("ln_out.bias", &[c])));
    s.push(m.vector(
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

/// Makes the entries of one model: its shape and the encoding of its big matrices.
struct Maker<'a> {
    cfg: &'a Rwkv7Config,
    ty: SynthType,
}

impl Maker<'_> {
    /// A big matrix (or the head) in the file's encoding of big matrices.
    fn big(&self, name: &str, src: Blink, is_head: bool) -> Entry {
        let ne0 = src.cols();
        let ne: Vec<u64> = src.shape.iter().rev().map(|&d| d as u64).collect();
        Entry {
            spec: GgufTensorSpec {
                name: name.to_string(),
                ne,
                dtype: big_dtype(self.ty, is_head, ne0),
            },
            src: Src::Same(src),
        }
    }

    /// A C-long F32 vector.
    fn vector(&self, name: String, src: Blink) -> Entry {
        Entry {
            spec: GgufTensorSpec {
                name,
                ne: vec![self.cfg.n_embd as u64],
                dtype: DType::F32,
            },
            src: Src::Same(src),
        }
    }

    /// A low-rank matrix: GGUF stores BlinkDL's `[a, b]` transposed (row-major [b, a],
    /// ne = [a, b]).
    fn lora(&self, name: String, src: Blink, dtype: DType) -> Entry {
        let ne = vec![src.shape[0] as u64, src.shape[1] as u64];
        Entry {
            spec: GgufTensorSpec { name, ne, dtype },
            src: Src::Transposed(src),
        }
    }
}

/// The time mix's entries of block `i` that come before its value residual, in the
/// converter's order: `a1, a0, a2`, `g1, g2`, the middle ones, and the value matrix.
struct AttEntries {
    a: [Entry; 3],
    g: [Entry; 2],
    mid: [Entry; 8],
    val: Entry,
}

/// Block `i`'s entries onto `s`, in the order llama.cpp's converter writes them.
fn layer_entries(m: &Maker, i: usize, s: &mut Vec<Entry>) {
    let (c, l) = (m.cfg.n_embd, &m.cfg.lora);
    let vec3 = [1, 1, c];
    let (g, a, p) = (
        format!("blk.{i}."),
        format!("blocks.{i}.att."),
        format!("blocks.{i}."),
    );
    let AttEntries {
        a: [a1, a0, a2],
        g: gs,
        mid,
        val,
    } = att_entries(m, i);
    let tail = tail_entries(m, i);
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
        s.push(m.vector(
            "token_embd_norm.bias".into(),
            Blink::new(format!("{p}ln0.bias"), &[c]),
        ));
        s.push(m.vector(
            "token_embd_norm.weight".into(),
            Blink::new(format!("{p}ln0.weight"), &[c]),
        ));
    } else {
        s.push(a1);
        s.push(a0);
        s.push(a2);
        s.extend(gs);
        s.extend(mid);
        s.push(m.lora(
            format!("{g}time_mix_v1.weight"),
            Blink::new(format!("{a}v1"), &[c, l.value_v]),
            DType::F16,
        ));
        s.push(m.vector(
            format!("{g}time_mix_v0.weight"),
            Blink::new(format!("{a}v0"), &vec3),
        ));
        s.push(m.lora(
            format!("{g}time_mix_v2.weight"),
            Blink::new(format!("{a}v2"), &[l.value_v, c]),
            DType::F16,
        ));
        s.push(val);
        s.extend(tail);
    }
}

/// See [`AttEntries`].
fn att_entries(m: &Maker, i: usize) -> AttEntries {
    let (c, l, cfg) = (m.cfg.n_embd, &m.cfg.lora, m.cfg);
    let vec3 = [1, 1, c];
    let (g, a) = (format!("blk.{i}."), format!("blocks.{i}.att."));
    let a1 = m.lora(
        format!("{g}time_mix_a1.weight"),
        Blink::new(format!("{a}a1"), &[c, l.iclr_a]),
        DType::F16,
    );
    let a0 = m.vector(
        format!("{g}time_mix_a0.weight"),
        Blink::new(format!("{a}a0"), &vec3),
    );
    let a2 = m.lora(
        format!("{g}time_mix_a2.weight"),
        Blink::new(format!("{a}a2"), &[l.iclr_a, c]),
        DType::F16,
    );
    let gs = [
        m.lora(
            format!("{g}time_mix_g1.weight"),
            Blink::new(format!("{a}g1"), &[c, l.gate_g]),
            DType::F16,
        ),
        m.lora(
            format!("{g}time_mix_g2.weight"),
            Blink::new(format!("{a}g2"), &[l.gate_g, c]),
            DType::F16,
        ),
    ];
    let mid = [
        m.vector(
            format!("{g}time_mix_ln.bias"),
            Blink::new(format!("{a}ln_x.bias"), &[c]),
        ),
        m.vector(
            format!("{g}time_mix_ln.weight"),
            Blink::new(format!("{a}ln_x.weight"), &[c]),
        ),
        m.vector(
            format!("{g}time_mix_k_a.weight"),
            Blink::new(format!("{a}k_a"), &vec3),
        ),
        m.vector(
            format!("{g}time_mix_k_k.weight"),
            Blink::new(format!("{a}k_k"), &vec3),
        ),
        m.big(
            &format!("{g}time_mix_key.weight"),
            Blink::new(format!("{a}key.weight"), &[c, c]),
            false,
        ),
        m.big(
            &format!("{g}time_mix_output.weight"),
            Blink::new(format!("{a}output.weight"), &[c, c]),
            false,
        ),
        m.vector(
            format!("{g}time_mix_r_k.weight"),
            Blink::new(format!("{a}r_k"), &[cfg.n_head, cfg.head_size]),
        ),
        m.big(
            &format!("{g}time_mix_receptance.weight"),
            Blink::new(format!("{a}receptance.weight"), &[c, c]),
            false,
        ),
    ];
    let val = m.big(
        &format!("{g}time_mix_value.weight"),
        Blink::new(format!("{a}value.weight"), &[c, c]),
        false,
    );
    AttEntries {
        a: [a1, a0, a2],
        g: gs,
        mid,
        val,
    }
}

/// Block `i`'s entries after its value matrix: the decay chain, the fused lerps, the
/// norms and the channel mix.
fn tail_entries(m: &Maker, i: usize) -> [Entry; 11] {
    let (c, f, l) = (m.cfg.n_embd, m.cfg.ffn_dim, &m.cfg.lora);
    let vec3 = [1, 1, c];
    let (g, a, p) = (
        format!("blk.{i}."),
        format!("blocks.{i}.att."),
        format!("blocks.{i}."),
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
    [
        m.lora(
            format!("{g}time_mix_w1.weight"),
            Blink::new(format!("{a}w1"), &[c, l.decay_w]),
            DType::F32,
        ),
        m.vector(
            format!("{g}time_mix_w0.weight"),
            Blink::new(format!("{a}w0"), &vec3),
        ),
        m.lora(
            format!("{g}time_mix_w2.weight"),
            Blink::new(format!("{a}w2"), &[l.decay_w, c]),
            DType::F32,
        ),
        lerp,
        m.vector(
            format!("{g}attn_norm.bias"),
            Blink::new(format!("{p}ln1.bias"), &[c]),
        ),
        m.vector(
            format!("{g}attn_norm.weight"),
            Blink::new(format!("{p}ln1.weight"), &[c]),
        ),
        m.big(
            &format!("{g}channel_mix_key.weight"),
            Blink::new(format!("{p}ffn.key.weight"), &[f, c]),
            false,
        ),
        m.big(
            &format!("{g}channel_mix_value.weight"),
            Blink::new(format!("{p}ffn.value.weight"), &[c, f]),
            false,
        ),
        m.vector(
            format!("{g}channel_mix_lerp_k.weight"),
            Blink::new(format!("{p}ffn.x_k"), &vec3),
        ),
        m.vector(
            format!("{g}attn_norm_2.bias"),
            Blink::new(format!("{p}ln2.bias"), &[c]),
        ),
        m.vector(
            format!("{g}attn_norm_2.weight"),
            Blink::new(format!("{p}ln2.weight"), &[c]),
        ),
    ]
}

/// gguf-py `model_weight_count_rounded_notation(n, min_digits=2)`: "17M", "2.9B", "191M".
pub(crate) fn size_label(n: u64) -> String {
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
pub(crate) fn gguf_metadata(
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
            MetaValue::Array(tokens.into()),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            MetaValue::Array(types.into()),
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

pub(crate) fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = x[r * cols + c];
        }
    }
    t
}

/// Writes a synthetic RWKV-7 GGUF (see the module docs) to `path`.
///
/// Errors: as [`write()`].
pub fn write_gguf(opts: &SynthOptions, path: impl AsRef<Path>) -> Result<SynthReport> {
    let path = path.as_ref();
    let t0 = Instant::now();
    let init = Init::new(opts)?;
    let cfg = init.cfg;
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
    SynthReport::of_written(path, entries.len(), params, t0, cfg)
}
