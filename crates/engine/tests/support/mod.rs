//! The one test-support module of the engine's integration tests (and `benches/cache.rs`):
//! fixture paths, scratch folders, error checks, the shared GPU and engines, the peer
//! references, and (in `gguf.rs`) a tiny GGUF writer for good and bad files.
#![allow(dead_code)]

pub mod gguf;
#[allow(unused_imports)] // not every test binary builds GGUF files
pub use gguf::*;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rwkv_engine::gpu::{AdapterChoice, GpuContext};
use rwkv_engine::{
    Engine, EngineError, ForwardOutput, LoadOptions, Rows, Rwkv7Config, SeqInput, StateId, Want,
};

/// `../shared/fixtures` beside the checkout.
pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
}

/// `../shared/models` beside the checkout.
pub fn models() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models"
    ))
}

/// A fresh, empty scratch folder for one test (under the target dir's tmp or $TMPDIR);
/// never inside the source tree.
pub fn scratch(test: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO_TARGET_TMPDIR").map(PathBuf::from))
        .unwrap_or_else(std::env::temp_dir);
    sweep_dead_scratch(&base);
    let dir = base.join(format!("rwkv-test-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Removes the scratch folders of test processes that have exited (`rwkv-test-*-<pid>` whose
/// pid has no `/proc` entry), so repeated runs do not pile up copies of merged models in the
/// target dir. Linux only (elsewhere there is no cheap liveness check and nothing is removed);
/// once per process.
fn sweep_dead_scratch(base: &Path) {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(base) else {
            return;
        };
        let me = std::process::id().to_string();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("rwkv-test-") {
                continue;
            }
            let Some((_, pid)) = name.rsplit_once('-') else {
                continue;
            };
            if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
                continue;
            }
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
}

/// The path an error names, if it names one.
pub fn err_path(e: &EngineError) -> Option<&Path> {
    match e {
        EngineError::Io { path, .. }
        | EngineError::Malformed { path, .. }
        | EngineError::NotRwkv7 { path, .. }
        | EngineError::MissingTensor { path, .. }
        | EngineError::Shape { path, .. }
        | EngineError::UnsupportedType { path, .. } => Some(path),
        _ => None,
    }
}

/// Asserts `e` is `Malformed` naming `path`, and that its message mentions `needle`.
#[track_caller]
pub fn assert_malformed(e: &EngineError, path: &Path, needle: &str) {
    match e {
        EngineError::Malformed { path: p, .. } => {
            assert_eq!(p, path, "error names the wrong file: {e}");
            let msg = e.to_string();
            assert!(
                msg.to_lowercase().contains(&needle.to_lowercase()),
                "message {msg:?} does not mention {needle:?}"
            );
        }
        other => panic!(
            "expected Malformed naming {}, got {other:?}",
            path.display()
        ),
    }
}

/// Six short fields (titles, summaries, labels) of two made-up documents, 1–17 tokens
/// each, for the analysis tests and the cache benchmark.
pub const FIELD_TEXTS: [&str; 6] = [
    "Annual report",
    "The company grew its revenue by twelve percent while costs stayed flat.",
    "finance",
    "A short story about a lighthouse keeper and the storm that changed everything.",
    "fiction, sea, storms",
    "Q3",
];

/// One device for the whole test binary; fails loudly when there is none.
pub fn gpu() -> Arc<GpuContext> {
    static GPU: OnceLock<Arc<GpuContext>> = OnceLock::new();
    GPU.get_or_init(|| match GpuContext::new(&AdapterChoice::Auto) {
        Ok(g) => Arc::new(g),
        Err(e) => panic!(
            "GPU tests need an adapter: {e}. Install Mesa's lavapipe (`apt-get install \
             mesa-vulkan-drivers`) and set WGPU_BACKEND=vulkan"
        ),
    })
    .clone()
}

pub fn engine(file: &str) -> Engine {
    engine_with(file, &LoadOptions::default())
}

pub fn engine_with(file: &str, opts: &LoadOptions) -> Engine {
    let path = if file.starts_with("rwkv7-demo") {
        models().join(file)
    } else {
        fixtures().join(file)
    };
    Engine::load_on(gpu(), &path, opts).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Feeds `tokens` into a new state, asking logits and embeddings of `rows`.
pub fn forward_new(eng: &mut Engine, tokens: &[u32], rows: Rows) -> (StateId, ForwardOutput) {
    let st = eng.new_state().unwrap();
    let want = Want {
        logits: true,
        embeddings: true,
    };
    let seq = SeqInput {
        state: st,
        tokens,
        rows,
    };
    (st, eng.forward(&[seq], want, None).unwrap())
}

pub fn npy(name: &str) -> Vec<f32> {
    rwkv_engine::npy::read_f32(fixtures().join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .1
}

pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The reference JSON of a fixture model.
pub struct Reference {
    pub json: serde_json::Value,
    pub tokens: Vec<u32>,
}

impl Reference {
    pub fn load(model: &str) -> Self {
        let text =
            std::fs::read_to_string(fixtures().join(format!("rwkv7-{model}.ref.json"))).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let tokens = json["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        Reference { json, tokens }
    }

    /// `[position][rank] = (id, logit)`.
    pub fn top20(&self, implementation: &str) -> Vec<Vec<(u32, f32)>> {
        self.json["top20"][implementation]
            .as_array()
            .unwrap()
            .iter()
            .map(|pos| {
                pos.as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
                    .collect()
            })
            .collect()
    }
}

/// Indices of the 20 largest values, largest first.
pub fn top20_of(row: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.select_nth_unstable_by(19, |&a, &b| row[b].total_cmp(&row[a]));
    let mut ours: Vec<usize> = idx[..20].to_vec();
    ours.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    ours
}

/// Top-1 identical at every position (unless the reference's own top-2 gap is below
/// `tol`: a near-tie, named in the message), top-20 overlap ≥ 19, and the logits of the
/// reference's top-20 ids within `tol`.
pub fn check_top20(what: &str, logits: &[f32], vocab: usize, top20: &[Vec<(u32, f32)>], tol: f32) {
    for (t, want) in top20.iter().enumerate() {
        let row = &logits[t * vocab..(t + 1) * vocab];
        let ours = top20_of(row);
        let gap = want[0].1 - want[1].1;
        if ours[0] as u32 != want[0].0 {
            assert!(
                gap < tol,
                "{what}: position {t}: top-1 {} vs reference {} (gap {gap})",
                ours[0],
                want[0].0
            );
            eprintln!("{what}: position {t}: near-tie top-1 flip (reference gap {gap})");
        }
        let overlap = want
            .iter()
            .filter(|(id, _)| ours.contains(&(*id as usize)))
            .count();
        assert!(
            overlap >= 19,
            "{what}: position {t}: top-20 overlap {overlap}"
        );
        for &(id, v) in want {
            let d = (row[id as usize] - v).abs();
            assert!(
                d < tol,
                "{what}: position {t}: logit of {id}: {} vs {v} (|Δ| {d})",
                row[id as usize]
            );
        }
    }
}

/// Splits a state into the fixtures' three arrays: att shift [L, C], wkv [L, H, N, N],
/// ffn shift [L, C].
pub fn split_state(s: &[f32], cfg: &Rwkv7Config) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = cfg.n_embd;
    let hnn = cfg.n_head * cfg.head_size * cfg.head_size;
    let pl = cfg.state_len_per_layer();
    let (mut att, mut wkv, mut ffn) = (Vec::new(), Vec::new(), Vec::new());
    for l in 0..cfg.n_layer {
        let b = &s[l * pl..(l + 1) * pl];
        att.extend_from_slice(&b[..c]);
        wkv.extend_from_slice(&b[c..c + hnn]);
        ffn.extend_from_slice(&b[c + hnn..]);
    }
    (att, wkv, ffn)
}

/// Plain-float bytes to f32, for comparing files in tests (F32/F16/BF16 only; block types
/// go through `rwkv_engine::quant::dequantize`).
pub fn decode_float(dtype: rwkv_engine::DType, bytes: &[u8]) -> Vec<f32> {
    use rwkv_engine::DType;
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => panic!("decode_float: {other} is a block type"),
    }
}

/// Logits against llama.cpp's run of the same thing (its f16 / q8 activations make it a
/// looser peer): top-1 wherever its top-2 gap exceeds `tol`, its top-20 logits within `tol`.
pub fn check_llama(what: &str, logits: &[f32], vocab: usize, want: &[Vec<(u32, f32)>], tol: f32) {
    for (t, w) in want.iter().enumerate() {
        let row = &logits[t * vocab..(t + 1) * vocab];
        let ours = top20_of(row)[0] as u32;
        let gap = w[0].1 - w[1].1;
        assert!(
            ours == w[0].0 || gap < tol,
            "{what}: position {t}: top-1 {ours} vs llama.cpp {} (gap {gap})",
            w[0].0
        );
        for &(id, v) in w {
            let d = (row[id as usize] - v).abs();
            assert!(
                d < tol,
                "{what}: position {t}: logit of {id} |Δ| {d} vs llama.cpp"
            );
        }
    }
}

/// The environment variable `name` as a number (a test's size knob, e.g. how many tokens
/// a soak runs), `default` when unset or not a number.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
