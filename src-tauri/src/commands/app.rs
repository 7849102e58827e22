//! The app's info, the native dialogs, and the text files the user chose to read or write.

use serde::Serialize;
use tauri::{AppHandle, Runtime, State};

use crate::documents;
use crate::error::AppResult;
use crate::paths::AppPaths;
use crate::scope::{self, Access, FileKind, UserFiles};
use crate::store::{self, Store};

#[derive(Debug, Clone, Serialize)]
pub struct AppInfo {
    /// The workspace version (the same for the app, the `rwkv` CLI and the Python wheel).
    pub version: String,
    /// The commit the app was built from (12 hex digits, or `unknown`).
    pub commit: String,
    pub data_dir: String,
    pub default_model: String,
    /// Stored files that did not read at startup, moved to `set-aside/` (the UI names them).
    pub set_aside: Vec<store::SetAside>,
}

#[tauri::command]
pub fn app_info(paths: State<'_, AppPaths>, store: State<'_, Store>) -> AppInfo {
    AppInfo {
        version: rwkv_buildinfo::VERSION.to_string(),
        commit: rwkv_buildinfo::COMMIT.to_string(),
        data_dir: store.root().display().to_string(),
        default_model: paths.default_model.display().to_string(),
        set_aside: store.set_aside().to_vec(),
    }
}

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

/// Reads a text file the user chose to open ([`documents::read_user_text`]: a regular file
/// of at most [`documents::MAX_DOC_CHARS`] bytes, judged before a byte is read).
///
/// Errors: `scope`; `bad_request` (too large, not a regular file; `details.bytes`: its
/// size); `not_text`; `io`.
#[tauri::command]
pub async fn read_text_file(files: State<'_, UserFiles>, path: String) -> AppResult<String> {
    let p = files.check(&path, Access::Read)?;
    documents::read_user_text(&p, &path)
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
