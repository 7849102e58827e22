//! GGUF v2/v3 reader over a memory map (spec: ggml `docs/gguf.md`; checks modelled on
//! llama.cpp `gguf.cpp` and candle `gguf_file.rs`).
//!
//! Layout (little-endian):
//! ```text
//! "GGUF" u32 version  u64 n_tensors  u64 n_kv
//! n_kv × { string key, u32 value_type, value }
//! n_tensors × { string name, u32 n_dims, n_dims × u64 ne, u32 ggml_type, u64 offset }
//! padding to `general.alignment` (default 32)
//! tensor data (each tensor at data_start + offset, offset a multiple of the alignment)
//! ```
//! A string is `u64 len` + `len` bytes of UTF-8. An array is `u32 elem_type, u64 len,
//! elements`.
//!
//! Everything read from the file is untrusted: every count, string length, nesting depth,
//! dimension, offset and size is capped and checked against the bytes that are really
//! there *before* anything is allocated or sliced, with checked arithmetic throughout.

use std::collections::HashSet;
use std::path::Path;

use super::{DType, MetaValue, TensorInfo};
use crate::error::{EngineError, Result};

/// Most tensors a file may declare (the largest released models have a few thousand).
pub const MAX_TENSORS: u64 = 65_536;
/// Most metadata key/value pairs.
pub const MAX_KV: u64 = 1 << 20;
/// Longest string (key, value or tensor name), in bytes.
pub const MAX_STRING: u64 = 16 << 20;
/// Longest tensor name, in bytes (ggml's own limit is 64; be lenient but bounded).
pub const MAX_TENSOR_NAME: u64 = 4096;
/// Deepest nesting of arrays inside arrays.
pub const MAX_DEPTH: usize = 4;
/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Alignment of the data section when `general.alignment` is absent (bytes).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The parsed header of a GGUF file.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Tensors in file order; `shape` is `ne` reversed, `offset` is absolute.
    pub tensors: Vec<TensorInfo>,
    /// Key/value metadata in file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Alignment of the data section in bytes.
    pub alignment: u64,
    /// Absolute offset of the data section in bytes.
    pub data_offset: usize,
}

