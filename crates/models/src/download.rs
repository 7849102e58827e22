//! One file over HTTP(S), resumable and verified.
//!
//! Bytes go to `<dest>.part`, with `<dest>.part.json` recording the URL, the size and the
//! server's validators (ETag / Last-Modified). A later call for the same `dest` and URL
//! asks for `Range: bytes=<part length>-` (with `If-Range`), so no byte is fetched twice;
//! a server that ignores the range gets a fresh start, said in an [`Event::Restarted`].
//! The SHA-256 is computed while streaming (the kept prefix is re-read from disk on a
//! resume) and checked before `.part` is renamed to `dest`: nothing half-written ever
//! carries the final name.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_RANGE, ETAG, IF_RANGE, LAST_MODIFIED, RANGE};
use sha2::{Digest, Sha256};

use crate::catalog::is_sha256_hex;
use crate::partial::{Partial, Sidecar};
use crate::PullError;

/// Bytes read from the network per step (and between two looks at the cancel flag).
const CHUNK: usize = 64 * 1024;

/// What to fetch and where it goes.
#[derive(Debug, Clone)]
pub struct Request {
    pub url: String,
    /// Final path in the library.
    pub dest: PathBuf,
    /// Expected size in bytes (catalog), checked against the server's and used for the
    /// disk-space check before the first request.
    pub size: Option<u64>,
    /// Expected SHA-256 (hex); `None`: the hash is computed and reported, not checked.
    pub sha256: Option<String>,
}

/// How to fetch.
#[derive(Debug, Clone)]
pub struct Options {
    /// Set it (from any thread) to stop between two chunks; the `.part` stays.
    pub cancel: Arc<AtomicBool>,
    /// Limit on establishing the connection.
    pub connect_timeout: Duration,
    /// Limit on each wait for data once connected.
    pub read_timeout: Duration,
    /// Least time between two [`Event::Progress`] (the last one is always sent).
    pub progress_every: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cancel: Arc::new(AtomicBool::new(false)),
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(60),
            progress_every: Duration::from_millis(200),
        }
    }
}

/// Bytes so far; `rate` in bytes/s over this session (resumed bytes not counted).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub done: u64,
    pub total: Option<u64>,
    pub rate: f64,
    /// Seconds left at `rate`, when the total is known and the rate is not zero.
    pub eta_s: Option<f64>,
}

/// What the download reports while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The transfer starts at `from` bytes (0, or the `.part` length on a resume).
    Started {
        from: u64,
        total: Option<u64>,
    },
    /// The kept `.part` could not be continued; starting from 0.
    Restarted {
        reason: String,
    },
    Progress(Progress),
    /// All bytes are in; hashing / checking.
    Verifying,
}

/// A finished download.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub path: PathBuf,
    pub bytes: u64,
    /// SHA-256 of the file, lower-case hex.
    pub sha256: String,
    /// Whether it was checked against an expected hash.
    pub verified: bool,
    /// Bytes taken from an earlier `.part` (0: fresh download).
    pub resumed_from: u64,
    /// The file was already in the library (nothing fetched).
    pub already_present: bool,
}

