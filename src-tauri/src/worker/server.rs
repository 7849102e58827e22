//! The Local server panel's server (`rwkv_server`) on the engine thread: one model on the
//! GPU, shared by the app and the server.
//!
//! Starting the server moves the worker's engine into [`Server::start_or_return`]; the
//! scheduler thread owns it from then on. An app job that needs the engine meanwhile
//! (a chat reply, a document, fields, a benchmark) borrows it with [`Server::lend`] for
//! the rest of that job ([`LocalServer::borrow`]): serving pauses — requests wait in the
//! queue, streams stall — until the job ends and the worker hands it back
//! ([`LocalServer::give_back`]). Stopping hands the engine back to the worker for good.
//!
//! The server sits in a [`ServerSlot`] shared with [`super::EngineHandle`] (as
//! `Arc<Server>` behind a mutex held only for a moment), so the panel's 1 s poll of the
//! figures never waits behind an engine job.
//!
//! The server serves the base model: LoRAs that an app job made active are switched off
//! before the engine goes (back) to it.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard};

use rwkv_engine::{Engine, ModelInfo};
use rwkv_server::scheduler::EngineLoan;
use rwkv_server::{Server, ServerConfig, ServerStats, StartError};
use serde::Serialize;
use serde_json::json;

use crate::error::{AppError, AppResult, ErrorCode};

/// Most sequences the panel lets the server run at once (each holds a state on the GPU).
pub const MAX_PARALLEL: usize = 64;
/// Longest API key, bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// What the panel asks for, checked ([`ServeOptions::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// TCP port on 127.0.0.1; 0 lets the system choose a free one.
    pub port: u16,
    /// Clients must send `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Most sequences generating at once (the running batch).
    pub parallel: usize,
}

impl ServeOptions {
    /// Checks the panel's fields: `port` 0..=65535, `parallel` 1..=[`MAX_PARALLEL`], and
    /// a key (blank: none) of printable ASCII without spaces (it travels in an HTTP
    /// header), at most [`MAX_KEY_BYTES`] long.
    ///
    /// Errors: `bad_request` naming the field.
    pub fn check(port: u32, api_key: Option<String>, parallel: u32) -> AppResult<ServeOptions> {
        let port = u16::try_from(port).map_err(|_| {
            AppError::bad_request(format!(
                "port {port} is not a TCP port: give 1 to 65535, or 0 for any free port"
            ))
        })?;
        let parallel = parallel as usize;
        if !(1..=MAX_PARALLEL).contains(&parallel) {
            return Err(AppError::bad_request(format!(
                "parallel sequences: {parallel} is not between 1 and {MAX_PARALLEL}"
            )));
        }
        let api_key = api_key
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty());
        if let Some(k) = &api_key {
            if k.len() > MAX_KEY_BYTES {
                return Err(AppError::bad_request(format!(
                    "the API key is {} bytes long; at most {MAX_KEY_BYTES}",
                    k.len()
                )));
            }
            if !k.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(AppError::bad_request(
                    "the API key may hold only printable ASCII characters, without spaces \
                     (clients send it in an HTTP header)",
                ));
            }
        }
        Ok(ServeOptions {
            port,
            api_key,
            parallel,
        })
    }
}

/// The server's state as the panel shows it (`server_status`, and the answer of
/// `server_start` / `server_stop`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ServerStatus {
    pub running: bool,
    /// `http://127.0.0.1:PORT/v1` while running.
    pub base_url: Option<String>,
    /// The port it listens on (the one chosen when 0 was asked).
    pub port: Option<u16>,
    /// The model id clients see (`/v1/models`): the model file's stem.
    pub model_id: Option<String>,
    pub parallel: Option<usize>,
    /// Whether clients must send the API key.
    pub api_key: bool,
    /// Its counters while running.
    pub stats: Option<ServerStats>,
    /// Why it stopped, when it stopped without being switched off (the model was
    /// unloaded or replaced); cleared when it is switched on or off.
    pub stopped: Option<String>,
}

/// A running server and what the panel shows about it.
struct Running {
    server: Arc<Server>,
    /// The served model (the panel and `model_info` show it while the engine is away).
    info: ModelInfo,
    model_id: String,
    parallel: usize,
    api_key: bool,
}

#[derive(Default)]
struct Slot {
    running: Option<Running>,
    stopped: Option<String>,
}

/// The server, shared by the engine thread (which starts, lends and stops it) and the
/// status command (which reads its figures).
#[derive(Clone, Default)]
pub struct ServerSlot(Arc<Mutex<Slot>>);

