//! [`EngineHandle`]: the one owner of the engine. The engine's API is blocking, so it lives
//! on one worker thread; commands send it jobs (closures) over a channel and await the
//! answer, so neither the UI thread nor the async runtime ever blocks on the GPU.
//! Long jobs (generation, prefill) are stopped through a [`CancelToken`] registered under a
//! key (a chat id, "bench", …) that a stop command can reach while the worker is busy.
//!
//! The engine thread's own state is [`Worker`]: the loaded engine and, in
//! [`adapters`], the LoRA and initial-state files loaded for it.

pub mod adapters;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::{CancelToken, Engine, InitState, LoadOptions, LoadProgress, ModelInfo};

use crate::error::{AppError, AppResult};
use crate::store::AdapterSet;
pub use adapters::AdapterCache;

/// What a job gets: the loaded engine (if any), the GPU adapter choice for the next load,
/// and the LoRA / initial-state files loaded for this engine ([`adapters`]).
#[derive(Default)]
pub struct Worker {
    pub engine: Option<Engine>,
    pub adapter: AdapterChoice,
    pub adapters: AdapterCache,
    /// Models loaded since the app started (the tests check that switching chats with
    /// different LoRAs reloads nothing).
    pub model_loads: u64,
}

impl Worker {
    /// Replaces the loaded engine (`None`: unloads it). The adapters loaded on the old one
    /// go with it.
    pub fn set_engine(&mut self, engine: Option<Engine>) {
        self.adapters.clear();
        if engine.is_some() {
            self.model_loads += 1;
        }
        let old = std::mem::replace(&mut self.engine, engine);
        if old.is_some() {
            drop(old);
            release_freed_memory();
        }
    }

    /// The loaded engine, or the `no_model` error.
    pub fn engine(&mut self) -> AppResult<&mut Engine> {
        self.engine.as_mut().ok_or_else(AppError::no_model)
    }

