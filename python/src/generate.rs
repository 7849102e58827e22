//! Text generation off the calling thread: a worker runs `Engine::generate_text` and
//! sends its text pieces over a channel; the caller waits on the channel with the GIL
//! released, waking every 50 ms to let Python handle signals. Ctrl-C (or any exception
//! from a signal handler) cancels the job through the engine's `CancelToken` — the engine
//! stops between tokens and loses nothing — and the exception is raised once the worker
//! is done. Dropping a stream stops its generation at the next piece.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rwkv_engine::{
    CancelToken, EngineError, GenerateOptions, GenerateStats, StateId, TextEvent, TextOutput,
};

use crate::errors::to_py;
use crate::shared::Shared;

const SIGNAL_POLL: Duration = Duration::from_millis(50);

enum Msg {
    Text(String),
    Done(Result<TextOutput, EngineError>),
}

/// Where a generation runs: a caller's state (advanced in place, its token count kept
/// up to date) or a temporary zero state.
pub struct Target {
    pub state: Option<(StateId, Arc<AtomicU64>)>,
    /// The caller's state's slot, held until the generation ends: a `del state` meanwhile
    /// must not free it for another state to take.
    pub slot: Option<Arc<crate::state::Slot>>,
}

/// An iterator over the text pieces of one generation (`Model.generate(stream=True)`).
#[pyclass(module = "rwkv_studio")]
pub struct TextStream {
    rx: Mutex<Receiver<Msg>>,
    cancel: CancelToken,
    /// Set when the worker reported its end, with `TextOutput::complete`.
    stats: Mutex<Option<(GenerateStats, Option<bool>)>>,
    done: std::sync::atomic::AtomicBool,
}

impl TextStream {
    /// Starts `prompt` on a worker thread.
    ///
    /// Errors: `RuntimeError` when the thread cannot start.
    pub fn start(
        shared: Arc<Shared>,
        target: Target,
        prompt: String,
        opts: GenerateOptions,
    ) -> PyResult<Self> {
        let (tx, rx) = channel();
        let cancel = CancelToken::new();
        let c = cancel.clone();
        let job = shared.start_job(&cancel);
        std::thread::Builder::new()
            .name("rwkv-generate".into())
            .spawn(move || {
                let res = (|| {
                    let mut eng = shared.lock()?;
                    let (st, temp) = match &target.state {
                        Some((id, _)) => (*id, false),
                        // A new sequence: the model's initial state (a fork), else zeros.
                        None => match shared.init {
                            Some(i) => (eng.fork_state(i)?, true),
                            None => (eng.new_state()?, true),
                        },
                    };
                    let r = eng.generate_text(st, &prompt, &opts, &c, &mut |ev| {
                        let TextEvent::Text { text, .. } = ev;
                        // A closed receiver (the stream was dropped) stops generation.
                        tx.send(Msg::Text(text)).is_ok()
                    });
                    if temp {
                        let _ = eng.free_state(st);
                    }
                    if let (Ok(out), Some((_, tokens))) = (&r, &target.state) {
                        // The state holds the prompt and every sampled token but the last.
                        let s = &out.stats;
                        let fed = s.prompt_tokens + s.generated_tokens.saturating_sub(1);
                        tokens.fetch_add(fed as u64, Ordering::Relaxed);
                    }
                    r
                })();
                shared.finish_job(job);
                // The slot goes back (if its `State` died) before the caller hears the end.
                drop(target);
                let _ = tx.send(Msg::Done(res));
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start generation: {e}")))?;
        Ok(TextStream {
            rx: Mutex::new(rx),
            cancel,
            stats: Mutex::new(None),
            done: Default::default(),
        })
    }

    /// The next piece, `None` at the end. On a signal's exception: cancel, wait for the
    /// worker to stop, raise.
    pub fn next_piece(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if self.done.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut interrupted: Option<PyErr> = None;
        loop {
            let msg = py.detach(|| match self.rx.lock() {
                Ok(rx) => rx.recv_timeout(SIGNAL_POLL),
                Err(_) => Err(RecvTimeoutError::Disconnected),
            });
            // Signals are checked after every wake-up: pieces may arrive faster than the
            // poll interval, and a collecting caller never returns to Python in between.
            if interrupted.is_none() {
                if let Err(e) = py.check_signals() {
                    self.cancel.cancel();
                    interrupted = Some(e);
                }
            }
            match msg {
                Ok(Msg::Text(t)) if interrupted.is_none() => return Ok(Some(t)),
                Ok(Msg::Text(_)) => {}
                Ok(Msg::Done(r)) => {
                    self.done.store(true, Ordering::Relaxed);
                    if let Some(e) = interrupted {
                        return Err(e);
                    }
                    let out = r.map_err(to_py)?;
                    if let Ok(mut s) = self.stats.lock() {
                        *s = Some((out.stats, out.complete));
                    }
                    return Ok(None);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.done.store(true, Ordering::Relaxed);
                    return match interrupted {
                        Some(e) => Err(e),
                        None => Err(PyRuntimeError::new_err(
                            "the generation worker ended without a result",
                        )),
                    };
                }
            }
        }
    }

    /// Every remaining piece, concatenated.
    pub fn collect(&self, py: Python<'_>) -> PyResult<String> {
        let mut text = String::new();
        while let Some(p) = self.next_piece(py)? {
            text.push_str(&p);
        }
        Ok(text)
    }
}

impl Drop for TextStream {
    fn drop(&mut self) {
        // Stops a generation nobody reads any more (the closed channel stops it too,
        // but only once it has a piece to send).
        self.cancel.cancel();
    }
}

#[pymethods]
impl TextStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.next_piece(py)
    }

    /// Stops the generation at the next token (the state keeps what was fed).
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// After the end: `prompt_tokens`, `generated_tokens`, `ttft_ms`, `prefill_ms`,
    /// `decode_ms`, `prefill_tok_s`, `decode_tok_s`, `stop`; with a constraint also
    /// `complete` (bool: the text is a complete match), `constraint_compile_ms`,
    /// `constraint_mask_ms`, `constraint_masks`; `None` before.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let s = match self.stats.lock() {
            Ok(s) => s.clone(),
            Err(_) => None,
        };
        s.map(|(s, complete)| {
            let d = stats_dict(py, &s)?;
            if let Some(c) = complete {
                d.set_item("complete", c)?;
                d.set_item("constraint_compile_ms", s.constraint_compile_ms)?;
                d.set_item("constraint_mask_ms", s.constraint_mask_ms)?;
                d.set_item("constraint_masks", s.constraint_masks)?;
            }
            Ok(d)
        })
        .transpose()
    }
}

pub fn stats_dict<'py>(py: Python<'py>, s: &GenerateStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("prompt_tokens", s.prompt_tokens)?;
    d.set_item("generated_tokens", s.generated_tokens)?;
    d.set_item("ttft_ms", s.ttft_ms)?;
    d.set_item("prefill_ms", s.prefill_ms)?;
    d.set_item("decode_ms", s.decode_ms)?;
    d.set_item("prefill_tok_s", s.prefill_tok_s)?;
    d.set_item("decode_tok_s", s.decode_tok_s)?;
    let stop = match s.stop {
        rwkv_engine::StopReason::MaxTokens => "max_tokens",
        rwkv_engine::StopReason::StopToken => "stop_token",
        rwkv_engine::StopReason::StopString => "stop_string",
        rwkv_engine::StopReason::Cancelled => "cancelled",
        rwkv_engine::StopReason::Callback => "callback",
    };
    d.set_item("stop", stop)?;
    Ok(d)
}
