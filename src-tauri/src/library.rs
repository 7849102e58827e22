//! The Model view's adapter list (`adapters/library.json`): the LoRA files and initial-state
//! files the user added, what each holds, each LoRA's scale and whether it is enabled, and
//! which initial state is chosen. New chats, documents and field analyses take
//! [`Library::current`] as their [`AdapterSet`]; a chat keeps its own copy from then on.
//!
//! Paths enter the list only through a file dialog or a drop ([`crate::scope`]); later runs
//! of the app load them from here and from the chats that recorded them (the app's own
//! data, never a path the webview sends).

use std::path::Path;
use std::sync::Mutex;

use rwkv_engine::{AdapterFormat, InitState, LoraAdapter, LoraTarget};
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};
use crate::store::{self, AdapterSet, LoraUse, SetAside, Store};

/// A LoRA file in the list (`LoraEntry` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraEntry {
    pub path: String,
    /// File name.
    pub name: String,
    /// `safetensors`, `pth` or `gguf`.
    pub format: String,
    /// The largest rank of its matrices.
    pub rank: usize,
    /// Alpha from the file, if it holds one.
    pub alpha: Option<f32>,
    /// The block matrices it adapts (BlinkDL names: `att.key`, `ffn.value`, …).
    pub targets: Vec<String>,
    /// Adapted matrices in all (targets × layers when every layer is adapted).
    pub matrices: usize,
    /// Layers with at least one adapted matrix.
    pub layers: usize,
    /// `LoraAdapter::default_scale`: alpha / rank when the file holds alpha, else 1.
    pub default_scale: f32,
    /// The scale `s` of the delta `s · B A` new chats use.
    pub scale: f32,
    pub enabled: bool,
}

/// An initial-state file in the list (`StateEntry` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateEntry {
    pub path: String,
    pub name: String,
    pub format: String,
    pub n_layer: usize,
    pub n_head: usize,
    pub head_size: usize,
    /// The one new chats start from (at most one is).
    pub active: bool,
}

/// The list (`AdapterLibrary` in `src/lib/api.ts`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Library {
    #[serde(default)]
    pub loras: Vec<LoraEntry>,
    #[serde(default)]
    pub states: Vec<StateEntry>,
}

/// Most scale magnitude accepted (a delta 100× its trained size is never meant).
pub const MAX_SCALE: f32 = 100.0;

fn format_name(f: AdapterFormat) -> String {
    match f {
        AdapterFormat::Pth => "pth",
        AdapterFormat::SafeTensors => "safetensors",
        AdapterFormat::Gguf => "gguf",
    }
    .to_string()
}

impl LoraEntry {
    /// The entry for `adapter`, read from `path`: enabled, at its default scale.
    pub fn describe(path: &Path, adapter: &LoraAdapter) -> Self {
        let mut targets: Vec<LoraTarget> = adapter.matrices.iter().map(|m| m.target).collect();
        targets.sort();
        targets.dedup();
        let mut layers: Vec<usize> = adapter.matrices.iter().map(|m| m.layer).collect();
        layers.sort_unstable();
        layers.dedup();
        let default_scale = adapter.default_scale();
        LoraEntry {
            path: path.display().to_string(),
            name: adapter.name.clone(),
            format: format_name(adapter.format),
            rank: adapter.rank(),
            alpha: adapter.alpha,
            targets: targets.iter().map(|t| t.name().to_string()).collect(),
            matrices: adapter.matrices.len(),
            layers: layers.len(),
            default_scale,
            scale: default_scale,
            enabled: true,
        }
    }
}

impl StateEntry {
    /// The entry for `state`, read from `path`: not yet the active one.
    pub fn describe(path: &Path, state: &InitState) -> Self {
        StateEntry {
            path: path.display().to_string(),
            name: state.name.clone(),
            format: format_name(state.format),
            n_layer: state.n_layer,
            n_head: state.n_head,
            head_size: state.head_size,
            active: false,
        }
    }
}

impl Library {
    /// What new chats, documents and analyses run with: the enabled LoRAs in list order at
    /// their scales, and the active initial state.
    pub fn current(&self) -> AdapterSet {
        AdapterSet {
            loras: self
                .loras
                .iter()
                .filter(|l| l.enabled)
                .map(|l| LoraUse {
                    path: l.path.clone(),
                    scale: l.scale,
                })
                .collect(),
            init_state: self
                .states
                .iter()
                .find(|s| s.active)
                .map(|s| s.path.clone()),
        }
    }

    /// Adds (or replaces, keeping its place, scale and switch) the LoRA at `e.path`.
    pub fn add_lora(&mut self, e: LoraEntry) {
        match self.loras.iter_mut().find(|l| l.path == e.path) {
            Some(old) => {
                *old = LoraEntry {
                    scale: old.scale,
                    enabled: old.enabled,
                    ..e
                }
            }
            None => self.loras.push(e),
        }
    }

    /// Adds (or replaces) the initial state at `e.path` and makes it the active one.
    pub fn add_state(&mut self, e: StateEntry) {
        let path = e.path.clone();
        match self.states.iter_mut().find(|s| s.path == e.path) {
            Some(old) => *old = e,
            None => self.states.push(e),
        }
        self.use_state(Some(&path))
            .unwrap_or_else(|_| log::warn!("state {path} vanished from the list"));
    }

