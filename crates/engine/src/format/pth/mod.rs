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
//! The zip directory is read by `zipdir.rs` (STORED only: a compressed entry is an error;
//! the entry count is checked before the directory is parsed). `data.pkl` runs on a
//! small, bounded pickle machine that knows only what
//! torch's pickles of state dicts use: containers, ints, strings, memo, `GLOBAL` of a short
//! allow-list (`collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`,
//! `torch._utils._rebuild_parameter`, `torch.*Storage`), `REDUCE`/`BUILD` of those, and
//! `BINPERSID` for `('storage', torch.<T>Storage, key, location, numel)`. Nothing from the
//! file is ever executed; anything else is an error. Values live in an arena and the memo
//! holds indices, so `BINGET` never copies, and no step recurses. Memory is capped, not
//! just linear: [`MAX_PICKLE`] bytes of pickle, [`MAX_VALUES`] values, [`MAX_STACK`]
//! stack entries, [`MAX_MARKS`] open marks, [`MAX_MEMO`] memo entries, [`MAX_ITEMS`]
//! container items — together at most ≈ 170 MiB whatever the pickle holds (a value is
//! 32 bytes), where an unbounded machine took ≈ 70× the pickle.

use std::path::Path;

use super::TensorInfo;
use crate::error::{EngineError, Result};

mod pickle;
mod torch;
mod zipdir;

use pickle::Vm;

/// Largest `data.pkl` accepted, in bytes: a state dict pickles to ≈ 150 bytes a tensor
/// (BlinkDL's 7B, 1,100 tensors: ≈ 170 KB), so 16 MiB holds 100,000 tensors.
pub const MAX_PICKLE: u64 = 16 << 20;
/// Most zip entries: one per storage plus a few records; twice the GGUF reader's 65,536
/// tensors. Each costs ≈ 100 bytes in the map and at least 46 in the file.
pub const MAX_ENTRIES: usize = 1 << 17;
/// Most values the pickle machine creates (32 bytes each): a tensor takes ≈ 20 (its name,
/// storage tuple, offset, size and stride tuples, rebuild call), so 1 Mi values hold
/// 50,000 tensors; the largest RWKV-7 release has ≈ 2,000.
pub const MAX_VALUES: usize = 1 << 20;
/// Deepest the value stack may grow: Python's pickler closes a MARK every 1,000 items, so
/// a state dict never needs more than a few thousand.
pub const MAX_STACK: usize = 1 << 16;
/// Most MARKs open at once (the nesting depth; a state dict nests ≈ 5).
pub const MAX_MARKS: usize = 256;
/// Most memo entries (torch memoizes about every value once).
pub const MAX_MEMO: usize = 1 << 20;
/// Most items in all tuples, lists and dicts together (8 bytes each, 16 a dict pair).
pub const MAX_ITEMS: usize = 1 << 21;
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
    let entries = zipdir::entries(path, map)?;

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
                    String::from_utf8_lossy(&bytes[..bytes.len().min(16)])
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
