//! A tiny GGUF writer (spec: ggml docs/gguf.md), enough to build good and bad files, and
//! byte-patching helpers to break them.

use rwkv_engine::format::{MetaArray, MetaValue};

pub use rwkv_synth::gguf_write::put_str;

/// Like the synth writer's `put_value`, but nested arrays are written too (the reader must
/// bound what llama.cpp's writer never produces).
pub fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::Array(items) => {
            out.extend_from_slice(&items.elem_type().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items.iter() {
                put_value(out, &i);
            }
        }
        scalar => rwkv_synth::gguf_write::put_value(out, scalar).expect("a scalar encodes"),
    }
}

/// An array value of `items`, which must share one type.
pub fn arr(items: Vec<MetaValue>) -> MetaValue {
    MetaValue::Array(MetaArray::from_values(items).expect("array items of one type"))
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
            out.extend_from_slice(&v.gguf_type().to_le_bytes());
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

/// Replaces the first occurrence of `from` by `to` (same length) in `bytes`.
pub fn patch(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len(), "patch must keep the length");
    let at = find(bytes, from)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(from)));
    bytes[at..at + to.len()].copy_from_slice(to);
}
