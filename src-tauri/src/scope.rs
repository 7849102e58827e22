//! Files the user chose. The webview gets no file-system access at all: it asks the
//! backend to show a native dialog (or the user drops files on the window), and the
//! commands that read or write a user path accept only paths chosen that way in this run.
//! The app's own data lives under the app data dir and is named by ids, never by paths.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tauri::{AppHandle, Runtime};
use tauri_plugin_dialog::DialogExt;

use crate::error::{AppError, AppResult};

/// Paths the user chose through a dialog or by dropping them on the window.
#[derive(Default)]
pub struct UserFiles(Mutex<HashSet<PathBuf>>);

impl UserFiles {
    pub fn allow(&self, path: &Path) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(path.to_path_buf());
        }
    }

    /// `path` if the user chose it, else the `scope` error.
    pub fn check(&self, path: &str) -> AppResult<PathBuf> {
        let p = PathBuf::from(path);
        let ok = self.0.lock().map(|s| s.contains(&p)).unwrap_or(false);
        if ok {
            Ok(p)
        } else {
            Err(AppError::new(
                "scope",
                format!(
                    "{path}: choose this file with the file dialog or drop it on the window first"
                ),
            ))
        }
    }
}

/// What a dialog is for: sets its filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    Model,
    Text,
    State,
    Csv,
    Json,
    /// A LoRA adapter (RWKV-PEFT `.pth` / `.safetensors`, llama.cpp GGUF adapter).
    Lora,
    /// A state-tuned initial state (RWKV-PEFT `blocks.N.att.time_state`).
    InitState,
}

impl FileKind {
    fn filter(self) -> (&'static str, &'static [&'static str]) {
        match self {
            FileKind::Model => ("RWKV-7 model", &["gguf", "safetensors", "pth"]),
            FileKind::Text => ("Text", &["txt", "md", "markdown", "text", "csv", "json"]),
            FileKind::State => ("RWKV state", &["rwkvstate", "state"]),
            FileKind::Csv => ("CSV", &["csv"]),
            FileKind::Json => ("JSON", &["json"]),
            FileKind::Lora => ("LoRA adapter", &["safetensors", "pth", "gguf"]),
            FileKind::InitState => ("RWKV initial state", &["safetensors", "pth"]),
        }
    }

    fn env_name(self) -> &'static str {
        match self {
            FileKind::Model => "MODEL",
            FileKind::Text => "TEXT",
            FileKind::State => "STATE",
            FileKind::Csv => "CSV",
            FileKind::Json => "JSON",
            FileKind::Lora => "LORA",
            FileKind::InitState => "INIT_STATE",
        }
    }
}

/// WebDriver cannot reach native GTK dialogs, so the end-to-end test answers them through
/// the environment: `RWKV_STUDIO_E2E_OPEN_<KIND>` is the file an open dialog returns and
/// `RWKV_STUDIO_E2E_SAVE_DIR` the folder a save dialog writes into. Unset in normal use.
fn e2e_open(kind: FileKind) -> Option<PathBuf> {
    std::env::var_os(format!("RWKV_STUDIO_E2E_OPEN_{}", kind.env_name())).map(PathBuf::from)
}

fn e2e_save(name: &str) -> Option<PathBuf> {
    std::env::var_os("RWKV_STUDIO_E2E_SAVE_DIR").map(|d| PathBuf::from(d).join(name))
}

/// Shows an open dialog; the chosen path joins [`UserFiles`].
pub fn pick_open<R: Runtime>(
    app: &AppHandle<R>,
    files: &UserFiles,
    kind: FileKind,
) -> Option<PathBuf> {
    let path = e2e_open(kind).or_else(|| {
        let (name, ext) = kind.filter();
        app.dialog()
            .file()
            .add_filter(name, ext)
            .blocking_pick_file()
            .and_then(|f| f.into_path().ok())
    })?;
    files.allow(&path);
    Some(path)
}

/// Shows a save dialog proposing `default_name`; the chosen path joins [`UserFiles`].
pub fn pick_save<R: Runtime>(
    app: &AppHandle<R>,
    files: &UserFiles,
    kind: FileKind,
    default_name: &str,
) -> Option<PathBuf> {
    let path = e2e_save(default_name).or_else(|| {
        let (name, ext) = kind.filter();
        app.dialog()
            .file()
            .add_filter(name, ext)
            .set_file_name(default_name)
            .blocking_save_file()
            .and_then(|f| f.into_path().ok())
    })?;
    files.allow(&path);
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chosen_paths_pass() {
        let f = UserFiles::default();
        assert_eq!(f.check("/etc/passwd").unwrap_err().code, "scope");
        f.allow(Path::new("/home/me/model.gguf"));
        assert_eq!(
            f.check("/home/me/model.gguf").unwrap(),
            PathBuf::from("/home/me/model.gguf")
        );
        assert!(f.check("/home/me/other.gguf").is_err());
    }
}