/// Downloads `req.url` to `req.dest`, resuming a `.part` left by an earlier call.
///
/// Errors (all [`PullError`]): `Offline` (no connection), `NotFound` / `HttpStatus`,
/// `Transfer` (connection lost mid-way; `.part` kept), `Cancelled` (`.part` kept),
/// `SizeMismatch`, `ChecksumMismatch` (`.part` deleted), `NotEnoughSpace` (checked before
/// the first byte), `DiskFull`, `Io` naming the path, `BadChecksum`, `BadUrl`, `Client`.
pub fn download(
    req: &Request,
    opts: &Options,
    on_event: &mut dyn FnMut(&Event),
) -> Result<Outcome, PullError> {
    let expected = match &req.sha256 {
        Some(h) if !is_sha256_hex(h) => return Err(PullError::BadChecksum(h.clone())),
        h => h.as_ref().map(|h| h.to_ascii_lowercase()),
    };
    if !(req.url.starts_with("https://") || req.url.starts_with("http://")) {
        return Err(PullError::BadUrl {
            url: req.url.clone(),
            reason: "only http:// and https:// URLs can be downloaded".into(),
        });
    }
    if req.dest.exists() {
        return already_present(req, expected);
    }
    let dir = parent_dir(&req.dest);
    std::fs::create_dir_all(&dir).map_err(|e| PullError::io(&dir, e))?;
    let partial = Partial::for_dest(&req.dest);
    let resume = partial.resume_point(&req.url);
    let kept = resume.as_ref().map_or(0, |(_, len)| *len);
    if resume.is_none() {
        partial.remove()?;
    }
    if let Some(size) = req.size {
        check_space(&dir, size.saturating_sub(kept))?;
    }

    let client = client(opts)?;
    let mut get = client.get(&req.url);
    if let Some((side, len)) = &resume {
        get = get.header(RANGE, format!("bytes={len}-"));
        if let Some(v) = side.etag.as_ref().or(side.last_modified.as_ref()) {
            get = get.header(IF_RANGE, v.as_str());
        }
    }
    let mut resp = get.send().map_err(|e| connect_error(&req.url, &e))?;
    let status = resp.status().as_u16();
    if status == 404 {
        return Err(PullError::NotFound {
            url: req.url.clone(),
        });
    }
    // 416 on a resume: the kept part already holds every byte.
    let complete_part = status == 416 && resume.as_ref().and_then(|(s, _)| s.total) == Some(kept);
    if !resp.status().is_success() && !complete_part {
        return Err(PullError::HttpStatus {
            url: req.url.clone(),
            status,
        });
    }

    let (from, total) = if complete_part {
        (kept, Some(kept))
    } else if status == 206 {
        match content_range(&resp) {
            Some((start, total)) if start == kept => (kept, total),
            _ => {
                return Err(PullError::Transfer {
                    url: req.url.clone(),
                    done: kept,
                    reason: "the server answered a different range than asked".into(),
                })
            }
        }
    } else {
        if kept > 0 {
            on_event(&Event::Restarted {
                reason:
                    "the server does not support Range (or the file changed): starting again from 0"
                        .into(),
            });
        }
        (0, resp.content_length())
    };
    if let (Some(want), Some(got)) = (req.size, total) {
        if want != got {
            return Err(PullError::SizeMismatch {
                url: req.url.clone(),
                expected: want,
                got,
            });
        }
    }
    if req.size.is_none() {
        if let Some(t) = total {
            check_space(&dir, t.saturating_sub(from))?;
        }
    }
    let header = |name| {
        resp.headers()
            .get(name)
            .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    partial.write_sidecar(&Sidecar {
        url: req.url.clone(),
        total,
        etag: header(ETAG),
        last_modified: header(LAST_MODIFIED),
        sha256: expected.clone(),
    })?;

    // The hash covers the kept prefix too: re-read it from disk, never from the network.
    let mut hasher = Sha256::new();
    let mut file = if from > 0 {
        hash_file(&partial.part, &mut hasher)?;
        std::fs::OpenOptions::new().append(true).open(&partial.part)
    } else {
        std::fs::File::create(&partial.part)
    }
    .map_err(|e| PullError::io(&partial.part, e))?;

    on_event(&Event::Started { from, total });
    let done = if complete_part {
        kept
    } else {
        stream(
            &mut resp,
            &mut file,
            &mut hasher,
            from,
            total,
            req,
            opts,
            &partial,
            on_event,
        )?
    };
    file.sync_all()
        .map_err(|e| PullError::io(&partial.part, e))?;
    drop(file);
    if let Some(t) = total {
        if done != t {
            return Err(PullError::Transfer {
                url: req.url.clone(),
                done,
                reason: format!("the connection closed before the end ({t} bytes)"),
            });
        }
    }

    on_event(&Event::Verifying);
    let got = hex(&hasher.finalize());
    if let Some(want) = &expected {
        if *want != got {
            partial.remove()?;
            return Err(PullError::ChecksumMismatch {
                path: req.dest.clone(),
                expected: want.clone(),
                got,
            });
        }
    }
    std::fs::rename(&partial.part, &req.dest).map_err(|e| PullError::io(&req.dest, e))?;
    partial.remove()?;
    Ok(Outcome {
        path: req.dest.clone(),
        bytes: done,
        sha256: got,
        verified: expected.is_some(),
        resumed_from: from,
        already_present: false,
    })
}

/// Copies the body into the `.part`, chunk by chunk, hashing and reporting; returns the
/// total bytes in the `.part`.
#[allow(clippy::too_many_arguments)]
fn stream(
    resp: &mut reqwest::blocking::Response,
    file: &mut std::fs::File,
    hasher: &mut Sha256,
    from: u64,
    total: Option<u64>,
    req: &Request,
    opts: &Options,
    partial: &Partial,
    on_event: &mut dyn FnMut(&Event),
) -> Result<u64, PullError> {
    let start = Instant::now();
    let mut last = start;
    let mut done = from;
    let mut buf = vec![0u8; CHUNK];
    loop {
        if opts.cancel.load(Ordering::SeqCst) {
            file.flush().map_err(|e| PullError::io(&partial.part, e))?;
            return Err(PullError::Cancelled {
                part: partial.part.clone(),
                done,
            });
        }
        let n = match resp.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(PullError::Transfer {
                    url: req.url.clone(),
                    done,
                    reason: e.to_string(),
                })
            }
        };
        let chunk = buf.get(..n).unwrap_or_default();
        file.write_all(chunk)
            .map_err(|e| PullError::io(&partial.part, e))?;
        hasher.update(chunk);
        done += n as u64;
        let now = Instant::now();
        if now.duration_since(last) >= opts.progress_every || Some(done) == total {
            last = now;
            on_event(&Event::Progress(progress(done, from, total, start)));
        }
    }
    Ok(done)
}