impl ServerSlot {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic while locked leaves the slot's data whole (no invariant spans a lock).
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The panel's view: running or not, its address, settings and counters.
    pub fn status(&self) -> ServerStatus {
        let slot = self.lock();
        match &slot.running {
            Some(r) => ServerStatus {
                running: true,
                base_url: Some(r.server.base_url()),
                port: Some(r.server.addr().port()),
                model_id: Some(r.model_id.clone()),
                parallel: Some(r.parallel),
                api_key: r.api_key,
                stats: Some(r.server.stats()),
                stopped: None,
            },
            None => ServerStatus {
                stopped: slot.stopped.clone(),
                ..Default::default()
            },
        }
    }

    /// The served model's info, while the server runs.
    pub fn model_info(&self) -> Option<ModelInfo> {
        self.lock().running.as_ref().map(|r| r.info.clone())
    }

    pub fn is_running(&self) -> bool {
        self.lock().running.is_some()
    }
}

/// The worker's side of the server: the shared slot and the engine loan of the job
/// running now.
#[derive(Default)]
pub struct LocalServer {
    pub slot: ServerSlot,
    loan: Option<EngineLoan>,
}

impl LocalServer {
    /// Serves the engine in `engine` (taken out of it) on 127.0.0.1 with `opts`; the
    /// model file's stem is the model id. On an error the engine is put back (lost only
    /// if the system refused a thread after it had moved to it).
    ///
    /// Errors: `no_model` (`engine` is empty); `server` when it runs already, or the port
    /// is taken (`details.port`) or cannot be bound; `bad_request` for settings the
    /// server refuses.
    pub fn start(
        &mut self,
        engine: &mut Option<Engine>,
        opts: &ServeOptions,
    ) -> AppResult<ServerStatus> {
        if let Some(url) = self
            .slot
            .lock()
            .running
            .as_ref()
            .map(|r| r.server.base_url())
        {
            return Err(AppError::new(
                ErrorCode::Server,
                format!("The local server is already running at {url}; switch it off first."),
            ));
        }
        let eng = engine.as_mut().ok_or_else(AppError::no_model)?;
        // The server serves the base model (an app job may have left LoRAs active).
        eng.set_active_loras(&[])?;
        let info = eng.info().clone();
        let model_id = model_id(&info.path);
        let cfg = ServerConfig {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: opts.port,
            api_key: opts.api_key.clone(),
            model_id: model_id.clone(),
            parallel: opts.parallel,
            ..Default::default()
        };
        let eng = engine.take().ok_or_else(AppError::no_model)?;
        let server = match Server::start_or_return(eng, cfg) {
            Ok(s) => s,
            Err((e, eng)) => {
                *engine = eng;
                return Err(start_error(e));
            }
        };
        log::info!("local server on {}", server.base_url());
        let mut slot = self.slot.lock();
        slot.stopped = None;
        slot.running = Some(Running {
            server: Arc::new(server),
            info,
            model_id,
            parallel: opts.parallel,
            api_key: opts.api_key.is_some(),
        });
        drop(slot);
        Ok(self.slot.status())
    }

    /// Whether a job holds the engine on loan now.
    pub fn lent(&self) -> bool {
        self.loan.is_some()
    }

    /// Borrows the engine from the running server for the rest of the job (serving
    /// pauses; [`Self::give_back`] resumes it). `Ok(None)`: no server runs.
    ///
    /// Errors: `server` when the server's engine thread has died; it is then stopped,
    /// and the engine returned (`Ok`) if that thread handed it back.
    pub fn borrow(&mut self) -> AppResult<Option<Engine>> {
        let Some(server) = self.slot.lock().running.as_ref().map(|r| r.server.clone()) else {
            return Ok(None);
        };
        // Lent outside the lock: the scheduler finishes its current step first.
        match server.lend() {
            Ok(mut loan) => {
                let eng = loan.take();
                self.loan = Some(loan);
                Ok(eng)
            }
            Err(e) => {
                drop(server);
                log::error!("the local server cannot lend its engine: {e}");
                let eng = self.stop(None, Some("The local server stopped unexpectedly."));
                eng.map(Some).ok_or_else(|| {
                    AppError::new(
                        ErrorCode::Server,
                        "The local server stopped unexpectedly and the model with it; \
                         load the model again.",
                    )
                })
            }
        }
    }

    /// Ends the job's loan: `eng` (the borrowed engine) goes back to the server, with no
    /// LoRA active, and serving resumes.
    pub fn give_back(&mut self, eng: Option<Engine>) {
        if let Some(mut loan) = self.loan.take() {
            if let Some(mut eng) = eng {
                if let Err(e) = eng.set_active_loras(&[]) {
                    log::warn!("switching the job's LoRAs off: {e}");
                }
                loan.put_back(eng);
            }
        }
    }

