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
//! The metadata is decoded within a budget ([`Limits`]: elements and bytes in all), arrays
//! packed by element type (`gguf/values.rs`), and every vector sized from the file is
//! reserved with `try_reserve`: a header of S bytes costs at most ≈ S + 64 MiB, where one
//! U8 array once took 32 bytes an element (issue 33).

use std::path::Path;

use super::{DType, MetaValue, TensorInfo};
use crate::error::{EngineError, Result};

mod values;

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
/// Most metadata elements in all (keys, scalars, array elements, strings): 5× the
/// largest tokenizer seen in a GGUF (Gemma 3: tokens, scores and types of 262,144 entries,
/// 786,432 elements); RWKV's World vocabulary takes 131,072.
pub const MAX_META_ELEMENTS: u64 = 1 << 22;
/// Most bytes the decoded metadata may take in memory (packed arrays at their element
/// size, each string its bytes plus its 24-byte header, each key/value pair its entry):
/// the largest real tokenizer needs about 12 MiB (Qwen's 151,643 tokens and 151,387
/// merges), so 64 MiB leaves room and still keeps a hostile header far below the
/// 256 MiB every reader may spend beyond the file itself (`docs/reliability.md`).
pub const MAX_META_BYTES: u64 = 64 << 20;

/// What a header may cost once decoded: [`parse`] uses [`Limits::DEFAULT`];
/// [`parse_with`] takes others (tests, tools with a known budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most metadata elements in all (see [`MAX_META_ELEMENTS`]).
    pub meta_elements: u64,
    /// Most decoded metadata bytes (see [`MAX_META_BYTES`]).
    pub meta_bytes: u64,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        meta_elements: MAX_META_ELEMENTS,
        meta_bytes: MAX_META_BYTES,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

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

/// A bounds-checked little-endian cursor over the file, with the metadata budget left.
struct Reader<'a> {
    path: &'a Path,
    buf: &'a [u8],
    pos: usize,
    /// Metadata elements still allowed ([`Limits::meta_elements`] minus those read).
    elements_left: u64,
    /// Decoded metadata bytes still allowed ([`Limits::meta_bytes`] minus those spent).
    bytes_left: u64,
    limits: Limits,
}

/// Memory one string takes once decoded: its bytes and its `String` header.
fn string_cost(len: u64) -> u64 {
    len.saturating_add(std::mem::size_of::<String>() as u64)
}

/// A vector of `n` elements of `T`, reserved up front without aborting: an allocation the
/// system refuses is an error naming `what`.
fn reserve<T>(n: usize, what: impl FnOnce() -> EngineError) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| what())?;
    Ok(v)
}

impl<'a> Reader<'a> {
    fn err(&self, what: impl std::fmt::Display) -> EngineError {
        EngineError::Malformed {
            path: self.path.to_path_buf(),
            format: "GGUF",
            what: format!("at byte {}: {what}", self.pos),
        }
    }

