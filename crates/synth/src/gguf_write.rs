//! Streaming GGUF v3 writer.
//!
//! File layout (GGUF spec; llama.cpp `gguf.cpp`, gguf-py `GGUFWriter`): magic `GGUF`,
//! `u32` version 3, `u64` tensor count, `u64` key/value count, the key/values, the tensor
//! infos (name, `u32` n_dims, `u64` ne[..], `u32` ggml type, `u64` offset relative to the
//! data section), zero padding to the alignment (32), then every tensor's bytes, each
//! followed by zero padding to the alignment. All integers little-endian.
//!
//! [`GgufWriter::new`] writes everything up to the data section from the tensor table
//! alone; tensors are then streamed in table order with [`GgufWriter::write_tensor_data`]
//! (possibly in pieces), so no tensor needs to be in memory whole.

use std::io::Write;
use std::path::{Path, PathBuf};

use rwkv_engine::format::MetaValue;
use rwkv_engine::{DType, EngineError, Result};

/// GGUF's default data alignment (`general.alignment` absent), bytes.
pub const GGUF_DEFAULT_ALIGNMENT: usize = 32;

/// One entry of the tensor table to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorSpec {
    pub name: String,
    /// GGUF dimension order: `ne[0]` is the fastest-varying (row length).
    pub ne: Vec<u64>,
    pub dtype: DType,
}

impl GgufTensorSpec {
    /// Elements.
    pub fn numel(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Bytes of tensor data, or `None` when `ne[0]` is not a whole number of blocks.
    pub fn n_bytes(&self) -> Option<usize> {
        let row = usize::try_from(*self.ne.first()?).ok()?;
        let rows: u64 = self.ne[1..].iter().product();
        self.dtype
            .bytes_for(row)?
            .checked_mul(usize::try_from(rows).ok()?)
    }
}

/// Appends a GGUF string: `u64` byte length, then the UTF-8 bytes.
pub fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Appends the bytes of value `v` (without its type id: [`MetaValue::gguf_type`]). An array
/// is its element type, `u64` length and items.
///
/// Errors: [`EngineError::InvalidInput`] for nested arrays (llama.cpp writes none).
pub fn put_value(buf: &mut Vec<u8>, v: &MetaValue) -> Result<()> {
    match v {
        MetaValue::U8(x) => buf.push(*x),
        MetaValue::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => buf.push(u8::from(*x)),
        MetaValue::String(s) => put_str(buf, s),
        MetaValue::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(items) => {
            let elem = items.elem_type();
            if elem == 9 {
                return Err(EngineError::invalid(
                    "GGUF writer: nested arrays are not written",
                ));
            }
            buf.extend_from_slice(&elem.to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items.iter() {
                put_value(buf, &i)?;
            }
        }
    }
    Ok(())
}

fn pad_len(pos: usize, align: usize) -> usize {
    (align - pos % align) % align
}

/// The bytes of a GGUF v3 header (everything before the data section, padding included)
/// and each tensor's offset relative to the data section.
///
/// Errors: [`EngineError::InvalidInput`] for a tensor whose `ne[0]` is not a whole number
/// of blocks, or mixed-type / nested metadata arrays.
pub fn encode_header(
    metadata: &[(String, MetaValue)],
    tensors: &[GgufTensorSpec],
) -> Result<(Vec<u8>, Vec<usize>)> {
    let mut buf = Vec::new();
    buf.extend_from_slice(b"GGUF");
    buf.extend_from_slice(&3u32.to_le_bytes());
    buf.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    buf.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut buf, k);
        buf.extend_from_slice(&v.gguf_type().to_le_bytes());
        put_value(&mut buf, v)?;
    }
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut off = 0usize;
    for t in tensors {
        let n = t.n_bytes().ok_or_else(|| {
            EngineError::invalid(format!(
                "GGUF writer: tensor `{}` ne {:?} is not a whole number of {} blocks",
                t.name, t.ne, t.dtype
            ))
        })?;
        put_str(&mut buf, &t.name);
        buf.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
        for d in &t.ne {
            buf.extend_from_slice(&d.to_le_bytes());
        }
        buf.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
        buf.extend_from_slice(&(off as u64).to_le_bytes());
        offsets.push(off);
        off += n + pad_len(n, GGUF_DEFAULT_ALIGNMENT);
    }
    buf.resize(buf.len() + pad_len(buf.len(), GGUF_DEFAULT_ALIGNMENT), 0);
    Ok((buf, offsets))
}

/// Writes a GGUF file: header at construction, then tensor data in table order.
pub struct GgufWriter<W: Write> {
    out: W,
    /// Names the destination in errors.
    path: PathBuf,
    tensors: Vec<GgufTensorSpec>,
    /// Index of the tensor being written and bytes of it written so far.
    current: usize,
    written: usize,
    /// Offset of the data section in the file, bytes.
    data_offset: usize,
}

impl<W: Write> std::fmt::Debug for GgufWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .field("current", &self.current)
            .finish()
    }
}