fn progress(done: u64, from: u64, total: Option<u64>, start: Instant) -> Progress {
    let secs = start.elapsed().as_secs_f64();
    let rate = if secs > 0.0 {
        (done - from) as f64 / secs
    } else {
        0.0
    };
    let eta_s = total
        .filter(|_| rate > 0.0)
        .map(|t| t.saturating_sub(done) as f64 / rate);
    Progress {
        done,
        total,
        rate,
        eta_s,
    }
}

/// `dest` exists: report it (checking the hash when one is expected) and fetch nothing.
fn already_present(req: &Request, expected: Option<String>) -> Result<Outcome, PullError> {
    let mut hasher = Sha256::new();
    let bytes = hash_file(&req.dest, &mut hasher)?;
    let got = hex(&hasher.finalize());
    if let Some(want) = &expected {
        if *want != got {
            return Err(PullError::ChecksumMismatch {
                path: req.dest.clone(),
                expected: want.clone(),
                got,
            });
        }
    }
    Ok(Outcome {
        path: req.dest.clone(),
        bytes,
        sha256: got,
        verified: expected.is_some(),
        resumed_from: 0,
        already_present: true,
    })
}

/// Fails with [`PullError::NotEnoughSpace`] when `dir`'s filesystem has less than `needed`
/// bytes free.
pub fn check_space(dir: &Path, needed: u64) -> Result<(), PullError> {
    let available = fs4::available_space(dir).map_err(|e| PullError::io(dir, e))?;
    if needed > available {
        return Err(PullError::NotEnoughSpace {
            dir: dir.to_path_buf(),
            needed,
            available,
        });
    }
    Ok(())
}

fn client(opts: &Options) -> Result<reqwest::blocking::Client, PullError> {
    // reqwest is built without a default crypto provider (no aws-lc-rs): install ring's
    // once per process. An error means another provider is already installed: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
        .connect_timeout(opts.connect_timeout)
        .timeout(opts.read_timeout)
        .user_agent(concat!("rwkv-studio/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| PullError::Client(e.to_string()))
}

/// Tells "could not connect" (offline) from other request failures.
fn connect_error(url: &str, e: &reqwest::Error) -> PullError {
    let mut reason = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        reason = format!("{reason}: {s}");
        src = s.source();
    }
    if e.is_connect() || e.is_timeout() {
        PullError::Offline {
            url: url.to_string(),
            reason,
        }
    } else {
        PullError::Transfer {
            url: url.to_string(),
            done: 0,
            reason,
        }
    }
}

/// `Content-Range: bytes START-END/TOTAL` → (START, TOTAL when not `*`).
fn content_range(resp: &reqwest::blocking::Response) -> Option<(u64, Option<u64>)> {
    let v = resp.headers().get(CONTENT_RANGE)?.to_str().ok()?;
    let rest = v.strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let start = range.split_once('-')?.0.trim().parse().ok()?;
    Some((start, total.trim().parse().ok()))
}

/// Feeds the whole file at `path` into `hasher`; returns its length in bytes.
fn hash_file(path: &Path, hasher: &mut Sha256) -> Result<u64, PullError> {
    let mut f = std::fs::File::open(path).map_err(|e| PullError::io(path, e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| PullError::io(path, e))?;
        if n == 0 {
            return Ok(n_total);
        }
        hasher.update(buf.get(..n).unwrap_or_default());
        n_total += n as u64;
    }
}

fn parent_dir(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file name a URL names (last path segment, query and fragment stripped).
///
/// Errors: [`PullError::BadUrl`] when the URL ends in `/` or has no path.
pub fn file_name_from_url(url: &str) -> Result<String, PullError> {
    let no_query = url.split(['?', '#']).next().unwrap_or(url);
    let after_scheme = no_query.split_once("://").map_or(no_query, |(_, r)| r);
    let name = after_scheme
        .split_once('/')
        .map(|(_, path)| path.rsplit('/').next().unwrap_or(""))
        .unwrap_or("");
    if name.is_empty() || name == "." || name == ".." {
        return Err(PullError::BadUrl {
            url: url.to_string(),
            reason: "the URL names no file".into(),
        });
    }
    Ok(name.to_string())
}
