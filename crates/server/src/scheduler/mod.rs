//! The scheduler: one thread owns the [`Engine`] and runs continuous batching.
//!
//! Requests arrive on a channel. Each step advances every running sequence: those
//! generating feed their last token (one token each, all in one batched pass: matrix ×
//! B columns), and the oldest sequences still reading their prompt add a chunk of it
//! (at most [`crate::ServerConfig::prefill_chunk`] tokens a step, so running streams wait at
//! most one chunk). Logits come back for the sequences that need a next token; each is
//! sampled with its own sampler, seed, stops and limits. A finished sequence leaves at
//! once and its state goes to the conversation cache ([`rwkv_engine::PrefixCache`]:
//! GPU slots, spilled to host memory, LRU within the budget), so a later request whose
//! prompt extends it feeds only the new tokens. A client that goes away (its event
//! receiver dropped) is noticed before the next step, and its slot is freed.

mod logprobs;
mod run;
mod seq;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use rwkv_engine::{Embeddings, Engine, Pooling};
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::openai::response::TokenLogprob;
use crate::options::GenParams;

pub use run::spawn;

/// Why a generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop string or stop token.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What a generation sends back, in order: `Started`, `Token`s, then `Done` or `Error`.
#[derive(Debug, Clone)]
pub enum Event {
    /// The request has a place in the batch; `cached_tokens` of its prompt came from the
    /// conversation cache.
    Started {
        cached_tokens: usize,
    },
    /// A generated token and the text it released (possibly empty: a partial character
    /// or text held back as a possible stop string).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done(Done),
    Error(ApiError),
}

/// The end of a generation.
#[derive(Debug, Clone)]
pub struct Done {
    pub finish: Finish,
    /// Text held back until the end (a partial stop string that never completed).
    pub tail: String,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// Every generated token, the stop tokens included (for the reply memory).
    pub tokens: Vec<u32>,
    /// Seconds from arrival to the first token.
    pub ttft_s: f64,
}

/// A generation request.
pub struct GenJob {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    /// `params.constraint`, compiled (by the handler, so that a bad schema is a 400);
    /// boxed: it is ~2 KB, and jobs travel by value through the channel.
    pub constraint: Option<Box<rwkv_engine::Constraint>>,
    pub events: tmpsc::UnboundedSender<Event>,
    pub arrived: Instant,
}

/// An embedding request: `[B, C]` after `ln_out`, last-token pooling.
pub struct EmbedJob {
    pub inputs: Vec<Vec<u32>>,
    pub reply: oneshot::Sender<Result<Embeddings, ApiError>>,
}

pub(crate) enum Job {
    /// Boxed: a job (its parameters, its compiled constraint) is far larger than the rest.
    Generate(Box<GenJob>),
    Embed(EmbedJob),
    /// Pause serving and send the engine out; resume when it comes back.
    Lend(mpsc::SyncSender<Engine>, mpsc::Receiver<Engine>),
    /// Stop: cancel everything and hand the engine back.
    Shutdown,
}

/// The submitting side, shared by the HTTP handlers.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: mpsc::Sender<Job>,
    waiting: Arc<AtomicUsize>,
    max_queue: usize,
    metrics: Metrics,
}

impl SchedulerHandle {
    /// Queues a generation.
    ///
    /// Errors: 429 when [`ServerConfig::max_queue`] requests already wait; 503 when the
    /// scheduler has stopped.
    pub fn generate(&self, job: GenJob) -> Result<(), ApiError> {
        self.reserve()?;
        self.tx.send(Job::Generate(Box::new(job))).map_err(|_| {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            ApiError::unavailable()
        })
    }

    /// Queues an embedding request (same limits as [`Self::generate`]).
    pub fn embed(&self, job: EmbedJob) -> Result<(), ApiError> {
        self.reserve()?;
        self.tx.send(Job::Embed(job)).map_err(|_| {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            ApiError::unavailable()
        })
    }

    fn reserve(&self) -> Result<(), ApiError> {
        let prev = self.waiting.fetch_add(1, Ordering::SeqCst);
        if prev >= self.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::queue_full(self.max_queue));
        }
        self.metrics.queued.set((prev + 1) as i64);
        Ok(())
    }

    pub(crate) fn shutdown(&self) {
        let _ = self.tx.send(Job::Shutdown);
    }

    /// Borrows the engine (see [`crate::Server::lend`]).
    pub(crate) fn lend(&self) -> Result<EngineLoan, ApiError> {
        let (give_tx, give_rx) = mpsc::sync_channel(1);
        let (back_tx, back_rx) = mpsc::channel();
        self.tx
            .send(Job::Lend(give_tx, back_rx))
            .map_err(|_| ApiError::unavailable())?;
        let eng = give_rx.recv().map_err(|_| ApiError::unavailable())?;
        Ok(EngineLoan {
            engine: Some(eng),
            back: back_tx,
        })
    }
}

/// The engine, borrowed from a running server: serving is paused until the loan is
/// dropped (which hands the engine back). Taking the engine out with
/// [`EngineLoan::take`] and not [`EngineLoan::put_back`] stops the server.
pub struct EngineLoan {
    engine: Option<Engine>,
    back: mpsc::Sender<Engine>,
}

impl EngineLoan {
    /// The borrowed engine (`None` once taken).
    pub fn engine(&mut self) -> Option<&mut Engine> {
        self.engine.as_mut()
    }

    /// Takes the engine out of the loan (to hold it elsewhere for a while).
    pub fn take(&mut self) -> Option<Engine> {
        self.engine.take()
    }

    /// Puts the engine back into the loan.
    pub fn put_back(&mut self, eng: Engine) {
        self.engine = Some(eng);
    }
}

impl Drop for EngineLoan {
    fn drop(&mut self) {
        if let Some(e) = self.engine.take() {
            let _ = self.back.send(e);
        }
    }
}

/// Embeds `inputs` on the engine (used between steps), from `init` when given.
pub(crate) fn embed_now(
    eng: &mut Engine,
    inputs: &[Vec<u32>],
    init: Option<&rwkv_engine::InitState>,
) -> Result<Embeddings, ApiError> {
    let from = match init {
        Some(i) => Some(
            eng.new_state_from(i)
                .map_err(|e| ApiError::server(e.to_string()))?,
        ),
        None => None,
    };
    let ins: Vec<rwkv_engine::EmbedInput> = inputs
        .iter()
        .map(|t| match from {
            Some(st) => rwkv_engine::EmbedInput::after(t, st),
            None => rwkv_engine::EmbedInput::new(t),
        })
        .collect();
    let r = eng.embed(&ins, Pooling::Last);
    if let Some(st) = from {
        let _ = eng.free_state(st);
    }
    r.map_err(|e| match e {
        rwkv_engine::EngineError::InvalidInput { what } => ApiError::invalid(Some("input"), what),
        e => ApiError::server(e.to_string()),
    })
}

/// Built by [`spawn`]: the shared submitting side and the engine thread's join handle
/// (which hands the engine back).
pub struct Spawned {
    pub handle: SchedulerHandle,
    pub thread: std::thread::JoinHandle<Option<Engine>>,
}

pub(crate) fn handle_parts(
    cfg: &ServerConfig,
    metrics: &Metrics,
) -> (SchedulerHandle, mpsc::Receiver<Job>, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::channel();
    let waiting = Arc::new(AtomicUsize::new(0));
    (
        SchedulerHandle {
            tx,
            waiting: waiting.clone(),
            max_queue: cfg.max_queue,
            metrics: metrics.clone(),
        },
        rx,
        waiting,
    )
}
