//! RWKV Studio's local server: an OpenAI-compatible HTTP API over one [`Engine`], with
//! continuous batching and a conversation state cache. `rwkv serve` and the app's Local
//! server panel both start it through [`Server::start`].
//!
//! Layers, bottom to top (each uses only those before it):
//! - [`config`]: [`ServerConfig`], its defaults and checks;
//! - [`error`]: [`ApiError`], OpenAI's error JSON with its status;
//! - [`openai`]: request and response bodies, field by field;
//! - [`options`]: a request's sampling fields → the engine's sampler options, checked;
//! - [`template`]: the chat template, rendered to tokens message by message;
//! - [`request`]: a request body → its prompt tokens and parameters, checked (pure: what
//!   the handlers run before queueing, and what the fuzz target calls);
//! - [`metrics`]: Prometheus counters and the panel's [`ServerStats`];
//! - [`scheduler`]: the engine thread — queue, running batch, batched steps, cache;
//! - `http`: axum routes, key check, limits, SSE.
//!
//! See `docs/server.md` for the endpoints and fields.

pub mod config;
pub mod error;
mod http;
pub mod metrics;
pub mod openai;
pub mod options;
pub mod request;
pub mod scheduler;
pub mod structured;
pub mod template;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use rwkv_engine::Engine;
use tokio::sync::oneshot;

pub use config::ServerConfig;
pub use error::ApiError;
pub use metrics::{Metrics, ServerStats};

/// The kernel knobs a server loads its model with: the environment's, except that the
/// tensor-core products take 8 k slices unless `RWKV_KSPLIT_C` / `RWKV_KSPLIT_WIDE` say
/// otherwise, and one-token products keep f32 x unless `RWKV_MV_Q8=1`. A decode step of B sequences is a product of few tokens; with the
/// default slicing (planned for a whole prefill chunk) it leaves most of the GPU idle.
/// Measured (H100, 2.9B Q4_K_M, `rwkv batch`, benchmarks.md): B = 32 45.0 → 21.4 ms a
/// step, B = 96 52.8 → 27.8 ms, and a 512-token pass 64.3 → 55.0 ms.
pub fn serving_tuning() -> rwkv_engine::gpu::Tuning {
    let mut t = rwkv_engine::gpu::Tuning::from_env();
    t.ksplit_c = t.ksplit_c.or(Some(8));
    t.ksplit_wide = t.ksplit_wide.or(Some(8));
    // Every pass size takes f32 (or, in the tiles, f16) x, so that a reply does not depend
    // on how many others share its step. 8-bit x — even with the one-token and the
    // 2–8-token kernels both taking it — rounds each value to one of 255 levels of its run
    // of 32, so an ulp of difference upstream between a pass of 1 and of 6 (the WKV and
    // LayerNorm kernels of each size sum in their own order) now and then moves a value a
    // whole level: `rwkv batch --check --chunk 8` on the demo model, max |Δ logit| 5.8e-2
    // at B = 6 with 8-bit x in every decode kernel, 7.6e-6 with f32 x.
    t.mv_q8 = t.mv_q8.or(Some(false));
    t
}

/// A running server. [`Server::stop`] shuts it down and hands the engine back.
pub struct Server {
    addr: SocketAddr,
    metrics: Metrics,
    sched: scheduler::SchedulerHandle,
    scheduler: Option<JoinHandle<Option<Engine>>>,
    http: Option<JoinHandle<()>>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the server's threads: {0}")]
    Thread(std::io::Error),
}

impl Server {
    /// Binds `cfg`'s address and serves `eng` on it: the engine moves to the scheduler
    /// thread; HTTP runs on its own tokio runtime thread.
    ///
    /// Errors: [`StartError::Config`] for settings [`ServerConfig::validate`] refuses
    /// (the engine is handed back in the error's place: see [`Server::start_or_return`]);
    /// [`StartError::Bind`] when the port is taken.
    pub fn start(eng: Engine, cfg: ServerConfig) -> Result<Server, StartError> {
        Self::start_or_return(eng, cfg).map_err(|(e, _)| e)
    }

    /// [`Server::start`], giving the engine back when the server could not start (`None`
    /// only if the OS refused a thread after the engine had moved to it).
    #[allow(clippy::result_large_err)]
    pub fn start_or_return(
        eng: Engine,
        cfg: ServerConfig,
    ) -> Result<Server, (StartError, Option<Engine>)> {
        if let Err(e) = cfg.validate() {
            return Err((StartError::Config(e), Some(eng)));
        }
        let addr = cfg.addr();
        let listener = match std::net::TcpListener::bind(addr) {
            Ok(l) => l,
            Err(source) => return Err((StartError::Bind { addr, source }, Some(eng))),
        };
        let addr = match listener.local_addr().and_then(|a| {
            listener.set_nonblocking(true)?;
            Ok(a)
        }) {
            Ok(a) => a,
            Err(source) => return Err((StartError::Bind { addr, source }, Some(eng))),
        };
        let metrics = Metrics::new();
        let tok = eng.tokenizer().clone();
        let dim = eng.config().n_embd;
        let vocab = eng.config().vocab_size;
        let fingerprint = format!("rwkv-studio-{}", &eng.fingerprint().to_hex()[..12]);
        let cfg = Arc::new(cfg);
        let spawned = match scheduler::spawn(eng, &cfg, metrics.clone()) {
            Ok(s) => s,
            Err(e) => return Err((StartError::Thread(e), None)),
        };
        let app = http::router(http::Shared {
            cfg: cfg.clone(),
            sched: spawned.handle.clone(),
            tok,
            dim,
            vocab,
            metrics: metrics.clone(),
            fingerprint,
        });
        let (tx, rx) = oneshot::channel::<()>();
        let http = std::thread::Builder::new()
            .name("rwkv-http".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(4)
                    .thread_name("rwkv-http-worker")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        log::error!("cannot start the HTTP runtime: {e}");
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            log::error!("cannot listen: {e}");
                            return;
                        }
                    };
                    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                        let _ = rx.await;
                    });
                    if let Err(e) = serve.await {
                        log::error!("HTTP server: {e}");
                    }
                });
            });
        let http = match http {
            Ok(h) => h,
            Err(e) => {
                spawned.handle.shutdown();
                let eng = spawned.thread.join();
                return Err((StartError::Thread(e), eng.ok().flatten()));
            }
        };
        Ok(Server {
            addr,
            metrics,
            sched: spawned.handle,
            scheduler: Some(spawned.thread),
            http: Some(http),
            shutdown: Some(tx),
        })
    }

    /// The address it listens on (the port chosen when the config asked for 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn stats(&self) -> ServerStats {
        self.metrics.stats()
    }

    /// Borrows the engine for work of the caller's own (the app's chat while its server
    /// runs): serving pauses — requests wait, streams pause — until the loan is dropped.
    ///
    /// Errors: 503 when the server is stopping.
    pub fn lend(&self) -> Result<scheduler::EngineLoan, ApiError> {
        self.sched.lend()
    }

    /// Stops accepting, ends every open request (503), frees the port, and hands the
    /// engine back (`None` if the scheduler thread died).
    pub fn stop(mut self) -> Option<Engine> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Option<Engine> {
        self.sched.shutdown();
        let eng = self.scheduler.take().and_then(|t| t.join().ok().flatten());
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.http.take() {
            let _ = h.join();
        }
        eng
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.scheduler.is_some() {
            let _ = self.stop_inner();
        }
    }
}
