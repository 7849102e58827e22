//! The named errors of the catalog and the downloader.

use std::path::PathBuf;

/// Why a catalog could not be read or a download did not end with a verified file.
///
/// Sizes are in bytes; checksums are lower-case hex SHA-256.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// No connection: DNS failure, connection refused, no route (offline, or the server is down).
    #[error("cannot connect to {url}: {reason} (offline, or the server is down)")]
    Offline { url: String, reason: String },
    /// The server answered 404.
    #[error("{url}: not found (HTTP 404)")]
    NotFound { url: String },
    /// Any other non-success status.
    #[error("{url}: the server answered HTTP {status}")]
    HttpStatus { url: String, status: u16 },
    /// The connection broke or timed out mid-transfer; the bytes so far stay in the `.part`
    /// file and the next attempt resumes from there.
    #[error("{url}: transfer stopped after {done} bytes: {reason} (run again to resume)")]
    Transfer {
        url: String,
        done: u64,
        reason: String,
    },
    /// The server's file is not the size the catalog (or the resumed download) expects.
    #[error("{url}: the server's file is {got} bytes, expected {expected}")]
    SizeMismatch {
        url: String,
        expected: u64,
        got: u64,
    },
    /// The downloaded bytes do not hash to the expected SHA-256; the partial file was deleted.
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {got} (partial file deleted)")]
    ChecksumMismatch {
        path: PathBuf,
        expected: String,
        got: String,
    },
    /// Less free space in the download folder than the bytes still to fetch.
    #[error("not enough disk space in {dir}: {needed} bytes needed, {available} bytes free")]
    NotEnoughSpace {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },
    /// The disk filled up while writing.
    #[error("disk full while writing {path}")]
    DiskFull { path: PathBuf },
    /// Stopped through the cancel flag; the `.part` file is kept for a later resume.
    #[error("download cancelled after {done} bytes; kept in {part} for a later resume")]
    Cancelled { part: PathBuf, done: u64 },
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A catalog file that does not parse or breaks a schema rule.
    #[error("catalog {path}: {reason}")]
    Catalog { path: PathBuf, reason: String },
    /// A name that no catalog entry has.
    #[error("no model named {name:?} in the catalog (known: {known})")]
    UnknownModel { name: String, known: String },
    /// A `--sha256` or catalog checksum that is not 64 hex digits.
    #[error("{0:?} is not a SHA-256 (64 hex digits)")]
    BadChecksum(String),
    /// A URL that is not http(s) or names no file.
    #[error("{url}: {reason}")]
    BadUrl { url: String, reason: String },
    /// The HTTP client could not be set up (TLS provider, certificates).
    #[error("HTTP client: {0}")]
    Client(String),
}

impl PullError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::StorageFull {
            PullError::DiskFull {
                path: path.to_path_buf(),
            }
        } else {
            PullError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}