/// GGUF metadata value types (`gguf_metadata_value_type`).
mod vt {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

impl MetaValue {
    /// The GGUF value type id of this value (`gguf_type`: 0 UINT8 … 8 STRING, 9 ARRAY,
    /// 10 UINT64, 11 INT64, 12 FLOAT64), as the header stores it before the value.
    pub fn gguf_type(&self) -> u32 {
        match self {
            MetaValue::U8(_) => vt::U8,
            MetaValue::I8(_) => vt::I8,
            MetaValue::U16(_) => vt::U16,
            MetaValue::I16(_) => vt::I16,
            MetaValue::U32(_) => vt::U32,
            MetaValue::I32(_) => vt::I32,
            MetaValue::F32(_) => vt::F32,
            MetaValue::Bool(_) => vt::BOOL,
            MetaValue::String(_) => vt::STRING,
            MetaValue::Array(_) => vt::ARRAY,
            MetaValue::U64(_) => vt::U64,
            MetaValue::I64(_) => vt::I64,
            MetaValue::F64(_) => vt::F64,
        }
    }
}

/// Smallest number of bytes one value of type `t` takes in the file (used to bound array
/// lengths by the bytes that remain). `None` for an unknown type.
fn min_value_bytes(t: u32) -> Option<u64> {
    Some(match t {
        vt::U8 | vt::I8 | vt::BOOL => 1,
        vt::U16 | vt::I16 => 2,
        vt::U32 | vt::I32 | vt::F32 => 4,
        vt::U64 | vt::I64 | vt::F64 => 8,
        vt::STRING => 8,
        vt::ARRAY => 12,
        _ => return None,
    })
}

/// A bounds-checked little-endian cursor over the file.
struct Reader<'a> {
    path: &'a Path,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: impl std::fmt::Display) -> EngineError {
        EngineError::Malformed {
            path: self.path.to_path_buf(),
            format: "GGUF",
            what: format!("at byte {}: {what}", self.pos),
        }
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos.min(self.buf.len())) as u64
    }

    /// The next `n` bytes, or an error naming `what` was being read.
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format_args!(
                "{what} needs {n} bytes but only {} remain (truncated file?)",
                self.remaining()
            )));
        }
        // n <= remaining <= usize::MAX, so the cast and the addition are exact.
        let end = self.pos + n as usize;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.err("slice out of range"))?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string of at most `cap` bytes. Invalid UTF-8 is an error when `strict`
    /// (keys, tensor names: they are looked up), else replaced (values: llama.cpp does not
    /// validate them either, and one odd token string should not make a model unusable).
    fn string(&mut self, cap: u64, strict: bool, what: &str) -> Result<String> {
        let start = self.pos;
        let len = self.u64(what)?;
        if len > cap {
            self.pos = start;
            return Err(self.err(format_args!("{what} claims {len} bytes (limit {cap})")));
        }
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) if strict => {
                self.pos = start;
                Err(self.err(format_args!("{what} is not UTF-8 ({e})")))
            }
            Err(_) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        }
    }

    /// One metadata value of type `t`; arrays nest at most [`MAX_DEPTH`] deep.
    fn value(&mut self, t: u32, depth: usize, key: &str) -> Result<MetaValue> {
        Ok(match t {
            vt::U8 => MetaValue::U8(self.u8(key)?),
            vt::I8 => MetaValue::I8(self.u8(key)? as i8),
            vt::U16 => MetaValue::U16(self.u16(key)?),
            vt::I16 => MetaValue::I16(self.u16(key)? as i16),
            vt::U32 => MetaValue::U32(self.u32(key)?),
            vt::I32 => MetaValue::I32(self.u32(key)? as i32),
            vt::F32 => MetaValue::F32(f32::from_bits(self.u32(key)?)),
            vt::U64 => MetaValue::U64(self.u64(key)?),
            vt::I64 => MetaValue::I64(self.u64(key)? as i64),
            vt::F64 => MetaValue::F64(f64::from_bits(self.u64(key)?)),
            vt::BOOL => match self.u8(key)? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    self.pos -= 1;
                    return Err(self.err(format_args!("`{key}`: bool byte is {b}, not 0 or 1")));
                }
            },
            vt::STRING => MetaValue::String(self.string(MAX_STRING, false, key)?),
            vt::ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(self.err(format_args!(
                        "`{key}`: arrays nested more than {MAX_DEPTH} deep"
                    )));
                }
                let et = self.u32(key)?;
                let Some(min) = min_value_bytes(et) else {
                    self.pos -= 4;
                    return Err(self.err(format_args!("`{key}`: unknown array element type {et}")));
                };
                let n = self.u64(key)?;
                // Each element takes at least `min` bytes: a longer array cannot fit in
                // what remains, so this bounds the allocation by the file size.
                if n > self.remaining() / min {
                    self.pos -= 8;
                    return Err(self.err(format_args!(
                        "`{key}`: array of {n} elements cannot fit in the {} bytes that remain",
                        self.remaining()
                    )));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(et, depth + 1, key)?);
                }
                MetaValue::Array(items)
            }
            other => {
                self.pos -= 4;
                return Err(self.err(format_args!("`{key}`: unknown metadata value type {other}")));
            }
        })
    }
}

