//! States: GPU slots addressed by [`StateId`]; new, free, fork (a copy on the GPU),
//! prefill and feed, read and write. (Saving, loading and exporting them as files:
//! `state_files.rs`.)

use serde::Serialize;

use super::{Engine, Rows, SeqInput, Want};
use crate::error::{EngineError, Result};
use crate::gpu::buffer;
use crate::model::graph::Graph;

/// A sequence's recurrent state, held on the GPU: its slot (`.0`) and the slot's
/// generation when the state was made (`.1`). Freeing a state moves its slot to the next
/// generation, so an id kept past [`Engine::free_state`] is refused with
/// [`EngineError::State`] even after the slot holds another state: two live ids never
/// alias, and a stale one never reads or overwrites someone else's state. (A generation
/// is a `u32`: an id would match again only after its slot was freed 2^32 times.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct StateId(pub(crate) u32, pub(crate) u32);

impl std::fmt::Display for StateId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (generation {})", self.0, self.1)
    }
}

impl Engine {
    /// Doubles the state slots, or grows them to [`Engine::max_states`] when doubling would
    /// pass it.
    fn grow_slots(&mut self) -> Result<()> {
        let old = self.graph.n_slots;
        self.grow_slots_to(old * 2).map(|_| ())
    }

    /// Grows the state slots to `n` (or [`Engine::max_states`], if fewer) in one graph
    /// rebuild; returns the slot count. Servers call it once at start, so that no
    /// rebuild happens while they serve.
    ///
    /// Errors: [`EngineError::TooLarge`] when not one more slot fits (a layer's states in
    /// one binding, or in GPU memory); the slots are then unchanged.
    pub fn reserve_slots(&mut self, n: usize) -> Result<usize> {
        if n <= self.graph.n_slots {
            return Ok(self.graph.n_slots);
        }
        self.grow_slots_to(n)
    }

    fn grow_slots_to(&mut self, want: usize) -> Result<usize> {
        let old = self.graph.n_slots;
        let new = want.min(self.max_states());
        if new <= old {
            return Err(EngineError::TooLarge {
                what: format!(
                    "{want} states: one layer of each ({} bytes) must fit one binding ({} bytes) \
                     for all of them",
                    self.weights.config.state_len_per_layer() * 4,
                    self.gpu.max_binding()
                ),
            });
        }
        self.rebuild_graph(new, self.graph.r_cap)?;
        self.used.resize(new, false);
        self.generation.resize(new, 0);
        self.free.extend((old as u32..new as u32).rev());
        Ok(new)
    }

    /// Builds the graph anew with `n_slots` state slots (≥ the current ones), `r_cap`
    /// output rows and the active adapters, carrying every state over (a copy on the
    /// GPU). An allocation the driver refuses is [`EngineError::TooLarge`] and changes
    /// nothing.
    pub(super) fn rebuild_graph(&mut self, n_slots: usize, r_cap: usize) -> Result<()> {
        let g = &self.graph;
        let (graph, oom) = super::load::oom_scope(&self.gpu, || {
            Graph::new(
                &self.gpu,
                &self.pipelines,
                &self.weights,
                g.t_cap,
                r_cap,
                g.b_cap,
                n_slots,
                self.adapters.active_gpu(),
            )
        });
        // A refused allocation leaves the current graph (and every state) as it was.
        if let Some(e) = oom {
            return Err(EngineError::TooLarge {
                what: format!(
                    "{} ran out of memory for the forward graph's buffers ({n_slots} states, \
                     activations for {} tokens): {e}; free states or GPU memory",
                    self.gpu.summary.name, g.t_cap
                ),
            });
        }
        let mut graph = graph?;
        graph.invariant = self.graph.invariant;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        let keep = self.graph.n_slots.min(n_slots);
        self.graph.state.copy_into(&mut enc, &graph.state, keep);
        self.gpu.queue.submit([enc.finish()]);
        let (old, new) = (self.graph.bytes(), graph.bytes());
        self.info.gpu_total_bytes = (self.info.gpu_total_bytes + new).saturating_sub(old);
        self.graph = graph;
        self.gpu.check_lost()
    }

