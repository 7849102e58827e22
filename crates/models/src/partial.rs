//! The `.part` file and its `.part.json` sidecar: what a restarted download needs to
//! continue where the last one stopped (same URL, same file on the server).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PullError;

/// What the sidecar records about the bytes in the `.part` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    pub url: String,
    /// Total size of the file on the server, bytes (when it said).
    pub total: Option<u64>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// The SHA-256 the finished file must have (lower-case hex), so that a resume after a
    /// restart checks it without being told again. Absent in sidecars of older builds.
    #[serde(default)]
    pub sha256: Option<String>,
}

/// The paths of one download in progress: `<dest>.part` and `<dest>.part.json`.
pub(crate) struct Partial {
    pub part: PathBuf,
    pub sidecar: PathBuf,
}

impl Partial {
    pub fn for_dest(dest: &Path) -> Partial {
        let mut part = dest.as_os_str().to_owned();
        part.push(".part");
        let mut sidecar = part.clone();
        sidecar.push(".json");
        Partial {
            part: PathBuf::from(part),
            sidecar: PathBuf::from(sidecar),
        }
    }

    /// The sidecar and the `.part` length when both exist and the sidecar is for `url`;
    /// anything else (missing, unreadable, another URL) means "start from 0".
    pub fn resume_point(&self, url: &str) -> Option<(Sidecar, u64)> {
        let text = std::fs::read_to_string(&self.sidecar).ok()?;
        let side: Sidecar = serde_json::from_str(&text).ok()?;
        let len = std::fs::metadata(&self.part).ok()?.len();
        let fits = side.total.is_none_or(|t| len <= t);
        (side.url == url && fits).then_some((side, len))
    }

    /// Writes the sidecar (before any body byte goes to the `.part`).
    pub fn write_sidecar(&self, side: &Sidecar) -> Result<(), PullError> {
        let text = serde_json::to_string_pretty(side).map_err(|e| PullError::Io {
            path: self.sidecar.clone(),
            source: std::io::Error::other(e),
        })?;
        std::fs::write(&self.sidecar, text).map_err(|e| PullError::io(&self.sidecar, e))
    }

    /// Removes both files (missing ones are fine).
    pub fn remove(&self) -> Result<(), PullError> {
        for p in [&self.part, &self.sidecar] {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(PullError::io(p, e)),
            }
        }
        Ok(())
    }
}

/// A download left unfinished in a library folder: its `.part` and what the sidecar says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartialDownload {
    /// The final path the file will have.
    pub dest: PathBuf,
    /// Bytes in the `.part` file.
    pub done: u64,
    /// The sidecar's facts (URL, total size, expected SHA-256).
    pub sidecar: Sidecar,
}

/// The unfinished downloads in `dir` (each `<name>.part` with a readable `<name>.part.json`),
/// sorted by file name. A `.part` without a readable sidecar cannot be resumed and is not
/// listed (the next download of that file starts it again from 0).
///
/// Errors: [`PullError::Io`] when `dir` exists but cannot be listed.
pub fn partials(dir: &Path) -> Result<Vec<PartialDownload>, PullError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(PullError::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".part") else {
            continue;
        };
        let dest = dir.join(stem);
        let p = Partial::for_dest(&dest);
        let Some(side) = std::fs::read_to_string(&p.sidecar)
            .ok()
            .and_then(|t| serde_json::from_str::<Sidecar>(&t).ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&p.part) else {
            continue;
        };
        out.push(PartialDownload {
            dest,
            done: meta.len(),
            sidecar: side,
        });
    }
    out.sort_by(|a, b| a.dest.cmp(&b.dest));
    Ok(out)
}

/// Removes the `.part` and `.part.json` of the download to `dest` (missing ones are fine):
/// what cancelling a paused download leaves behind is nothing.
///
/// Errors: [`PullError::Io`] naming the file that could not be removed.
pub fn discard(dest: &Path) -> Result<(), PullError> {
    Partial::for_dest(dest).remove()
}