    /// Loads the model at `path` in place of the loaded one, on adapter `choice` (`None`:
    /// the previous load's choice), reporting the load's phases to `progress`; returns
    /// what the new model is. One engine call (`Engine::load_with_progress`), which parses
    /// the file before its `Device` phase: a file that does not parse (truncated, not
    /// RWKV-7, …) fails with the loaded model untouched. At `Device` the loaded model is
    /// freed, before the new one takes GPU memory (one model at a time), so an error
    /// after that (out of memory, a lost device) leaves none loaded.
    ///
    /// Errors: the engine's (`io`, `malformed_file`, `not_rwkv7`, `gpu`, `too_large`, …).
    pub fn load(
        &mut self,
        path: &Path,
        choice: Option<AdapterChoice>,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> AppResult<ModelInfo> {
        let adapter = choice.unwrap_or_else(|| self.adapter.clone());
        let opts = LoadOptions {
            adapter: adapter.clone(),
            ..Default::default()
        };
        let eng = Engine::load_with_progress(path, &opts, &mut |p| {
            if matches!(p, LoadProgress::Device) {
                // The file parsed: the choice stands, and the old model goes.
                self.adapter = adapter.clone();
                self.set_engine(None);
            }
            progress(p);
        })?;
        let info = eng.info().clone();
        self.set_engine(Some(eng));
        Ok(info)
    }

    /// Makes `set` the engine's active adapters (its LoRAs at their scales; none: the
    /// base) and returns the engine with `set`'s initial state, which new states of the
    /// job start from (`Engine::new_state_from`); see [`AdapterCache::activate`].
    ///
    /// Errors: `no_model`; a file that does not read or fit the model (named). On an
    /// error no LoRA stays active.
    pub fn prepare(
        &mut self,
        set: &AdapterSet,
    ) -> AppResult<(&mut Engine, Option<Arc<InitState>>)> {
        let eng = self.engine.as_mut().ok_or_else(AppError::no_model)?;
        let init = self.adapters.activate(eng, set)?;
        Ok((eng, init))
    }
}

/// Hands the pages of the dropped model's memory back to the system. glibc keeps what a
/// dropped device freed in its per-thread arenas, so every reload left the process ~26–31
/// MiB larger on lavapipe (whose GPU memory is host memory; docs/reliability.md, part 2);
/// `malloc_trim` returns them. Elsewhere the allocator is left as it is.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free memory of glibc's own arenas; no pointer
    // of ours is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// Managed state: the job queue of the engine thread and the cancel tokens of running jobs.
pub struct EngineHandle {
    jobs: mpsc::Sender<Job>,
    cancels: Mutex<HashMap<String, (u64, CancelToken)>>,
    next_ticket: AtomicU64,
}

/// A registered cancel token; [`EngineHandle::end`] forgets it.
pub struct Ticket {
    pub token: CancelToken,
    id: u64,
}

impl EngineHandle {
    /// Starts the engine thread (no model loaded yet).
    pub fn spawn() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("rwkv-engine".into())
            .spawn(move || {
                let mut worker = Worker::default();
                for job in rx {
                    // A panicking job must not take the engine thread (and the app) down:
                    // its caller gets the `worker` error through the dropped reply channel.
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut worker))).is_err() {
                        log::error!("an engine job panicked; the engine thread goes on");
                    }
                }
            })?;
        Ok(EngineHandle {
            jobs: tx,
            cancels: Mutex::new(HashMap::new()),
            next_ticket: AtomicU64::new(1),
        })
    }

    /// Runs `f` on the engine thread after the jobs queued before it; awaits its result.
    pub async fn run<T, F>(&self, f: F) -> AppResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Worker) -> AppResult<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move |w| {
                let _ = tx.send(f(w));
            }))
            .map_err(|_| AppError::worker())?;
        rx.await.map_err(|_| AppError::worker())?
    }

    /// Registers a fresh cancel token under `key` (replacing an older one).
    pub fn begin(&self, key: &str) -> Ticket {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let token = CancelToken::new();
        if let Ok(mut m) = self.cancels.lock() {
            m.insert(key.to_string(), (id, token.clone()));
        }
        Ticket { token, id }
    }

    /// Forgets `key`'s token if it is still `ticket`'s (a newer job may have replaced it).
    pub fn end(&self, key: &str, ticket: &Ticket) {
        if let Ok(mut m) = self.cancels.lock() {
            if m.get(key).is_some_and(|(id, _)| *id == ticket.id) {
                m.remove(key);
            }
        }
    }

    /// Cancels the job running (or queued) under `key`. Returns whether there was one.
    pub fn cancel(&self, key: &str) -> bool {
        match self.cancels.lock() {
            Ok(m) => m.get(key).map(|(_, t)| t.cancel()).is_some(),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    use tauri::async_runtime::block_on;

    #[test]
    fn jobs_run_in_order_and_report_errors() {
        let h = EngineHandle::spawn().unwrap();
        let a = block_on(h.run(|_| Ok(1))).unwrap();
        let b: AppResult<i32> = block_on(h.run(|w| w.engine().map(|_| 2)));
        assert_eq!(a, 1);
        assert_eq!(b.unwrap_err().code, ErrorCode::NoModel);
    }

    #[test]
    fn a_panicking_job_leaves_the_worker_alive() {
        let h = EngineHandle::spawn().unwrap();
        let r: AppResult<()> = block_on(h.run(|_| panic!("boom")));
        assert_eq!(r.unwrap_err().code, ErrorCode::Worker);
        assert_eq!(block_on(h.run(|_| Ok(7))).unwrap(), 7);
    }

    #[test]
    fn cancel_reaches_the_registered_token() {
        let h = EngineHandle::spawn().unwrap();
        let t = h.begin("chat-1");
        assert!(!h.cancel("other"));
        assert!(h.cancel("chat-1"));
        assert!(t.token.is_cancelled());
        h.end("chat-1", &t);
        assert!(!h.cancel("chat-1"));
    }
}
