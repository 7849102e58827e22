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

use super::{DType, TensorInfo};
use crate::error::{EngineError, Result};

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

/// Index of a value in the machine's arena.
type Id = usize;

/// Callables and classes the machine knows (`GLOBAL module name`).
#[derive(Debug, Clone, PartialEq)]
enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildParameter,
    /// `torch.<T>Storage`, with the element type if the engine reads it.
    StorageType(&'static str, Option<DType>),
}

/// A pickle value.
#[derive(Debug, Clone)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float,
    Str(String),
    Bytes,
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Global(Global),
    /// A persistent storage reference.
    Storage {
        ty: &'static str,
        dtype: Option<DType>,
        key: String,
        numel: u64,
    },
    /// `_rebuild_tensor_v2(storage, offset, size, stride, ..)`.
    Tensor {
        storage: Id,
        offset: u64,
        shape: Vec<u64>,
        stride: Vec<u64>,
    },
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float => "float",
            Value::Str(_) => "str",
            Value::Bytes => "bytes",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Global(_) => "class",
            Value::Storage { .. } => "storage",
            Value::Tensor { .. } => "tensor",
        }
    }
}

/// The pickle machine: an arena of values, a stack of ids, a mark stack and a memo.
struct Vm<'a> {
    path: &'a Path,
    code: &'a [u8],
    pos: usize,
    /// Position of the opcode being run (for errors).
    op_at: usize,
    arena: Vec<Value>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
}

impl<'a> Vm<'a> {
    fn new(path: &'a Path, code: &'a [u8]) -> Self {
        Vm {
            path,
            code,
            pos: 0,
            op_at: 0,
            arena: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
        }
    }

    fn err(&self, what: impl std::fmt::Display) -> EngineError {
        malformed(
            self.path,
            format!("data.pkl at byte {}: {what}", self.op_at),
        )
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.code.len());
        match end {
            Some(end) => {
                let s = &self.code[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.err(format_args!(
                "operand of {n} bytes runs past the end of the pickle (truncated?)"
            ))),
        }
    }

