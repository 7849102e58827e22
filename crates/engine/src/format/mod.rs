//! Model files over a memory map: GGUF, SafeTensors and PyTorch `.pth`; and the files the
//! engine writes about a model: `.rwkvstate` states and the model fingerprint they carry.
//!
//! [`ModelFile::open`] maps the file, parses and validates its header (every offset and
//! size checked against the file length before any slice), and lists its tensors.
//! Tensor bytes are never copied here: a [`TensorView`] borrows them from the mapping.

pub mod fingerprint;
pub mod gguf;
mod meta;
pub mod pth;
pub mod safetensors;
pub mod state_file;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{EngineError, Result};

pub use fingerprint::{model_fingerprint, ModelFingerprint};
pub use meta::{MetaArray, MetaValue};
pub use state_file::{
    read_state_file, read_state_header, write_state_file, StateArrays, StateHeader, StateLayout,
    LAYOUT_PER_LAYER_V1, STATE_HEADER_BYTES, STATE_MAGIC, STATE_VERSION,
};

/// Element / block encodings the engine reads. Block sizes and byte sizes follow ggml
/// (`ggml.c` type traits); the ids are GGUF's `ggml_type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
}

impl DType {
    /// All encodings, in a fixed order.
    pub const ALL: [DType; 14] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
    ];

    /// GGUF `ggml_type` id.
    pub fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q2_K => 10,
            DType::Q3_K => 11,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::IQ4_NL => 20,
            DType::BF16 => 30,
        }
    }

    /// The encoding with GGUF id `id`, if the engine reads it.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// ggml's name for the encoding ("Q4_K", "F16", …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q2_K => "Q2_K",
            DType::Q3_K => "Q3_K",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
            DType::IQ4_NL => "IQ4_NL",
        }
    }

    /// Elements per block (1 for plain floats).
    pub fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::IQ4_NL => {
                32
            }
            DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::IQ4_NL => 18,
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
        }
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number of blocks
    /// (or overflows).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if n % self.block_len() != 0 {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }

    /// Whether this is a block-quantized encoding.
    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which container a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Gguf,
    SafeTensors,
    Pth,
}

impl FileFormat {
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Gguf => "GGUF",
            FileFormat::SafeTensors => "SafeTensors",
            FileFormat::Pth => "PyTorch .pth",
        }
    }
}

/// One tensor of a file: its name as stored, encoding, shape and where its bytes are.
///
/// `shape` is row-major, outermost dimension first (PyTorch order). For GGUF that is
/// `ne` reversed, so a GGUF matrix with `ne = [in, out]` has `shape = [out, in]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Absolute byte offset of the first element in the file.
    pub offset: usize,
    /// Bytes of tensor data (checked: `offset + len <= file length`, and equal to what
    /// `dtype` and `shape` need).
    pub len: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A tensor's bytes, borrowed from the file mapping (no copy).
#[derive(Clone, Copy)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: DType,
    /// Row-major, outermost first.
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

impl std::fmt::Debug for TensorView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorView")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl TensorView<'_> {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A memory-mapped model file with its validated tensor table.
pub struct ModelFile {
    path: PathBuf,
    format: FileFormat,
    map: memmap2::Mmap,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    metadata: Vec<(String, MetaValue)>,
    /// The file behind the mapping, with its length and modification time when it was
    /// opened; `None` for [`ModelFile::from_bytes`].
    opened: Option<Opened>,
}

