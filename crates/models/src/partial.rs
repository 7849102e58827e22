//! The `.part` file and its `.part.json` sidecar: what a restarted download needs to
//! continue where the last one stopped (same URL, same file on the server).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PullError;

/// What the sidecar records about the bytes in the `.part` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sidecar {
    pub url: String,
    /// Total size of the file on the server, bytes (when it said).
    pub total: Option<u64>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
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
