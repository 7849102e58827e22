//! What a `Model` and its `State`s share: the engine behind a mutex (one job at a time;
//! always locked with the GIL released, so Python threads never deadlock on it), the
//! tokenizer (a cheap clone: tokenizing needs no lock), and the states dropped while the
//! engine was busy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use rwkv_engine::{CancelToken, Engine, EngineError, ModelInfo, StateId, Tokenizer};

use crate::errors::to_py;

pub struct Shared {
    engine: Mutex<Engine>,
    /// States whose Python object died while another thread held the engine; freed at
    /// the next lock (a destructor must not wait for a running job).
    orphans: Mutex<Vec<StateId>>,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
    /// The state-tuned initial state every new sequence starts from (`init_state=`),
    /// held in a slot of its own; `None`: zeros.
    pub init: Option<StateId>,
    /// The generations running now, by job number: `Model.cancel()` stops them all.
    running: Mutex<Vec<(u64, CancelToken)>>,
    next_job: AtomicU64,
}

/// The engine, locked; orphaned states freed first.
pub struct Locked<'a>(MutexGuard<'a, Engine>);

impl std::ops::Deref for Locked<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.0
    }
}

impl Shared {
    pub fn new(engine: Engine, init: Option<StateId>) -> Arc<Self> {
        Arc::new(Shared {
            init,
            tokenizer: engine.tokenizer().clone(),
            info: engine.info().clone(),
            engine: Mutex::new(engine),
            orphans: Mutex::new(Vec::new()),
            running: Mutex::new(Vec::new()),
            next_job: AtomicU64::new(0),
        })
    }

    /// Locks the engine (blocking; call with the GIL released).
    ///
    /// Errors: [`EngineError::Gpu`] when an earlier job panicked while holding it.
    pub fn lock(&self) -> Result<Locked<'_>, EngineError> {
        let mut eng = self.engine.lock().map_err(|_| EngineError::Gpu {
            what: "an earlier call panicked inside the engine; load the model again".into(),
        })?;
        if let Ok(mut o) = self.orphans.lock() {
            for id in o.drain(..) {
                let _ = eng.free_state(id);
            }
        }
        Ok(Locked(eng))
    }

    /// Runs `f` on the locked engine with the GIL released; engine errors become Python
    /// exceptions.
    pub fn run<T, F>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&mut Engine) -> Result<T, EngineError> + Send,
    {
        py.detach(|| {
            let mut eng = self.lock()?;
            f(&mut eng)
        })
        .map_err(to_py)
    }

    /// Registers a running generation's token; [`Shared::finish`] with the returned job
    /// number removes it.
    pub fn start_job(&self, cancel: &CancelToken) -> u64 {
        let job = self.next_job.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.running.lock() {
            r.push((job, cancel.clone()));
        }
        job
    }

    /// The generation `job` ended.
    pub fn finish_job(&self, job: u64) {
        if let Ok(mut r) = self.running.lock() {
            r.retain(|(j, _)| *j != job);
        }
    }

    /// Cancels every running generation; returns how many were running.
    pub fn cancel_all(&self) -> usize {
        match self.running.lock() {
            Ok(r) => {
                for (_, c) in r.iter() {
                    c.cancel();
                }
                r.len()
            }
            Err(_) => 0,
        }
    }

    /// Frees `id` now if the engine is idle, else at the next lock.
    pub fn release(&self, id: StateId) {
        match self.engine.try_lock() {
            Ok(mut eng) => {
                let _ = eng.free_state(id);
            }
            Err(_) => {
                if let Ok(mut o) = self.orphans.lock() {
                    o.push(id);
                }
            }
        }
    }

    /// `Err` unless `other` is this very model.
    pub fn same(self: &Arc<Self>, other: &Arc<Self>) -> PyResult<()> {
        if Arc::ptr_eq(self, other) {
            Ok(())
        } else {
            Err(pyo3::exceptions::PyValueError::new_err(
                "the state belongs to another Model (states live on their model's GPU)",
            ))
        }
    }
}

/// A `RuntimeError` for a shape the engine returned that disagrees with what was asked
/// (an engine bug, never bad input).
pub fn shape_err(what: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("engine returned an unexpected shape: {what}"))
}