    /// Stops the server and returns its engine. `borrowed` is the engine of a loan open
    /// now (handed back first, so the server frees its cached states before it stops).
    /// `why`: a note the panel shows (the model was unloaded, …); `None` when the user
    /// switched it off. No server: `borrowed` is returned as it is.
    pub fn stop(&mut self, borrowed: Option<Engine>, why: Option<&str>) -> Option<Engine> {
        let running = {
            let mut slot = self.slot.lock();
            let running = slot.running.take();
            if running.is_some() || why.is_none() {
                slot.stopped = why.map(str::to_string);
            }
            running
        };
        let Some(running) = running else {
            return borrowed;
        };
        if self.loan.is_some() {
            self.give_back(borrowed);
        } else if borrowed.is_some() {
            // Not reachable: the engine is the server's until a loan hands it out.
            log::error!("an engine outside the running server's loan is dropped");
        }
        let eng = match Arc::try_unwrap(running.server) {
            Ok(server) => server.stop(),
            Err(_) => {
                // Only a `borrow` in progress holds another reference, on this thread.
                log::error!("the local server is still referenced; it stops when released");
                None
            }
        };
        if eng.is_none() {
            log::error!("the local server did not hand its engine back");
        }
        eng
    }
}

/// The model id a server names: the model file's stem (`rwkv7-demo-6x256-Q4_K_M`).
pub fn model_id(path: &str) -> String {
    // Either separator: a path written on Windows names the same file.
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    std::path::Path::new(name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "rwkv".into())
}

/// A server that did not start, for people.
fn start_error(e: StartError) -> AppError {
    match e {
        StartError::Bind { addr, source } => {
            let message = if source.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    "Port {} is already in use on {} (another program listens there). \
                     Choose another port, or 0 for any free one.",
                    addr.port(),
                    addr.ip()
                )
            } else {
                format!("The local server cannot listen on {addr}: {source}.")
            };
            AppError::new(ErrorCode::Server, message).with_details(json!({
                "host": addr.ip().to_string(),
                "port": addr.port(),
                "kind": format!("{:?}", source.kind()),
            }))
        }
        StartError::Config(m) => AppError::bad_request(m),
        StartError::Thread(e) => AppError::new(
            ErrorCode::Server,
            format!("The local server cannot start its threads: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_field_by_field() {
        let ok = ServeOptions::check(0, Some("  sk-local-1 ".into()), 4).unwrap();
        assert_eq!(ok.port, 0);
        assert_eq!(ok.api_key.as_deref(), Some("sk-local-1"));
        assert_eq!(ok.parallel, 4);
        assert_eq!(
            ServeOptions::check(8080, Some("   ".into()), 1)
                .unwrap()
                .api_key,
            None
        );
        for (port, key, parallel, needle) in [
            (65_536, None, 4, "not a TCP port"),
            (8080, None, 0, "parallel"),
            (8080, None, MAX_PARALLEL as u32 + 1, "parallel"),
            (8080, Some("two words".to_string()), 4, "printable ASCII"),
            (8080, Some("ключ".to_string()), 4, "printable ASCII"),
            (8080, Some("k".repeat(MAX_KEY_BYTES + 1)), 4, "bytes long"),
        ] {
            let e = ServeOptions::check(port, key, parallel).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest);
            assert!(e.message.contains(needle), "{}", e.message);
        }
    }

    #[test]
    fn the_model_id_is_the_file_stem() {
        assert_eq!(
            model_id("/m/rwkv7-demo-6x256-Q4_K_M.gguf"),
            "rwkv7-demo-6x256-Q4_K_M"
        );
        assert_eq!(model_id(r"C:\m\world.pth"), "world");
        assert_eq!(model_id(""), "rwkv");
    }

    #[test]
    fn a_taken_port_is_named() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let source = std::net::TcpListener::bind(addr).unwrap_err();
        let e = start_error(StartError::Bind { addr, source });
        assert_eq!(e.code, ErrorCode::Server);
        assert!(e.message.contains(&format!("Port {}", addr.port())));
        assert!(e.message.contains("already in use"), "{}", e.message);
        assert_eq!(e.details.unwrap()["port"], addr.port());
    }

    #[test]
    fn no_server_lends_nothing_and_stops_nothing() {
        let mut s = LocalServer::default();
        assert!(s.borrow().unwrap().is_none());
        assert!(!s.lent());
        assert!(s.stop(None, Some("why")).is_none());
        let st = s.slot.status();
        assert!(!st.running);
        assert_eq!(st.stopped, None, "no note when nothing was stopped");
    }
}
