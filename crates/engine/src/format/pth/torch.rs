//! What torch's pickles mean: the allow-listed globals (`OrderedDict`,
//! `_rebuild_tensor_v2`, `_rebuild_parameter`, `torch.*Storage`), their calls, the
//! persistent storage references, and the final dict → [`TensorInfo`] list, every tensor
//! checked against its storage record in the zip.

use std::collections::HashMap;

use super::pickle::{Global, Id, Storage, Tensor, Value, Vm};
use super::{malformed, Entry};
use crate::error::{EngineError, Result};
use crate::format::{DType, TensorInfo};

impl Vm<'_> {
    pub(super) fn global(module: &str, name: &str) -> Option<Global> {
        let storage = |ty: &'static str, dtype| Some(Global::StorageType(ty, dtype));
        match (module, name) {
            ("collections", "OrderedDict") => Some(Global::OrderedDict),
            ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensorV2),
            ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
            ("torch", "BFloat16Storage") => storage("torch.BFloat16Storage", Some(DType::BF16)),
            ("torch", "HalfStorage") => storage("torch.HalfStorage", Some(DType::F16)),
            ("torch", "FloatStorage") => storage("torch.FloatStorage", Some(DType::F32)),
            ("torch", "DoubleStorage") => storage("torch.DoubleStorage", None),
            ("torch", "LongStorage") => storage("torch.LongStorage", None),
            ("torch", "IntStorage") => storage("torch.IntStorage", None),
            ("torch", "ShortStorage") => storage("torch.ShortStorage", None),
            ("torch", "CharStorage") => storage("torch.CharStorage", None),
            ("torch", "ByteStorage") => storage("torch.ByteStorage", None),
            ("torch", "BoolStorage") => storage("torch.BoolStorage", None),
            _ => None,
        }
    }

    pub(super) fn push_global(&mut self, module: &str, name: &str) -> Result<()> {
        match Self::global(module, name) {
            Some(g) => self.push(Value::Global(g)),
            None => Err(self.err(format_args!(
                "global `{module}.{name}` is not one torch.save writes for a dict of tensors (not loaded)"
            ))),
        }
    }

    /// `callable(*args)` for the allow-listed callables. Argument tuples are checked for
    /// their length before anything is copied (a hostile pickle could call with huge ones).
    pub(super) fn call(&mut self, f: Id, args: Id) -> Result<Value> {
        let args: &[Id] = match self.arena.get(args) {
            Some(Value::Tuple(a)) => a,
            Some(v) => {
                return Err(self.err(format_args!(
                    "REDUCE arguments are a {}, not a tuple",
                    v.kind()
                )))
            }
            None => return Err(self.err("dangling value")),
        };
        match self.arena.get(f) {
            Some(Value::Global(Global::OrderedDict)) => {
                if !args.is_empty() {
                    return Err(self.err("OrderedDict(...) with arguments is not supported"));
                }
                Ok(Value::Dict(Vec::new()))
            }
            Some(Value::Global(Global::RebuildTensorV2)) => {
                // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
                if !(6..=7).contains(&args.len()) {
                    return Err(self.err(format_args!(
                        "_rebuild_tensor_v2 takes 6 or 7 arguments, got {}",
                        args.len()
                    )));
                }
                let storage = args[0];
                if !matches!(self.arena.get(storage), Some(Value::Storage(_))) {
                    return Err(self.err("_rebuild_tensor_v2: first argument is not a storage"));
                }
                let offset = self.int(args[1], "storage offset")?;
                let offset = u64::try_from(offset)
                    .map_err(|_| self.err(format_args!("negative storage offset {offset}")))?;
                let shape = self.ints(args[2], "size")?;
                let stride = self.ints(args[3], "stride")?;
                Ok(Value::Tensor(Box::new(Tensor {
                    storage,
                    offset,
                    shape,
                    stride,
                })))
            }
            Some(Value::Global(Global::RebuildParameter)) => {
                // (data, requires_grad, backward_hooks): a Parameter is its tensor here.
                match args.first().and_then(|&a| self.arena.get(a)) {
                    Some(t @ Value::Tensor(_)) if args.len() <= 4 => Ok(t.clone()),
                    _ => Err(self.err("_rebuild_parameter: first argument is not a tensor")),
                }
            }
            Some(Value::Global(Global::StorageType(ty, _))) => {
                Err(self.err(format_args!("calling `{ty}` directly is not supported")))
            }
            Some(v) => Err(self.err(format_args!(
                "REDUCE on a {}, which is not callable",
                v.kind()
            ))),
            None => Err(self.err("dangling value")),
        }
    }

    /// `BINPERSID`: torch's `('storage', storage_type, key, location, numel)`.
    pub(super) fn persistent_load(&mut self, pid: Id) -> Result<Value> {
        let items: &[Id] = match self.arena.get(pid) {
            Some(Value::Tuple(t)) => t,
            Some(v) => {
                return Err(self.err(format_args!("persistent id is a {}, not a tuple", v.kind())))
            }
            None => return Err(self.err("dangling value")),
        };
        if items.len() != 5 || self.str(items[0], "persistent id tag")? != "storage" {
            return Err(self.err("persistent id is not ('storage', type, key, location, numel)"));
        }
        let (ty, dtype) = match self.arena.get(items[1]) {
            Some(Value::Global(Global::StorageType(ty, dtype))) => (*ty, *dtype),
            _ => return Err(self.err("persistent id: second item is not a torch storage type")),
        };
        let (key_id, loc_id, numel_id) = (items[2], items[3], items[4]);
        let key = self.str(key_id, "storage key")?.to_string();
        if key.is_empty() || key.len() > 64 || key.contains(['/', '\\']) || key.contains("..") {
            return Err(self.err(format_args!(
                "storage key {key:?} is not a plain record name"
            )));
        }
        let _location = self.str(loc_id, "storage location")?;
        let numel = self.int(numel_id, "storage numel")?;
        let numel = u64::try_from(numel)
            .map_err(|_| self.err(format_args!("negative storage numel {numel}")))?;
        Ok(Value::Storage(Box::new(Storage {
            ty,
            dtype,
            key,
            numel,
        })))
    }

    /// Turns the root dict into tensor infos, checking every tensor against its storage.
    pub(super) fn tensors(
        &self,
        root: Id,
        prefix: &str,
        entries: &HashMap<String, Entry>,
        file_len: usize,
    ) -> Result<Vec<TensorInfo>> {
        let path = self.path;
        let pairs = match self.arena.get(root) {
            Some(Value::Dict(p)) => p,
            Some(v) => {
                return Err(malformed(
                    path,
                    format!("data.pkl holds a {}, not a dict of tensors", v.kind()),
                ))
            }
            None => return Err(malformed(path, "data.pkl result is missing")),
        };
        // Pairs are bounded by MAX_ITEMS; reserving can still fail.
        let mut out = Vec::new();
        out.try_reserve_exact(pairs.len())
            .map_err(|_| malformed(path, format!("no memory for {} tensors", pairs.len())))?;
        for &(k, v) in pairs {
            let name = match self.arena.get(k) {
                Some(Value::Str(s)) => s.clone(),
                Some(other) => {
                    return Err(malformed(
                        path,
                        format!("dict key is a {}, not a str", other.kind()),
                    ))
                }
                None => return Err(malformed(path, "dangling dict key")),
            };
            let bad = |what: String| malformed(path, format!("tensor `{name}`: {what}"));
            let (storage, offset, shape, stride) = match self.arena.get(v) {
                Some(Value::Tensor(t)) => (t.storage, t.offset, &t.shape, &t.stride),
                Some(other) => {
                    return Err(bad(format!("value is a {}, not a tensor", other.kind())))
                }
                None => return Err(bad("dangling value".into())),
            };
            let Some(Value::Storage(st)) = self.arena.get(storage) else {
                return Err(bad("no storage".into()));
            };
            let Storage {
                ty,
                dtype,
                key,
                numel: storage_numel,
            } = &**st;
            let Some(dtype) = *dtype else {
                return Err(EngineError::UnsupportedType {
                    path: path.to_path_buf(),
                    tensor: name,
                    dtype: (*ty).to_string(),
                });
            };
            // Contiguous (row-major) only; a dimension of size 1 may have any stride.
            if stride.len() != shape.len() {
                return Err(bad(format!(
                    "size {shape:?} and stride {stride:?} differ in rank"
                )));
            }
            let mut expect: u64 = 1;
            for (&d, &s) in shape.iter().zip(stride).rev() {
                if d != 1 && s != expect {
                    return Err(bad(format!(
                        "stride {stride:?} is not contiguous for size {shape:?} (save a .contiguous() copy)"
                    )));
                }
                expect = expect
                    .checked_mul(d)
                    .ok_or_else(|| bad(format!("size {shape:?} overflows")))?;
            }
            let numel = expect;
            let es = dtype.block_bytes() as u64;
            let record = format!("{prefix}data/{key}");
            let entry = entries
                .get(&record)
                .ok_or_else(|| bad(format!("storage record `{record}` is missing from the zip")))?;
            let storage_bytes = storage_numel.checked_mul(es);
            if storage_bytes.is_none_or(|b| b > entry.len as u64) {
                return Err(bad(format!(
                    "storage `{record}` holds {} bytes, fewer than its {storage_numel} elements of {dtype}",
                    entry.len
                )));
            }
            let end = offset.checked_add(numel);
            if end.is_none_or(|e| e > *storage_numel) {
                return Err(bad(format!(
                    "elements {offset}..{offset}+{numel} lie outside storage `{record}` of {storage_numel} elements"
                )));
            }
            // offset + numel <= storage_numel and storage_numel * es <= entry.len: exact.
            let start = entry.start as u64 + offset * es;
            let len = numel * es;
            if start + len > file_len as u64 {
                return Err(bad("data past the end of the file".into()));
            }
            out.push(TensorInfo {
                name,
                dtype,
                shape: shape.iter().map(|&d| d as usize).collect(),
                offset: start as usize,
                len: len as usize,
            });
        }
        Ok(out)
    }
}
