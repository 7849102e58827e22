//! The dashboard's benchmark: load time, prefill and decode speed of the loaded model,
//! measured by the engine itself (real numbers only), kept in `bench/history.json`.
//!
//! Until `rwkv bench` (with its per-op GPU profile and `plotters` charts) lands on main,
//! this is the app's benchmark: reload the model (time to GPU-ready, the engine's
//! `load_ms`), prefill a fixed English text of `prompt_tokens` tokens, then decode
//! `decode_tokens` greedily (no stop), with the engine's `GenerateStats`.

use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{CancelToken, Engine, GenerateOptions, LoadOptions};
use serde::{Deserialize, Serialize};
use tauri::ipc::Channel;

use crate::error::{AppError, AppResult};
use crate::store::{new_id, now_ms, BenchRun, Store};
use crate::worker::EngineHandle;

/// Public-domain prose (Dickens, *A Tale of Two Cities*, 1859), repeated to length.
const BENCH_TEXT: &str = "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the other way. There were a king with a large jaw and a queen with a plain face, on the throne of England; there were a king with a large jaw and a queen with a fair face, on the throne of France. ";

#[derive(Debug, Clone, Deserialize)]
pub struct BenchOptions {
    pub title: String,
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
}

/// Progress of a run (`BenchEvent` in `src/lib/api.ts`).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum BenchEvent {
    Load,
    Prefill { tokens: usize },
    Decode { tokens: usize },
    Done,
}

/// The first `n` tokens of the bench text, repeated as needed.
pub fn bench_tokens(eng: &Engine, n: usize) -> Vec<u32> {
    let ids = eng.tokenizer().encode(BENCH_TEXT);
    ids.iter().copied().cycle().take(n).collect()
}

pub async fn run(
    h: &EngineHandle,
    store: &Store,
    opts: BenchOptions,
    events: Channel<BenchEvent>,
) -> AppResult<BenchRun> {
    if !(1..=8192).contains(&opts.prompt_tokens) || !(2..=4096).contains(&opts.decode_tokens) {
        return Err(AppError::bad_request(
            "prompt tokens 1..=8192 and decode tokens 2..=4096",
        ));
    }
    let ticket = h.begin("bench");
    let cancel: CancelToken = ticket.token.clone();
    let r = h
        .run(move |w| {
            let (path, adapter) = {
                let eng = w.engine()?;
                (eng.info().path.clone(), eng.info().adapter.index)
            };
            let _ = events.send(BenchEvent::Load);
            // Free the old copy first: the GPU holds one model at a time.
            w.engine = None;
            let load_opts = LoadOptions {
                adapter: AdapterChoice::Index(adapter),
                ..Default::default()
            };
            w.engine = Some(Engine::load(&path, &load_opts)?);
            let eng = w.engine()?;
            let info = eng.info().clone();
            let _ = events.send(BenchEvent::Prefill {
                tokens: opts.prompt_tokens,
            });
            let prompt = eng
                .tokenizer()
                .decode(&bench_tokens(eng, opts.prompt_tokens))
                .map(|b| String::from_utf8_lossy(&b).into_owned())?;
            let gen = GenerateOptions {
                max_tokens: opts.decode_tokens,
                sampler: SamplerOptions {
                    stop_tokens: Vec::new(),
                    stop_strings: Vec::new(),
                    banned_tokens: vec![0],
                    ..SamplerOptions::greedy()
                },
            };
            let st = eng.new_state()?;
            let mut decoded = 0usize;
            let out = eng.generate_text(st, &prompt, &gen, &cancel, &mut |ev| {
                let rwkv_engine::TextEvent::Text { tokens, .. } = ev;
                decoded += tokens;
                if decoded % 16 < tokens {
                    let _ = events.send(BenchEvent::Decode { tokens: decoded });
                }
                true
            });
            let _ = eng.free_state(st);
            let out = out?;
            let _ = events.send(BenchEvent::Done);
            let s = out.stats;
            if s.stop == rwkv_engine::StopReason::Cancelled {
                return Err(AppError::new("cancelled", "the benchmark was stopped"));
            }
            Ok(BenchRun {
                id: new_id(),
                title: opts.title.trim().to_string(),
                created_ms: now_ms(),
                model: std::path::Path::new(&info.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                format: info.format.clone(),
                adapter: info.adapter.name.clone(),
                backend: info.adapter.backend.clone(),
                load_ms: info.load_ms,
                prompt_tokens: s.prompt_tokens,
                prefill_ms: s.prefill_ms,
                prefill_tok_s: s.prefill_tok_s,
                decode_tokens: s.generated_tokens,
                decode_ms: s.decode_ms,
                decode_tok_s: s.decode_tok_s,
                ttft_ms: s.ttft_ms,
            })
        })
        .await;
    h.end("bench", &ticket);
    let run = r?;
    store.add_bench_run(&run)?;
    Ok(run)
}