    /// Spends `elements` elements and `bytes` decoded bytes of the metadata budget for
    /// key `key`, or fails naming the key and both limits.
    fn charge(&mut self, key: &str, elements: u64, bytes: u64) -> Result<()> {
        if elements > self.elements_left || bytes > self.bytes_left {
            let Limits {
                meta_elements,
                meta_bytes,
            } = self.limits;
            return Err(self.err(format_args!(
                "`{key}`: the metadata would exceed its budget of {meta_elements} elements \
                 and {meta_bytes} decoded bytes (this value: {elements} elements, {bytes} \
                 bytes; left: {} elements, {} bytes)",
                self.elements_left, self.bytes_left
            )));
        }
        self.elements_left -= elements;
        self.bytes_left -= bytes;
        Ok(())
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
    /// The caller charges the budget (it knows whose string this is).
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
}

/// Parses the header of the GGUF file `map` (the whole file; `path` only names it in
/// errors). Nothing past the header is read: tensor bytes are only located and
/// bounds-checked.
///
/// Returns tensors in file order with `shape` = `ne` reversed (row-major, outermost
/// first) and absolute `offset`s, and the metadata in file order.
///
/// Errors: [`EngineError::Malformed`] (bad magic or version, truncation, absurd counts or
/// lengths, bad alignment, offsets or sizes past the end of the file, duplicate keys,
/// metadata past [`Limits::DEFAULT`], naming the key), [`EngineError::UnsupportedType`]
/// (a tensor type the engine does not read, naming the tensor and the ggml type id). All
/// name `path`.
pub fn parse(path: &Path, map: &[u8]) -> Result<Parsed> {
    parse_with(path, map, &Limits::DEFAULT)
}

/// [`parse`] with other metadata limits.
///
/// Errors: as [`parse`]; [`EngineError::Malformed`] naming the key at which the metadata
/// passes `limits`.
pub fn parse_with(path: &Path, map: &[u8], limits: &Limits) -> Result<Parsed> {
    let mut r = Reader {
        path,
        buf: map,
        pos: 0,
        elements_left: limits.meta_elements,
        bytes_left: limits.meta_bytes,
        limits: *limits,
    };
    let (version, n_tensors, n_kv) = r.header()?;
    let metadata = r.metadata(n_kv)?;
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
    let mut raws: Vec<RawTensor> = reserve(n_tensors as usize, || {
        r.err(format_args!("no memory for {n_tensors} tensor infos"))
    })?;
    for i in 0..n_tensors {
        raws.push(r.tensor_info(i, alignment)?);
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
    let tensors = place_tensors(&r, raws, data_offset)?;
    Ok(Parsed {
        tensors,
        metadata,
        version,
        alignment,
        data_offset: data_offset as usize,
    })
}

/// A tensor info as the header states it: its data offset relative to the data section.
struct RawTensor {
    name: String,
    dtype: DType,
    ne: Vec<u64>,
    rel: u64,
    len: u64,
}

/// The tensors of `raws` at their absolute offsets, each checked to lie inside the file.
fn place_tensors(r: &Reader, raws: Vec<RawTensor>, data_offset: u64) -> Result<Vec<TensorInfo>> {
    let file_len = r.buf.len() as u64;
    let mut tensors = reserve(raws.len(), || {
        r.err(format_args!("no memory for {} tensors", raws.len()))
    })?;
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
                    path: r.path.to_path_buf(),
                    format: "GGUF",
                    what: format!(
                        "tensor `{}` ({} {:?}, {} bytes at data offset {} + {}) lies past the end of the {file_len}-byte file",
                        raw.name, raw.dtype, raw.ne, raw.len, data_offset, raw.rel
                    ),
                })
            }
        }
    }
    Ok(tensors)
}

impl Reader<'_> {
    /// Magic, version, tensor count and metadata count, each checked (supported version,
    /// counts under the limits and within what the bytes that remain can hold).
    fn header(&mut self) -> Result<(u32, u64, u64)> {
        let r = self;
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
        Ok((version, n_tensors, n_kv))
    }

    /// `n_kv` key/value pairs, each charged against the metadata budget; a key that
    /// appears twice is refused.
    fn metadata(&mut self, n_kv: u64) -> Result<Vec<(String, MetaValue)>> {
        let r = self;
        // Both counts were bounded by the bytes that remain; reserving can still fail.
        let mut metadata: Vec<(String, MetaValue)> = reserve(n_kv as usize, || {
            r.err(format_args!("no memory for {n_kv} metadata entries"))
        })?;
        let mut key_at = reserve(n_kv as usize, || {
            r.err(format_args!("no memory for {n_kv} metadata entries"))
        })?;
        let pair =
            (std::mem::size_of::<(String, MetaValue)>() + std::mem::size_of::<usize>()) as u64;
        for i in 0..n_kv {
            key_at.push(r.pos);
            let len = r.peek_len("metadata key")?;
            if len <= MAX_STRING {
                r.charge(&format!("metadata key #{i}"), 1, string_cost(len) + pair)?;
            }
            let key = r.string(MAX_STRING, true, "metadata key")?;
            let t = r.u32("metadata value type")?;
            let value = r.value(t, 0, &key)?;
            metadata.push((key, value));
        }
        // Duplicate keys: sort indices by key (no copy of the keys), compare neighbours.
        let mut order: Vec<usize> =
            reserve(metadata.len(), || r.err("no memory to sort the keys"))?;
        order.extend(0..metadata.len());
        order.sort_unstable_by(|&a, &b| metadata[a].0.cmp(&metadata[b].0));
        if let Some(w) = order
            .windows(2)
            .find(|w| metadata[w[0]].0 == metadata[w[1]].0)
        {
            let later = w[0].max(w[1]);
            r.pos = key_at[later];
            return Err(r.err(format_args!(
                "metadata key `{}` appears twice",
                metadata[later].0
            )));
        }
        drop((order, key_at));
        Ok(metadata)
    }

    /// Tensor info #`i`: name, dimensions, type and relative offset, checked (dimension
    /// count, no zero dimension, no overflow, whole blocks along ne[0], aligned offset).
    fn tensor_info(&mut self, i: u64, alignment: u64) -> Result<RawTensor> {
        let r = self;
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
                path: r.path.to_path_buf(),
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
        Ok(RawTensor {
            name,
            dtype,
            ne,
            rel,
            len: len as u64,
        })
    }
}
