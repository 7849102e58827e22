//! The `.rwkvstate` format (see `docs/state-format.md`) and `.npy` export in the fixtures'
//! three-array layout. The model fingerprint is in `fingerprint.rs`, the engine's state
//! operations on these files (`save_state`, `load_state`, export) in `api/state_files.rs`.
//!
//! A `.rwkvstate` file is a 128-byte little-endian header followed by the state's f32
//! values, little-endian, in the engine's slot layout (layout id 1):
//! per layer `[att_shift C | wkv H×N×N | ffn_shift C]`, WKV `S[h][i][j]` pairing value `i`
//! with key `j` (BlinkDL's `att_kv`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::fingerprint::hex;
pub use super::fingerprint::{model_fingerprint, ModelFingerprint};
use crate::config::Rwkv7Config;
use crate::error::{EngineError, Result};

/// First 8 bytes of every state file.
pub const STATE_MAGIC: [u8; 8] = *b"RWKVSTAT";
/// The format version this engine writes and reads.
pub const STATE_VERSION: u32 = 1;
/// Header bytes of version 1; the data starts here.
pub const STATE_HEADER_BYTES: usize = 128;
/// Layout id 1: per layer `[att_shift C | wkv H×N×N | ffn_shift C]`, f32.
pub const LAYOUT_PER_LAYER_V1: u32 = 1;

/// Shape of a state: what layout id 1 needs to be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateLayout {
    /// Layout id ([`LAYOUT_PER_LAYER_V1`]).
    pub id: u32,
    pub n_layer: usize,
    /// C.
    pub n_embd: usize,
    /// H.
    pub n_head: usize,
    /// N.
    pub head_size: usize,
}

impl StateLayout {
    pub fn of(cfg: &Rwkv7Config) -> Self {
        StateLayout {
            id: LAYOUT_PER_LAYER_V1,
            n_layer: cfg.n_layer,
            n_embd: cfg.n_embd,
            n_head: cfg.n_head,
            head_size: cfg.head_size,
        }
    }

    /// f32 values per layer: `2C + H·N·N`.
    pub fn per_layer(&self) -> usize {
        2 * self.n_embd + self.n_head * self.head_size * self.head_size
    }

    /// f32 values of a whole state, `None` on overflow.
    pub fn values(&self) -> Option<usize> {
        let hnn = self
            .n_head
            .checked_mul(self.head_size)?
            .checked_mul(self.head_size)?;
        self.n_embd
            .checked_mul(2)?
            .checked_add(hnn)?
            .checked_mul(self.n_layer)
    }
}

/// What a state file's header says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateHeader {
    pub version: u32,
    pub fingerprint: ModelFingerprint,
    pub layout: StateLayout,
    /// Tokens fed into the state since the zero state (as the writer said; 0 = unknown).
    pub tokens: u64,
    /// f32 values that follow the header (`layout.values()`).
    pub values: u64,
    /// sha256 of the data bytes, lowercase hex.
    pub data_sha256: String,
}

