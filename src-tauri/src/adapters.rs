//! Adapters on the engine thread, and the Model view's commands over them.
//!
//! A LoRA file is read (`Engine::read_lora`: checked against the model before its factors
//! are decoded) and loaded on the GPU (`Engine::load_lora`)
//! once per loaded model, and kept by path ([`AdapterCache`]); before each pass for a chat,
//! document or field analysis the worker makes that item's [`AdapterSet`] the engine's active
//! set (`Engine::set_active_loras`, [`Worker::prepare`]), so switching between chats with
//! different adapters costs no reload of anything. Initial states are read once
//! (`InitState::open`) and start new states through `Engine::new_state_from`.
//! A file changed on disk since it was read is read again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rwkv_engine::{Engine, InitState, LoraAdapter, LoraId};
use tauri::State;

use crate::error::{AppError, AppResult};
use crate::library::{self, Library, LoraEntry, StateEntry};
use crate::scope::{Access, UserFiles};
use crate::store::{AdapterSet, Store};
use crate::worker::{EngineHandle, Worker};

/// What a file looked like when it was read: length and modification time.
type Stamp = (u64, Option<SystemTime>);

fn stamp(p: &Path) -> AppResult<Stamp> {
    let m = std::fs::metadata(p).map_err(|e| AppError::io(p, e))?;
    Ok((m.len(), m.modified().ok()))
}

/// The adapters of the loaded model, by file (emptied when the model changes).
#[derive(Default)]
pub struct AdapterCache {
    loras: HashMap<PathBuf, (Stamp, LoraId)>,
    states: HashMap<PathBuf, (Stamp, Arc<InitState>)>,
    /// LoRA files read and loaded into an engine since the app started (the tests check
    /// that switching chats loads none).
    pub lora_loads: u64,
}

impl AdapterCache {
    /// Forgets everything (the engine they belonged to is gone).
    pub fn clear(&mut self) {
        self.loras.clear();
        self.states.clear();
    }

    /// Reads the LoRA at `path`, loads it on `eng` (replacing an older load of the same
    /// path), and returns what it holds.
    ///
    /// Errors: the reader's (`io`, `malformed_file`, `adapter` naming the tensor) and the
    /// engine's (`adapter`: shapes or layers that do not fit the model).
    pub fn load_lora(&mut self, eng: &mut Engine, path: &Path) -> AppResult<LoraAdapter> {
        let st = stamp(path)?;
        // Checked against the model before its factors are decoded.
        let adapter = eng.read_lora(path)?;
        self.unload_lora(eng, path);
        let id = eng.load_lora(&adapter)?;
        self.lora_loads += 1;
        self.loras.insert(path.to_path_buf(), (st, id));
        Ok(adapter)
    }

    /// The id of `path`'s LoRA on `eng`: the cached one, or read and loaded now.
    pub fn lora_id(&mut self, eng: &mut Engine, path: &Path) -> AppResult<LoraId> {
        let st = stamp(path)?;
        match self.loras.get(path) {
            Some((s, id)) if *s == st => Ok(*id),
            _ => {
                self.load_lora(eng, path)?;
                self.loras
                    .get(path)
                    .map(|(_, id)| *id)
                    .ok_or_else(|| AppError::new("internal", "a loaded LoRA was not kept"))
            }
        }
    }

    /// Frees `path`'s LoRA on the GPU, if it is loaded.
    pub fn unload_lora(&mut self, eng: &mut Engine, path: &Path) {
        if let Some((_, id)) = self.loras.remove(path) {
            if let Err(e) = eng.unload_lora(id) {
                log::warn!("unloading {}: {e}", path.display());
            }
        }
    }

    /// The initial state at `path`, read on first use (or when the file changed).
    ///
    /// Errors: the reader's (`io`, `malformed_file`, `adapter`).
    pub fn init_state(&mut self, path: &Path) -> AppResult<Arc<InitState>> {
        let st = stamp(path)?;
        if let Some((s, state)) = self.states.get(path) {
            if *s == st {
                return Ok(state.clone());
            }
        }
        let state = Arc::new(InitState::open(path)?);
        self.states.insert(path.to_path_buf(), (st, state.clone()));
        Ok(state)
    }
}

