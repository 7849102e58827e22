//! Files the user chose. The webview gets no file-system access at all: it asks the
//! backend to show a native dialog (or the user drops files on the window), and the
//! commands that read or write a user path accept only paths chosen that way in this run,
//! for what they were chosen for: a file picked in an open dialog (or dropped) can be read,
//! never overwritten; a path picked in a save dialog can be written, never read back.
//! The app's own data lives under the app data dir and is named by ids, never by paths.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tauri::{AppHandle, Runtime};
use tauri_plugin_dialog::DialogExt;

use crate::error::{AppError, AppResult, ErrorCode};

/// What the user chose a path for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Picked in an open dialog or dropped on the window: to be read.
    Read,
    /// Picked in a save dialog: to be written.
    Write,
}

/// Paths the user chose through a dialog or by dropping them on the window, each with
/// what it was chosen for.
#[derive(Default)]
pub struct UserFiles(Mutex<HashSet<(PathBuf, Access)>>);

impl UserFiles {
    pub fn allow(&self, path: &Path, access: Access) {
        if let Ok(mut s) = self.0.lock() {
            s.insert((path.to_path_buf(), access));
        }
    }

    /// `path` if the user chose it for `access`, else the `scope` error.
    pub fn check(&self, path: &str, access: Access) -> AppResult<PathBuf> {
        let p = PathBuf::from(path);
        let has = |a: Access| {
            self.0
                .lock()
                .map(|s| s.contains(&(p.clone(), a)))
                .unwrap_or(false)
        };
        if has(access) {
            return Ok(p);
        }
        let message = match (access, has(Access::Read) || has(Access::Write)) {
            (Access::Read, true) => {
                format!("{path}: chosen to be saved, not read; open it with the file dialog")
            }
            (Access::Write, true) => format!(
                "{path}: chosen to be read, not written; choose where to save with the save dialog"
            ),
            (Access::Read, false) => {
                format!(
                    "{path}: choose this file with the file dialog or drop it on the window first"
                )
            }
            (Access::Write, false) => {
                format!("{path}: choose where to save with the save dialog first")
            }
        };
        Err(AppError::new(ErrorCode::Scope, message))
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
/// `RWKV_STUDIO_E2E_SAVE_DIR` the folder a save dialog writes into. Compiled only with the
/// `e2e` feature (`scripts/e2e.sh` builds the app with it): a released app ignores them.
#[cfg(feature = "e2e")]
fn e2e_open(kind: FileKind) -> Option<PathBuf> {
    std::env::var_os(format!("RWKV_STUDIO_E2E_OPEN_{}", kind.env_name())).map(PathBuf::from)
}

#[cfg(not(feature = "e2e"))]
fn e2e_open(kind: FileKind) -> Option<PathBuf> {
    let _ = kind.env_name();
    None
}

#[cfg(feature = "e2e")]
fn e2e_save(name: &str) -> Option<PathBuf> {
    std::env::var_os("RWKV_STUDIO_E2E_SAVE_DIR").map(|d| PathBuf::from(d).join(name))
}

#[cfg(not(feature = "e2e"))]
fn e2e_save(_name: &str) -> Option<PathBuf> {
    None
}

/// `name` as a save dialog's proposed file name: one plain component (no separator, not
/// `.` or `..`), so that it can never name a file outside the folder it is saved in.
///
/// Errors: `bad_request`.
pub fn plain_file_name(name: &str) -> AppResult<&str> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).components().count() == 1;
    if plain {
        Ok(name)
    } else {
        Err(AppError::bad_request(format!(
            "`{name}` is not a plain file name (no folders in it)"
        )))
    }
}

/// Shows an open dialog; the chosen path joins [`UserFiles`], to be read.
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
    files.allow(&path, Access::Read);
    Some(path)
}

