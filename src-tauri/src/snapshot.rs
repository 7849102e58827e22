//! State snapshot files: one sequence's RWKV state (`state_len` f32) on disk, with the
//! model it belongs to, so a chat resumes (and a document is reused) without prefilling
//! again, and a state never goes into a model it does not fit.
//!
//! Layout (little-endian): `b"RWKVSNAP"`, u32 format version (1), u32 header length `h`,
//! `h` bytes of JSON ([`SnapshotHeader`]), then `state_len` f32.
//!
//! The engine's own state-file format (`crates/engine/src/analysis/`, on main later)
//! replaces this one for exported states when it lands; chat snapshots may keep it.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};

const MAGIC: &[u8; 8] = b"RWKVSNAP";
const VERSION: u32 = 1;
/// Headers are a few hundred bytes; refuse absurd ones before allocating.
const MAX_HEADER: usize = 64 * 1024;

/// Which model a state belongs to: two models with the same shape still have different
/// states, so the file name and size are part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFingerprint {
    pub file_name: String,
    pub file_bytes: u64,
    pub n_layer: usize,
    pub n_embd: usize,
    pub state_len: usize,
}

impl ModelFingerprint {
    pub fn of(engine: &rwkv_engine::Engine) -> Self {
        let info = engine.info();
        ModelFingerprint {
            file_name: Path::new(&info.path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            file_bytes: info.file_bytes,
            n_layer: info.config.n_layer,
            n_embd: info.config.n_embd,
            state_len: engine.state_len(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub model: ModelFingerprint,
    /// Tokens the state has seen.
    pub tokens: usize,
    /// What it is (a document's name, a chat id), for people reading the file.
    #[serde(default)]
    pub label: String,
}

pub fn write(path: &Path, header: &SnapshotHeader, state: &[f32]) -> AppResult<()> {
    if state.len() != header.model.state_len {
        return Err(AppError::bad_request(format!(
            "snapshot of {} values for a state of {}",
            state.len(),
            header.model.state_len
        )));
    }
    let json = serde_json::to_vec(header).map_err(|e| AppError::corrupt(path, e))?;
    let mut buf = Vec::with_capacity(16 + json.len() + state.len() * 4);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    for v in state {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    write_atomic(path, &buf)
}

/// Reads a snapshot, checking magic, version, header and length against each other.
pub fn read(path: &Path) -> AppResult<(SnapshotHeader, Vec<f32>)> {
    let bytes = std::fs::read(path).map_err(|e| AppError::io(path, e))?;
    parse(&bytes).map_err(|what| {
        AppError::new(
            "bad_state_file",
            format!("{}: not a usable state file: {what}", path.display()),
        )
        .with_details(serde_json::json!({ "path": path.display().to_string() }))
    })
}

fn parse(bytes: &[u8]) -> Result<(SnapshotHeader, Vec<f32>), String> {
    let u32_at = |at: usize| -> Result<u32, String> {
        bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| "file too short".to_string())
    };
    if bytes.get(..8) != Some(MAGIC.as_slice()) {
        return Err("wrong magic (not an RWKV Studio state)".into());
    }
    let version = u32_at(8)?;
    if version != VERSION {
        return Err(format!("format version {version}, expected {VERSION}"));
    }
    let h = u32_at(12)? as usize;
    if h > MAX_HEADER {
        return Err(format!("header of {h} bytes (at most {MAX_HEADER})"));
    }
    let header_bytes = bytes
        .get(16..16 + h)
        .ok_or("header past the end of the file")?;
    let header: SnapshotHeader =
        serde_json::from_slice(header_bytes).map_err(|e| format!("header: {e}"))?;
    let data = &bytes[16 + h..];
    let want = header
        .model
        .state_len
        .checked_mul(4)
        .ok_or("absurd state length")?;
    if data.len() != want {
        return Err(format!(
            "{} bytes of state, the header says {} values ({want} bytes)",
            data.len(),
            header.model.state_len
        ));
    }
    let state = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((header, state))
}

/// Writes through a temporary file and a rename, so a crash never leaves half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> AppResult<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| AppError::io(dir, e))?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| AppError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| AppError::io(&tmp, e))?;
    f.sync_all().map_err(|e| AppError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| AppError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: usize) -> SnapshotHeader {
        SnapshotHeader {
            model: ModelFingerprint {
                file_name: "m.gguf".into(),
                file_bytes: 123,
                n_layer: 2,
                n_embd: 8,
                state_len: len,
            },
            tokens: 5,
            label: "doc".into(),
        }
    }

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("rwkv-snap-{}", std::process::id()));
        let p = dir.join("a.state");
        let state: Vec<f32> = (0..10).map(|i| i as f32 * 0.5 - 1.0).collect();
        write(&p, &header(10), &state).unwrap();
        let (h, s) = read(&p).unwrap();
        assert_eq!(h, header(10));
        assert_eq!(s, state);
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn refuses_truncated_and_foreign_files() {
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&1u32.to_le_bytes());
        let json = serde_json::to_vec(&header(4)).unwrap();
        buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
        buf.extend_from_slice(&json);
        buf.extend_from_slice(&[0u8; 12]); // 3 of 4 values
        assert!(parse(&buf).unwrap_err().contains("12 bytes of state"));
        assert!(parse(b"GGUF\x03\0\0\0").unwrap_err().contains("magic"));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&1u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse(&huge).unwrap_err().contains("header of"));
    }

    #[test]
    fn refuses_a_state_of_the_wrong_length() {
        let p = std::env::temp_dir().join("rwkv-snap-never-written.state");
        let e = write(&p, &header(10), &[0.0; 3]).unwrap_err();
        assert_eq!(e.code, "bad_request");
        assert!(!p.exists());
    }
}