impl Worker {
    /// Makes `set` the engine's active adapters (its LoRAs at their scales; none: the
    /// base) and returns the engine with `set`'s initial state, which new states of the
    /// job start from (`Engine::new_state_from`).
    ///
    /// Errors: `no_model`; a file that does not read or fit the model (named). On an
    /// error no LoRA stays active.
    pub fn prepare(
        &mut self,
        set: &AdapterSet,
    ) -> AppResult<(&mut Engine, Option<Arc<InitState>>)> {
        let eng = self.engine.as_mut().ok_or_else(AppError::no_model)?;
        let cache = &mut self.adapters;
        let picked = (|| -> AppResult<_> {
            let mut active = Vec::with_capacity(set.loras.len());
            for l in &set.loras {
                active.push((cache.lora_id(eng, Path::new(&l.path))?, l.scale));
            }
            let init = match &set.init_state {
                Some(p) => Some(cache.init_state(Path::new(p))?),
                None => None,
            };
            eng.set_active_loras(&active)?;
            Ok(init)
        })();
        match picked {
            Ok(init) => Ok((eng, init)),
            Err(e) => {
                let _ = eng.set_active_loras(&[]);
                Err(e)
            }
        }
    }
}

// ---------- commands ----------

#[tauri::command]
pub async fn adapter_library(store: State<'_, Store>) -> AppResult<Library> {
    library::load(&store)
}

/// Adds a LoRA file the user chose: reads it, loads it on the loaded model (if any: a
/// file that does not fit fails here, with the tensor named), lists it enabled at its
/// default scale.
#[tauri::command]
pub async fn lora_add(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    path: String,
) -> AppResult<Library> {
    let p = files.check(&path, Access::Read)?;
    let entry = engine
        .run(move |w| {
            let adapter = match w.engine.as_mut() {
                Some(eng) => w.adapters.load_lora(eng, &p)?,
                None => LoraAdapter::open(&p)?,
            };
            Ok(LoraEntry::describe(&p, &adapter))
        })
        .await?;
    Ok(library::edit(&store, |lib| {
        lib.add_lora(entry);
        Ok(())
    })?
    .0)
}

/// Adds an initial-state file the user chose and makes it the one new chats start from.
/// With a model loaded, its shape is checked against the model here.
#[tauri::command]
pub async fn init_state_add(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    files: State<'_, UserFiles>,
    path: String,
) -> AppResult<Library> {
    let p = files.check(&path, Access::Read)?;
    let entry = engine
        .run(move |w| {
            let state = w.adapters.init_state(&p)?;
            if let Some(eng) = w.engine.as_ref() {
                state.check(eng.config())?;
            }
            Ok(StateEntry::describe(&p, &state))
        })
        .await?;
    Ok(library::edit(&store, |lib| {
        lib.add_state(entry);
        Ok(())
    })?
    .0)
}

/// Sets a listed LoRA's scale and whether new chats use it.
#[tauri::command]
pub async fn lora_update(
    store: State<'_, Store>,
    path: String,
    scale: f32,
    enabled: bool,
) -> AppResult<Library> {
    Ok(library::edit(&store, |lib| lib.update_lora(&path, scale, enabled))?.0)
}

/// Chooses the initial state new chats start from (`null`: the zero state).
#[tauri::command]
pub async fn init_state_use(store: State<'_, Store>, path: Option<String>) -> AppResult<Library> {
    Ok(library::edit(&store, |lib| lib.use_state(path.as_deref()))?.0)
}

/// Removes a LoRA or initial state from the list (and a LoRA from the GPU). Chats that use
/// it keep their copy of the path and load it again when they next run.
#[tauri::command]
pub async fn adapter_remove(
    engine: State<'_, EngineHandle>,
    store: State<'_, Store>,
    path: String,
) -> AppResult<Library> {
    let (lib, was_lora) = library::edit(&store, |lib| lib.remove(&path))?;
    if was_lora {
        engine
            .run(move |w| {
                if let Some(eng) = w.engine.as_mut() {
                    w.adapters.unload_lora(eng, Path::new(&path));
                }
                Ok(())
            })
            .await?;
    }
    Ok(lib)
}
