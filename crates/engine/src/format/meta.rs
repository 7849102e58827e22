//! Key/value metadata of a model file: GGUF's typed values (spec: ggml `docs/gguf.md`,
//! `gguf_metadata_value_type`), SafeTensors' `__metadata__` strings.
//!
//! An array holds one element type and is stored packed ([`MetaArray`]): a `U8` array of
//! n elements takes n bytes in memory, as in the file, not n enum values of 32 bytes. A
//! file's metadata so costs about what its bytes do (strings: 24 bytes more each), and the
//! GGUF reader bounds the total (`gguf::Limits`).

/// GGUF metadata value type ids (`gguf_metadata_value_type`).
pub(crate) mod vt {
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

/// One metadata value (GGUF spec: `gguf_metadata_value_type`).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(MetaArray),
}

/// A metadata array: one element type, its elements packed in a typed vector.
/// `Debug` shows the type, the length and at most the first 8 elements (a vocabulary of
/// 65,536 strings should not flood a log line or an error message).
#[derive(Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    /// Arrays of arrays (GGUF allows them; llama.cpp writes none).
    Array(Vec<MetaArray>),
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

    /// Short type name: `u8` … `f64`, `bool`, `string`, `array<T>`.
    pub fn type_name(&self) -> String {
        match self {
            MetaValue::Array(a) => format!("array<{}>", a.elem_type_name()),
            scalar => scalar_type_name(scalar.gguf_type()).to_string(),
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// `u8` … `f64`, `bool`, `string`, `array` for a GGUF type id.
fn scalar_type_name(t: u32) -> &'static str {
    match t {
        vt::U8 => "u8",
        vt::I8 => "i8",
        vt::U16 => "u16",
        vt::I16 => "i16",
        vt::U32 => "u32",
        vt::I32 => "i32",
        vt::F32 => "f32",
        vt::BOOL => "bool",
        vt::STRING => "string",
        vt::ARRAY => "array",
        vt::U64 => "u64",
        vt::I64 => "i64",
        vt::F64 => "f64",
        _ => "unknown",
    }
}

/// Applies `$body` to the typed vector of every variant of a [`MetaArray`].
macro_rules! each {
    ($a:expr, $v:ident => $body:expr) => {
        match $a {
            MetaArray::U8($v) => $body,
            MetaArray::I8($v) => $body,
            MetaArray::U16($v) => $body,
            MetaArray::I16($v) => $body,
            MetaArray::U32($v) => $body,
            MetaArray::I32($v) => $body,
            MetaArray::U64($v) => $body,
            MetaArray::I64($v) => $body,
            MetaArray::F32($v) => $body,
            MetaArray::F64($v) => $body,
            MetaArray::Bool($v) => $body,
            MetaArray::String($v) => $body,
            MetaArray::Array($v) => $body,
        }
    };
}

impl MetaArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        each!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF type id of the elements (known even for an empty array).
    pub fn elem_type(&self) -> u32 {
        match self {
            MetaArray::U8(_) => vt::U8,
            MetaArray::I8(_) => vt::I8,
            MetaArray::U16(_) => vt::U16,
            MetaArray::I16(_) => vt::I16,
            MetaArray::U32(_) => vt::U32,
            MetaArray::I32(_) => vt::I32,
            MetaArray::F32(_) => vt::F32,
            MetaArray::Bool(_) => vt::BOOL,
            MetaArray::String(_) => vt::STRING,
            MetaArray::Array(_) => vt::ARRAY,
            MetaArray::U64(_) => vt::U64,
            MetaArray::I64(_) => vt::I64,
            MetaArray::F64(_) => vt::F64,
        }
    }

    /// Short name of the element type (`u8`, `string`, `array<i32>`…).
    pub fn elem_type_name(&self) -> String {
        match self {
            MetaArray::Array(items) => match items.first() {
                Some(inner) => format!("array<{}>", inner.elem_type_name()),
                None => "array".into(),
            },
            other => scalar_type_name(other.elem_type()).to_string(),
        }
    }

    /// Element `i` as a value (a string or nested array is cloned), if it exists.
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        Some(match self {
            MetaArray::U8(v) => MetaValue::U8(*v.get(i)?),
            MetaArray::I8(v) => MetaValue::I8(*v.get(i)?),
            MetaArray::U16(v) => MetaValue::U16(*v.get(i)?),
            MetaArray::I16(v) => MetaValue::I16(*v.get(i)?),
            MetaArray::U32(v) => MetaValue::U32(*v.get(i)?),
            MetaArray::I32(v) => MetaValue::I32(*v.get(i)?),
            MetaArray::U64(v) => MetaValue::U64(*v.get(i)?),
            MetaArray::I64(v) => MetaValue::I64(*v.get(i)?),
            MetaArray::F32(v) => MetaValue::F32(*v.get(i)?),
            MetaArray::F64(v) => MetaValue::F64(*v.get(i)?),
            MetaArray::Bool(v) => MetaValue::Bool(*v.get(i)?),
            MetaArray::String(v) => MetaValue::String(v.get(i)?.clone()),
            MetaArray::Array(v) => MetaValue::Array(v.get(i)?.clone()),
        })
    }

    /// Element `i` as a signed integer, if the array holds integers and `i` exists (no
    /// copy: what a token-type lookup needs).
    pub fn int_at(&self, i: usize) -> Option<i64> {
        match self {
            MetaArray::U8(v) => v.get(i).map(|&x| x.into()),
            MetaArray::I8(v) => v.get(i).map(|&x| x.into()),
            MetaArray::U16(v) => v.get(i).map(|&x| x.into()),
            MetaArray::I16(v) => v.get(i).map(|&x| x.into()),
            MetaArray::U32(v) => v.get(i).map(|&x| x.into()),
            MetaArray::I32(v) => v.get(i).map(|&x| x.into()),
            MetaArray::U64(v) => v.get(i).and_then(|&x| i64::try_from(x).ok()),
            MetaArray::I64(v) => v.get(i).copied(),
            _ => None,
        }
    }

    /// The elements as values, in order (strings and nested arrays cloned one at a time).
    pub fn iter(&self) -> impl Iterator<Item = MetaValue> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// The strings of a string array.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// The array of `items` when they all have one type (`None` for a mix; an empty
    /// list is an empty `U8` array, the type llama.cpp's writer gives one). For writers
    /// and tests that build values one by one.
    pub fn from_values(items: Vec<MetaValue>) -> Option<MetaArray> {
        macro_rules! collect {
            ($variant:ident) => {
                items
                    .into_iter()
                    .map(|v| match v {
                        MetaValue::$variant(x) => Some(x),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .map(MetaArray::$variant)
            };
        }
        match items.first().map(MetaValue::gguf_type) {
            None => Some(MetaArray::U8(Vec::new())),
            Some(vt::U8) => collect!(U8),
            Some(vt::I8) => collect!(I8),
            Some(vt::U16) => collect!(U16),
            Some(vt::I16) => collect!(I16),
            Some(vt::U32) => collect!(U32),
            Some(vt::I32) => collect!(I32),
            Some(vt::U64) => collect!(U64),
            Some(vt::I64) => collect!(I64),
            Some(vt::F32) => collect!(F32),
            Some(vt::F64) => collect!(F64),
            Some(vt::BOOL) => collect!(Bool),
            Some(vt::STRING) => collect!(String),
            Some(_) => collect!(Array),
        }
    }
}

impl std::fmt::Debug for MetaArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// Elements shown; the rest are counted.
        const SHOWN: usize = 8;
        write!(f, "{}[", self.elem_type_name())?;
        each!(self, v => {
            for (i, x) in v.iter().take(SHOWN).enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{x:?}")?;
            }
        });
        if self.len() > SHOWN {
            write!(f, ", … {} more", self.len() - SHOWN)?;
        }
        write!(f, "] ({} items)", self.len())
    }
}

