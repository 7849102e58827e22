//! The Tauri commands: each parses its arguments, calls the engine (through
//! [`EngineHandle`]) or the store, and maps the error to `{ code, message, details }`.
//! `src/lib/api.ts` is the frontend's mirror of every command and type here.

use std::path::PathBuf;
use std::time::Instant;

use rwkv_engine::gpu::{context::AdapterSummary, AdapterChoice, GpuContext};
use rwkv_engine::{
    Engine, GenerateOptions, LoadOptions, LoadProgress, ModelFile, ModelInfo, Rwkv7Weights,
};
use serde::Serialize;
use tauri::ipc::{Channel, Response};
use tauri::{AppHandle, Runtime, State};

use crate::bench::{self, BenchOptions, Dashboard};
use crate::chat::{self, ChatEvent};
use crate::documents::{self, FieldInput};
use crate::error::{AppError, AppResult};
use crate::library;
use crate::scope::{self, Access, FileKind, UserFiles};
use crate::store::{self, Chat, ChatSummary, DocRef, Document, Message, Store};
use crate::worker::EngineHandle;
use rwkv_bench::BenchProgress;

/// Where the app finds its files (managed state, set up once).
pub struct AppPaths {
    /// The bundled demo model (`assets/models/` in the repo, resources when installed).
    pub default_model: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct AppInfo {
    pub version: String,
    pub data_dir: String,
    pub default_model: String,
    /// Stored files that did not read at startup, moved to `set-aside/` (the UI names them).
    pub set_aside: Vec<store::SetAside>,
}

#[tauri::command]
pub fn app_info(paths: State<'_, AppPaths>, store: State<'_, Store>) -> AppInfo {
    AppInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        data_dir: store.root().display().to_string(),
        default_model: paths.default_model.display().to_string(),
        set_aside: store.set_aside().to_vec(),
    }
}

// ---------- files ----------

#[tauri::command]
pub async fn pick_open<R: Runtime>(
    app: AppHandle<R>,
    files: State<'_, UserFiles>,
    kind: FileKind,
) -> AppResult<Option<String>> {
    Ok(scope::pick_open(&app, &files, kind).map(|p| p.display().to_string()))
}

#[tauri::command]
pub async fn pick_save<R: Runtime>(
    app: AppHandle<R>,
    files: State<'_, UserFiles>,
    kind: FileKind,
    default_name: String,
) -> AppResult<Option<String>> {
    Ok(scope::pick_save(&app, &files, kind, &default_name)?.map(|p| p.display().to_string()))
}

