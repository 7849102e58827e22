//! The bounded pickle machine that runs `data.pkl`: an arena of values, a stack of ids, a
//! mark stack and a memo; the opcodes torch's pickles of state dicts use (protocols 2–5),
//! nothing else. What the torch-specific callables do lives in `torch.rs`.

use std::collections::HashMap;
use std::path::Path;

use super::{malformed, MAX_DIMS, MAX_ITEMS, MAX_MARKS, MAX_MEMO, MAX_STACK, MAX_VALUES};
use crate::error::{EngineError, Result};
use crate::format::DType;

/// Index of a value in the machine's arena.
pub(super) type Id = usize;

/// Callables and classes the machine knows (`GLOBAL module name`).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildParameter,
    /// `torch.<T>Storage`, with the element type if the engine reads it.
    StorageType(&'static str, Option<DType>),
}

/// A persistent storage reference (`BINPERSID`).
#[derive(Debug, Clone)]
pub(super) struct Storage {
    pub(super) ty: &'static str,
    pub(super) dtype: Option<DType>,
    pub(super) key: String,
    pub(super) numel: u64,
}

/// `_rebuild_tensor_v2(storage, offset, size, stride, ..)`.
#[derive(Debug, Clone)]
pub(super) struct Tensor {
    pub(super) storage: Id,
    pub(super) offset: u64,
    pub(super) shape: Vec<u64>,
    pub(super) stride: Vec<u64>,
}

/// A pickle value: 32 bytes (the two large variants are boxed; the arena holds up to
/// [`MAX_VALUES`] of them).
#[derive(Debug, Clone)]
pub(super) enum Value {
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
    Storage(Box<Storage>),
    Tensor(Box<Tensor>),
}

const _: () = assert!(std::mem::size_of::<Value>() == 32);

impl Value {
    pub(super) fn kind(&self) -> &'static str {
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
            Value::Storage(_) => "storage",
            Value::Tensor(_) => "tensor",
        }
    }
}

/// The pickle machine: an arena of values, a stack of ids, a mark stack and a memo.
pub(super) struct Vm<'a> {
    pub(super) path: &'a Path,
    pub(super) code: &'a [u8],
    pub(super) pos: usize,
    /// Position of the opcode being run (for errors).
    pub(super) op_at: usize,
    pub(super) arena: Vec<Value>,
    pub(super) stack: Vec<Id>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: HashMap<u64, Id>,
    /// Items in all containers so far (capped at [`MAX_ITEMS`]).
    pub(super) items: usize,
}

impl<'a> Vm<'a> {
    pub(super) fn new(path: &'a Path, code: &'a [u8]) -> Self {
        Vm {
            path,
            code,
            pos: 0,
            op_at: 0,
            arena: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            items: 0,
        }
    }

    pub(super) fn err(&self, what: impl std::fmt::Display) -> EngineError {
        malformed(
            self.path,
            format!("data.pkl at byte {}: {what}", self.op_at),
        )
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
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

    pub(super) fn le(&mut self, n: usize) -> Result<u64> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
    }

    pub(super) fn line(&mut self) -> Result<&'a str> {
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

    /// A new value on the stack; past [`MAX_VALUES`] values or [`MAX_STACK`] entries an
    /// error naming the cap. Container values count their items ([`MAX_ITEMS`]).
    pub(super) fn push(&mut self, v: Value) -> Result<()> {
        if self.arena.len() >= MAX_VALUES {
            return Err(self.err(format_args!(
                "more than {MAX_VALUES} values (the limit for a state dict's pickle)"
            )));
        }
        let n = match &v {
            Value::Tuple(t) | Value::List(t) => t.len(),
            Value::Dict(d) => 2 * d.len(),
            _ => 0,
        };
        self.count_items(n)?;
        self.arena.push(v);
        self.push_id(self.arena.len() - 1)
    }

