//! PyTorch `.pth` reader: the zip + pickle that `torch.save(dict[str, Tensor])` writes
//! (BlinkDL's RWKV-7 releases), read without Python.
//!
//! The archive (`torch/serialization.py` `_save`, `PyTorchFileWriter`) holds, under one
//! top-level folder (`archive/` or the file's stem):
//! ```text
//! <prefix>/data.pkl        pickle (protocol 2) of the dict; tensors refer to storages
//! <prefix>/data/<key>      raw little-endian bytes of storage <key>
//! <prefix>/byteorder       "little" (absent in old files)
//! <prefix>/version, .format_version, .storage_alignment, .data/serialization_id
//! ```
//! every entry STORED (uncompressed), so a tensor's bytes are a slice of the mapping.
//!
//! The zip directory is read with the `zip` crate (STORED only: a compressed entry is an
//! error). `data.pkl` runs on a small, bounded pickle machine that knows only what
//! torch's pickles of state dicts use: containers, ints, strings, memo, `GLOBAL` of a short
//! allow-list (`collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`,
//! `torch._utils._rebuild_parameter`, `torch.*Storage`), `REDUCE`/`BUILD` of those, and
//! `BINPERSID` for `('storage', torch.<T>Storage, key, location, numel)`. Nothing from the
//! file is ever executed; anything else is an error. Values live in an arena and the memo
//! holds indices, so `BINGET` never copies: memory and time stay linear in the pickle's
//! size, and no step recurses.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;

use super::TensorInfo;
use crate::error::{EngineError, Result};

mod pickle;
mod torch;

use pickle::Vm;

/// Largest `data.pkl` accepted, in bytes (a 65536-tensor state dict pickles to a few MB).
pub const MAX_PICKLE: u64 = 64 << 20;
/// Most zip entries.
pub const MAX_ENTRIES: usize = 1 << 20;
/// Most tensor dimensions.
pub const MAX_DIMS: usize = 8;

const FORMAT: &str = "PyTorch .pth";

fn malformed(path: &Path, what: impl Into<String>) -> EngineError {
    EngineError::Malformed {
        path: path.to_path_buf(),
        format: FORMAT,
        what: what.into(),
    }
}

/// One STORED zip entry located in the mapping.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Absolute offset of the entry's bytes.
    start: usize,
    /// Length in bytes.
    len: usize,
}

/// Parses the `.pth` file `map` (`path` only names it in errors): finds the zip entries,
/// runs `data.pkl`, and returns one [`TensorInfo`] per dict entry, in dict order, each
/// pointing straight into `<prefix>/data/<key>` in the mapping.
///
/// Errors: [`EngineError::Malformed`] (bad zip, compressed or missing entries, pickle
/// opcodes or globals outside the allow-list, non-contiguous strides, storage bounds, a
/// value that is not a tensor), [`EngineError::UnsupportedType`] (storages other than
/// BFloat16 / Half / Float, naming the tensor). All name `path`.
pub fn parse(path: &Path, map: &[u8]) -> Result<Vec<TensorInfo>> {
    let entries = zip_entries(path, map)?;

    // The pickle: exactly one `<prefix>/data.pkl` (prefix = one folder) or `data.pkl`.
    let mut pkls: Vec<(&str, Entry)> = entries
        .iter()
        .filter(|(name, _)| {
            name.strip_suffix("data.pkl")
                .is_some_and(|p| p.is_empty() || (p.ends_with('/') && p.matches('/').count() == 1))
        })
        .map(|(name, e)| (name.as_str(), *e))
        .collect();
    pkls.sort_by_key(|(name, _)| *name);
    let (pkl_name, pkl) = match pkls.as_slice() {
        [one] => *one,
        [] => {
            return Err(malformed(
                path,
                "zip archive has no `data.pkl`: not a torch.save file",
            ))
        }
        [a, b, ..] => {
            return Err(malformed(
                path,
                format!(
                    "zip archive has several pickles (`{}`, `{}`): not one torch.save file",
                    a.0, b.0
                ),
            ))
        }
    };
    let prefix = &pkl_name[..pkl_name.len() - "data.pkl".len()];
    if pkl.len as u64 > MAX_PICKLE {
        return Err(malformed(
            path,
            format!("`{pkl_name}` is {} bytes (limit {MAX_PICKLE})", pkl.len),
        ));
    }
    if let Some(bo) = entries.get(&format!("{prefix}byteorder")) {
        let bytes = map.get(bo.start..bo.start + bo.len).unwrap_or_default();
        if bytes != b"little" {
            return Err(malformed(
                path,
                format!(
                    "byteorder is {:?}; only little-endian files are read",
                    String::from_utf8_lossy(bytes)
                ),
            ));
        }
    }
    let pickle = map
        .get(pkl.start..pkl.start + pkl.len)
        .ok_or_else(|| malformed(path, "data.pkl out of range"))?;

    let mut vm = Vm::new(path, pickle);
    let root = vm.run()?;
    vm.tensors(root, prefix, &entries, map.len())
}

/// Every entry of the zip directory: name → location in the mapping. Entries that are
/// not STORED are recorded as errors only when used (a compressed `data/<key>` is an
/// error; a compressed `version` file would not matter).
fn zip_entries(path: &Path, map: &[u8]) -> Result<HashMap<String, Entry>> {
    let mut zip = zip::ZipArchive::new(Cursor::new(map))
        .map_err(|e| malformed(path, format!("zip directory: {e}")))?;
    if zip.len() > MAX_ENTRIES {
        return Err(malformed(
            path,
            format!(
                "zip archive has {} entries (limit {MAX_ENTRIES})",
                zip.len()
            ),
        ));
    }
    let mut out = HashMap::with_capacity(zip.len());
    for i in 0..zip.len() {
        let f = zip
            .by_index_raw(i)
            .map_err(|e| malformed(path, format!("zip entry #{i}: {e}")))?;
        let name = f.name().to_string();
        if f.compression() != zip::CompressionMethod::Stored || f.compressed_size() != f.size() {
            return Err(malformed(
                path,
                format!(
                    "zip entry `{name}` is compressed ({:?}); torch.save stores entries uncompressed — \
                     re-save the file with torch.save",
                    f.compression()
                ),
            ));
        }
        let start = f.data_start();
        let end = start.checked_add(f.size());
        let entry = match end {
            Some(end) if end <= map.len() as u64 => Entry {
                start: start as usize,
                len: f.size() as usize,
            },
            _ => {
                return Err(malformed(
                    path,
                    format!(
                        "zip entry `{name}` ({} bytes at {start}) lies past the end of the {}-byte file",
                        f.size(),
                        map.len()
                    ),
                ))
            }
        };
        if out.insert(name.clone(), entry).is_some() {
            return Err(malformed(path, format!("zip entry `{name}` appears twice")));
        }
    }
    Ok(out)
}
