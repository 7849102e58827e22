//! SafeTensors reader over a memory map, through the `safetensors` crate's header parsing.
//!
//! Layout: `u64 header_len` (little-endian), `header_len` bytes of JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}`),
//! then the data section; a tensor's bytes are at `8 + header_len + begin .. + end`.
//!
//! The header JSON is deserialized into `safetensors::tensor::Metadata`, whose own
//! validation checks that offsets are contiguous and match each dtype and shape. The
//! crate's `SafeTensors::read_metadata` would also compare the data length with the
//! buffer, but with unchecked arithmetic that can overflow on a hostile header; so that
//! comparison, and the bounds of every tensor, are done here with checked arithmetic.

use std::path::Path;

use safetensors::tensor::Metadata;
use safetensors::Dtype;

use super::{DType, MetaValue, TensorInfo};
use crate::error::{EngineError, Result};

/// Longest JSON header accepted, in bytes. Parsed, a header takes ≈ 12× its size (the
/// `safetensors` crate's map and records, then ours: a 42 MB header of 600,000 tensors
/// peaked at 537 MiB), so the crate's own limit of 100 MB let a file ask for ≈ 1.2 GB;
/// 8 MiB keeps that at ≈ 110 MiB, well under the 256 MiB every reader may spend beyond
/// the file (`docs/reliability.md`), and holds ≈ 115,000 tensors (the GGUF reader's cap
/// is 65,536) — a 7B checkpoint's header is ≈ 100 KB.
pub const MAX_HEADER: u64 = 8 << 20;

/// Parses the header of the SafeTensors file `map` (`path` only names it in errors).
///
/// Returns the tensors sorted by offset (absolute offsets; `shape` as stored, row-major)
/// and `__metadata__` as string pairs sorted by key.
///
/// Errors: [`EngineError::Malformed`] (short file, header length past the end, bad JSON,
/// overlapping or non-contiguous offsets, sizes that disagree with shapes, data past the
/// end), [`EngineError::UnsupportedType`] (dtypes other than F16, BF16 and F32, naming the
/// tensor). All name `path`.
#[allow(clippy::type_complexity)] // (tensors, metadata), as the other readers return
pub fn parse(path: &Path, map: &[u8]) -> Result<(Vec<TensorInfo>, Vec<(String, MetaValue)>)> {
    let bad = |what: String| EngineError::Malformed {
        path: path.to_path_buf(),
        format: "SafeTensors",
        what,
    };
    let Some(len_bytes) = map.get(..8) else {
        return Err(bad(format!(
            "the file has {} bytes, fewer than the 8-byte header length (and it is not GGUF or a .pth zip either)",
            map.len()
        )));
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(n);
    let avail = map.len() as u64 - 8;
    if header_len > MAX_HEADER && header_len <= avail {
        return Err(bad(format!(
            "header of {header_len} bytes exceeds the limit of {MAX_HEADER} bytes"
        )));
    }
    if header_len > avail {
        return Err(bad(format!(
            "header length {header_len} is past the end of the file ({avail} bytes follow; limit {MAX_HEADER}) — \
             not a SafeTensors file (nor GGUF, nor a .pth zip)?"
        )));
    }
    // header_len <= avail < usize::MAX: exact.
    let data_start = 8 + header_len as usize;
    let header = map
        .get(8..data_start)
        .ok_or_else(|| bad("header out of range".into()))?;
    if header.first() != Some(&b'{') {
        return Err(bad(
            "the header does not start with '{' — not a SafeTensors file (nor GGUF, nor a .pth zip)?".into(),
        ));
    }
    let meta: Metadata =
        serde_json::from_slice(header).map_err(|e| bad(format!("header JSON: {e}")))?;

    let data_len = (map.len() - data_start) as u64;
    let needed = meta.data_len() as u64;
    if needed != data_len {
        return Err(bad(format!(
            "the header describes {needed} bytes of tensor data but {data_len} bytes follow it"
        )));
    }

    let mut tensors = Vec::new();
    for (name, info) in meta.tensors() {
        let dtype = match info.dtype {
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            Dtype::F32 => DType::F32,
            other => {
                return Err(EngineError::UnsupportedType {
                    path: path.to_path_buf(),
                    tensor: name,
                    dtype: format!("{other:?}"),
                })
            }
        };
        let (begin, end) = info.data_offsets;
        let numel = info.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let len = numel.and_then(|n| dtype.bytes_for(n));
        let start = data_start.checked_add(begin);
        let stop = data_start.checked_add(end);
        match (len, start, stop) {
            (Some(len), Some(s), Some(e)) if e <= map.len() && e.checked_sub(s) == Some(len) => {
                tensors.push(TensorInfo {
                    name,
                    dtype,
                    shape: info.shape.clone(),
                    offset: s,
                    len,
                })
            }
            _ => {
                return Err(bad(format!(
                    "tensor `{name}` ({dtype} {:?}, data_offsets [{begin}, {end}]) does not fit the {}-byte file",
                    info.shape,
                    map.len()
                )))
            }
        }
    }
    tensors.sort_by(|a, b| a.offset.cmp(&b.offset).then_with(|| a.name.cmp(&b.name)));

    let mut metadata: Vec<(String, MetaValue)> = meta
        .metadata()
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), MetaValue::String(v.clone())))
        .collect();
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((tensors, metadata))
}
