//! The model library: the model files on disk the app offers to load — those downloaded
//! into the library folder (`$XDG_DATA_HOME/rwkv-studio/models`, [`rwkv_models::paths`])
//! and those the user added from elsewhere (a list of paths kept in the app's data folder,
//! `models.json`; the files themselves stay where they are). Each is described with its
//! size, its encoding and the GPU memory it needs (the catalog's figure when a catalog
//! entry has its file name, else an estimate from its size), so the view can say whether
//! it fits the GPU ([`crate::gpu_memory`]).

use std::path::{Path, PathBuf};

use rwkv_models::Catalog;
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};
use crate::store;

/// The file in the app's data folder listing the models the user added.
pub const ADDED_FILE: &str = "models.json";

/// File extensions of the model formats the engine loads.
pub const MODEL_EXTENSIONS: [&str; 3] = ["gguf", "safetensors", "pth"];

/// GPU memory a model of `bytes` needs when no catalog entry says: its weights stay in
/// their file encoding on the GPU, plus about 10 % for states and activations (the
/// catalog's own estimates use the same rule, docs/models.md).
pub fn estimate_vram(bytes: u64) -> u64 {
    bytes + bytes / 10
}

/// Where a library model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Downloaded into the library folder (deleting removes the file).
    Downloaded,
    /// Added by the user from elsewhere (removing forgets it; the file stays).
    Added,
}

/// One model of the library (`LibraryModel` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LibraryModel {
    pub path: String,
    pub file_name: String,
    /// Size on disk, bytes (0 for an added file that is gone).
    pub bytes: u64,
    /// The catalog's encoding (`gguf-q4_k_m`, …) or the file's format by its extension.
    pub encoding: String,
    /// The catalog entry with this file name, if any.
    pub catalog: Option<String>,
    /// GPU memory it needs, bytes: the catalog's figure or [`estimate_vram`].
    pub vram_bytes: u64,
    /// Whether `vram_bytes` is the size-based estimate (no catalog figure).
    pub vram_estimated: bool,
    pub origin: Origin,
    /// The file is not there any more (an added file moved or deleted elsewhere).
    pub missing: bool,
}

/// The paths the user added, as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Added {
    paths: Vec<String>,
}

/// Lists the library: the model files in `dir` (no `.part`), then the added ones.
///
/// Errors: `io` when `dir` exists but cannot be listed; `corrupt_file` for a damaged
/// `models.json`.
pub fn list(dir: &Path, data_dir: &Path, catalog: &Catalog) -> AppResult<Vec<LibraryModel>> {
    let mut out = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file() && is_model_file(p))
                .collect();
            files.sort();
            for p in files {
                out.push(describe(&p, Origin::Downloaded, catalog));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AppError::io(dir, e)),
    }
    for p in read_added(data_dir)?.paths {
        let p = PathBuf::from(p);
        if !out.iter().any(|m| Path::new(&m.path) == p) {
            out.push(describe(&p, Origin::Added, catalog));
        }
    }
    Ok(out)
}

/// Adds a model file the user chose to the list (once).
///
/// Errors: `bad_request` for a file that is not a model by its extension; `io`.
pub fn add(data_dir: &Path, path: &Path) -> AppResult<()> {
    if !is_model_file(path) {
        return Err(AppError::bad_request(format!(
            "{}: not a model file (.gguf, .safetensors or .pth)",
            path.display()
        )));
    }
    let mut added = read_added(data_dir)?;
    let p = path.display().to_string();
    if !added.paths.contains(&p) {
        added.paths.push(p);
        write_added(data_dir, &added)?;
    }
    Ok(())
}

/// Whether `path` is a model of the library (a model file in `dir`, or an added one): the
/// paths `model_load` accepts without a file dialog.
pub fn contains(dir: &Path, data_dir: &Path, path: &Path) -> bool {
    let in_dir = path.parent() == Some(dir) && is_model_file(path) && path.is_file();
    in_dir
        || read_added(data_dir)
            .map(|a| a.paths.iter().any(|p| Path::new(p) == path))
            .unwrap_or(false)
}

/// Removes `path` from the library: a downloaded file is deleted; an added one is only
/// forgotten (the file stays where the user keeps it). Returns whether a file was deleted.
///
/// Errors: `not_found` when the path is not in the library; `io`.
pub fn remove(dir: &Path, data_dir: &Path, path: &Path) -> AppResult<bool> {
    if path.parent() == Some(dir) && is_model_file(path) && path.is_file() {
        std::fs::remove_file(path).map_err(|e| AppError::io(path, e))?;
        return Ok(true);
    }
    let mut added = read_added(data_dir)?;
    let before = added.paths.len();
    added.paths.retain(|p| Path::new(p) != path);
    if added.paths.len() == before {
        return Err(AppError::not_found(
            "library model",
            &path.display().to_string(),
        ));
    }
    write_added(data_dir, &added)?;
    Ok(false)
}

fn describe(p: &Path, origin: Origin, catalog: &Catalog) -> LibraryModel {
    let file_name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let meta = std::fs::metadata(p).ok();
    let bytes = meta.as_ref().map_or(0, |m| m.len());
    let entry = catalog.entries.iter().find(|e| e.file_name == file_name);
    let encoding = match entry {
        Some(e) => serde_json::to_value(e.encoding)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        None => extension(p).unwrap_or_default(),
    };
    let vram = entry.and_then(|e| e.vram_bytes);
    LibraryModel {
        path: p.display().to_string(),
        file_name,
        bytes,
        encoding,
        catalog: entry.map(|e| e.name.clone()),
        vram_bytes: vram.unwrap_or_else(|| estimate_vram(bytes)),
        vram_estimated: vram.is_none(),
        origin,
        missing: meta.is_none(),
    }
}

fn extension(p: &Path) -> Option<String> {
    p.extension()
        .map(|x| x.to_string_lossy().to_ascii_lowercase())
}

fn is_model_file(p: &Path) -> bool {
    extension(p).is_some_and(|x| MODEL_EXTENSIONS.contains(&x.as_str()))
}

fn read_added(data_dir: &Path) -> AppResult<Added> {
    let path = data_dir.join(ADDED_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| AppError::corrupt(&path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Added::default()),
        Err(e) => Err(AppError::io(&path, e)),
    }
}

fn write_added(data_dir: &Path, added: &Added) -> AppResult<()> {
    let path = data_dir.join(ADDED_FILE);
    let text = serde_json::to_vec_pretty(added)
        .map_err(|e| AppError::internal(format!("models.json: {e}")))?;
    store::write_atomic(&path, &text)
}

/// Shows `path` in the system's file manager: its folder opened (Linux: `xdg-open`),
/// the file selected where the platform can (macOS `open -R`, Windows Explorer).
///
/// Errors: `io` when the file manager cannot be started.
pub fn reveal(path: &Path) -> AppResult<()> {
    let folder = path.parent().unwrap_or(path);
    let mut cmd = if cfg!(target_os = "macos") {
        let mut c = std::process::Command::new("open");
        c.arg("-R").arg(path);
        c
    } else if cfg!(target_os = "windows") {
        let mut c = std::process::Command::new("explorer");
        c.arg(format!("/select,{}", path.display()));
        c
    } else {
        let mut c = std::process::Command::new("xdg-open");
        c.arg(folder);
        c
    };
    let mut child = cmd.spawn().map_err(|e| AppError::io(folder, e))?;
    // Reaped off the command's thread (xdg-open may live as long as the file manager).
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}