impl GgufWriter<std::io::BufWriter<std::fs::File>> {
    /// Creates `path` (buffered) and writes the header.
    ///
    /// Errors: [`EngineError::Io`] naming `path`; as [`encode_header`].
    pub fn create(
        path: impl AsRef<Path>,
        metadata: &[(String, MetaValue)],
        tensors: Vec<GgufTensorSpec>,
    ) -> Result<Self> {
        let path = path.as_ref();
        let f = std::fs::File::create(path).map_err(|e| EngineError::io(path, e))?;
        GgufWriter::new(
            std::io::BufWriter::with_capacity(1 << 22, f),
            path,
            metadata,
            tensors,
        )
    }
}

impl<W: Write> GgufWriter<W> {
    /// Writes the header to `out`; `path` only names the destination in errors.
    ///
    /// Errors: [`EngineError::Io`]; as [`encode_header`].
    pub fn new(
        mut out: W,
        path: impl Into<PathBuf>,
        metadata: &[(String, MetaValue)],
        tensors: Vec<GgufTensorSpec>,
    ) -> Result<Self> {
        let path = path.into();
        let (header, _) = encode_header(metadata, &tensors)?;
        out.write_all(&header)
            .map_err(|e| EngineError::io(&path, e))?;
        Ok(GgufWriter {
            out,
            path,
            tensors,
            current: 0,
            written: 0,
            data_offset: header.len(),
        })
    }

    /// Offset of the data section from the start of the file, bytes.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// The tensor whose bytes are expected next, if any.
    pub fn next_tensor(&self) -> Option<&GgufTensorSpec> {
        self.tensors.get(self.current)
    }

    /// Appends `bytes` to the current tensor; when the tensor is complete, writes its
    /// alignment padding and moves to the next one. A tensor may arrive in any number of
    /// pieces, but never spill into the next.
    ///
    /// Errors: [`EngineError::InvalidInput`] when more bytes arrive than the tensor (or the
    /// table) holds; [`EngineError::Io`].
    pub fn write_tensor_data(&mut self, bytes: &[u8]) -> Result<()> {
        let t = self.tensors.get(self.current).ok_or_else(|| {
            EngineError::invalid(format!(
                "GGUF writer: {} bytes past the last tensor",
                bytes.len()
            ))
        })?;
        let need = t.n_bytes().unwrap_or(0);
        if self.written + bytes.len() > need {
            return Err(EngineError::invalid(format!(
                "GGUF writer: tensor `{}` holds {need} bytes, got {}",
                t.name,
                self.written + bytes.len()
            )));
        }
        self.out
            .write_all(bytes)
            .map_err(|e| EngineError::io(&self.path, e))?;
        self.written += bytes.len();
        if self.written == need {
            let pad = [0u8; GGUF_DEFAULT_ALIGNMENT];
            self.out
                .write_all(&pad[..pad_len(need, GGUF_DEFAULT_ALIGNMENT)])
                .map_err(|e| EngineError::io(&self.path, e))?;
            self.current += 1;
            self.written = 0;
        }
        Ok(())
    }

    /// Checks that every tensor was written, flushes, and returns the sink.
    ///
    /// Errors: [`EngineError::InvalidInput`] naming the first tensor not (fully) written;
    /// [`EngineError::Io`].
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.tensors.get(self.current) {
            return Err(EngineError::invalid(format!(
                "GGUF writer: tensor `{}` ({} of {} left) was not written",
                t.name,
                self.current,
                self.tensors.len()
            )));
        }
        self.out
            .flush()
            .map_err(|e| EngineError::io(&self.path, e))?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_offsets_are_aligned_and_writer_checks_sizes() -> Result<()> {
        let tensors = vec![
            GgufTensorSpec {
                name: "a".into(),
                ne: vec![3],
                dtype: DType::F32,
            },
            GgufTensorSpec {
                name: "b".into(),
                ne: vec![32, 2],
                dtype: DType::Q8_0,
            },
        ];
        let meta = vec![(
            "general.architecture".to_string(),
            MetaValue::String("x".into()),
        )];
        let (header, offsets) = encode_header(&meta, &tensors)?;
        assert_eq!(header.len() % 32, 0);
        // 12 bytes of F32 padded to 32.
        assert_eq!(offsets, vec![0, 32]);
        let mut w = GgufWriter::new(Vec::new(), "mem", &meta, tensors)?;
        w.write_tensor_data(&[0u8; 12])?;
        assert!(w.write_tensor_data(&[0u8; 69]).is_err());
        w.write_tensor_data(&[1u8; 34])?;
        w.write_tensor_data(&[1u8; 34])?;
        assert!(w.write_tensor_data(&[0u8; 1]).is_err());
        let bytes = w.finish()?;
        assert_eq!(bytes.len(), header.len() + 32 + 96);
        assert_eq!(&bytes[..4], b"GGUF");
        // A writer with a tensor left unwritten refuses to finish.
        let t = vec![GgufTensorSpec {
            name: "c".into(),
            ne: vec![4],
            dtype: DType::F32,
        }];
        let w = GgufWriter::new(Vec::new(), "mem", &meta, t)?;
        assert!(w.finish().is_err());
        Ok(())
    }
}