    fn le(&mut self, n: usize) -> Result<u64> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
    }

    fn line(&mut self) -> Result<&'a str> {
        let rest = self.code.get(self.pos..).unwrap_or_default();
        let n = rest
            .iter()
            .take(256)
            .position(|&b| b == b'\n')
            .ok_or_else(|| self.err("GLOBAL name without a newline within 256 bytes"))?;
        let s =
            std::str::from_utf8(&rest[..n]).map_err(|_| self.err("GLOBAL name is not UTF-8"))?;
        self.pos += n + 1;
        Ok(s)
    }

    fn push(&mut self, v: Value) {
        self.arena.push(v);
        self.stack.push(self.arena.len() - 1);
    }

    fn pop(&mut self) -> Result<Id> {
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    fn top(&self) -> Result<Id> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    /// Pops everything above the last MARK.
    fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.err("no MARK on the stack"))?;
        if m > self.stack.len() {
            return Err(self.err("MARK above the top of the stack"));
        }
        Ok(self.stack.split_off(m))
    }

    fn int(&self, id: Id, what: &str) -> Result<i64> {
        match self.arena.get(id) {
            Some(Value::Int(i)) => Ok(*i),
            Some(Value::Bool(b)) => Ok(i64::from(*b)),
            Some(v) => Err(self.err(format_args!("{what} is a {}, not an int", v.kind()))),
            None => Err(self.err("dangling value")),
        }
    }

    fn str(&self, id: Id, what: &str) -> Result<&str> {
        match self.arena.get(id) {
            Some(Value::Str(s)) => Ok(s),
            Some(v) => Err(self.err(format_args!("{what} is a {}, not a str", v.kind()))),
            None => Err(self.err("dangling value")),
        }
    }

    fn ints(&self, id: Id, what: &str) -> Result<Vec<u64>> {
        let items = match self.arena.get(id) {
            Some(Value::Tuple(t)) | Some(Value::List(t)) => t,
            Some(v) => return Err(self.err(format_args!("{what} is a {}, not a tuple", v.kind()))),
            None => return Err(self.err("dangling value")),
        };
        if items.len() > MAX_DIMS {
            return Err(self.err(format_args!(
                "{what} has {} dimensions (limit {MAX_DIMS})",
                items.len()
            )));
        }
        items
            .iter()
            .map(|&i| {
                let v = self.int(i, what)?;
                u64::try_from(v)
                    .map_err(|_| self.err(format_args!("{what} holds a negative value {v}")))
            })
            .collect()
    }

    fn global(module: &str, name: &str) -> Option<Global> {
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

    fn push_global(&mut self, module: &str, name: &str) -> Result<()> {
        match Self::global(module, name) {
            Some(g) => {
                self.push(Value::Global(g));
                Ok(())
            }
            None => Err(self.err(format_args!(
                "global `{module}.{name}` is not one torch.save writes for a dict of tensors (not loaded)"
            ))),
        }
    }

    /// `callable(*args)` for the allow-listed callables. Argument tuples are checked for
    /// their length before anything is copied (a hostile pickle could call with huge ones).
    fn call(&mut self, f: Id, args: Id) -> Result<Value> {
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
                if !matches!(self.arena.get(storage), Some(Value::Storage { .. })) {
                    return Err(self.err("_rebuild_tensor_v2: first argument is not a storage"));
                }
                let offset = self.int(args[1], "storage offset")?;
                let offset = u64::try_from(offset)
                    .map_err(|_| self.err(format_args!("negative storage offset {offset}")))?;
                let shape = self.ints(args[2], "size")?;
                let stride = self.ints(args[3], "stride")?;
                Ok(Value::Tensor {
                    storage,
                    offset,
                    shape,
                    stride,
                })
            }
            Some(Value::Global(Global::RebuildParameter)) => {
                // (data, requires_grad, backward_hooks): a Parameter is its tensor here.
                match args.first().and_then(|&a| self.arena.get(a)) {
                    Some(t @ Value::Tensor { .. }) if args.len() <= 4 => Ok(t.clone()),
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
    fn persistent_load(&mut self, pid: Id) -> Result<Value> {
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
        Ok(Value::Storage {
            ty,
            dtype,
            key,
            numel,
        })
    }

    /// Runs the pickle to its STOP and returns the result's id.
    fn run(&mut self) -> Result<Id> {
        while self.pos < self.code.len() {
            self.op_at = self.pos;
            let op = self.code[self.pos];
            self.pos += 1;
            match op {
                0x80 => {
                    // PROTO
                    let v = self.le(1)?;
                    if !(2..=5).contains(&v) {
                        return Err(self.err(format_args!("pickle protocol {v} (2 to 5 are read)")));
                    }
                }
                0x95 => {
                    // FRAME: a length hint only
                    self.le(8)?;
                }
                b'.' => return self.pop(), // STOP
                b'(' => self.marks.push(self.stack.len()),
                b')' => self.push(Value::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err(self.err("stack underflow"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.push(Value::Tuple(items));
                }
                b']' => self.push(Value::List(Vec::new())),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Value::List(items));
                }
                b'a' => {
                    let v = self.pop()?;
                    let l = self.top()?;
                    self.extend_list(l, vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let l = self.top()?;
                    self.extend_list(l, items)?;
                }
                b'}' => self.push(Value::Dict(Vec::new())),
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    self.push(Value::Dict(pairs));
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?;
                    self.extend_dict(d, vec![(k, v)])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    let d = self.top()?;
                    self.extend_dict(d, pairs)?;
                }
                b'N' => self.push(Value::None),
                0x88 => self.push(Value::Bool(true)),
                0x89 => self.push(Value::Bool(false)),
                b'J' => {
                    let v = self.le(4)? as u32 as i32;
                    self.push(Value::Int(v.into()));
                }
                b'K' => {
                    let v = self.le(1)?;
                    self.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = self.le(2)?;
                    self.push(Value::Int(v as i64));
                }
                0x8a => {
                    // LONG1: n bytes of little-endian two's complement
                    let n = self.le(1)? as usize;
                    if n > 8 {
                        return Err(
                            self.err(format_args!("LONG1 of {n} bytes does not fit 64 bits"))
                        );
                    }
                    let raw = self.le(n)?;
                    let v = if n == 0 {
                        0
                    } else {
                        let shift = 64 - 8 * n as u32;
                        ((raw << shift) as i64) >> shift
                    };
                    self.push(Value::Int(v));
                }
                b'G' => {
                    // BINFLOAT: no tensor metadata needs the value.
                    self.take(8)?;
                    self.push(Value::Float);
                }
                b'X' | 0x8c | 0x8d | b'T' | b'U' => {
                    let n = match op {
                        0x8c | b'U' => self.le(1)?,
                        0x8d => self.le(8)?,
                        _ => self.le(4)?,
                    };
                    let n = usize::try_from(n).map_err(|_| self.err("string length overflows"))?;
                    let b = self.take(n)?;
                    let s = if matches!(op, b'T' | b'U') {
                        // Python 2 str: bytes; torch never writes these, read as Latin-1.
                        b.iter().map(|&c| char::from(c)).collect()
                    } else {
                        std::str::from_utf8(b)
                            .map_err(|_| self.err("string is not UTF-8"))?
                            .to_owned()
                    };
                    self.push(Value::Str(s));
                }
                b'C' | b'B' | 0x8e => {
                    let n = match op {
                        b'C' => self.le(1)?,
                        b'B' => self.le(4)?,
                        _ => self.le(8)?,
                    };
                    let n = usize::try_from(n).map_err(|_| self.err("bytes length overflows"))?;
                    self.take(n)?;
                    self.push(Value::Bytes);
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push_global(module, name)?;
                }
                0x93 => {
                    // STACK_GLOBAL
                    let n = self.pop()?;
                    let m = self.pop()?;
                    let (m, n) = (
                        self.str(m, "module")?.to_owned(),
                        self.str(n, "name")?.to_owned(),
                    );
                    self.push_global(&m, &n)?;
                }
                b'R' | 0x81 => {
                    // REDUCE (callable, args) / NEWOBJ (cls, args)
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let v = self.call(f, args)?;
                    self.push(v);
                }
                b'b' => {
                    // BUILD: only an OrderedDict's state (state_dict()'s `_metadata`),
                    // which the weights do not need.
                    let _state = self.pop()?;
                    let obj = self.top()?;
                    if !matches!(self.arena.get(obj), Some(Value::Dict(_))) {
                        return Err(self.err("BUILD on something other than a dict"));
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent_load(pid)?;
                    self.push(v);
                }
                b'q' | b'r' | 0x94 => {
                    let idx = match op {
                        b'q' => self.le(1)?,
                        b'r' => self.le(4)?,
                        _ => self.memo.len() as u64,
                    };
                    let top = self.top()?;
                    self.memo.insert(idx, top);
                }
                b'h' | b'j' => {
                    let idx = if op == b'h' { self.le(1)? } else { self.le(4)? };
                    let id = *self.memo.get(&idx).ok_or_else(|| {
                        self.err(format_args!("memo entry {idx} was never stored"))
                    })?;
                    self.stack.push(id);
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(t);
                }
                other => {
                    return Err(self.err(format_args!(
                        "pickle opcode 0x{other:02x} ({:?}) is not one torch.save writes",
                        char::from(other)
                    )))
                }
            }
        }
        Err(malformed(
            self.path,
            "data.pkl ends without STOP (truncated?)",
        ))
    }

    fn pairs(&self, items: Vec<Id>) -> Result<Vec<(Id, Id)>> {
        if items.len() % 2 != 0 {
            return Err(self.err("odd number of items for a dict"));
        }
        Ok(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
    }

    fn extend_list(&mut self, l: Id, items: Vec<Id>) -> Result<()> {
        let kind = self.arena.get(l).map(Value::kind);
        match self.arena.get_mut(l) {
            Some(Value::List(v)) => {
                v.extend(items);
                Ok(())
            }
            _ => Err(self.err(format_args!("APPEND to a {}", kind.unwrap_or("nothing")))),
        }
    }

    fn extend_dict(&mut self, d: Id, pairs: Vec<(Id, Id)>) -> Result<()> {
        let kind = self.arena.get(d).map(Value::kind);
        match self.arena.get_mut(d) {
            Some(Value::Dict(v)) => {
                v.extend(pairs);
                Ok(())
            }
            _ => Err(self.err(format_args!("SETITEM on a {}", kind.unwrap_or("nothing")))),
        }
    }

    /// Turns the root dict into tensor infos, checking every tensor against its storage.
    fn tensors(
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
        let mut out = Vec::with_capacity(pairs.len());
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
                Some(Value::Tensor {
                    storage,
                    offset,
                    shape,
                    stride,
                }) => (*storage, *offset, shape, stride),
                Some(other) => {
                    return Err(bad(format!("value is a {}, not a tensor", other.kind())))
                }
                None => return Err(bad("dangling value".into())),
            };
            let Some(Value::Storage {
                ty,
                dtype,
                key,
                numel: storage_numel,
            }) = self.arena.get(storage)
            else {
                return Err(bad("no storage".into()));
            };
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
