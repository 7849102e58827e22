//! `rwkv pybench`: the Rust side of `python/bench/bench.py` — the same work through the
//! engine's Rust API, timed the same way, so `scripts/py-bench.sh` can put the Python
//! package's overhead in one ratio: `embed` of the texts of a file (one per line, last-token
//! pooling) and the `[T, V]` logits of the first T tokens of a prompt file, from the zero
//! state. Prints JSON: per-call ms (median, min, all) of each.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use rwkv_engine::Pooling;

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct PyBenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// UTF-8 file of texts to embed, one per line (empty lines skipped).
    #[arg(long)]
    pub texts: PathBuf,
    /// UTF-8 file whose first `--tokens` tokens get their logits computed.
    #[arg(long)]
    pub prompt: PathBuf,
    /// Prompt tokens.
    #[arg(long, default_value_t = 512)]
    pub tokens: usize,
    /// Timed calls of each kind (after `--warmup` untimed ones).
    #[arg(long, default_value_t = 10)]
    pub repeat: usize,
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
}

/// `{median, min, all}` of per-call times, ms.
pub fn summary(ms: &[f64]) -> serde_json::Value {
    let mut s = ms.to_vec();
    s.sort_by(f64::total_cmp);
    let median = match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    };
    serde_json::json!({ "median": median, "min": s.first(), "all": ms })
}

pub fn run(a: PyBenchArgs) -> anyhow::Result<()> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
    };
    let texts_file = read(&a.texts)?;
    let texts: Vec<&str> = texts_file.lines().filter(|l| !l.is_empty()).collect();
    let mut eng = a.model.load(true)?;
    let mut ids = eng.tokenizer().encode(&read(&a.prompt)?);
    if ids.len() < a.tokens {
        anyhow::bail!(
            "{}: {} tokens, fewer than --tokens {}",
            a.prompt.display(),
            ids.len(),
            a.tokens
        );
    }
    ids.truncate(a.tokens);
    let vocab = eng.config().vocab_size;
    let mut embed_ms = Vec::new();
    let mut logits_ms = Vec::new();
    let mut dim = 0;
    for i in 0..a.warmup + a.repeat {
        let t = Instant::now();
        let e = eng.embed_texts(&texts, Pooling::Last)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(e.len() == texts.len(), "embed returned {} rows", e.len());
        dim = e.dim;
        if i >= a.warmup {
            embed_ms.push(ms);
        }
    }
    for i in 0..a.warmup + a.repeat {
        // What `Model.logits` does: a zero state, one forward with every row, free.
        let t = Instant::now();
        let logits = eng.logits_all(&ids, None)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(
            logits.len() == ids.len() * vocab,
            "logits of the wrong size"
        );
        if i >= a.warmup {
            logits_ms.push(ms);
        }
    }
    let info = eng.info();
    let out = serde_json::json!({
        "side": "rust",
        "model": info.path,
        "adapter": info.adapter.name,
        "texts": texts.len(),
        "dim": dim,
        "tokens": ids.len(),
        "vocab": vocab,
        "embed_ms": summary(&embed_ms),
        "logits_ms": summary(&logits_ms),
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