    /// Sets a LoRA's scale and switch.
    ///
    /// Errors: `not_found` for a path not in the list; `bad_request` for a scale that is
    /// not finite or beyond ±[`MAX_SCALE`].
    pub fn update_lora(&mut self, path: &str, scale: f32, enabled: bool) -> AppResult<()> {
        if !scale.is_finite() || scale.abs() > MAX_SCALE {
            return Err(AppError::bad_request(format!(
                "scale {scale}: give a number between -{MAX_SCALE} and {MAX_SCALE}"
            )));
        }
        let e = self
            .loras
            .iter_mut()
            .find(|l| l.path == path)
            .ok_or_else(|| AppError::not_found("LoRA", path))?;
        e.scale = scale;
        e.enabled = enabled;
        Ok(())
    }

    /// Makes `path` the active initial state (`None`: none, new chats start from zero).
    ///
    /// Errors: `not_found` for a path not in the list.
    pub fn use_state(&mut self, path: Option<&str>) -> AppResult<()> {
        if let Some(p) = path {
            if !self.states.iter().any(|s| s.path == p) {
                return Err(AppError::not_found("initial state", p));
            }
        }
        for s in &mut self.states {
            s.active = Some(s.path.as_str()) == path;
        }
        Ok(())
    }

    /// Removes the LoRA or initial state at `path`. Returns whether it was a LoRA.
    ///
    /// Errors: `not_found` for a path in neither list.
    pub fn remove(&mut self, path: &str) -> AppResult<bool> {
        let (nl, ns) = (self.loras.len(), self.states.len());
        self.loras.retain(|l| l.path != path);
        self.states.retain(|s| s.path != path);
        match (self.loras.len() < nl, self.states.len() < ns) {
            (true, _) => Ok(true),
            (false, true) => Ok(false),
            (false, false) => Err(AppError::not_found("adapter", path)),
        }
    }
}

/// Where the list lives under the data folder.
pub const LIBRARY_FILE: &str = "adapters/library.json";

/// Parses the list file (what [`recover`] checks at startup).
pub fn check_library(bytes: &[u8]) -> Result<Library, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// The stored list (empty before the first adapter is added).
pub fn load(store: &Store) -> AppResult<Library> {
    let p = store.root().join(LIBRARY_FILE);
    if std::fs::symlink_metadata(&p).is_err() {
        return Ok(Library::default());
    }
    let bytes =
        store::read_regular(&p, store::MAX_RECORD_BYTES).map_err(|e| AppError::io(&p, e))?;
    check_library(&bytes).map_err(|e| AppError::corrupt(&p, e))
}

/// Reads the list, applies `f`, and stores the result if `f` succeeded; one edit at a time
/// (two quick clicks never lose one another's change). Returns the new list and `f`'s value.
pub fn edit<T>(
    store: &Store,
    f: impl FnOnce(&mut Library) -> AppResult<T>,
) -> AppResult<(Library, T)> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut lib = load(store)?;
    let v = f(&mut lib)?;
    save(store, &lib)?;
    Ok((lib, v))
}

pub fn save(store: &Store, lib: &Library) -> AppResult<()> {
    let p = store.root().join(LIBRARY_FILE);
    let bytes = serde_json::to_vec_pretty(lib).map_err(|e| AppError::corrupt(&p, e))?;
    store::write_atomic(&p, &bytes)
}

