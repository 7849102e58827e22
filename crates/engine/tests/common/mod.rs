//! Shared helpers of the format tests: fixture paths, temp files, a tiny GGUF writer.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rwkv_engine::format::MetaValue;
use rwkv_engine::EngineError;

/// `../shared/fixtures` beside the checkout.
pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
}

/// `../shared/models` beside the checkout.
pub fn models() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models"
    ))
}

/// A fresh, empty scratch folder for one test (under the target dir's tmp or $TMPDIR);
/// never inside the source tree.
pub fn scratch(test: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO_TARGET_TMPDIR").map(PathBuf::from))
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("rwkv-format-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The path an error names, if it names one.
pub fn err_path(e: &EngineError) -> Option<&Path> {
    match e {
        EngineError::Io { path, .. }
        | EngineError::Malformed { path, .. }
        | EngineError::NotRwkv7 { path, .. }
        | EngineError::MissingTensor { path, .. }
        | EngineError::Shape { path, .. }
        | EngineError::UnsupportedType { path, .. } => Some(path),
        _ => None,
    }
}

/// Asserts `e` is `Malformed` naming `path`, and that its message mentions `needle`.
#[track_caller]
pub fn assert_malformed(e: &EngineError, path: &Path, needle: &str) {
    match e {
        EngineError::Malformed { path: p, .. } => {
            assert_eq!(p, path, "error names the wrong file: {e}");
            let msg = e.to_string();
            assert!(
                msg.to_lowercase().contains(&needle.to_lowercase()),
                "message {msg:?} does not mention {needle:?}"
            );
        }
        other => panic!(
            "expected Malformed naming {}, got {other:?}",
            path.display()
        ),
    }
}

// ---- a tiny GGUF writer (spec: ggml docs/gguf.md), enough to build good and bad files ----

pub fn meta_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(items) => {
            let et = items.first().map_or(0, meta_type);
            out.extend_from_slice(&et.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
    }
}

/// One tensor for [`Gguf`]: name, `ne` (GGUF order, innermost first), ggml type id, bytes.
#[derive(Clone)]
pub struct GgufTensor {
    pub name: String,
    pub ne: Vec<u64>,
    pub ty: u32,
    pub data: Vec<u8>,
}

impl GgufTensor {
    /// An F32 tensor with `ne`, values 0, 1, 2, …
    pub fn f32(name: &str, ne: &[u64]) -> Self {
        let n: u64 = ne.iter().product();
        let data = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        GgufTensor {
            name: name.into(),
            ne: ne.to_vec(),
            ty: 0,
            data,
        }
    }
}

/// A GGUF file to write.
#[derive(Clone)]
pub struct Gguf {
    pub version: u32,
    pub kv: Vec<(String, MetaValue)>,
    pub tensors: Vec<GgufTensor>,
    /// Alignment used for the layout (write `general.alignment` in `kv` to declare it).
    pub alignment: usize,
}

impl Gguf {
    pub fn new() -> Self {
        Gguf {
            version: 3,
            kv: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
        }
    }

    pub fn kv(mut self, k: &str, v: MetaValue) -> Self {
        self.kv.push((k.into(), v));
        self
    }

    pub fn tensor(mut self, t: GgufTensor) -> Self {
        self.tensors.push(t);
        self
    }

    /// The file's bytes; also returns the absolute offset of each tensor's data.
    pub fn build(&self) -> (Vec<u8>, Vec<usize>) {
        let a = self.alignment;
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            out.extend_from_slice(&meta_type(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut rel = 0usize;
        let mut rels = Vec::new();
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_le_bytes());
            out.extend_from_slice(&(rel as u64).to_le_bytes());
            rels.push(rel);
            rel = (rel + t.data.len()).next_multiple_of(a);
        }
        let data_start = out.len().next_multiple_of(a);
        out.resize(data_start, 0);
        let mut abs = Vec::new();
        for (t, r) in self.tensors.iter().zip(&rels) {
            out.resize(data_start + r, 0);
            abs.push(out.len());
            out.extend_from_slice(&t.data);
        }
        out.resize(out.len().next_multiple_of(a), 0);
        (out, abs)
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.build().0
    }
}

/// Position of the first occurrence of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// In a GGUF's bytes, the position just after tensor `name`'s (length-prefixed) name in
/// the tensor-info table: `u32 n_dims` starts there.
pub fn gguf_tensor_info_at(bytes: &[u8], name: &str) -> usize {
    let mut pat = (name.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(name.as_bytes());
    find(bytes, &pat).expect("tensor name in header") + pat.len()
}

/// Plain-float bytes to f32, for comparing files in tests (F32/F16/BF16 only; block types
/// go through `rwkv_engine::quant::dequantize`).
pub fn decode_float(dtype: rwkv_engine::DType, bytes: &[u8]) -> Vec<f32> {
    use rwkv_engine::DType;
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => panic!("decode_float: {other} is a block type"),
    }
}

/// Replaces the first occurrence of `from` by `to` (same length) in `bytes`.
pub fn patch(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len(), "patch must keep the length");
    let at = find(bytes, from)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(from)));
    bytes[at..at + to.len()].copy_from_slice(to);
}
