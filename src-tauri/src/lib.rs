//! RWKV Studio's desktop shell: Tauri 2 commands over `rwkv-engine`.
//!
//! Modules, top down (each imports only those below it):
//! - [`commands`]: the thin commands by domain (parse → call → `{ code, message, details }`),
//!   registered by [`register`].
//! - [`chat`], [`documents`], [`bench`]: what a command's engine job does, where it is
//!   more than one call; [`library`]: the Model view's list of LoRA and initial-state
//!   files, on disk; [`model_library`], [`downloads`], [`gpu_memory`]: the Library view's
//!   models on disk, their downloads (`rwkv-models`) and whether they fit the GPU.
//! - [`worker`]: [`worker::EngineHandle`], the engine on its own thread, fed jobs (the one
//!   managed engine state), with the adapter files loaded for it ([`worker::adapters`]).
//! - [`store`]: chats, documents, state files and benchmark history on disk (records,
//!   atomic files, and the recovery that opening it runs).
//! - [`scope`]: the only user paths commands accept are those chosen in a dialog or dropped;
//!   [`paths`]: where the bundled model is.
//! - [`error`]: the one error the frontend sees, with its [`error::ErrorCode`].

pub mod bench;
pub mod chat;
pub mod commands;
pub mod documents;
pub mod downloads;
pub mod error;
pub mod extract;
pub mod gpu_memory;
pub mod library;
pub mod model_library;
pub mod paths;
pub mod scope;
pub mod store;
pub mod worker;

use std::path::PathBuf;

use std::time::Duration;

use tauri::{DragDropEvent, Manager, RunEvent, Runtime, WindowEvent};

use crate::downloads::Downloads;
use crate::paths::AppPaths;
pub use crate::paths::{default_model_path, DEFAULT_MODEL};
use crate::scope::UserFiles;
use crate::store::Store;
use crate::worker::EngineHandle;

/// Registers every command on `builder` (shared by `run` and the tests' mock runtime).
pub fn register<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder.invoke_handler(tauri::generate_handler![
        commands::app::app_info,
        commands::app::pick_open,
        commands::app::pick_save,
        commands::app::read_text_file,
        commands::app::write_text_file,
        commands::model::adapters_list,
        commands::model::model_load,
        commands::model::model_info,
        commands::model::model_unload,
        commands::adapters::adapter_library,
        commands::adapters::lora_add,
        commands::adapters::init_state_add,
        commands::adapters::lora_update,
        commands::adapters::init_state_use,
        commands::adapters::adapter_remove,
        commands::chat::chat_list,
        commands::chat::chat_get,
        commands::chat::chat_create,
        commands::chat::chat_delete,
        commands::chat::chat_rename,
        commands::chat::chat_settings,
        commands::chat::chat_send,
        commands::chat::chat_regenerate,
        commands::chat::chat_edit,
        commands::chat::chat_stop,
        commands::documents::doc_list,
        commands::documents::doc_create,
        commands::documents::doc_delete,
        commands::documents::doc_chat,
        commands::documents::doc_export,
        commands::documents::doc_import,
        commands::documents::fields_run,
        commands::documents::doc_extract_json,
        commands::bench::bench_run,
        commands::bench::bench_dashboard,
        commands::bench::bench_clear,
        commands::server::server_start,
        commands::server::server_stop,
        commands::server::server_status,
        commands::models::catalog_list,
        commands::models::catalog_add,
        commands::models::download_start,
        commands::models::download_resume,
        commands::models::download_pause,
        commands::models::download_cancel,
        commands::models::downloads_list,
        commands::models::library_list,
        commands::models::library_add,
        commands::models::library_delete,
        commands::models::library_reveal,
    ])
}

/// Puts the managed state in place: the store under `data_dir`, the engine thread, the
/// user-file scope, the default model's path and the downloads (into the library folder:
/// `RWKV_MODELS_DIR`, else `$XDG_DATA_HOME/rwkv-studio/models`, else `data_dir/models`).
pub fn manage_state<R: Runtime, M: Manager<R>>(
    app: &M,
    data_dir: PathBuf,
    default_model: PathBuf,
) -> std::io::Result<()> {
    // Opening recovers from a killed run and sets damaged files aside (`store/recovery.rs`).
    let library =
        rwkv_models::paths::default_library_dir().unwrap_or_else(|| data_dir.join("models"));
    app.manage(Downloads::new(library, None));
    let store = Store::open(data_dir)?;
    let aside = library::recover(store.root());
    app.manage(store.with_set_aside(aside));
    app.manage(EngineHandle::spawn()?);
    app.manage(UserFiles::default());
    app.manage(AppPaths { default_model });
    Ok(())
}

/// How long app exit waits for the engine thread to stop the local server.
const EXIT_WAIT: Duration = Duration::from_secs(5);

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
        .build(tauri::generate_context!())
        .unwrap_or_else(|e| {
            eprintln!("RWKV Studio could not start: {e}");
            std::process::exit(1);
        })
        .run(|app, event| {
            if let RunEvent::Exit = event {
                // Running downloads stop between two chunks; their `.part` files stay.
                if let Some(d) = app.try_state::<Downloads>() {
                    d.pause_all();
                }
                // The local server stops cleanly (its port freed) before the process ends.
                if let Some(engine) = app.try_state::<EngineHandle>() {
                    if !engine.shutdown(EXIT_WAIT) {
                        log::warn!("the engine thread did not stop within {EXIT_WAIT:?}");
                    }
                }
            }
        });
}