/// At startup, after [`Store::open`]: a list file that does not read is moved to
/// `set-aside/` (as the store's recovery does with chats), so the app starts with an empty list
/// and names the file. Returns what was set aside.
pub fn recover(root: &Path) -> Vec<SetAside> {
    let p = root.join(LIBRARY_FILE);
    if std::fs::symlink_metadata(&p).is_err() {
        return Vec::new();
    }
    // A link or special file in its place is set aside like a list that does not parse.
    let read = store::read_regular(&p, store::MAX_RECORD_BYTES).map_err(|e| e.to_string());
    match read.and_then(|b| check_library(&b)) {
        Ok(_) => Vec::new(),
        Err(reason) => vec![store::set_aside(
            root,
            &p,
            LIBRARY_FILE,
            "adapter list".to_string(),
            reason,
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use rwkv_engine::LoraMatrix;

    fn matrix(layer: usize, target: LoraTarget, rank: usize) -> LoraMatrix {
        LoraMatrix {
            layer,
            target,
            rank,
            n_in: 8,
            n_out: 8,
            a: vec![0.0; rank * 8],
            b: vec![0.0; 8 * rank],
        }
    }

    fn adapter(alpha: Option<f32>) -> LoraAdapter {
        LoraAdapter {
            name: "style.safetensors".into(),
            format: AdapterFormat::SafeTensors,
            alpha,
            matrices: vec![
                matrix(0, LoraTarget::Key, 4),
                matrix(0, LoraTarget::FfnValue, 2),
                matrix(2, LoraTarget::Key, 4),
            ],
        }
    }

    #[test]
    fn an_entry_says_what_the_file_holds() {
        let e = LoraEntry::describe(Path::new("/a/style.safetensors"), &adapter(Some(8.0)));
        assert_eq!(e.name, "style.safetensors");
        assert_eq!(e.format, "safetensors");
        assert_eq!(e.rank, 4, "the largest rank");
        assert_eq!(e.targets, ["att.key", "ffn.value"]);
        assert_eq!((e.matrices, e.layers), (3, 2));
        // alpha 8 over rank 4; without alpha, 1 (RWKV-PEFT and llama.cpp both scale so).
        assert_eq!((e.default_scale, e.scale, e.enabled), (2.0, 2.0, true));
        let e = LoraEntry::describe(Path::new("/a/x.pth"), &adapter(None));
        assert_eq!(e.default_scale, 1.0);
    }

    fn library() -> Library {
        let mut lib = Library::default();
        lib.add_lora(LoraEntry::describe(
            Path::new("/a/one"),
            &adapter(Some(8.0)),
        ));
        lib.add_lora(LoraEntry::describe(Path::new("/a/two"), &adapter(None)));
        let state = |p: &str| StateEntry {
            path: p.into(),
            name: "s".into(),
            format: "pth".into(),
            n_layer: 6,
            n_head: 4,
            head_size: 64,
            active: false,
        };
        lib.add_state(state("/s/a"));
        lib.add_state(state("/s/b"));
        lib
    }

    #[test]
    fn the_current_set_is_the_enabled_loras_and_the_active_state() {
        let mut lib = library();
        let cur = lib.current();
        let paths: Vec<(&str, f32)> = cur
            .loras
            .iter()
            .map(|l| (l.path.as_str(), l.scale))
            .collect();
        assert_eq!(paths, [("/a/one", 2.0), ("/a/two", 1.0)]);
        assert_eq!(
            cur.init_state.as_deref(),
            Some("/s/b"),
            "the last added is active"
        );
        lib.update_lora("/a/one", 0.5, false).unwrap();
        lib.update_lora("/a/two", -1.5, true).unwrap();
        lib.use_state(Some("/s/a")).unwrap();
        let cur = lib.current();
        assert_eq!(cur.loras.len(), 1);
        assert_eq!(
            (cur.loras[0].path.as_str(), cur.loras[0].scale),
            ("/a/two", -1.5)
        );
        assert_eq!(cur.init_state.as_deref(), Some("/s/a"));
        assert_eq!(lib.states.iter().filter(|s| s.active).count(), 1);
        lib.use_state(None).unwrap();
        assert_eq!(lib.current().init_state, None);
        // Adding a file again refreshes what it holds but keeps the user's scale and switch.
        lib.add_lora(LoraEntry::describe(
            Path::new("/a/one"),
            &adapter(Some(16.0)),
        ));
        let one = &lib.loras[0];
        assert_eq!(
            (one.default_scale, one.scale, one.enabled),
            (4.0, 0.5, false)
        );
        assert_eq!(lib.loras.len(), 2);
    }

    #[test]
    fn bad_edits_are_refused_and_nothing_changes() {
        let mut lib = library();
        let before = lib.clone();
        assert_eq!(
            lib.update_lora("/a/one", f32::NAN, true).unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            lib.update_lora("/a/one", 1e4, true).unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            lib.update_lora("/nope", 1.0, true).unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(
            lib.use_state(Some("/nope")).unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(lib.remove("/nope").unwrap_err().code, ErrorCode::NotFound);
        assert_eq!(lib, before);
        assert!(lib.remove("/a/one").unwrap(), "a LoRA");
        assert!(!lib.remove("/s/b").unwrap(), "a state");
        assert_eq!(
            lib.current().init_state,
            None,
            "the active state was removed"
        );
    }

    #[test]
    fn the_list_persists_and_a_damaged_one_is_set_aside() {
        let root = std::env::temp_dir().join(format!("rwkv-library-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let store = Store::new(&root);
        assert_eq!(load(&store).unwrap(), Library::default(), "none yet");
        let (lib, ()) = edit(&store, |l| {
            *l = library();
            Ok(())
        })
        .unwrap();
        assert_eq!(load(&store).unwrap(), lib);
        // A failed edit stores nothing.
        assert!(edit(&store, |l| l.update_lora("/nope", 1.0, true)).is_err());
        assert_eq!(load(&store).unwrap(), lib);
        assert!(recover(&root).is_empty(), "a good list stays");

        std::fs::write(root.join(LIBRARY_FILE), b"{\"loras\": [{\"path\": 3}]}").unwrap();
        assert_eq!(load(&store).unwrap_err().code, ErrorCode::CorruptFile);
        let aside = recover(&root);
        assert_eq!(aside.len(), 1);
        assert_eq!(
            (aside[0].item.as_str(), aside[0].was.as_str()),
            ("adapter list", LIBRARY_FILE)
        );
        assert!(!root.join(LIBRARY_FILE).exists());
        assert_eq!(
            load(&store).unwrap(),
            Library::default(),
            "the app starts with an empty list"
        );
        std::fs::remove_dir_all(&root).ok();
    }
}
