//! `rwkv inspect MODEL [--json]`: what a model file holds, read from its header only
//! (the mapping is never touched past the header, so this is instant on multi-GB files).
//!
//! Prints the container format, architecture, RWKV-7 config (or why the file is not a
//! usable RWKV-7), tokenizer summary, metadata, one row per tensor (name, type, shape,
//! bytes, offset) and totals per type.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use rwkv_engine::format::{gguf, FileFormat, MetaValue};
use rwkv_engine::model::names;
use rwkv_engine::{ModelFile, Rwkv7Config, Rwkv7Weights};
use serde::Serialize;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file: GGUF, SafeTensors or PyTorch .pth.
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    path: String,
    format: &'static str,
    /// File size in bytes.
    file_bytes: usize,
    architecture: Option<String>,
    /// Which tensor names the file uses: "gguf" (llama.cpp) or "blinkdl".
    naming: Option<&'static str>,
    gguf: Option<GgufHeader>,
    config: Option<Rwkv7Config>,
    /// Why the file does not map to RWKV-7 weights, when it does not.
    config_error: Option<String>,
    tokenizer: Tokenizer,
    metadata: Vec<Meta>,
    tensors: Vec<Row>,
    totals: Totals,
}

#[derive(Serialize)]
struct GgufHeader {
    version: u32,
    /// Bytes.
    alignment: u64,
    /// Absolute byte offset of the tensor data section.
    data_offset: usize,
}

#[derive(Serialize)]
struct Tokenizer {
    /// Where the vocabulary comes from.
    source: String,
    /// `tokenizer.ggml.model` for GGUF.
    model: Option<String>,
    /// Number of tokens in the embedded vocabulary, else the embedding's rows.
    vocab_size: Option<usize>,
}

#[derive(Serialize)]
struct Meta {
    key: String,
    /// GGUF value type (`u32`, `string`, `array<string>`, …).
    r#type: String,
    /// The value, arrays and long strings summarised.
    value: String,
}

#[derive(Serialize)]
struct Row {
    name: String,
    dtype: &'static str,
    /// Row-major, outermost first.
    shape: Vec<usize>,
    /// Bytes in the file.
    bytes: usize,
    /// Absolute byte offset in the file.
    offset: usize,
}

