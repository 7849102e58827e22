//! Model downloads in the app: several at once, each on its own thread running
//! [`rwkv_models::download`] (the code `rwkv pull` runs), each reporting its
//! [`DownloadStatus`] to a sink (the command's `Channel`) at most every
//! [`PROGRESS_EVERY`]. Pausing stops the thread between two chunks and keeps the `.part`
//! file; the `.part.json` sidecar beside it records the URL and the expected SHA-256, so a
//! paused (or interrupted, or killed) download is listed again after a restart
//! ([`Downloads::list`]) and resumed with HTTP Range from where it stopped. Cancelling
//! removes the `.part` and its sidecar: nothing half-written stays in the library folder.
//!
//! Downloads are keyed by their file name in the library folder (one download per file).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rwkv_models::{download, Catalog, Event, Options, PullError, Request};
use serde::Serialize;
use serde_json::json;

use crate::error::{AppError, AppResult, ErrorCode};

/// Least time between two progress updates a download sends (the last one always goes).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Where a download stands (serialised with its `state` tag beside the status's fields).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DownloadState {
    /// Bytes are arriving.
    Running,
    /// Every byte is in; the SHA-256 is being checked.
    Verifying,
    /// Stopped with its `.part` kept (paused, or found on disk at start): resume continues it.
    Paused,
    /// Ended with an error; `resumable`: a `.part` is kept (a broken connection, offline).
    Failed { error: AppError, resumable: bool },
    /// Cancelled: the `.part` and its sidecar were removed.
    Cancelled,
    /// In the library at `path`; `verified`: its SHA-256 matched the expected one.
    Done {
        path: String,
        sha256: String,
        verified: bool,
    },
}

/// One download as the frontend sees it (`DownloadStatus` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownloadStatus {
    /// The key: the file's name in the library folder.
    pub file_name: String,
    /// The catalog entry it comes from, when one has this file name.
    pub name: Option<String>,
    pub url: String,
    /// Bytes in the `.part` (or the file) so far.
    pub done: u64,
    /// The file's size in bytes, when known.
    pub total: Option<u64>,
    /// Bytes per second over this run of the transfer (0 while none arrived).
    pub rate: f64,
    /// Seconds left at `rate`, when known.
    pub eta_s: Option<f64>,
    /// The SHA-256 the file must have (hex), when one is known.
    pub sha256: Option<String>,
    #[serde(flatten)]
    pub state: DownloadState,
}

/// Where a download's updates go (a `tauri::ipc::Channel` in the app, a list in tests).
pub type Sink = Arc<dyn Fn(&DownloadStatus) + Send + Sync>;

struct Job {
    status: Arc<Mutex<DownloadStatus>>,
    /// Stops the transfer between two chunks (pause and cancel).
    stop: Arc<AtomicBool>,
    /// Set by cancel: the thread removes the `.part` once it has stopped.
    discard: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The app's downloads (managed state): the library folder and the jobs in it.
pub struct Downloads {
    dir: PathBuf,
    /// The user catalog file (`None`: the platform's default, [`rwkv_models::paths`]).
    user_catalog: Option<PathBuf>,
    jobs: Mutex<HashMap<String, Job>>,
}

impl Downloads {
    pub fn new(dir: PathBuf, user_catalog: Option<PathBuf>) -> Self {
        Downloads {
            dir,
            user_catalog,
            jobs: Mutex::new(HashMap::new()),
        }
    }

    /// The library folder downloads go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The user catalog's path (where "add an entry" writes).
    pub fn user_catalog(&self) -> Option<PathBuf> {
        self.user_catalog
            .clone()
            .or_else(rwkv_models::paths::user_catalog_path)
    }

    /// The shipped catalog merged with the user's.
    ///
    /// Errors: `catalog` naming the user file and the broken rule.
    pub fn catalog(&self) -> AppResult<Catalog> {
        Ok(Catalog::load(self.user_catalog().as_deref())?)
    }

    /// Starts downloading catalog entry `name` into the library.
    ///
    /// Errors: `catalog` (no such entry); `bad_request` (it downloads already); `io`.
    pub fn start_entry(&self, name: &str, sink: Sink) -> AppResult<DownloadStatus> {
        let cat = self.catalog()?;
        let e = cat.find(name)?;
        let url = e.urls.first().cloned().unwrap_or_default();
        let req = Request {
            url,
            dest: self.dir.join(&e.file_name),
            size: Some(e.size_bytes),
            sha256: e.sha256.clone(),
        };
        self.spawn(req, Some(e.name.clone()), sink)
    }

