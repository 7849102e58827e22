//! GGML block encodings: `#[repr(C)]` block structs with compile-time size checks, and the
//! CPU decode (dequantize) reference for every [`DType`]. Bit layouts follow ggml
//! (`ggml-quants.c` `dequantize_row_*`); tests compare against gguf-py's `dequantize`.

use crate::error::{EngineError, Result};
use crate::format::DType;

/// Decodes `bytes` (whole blocks of `dtype`) into `out` (`out.len()` elements).
///
/// Errors: [`EngineError::Op`] when `bytes.len()` is not exactly the size of
/// `out.len()` elements of `dtype`.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let _ = (bytes, out);
    Err(EngineError::Op {
        op: "dequantize",
        what: format!("{dtype} decode not written yet"),
    })
}
