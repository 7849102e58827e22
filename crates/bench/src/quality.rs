//! Output quality of a run: logits on a fixed prompt against a reference, and a hash of
//! greedy tokens.

use std::path::{Path, PathBuf};

use rwkv_engine::model::cpu_ref;
use rwkv_engine::{Engine, ModelFile, Result, Rows, Rwkv7Weights, SeqInput, Want};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The fixed prompt every quality check uses.
pub const PROMPT: &str = "The quick brown fox jumps over the lazy dog. In 1905,";

/// Largest |Δlogit| that still passes: GPU and CPU both compute in f32 and differ only
/// in summation order (≈1e-4 on the fixtures); a real change of the math (a dropped
/// term, a wrong decode) moves logits by 0.1 or more.
pub const MAX_ABS_TOL: f32 = 2e-2;

/// A stored reference: the CPU forward's last-position logits' top 64 and argmax.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QualityReference {
    /// sha256 of the model file's first MiB + its length (identifies the file).
    pub model_id: String,
    pub tokens: Vec<u32>,
    /// (id, logit) of the 64 largest reference logits, largest first.
    pub top: Vec<(u32, f32)>,
    pub source: String,
}

/// The quality part of a report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Quality {
    /// Engine's argmax equals the reference's.
    pub top1: bool,
    /// Largest |Δ| over the reference's top-64 logits.
    pub max_abs: f32,
    pub pass: bool,
    /// Hex sha256 (first 16 chars) of 64 greedy tokens after the prompt.
    pub greedy_hash: String,
    pub reference: String,
}

/// Identifies a model file cheaply: sha256 of its length and first MiB.
pub fn model_id(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut buf = vec![0u8; 1 << 20];
    let n = f.read(&mut buf)?;
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    h.update(&buf[..n]);
    Ok(h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Where a model's reference is cached: `$RWKV_CACHE` or `~/.cache/rwkv-studio`.
pub fn default_reference_path(path: &Path) -> std::io::Result<PathBuf> {
    let dir = std::env::var_os("RWKV_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rwkv-studio")))
        .unwrap_or_else(std::env::temp_dir)
        .join("quality");
    Ok(dir.join(format!("{}.json", model_id(path)?)))
}

/// Computes the reference of `path` with the plain CPU forward.
pub fn compute_reference(path: &Path, tokens: &[u32]) -> Result<QualityReference> {
    let file = ModelFile::open(path)?;
    let w = Rwkv7Weights::from_file(&file)?;
    let (logits, _) = cpu_ref::forward(&w, tokens)?;
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    Ok(QualityReference {
        model_id: model_id(path).map_err(|e| rwkv_engine::EngineError::Io {
            path: path.into(),
            source: e,
        })?,
        tokens: tokens.to_vec(),
        top: idx
            .iter()
            .take(64)
            .map(|&i| (i as u32, logits[i]))
            .collect(),
        source: "rwkv-engine plain f32 CPU forward (model::cpu_ref)".into(),
    })
}

/// Loads the cached reference for `path`, computing and caching it if absent.
pub fn reference_for(
    engine: &Engine,
    path: &Path,
    cache: Option<&Path>,
) -> Result<QualityReference> {
    let io = |e| rwkv_engine::EngineError::Io {
        path: path.into(),
        source: e,
    };
    let cache = match cache {
        Some(c) => c.to_path_buf(),
        None => default_reference_path(path).map_err(io)?,
    };
    if let Ok(text) = std::fs::read_to_string(&cache) {
        if let Ok(r) = serde_json::from_str::<QualityReference>(&text) {
            return Ok(r);
        }
    }
    let tokens = engine.tokenizer().encode(PROMPT);
    let r = compute_reference(path, &tokens)?;
    if let Some(dir) = cache.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&cache, serde_json::to_string_pretty(&r).unwrap_or_default());
    Ok(r)
}

/// Checks `engine` against `reference`.
pub fn check(engine: &mut Engine, reference: &QualityReference) -> Result<Quality> {
    let st = engine.new_state()?;
    let out = engine.forward(
        &[SeqInput {
            state: st,
            tokens: &reference.tokens,
            rows: Rows::Last,
        }],
        Want {
            logits: true,
            embeddings: false,
        },
        None,
    )?;
    let logits = &out.logits[0];
    let argmax = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32);
    let top1 = reference.top.first().is_some_and(|&(id, _)| id == argmax);
    let max_abs = reference
        .top
        .iter()
        .map(|&(id, v)| (logits.get(id as usize).copied().unwrap_or(f32::NAN) - v).abs())
        .fold(
            0f32,
            |a, b| if b.is_nan() { f32::INFINITY } else { a.max(b) },
        );
    // 64 greedy tokens, hashed.
    let mut toks = Vec::with_capacity(64);
    let cancel = rwkv_engine::CancelToken::new();
    let g = engine.new_state()?;
    let mut greedy = |l: &mut [f32]| -> Result<u32> {
        Ok(l.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32))
    };
    engine.generate(g, &reference.tokens, 64, &mut greedy, &cancel, &mut |t| {
        toks.push(t);
        true
    })?;
    engine.free_state(g)?;
    engine.free_state(st)?;
    let mut h = Sha256::new();
    for t in &toks {
        h.update(t.to_le_bytes());
    }
    let greedy_hash = h
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Quality {
        top1,
        max_abs,
        pass: top1 && max_abs <= MAX_ABS_TOL,
        greedy_hash,
        reference: reference.source.clone(),
    })
}