    /// Starts downloading a URL the user pasted (the file named by its last path segment),
    /// checked against `sha256` when given.
    ///
    /// Errors: `catalog` (not an http(s) URL, names no file, a malformed SHA-256);
    /// `bad_request` (it downloads already).
    pub fn start_url(
        &self,
        url: &str,
        sha256: Option<String>,
        sink: Sink,
    ) -> AppResult<DownloadStatus> {
        let url = url.trim().to_string();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(PullError::BadUrl {
                url,
                reason: "paste an http:// or https:// address of the model file".into(),
            }
            .into());
        }
        let sha256 = sha256
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty());
        if let Some(h) = &sha256 {
            if !rwkv_models::catalog::is_sha256_hex(h) {
                return Err(PullError::BadChecksum(h.clone()).into());
            }
        }
        let file_name = rwkv_models::download::file_name_from_url(&url)?;
        let known = self
            .catalog()
            .ok()
            .and_then(|c| c.entries.into_iter().find(|e| e.file_name == file_name));
        let req = Request {
            url,
            dest: self.dir.join(&file_name),
            size: known.as_ref().map(|e| e.size_bytes),
            sha256: sha256.or_else(|| known.as_ref().and_then(|e| e.sha256.clone())),
        };
        self.spawn(req, known.map(|e| e.name), sink)
    }

    /// Resumes the download of `file_name` from its `.part` (paused, failed, or left by an
    /// earlier run of the app): same URL and expected SHA-256, from the bytes on disk.
    ///
    /// Errors: `not_found` (no such partial download); `bad_request` (it runs already).
    pub fn resume(&self, file_name: &str, sink: Sink) -> AppResult<DownloadStatus> {
        let part = rwkv_models::partials(&self.dir)?
            .into_iter()
            .find(|p| p.dest.file_name().is_some_and(|n| n == file_name))
            .ok_or_else(|| AppError::not_found("download", file_name))?;
        let name = self.catalog_name(file_name);
        let req = Request {
            url: part.sidecar.url,
            dest: part.dest,
            size: part.sidecar.total,
            sha256: part.sidecar.sha256,
        };
        self.spawn(req, name, sink)
    }

    /// Pauses a running download (its `.part` stays). Pausing one that is not running is
    /// no error. Waits until its thread has stopped, so the `.part` is complete on return.
    pub fn pause(&self, file_name: &str) -> AppResult<()> {
        let thread = {
            let mut jobs = self.lock()?;
            match jobs.get_mut(file_name) {
                Some(job) => {
                    job.stop.store(true, Ordering::SeqCst);
                    job.thread.take()
                }
                None => None,
            }
        };
        if let Some(t) = thread {
            let _ = t.join();
        }
        Ok(())
    }

    /// Cancels a download: stops it if it runs, then removes its `.part` and sidecar.
    ///
    /// Errors: `io` naming a file that could not be removed.
    pub fn cancel(&self, file_name: &str) -> AppResult<()> {
        let thread = {
            let mut jobs = self.lock()?;
            match jobs.get_mut(file_name) {
                Some(job) => {
                    job.discard.store(true, Ordering::SeqCst);
                    job.stop.store(true, Ordering::SeqCst);
                    job.thread.take()
                }
                None => None,
            }
        };
        if let Some(t) = thread {
            let _ = t.join();
        }
        rwkv_models::discard(&self.dir.join(plain_name(file_name)?))?;
        self.lock()?.remove(file_name);
        Ok(())
    }

    /// Every download: those this run started (running, paused, failed), then the `.part`
    /// files found in the library folder (left by a pause or an earlier run) as paused.
    ///
    /// Errors: `io` when the library folder cannot be listed.
    pub fn list(&self) -> AppResult<Vec<DownloadStatus>> {
        let mut out: Vec<DownloadStatus> = {
            let jobs = self.lock()?;
            jobs.values()
                .filter_map(|j| j.status.lock().ok().map(|s| s.clone()))
                .filter(|s| {
                    !matches!(
                        s.state,
                        DownloadState::Done { .. } | DownloadState::Cancelled
                    )
                })
                .collect()
        };
        for p in rwkv_models::partials(&self.dir)? {
            let file_name = file_name_of(&p.dest);
            if out.iter().any(|s| s.file_name == file_name) {
                continue;
            }
            out.push(DownloadStatus {
                name: self.catalog_name(&file_name),
                file_name,
                url: p.sidecar.url,
                done: p.done,
                total: p.sidecar.total,
                rate: 0.0,
                eta_s: None,
                sha256: p.sidecar.sha256,
                state: DownloadState::Paused,
            });
        }
        out.sort_by(|a, b| a.file_name.cmp(&b.file_name));
        Ok(out)
    }

    /// Pauses every running download (app exit): their `.part` files stay for next time.
    pub fn pause_all(&self) {
        let names: Vec<String> = match self.jobs.lock() {
            Ok(j) => j.keys().cloned().collect(),
            Err(_) => return,
        };
        for n in names {
            let _ = self.pause(&n);
        }
    }

    fn catalog_name(&self, file_name: &str) -> Option<String> {
        self.catalog().ok().and_then(|c| {
            c.entries
                .into_iter()
                .find(|e| e.file_name == file_name)
                .map(|e| e.name)
        })
    }

    fn lock(&self) -> AppResult<std::sync::MutexGuard<'_, HashMap<String, Job>>> {
        self.jobs
            .lock()
            .map_err(|_| AppError::internal("the download list's lock is poisoned"))
    }

    /// Starts `req` on its own thread, unless that file downloads already.
    fn spawn(&self, req: Request, name: Option<String>, sink: Sink) -> AppResult<DownloadStatus> {
        let file_name = file_name_of(&req.dest);
        let mut jobs = self.lock()?;
        if let Some(job) = jobs.get(&file_name) {
            if job.thread.as_ref().is_some_and(|t| !t.is_finished()) {
                return Err(
                    AppError::bad_request(format!("{file_name} is downloading already"))
                        .with_details(json!({ "file_name": file_name })),
                );
            }
        }
        let status = DownloadStatus {
            file_name: file_name.clone(),
            name,
            url: req.url.clone(),
            done: 0,
            total: req.size,
            rate: 0.0,
            eta_s: None,
            sha256: req.sha256.clone(),
            state: DownloadState::Running,
        };
        let shared = Arc::new(Mutex::new(status.clone()));
        let stop = Arc::new(AtomicBool::new(false));
        let discard = Arc::new(AtomicBool::new(false));
        let run = Run {
            req,
            status: shared.clone(),
            stop: stop.clone(),
            discard: discard.clone(),
            sink,
        };
        let thread = std::thread::Builder::new()
            .name(format!("download {file_name}"))
            .spawn(move || run.run())
            .map_err(|e| {
                AppError::new(
                    ErrorCode::Internal,
                    format!("cannot start a download thread: {e}"),
                )
            })?;
        jobs.insert(
            file_name,
            Job {
                status: shared,
                stop,
                discard,
                thread: Some(thread),
            },
        );
        Ok(status)
    }
}

