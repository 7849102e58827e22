//! Where a [`PrefixCache`] entry's state lives, and how it moves from a GPU slot to host
//! memory without stalling the thread that drives the GPU.
//!
//! A spill queues the copy of the slot into a host-readable buffer behind the work
//! submitted so far and frees the slot at once (later passes run after the copy, so
//! reusing the slot cannot change what is copied). A thread of its own waits for the copy
//! and takes the state out of the mapped buffer; the cache collects it on a later call
//! ([`PrefixCache::settle`]) or, when the entry is wanted before, waits for it
//! ([`PrefixCache::land`]). A 2.9B model's state is 21.6 MB: read back in line, each spill
//! stopped a server's batch for the transfer and the copy out.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::PrefixCache;
use crate::api::{Engine, StateId};
use crate::error::{EngineError, Result};

/// Most spills in flight at once; past it the oldest are waited for (each holds a
/// host-readable buffer of one state).
pub const MAX_SPILLS_IN_FLIGHT: usize = 8;

/// Where a cached state lives.
pub(super) enum Held {
    Gpu(StateId),
    /// On its way to host memory: the thread taking the state out of the GPU's copy.
    Spilling(JoinHandle<Result<Vec<f32>>>),
    /// In host memory (`state_len` f32, layout 1).
    Host(Arc<[f32]>),
}

impl PrefixCache {
    /// Starts moving the least recently used entry still on the GPU to host memory, its
    /// slot freed at once; an entry whose copy cannot start is dropped instead. `false`
    /// if none is left on the GPU.
    pub(super) fn spill_one(&mut self, eng: &mut Engine) -> bool {
        let Some((node, st)) =
            self.lru
                .values()
                .find_map(|&n| match self.nodes[n].entry.as_ref().map(|e| &e.held) {
                    Some(Held::Gpu(st)) => Some((n, *st)),
                    _ => None,
                })
        else {
            return false;
        };
        let copy = eng.begin_state_download(st).and_then(|d| {
            std::thread::Builder::new()
                .name("rwkv-cache-spill".into())
                .spawn(move || d.finish())
                .map_err(|e| EngineError::gpu(format!("no thread for a cache spill: {e}")))
        });
        let Ok(thread) = copy else {
            self.remove_entry(eng, node);
            self.stats.evictions += 1;
            return true;
        };
        if let Some(e) = self.nodes[node].entry.as_mut() {
            e.held = Held::Spilling(thread);
            self.gpu_bytes -= e.bytes;
        }
        let _ = eng.free_state(st);
        self.stats.spills += 1;
        self.stats.host_entries += 1;
        self.in_flight += 1;
        true
    }

    /// Collects the spills whose states arrived; with more than
    /// [`MAX_SPILLS_IN_FLIGHT`] in flight, waits for the least recently used ones.
    pub(super) fn settle(&mut self, eng: &mut Engine) {
        if self.in_flight == 0 {
            return;
        }
        let spilling: Vec<(usize, bool)> = self
            .lru
            .values()
            .filter_map(|&n| match self.nodes[n].entry.as_ref().map(|e| &e.held) {
                Some(Held::Spilling(t)) => Some((n, t.is_finished())),
                _ => None,
            })
            .collect();
        let mut waiting = spilling.len();
        for (node, finished) in spilling {
            if finished || waiting > MAX_SPILLS_IN_FLIGHT {
                self.land(eng, node);
                waiting -= 1;
            }
        }
    }

    /// Waits for the entry at `node` to be in GPU or host memory (a spill in flight
    /// lands); a spill that failed drops the entry. Whether the entry is still there.
    pub(super) fn land(&mut self, eng: &mut Engine, node: usize) -> bool {
        let Some(e) = self.nodes[node].entry.as_mut() else {
            return false;
        };
        if !matches!(e.held, Held::Spilling(_)) {
            return true;
        }
        let Held::Spilling(thread) = std::mem::replace(&mut e.held, Held::Host(Arc::from([])))
        else {
            return true;
        };
        self.in_flight -= 1;
        match thread.join() {
            Ok(Ok(state)) => {
                e.held = Held::Host(state.into());
                true
            }
            failed => {
                if let Ok(Err(err)) = failed {
                    log::warn!("prefix cache: a spilled state was lost: {err}");
                }
                self.remove_entry(eng, node);
                self.stats.evictions += 1;
                false
            }
        }
    }

    /// A new state (owned by the caller) holding the entry at `node`'s state, which is on
    /// the GPU or in host memory ([`Self::land`] first).
    pub(super) fn materialize(&self, eng: &mut Engine, node: usize) -> Result<StateId> {
        match self.nodes[node].entry.as_ref().map(|e| &e.held) {
            Some(Held::Gpu(st)) => eng.fork_state(*st),
            Some(Held::Host(v)) => {
                let st = eng.new_state()?;
                if let Err(e) = eng.write_state(st, v) {
                    let _ = eng.free_state(st);
                    return Err(e);
                }
                Ok(st)
            }
            Some(Held::Spilling(_)) | None => Err(EngineError::State {
                what: "prefix cache node lost its entry".into(),
            }),
        }
    }
}
