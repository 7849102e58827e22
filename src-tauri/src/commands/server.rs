//! The Model view's Local server panel: an OpenAI-compatible server on 127.0.0.1 over the
//! loaded model (`rwkv_server`; the engine side is [`crate::worker::server`]).

use tauri::State;

use crate::error::AppResult;
use crate::worker::server::{ServeOptions, ServerStatus};
use crate::worker::EngineHandle;

/// Starts serving the loaded model on 127.0.0.1:`port` (0: any free port), with an
/// optional API key (blank: none) and up to `parallel` sequences generating at once.
/// The model moves to the server (one copy on the GPU); the app's own jobs borrow it,
/// pausing the server while they run. Returns the status (`base_url`, `port`, …).
///
/// Errors: `bad_request` (a field out of range, named); `no_model`; `server` (the port
/// is taken, `details.port`; it runs already).
#[tauri::command]
pub async fn server_start(
    engine: State<'_, EngineHandle>,
    port: u32,
    api_key: Option<String>,
    parallel: u32,
) -> AppResult<ServerStatus> {
    let opts = ServeOptions::check(port, api_key, parallel)?;
    engine.run(move |w| w.start_server(&opts)).await
}

/// Stops the server (open requests end with 503, the port is freed) and gives the model
/// back to the app. Stopping a stopped server is no error. Returns the status.
#[tauri::command]
pub async fn server_stop(engine: State<'_, EngineHandle>) -> AppResult<ServerStatus> {
    engine.run(|w| Ok(w.stop_server(None))).await?;
    Ok(engine.server_status())
}

/// Whether the server runs, its base URL and its counters (read without waiting for the
/// engine: the panel polls it every second).
#[tauri::command]
pub async fn server_status(engine: State<'_, EngineHandle>) -> AppResult<ServerStatus> {
    Ok(engine.server_status())
}
