//! GGML block encodings: `#[repr(C)]` block structs with compile-time size checks, and the
//! CPU decode (dequantize) reference for every [`DType`]. Bit layouts follow ggml
//! (`ggml-common.h` block structs, `ggml-quants.c` `dequantize_row_*`); the decoders
//! repeat ggml's f32 arithmetic in the same order, so results are bit-identical to ggml
//! and to gguf-py's `dequantize` (tests against `shared/fixtures/quant`).
//!
//! Also the encoders the `rwkv-synth` crate needs: [`quantize_f16`], [`quantize_q8_0`], [`quantize_q5_0`],
//! [`quantize_q4_k`], [`quantize_q6_k`] (ggml's `quantize_row_*_ref`, round to nearest, no
//! importance matrix — what `llama-quantize` does without `--imatrix`).

pub mod float;
pub mod iq4_nl;
pub mod kquants;
pub mod legacy;

use bytemuck::Pod;

use crate::error::{EngineError, Result};
use crate::format::DType;

pub use float::{encode_f16_bytes, quantize_f16};
pub use iq4_nl::{BlockIQ4NL, KVALUES_IQ4NL};
pub use kquants::{
    quantize_q4_k, quantize_q4_k_rtn, quantize_q6_k, quantize_q6_k_rtn, BlockQ2K, BlockQ3K,
    BlockQ4K, BlockQ5K, BlockQ6K, QK_K,
};
pub use legacy::{
    quantize_q5_0, quantize_q8_0, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0,
};

/// A ggml quantization block: `DTYPE.block_len()` elements in `size_of::<Self>()` ==
/// `DTYPE.block_bytes()` bytes (each block struct asserts its size at compile time; a
/// unit test checks it against [`DType::block_bytes`]).
pub trait Block: Pod {
    /// The encoding this block belongs to.
    const DTYPE: DType;
    /// Decodes the block into `y[..DTYPE.block_len()]` (`y` must be at least that long;
    /// shorter panics on the slice index — [`dequantize_blocks`] guarantees the length).
    fn dequantize(&self, y: &mut [f32]);
}

fn size_error(dtype: DType, bytes: usize, elements: usize) -> EngineError {
    let expected = match dtype.bytes_for(elements) {
        Some(n) => format!("{n} bytes"),
        None => format!(
            "a multiple of {} elements (a whole number of blocks)",
            dtype.block_len()
        ),
    };
    EngineError::Op {
        op: "dequantize",
        what: format!("{dtype}: {elements} elements need {expected}, got {bytes} bytes"),
    }
}

/// Decodes whole blocks of type `B` from `bytes` (any alignment) into `out`
/// (`out.len() == blocks × B::DTYPE.block_len()`).
///
/// Errors: [`EngineError::Op`] (op `"dequantize"`) when the lengths disagree.
pub fn dequantize_blocks<B: Block>(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let n = B::DTYPE.block_len();
    let bb = std::mem::size_of::<B>();
    if out.len() % n != 0 || bytes.len() != out.len() / n * bb {
        return Err(size_error(B::DTYPE, bytes.len(), out.len()));
    }
    match bytemuck::try_cast_slice::<u8, B>(bytes) {
        // Aligned (the usual case: GGUF aligns tensor data to 32 bytes): no copy.
        Ok(blocks) => {
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(n)) {
                b.dequantize(y);
            }
        }
        Err(_) => {
            for (c, y) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(n)) {
                let b: B = bytemuck::try_pod_read_unaligned(c).map_err(|e| EngineError::Op {
                    op: "dequantize",
                    what: format!("{}: cannot read block: {e:?}", B::DTYPE),
                })?;
                b.dequantize(y);
            }
        }
    }
    Ok(())
}

/// Decodes `bytes` (whole blocks of `dtype`, as stored in a GGUF / SafeTensors file) into
/// `out` (`out.len()` elements, ggml order: `ne[0]` fastest = row-major `[.., n_in]`).
///
/// Errors: [`EngineError::Op`] (op `"dequantize"`) naming the dtype, the element count,
/// and the expected vs actual byte count when `bytes.len()` is not exactly the size of
/// `out.len()` elements of `dtype` (including when `out.len()` is not a whole number of
/// blocks).
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            if Some(bytes.len()) != dtype.bytes_for(out.len()) {
                return Err(size_error(dtype, bytes.len(), out.len()));
            }
            match dtype {
                DType::F32 => float::decode_f32(bytes, out),
                DType::F16 => float::decode_f16(bytes, out),
                _ => float::decode_bf16(bytes, out),
            }
            Ok(())
        }
        DType::Q4_0 => dequantize_blocks::<BlockQ4_0>(bytes, out),
        DType::Q4_1 => dequantize_blocks::<BlockQ4_1>(bytes, out),
        DType::Q5_0 => dequantize_blocks::<BlockQ5_0>(bytes, out),
        DType::Q5_1 => dequantize_blocks::<BlockQ5_1>(bytes, out),
        DType::Q8_0 => dequantize_blocks::<BlockQ8_0>(bytes, out),
        DType::Q2_K => dequantize_blocks::<BlockQ2K>(bytes, out),
        DType::Q3_K => dequantize_blocks::<BlockQ3K>(bytes, out),
        DType::Q4_K => dequantize_blocks::<BlockQ4K>(bytes, out),
        DType::Q5_K => dequantize_blocks::<BlockQ5K>(bytes, out),
        DType::Q6_K => dequantize_blocks::<BlockQ6K>(bytes, out),
        DType::IQ4_NL => dequantize_blocks::<BlockIQ4NL>(bytes, out),
    }
}

/// Decodes `bytes` (whole blocks of `dtype`) into a new `Vec` of `n` elements.
///
/// Errors: as [`dequantize`].
pub fn dequantize_to_vec(dtype: DType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let mut out = vec![0.0f32; n];
    dequantize(dtype, bytes, &mut out)?;
    Ok(out)
}

/// Decodes one row of `blocks` (any block type) into `out`
/// (`out.len() == blocks.len() × B::DTYPE.block_len()`).
///
/// Errors: [`EngineError::Op`] when the lengths disagree.
pub fn dequantize_row<B: Block>(blocks: &[B], out: &mut [f32]) -> Result<()> {
    dequantize_blocks::<B>(bytemuck::cast_slice(blocks), out)
}

#[cfg(test)]
mod tests;