    /// Makes room for `rows` output rows a pass (logits / embeddings of every token of a
    /// `Rows::All` sequence), up to the token capacity: the graph starts with a batch's
    /// worth and grows the first time more are asked (a power of two). Where the device
    /// refuses the memory, passes keep the rows they have (more, smaller passes).
    pub(super) fn want_rows(&mut self, rows: usize) {
        let g = &self.graph;
        let max = self.gpu.max_binding() as usize / (self.weights.config.vocab_size * 4);
        let new = rows.next_power_of_two().min(g.t_cap).min(max.max(1));
        if new <= g.r_cap {
            return;
        }
        if let Err(e) = self.rebuild_graph(g.n_slots, new) {
            log::warn!("output rows stay at {}: {e}", self.graph.r_cap);
        }
    }

    /// A new zero state (the state before any token).
    pub fn new_state(&mut self) -> Result<StateId> {
        if self.free.is_empty() {
            self.grow_slots()?;
        }
        let slot = self.free.pop().ok_or_else(|| EngineError::State {
            what: "no free state slot".into(),
        })?;
        self.used[slot as usize] = true;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        self.graph.state.clear(&mut enc, slot as usize);
        self.gpu.queue.submit([enc.finish()]);
        let generation = self.generation.get(slot as usize).copied().unwrap_or(0);
        Ok(StateId(slot, generation))
    }

    /// `Ok` when `id` is a live state of this engine.
    ///
    /// Errors: [`EngineError::State`] for an id that was freed (its slot may hold a newer
    /// state by now) or that this engine never made.
    pub(super) fn check(&self, id: StateId) -> Result<()> {
        let slot = id.0 as usize;
        let (used, generation) = match (self.used.get(slot), self.generation.get(slot)) {
            (Some(&u), Some(&g)) => (u, g),
            _ => {
                return Err(EngineError::State {
                    what: format!(
                        "state {id} does not exist: this engine has {} slots",
                        self.used.len()
                    ),
                })
            }
        };
        match (used, generation == id.1) {
            (true, true) => Ok(()),
            (false, true) => Err(EngineError::State {
                what: format!("state {id} was freed"),
            }),
            (true, false) => Err(EngineError::State {
                what: format!(
                    "state {id} was freed; its slot now holds another state (generation \
                     {generation})"
                ),
            }),
            (false, false) => Err(EngineError::State {
                what: format!("state {id} was freed (its slot is at generation {generation})"),
            }),
        }
    }

    /// States made and not yet freed (GPU slots in use), for leak checks.
    pub fn live_states(&self) -> usize {
        self.used.iter().filter(|u| **u).count()
    }

    /// Frees a state's slot; `id` (and every copy of it) is refused from now on.
    ///
    /// Errors: [`EngineError::State`] when `id` is not live (freed twice, never made).
    pub fn free_state(&mut self, id: StateId) -> Result<()> {
        self.check(id)?;
        let slot = id.0 as usize;
        if let (Some(u), Some(g)) = (self.used.get_mut(slot), self.generation.get_mut(slot)) {
            *u = false;
            *g = g.wrapping_add(1);
        }
        self.free.push(id.0);
        Ok(())
    }

    /// A copy of `id` (made on the GPU).
    pub fn fork_state(&mut self, id: StateId) -> Result<StateId> {
        self.check(id)?;
        let new = self.new_state()?;
        // WebGPU forbids a copy within one buffer: go through a scratch buffer.
        let tmp = buffer::storage(&self.gpu, "fork", self.graph.state.largest_slice_bytes());
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        self.graph
            .state
            .copy_slot(&mut enc, id.0 as usize, new.0 as usize, &tmp);
        self.gpu.queue.submit([enc.finish()]);
        self.gpu.check_lost()?;
        Ok(new)
    }

    /// Most states this engine can hold at once as far as bindings go: the states' layers
    /// split over several buffers (`model::graph::StateParts`), so one layer of every state
    /// must fit one binding — `max_binding / (4 · state_len_per_layer)` (3,177 for a 2.9B
    /// model on an H100's 2 GiB; GPU memory ends it sooner).
    pub fn max_states(&self) -> usize {
        let per_layer = self.weights.config.state_len_per_layer() * 4;
        (self.gpu.max_binding() as usize / per_layer.max(1)).max(1)
    }

