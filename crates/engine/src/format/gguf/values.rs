//! Metadata values of a GGUF header: scalars, strings and arrays packed by element type,
//! every one charged to the header's budget (`Limits`) before it is copied.

use super::{reserve, string_cost, Reader, MAX_DEPTH, MAX_STRING};
use crate::error::Result;
use crate::format::meta::vt;
use crate::format::{MetaArray, MetaValue};

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

impl Reader<'_> {
    /// A string value of key `key`, charged to the budget before it is copied.
    fn value_string(&mut self, key: &str) -> Result<String> {
        let len = self.peek_len(key)?;
        if len <= MAX_STRING {
            self.charge(key, 1, string_cost(len))?;
        }
        self.string(MAX_STRING, false, key)
    }

    /// The `u64` length prefix of the string that starts here, without consuming it.
    pub(super) fn peek_len(&mut self, what: &str) -> Result<u64> {
        let len = self.u64(what)?;
        self.pos -= 8;
        Ok(len)
    }

    /// One scalar metadata value of type `t` (not an array).
    fn scalar(&mut self, t: u32, key: &str) -> Result<MetaValue> {
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
            vt::STRING => MetaValue::String(self.value_string(key)?),
            other => {
                self.pos -= 4;
                return Err(self.err(format_args!("`{key}`: unknown metadata value type {other}")));
            }
        })
    }

    /// One metadata value of type `t`; arrays nest at most [`MAX_DEPTH`] deep.
    pub(super) fn value(&mut self, t: u32, depth: usize, key: &str) -> Result<MetaValue> {
        if t == vt::ARRAY {
            Ok(MetaValue::Array(self.meta_array(depth, key)?))
        } else {
            self.scalar(t, key)
        }
    }

    /// `n` packed little-endian numbers of `N` bytes each, decoded by `f`, the budget
    /// charged and the vector reserved before anything is copied.
    fn packed<const N: usize, T>(
        &mut self,
        n: u64,
        key: &str,
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>> {
        self.charge(key, n, n.saturating_mul(std::mem::size_of::<T>() as u64))?;
        let bytes = self.take(n.saturating_mul(N as u64), key)?;
        let mut v = reserve(bytes.len() / N, || {
            self.err(format_args!(
                "`{key}`: no memory for an array of {n} elements"
            ))
        })?;
        v.extend(bytes.chunks_exact(N).map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        }));
        Ok(v)
    }

    /// An array value (after its type id): element type, length, elements, packed by type.
    fn meta_array(&mut self, depth: usize, key: &str) -> Result<MetaArray> {
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
        // Each element takes at least `min` bytes: a longer array cannot fit in what
        // remains, so this bounds the length by the file size (the budget bounds it more).
        if n > self.remaining() / min {
            self.pos -= 8;
            return Err(self.err(format_args!(
                "`{key}`: array of {n} elements cannot fit in the {} bytes that remain",
                self.remaining()
            )));
        }
        Ok(match et {
            vt::U8 => MetaArray::U8(self.packed(n, key, u8::from_le_bytes)?),
            vt::I8 => MetaArray::I8(self.packed(n, key, i8::from_le_bytes)?),
            vt::U16 => MetaArray::U16(self.packed(n, key, u16::from_le_bytes)?),
            vt::I16 => MetaArray::I16(self.packed(n, key, i16::from_le_bytes)?),
            vt::U32 => MetaArray::U32(self.packed(n, key, u32::from_le_bytes)?),
            vt::I32 => MetaArray::I32(self.packed(n, key, i32::from_le_bytes)?),
            vt::F32 => MetaArray::F32(self.packed(n, key, f32::from_le_bytes)?),
            vt::U64 => MetaArray::U64(self.packed(n, key, u64::from_le_bytes)?),
            vt::I64 => MetaArray::I64(self.packed(n, key, i64::from_le_bytes)?),
            vt::F64 => MetaArray::F64(self.packed(n, key, f64::from_le_bytes)?),
            vt::BOOL => {
                self.charge(key, n, n)?;
                let start = self.pos;
                let raw = self.take(n, key)?;
                if let Some(i) = raw.iter().position(|&b| b > 1) {
                    self.pos = start + i;
                    return Err(self.err(format_args!(
                        "`{key}`[{i}]: bool byte is {}, not 0 or 1",
                        raw[i]
                    )));
                }
                let mut v = reserve(raw.len(), || {
                    self.err(format_args!("`{key}`: no memory for {n} bools"))
                })?;
                v.extend(raw.iter().map(|&b| b == 1));
                MetaArray::Bool(v)
            }
            vt::STRING => {
                // Strings are charged one by one (their lengths are in the file); the
                // vector of headers is reserved for the elements that fit the budget.
                let header = std::mem::size_of::<String>() as u64;
                let fit = (self.bytes_left / header).min(self.elements_left).min(n);
                let mut v = reserve(fit as usize, || {
                    self.err(format_args!("`{key}`: no memory for {n} strings"))
                })?;
                for _ in 0..n {
                    v.push(self.value_string(key)?);
                }
                MetaArray::String(v)
            }
            _ => {
                // Nested arrays: each element is an array header and its own elements.
                self.charge(
                    key,
                    n,
                    n.saturating_mul(std::mem::size_of::<MetaArray>() as u64),
                )?;
                let mut v = reserve(n as usize, || {
                    self.err(format_args!("`{key}`: no memory for {n} nested arrays"))
                })?;
                for _ in 0..n {
                    v.push(self.meta_array(depth + 1, key)?);
                }
                MetaArray::Array(v)
            }
        })
    }
}