/// See [`ModelFile::read_into`] and [`ModelFile::check_unchanged`].
struct Opened {
    file: std::fs::File,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

/// Where the weights' bytes come from during an upload: `read` copies a slice of the
/// file's mapping into staging memory, `release` drops the slice's pages afterwards.
/// [`ModelFile`] reads with `pread`; [`InMemory`] copies (bytes that are no file's).
pub trait FileBytes {
    /// Copies `part` (a slice of the file's mapping) into `dst` (of the same length).
    ///
    /// Errors: [`EngineError::Io`] naming the file when it no longer holds those bytes.
    fn read(&self, part: &[u8], dst: &mut [u8]) -> Result<()>;
    /// Drops `part`'s pages from the process's resident set (a hint).
    fn release(&self, part: &[u8]);
}

/// [`FileBytes`] for bytes in memory: plain copies, nothing to release.
pub struct InMemory;

impl FileBytes for InMemory {
    fn read(&self, part: &[u8], dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(part);
        Ok(())
    }
    fn release(&self, _part: &[u8]) {}
}

impl FileBytes for ModelFile {
    fn read(&self, part: &[u8], dst: &mut [u8]) -> Result<()> {
        self.read_into(part, dst)
    }
    fn release(&self, part: &[u8]) {
        ModelFile::release(self, part)
    }
}

impl std::fmt::Debug for ModelFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFile")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("bytes", &self.map.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl ModelFile {
    /// Maps `path` and parses its header. The format is chosen by magic bytes (GGUF,
    /// zip for `.pth`), else SafeTensors. Nothing but the header is read.
    ///
    /// Errors: [`EngineError::Io`] (missing file, directory, permissions),
    /// [`EngineError::Malformed`] (anything wrong with the header), naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| EngineError::io(&path, e))?;
        let meta = file.metadata().map_err(|e| EngineError::io(&path, e))?;
        if meta.is_dir() {
            return Err(EngineError::io(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "is a directory, not a model file",
                ),
            ));
        }
        if meta.len() == 0 {
            return Err(EngineError::Malformed {
                path,
                format: "model",
                what: "the file is empty".into(),
            });
        }
        // SAFETY: the mapping is read-only; a file truncated by another process while
        // mapped would fault on access — the same contract every mmap-based loader
        // (llama.cpp, candle, safetensors) accepts for model files.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| EngineError::io(&path, e))?;
        let mut mf = Self::from_map(path, map)?;
        mf.opened = Some(Opened {
            len: meta.len(),
            modified: meta.modified().ok(),
            file,
        });
        Ok(mf)
    }

    /// Copies `src` — a slice of this mapping — into `dst` by reading the file (`pread`),
    /// not the mapping: the weights' bulk goes to the GPU this way, so a file that another
    /// process cuts short while the model loads (a download or a copy over it) is an error
    /// naming the file, never a SIGBUS that nothing can catch. Slices from elsewhere (and
    /// every slice of [`Self::from_bytes`], or where the OS has no `pread`) are copied.
    ///
    /// Errors: [`EngineError::Io`] when the file now ends before `src` does, or the read
    /// fails.
    pub fn read_into(&self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let base = self.map.as_ptr() as usize;
        let start = src.as_ptr() as usize;
        let inside = start >= base && start + src.len() <= base + self.map.len();
        match &self.opened {
            #[cfg(unix)]
            Some(o) if inside && dst.len() == src.len() => {
                use std::os::unix::fs::FileExt;
                let off = (start - base) as u64;
                o.file.read_exact_at(dst, off).map_err(|e| {
                    let now = o.file.metadata().map(|m| m.len()).unwrap_or(0);
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        self.changed(format!(
                            "it was {} bytes when opened and is {now} now (bytes {off}..{} \
                             are gone)",
                            o.len,
                            off + src.len() as u64
                        ))
                    } else {
                        EngineError::io(&self.path, e)
                    }
                })
            }
            _ => {
                if dst.len() != src.len() {
                    return Err(EngineError::Op {
                        op: "read_into",
                        what: format!("{} bytes into {}", src.len(), dst.len()),
                    });
                }
                dst.copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// Errors ([`EngineError::Io`] naming the file) when the file's length or modification
    /// time differ from when it was opened: its bytes changed under the load, which must
    /// not keep a mix of two files. `Ok` for [`Self::from_bytes`].
    pub fn check_unchanged(&self) -> Result<()> {
        let Some(o) = &self.opened else {
            return Ok(());
        };
        let m = o
            .file
            .metadata()
            .map_err(|e| EngineError::io(&self.path, e))?;
        if m.len() != o.len || m.modified().ok() != o.modified {
            return Err(self.changed(format!(
                "it was {} bytes when opened and is {} now, or was written to",
                o.len,
                m.len()
            )));
        }
        Ok(())
    }

    fn changed(&self, how: String) -> EngineError {
        EngineError::io(
            &self.path,
            std::io::Error::other(format!(
                "the file changed while the model was loading ({how}); load it again once \
                 it is complete"
            )),
        )
    }

    /// Parses a model held in memory, as if it were a file called `name` (tests, fuzzing,
    /// files received over IPC). The bytes are copied once into an anonymous mapping.
    ///
    /// Errors: as [`Self::open`], naming `name`.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: &[u8]) -> Result<Self> {
        let path = name.into();
        if bytes.is_empty() {
            return Err(EngineError::Malformed {
                path,
                format: "model",
                what: "the file is empty".into(),
            });
        }
        let mut anon =
            memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| EngineError::io(&path, e))?;
        anon.copy_from_slice(bytes);
        let map = anon
            .make_read_only()
            .map_err(|e| EngineError::io(&path, e))?;
        Self::from_map(path, map)
    }

    fn from_map(path: PathBuf, map: memmap2::Mmap) -> Result<Self> {
        let (format, tensors, metadata) = if map.starts_with(b"GGUF") {
            let parsed = gguf::parse(&path, &map)?;
            (FileFormat::Gguf, parsed.tensors, parsed.metadata)
        } else if map.starts_with(b"PK\x03\x04") {
            (FileFormat::Pth, pth::parse(&path, &map)?, Vec::new())
        } else {
            let (tensors, metadata) = safetensors::parse(&path, &map)?;
            (FileFormat::SafeTensors, tensors, metadata)
        };
        let mut by_name = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if by_name.insert(t.name.clone(), i).is_some() {
                return Err(EngineError::Malformed {
                    path,
                    format: format.name(),
                    what: format!("tensor `{}` appears twice", t.name),
                });
            }
        }
        Ok(ModelFile {
            path,
            format,
            map,
            tensors,
            by_name,
            metadata,
            opened: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// File length in bytes.
    pub fn file_len(&self) -> usize {
        self.map.len()
    }

    /// The whole mapping (for hashing or fuzzing; tensor access goes through [`Self::tensor`]).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// GGUF key/value metadata in file order (SafeTensors `__metadata__` as strings;
    /// empty for `.pth`).
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// Drops the pages of `bytes` (a slice of this mapping, e.g. a tensor already copied
    /// to the GPU) from the process's resident set, so loading a model never keeps it in
    /// host memory: the pages stay in the OS page cache and refault from it if read again.
    /// Whole pages inside the slice only; a no-op for slices from elsewhere or where the OS
    /// refuses.
    pub fn release(&self, bytes: &[u8]) {
        const PAGE: usize = 4096;
        let base = self.map.as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        if start < base || start + bytes.len() > base + self.map.len() {
            return;
        }
        let off = (start - base).next_multiple_of(PAGE);
        let end = (start - base + bytes.len()) / PAGE * PAGE;
        if end > off {
            // SAFETY: the mapping is a read-only file mapping that nothing writes: dropping
            // its pages loses nothing (they refault from the file); `Mmap` never hands out
            // mutable views, and the range lies inside it.
            let _ = unsafe {
                self.map
                    .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, off, end - off)
            };
        }
    }

    /// Metadata value for `key`.
    pub fn meta(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether a tensor named `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The tensor `name` as a view into the mapping.
    ///
    /// Errors: [`EngineError::MissingTensor`] naming file and tensor.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let i = *self
            .by_name
            .get(name)
            .ok_or_else(|| EngineError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        let t = &self.tensors[i];
        // Bounds were checked when the table was parsed; `get` keeps this panic-free anyway.
        let bytes = self
            .map
            .get(t.offset..t.offset.saturating_add(t.len))
            .ok_or_else(|| EngineError::Malformed {
                path: self.path.clone(),
                format: self.format.name(),
                what: format!("tensor `{name}` lies past the end of the file"),
            })?;
        Ok(TensorView {
            name: &t.name,
            dtype: t.dtype,
            shape: &t.shape,
            bytes,
        })
    }
}