/// Shows a save dialog proposing `default_name` (a plain file name: [`plain_file_name`]);
/// the chosen path joins [`UserFiles`], to be written. `Ok(None)`: the user cancelled.
pub fn pick_save<R: Runtime>(
    app: &AppHandle<R>,
    files: &UserFiles,
    kind: FileKind,
    default_name: &str,
) -> AppResult<Option<PathBuf>> {
    let default_name = plain_file_name(default_name)?;
    let path = e2e_save(default_name).or_else(|| {
        let (name, ext) = kind.filter();
        app.dialog()
            .file()
            .add_filter(name, ext)
            .set_file_name(default_name)
            .blocking_save_file()
            .and_then(|f| f.into_path().ok())
    });
    if let Some(p) = &path {
        files.allow(p, Access::Write);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chosen_paths_pass() {
        let f = UserFiles::default();
        assert_eq!(
            f.check("/etc/passwd", Access::Read).unwrap_err().code,
            ErrorCode::Scope
        );
        f.allow(Path::new("/home/me/model.gguf"), Access::Read);
        assert_eq!(
            f.check("/home/me/model.gguf", Access::Read).unwrap(),
            PathBuf::from("/home/me/model.gguf")
        );
        assert!(f.check("/home/me/other.gguf", Access::Read).is_err());
    }

    /// Issue 33, item 6: a path chosen to be opened cannot be overwritten, one chosen in a
    /// save dialog cannot be read back, and each error says which dialog to use.
    #[test]
    fn a_path_carries_what_it_was_chosen_for() {
        let f = UserFiles::default();
        f.allow(Path::new("/home/me/notes.txt"), Access::Read);
        f.allow(Path::new("/home/me/fields.csv"), Access::Write);
        assert!(f.check("/home/me/notes.txt", Access::Read).is_ok());
        assert!(f.check("/home/me/fields.csv", Access::Write).is_ok());
        let e = f.check("/home/me/notes.txt", Access::Write).unwrap_err();
        assert_eq!(e.code, ErrorCode::Scope);
        assert!(e.message.contains("not written"), "{}", e.message);
        let e = f.check("/home/me/fields.csv", Access::Read).unwrap_err();
        assert!(e.message.contains("not read"), "{}", e.message);
        // Chosen in both dialogs: both.
        f.allow(Path::new("/home/me/fields.csv"), Access::Read);
        assert!(f.check("/home/me/fields.csv", Access::Read).is_ok());
    }

    #[test]
    fn a_proposed_save_name_is_one_plain_component() {
        for ok in ["fields.csv", "Letter_1.rwkvstate", "a..b"] {
            assert_eq!(plain_file_name(ok).unwrap(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "../x.csv",
            "a/b.csv",
            "/etc/passwd",
            "a\\b",
            "x\0y",
        ] {
            assert_eq!(
                plain_file_name(bad).unwrap_err().code,
                ErrorCode::BadRequest,
                "{bad:?}"
            );
        }
    }

    /// Issue 33, item 6: without the `e2e` feature the test hooks do not exist, whatever
    /// the environment says. (A variable no other test reads: tests share the process.)
    #[cfg(not(feature = "e2e"))]
    #[test]
    fn the_end_to_end_hooks_are_not_in_a_normal_build() {
        std::env::set_var("RWKV_STUDIO_E2E_OPEN_CSV", "/etc/passwd");
        assert_eq!(e2e_open(FileKind::Csv), None);
        std::env::set_var("RWKV_STUDIO_E2E_SAVE_DIR", "/tmp");
        assert_eq!(e2e_save("fields.csv"), None);
    }

    #[cfg(feature = "e2e")]
    #[test]
    fn the_end_to_end_hooks_answer_in_an_e2e_build() {
        std::env::set_var("RWKV_STUDIO_E2E_OPEN_CSV", "/tmp/in.csv");
        assert_eq!(e2e_open(FileKind::Csv), Some(PathBuf::from("/tmp/in.csv")));
    }
}
