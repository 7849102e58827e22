//! Adapter files from the command line: `rwkv inspect FILE` on a LoRA adapter or a
//! state-tuning file (format, rank, alpha, default scale, targets, the base shape they
//! imply), and `rwkv merge --base MODEL --lora FILE[:SCALE] … --out OUT.safetensors`
//! (a standalone model with `W + SCALE·B·A` in F32, `rwkv_engine::api::merge_to_safetensors`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rwkv_engine::format::FileFormat;
use rwkv_engine::{InitState, LoraAdapter, LoraTarget, ModelFile};
use serde::Serialize;

/// What kind of adapter file `path` is, from its header: `Some(true)` a LoRA (GGUF
/// `general.type = adapter`, or `lora_A`/`lora_B` tensors), `Some(false)` a state-tuning
/// file (`att.time_state` tensors), `None` neither (a model, or unreadable).
fn kind(path: &Path) -> Option<bool> {
    let f = ModelFile::open(path).ok()?;
    if f.format() == FileFormat::Gguf {
        return (f.meta("general.type").and_then(|v| v.as_str()) == Some("adapter"))
            .then_some(true);
    }
    let names = || f.tensors().iter().map(|t| t.name.as_str());
    if names().any(|n| n.ends_with(".lora_A") || n.ends_with(".lora_B")) {
        Some(true)
    } else if names().any(|n| n.ends_with("att.time_state")) {
        Some(false)
    } else {
        None
    }
}

#[derive(Serialize)]
struct LoraReport {
    kind: &'static str,
    path: String,
    format: rwkv_engine::AdapterFormat,
    /// Largest rank of its matrices (and the smallest, when they differ).
    rank: usize,
    rank_min: usize,
    alpha: Option<f32>,
    /// The scale applied when none is given: alpha / rank, or 1 without alpha.
    default_scale: f32,
    matrices: usize,
    /// Per target (BlinkDL name), the layers it adapts.
    targets: BTreeMap<&'static str, Vec<usize>>,
    /// Base shape implied: embedding width C, FFN width F, and at least this many layers.
    n_embd: Option<usize>,
    ffn_dim: Option<usize>,
    min_layers: usize,
}

#[derive(Serialize)]
struct StateReport {
    kind: &'static str,
    path: String,
    format: rwkv_engine::AdapterFormat,
    n_layer: usize,
    n_head: usize,
    head_size: usize,
    /// H · N, the embedding width of the base it fits.
    n_embd: usize,
    min: f32,
    max: f32,
    rms: f32,
}