/// One download's thread.
struct Run {
    req: Request,
    status: Arc<Mutex<DownloadStatus>>,
    stop: Arc<AtomicBool>,
    discard: Arc<AtomicBool>,
    sink: Sink,
}

impl Run {
    fn run(self) {
        let opts = Options {
            cancel: self.stop.clone(),
            progress_every: PROGRESS_EVERY,
            ..Options::default()
        };
        let result = download(&self.req, &opts, &mut |e| self.on_event(e));
        let end = match result {
            Ok(out) => DownloadState::Done {
                path: out.path.display().to_string(),
                sha256: out.sha256,
                verified: out.verified,
            },
            Err(PullError::Cancelled { .. }) if self.discard.load(Ordering::SeqCst) => {
                match rwkv_models::discard(&self.req.dest) {
                    Ok(()) => DownloadState::Cancelled,
                    Err(e) => DownloadState::Failed {
                        error: e.into(),
                        resumable: false,
                    },
                }
            }
            Err(PullError::Cancelled { .. }) => DownloadState::Paused,
            Err(e) => {
                let resumable = rwkv_models::partials(parent(&self.req.dest))
                    .map(|ps| ps.iter().any(|p| p.dest == self.req.dest))
                    .unwrap_or(false);
                DownloadState::Failed {
                    error: e.into(),
                    resumable,
                }
            }
        };
        self.update(|s| {
            if let DownloadState::Done { .. } = end {
                s.done = s.total.unwrap_or(s.done);
            }
            s.rate = 0.0;
            s.eta_s = None;
            s.state = end;
        });
    }

    fn on_event(&self, e: &Event) {
        match e {
            Event::Started { from, total } => self.update(|s| {
                s.done = *from;
                s.total = total.or(s.total);
                s.state = DownloadState::Running;
            }),
            Event::Restarted { .. } => self.update(|s| s.done = 0),
            Event::Progress(p) => self.update(|s| {
                s.done = p.done;
                s.total = p.total.or(s.total);
                s.rate = p.rate;
                s.eta_s = p.eta_s;
            }),
            Event::Verifying => self.update(|s| {
                s.state = DownloadState::Verifying;
                s.eta_s = None;
            }),
        }
    }

    /// Changes the shared status and sends a copy to the sink.
    fn update(&self, f: impl FnOnce(&mut DownloadStatus)) {
        let snapshot = match self.status.lock() {
            Ok(mut s) => {
                f(&mut s);
                s.clone()
            }
            Err(_) => return,
        };
        (self.sink)(&snapshot);
    }
}

fn file_name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn parent(p: &Path) -> &Path {
    p.parent().unwrap_or(Path::new("."))
}

/// `name` when it is a plain file name (no folder, not `..`), else `bad_request`.
pub fn plain_name(name: &str) -> AppResult<&str> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.starts_with('.');
    if ok {
        Ok(name)
    } else {
        Err(AppError::bad_request(format!(
            "{name:?} is not a file name in the library"
        )))
    }
}