fn malformed(path: &Path, what: impl Into<String>) -> EngineError {
    EngineError::Malformed {
        path: path.to_path_buf(),
        format: "RWKV state",
        what: what.into(),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Encodes the 128-byte header (see `docs/state-format.md` for the table).
fn encode_header(h: &StateHeader, data_sha: &[u8; 32]) -> [u8; STATE_HEADER_BYTES] {
    let mut b = [0u8; STATE_HEADER_BYTES];
    b[0..8].copy_from_slice(&STATE_MAGIC);
    b[8..12].copy_from_slice(&h.version.to_le_bytes());
    b[12..16].copy_from_slice(&(STATE_HEADER_BYTES as u32).to_le_bytes());
    b[16..48].copy_from_slice(&h.fingerprint.0);
    let l = &h.layout;
    b[48..52].copy_from_slice(&l.id.to_le_bytes());
    for (i, v) in [l.n_layer, l.n_embd, l.n_head, l.head_size]
        .into_iter()
        .enumerate()
    {
        b[52 + 4 * i..56 + 4 * i].copy_from_slice(&(v as u32).to_le_bytes());
    }
    b[68..72].copy_from_slice(&0u32.to_le_bytes()); // flags, none defined
    b[72..80].copy_from_slice(&h.tokens.to_le_bytes());
    b[80..88].copy_from_slice(&h.values.to_le_bytes());
    b[88..120].copy_from_slice(data_sha);
    b
}

/// Decodes and checks a header; `file_len` is the whole file's length in bytes.
///
/// Errors ([`EngineError::Malformed`], naming `path`): no magic, a version other than
/// [`STATE_VERSION`], an unknown layout id, nonzero flags, a value count that disagrees
/// with the layout, a file length other than header + data.
fn decode_header(path: &Path, b: &[u8], file_len: u64) -> Result<StateHeader> {
    if b.len() < 12 || b[0..8] != STATE_MAGIC {
        return Err(malformed(
            path,
            "not an RWKV state file (no \"RWKVSTAT\" magic in the first 8 bytes)",
        ));
    }
    let version = u32_at(b, 8);
    if version != STATE_VERSION {
        return Err(malformed(
            path,
            format!("state format version {version}; this engine reads version {STATE_VERSION}"),
        ));
    }
    if b.len() < STATE_HEADER_BYTES {
        return Err(malformed(
            path,
            format!(
                "truncated header: {} of {STATE_HEADER_BYTES} bytes",
                b.len()
            ),
        ));
    }
    let header_bytes = u32_at(b, 12);
    if header_bytes as usize != STATE_HEADER_BYTES {
        return Err(malformed(
            path,
            format!("header size {header_bytes}, version 1 has {STATE_HEADER_BYTES}"),
        ));
    }
    let mut fp = [0u8; 32];
    fp.copy_from_slice(&b[16..48]);
    let layout = StateLayout {
        id: u32_at(b, 48),
        n_layer: u32_at(b, 52) as usize,
        n_embd: u32_at(b, 56) as usize,
        n_head: u32_at(b, 60) as usize,
        head_size: u32_at(b, 64) as usize,
    };
    if layout.id != LAYOUT_PER_LAYER_V1 {
        return Err(malformed(
            path,
            format!(
                "state layout {}; this engine reads layout {LAYOUT_PER_LAYER_V1}",
                layout.id
            ),
        ));
    }
    let flags = u32_at(b, 68);
    if flags != 0 {
        return Err(malformed(path, format!("unknown flags {flags:#x}")));
    }
    let tokens = u64_at(b, 72);
    let values = u64_at(b, 80);
    let expect = layout.values().map(|v| v as u64);
    if expect != Some(values) {
        return Err(malformed(
            path,
            format!(
                "{values} values, but layout {} layers × (2·{} + {}·{}·{}) needs {}",
                layout.n_layer,
                layout.n_embd,
                layout.n_head,
                layout.head_size,
                layout.head_size,
                expect.map_or("more than fit in memory".to_string(), |v| v.to_string())
            ),
        ));
    }
    let want_len = values
        .checked_mul(4)
        .and_then(|d| d.checked_add(STATE_HEADER_BYTES as u64));
    if want_len != Some(file_len) {
        return Err(malformed(
            path,
            format!(
                "the header announces {values} f32 values ({} bytes with the header), the \
                 file has {file_len} bytes (truncated or padded)",
                want_len.map_or("too many".to_string(), |v| v.to_string())
            ),
        ));
    }
    Ok(StateHeader {
        version,
        fingerprint: ModelFingerprint(fp),
        layout,
        tokens,
        values,
        data_sha256: hex(&b[88..120]),
    })
}

/// Reads and checks the header of a state file, without reading its data (no GPU).
///
/// Errors: [`EngineError::Io`]; [`EngineError::Malformed`] as for a file that
/// [`read_state_file`] rejects before looking at the data.
pub fn read_state_header(path: impl AsRef<Path>) -> Result<StateHeader> {
    let path = path.as_ref();
    let mut f = std::fs::File::open(path).map_err(|e| EngineError::io(path, e))?;
    let len = f.metadata().map_err(|e| EngineError::io(path, e))?.len();
    let mut b = Vec::with_capacity(STATE_HEADER_BYTES);
    Read::by_ref(&mut f)
        .take(STATE_HEADER_BYTES as u64)
        .read_to_end(&mut b)
        .map_err(|e| EngineError::io(path, e))?;
    decode_header(path, &b, len)
}

/// Reads a whole state file: header and `values` f32.
///
/// Errors: as [`read_state_header`]; [`EngineError::Malformed`] when the data's sha256
/// disagrees with the header's or a value is not finite.
pub fn read_state_file(path: impl AsRef<Path>) -> Result<(StateHeader, Vec<f32>)> {
    let path = path.as_ref();
    // The header (and with it the length) is checked before the data is read, so a
    // corrupt length never sizes an allocation.
    let header = read_state_header(path)?;
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    // Re-check on the bytes read: the file may have changed in between.
    let header2 = decode_header(path, &bytes, bytes.len() as u64)?;
    if header2 != header {
        return Err(malformed(path, "the file changed while it was read"));
    }
    let data = &bytes[STATE_HEADER_BYTES..];
    let sha = hex(&Sha256::digest(data));
    if sha != header.data_sha256 {
        return Err(malformed(
            path,
            format!(
                "data checksum {} does not match the header's {} (corrupt file)",
                &sha[..12],
                &header.data_sha256[..12]
            ),
        ));
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(bad) = values.iter().position(|v| !v.is_finite()) {
        return Err(malformed(path, format!("value {bad} is not finite")));
    }
    Ok((header, values))
}

/// Writes `data` as a state file (to `path.tmp`, then renamed, so a crash never leaves
/// a half-written file under `path`). Returns the header written.
///
/// Errors: [`EngineError::State`] when `data` does not have `layout.values()` values;
/// [`EngineError::Io`].
pub fn write_state_file(
    path: impl AsRef<Path>,
    fingerprint: ModelFingerprint,
    layout: StateLayout,
    tokens: u64,
    data: &[f32],
) -> Result<StateHeader> {
    let path = path.as_ref();
    if layout.values() != Some(data.len()) {
        return Err(EngineError::State {
            what: format!(
                "{}: {} values given, the layout needs {:?}",
                path.display(),
                data.len(),
                layout.values()
            ),
        });
    }
    let bytes: &[u8] = bytemuck::cast_slice(data);
    // Little-endian on disk; the cast above is only that on little-endian hosts.
    let le: std::borrow::Cow<[u8]> = if cfg!(target_endian = "little") {
        std::borrow::Cow::Borrowed(bytes)
    } else {
        std::borrow::Cow::Owned(data.iter().flat_map(|v| v.to_le_bytes()).collect())
    };
    let sha: [u8; 32] = Sha256::digest(&le).into();
    let header = StateHeader {
        version: STATE_VERSION,
        fingerprint,
        layout,
        tokens,
        values: data.len() as u64,
        data_sha256: hex(&sha),
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(crate::files::create_temporary(&tmp)?);
        f.write_all(&encode_header(&header, &sha))?;
        f.write_all(&le)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename is durable once the folder is synced (POSIX; Windows has no folder
        // handle to sync).
        #[cfg(unix)]
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        EngineError::io(path, e)
    })?;
    Ok(header)
}

/// A state split into the fixtures' three arrays (C order).
#[derive(Debug, Clone, PartialEq)]
pub struct StateArrays {
    /// `[L, C]` token-shift state of the time mix (`state_att_x_prev`).
    pub att_x_prev: Vec<f32>,
    /// `[L, H, N, N]` WKV state, `S[h][i][j]` pairing value `i` with key `j` (`state_att_kv`).
    pub att_kv: Vec<f32>,
    /// `[L, C]` token-shift state of the channel mix (`state_ffn_x_prev`).
    pub ffn_x_prev: Vec<f32>,
}

impl StateArrays {
    /// Splits `data` (`layout.values()` f32 in layout 1).
    ///
    /// Errors: [`EngineError::State`] when the length disagrees with the layout;
    /// [`EngineError::OutputTooLarge`] past [`crate::output::MAX_OUTPUT_BYTES`].
    pub fn split(layout: &StateLayout, data: &[f32]) -> Result<Self> {
        if layout.values() != Some(data.len()) {
            return Err(EngineError::State {
                what: format!(
                    "{} values given, the layout needs {:?}",
                    data.len(),
                    layout.values()
                ),
            });
        }
        let c = layout.n_embd;
        let pl = layout.per_layer();
        let part = |name: &'static str, n: usize| {
            crate::output::vec(move || format!("state array {name} of {n} values"), n)
        };
        let mut a = StateArrays {
            att_x_prev: part("att_x_prev", layout.n_layer * c)?,
            att_kv: part("att_kv", layout.n_layer * (pl - 2 * c))?,
            ffn_x_prev: part("ffn_x_prev", layout.n_layer * c)?,
        };
        for layer in data.chunks_exact(pl) {
            a.att_x_prev.extend_from_slice(&layer[..c]);
            a.att_kv.extend_from_slice(&layer[c..pl - c]);
            a.ffn_x_prev.extend_from_slice(&layer[pl - c..]);
        }
        Ok(a)
    }

    /// Writes `state_att_x_prev.f32.npy`, `state_att_kv.f32.npy` and
    /// `state_ffn_x_prev.f32.npy` into `dir` (created if missing), the names and shapes
    /// of the fixtures' reference states. Returns the three paths.
    ///
    /// Errors: [`EngineError::Io`].
    pub fn write_npy(&self, layout: &StateLayout, dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        let (l, c, h, n) = (
            layout.n_layer,
            layout.n_embd,
            layout.n_head,
            layout.head_size,
        );
        let files = [
            ("state_att_x_prev.f32.npy", vec![l, c], &self.att_x_prev),
            ("state_att_kv.f32.npy", vec![l, h, n, n], &self.att_kv),
            ("state_ffn_x_prev.f32.npy", vec![l, c], &self.ffn_x_prev),
        ];
        let mut out = Vec::new();
        for (name, shape, data) in files {
            let p = dir.join(name);
            crate::npy::write_f32(&p, &shape, data)?;
            out.push(p);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> StateLayout {
        StateLayout {
            id: LAYOUT_PER_LAYER_V1,
            n_layer: 2,
            n_embd: 4,
            n_head: 1,
            head_size: 2,
        }
    }

    #[test]
    fn header_round_trip_and_rejects() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("rwkv-state-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let p = dir.join("s.rwkvstate");
        let l = layout();
        let n = l.values().ok_or_else(|| anyhow::anyhow!("overflow"))?;
        assert_eq!(n, 2 * (8 + 4));
        let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 1.0).collect();
        let fp = ModelFingerprint([7; 32]);
        let h = write_state_file(&p, fp, l, 45, &data)?;
        assert_eq!(
            std::fs::metadata(&p)?.len() as usize,
            STATE_HEADER_BYTES + 4 * n
        );
        assert_eq!(read_state_header(&p)?, h);
        let (h2, d2) = read_state_file(&p)?;
        assert_eq!((h2, d2), (h.clone(), data.clone()));
        let bytes = std::fs::read(&p)?;
        // A flipped data byte is caught by the checksum.
        let mut bad = bytes.clone();
        bad[STATE_HEADER_BYTES + 3] ^= 1;
        std::fs::write(&p, &bad)?;
        assert!(read_state_file(&p).is_err());
        // The split puts every value in exactly one array.
        let a = StateArrays::split(&l, &data)?;
        assert_eq!(a.att_x_prev, [&data[0..4], &data[12..16]].concat());
        assert_eq!(a.att_kv, [&data[4..8], &data[16..20]].concat());
        assert_eq!(a.ffn_x_prev, [&data[8..12], &data[20..24]].concat());
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    /// Issue 33, item 6: a link planted at the temporary's name is never written through,
    /// and the file is the user's only.
    #[cfg(unix)]
    #[test]
    fn a_planted_temporary_link_is_not_followed() -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rwkv-state-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let target = dir.join("victim.txt");
        std::fs::write(&target, b"not a state")?;
        let p = dir.join("s.rwkvstate");
        std::os::unix::fs::symlink(&target, dir.join("s.rwkvstate.tmp"))?;
        let l = layout();
        let data = vec![0.5; l.values().ok_or_else(|| anyhow::anyhow!("overflow"))?];
        write_state_file(&p, ModelFingerprint([7; 32]), l, 1, &data)?;
        assert_eq!(std::fs::read(&target)?, b"not a state");
        let meta = std::fs::symlink_metadata(&p)?;
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(read_state_file(&p)?.1, data);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
