//! The GPU adapters and the loaded model.

use rwkv_engine::gpu::{context::AdapterSummary, AdapterChoice, GpuContext};
use rwkv_engine::{LoadProgress, ModelInfo};
use std::path::PathBuf;
use tauri::ipc::Channel;

use tauri::{AppHandle, Manager, Runtime, State};

use crate::downloads::Downloads;
use crate::error::AppResult;
use crate::model_library;
use crate::paths::AppPaths;
use crate::scope::{Access, UserFiles};
use crate::store::Store;
use crate::worker::EngineHandle;

#[tauri::command]
pub async fn adapters_list(engine: State<'_, EngineHandle>) -> AppResult<Vec<AdapterSummary>> {
    // Enumeration opens the instance: keep it off the UI thread, on the engine's.
    engine.run(|_| Ok(GpuContext::list_adapters())).await
}

/// Loads a model (the bundled one when `path` is absent) on adapter `adapter` (an index of
/// `adapters_list`; absent: the previous choice, automatic at first), streaming load
/// phases. Replaces a loaded model (a running local server stops first); a file that does
/// not parse leaves it loaded ([`Worker::load`](crate::worker::Worker::load)). `path` is
/// one the user chose (dialog, drop) or a model of the library (Library view).
#[tauri::command]
pub async fn model_load<R: Runtime>(
    app: AppHandle<R>,
    engine: State<'_, EngineHandle>,
    paths: State<'_, AppPaths>,
    files: State<'_, UserFiles>,
    path: Option<String>,
    adapter: Option<usize>,
    on_progress: Channel<LoadProgress>,
) -> AppResult<ModelInfo> {
    let path = match path {
        Some(p) => files
            .check(&p, Access::Read)
            .or_else(|e| library_model(&app, &p).ok_or(e))?,
        None => paths.default_model.clone(),
    };
    let choice = adapter.map(AdapterChoice::Index);
    engine
        .run(move |w| {
            w.load(&path, choice, &mut |p| {
                let _ = on_progress.send(p);
            })
        })
        .await
}

/// `path` as a model of the Library view's library (downloaded or added), if it is one.
fn library_model<R: Runtime>(app: &AppHandle<R>, path: &str) -> Option<PathBuf> {
    let downloads = app.try_state::<Downloads>()?;
    let store = app.try_state::<Store>()?;
    let p = PathBuf::from(path);
    model_library::contains(downloads.dir(), store.root(), &p).then_some(p)
}

#[tauri::command]
pub async fn model_info(engine: State<'_, EngineHandle>) -> AppResult<Option<ModelInfo>> {
    engine.run(|w| Ok(w.model_info())).await
}

/// Unloads the model (a running local server stops first).
#[tauri::command]
pub async fn model_unload(engine: State<'_, EngineHandle>) -> AppResult<()> {
    engine
        .run(|w| {
            w.set_engine(None);
            Ok(())
        })
        .await
}
