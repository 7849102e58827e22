//! The Library view: the model catalog (shipped + the user's entries), the downloads
//! ([`crate::downloads`]: several at once, pause / resume across restarts, cancel), and the
//! library of models on disk ([`crate::model_library`]), with whether each fits the GPU.
//! A library model loads through `model_load` (it accepts library paths without a dialog).

use rwkv_engine::gpu::{AdapterChoice, GpuContext};
use rwkv_models::{Catalog, Entry};
use serde::Serialize;
use tauri::ipc::Channel;
use tauri::State;

use crate::downloads::{DownloadStatus, Downloads, Sink};
use crate::error::{AppError, AppResult};
use crate::gpu_memory::{self, GpuMemory};
use crate::model_library::{self, LibraryModel};
use crate::scope::{Access, UserFiles};
use crate::store::Store;

/// The catalog as the view lists it (`CatalogView` in api.ts).
#[derive(Debug, Clone, Serialize)]
pub struct CatalogView {
    pub entries: Vec<CatalogItem>,
    /// Where the user's own entries live (the file "Add an entry" writes).
    pub user_catalog: Option<String>,
    /// Where downloads go.
    pub library_dir: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatalogItem {
    #[serde(flatten)]
    pub entry: Entry,
    /// The entry comes from the user's catalog (added or replacing a shipped one).
    pub user: bool,
}

/// The library as the view lists it (`LibraryView` in api.ts).
#[derive(Debug, Clone, Serialize)]
pub struct LibraryView {
    pub dir: String,
    pub models: Vec<LibraryModel>,
    /// The GPU models load on, and its memory (`null` until the GPU could be asked).
    pub gpu: Option<GpuMemory>,
}

fn sink(ch: Channel<DownloadStatus>) -> Sink {
    std::sync::Arc::new(move |s: &DownloadStatus| {
        let _ = ch.send(s.clone());
    })
}

/// The shipped catalog merged with the user's (`$XDG_CONFIG_HOME/rwkv-studio/catalog.json`).
///
/// Errors: `catalog` naming the user file and the broken rule.
#[tauri::command]
pub async fn catalog_list(downloads: State<'_, Downloads>) -> AppResult<CatalogView> {
    let user = match downloads.user_catalog().filter(|p| p.exists()) {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| AppError::io(&p, e))?;
            Catalog::parse(&text, &p, false)?
        }
        None => Catalog::default(),
    };
    let merged = downloads.catalog()?;
    Ok(CatalogView {
        entries: merged
            .entries
            .into_iter()
            .map(|e| CatalogItem {
                user: user.entries.iter().any(|u| u.name == e.name),
                entry: e,
            })
            .collect(),
        user_catalog: downloads.user_catalog().map(|p| p.display().to_string()),
        library_dir: downloads.dir().display().to_string(),
    })
}

/// Adds (or replaces, by name) an entry of the user's catalog, checked by the catalog's
/// schema first. Returns the merged catalog.
///
/// Errors: `catalog` naming the broken rule; `io`.
#[tauri::command]
pub async fn catalog_add(downloads: State<'_, Downloads>, entry: Entry) -> AppResult<CatalogView> {
    let path = downloads
        .user_catalog()
        .ok_or_else(|| AppError::bad_request("this platform names no configuration folder"))?;
    rwkv_models::catalog::save_user_entry(&path, entry)?;
    catalog_list(downloads).await
}

/// Starts a download: the catalog entry `name`, or a pasted `url` (checked against
/// `sha256` when given). Updates stream on `on_event` at most every 250 ms.
///
/// Errors: `catalog` (unknown name, a bad URL or SHA-256); `bad_request` (downloading
/// already, or neither name nor URL); `io`. Failures of the transfer itself (offline,
/// 404, checksum, disk space) arrive as a `failed` update with the named error.
#[tauri::command]
pub async fn download_start(
    downloads: State<'_, Downloads>,
    name: Option<String>,
    url: Option<String>,
    sha256: Option<String>,
    on_event: Channel<DownloadStatus>,
) -> AppResult<DownloadStatus> {
    match (name, url) {
        (Some(n), _) => downloads.start_entry(&n, sink(on_event)),
        (None, Some(u)) => downloads.start_url(&u, sha256, sink(on_event)),
        (None, None) => Err(AppError::bad_request("name a catalog model or paste a URL")),
    }
}