    /// f32 elements of one state: `n_layer × [att_shift C | wkv H×N×N | ffn_shift C]`.
    pub fn state_len(&self) -> usize {
        self.graph.slot_len
    }

    /// Reads a state into `out` (`state_len()` f32).
    pub fn read_state(&self, id: StateId, out: &mut [f32]) -> Result<()> {
        self.check(id)?;
        let len = self.graph.slot_len;
        if out.len() != len {
            return Err(EngineError::State {
                what: format!("buffer holds {} values, a state has {len}", out.len()),
            });
        }
        self.graph.state.read(&self.gpu, id.0 as usize, out)
    }

    /// Overwrites a state with `data` (`state_len()` f32).
    pub fn write_state(&mut self, id: StateId, data: &[f32]) -> Result<()> {
        self.check(id)?;
        let len = self.graph.slot_len;
        if data.len() != len {
            return Err(EngineError::State {
                what: format!("{} values given, a state has {len}", data.len()),
            });
        }
        if let Some(bad) = data.iter().position(|v| !v.is_finite()) {
            return Err(EngineError::State {
                what: format!("value {bad} of the state is not finite"),
            });
        }
        self.graph.state.write(&self.gpu, id.0 as usize, data);
        Ok(())
    }

    /// A new state holding `tokens` fed from the zero state (the head never runs).
    /// An empty `tokens` gives the zero state. The caller owns the state (free it with
    /// [`Engine::free_state`]).
    ///
    /// Errors: as [`Engine::forward`] (token id ≥ vocab, cancelled…); nothing is leaked.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<StateId> {
        let st = self.new_state()?;
        self.feed_or_free(st, tokens)
    }

    /// A new state: a fork of `parent` fed with `tokens` (`parent` is untouched).
    ///
    /// Errors: unknown `parent`; as [`Engine::prefill`].
    pub fn prefill_from(&mut self, parent: StateId, tokens: &[u32]) -> Result<StateId> {
        let st = self.fork_state(parent)?;
        self.feed_or_free(st, tokens)
    }

    /// Feeds `tokens` into the existing `state` (no outputs).
    ///
    /// Errors: as [`Engine::forward`]; an empty `tokens` does nothing.
    pub fn feed(&mut self, state: StateId, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        self.forward(
            &[SeqInput {
                state,
                tokens,
                rows: Rows::None,
            }],
            Want {
                logits: false,
                embeddings: false,
            },
            None,
        )?;
        Ok(())
    }

    fn feed_or_free(&mut self, st: StateId, tokens: &[u32]) -> Result<StateId> {
        match self.feed(st, tokens) {
            Ok(()) => Ok(st),
            Err(e) => {
                let _ = self.free_state(st);
                Err(e)
            }
        }
    }

    /// Reads a whole state back to the host (`state_len()` f32, layout 1).
    ///
    /// Errors: unknown state; [`EngineError::OutputTooLarge`] when one state exceeds
    /// [`crate::output::MAX_OUTPUT_BYTES`]; GPU read-back errors.
    pub fn read_state_vec(&self, id: StateId) -> Result<Vec<f32>> {
        self.check(id)?;
        self.graph.state.read_vec(&self.gpu, id.0 as usize)
    }

    /// Starts reading a whole state back without waiting for the GPU: the copy is queued
    /// behind the work submitted so far, so `id` may be freed (and its slot reused) at
    /// once. [`StateDownload::finish`] — on any thread; it polls the device itself — gives
    /// the state (`state_len()` f32, layout 1): what a cache spilling states to host
    /// memory needs, without stalling the thread that drives the GPU.
    ///
    /// Errors: unknown state.
    pub fn begin_state_download(&self, id: StateId) -> Result<crate::StateDownload> {
        self.check(id)?;
        Ok(self.graph.state.begin_download(&self.gpu, id.0 as usize))
    }
}