/// Parses the header of the GGUF file `map` (the whole file; `path` only names it in
/// errors). Nothing past the header is read: tensor bytes are only located and
/// bounds-checked.
///
/// Returns tensors in file order with `shape` = `ne` reversed (row-major, outermost
/// first) and absolute `offset`s, and the metadata in file order.
///
/// Errors: [`EngineError::Malformed`] (bad magic or version, truncation, absurd counts or
/// lengths, bad alignment, offsets or sizes past the end of the file, duplicate keys),
/// [`EngineError::UnsupportedType`] (a tensor type the engine does not read, naming the
/// tensor and the ggml type id). All name `path`.
pub fn parse(path: &Path, map: &[u8]) -> Result<Parsed> {
    let mut r = Reader {
        path,
        buf: map,
        pos: 0,
    };
    let magic = r.array::<4>("magic")?;
    if &magic != b"GGUF" {
        r.pos = 0;
        return Err(r.err(format_args!("magic is {magic:02x?}, not \"GGUF\"")));
    }
    let version = r.u32("version")?;
    match version {
        2 | 3 => {}
        1 => {
            r.pos -= 4;
            return Err(
                r.err("GGUF version 1 (32-bit counts) is not supported; re-convert the model")
            );
        }
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            r.pos -= 4;
            return Err(r.err("big-endian GGUF is not supported"));
        }
        v => {
            r.pos -= 4;
            return Err(r.err(format_args!(
                "unsupported GGUF version {v} (expected 2 or 3)"
            )));
        }
    }
    let n_tensors = r.u64("tensor count")?;
    if n_tensors > MAX_TENSORS {
        r.pos -= 8;
        return Err(r.err(format_args!(
            "tensor count {n_tensors} exceeds the limit {MAX_TENSORS}"
        )));
    }
    let n_kv = r.u64("metadata count")?;
    if n_kv > MAX_KV {
        r.pos -= 8;
        return Err(r.err(format_args!(
            "metadata count {n_kv} exceeds the limit {MAX_KV}"
        )));
    }
    // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info
    // at least 8 + 4 + 8 + 4 + 8. Bound the allocations by what the file can hold.
    if n_kv.saturating_mul(13) > r.remaining() || n_tensors.saturating_mul(32) > r.remaining() {
        return Err(r.err(format_args!(
            "{n_kv} metadata entries and {n_tensors} tensors cannot fit in the {} bytes that remain (truncated file?)",
            r.remaining()
        )));
    }

    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut keys = HashSet::with_capacity(n_kv as usize);
    for _ in 0..n_kv {
        let key_at = r.pos;
        let key = r.string(MAX_STRING, true, "metadata key")?;
        let t = r.u32("metadata value type")?;
        let value = r.value(t, 0, &key)?;
        if !keys.insert(key.clone()) {
            r.pos = key_at;
            return Err(r.err(format_args!("metadata key `{key}` appears twice")));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 30 => a,
            _ => {
                return Err(r.err(format_args!(
                    "general.alignment is {v:?}; it must be a power of two (at most 2^30)"
                )))
            }
        },
    };

    // Tensor infos: names, shapes and types first; offsets are checked once the data
    // section's start is known.
    struct Raw {
        name: String,
        dtype: DType,
        ne: Vec<u64>,
        rel: u64,
        len: u64,
    }
    let mut raws = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = r.string(MAX_TENSOR_NAME, true, "tensor name")?;
        let what = format!("tensor #{i} `{name}`");
        let n_dims = r.u32(&what)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            r.pos -= 4;
            return Err(r.err(format_args!(
                "{what} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"
            )));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        let mut numel: u64 = 1;
        for _ in 0..n_dims {
            let d = r.u64(&what)?;
            if d == 0 {
                r.pos -= 8;
                return Err(r.err(format_args!(
                    "{what} has a dimension of 0 (ne so far {ne:?})"
                )));
            }
            numel = numel.checked_mul(d).ok_or_else(|| {
                r.err(format_args!(
                    "{what}: element count overflows (dims so far {ne:?} × {d})"
                ))
            })?;
            ne.push(d);
        }
        let type_id = r.u32(&what)?;
        let Some(dtype) = DType::from_ggml_id(type_id) else {
            return Err(EngineError::UnsupportedType {
                path: path.to_path_buf(),
                tensor: name,
                dtype: format!("ggml type id {type_id}"),
            });
        };
        let rel = r.u64(&what)?;
        // ggml stores whole blocks along ne[0] (each row is a whole number of blocks).
        let row = ne.first().copied().unwrap_or(1);
        if row % dtype.block_len() as u64 != 0 {
            return Err(r.err(format_args!(
                "{what}: ne[0] = {row} is not a multiple of {dtype}'s block of {}",
                dtype.block_len()
            )));
        }
        let len = usize::try_from(numel)
            .ok()
            .and_then(|n| dtype.bytes_for(n))
            .ok_or_else(|| {
                r.err(format_args!(
                    "{what}: byte size of {numel} {dtype} elements overflows"
                ))
            })?;
        if rel % alignment != 0 {
            return Err(r.err(format_args!(
                "{what}: data offset {rel} is not a multiple of the alignment {alignment}"
            )));
        }
        raws.push(Raw {
            name,
            dtype,
            ne,
            rel,
            len: len as u64,
        });
    }

    let header_end = r.pos as u64;
    let data_offset = header_end
        .checked_next_multiple_of(alignment)
        .filter(|&d| d <= map.len() as u64)
        .ok_or_else(|| {
            r.err(format_args!(
                "data section (header end {header_end} aligned to {alignment}) starts past the end of the {}-byte file",
                map.len()
            ))
        })?;

    let file_len = map.len() as u64;
    let mut tensors = Vec::with_capacity(raws.len());
    for raw in raws {
        let start = data_offset.checked_add(raw.rel);
        let end = start.and_then(|s| s.checked_add(raw.len));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => tensors.push(TensorInfo {
                shape: raw.ne.iter().rev().map(|&d| d as usize).collect(),
                name: raw.name,
                dtype: raw.dtype,
                offset: s as usize,
                len: raw.len as usize,
            }),
            _ => {
                return Err(EngineError::Malformed {
                    path: path.to_path_buf(),
                    format: "GGUF",
                    what: format!(
                        "tensor `{}` ({} {:?}, {} bytes at data offset {} + {}) lies past the end of the {file_len}-byte file",
                        raw.name, raw.dtype, raw.ne, raw.len, data_offset, raw.rel
                    ),
                })
            }
        }
    }

    Ok(Parsed {
        tensors,
        metadata,
        version,
        alignment,
        data_offset: data_offset as usize,
    })
}