/// Reads a text file the user chose to open: a regular file of at most
/// [`documents::MAX_DOC_CHARS`] bytes, judged by its size before a byte is read (a huge
/// file, a device such as `/dev/zero` or a FIFO is refused at once, not read into memory).
///
/// Errors: `scope`; `bad_request` (too large, not a regular file; `details.bytes`: its
/// size); `not_text`; `io`.
#[tauri::command]
pub async fn read_text_file(files: State<'_, UserFiles>, path: String) -> AppResult<String> {
    let p = files.check(&path, Access::Read)?;
    // The user's own file may be a link they chose: followed (unlike the store's files),
    // but what it names must be a regular file.
    let meta = std::fs::metadata(&p).map_err(|e| AppError::io(&p, e))?;
    let max = documents::MAX_DOC_CHARS as u64;
    if !meta.is_file() {
        return Err(AppError::bad_request(format!("{path}: not a regular file")));
    }
    if meta.len() > max {
        return Err(AppError::bad_request(format!(
            "{path}: {} bytes, larger than the 16 MiB a document may have",
            meta.len()
        ))
        .with_details(serde_json::json!({ "bytes": meta.len() })));
    }
    let f = std::fs::File::open(&p).map_err(|e| AppError::io(&p, e))?;
    let mut bytes = Vec::new();
    // A file that grew since: still never more than the limit in memory.
    std::io::Read::read_to_end(&mut std::io::Read::take(f, max + 1), &mut bytes)
        .map_err(|e| AppError::io(&p, e))?;
    if bytes.len() as u64 > max {
        return Err(AppError::bad_request(format!(
            "{path}: larger than the 16 MiB a document may have"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| AppError::new("not_text", format!("{path}: not UTF-8 text")))
}

/// Writes text (a CSV or JSON export) to a file the user chose.
#[tauri::command]
pub async fn write_text_file(
    files: State<'_, UserFiles>,
    path: String,
    contents: String,
) -> AppResult<()> {
    let p = files.check(&path, Access::Write)?;
    store::write_atomic(&p, contents.as_bytes())
}

// ---------- model ----------

#[tauri::command]
pub async fn adapters_list(engine: State<'_, EngineHandle>) -> AppResult<Vec<AdapterSummary>> {
    // Enumeration opens the instance: keep it off the UI thread, on the engine's.
    engine.run(|_| Ok(GpuContext::list_adapters())).await
}

/// Loads a model (the bundled one when `path` is absent) on adapter `adapter` (an index of
/// `adapters_list`; absent: automatic), streaming load phases. Replaces a loaded model.
#[tauri::command]
pub async fn model_load(
    engine: State<'_, EngineHandle>,
    paths: State<'_, AppPaths>,
    files: State<'_, UserFiles>,
    path: Option<String>,
    adapter: Option<usize>,
    on_progress: Channel<LoadProgress>,
) -> AppResult<ModelInfo> {
    let path = match path {
        Some(p) => files.check(&p, Access::Read)?,
        None => paths.default_model.clone(),
    };
    engine
        .run(move |w| {
            // `Engine::load_with_progress`, in steps: a file that does not parse (truncated,
            // not RWKV-7, …) fails before the loaded model is touched, so it stays usable.
            let t0 = Instant::now();
            let mut progress = |p: LoadProgress| {
                let _ = on_progress.send(p);
            };
            progress(LoadProgress::Open);
            let file = ModelFile::open(&path)?;
            let weights = Rwkv7Weights::from_file(&file)?;
            if let Some(i) = adapter {
                w.adapter = AdapterChoice::Index(i);
            }
            // One model at a time: free the old one before the new one takes GPU memory.
            w.set_engine(None);
            progress(LoadProgress::Device);
            let gpu = GpuContext::shared(&w.adapter)?;
            let opts = LoadOptions {
                adapter: w.adapter.clone(),
                ..Default::default()
            };
            let eng = Engine::from_weights(gpu, &file, &weights, &opts, &mut progress, t0)?;
            let info = eng.info().clone();
            w.set_engine(Some(eng));
            Ok(info)
        })
        .await
}

#[tauri::command]
pub async fn model_info(engine: State<'_, EngineHandle>) -> AppResult<Option<ModelInfo>> {
    engine
        .run(|w| Ok(w.engine.as_ref().map(|e| e.info().clone())))
        .await
}

#[tauri::command]
pub async fn model_unload(engine: State<'_, EngineHandle>) -> AppResult<()> {
    engine
        .run(|w| {
            w.set_engine(None);
            Ok(())
        })
        .await
}

// ---------- chat ----------

#[tauri::command]
pub async fn chat_list(store: State<'_, Store>) -> AppResult<Vec<ChatSummary>> {
    Ok(store.list_chats())
}

#[tauri::command]
pub async fn chat_get(store: State<'_, Store>, id: String) -> AppResult<Chat> {
    store.load_chat(&id)
}

/// A new chat with the Model view's current adapters (enabled LoRAs, chosen initial state).
#[tauri::command]
pub async fn chat_create(store: State<'_, Store>) -> AppResult<Chat> {
    store.create_chat(None, library::load(&store)?.current())
}

#[tauri::command]
pub async fn chat_delete(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
) -> AppResult<()> {
    engine.cancel(&id);
    store.delete_chat(&id)
}

#[tauri::command]
pub async fn chat_rename(store: State<'_, Store>, id: String, title: String) -> AppResult<Chat> {
    let mut chat = store.load_chat(&id)?;
    let title = title.trim();
    if title.is_empty() {
        return Err(AppError::bad_request("the title is empty"));
    }
    chat.title = title.to_string();
    store.save_chat(&chat)?;
    Ok(chat)
}

/// Sets a chat's sampling settings (checked by the engine's own validation).
#[tauri::command]
pub async fn chat_settings(
    store: State<'_, Store>,
    id: String,
    settings: GenerateOptions,
) -> AppResult<Chat> {
    settings.sampler.validate()?;
    if settings.max_tokens == 0 || settings.max_tokens > 8192 {
        return Err(AppError::bad_request("max tokens must be 1..=8192"));
    }
    let mut chat = store.load_chat(&id)?;
    chat.settings = settings;
    store.save_chat(&chat)?;
    Ok(chat)
}

/// Sends a user message at the end of the chat and streams the reply.
#[tauri::command]
pub async fn chat_send(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    text: String,
    on_event: Channel<ChatEvent>,
) -> AppResult<Message> {
    // A chat ends with a user message only when the app was killed before its reply was
    // stored: the new message takes that turn's place (regenerate retries it instead).
    let keep = store.load_chat(&id)?.messages.len() & !1;
    chat::reply(&engine, &store, &id, keep, &text, on_event).await
}

/// Replies again to the user message before assistant message `index`.
#[tauri::command]
pub async fn chat_regenerate(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    index: usize,
    on_event: Channel<ChatEvent>,
) -> AppResult<Message> {
    let chat = store.load_chat(&id)?;
    let user = index
        .checked_sub(1)
        .and_then(|i| chat.messages.get(i))
        .filter(|m| m.role == store::Role::User)
        .ok_or_else(|| AppError::bad_request(format!("message {index} is not a reply")))?;
    chat::reply(
        &engine,
        &store,
        &id,
        index - 1,
        &user.text.clone(),
        on_event,
    )
    .await
}

/// Replaces user message `index` with `text` (dropping what followed) and replies.
#[tauri::command]
pub async fn chat_edit(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    index: usize,
    text: String,
    on_event: Channel<ChatEvent>,
) -> AppResult<Message> {
    chat::reply(&engine, &store, &id, index, &text, on_event).await
}

/// Stops the chat's running reply. Returns whether one was running.
#[tauri::command]
pub fn chat_stop(engine: State<'_, EngineHandle>, id: String) -> bool {
    engine.cancel(&id)
}

// ---------- documents ----------

#[tauri::command]
pub async fn doc_list(store: State<'_, Store>) -> AppResult<Vec<Document>> {
    Ok(store.list_documents())
}

#[tauri::command]
pub async fn doc_create(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    name: String,
    text: String,
) -> AppResult<Document> {
    documents::create(&engine, &store, &name, text).await
}

#[tauri::command]
pub async fn doc_delete(store: State<'_, Store>, id: String) -> AppResult<()> {
    store.delete_document(&id)
}

/// Starts a chat whose first turn continues from the document's state, with the adapters
/// that state was prefilled with.
#[tauri::command]
pub async fn doc_chat(store: State<'_, Store>, id: String) -> AppResult<Chat> {
    let doc = store.load_document(&id)?;
    store.create_chat(
        Some(DocRef {
            id: doc.id,
            name: doc.name,
        }),
        doc.adapters,
    )
}

/// Copies the document's state file (`.rwkvstate`, docs/state-format.md) to a file the
/// user chose.
#[tauri::command]
pub async fn doc_export(
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    id: String,
    path: String,
) -> AppResult<()> {
    let dest = files.check(&path, Access::Write)?;
    store.load_document(&id)?;
    let src = store.doc_state_path(&id)?;
    std::fs::copy(&src, &dest).map_err(|e| AppError::io(&dest, e))?;
    Ok(())
}

/// Imports a `.rwkvstate` file as a document (its text is unknown: the state is the
/// document). The engine checks the file (checksum, values) and that it belongs to the
/// loaded model.
#[tauri::command]
pub async fn doc_import(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    path: String,
) -> AppResult<Document> {
    let src = files.check(&path, Access::Read)?;
    let id = store::new_id();
    let dest = store.doc_state_path(&id)?;
    if let Some(dir) = dest.parent() {
        store::private_dir(dir).map_err(|e| AppError::io(dir, e))?;
    }
    let src2 = src.clone();
    let (tokens, model) = engine
        .run(move |w| {
            let eng = w.engine()?;
            // Loading checks header, fingerprint, layout and checksum: a foreign or
            // damaged file fails here, with the engine's message.
            let (st, header) = eng.load_state_with_header(&src2)?;
            let _ = eng.free_state(st);
            Ok((header.tokens as usize, chat::model_file_name(eng)))
        })
        .await?;
    std::fs::copy(&src, &dest).map_err(|e| AppError::io(&dest, e))?;
    let doc = Document {
        id,
        name: src
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "imported".into()),
        chars: 0,
        tokens,
        prefill_ms: 0.0,
        tok_s: 0.0,
        model,
        created_ms: store::now_ms(),
        preview: format!("(state imported from {path})"),
        // Unknown: the file holds the state only.
        adapters: Default::default(),
    };
    store.save_document(&doc, "")?;
    Ok(doc)
}

// ---------- fields ----------

/// Embeds `fields` against document `document` (or the zero state) in one batched pass.
/// Returns bytes: a JSON `FieldsMeta` header and `[fields, dim]` f32 (see
/// [`documents::pack_floats`]).
#[tauri::command]
pub async fn fields_run(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    document: Option<String>,
    fields: Vec<FieldInput>,
) -> AppResult<Response> {
    let (meta, data) = documents::run_fields(&engine, &store, document, fields).await?;
    Ok(Response::new(documents::pack_floats(&meta, &data)?))
}

// ---------- benchmarks ----------

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