/// Resumes a paused or interrupted download (also one left by an earlier run) from its
/// `.part` file with an HTTP Range request.
#[tauri::command]
pub async fn download_resume(
    downloads: State<'_, Downloads>,
    file_name: String,
    on_event: Channel<DownloadStatus>,
) -> AppResult<DownloadStatus> {
    downloads.resume(&file_name, sink(on_event))
}

/// Pauses a download; its `.part` stays (also across restarts). Returns every download.
#[tauri::command]
pub async fn download_pause(
    downloads: State<'_, Downloads>,
    file_name: String,
) -> AppResult<Vec<DownloadStatus>> {
    downloads.pause(&file_name)?;
    downloads.list()
}

/// Cancels a download and removes its `.part`. Returns every download.
#[tauri::command]
pub async fn download_cancel(
    downloads: State<'_, Downloads>,
    file_name: String,
) -> AppResult<Vec<DownloadStatus>> {
    downloads.cancel(&file_name)?;
    downloads.list()
}

/// Every download: running, paused, failed, and the `.part` files an earlier run left.
#[tauri::command]
pub async fn downloads_list(downloads: State<'_, Downloads>) -> AppResult<Vec<DownloadStatus>> {
    downloads.list()
}

/// The library (downloaded and added models) and the memory of the GPU that automatic
/// adapter choice picks.
#[tauri::command]
pub async fn library_list(
    downloads: State<'_, Downloads>,
    store: State<'_, Store>,
) -> AppResult<LibraryView> {
    let catalog = downloads.catalog().unwrap_or_default();
    let models = model_library::list(downloads.dir(), store.root(), &catalog)?;
    // The automatic adapter's device (opened at start, so this is quick), asked off the
    // engine thread so that the list never waits behind a reply or a load; a GPU that
    // cannot be opened leaves the verdict out rather than failing the list.
    let gpu = tauri::async_runtime::spawn_blocking(|| {
        GpuContext::shared(&AdapterChoice::Auto)
            .ok()
            .map(|ctx| GpuMemory {
                adapter: ctx.summary.name.clone(),
                bytes: gpu_memory::device_local_bytes(&ctx.adapter),
            })
    })
    .await
    .map_err(|e| AppError::internal(format!("the GPU memory query failed: {e}")))?;
    Ok(LibraryView {
        dir: downloads.dir().display().to_string(),
        models,
        gpu,
    })
}

/// Adds a model file the user chose (open dialog or drop) to the library list.
#[tauri::command]
pub async fn library_add(
    downloads: State<'_, Downloads>,
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    path: String,
) -> AppResult<LibraryView> {
    let p = files.check(&path, Access::Read)?;
    model_library::add(store.root(), &p)?;
    library_list(downloads, store).await
}

/// Deletes a downloaded model (the file) or forgets an added one (the file stays).
#[tauri::command]
pub async fn library_delete(
    downloads: State<'_, Downloads>,
    store: State<'_, Store>,
    path: String,
) -> AppResult<LibraryView> {
    model_library::remove(downloads.dir(), store.root(), std::path::Path::new(&path))?;
    library_list(downloads, store).await
}

/// Shows a library model in the system's file manager.
///
/// Errors: `not_found` (not a library model); `io` (no file manager could start).
#[tauri::command]
pub async fn library_reveal(
    downloads: State<'_, Downloads>,
    store: State<'_, Store>,
    path: String,
) -> AppResult<()> {
    let p = std::path::PathBuf::from(&path);
    if !model_library::contains(downloads.dir(), store.root(), &p) {
        return Err(AppError::not_found("library model", &path));
    }
    model_library::reveal(&p)
}