    /// An existing value on the stack again (`BINGET`, `DUP`), within [`MAX_STACK`].
    pub(super) fn push_id(&mut self, id: Id) -> Result<()> {
        if self.stack.len() >= MAX_STACK {
            return Err(self.err(format_args!(
                "the stack grows past {MAX_STACK} entries (the limit for a state dict's pickle)"
            )));
        }
        self.stack.push(id);
        Ok(())
    }

    /// Counts `n` more container items against [`MAX_ITEMS`].
    fn count_items(&mut self, n: usize) -> Result<()> {
        self.items = self.items.saturating_add(n);
        if self.items > MAX_ITEMS {
            return Err(self.err(format_args!(
                "containers hold more than {MAX_ITEMS} items (the limit for a state dict's pickle)"
            )));
        }
        Ok(())
    }

    pub(super) fn pop(&mut self) -> Result<Id> {
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    pub(super) fn top(&self) -> Result<Id> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    /// Pops everything above the last MARK.
    pub(super) fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.err("no MARK on the stack"))?;
        if m > self.stack.len() {
            return Err(self.err("MARK above the top of the stack"));
        }
        Ok(self.stack.split_off(m))
    }

    pub(super) fn int(&self, id: Id, what: &str) -> Result<i64> {
        match self.arena.get(id) {
            Some(Value::Int(i)) => Ok(*i),
            Some(Value::Bool(b)) => Ok(i64::from(*b)),
            Some(v) => Err(self.err(format_args!("{what} is a {}, not an int", v.kind()))),
            None => Err(self.err("dangling value")),
        }
    }

    pub(super) fn str(&self, id: Id, what: &str) -> Result<&str> {
        match self.arena.get(id) {
            Some(Value::Str(s)) => Ok(s),
            Some(v) => Err(self.err(format_args!("{what} is a {}, not a str", v.kind()))),
            None => Err(self.err("dangling value")),
        }
    }

    pub(super) fn ints(&self, id: Id, what: &str) -> Result<Vec<u64>> {
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

    /// Runs the pickle to its STOP and returns the result's id.
    pub(super) fn run(&mut self) -> Result<Id> {
        while self.pos < self.code.len() {
            self.op_at = self.pos;
            let op = self.code[self.pos];
            self.pos += 1;
            if op == b'.' {
                return self.pop(); // STOP
            }
            if !(self.structure_op(op)? || self.value_op(op)? || self.object_op(op)?) {
                return Err(self.err(format_args!(
                    "pickle opcode 0x{op:02x} ({:?}) is not one torch.save writes",
                    char::from(op)
                )));
            }
        }
        Err(malformed(
            self.path,
            "data.pkl ends without STOP (truncated?)",
        ))
    }

    /// Runs `op` if it is a protocol, stack, container or memo opcode (PROTO, FRAME, MARK,
    /// tuples, lists, dicts, PUT / GET, POP, DUP);
    /// false when `op` is not one of them.
    fn structure_op(&mut self, op: u8) -> Result<bool> {
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
            b'(' => {
                if self.marks.len() >= MAX_MARKS {
                    return Err(self.err(format_args!(
                        "more than {MAX_MARKS} MARKs open (the limit for a state dict's pickle)"
                    )));
                }
                self.marks.push(self.stack.len());
            }
            b')' => self.push(Value::Tuple(Vec::new()))?,
            b't' => {
                let items = self.pop_mark()?;
                self.push(Value::Tuple(items))?;
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if self.stack.len() < n {
                    return Err(self.err("stack underflow"));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.push(Value::Tuple(items))?;
            }
            b']' => self.push(Value::List(Vec::new()))?,
            b'l' => {
                let items = self.pop_mark()?;
                self.push(Value::List(items))?;
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
            b'}' => self.push(Value::Dict(Vec::new()))?,
            b'd' => {
                let items = self.pop_mark()?;
                let pairs = self.pairs(items)?;
                self.push(Value::Dict(pairs))?;
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
            b'q' | b'r' | 0x94 => {
                let idx = match op {
                    b'q' => self.le(1)?,
                    b'r' => self.le(4)?,
                    _ => self.memo.len() as u64,
                };
                let top = self.top()?;
                if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&idx) {
                    return Err(self.err(format_args!(
                        "more than {MAX_MEMO} memo entries (the limit for a state dict's pickle)"
                    )));
                }
                self.memo.insert(idx, top);
            }
            b'h' | b'j' => {
                let idx = if op == b'h' { self.le(1)? } else { self.le(4)? };
                let id = *self
                    .memo
                    .get(&idx)
                    .ok_or_else(|| self.err(format_args!("memo entry {idx} was never stored")))?;
                self.push_id(id)?;
            }
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let t = self.top()?;
                self.push_id(t)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Runs `op` if it pushes a value (None, bools, ints, floats, strings, bytes);
    /// false when `op` is not one of them.
    fn value_op(&mut self, op: u8) -> Result<bool> {
        match op {
            b'N' => self.push(Value::None)?,
            0x88 => self.push(Value::Bool(true))?,
            0x89 => self.push(Value::Bool(false))?,
            b'J' => {
                let v = self.le(4)? as u32 as i32;
                self.push(Value::Int(v.into()))?;
            }
            b'K' => {
                let v = self.le(1)?;
                self.push(Value::Int(v as i64))?;
            }
            b'M' => {
                let v = self.le(2)?;
                self.push(Value::Int(v as i64))?;
            }
            0x8a => {
                // LONG1: n bytes of little-endian two's complement
                let n = self.le(1)? as usize;
                if n > 8 {
                    return Err(self.err(format_args!("LONG1 of {n} bytes does not fit 64 bits")));
                }
                let raw = self.le(n)?;
                let v = if n == 0 {
                    0
                } else {
                    let shift = 64 - 8 * n as u32;
                    ((raw << shift) as i64) >> shift
                };
                self.push(Value::Int(v))?;
            }
            b'G' => {
                // BINFLOAT: no tensor metadata needs the value.
                self.take(8)?;
                self.push(Value::Float)?;
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
                self.push(Value::Str(s))?;
            }
            b'C' | b'B' | 0x8e => {
                let n = match op {
                    b'C' => self.le(1)?,
                    b'B' => self.le(4)?,
                    _ => self.le(8)?,
                };
                let n = usize::try_from(n).map_err(|_| self.err("bytes length overflows"))?;
                self.take(n)?;
                self.push(Value::Bytes)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Runs `op` if it makes or changes an object (GLOBAL, STACK_GLOBAL, REDUCE, NEWOBJ, BUILD,
    /// BINPERSID);
    /// false when `op` is not one of them.
    fn object_op(&mut self, op: u8) -> Result<bool> {
        match op {
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
                self.push(v)?;
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
                self.push(v)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub(super) fn pairs(&self, items: Vec<Id>) -> Result<Vec<(Id, Id)>> {
        if items.len() % 2 != 0 {
            return Err(self.err("odd number of items for a dict"));
        }
        Ok(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
    }

    pub(super) fn extend_list(&mut self, l: Id, items: Vec<Id>) -> Result<()> {
        let kind = self.arena.get(l).map(Value::kind);
        self.count_items(items.len())?;
        match self.arena.get_mut(l) {
            Some(Value::List(v)) => {
                v.extend(items);
                Ok(())
            }
            _ => Err(self.err(format_args!("APPEND to a {}", kind.unwrap_or("nothing")))),
        }
    }

    pub(super) fn extend_dict(&mut self, d: Id, pairs: Vec<(Id, Id)>) -> Result<()> {
        let kind = self.arena.get(d).map(Value::kind);
        self.count_items(2 * pairs.len())?;
        match self.arena.get_mut(d) {
            Some(Value::Dict(v)) => {
                v.extend(pairs);
                Ok(())
            }
            _ => Err(self.err(format_args!("SETITEM on a {}", kind.unwrap_or("nothing")))),
        }
    }
}
