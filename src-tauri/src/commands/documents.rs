//! Documents (a text prefilled once into a stored state), their state files, and field
//! analysis against them ([`documents`] does the work).

use tauri::ipc::Response;
use tauri::State;

use crate::documents::{self, FieldInput};
use crate::error::{AppError, AppResult};
use crate::scope::{Access, UserFiles};
use crate::store::{Chat, DocRef, Document, Store};
use crate::worker::EngineHandle;

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
    documents::import(&engine, &store, &src, &path).await
}

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

/// "Extract fields as JSON": fills the JSON Schema `schema` from document `id`'s state
/// (greedy, at most `max_tokens` tokens; see [`crate::extract`]).
#[tauri::command]
pub async fn doc_extract_json(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    id: String,
    schema: serde_json::Value,
    max_tokens: usize,
) -> AppResult<crate::extract::Extracted> {
    crate::extract::extract_json(&engine, &store, &id, schema, max_tokens).await
}
