//! The dashboard's benchmark: `rwkv-bench`'s run (the one `rwkv bench` makes) on the
//! loaded model's file, the engine's per-op GPU profile, and the same `plotters` SVG
//! charts as the CLI (`rwkv_bench::charts`: one chart code path). Reports are kept in
//! `bench/history.json`; the last profile chart in `bench/profile.svg`.

use rwkv_bench::{charts, BenchOptions as RunOptions, BenchProgress, BenchReport};
use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::{Engine, LoadOptions};
use serde::{Deserialize, Serialize};
use tauri::ipc::Channel;

use crate::error::{AppError, AppResult};
use crate::library;
use crate::store::Store;
use crate::worker::EngineHandle;

/// What the app asks for (`BenchOptions` in `src/lib/api.ts`).
#[derive(Debug, Clone, Deserialize)]
pub struct BenchOptions {
    pub title: String,
    /// Prompt length of the prefill figure.
    pub prompt_tokens: usize,
    /// Tokens generated for the decode figure.
    pub decode_tokens: usize,
}

/// The dashboard (`Dashboard` in `src/lib/api.ts`): runs, their history chart, and the
/// last per-op profile.
#[derive(Debug, Clone, Serialize)]
pub struct Dashboard {
    pub runs: Vec<BenchReport>,
    /// `rwkv_bench::charts::history_svg` of `runs` (empty without runs).
    pub history_svg: String,
    /// `rwkv_bench::charts::profile_svg` of the last run's profile.
    pub profile_svg: Option<String>,
    /// The last profile's time by op, largest first (`rwkv_engine::profile::Total`).
    pub profile_by_op: serde_json::Value,
}

/// Tokens of the profiled pass.
const PROFILE_TOKENS: usize = 64;

pub fn dashboard(store: &Store) -> AppResult<Dashboard> {
    let runs = store.bench_history()?;
    let history_svg = if runs.is_empty() {
        String::new()
    } else {
        charts::history_svg(&runs)
    };
    let (profile_svg, profile_by_op) = store.bench_profile();
    Ok(Dashboard {
        runs,
        history_svg,
        profile_svg,
        profile_by_op,
    })
}

pub async fn run(
    h: &EngineHandle,
    store: &Store,
    opts: BenchOptions,
    events: Channel<BenchProgress>,
) -> AppResult<Dashboard> {
    if !(1..=8192).contains(&opts.prompt_tokens) || !(2..=4096).contains(&opts.decode_tokens) {
        return Err(AppError::bad_request(
            "prompt tokens 1..=8192 and decode tokens 2..=4096",
        ));
    }
    // The Model view's current adapters run in every measured pass (and the profiled one);
    // the report names them (`lora`, `init_state`).
    let set = library::load(store)?.current();
    let loras: Vec<(std::path::PathBuf, Option<f32>)> = set
        .loras
        .iter()
        .map(|l| (l.path.clone().into(), Some(l.scale)))
        .collect();
    let init_state = set.init_state.clone().map(Into::into);
    let (report, profile) = h
        .run(move |w| {
            let (path, adapter) = {
                let eng = w.engine()?;
                (eng.info().path.clone(), eng.info().adapter.index)
            };
            let load = LoadOptions {
                adapter: AdapterChoice::Index(adapter),
                ..Default::default()
            };
            let run_opts = RunOptions {
                title: opts.title.trim().to_string(),
                prefill: vec![opts.prompt_tokens],
                gen: opts.decode_tokens,
                // Interactive: one timed repeat after the warm-up, one load, no quality
                // reference (its CPU forward takes minutes on big models; `rwkv bench` has it).
                repeat: 1,
                load_repeat: 1,
                fields: 3,
                quality: false,
                load: load.clone(),
                command: "RWKV Studio dashboard".into(),
                loras,
                init_state,
                ..Default::default()
            };
            // The run loads the model itself: free ours first (one copy on the GPU).
            w.set_engine(None);
            let report = rwkv_bench::run(std::path::Path::new(&path), &run_opts, &mut |p| {
                let _ = events.send(p);
            });
            // Whatever the run gave, the model comes back.
            let _ = events.send(BenchProgress {
                step: "reloading the model".into(),
                done: 0,
                total: 0,
            });
            w.set_engine(Some(Engine::load(&path, &load)?));
            let report = report?;
            let (eng, init) = w.prepare(&set)?;
            let st = match &init {
                Some(i) => eng.new_state_from(i)?,
                None => eng.new_state()?,
            };
            let tokens = rwkv_bench::run::tokens(7, PROFILE_TOKENS, eng.config().vocab_size);
            let profile = eng.profile(st, &tokens);
            let _ = eng.free_state(st);
            Ok((report, profile?))
        })
        .await?;
    store.add_bench_run(&report)?;
    store.save_bench_profile(&charts::profile_svg(&profile), &profile.by_op)?;
    dashboard(store)
}