#[derive(Serialize, Default)]
struct TypeTotal {
    tensors: usize,
    params: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct Totals {
    tensors: usize,
    params: u64,
    /// Bytes of tensor data.
    bytes: u64,
    by_type: BTreeMap<&'static str, TypeTotal>,
}

/// At most `max` characters of `s`, escaped, with an ellipsis when cut.
fn short(s: &str, max: usize) -> String {
    let escaped: String = s.escape_debug().collect();
    if escaped.chars().count() <= max {
        escaped
    } else {
        let cut: String = escaped.chars().take(max).collect();
        format!("{cut}… ({} bytes)", s.len())
    }
}

fn summarize(v: &MetaValue) -> String {
    match v {
        MetaValue::String(s) => format!("\"{}\"", short(s, 60)),
        MetaValue::Array(items) => {
            let head: Vec<String> = items.iter().take(4).map(|v| summarize(&v)).collect();
            let more = if items.len() > 4 { ", …" } else { "" };
            format!("[{}{more}] ({} items)", head.join(", "), items.len())
        }
        MetaValue::U8(x) => x.to_string(),
        MetaValue::I8(x) => x.to_string(),
        MetaValue::U16(x) => x.to_string(),
        MetaValue::I16(x) => x.to_string(),
        MetaValue::U32(x) => x.to_string(),
        MetaValue::I32(x) => x.to_string(),
        MetaValue::U64(x) => x.to_string(),
        MetaValue::I64(x) => x.to_string(),
        MetaValue::F32(x) => x.to_string(),
        MetaValue::F64(x) => x.to_string(),
        MetaValue::Bool(x) => x.to_string(),
    }
}

fn report(file: &ModelFile) -> Report {
    let format = file.format();
    let gguf = if format == FileFormat::Gguf {
        // Re-reading the header is cheap (no tensor bytes) and gives version/alignment.
        gguf::parse(file.path(), file.bytes())
            .ok()
            .map(|p| GgufHeader {
                version: p.version,
                alignment: p.alignment,
                data_offset: p.data_offset,
            })
    } else {
        None
    };
    let naming = names::naming(file).map(|n| match n {
        names::Naming::Gguf => "gguf",
        names::Naming::BlinkDl => "blinkdl",
    });
    let (config, config_error) = match Rwkv7Weights::from_file(file) {
        Ok(w) => (Some(w.config), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let architecture = match file
        .meta("general.architecture")
        .and_then(MetaValue::as_str)
    {
        Some(a) => Some(a.to_string()),
        None if config.is_some() => Some("rwkv7 (from tensor names and shapes)".into()),
        None => None,
    };

    let tokenizer = match file.meta("tokenizer.ggml.tokens") {
        Some(MetaValue::Array(tokens)) => Tokenizer {
            source: "embedded in the GGUF (tokenizer.ggml.tokens)".into(),
            model: file
                .meta("tokenizer.ggml.model")
                .and_then(MetaValue::as_str)
                .map(str::to_string),
            vocab_size: Some(tokens.len()),
        },
        _ => Tokenizer {
            source: if format == FileFormat::Gguf {
                "none embedded".into()
            } else {
                format!(
                    "none embedded ({} files carry no vocabulary): the RWKV World vocabulary (rwkv_vocab_v20230424)",
                    format.name()
                )
            },
            model: None,
            vocab_size: config.map(|c| c.vocab_size),
        },
    };

    let metadata = file
        .metadata()
        .iter()
        .map(|(k, v)| Meta {
            key: k.clone(),
            r#type: v.type_name(),
            value: summarize(v),
        })
        .collect();

    let mut by_type: BTreeMap<&'static str, TypeTotal> = BTreeMap::new();
    let mut tensors = Vec::with_capacity(file.tensors().len());
    let (mut params, mut bytes) = (0u64, 0u64);
    for t in file.tensors() {
        let n = t.numel() as u64;
        let e = by_type.entry(t.dtype.name()).or_default();
        e.tensors += 1;
        e.params += n;
        e.bytes += t.len as u64;
        params += n;
        bytes += t.len as u64;
        tensors.push(Row {
            name: t.name.clone(),
            dtype: t.dtype.name(),
            shape: t.shape.clone(),
            bytes: t.len,
            offset: t.offset,
        });
    }

    Report {
        path: file.path().display().to_string(),
        format: format.name(),
        file_bytes: file.file_len(),
        architecture,
        naming,
        gguf,
        config,
        config_error,
        tokenizer,
        metadata,
        totals: Totals {
            tensors: tensors.len(),
            params,
            bytes,
            by_type,
        },
        tensors,
    }
}

/// `1234567` → `"1.23 MB"` (decimal units, as file managers show).
fn human(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

fn print_text(r: &Report) {
    println!("file          {}", r.path);
    println!(
        "format        {} ({} bytes, {})",
        r.format,
        r.file_bytes,
        human(r.file_bytes as u64)
    );
    if let Some(g) = &r.gguf {
        println!(
            "gguf          version {}, alignment {}, data at byte {}",
            g.version, g.alignment, g.data_offset
        );
    }
    println!(
        "architecture  {}",
        r.architecture.as_deref().unwrap_or("unknown")
    );
    if let Some(n) = r.naming {
        println!("tensor names  {n}");
    }
    match (&r.config, &r.config_error) {
        (Some(c), _) => println!(
            "config        {} layers, C {}, {} heads × {}, FFN {}, vocab {}, LoRA w/a/v/g {}/{}/{}/{}",
            c.n_layer,
            c.n_embd,
            c.n_head,
            c.head_size,
            c.ffn_dim,
            c.vocab_size,
            c.lora.decay_w,
            c.lora.iclr_a,
            c.lora.value_v,
            c.lora.gate_g
        ),
        (None, Some(e)) => println!("config        not a usable RWKV-7 model: {e}"),
        (None, None) => {}
    }
    let t = &r.tokenizer;
    println!(
        "tokenizer     {}{}{}",
        t.source,
        t.model
            .as_deref()
            .map(|m| format!(", model \"{m}\""))
            .unwrap_or_default(),
        t.vocab_size
            .map(|v| format!(", {v} tokens"))
            .unwrap_or_default()
    );
    if !r.metadata.is_empty() {
        println!("\nmetadata ({} keys)", r.metadata.len());
        let w = r.metadata.iter().map(|m| m.key.len()).max().unwrap_or(0);
        for m in &r.metadata {
            println!("  {:w$}  {:<14} {}", m.key, m.r#type, m.value);
        }
    }
    println!("\ntensors ({})", r.tensors.len());
    let wn = r
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let shapes: Vec<String> = r.tensors.iter().map(|t| format!("{:?}", t.shape)).collect();
    let ws = shapes.iter().map(String::len).max().unwrap_or(5).max(5);
    println!(
        "  {:wn$}  {:<6}  {:ws$}  {:>12}  {:>12}",
        "name", "type", "shape", "bytes", "offset"
    );
    for (t, s) in r.tensors.iter().zip(&shapes) {
        println!(
            "  {:wn$}  {:<6}  {:ws$}  {:>12}  {:>12}",
            t.name, t.dtype, s, t.bytes, t.offset
        );
    }
    println!("\ntotals");
    for (ty, tt) in &r.totals.by_type {
        println!(
            "  {:<6}  {:>5} tensors  {:>14} params  {:>14} bytes ({})",
            ty,
            tt.tensors,
            tt.params,
            tt.bytes,
            human(tt.bytes)
        );
    }
    println!(
        "  {:<6}  {:>5} tensors  {:>14} params  {:>14} bytes ({})",
        "all",
        r.totals.tensors,
        r.totals.params,
        r.totals.bytes,
        human(r.totals.bytes)
    );
}

/// Runs `rwkv inspect`. Errors when the file cannot be opened or its header is malformed
/// (the engine's error, naming the file); a well-formed file that is not RWKV-7 is
/// reported, not an error.
pub fn run(args: Args) -> anyhow::Result<()> {
    let file = ModelFile::open(&args.model)
        .with_context(|| format!("cannot inspect {}", args.model.display()))?;
    let r = report(&file);
    if args.json {
        let out = serde_json::to_string_pretty(&r).context("serialising the report")?;
        println!("{out}");
    } else {
        print_text(&r);
    }
    Ok(())
}