macro_rules! from_vec {
    ($($t:ty => $variant:ident),*) => {$(
        impl From<Vec<$t>> for MetaArray {
            fn from(v: Vec<$t>) -> Self {
                MetaArray::$variant(v)
            }
        }
    )*};
}
from_vec!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String, MetaArray => Array);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_typed_and_packed() {
        let a = MetaArray::from(vec![1u8, 2, 3]);
        assert_eq!(
            (a.len(), a.elem_type(), a.elem_type_name()),
            (3, vt::U8, "u8".into())
        );
        assert_eq!(a.get(2), Some(MetaValue::U8(3)));
        assert_eq!(a.get(3), None);
        assert_eq!(a.int_at(1), Some(2));
        let s = MetaArray::from(vec!["a".to_string(), "b".to_string()]);
        assert_eq!(s.as_strings().map(<[String]>::len), Some(2));
        assert_eq!(s.int_at(0), None);
        assert_eq!(
            MetaArray::from_values(vec![MetaValue::I32(1), MetaValue::I32(-2)]),
            Some(MetaArray::I32(vec![1, -2]))
        );
        assert_eq!(
            MetaArray::from_values(vec![MetaValue::I32(1), MetaValue::U8(2)]),
            None
        );
        let nested = MetaArray::from(vec![MetaArray::from(vec![1i64])]);
        assert_eq!(nested.elem_type_name(), "array<i64>");
        assert_eq!(
            MetaValue::Array(nested).type_name(),
            "array<array<i64>>".to_string()
        );
    }

    #[test]
    fn debug_of_a_long_array_is_short() {
        let a = MetaArray::from(vec![7u32; 100_000]);
        let d = format!("{a:?}");
        assert!(d.len() < 100, "{d}");
        assert!(
            d.contains("99992 more") && d.contains("100000 items"),
            "{d}"
        );
    }
}
