//! Adapters on the engine thread: the LoRA and initial-state files loaded for the loaded
//! model (the Model view's commands over them: `commands/adapters.rs`).
//!
//! A LoRA file is read (`Engine::read_lora`: checked against the model before its factors
//! are decoded) and loaded on the GPU (`Engine::load_lora`)
//! once per loaded model, and kept by path ([`AdapterCache`]); before each pass for a chat,
//! document or field analysis the worker makes that item's [`AdapterSet`] the engine's active
//! set (`Engine::set_active_loras`, [`AdapterCache::activate`], through
//! [`Worker::prepare`](super::Worker::prepare)), so switching between chats with
//! different adapters costs no reload of anything. Initial states are read once
//! (`InitState::open`) and start new states through `Engine::new_state_from`.
//! A file changed on disk since it was read is read again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rwkv_engine::{Engine, InitState, LoraAdapter, LoraId};

use crate::error::{AppError, AppResult};
use crate::store::AdapterSet;

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
                    .ok_or_else(|| AppError::internal("a loaded LoRA was not kept"))
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

impl AdapterCache {
    /// Makes `set` the active adapters of `eng` (its LoRAs at their scales, each loaded
    /// once by path; none: the base) and returns `set`'s initial state, which new states
    /// of the job start from (`Engine::new_state_from`).
    ///
    /// Errors: a file that does not read or fit the model (named). On an error no LoRA
    /// stays active.
    pub fn activate(
        &mut self,
        eng: &mut Engine,
        set: &AdapterSet,
    ) -> AppResult<Option<Arc<InitState>>> {
        let picked = (|| -> AppResult<_> {
            let mut active = Vec::with_capacity(set.loras.len());
            for l in &set.loras {
                active.push((self.lora_id(eng, Path::new(&l.path))?, l.scale));
            }
            let init = match &set.init_state {
                Some(p) => Some(self.init_state(Path::new(p))?),
                None => None,
            };
            eng.set_active_loras(&active)?;
            Ok(init)
        })();
        if picked.is_err() {
            let _ = eng.set_active_loras(&[]);
        }
        picked
    }
}
