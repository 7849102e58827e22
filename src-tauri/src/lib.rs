//! RWKV Studio's desktop shell: Tauri 2 commands over `rwkv-engine`.
//!
//! - [`worker::EngineHandle`]: the engine on its own thread, fed jobs; the one managed
//!   engine state.
//! - [`commands`]: thin commands (parse → engine → `{ code, message, details }`).
//! - [`chat`], [`documents`], [`bench`]: what a command's engine job does, where it is
//!   more than one call.
//! - [`adapters`]: LoRA and initial-state files on the engine thread (loaded once, the
//!   chat's set made active before each pass) and the Model view's commands over them;
//!   [`library`]: the Model view's list of them, on disk.
//! - [`store`]: chats, documents, state files and benchmark history on disk;
//!   [`recovery`]: what opening it repairs and sets aside.
//! - [`scope`]: the only user paths commands accept are those chosen in a dialog or dropped.

pub mod adapters;
pub mod bench;
pub mod chat;
pub mod commands;
pub mod documents;
pub mod error;
pub mod library;
pub mod recovery;
pub mod scope;
pub mod store;
pub mod worker;

use std::path::{Path, PathBuf};

use tauri::{DragDropEvent, Manager, Runtime, WindowEvent};

use crate::commands::AppPaths;
use crate::scope::UserFiles;
use crate::store::Store;
use crate::worker::EngineHandle;

/// File name of the bundled demo model.
pub const DEFAULT_MODEL: &str = "rwkv7-demo-6x256-Q4_K_M.gguf";

/// Registers every command on `builder` (shared by `run` and the tests' mock runtime).
pub fn register<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder.invoke_handler(tauri::generate_handler![
        commands::app_info,
        commands::pick_open,
        commands::pick_save,
        commands::read_text_file,
        commands::write_text_file,
        commands::adapters_list,
        commands::model_load,
        commands::model_info,
        commands::model_unload,
        adapters::adapter_library,
        adapters::lora_add,
        adapters::init_state_add,
        adapters::lora_update,
        adapters::init_state_use,
        adapters::adapter_remove,
        commands::chat_list,
        commands::chat_get,
        commands::chat_create,
        commands::chat_delete,
        commands::chat_rename,
        commands::chat_settings,
        commands::chat_send,
        commands::chat_regenerate,
        commands::chat_edit,
        commands::chat_stop,
        commands::doc_list,
        commands::doc_create,
        commands::doc_delete,
        commands::doc_chat,
        commands::doc_export,
        commands::doc_import,
        commands::fields_run,
        commands::bench_run,
        commands::bench_dashboard,
        commands::bench_clear,
    ])
}

/// Puts the managed state in place: the store under `data_dir`, the engine thread, the
/// user-file scope and the default model's path.
pub fn manage_state<R: Runtime, M: Manager<R>>(
    app: &M,
    data_dir: PathBuf,
    default_model: PathBuf,
) -> std::io::Result<()> {
    // Opening recovers from a killed run and sets damaged files aside (`recovery.rs`).
    let store = Store::open(data_dir)?;
    let aside = library::recover(store.root());
    app.manage(store.with_set_aside(aside));
    app.manage(EngineHandle::spawn()?);
    app.manage(UserFiles::default());
    app.manage(AppPaths { default_model });
    Ok(())
}

/// The bundled model: `RWKV_STUDIO_MODEL` if set, else the app's resources (installed),
/// else `models/` next to the executable (`tauri build --no-bundle` copies it there), else
/// the repository's `assets/models/` (development).
pub fn default_model_path(resource_dir: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os("RWKV_STUDIO_MODEL") {
        return PathBuf::from(p);
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets");
    let candidates = [resource_dir.map(Path::to_path_buf), exe_dir, Some(repo)];
    let found = candidates
        .into_iter()
        .flatten()
        .map(|d| d.join("models").join(DEFAULT_MODEL))
        .find(|p| p.exists());
    match found {
        Some(p) => p.canonicalize().unwrap_or(p),
        // Not found anywhere: loading it reports the path that was expected.
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../assets/models")
            .join(DEFAULT_MODEL),
    }
}

pub fn run() {
    register(tauri::Builder::default())
        .plugin(tauri_plugin_dialog::init())
        .setup(|app| {
            // `RWKV_STUDIO_DATA_DIR` gives tests (and portable installs) their own data.
            let data_dir = match std::env::var_os("RWKV_STUDIO_DATA_DIR") {
                Some(d) => PathBuf::from(d),
                None => app.path().app_data_dir()?,
            };
            let resources = app.path().resource_dir().ok();
            manage_state(
                app.handle(),
                data_dir,
                default_model_path(resources.as_deref()),
            )?;
            // Open the GPU device while the window comes up (≈ 0.15 s on a discrete GPU):
            // the first model load then finds it open. An error here is the load's to report.
            std::thread::spawn(|| {
                let _ =
                    rwkv_engine::gpu::GpuContext::shared(&rwkv_engine::gpu::AdapterChoice::Auto);
            });
            Ok(())
        })
        .on_window_event(|window, event| {
            // Dropped files count as chosen by the user (the webview sees the same drop).
            if let WindowEvent::DragDrop(DragDropEvent::Drop { paths, .. }) = event {
                let files = window.state::<UserFiles>();
                for p in paths {
                    files.allow(p, scope::Access::Read);
                }
            }
        })
        .run(tauri::generate_context!())
        .unwrap_or_else(|e| {
            eprintln!("RWKV Studio could not start: {e}");
            std::process::exit(1);
        });
}
