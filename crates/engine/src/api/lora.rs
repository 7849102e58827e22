//! Adapters on the engine: LoRA adapters uploaded once and applied at run time to a base
//! kept in its file encoding (several loaded, an active set with scales chosen per call,
//! no model reload), and state-tuned initial states.

use std::sync::Arc;

use serde::Serialize;

use super::{Engine, StateId};
use crate::adapter::{InitState, LoraAdapter, LoraBase};
use crate::error::{EngineError, Result};
use crate::model::lora::{ActiveLoras, GpuLora};

/// A LoRA adapter loaded on an [`Engine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct LoraId(pub u32);

/// The engine's adapters: slots by id, the active set and its GPU plan.
#[derive(Default)]
pub(super) struct Adapters {
    loaded: Vec<Option<Arc<GpuLora>>>,
    active: Vec<(LoraId, f32)>,
    gpu: Option<ActiveLoras>,
}

impl Adapters {
    pub(super) fn active_gpu(&self) -> Option<&ActiveLoras> {
        self.gpu.as_ref()
    }
}

impl Engine {
    /// Reads a LoRA adapter file for this model: every factor is checked against the
    /// model's shapes, and the decoded size against the model file's size + 128 MiB,
    /// before any is decoded (so a file with huge factors is refused before anything
    /// large is allocated). Load it with [`Engine::load_lora`].
    ///
    /// Errors: as [`LoraAdapter::open_for`].
    pub fn read_lora(&self, path: impl AsRef<std::path::Path>) -> Result<LoraAdapter> {
        let base = LoraBase::new(&self.weights.config, self.info.file_bytes);
        LoraAdapter::open_for(path, &base)
    }

    /// Uploads a LoRA adapter (checked against this model first; on an error nothing
    /// is kept). It applies to no pass until it is in the active set
    /// ([`Engine::set_active_loras`]).
    ///
    /// GPU memory: its `A` and `Bᵀ` matrices as f32 (`Σ rank · (n_in + n_out) · 4` bytes).
    ///
    /// Errors: [`EngineError::Adapter`] (a matrix the model does not have or of another
    /// shape, non-finite values), [`EngineError::TooLarge`].
    pub fn load_lora(&mut self, adapter: &LoraAdapter) -> Result<LoraId> {
        let (gpu_lora, oom) = super::load::oom_scope(&self.gpu, || {
            GpuLora::upload(&self.gpu, &self.weights.config, adapter)
        });
        if let Some(e) = oom {
            return Err(EngineError::TooLarge {
                what: format!(
                    "adapter {}: {} ran out of memory for its matrices: {e}",
                    adapter.name, self.gpu.summary.name
                ),
            });
        }
        let gpu_lora = gpu_lora?;
        self.gpu.check_lost()?;
        self.info.gpu_total_bytes += gpu_lora.bytes;
        let a = &mut self.adapters;
        let slot = match a.loaded.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                a.loaded.push(None);
                a.loaded.len() - 1
            }
        };
        a.loaded[slot] = Some(Arc::new(gpu_lora));
        Ok(LoraId(slot as u32))
    }

    /// Frees a loaded adapter's GPU memory; it leaves the active set first.
    ///
    /// Errors: [`EngineError::InvalidInput`] for an unknown id.
    pub fn unload_lora(&mut self, id: LoraId) -> Result<()> {
        self.lora(id)?;
        if self.adapters.active.iter().any(|(a, _)| *a == id) {
            let rest: Vec<_> = self
                .adapters
                .active
                .iter()
                .copied()
                .filter(|(a, _)| *a != id)
                .collect();
            self.set_active_loras(&rest)?;
        }
        if let Some(l) = self.adapters.loaded[id.0 as usize].take() {
            self.info.gpu_total_bytes = self.info.gpu_total_bytes.saturating_sub(l.bytes);
        }
        Ok(())
    }

    /// The adapters every following pass applies, each with its scale `s` (the delta
    /// of a matrix is `Σ s · B A`); empty: the base model. Setting the set it already has
    /// costs nothing; another set rebuilds the forward graph's nodes (states are kept;
    /// pipelines compile once per kernel variant), no weights move.
    ///
    /// Errors: [`EngineError::InvalidInput`] for an unknown id, an id given twice or a
    /// non-finite scale; [`EngineError::TooLarge`] when the stacked adapters exceed a
    /// binding. On an error the active set is unchanged.
    pub fn set_active_loras(&mut self, set: &[(LoraId, f32)]) -> Result<()> {
        if set == self.adapters.active.as_slice() {
            return Ok(());
        }
        let mut arcs = Vec::with_capacity(set.len());
        for (i, &(id, scale)) in set.iter().enumerate() {
            if set[..i].iter().any(|(other, _)| *other == id) {
                return Err(EngineError::invalid(format!(
                    "LoRA {} is in the active set twice",
                    id.0
                )));
            }
            arcs.push((self.lora(id)?.clone(), scale));
        }
        let new = if arcs.is_empty() {
            None
        } else {
            Some(ActiveLoras::new(
                &self.gpu,
                self.weights.config.n_layer,
                arcs,
            )?)
        };
        let old = std::mem::replace(&mut self.adapters.gpu, new);
        let (slots, rows) = (self.graph.n_slots, self.graph.r_cap);
        if let Err(e) = self.rebuild_graph(slots, rows) {
            self.adapters.gpu = old;
            return Err(e);
        }
        self.adapters.active = set.to_vec();
        Ok(())
    }

    /// The active set: (adapter, scale) in the order given.
    pub fn active_loras(&self) -> &[(LoraId, f32)] {
        &self.adapters.active
    }

    fn lora(&self, id: LoraId) -> Result<&Arc<GpuLora>> {
        self.adapters
            .loaded
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| EngineError::invalid(format!("LoRA {} is not loaded", id.0)))
    }

    /// A new state holding a state-tuned initial state (zero token shifts, its WKV
    /// state per layer).
    ///
    /// Errors: [`EngineError::Adapter`] when its shape is not this model's.
    pub fn new_state_from(&mut self, init: &InitState) -> Result<StateId> {
        let data = init.to_state(&self.weights.config)?;
        let id = self.new_state()?;
        if let Err(e) = self.write_state(id, &data) {
            self.free_state(id)?;
            return Err(e);
        }
        Ok(id)
    }
}