fn layer_list(v: &[usize]) -> String {
    // 0,1,2,5 → "0-2, 5"
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// `rwkv inspect` on an adapter or state file; returns `false` (printing nothing) when
/// `args.model` is neither, so the model inspector handles it.
pub fn inspect(args: &crate::cmd_inspect::Args) -> anyhow::Result<bool> {
    let path = &args.model;
    match kind(path) {
        None => Ok(false),
        Some(true) => {
            let a = LoraAdapter::open(path)?;
            let mut targets: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
            let (mut c, mut f) = (None, None);
            for m in &a.matrices {
                targets.entry(m.target.name()).or_default().push(m.layer);
                match m.target {
                    LoraTarget::FfnKey => (c, f) = (Some(m.n_in), Some(m.n_out)),
                    LoraTarget::FfnValue => (c, f) = (Some(m.n_out), Some(m.n_in)),
                    _ => c = Some(m.n_in),
                }
            }
            let r = LoraReport {
                kind: "lora",
                path: path.display().to_string(),
                format: a.format,
                rank: a.rank(),
                rank_min: a.matrices.iter().map(|m| m.rank).min().unwrap_or(0),
                alpha: a.alpha,
                default_scale: a.default_scale(),
                matrices: a.matrices.len(),
                targets,
                n_embd: c,
                ffn_dim: f,
                min_layers: a.matrices.iter().map(|m| m.layer + 1).max().unwrap_or(0),
            };
            if args.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(true);
            }
            println!("{}: LoRA adapter ({:?})", r.path, r.format);
            if r.rank_min == r.rank {
                println!("rank          {}", r.rank);
            } else {
                println!("rank          {}–{}", r.rank_min, r.rank);
            }
            match r.alpha {
                Some(al) => println!(
                    "alpha         {al} → default scale alpha / rank = {}",
                    r.default_scale
                ),
                None => println!("alpha         none in the file → default scale 1 (give FILE:SCALE, e.g. alpha / rank of the training run)"),
            }
            println!("matrices      {}", r.matrices);
            for (t, layers) in &r.targets {
                println!("  {t:<16} layers {}", layer_list(layers));
            }
            let opt = |v: Option<usize>| v.map_or_else(|| "?".to_string(), |x| x.to_string());
            println!(
                "base implied  C = {}, F = {}, at least {} layers",
                opt(r.n_embd),
                opt(r.ffn_dim),
                r.min_layers
            );
            Ok(true)
        }
        Some(false) => {
            let s = InitState::open(path)?;
            let n = s.wkv.len().max(1) as f64;
            let rms = (s
                .wkv
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                / n)
                .sqrt();
            let r = StateReport {
                kind: "init_state",
                path: path.display().to_string(),
                format: s.format,
                n_layer: s.n_layer,
                n_head: s.n_head,
                head_size: s.head_size,
                n_embd: s.n_head * s.head_size,
                min: s.wkv.iter().copied().fold(f32::INFINITY, f32::min),
                max: s.wkv.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                rms: rms as f32,
            };
            if args.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(true);
            }
            println!(
                "{}: state-tuned initial state ({:?}, RWKV-PEFT `blocks.N.att.time_state`)",
                r.path, r.format
            );
            println!(
                "shape         {} layers × {} heads × {}×{} (WKV state only; token shifts start at 0)",
                r.n_layer, r.n_head, r.head_size, r.head_size
            );
            println!(
                "base implied  C = {}, {} layers, head size {}",
                r.n_embd, r.n_layer, r.head_size
            );
            println!("values        min {} max {} rms {}", r.min, r.max, r.rms);
            Ok(true)
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Base model: GGUF, SafeTensors or PyTorch .pth (any encoding the engine reads).
    #[arg(long)]
    pub base: PathBuf,
    /// LoRA adapter FILE[:SCALE], repeatable: RWKV-PEFT .pth/.safetensors or a llama.cpp
    /// GGUF adapter. The delta added is SCALE·B·A; SCALE defaults to alpha / rank when the
    /// file holds alpha (GGUF adapter.lora.alpha, SafeTensors lora_alpha) and to 1
    /// otherwise (RWKV-PEFT .pth files hold no alpha: pass alpha / r of the training run).
    /// None: the base converted as it is (a GGUF as BlinkDL's SafeTensors, which BlinkDL's
    /// own code loads as a .pth state dict).
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = crate::common::parse_lora)]
    pub loras: Vec<crate::common::LoraSpec>,
    /// Output SafeTensors file (BlinkDL names; adapted matrices F32, the rest as the base
    /// holds them, block-quantized ones decoded to F32).
    #[arg(long)]
    pub out: PathBuf,
}

/// `rwkv merge`.
pub fn merge(args: MergeArgs) -> anyhow::Result<()> {
    let base = ModelFile::open(&args.base)?;
    // Each adapter is checked against the base's shapes before its factors are decoded.
    let cfg = rwkv_engine::Rwkv7Weights::from_file(&base)?.config;
    let lora_base = rwkv_engine::LoraBase::new(&cfg, base.file_len() as u64);
    let mut loaded = Vec::new();
    for spec in &args.loras {
        let a = LoraAdapter::open_for(&spec.path, &lora_base)?;
        let s = spec.scale.unwrap_or_else(|| a.default_scale());
        loaded.push((a, s));
    }
    let pairs: Vec<(&LoraAdapter, f32)> = loaded.iter().map(|(a, s)| (a, *s)).collect();
    let t0 = std::time::Instant::now();
    let sum = rwkv_engine::api::merge_to_safetensors(&base, &pairs, &args.out)
        .with_context(|| format!("merging into {}", args.out.display()))?;
    for (a, s) in &pairs {
        eprintln!(
            "{}: rank {}, scale {s}, {} matrices",
            a.name,
            a.rank(),
            a.matrices.len()
        );
    }
    println!(
        "wrote {} ({} tensors, {} adapted, {:.1} MB) in {:.2} s",
        args.out.display(),
        sum.tensors,
        sum.adapted,
        sum.bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_lists_compress() {
        assert_eq!(layer_list(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        assert_eq!(layer_list(&[3]), "3");
    }
}
