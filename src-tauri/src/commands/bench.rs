//! The benchmark dashboard ([`bench`] does the work).

use rwkv_bench::BenchProgress;
use tauri::ipc::Channel;
use tauri::State;

use crate::bench::{self, BenchOptions, Dashboard};
use crate::error::AppResult;
use crate::store::Store;
use crate::worker::EngineHandle;

/// Runs `rwkv-bench` on the loaded model (reloading it), profiles one pass, and returns the
/// dashboard with the updated charts.
#[tauri::command]
pub async fn bench_run(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    options: BenchOptions,
    on_progress: Channel<BenchProgress>,
) -> AppResult<Dashboard> {
    bench::run(&engine, &store, options, on_progress).await
}

#[tauri::command]
pub async fn bench_dashboard(store: State<'_, Store>) -> AppResult<Dashboard> {
    bench::dashboard(&store)
}

#[tauri::command]
pub async fn bench_clear(store: State<'_, Store>) -> AppResult<()> {
    store.clear_bench_history()
}
