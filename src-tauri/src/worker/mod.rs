//! [`EngineHandle`]: the one owner of the engine. The engine's API is blocking, so it lives
//! on one worker thread; commands send it jobs (closures) over a channel and await the
//! answer, so neither the UI thread nor the async runtime ever blocks on the GPU.
//! Long jobs (generation, prefill) are stopped through a [`CancelToken`] registered under a
//! key (a chat id, "bench", …) that a stop command can reach while the worker is busy.
//!
//! The engine thread's own state is [`Worker`]: the loaded engine; in [`adapters`], the
//! LoRA and initial-state files loaded for it; in [`server`], the Local server panel's
//! OpenAI-compatible server, which holds the engine while it runs (jobs borrow it back).

pub mod adapters;
pub mod server;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::{CancelToken, Engine, InitState, LoadOptions, LoadProgress, ModelInfo};

use crate::error::{AppError, AppResult};
use crate::store::AdapterSet;
pub use adapters::AdapterCache;
use server::{LocalServer, ServeOptions, ServerSlot, ServerStatus};

/// Why the server stopped when the model it served went (the panel shows it).
const SERVER_LOST_MODEL: &str =
    "The local server was switched off: the model it served was unloaded or replaced.";

/// What a job gets: the loaded engine (if any), the GPU adapter choice for the next load,
/// the LoRA / initial-state files loaded for this engine ([`adapters`]) and the local
/// server ([`server`]).
///
/// While the server runs it owns the engine and `engine` is `None` between jobs; the
/// accessors ([`Worker::engine`], [`Worker::prepare`], [`Worker::hold_engine`]) borrow it
/// back for the rest of the job, pausing the server until the job ends
/// ([`Worker::end_job`]). Code that reads `engine` directly calls `hold_engine` first.
#[derive(Default)]
pub struct Worker {
    pub engine: Option<Engine>,
    pub adapter: AdapterChoice,
    pub adapters: AdapterCache,
    /// Models loaded since the app started (the tests check that switching chats with
    /// different LoRAs reloads nothing).
    pub model_loads: u64,
    pub server: LocalServer,
}

impl Worker {
    /// Replaces the loaded engine (`None`: unloads it). The adapters loaded on the old one
    /// go with it, and a running server stops first (its panel says why).
    pub fn set_engine(&mut self, engine: Option<Engine>) {
        self.stop_server(Some(SERVER_LOST_MODEL));
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

    /// While the local server runs, borrows its engine into `self.engine` for the rest of
    /// this job (serving pauses until [`Worker::end_job`]). Without a server, or with the
    /// engine already here, nothing happens.
    ///
    /// Errors: `server` when the server's engine thread died and took the model with it.
    pub fn hold_engine(&mut self) -> AppResult<()> {
        if self.engine.is_some() || self.server.lent() {
            return Ok(());
        }
        match self.server.borrow() {
            Ok(eng) => {
                self.engine = eng;
                Ok(())
            }
            Err(e) => {
                self.adapters.clear();
                Err(e)
            }
        }
    }

    /// After each job: a borrowed engine goes back to the server, which resumes.
    pub fn end_job(&mut self) {
        if self.server.lent() {
            let eng = self.engine.take();
            self.server.give_back(eng);
        }
    }

    /// The loaded engine (borrowed from the server while it runs), or the `no_model` error.
    pub fn engine(&mut self) -> AppResult<&mut Engine> {
        self.hold_engine()?;
        self.engine.as_mut().ok_or_else(AppError::no_model)
    }

    /// What the loaded model is, the one the server serves included (no loan needed).
    pub fn model_info(&self) -> Option<ModelInfo> {
        match &self.engine {
            Some(e) => Some(e.info().clone()),
            None => self.server.slot.model_info(),
        }
    }

    /// Serves the loaded model on 127.0.0.1 (the Local server panel): the engine moves to
    /// the server.
    ///
    /// Errors: `no_model`; `server` (running already, the port taken); `bad_request`.
    /// The model stays loaded on every error but a refused thread.
    pub fn start_server(&mut self, opts: &ServeOptions) -> AppResult<ServerStatus> {
        self.end_job();
        let started = self.server.start(&mut self.engine, opts);
        if started.is_err() && self.engine.is_none() {
            // The engine was lost with a thread the system refused.
            self.adapters.clear();
        }
        started
    }

    /// Stops the local server, if it runs, and takes its engine back; `why` is the note
    /// the panel shows (`None`: the user switched it off). Returns whether it ran.
    pub fn stop_server(&mut self, why: Option<&str>) -> bool {
        let running = self.server.slot.is_running();
        let borrowed = self.engine.take();
        self.engine = self.server.stop(borrowed, why);
        if running && self.engine.is_none() {
            // The server's thread lost the engine (it died): nothing of it is loaded.
            self.adapters.clear();
        }
        running
    }

    /// Loads the model at `path` in place of the loaded one, on adapter `choice` (`None`:
    /// the previous load's choice), reporting the load's phases to `progress`; returns
    /// what the new model is. One engine call (`Engine::load_with_progress`), which parses
    /// the file before its `Device` phase: a file that does not parse (truncated, not
    /// RWKV-7, …) fails with the loaded model untouched (and still served, if it is). At
    /// `Device` the loaded model is freed (the server stopped first), before the new one
    /// takes GPU memory (one model at a time), so an error after that (out of memory, a
    /// lost device) leaves none loaded.
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
        self.hold_engine()?;
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

/// Managed state: the job queue of the engine thread, the cancel tokens of running jobs,
/// and the local server's slot (its figures are read without a job).
pub struct EngineHandle {
    jobs: mpsc::Sender<Job>,
    cancels: Mutex<HashMap<String, (u64, CancelToken)>>,
    next_ticket: AtomicU64,
    server: ServerSlot,
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
        let server = ServerSlot::default();
        let mut worker = Worker::default();
        worker.server.slot = server.clone();
        std::thread::Builder::new()
            .name("rwkv-engine".into())
            .spawn(move || {
                for job in rx {
                    // A panicking job must not take the engine thread (and the app) down:
                    // its caller gets the `worker` error through the dropped reply channel.
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut worker))).is_err() {
                        log::error!("an engine job panicked; the engine thread goes on");
                    }
                    // An engine borrowed from the local server goes back to it.
                    worker.end_job();
                }
                // The app is closing: the server stops (its port is freed).
                worker.stop_server(None);
            })?;
        Ok(EngineHandle {
            jobs: tx,
            cancels: Mutex::new(HashMap::new()),
            next_ticket: AtomicU64::new(1),
            server,
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

    /// The local server's state and figures, read at once (no engine job: a poll never
    /// waits behind a reply).
    pub fn server_status(&self) -> ServerStatus {
        self.server.status()
    }

    /// At app exit: cancels every running job and stops the local server (open requests
    /// get 503, the port is freed), waiting at most `timeout` for the engine thread.
    /// Returns whether it finished in time.
    pub fn shutdown(&self, timeout: Duration) -> bool {
        if let Ok(m) = self.cancels.lock() {
            for (_, t) in m.values() {
                t.cancel();
            }
        }
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move |w| {
            w.stop_server(None);
            let _ = tx.send(());
        });
        self.jobs.send(job).is_ok() && rx.recv_timeout(timeout).is_ok()
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
