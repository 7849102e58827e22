//! The weight encodings the kernels read in their file encoding (`shaders/decode/`): which
//! ones, how their blocks lie on the GPU, and the snippets a kernel that decodes one
//! includes.

use std::borrow::Cow;

use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::Wgsl;
use crate::ops::op_err;

/// Encodings the GPU kernels read directly; others are converted to F16 at load.
pub fn gpu_native(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::Q8_0
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
    )
}

/// Bytes from one block of `dtype` to the next as the kernels read them: the file's block,
/// except Q6_K. Its 210-byte blocks (ggml `block_q6_K`) lie only 2-byte aligned in a row,
/// so every other block's words straddle two u32s and a lane's loads branch on it; on the
/// GPU each block is followed by 2 zero bytes (212 apart, +0.95 %), which puts every word
/// of every block on a 4-byte boundary (`shaders/decode/q6_k.wgsl`, `matvec/q6_k*.wgsl`).
pub fn gpu_block_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Q6_K => Q6_K_GPU_BLOCK,
        d => d.block_bytes(),
    }
}

/// Q6_K's block stride on the GPU, bytes ([`gpu_block_bytes`]).
pub const Q6_K_GPU_BLOCK: usize = 212;

/// Bytes of a row of `n_in` values of `dtype` on the GPU (`None`: not whole blocks).
pub fn gpu_row_bytes(dtype: DType, n_in: usize) -> Option<usize> {
    let blocks = dtype.bytes_for(n_in)? / dtype.block_bytes().max(1);
    blocks.checked_mul(gpu_block_bytes(dtype))
}

/// Whole blocks of `dtype` (`src`, as in the file) laid out as the kernels read them into
/// `dst` (`src.len() / block_bytes · gpu_block_bytes` bytes; the gaps zeroed).
///
/// Panics if `dst` is shorter than that.
pub fn fill_gpu_layout(dtype: DType, src: &[u8], dst: &mut [u8]) {
    let (block, stride) = (dtype.block_bytes(), gpu_block_bytes(dtype));
    if block == stride {
        dst[..src.len()].copy_from_slice(src);
        return;
    }
    for (s, d) in src.chunks_exact(block).zip(dst.chunks_exact_mut(stride)) {
        d[..block].copy_from_slice(s);
        d[block..].fill(0);
    }
}

/// `bytes` (whole blocks of `dtype`, as in the file) as the kernels read them (tests, the
/// kernel microbenchmark; the loader lays them out while it streams them).
pub fn to_gpu_layout(dtype: DType, bytes: &[u8]) -> Cow<'_, [u8]> {
    let (block, stride) = (dtype.block_bytes(), gpu_block_bytes(dtype));
    if block == stride || block == 0 {
        return Cow::Borrowed(bytes);
    }
    let mut out = vec![0u8; bytes.len() / block * stride];
    fill_gpu_layout(dtype, bytes, &mut out);
    Cow::Owned(out)
}

/// `w` with the decode of `dtype` (`decode32` / `dec8` over `w: array<u32>`), for the
/// kernel `op`: byte access, the packed K-quant scales where the encoding has them, and
/// its own snippet.
///
/// Errors: [`crate::EngineError::Op`] for an encoding the kernels do not read.
pub(crate) fn with_decode(w: Wgsl, dtype: DType, op: &'static str) -> Result<Wgsl> {
    let decode = match dtype {
        DType::F32 => shader!("decode/f32.wgsl"),
        DType::F16 => shader!("decode/f16.wgsl"),
        DType::BF16 => shader!("decode/bf16.wgsl"),
        DType::Q8_0 => shader!("decode/q8_0.wgsl"),
        DType::Q4_K => shader!("decode/q4_k.wgsl"),
        DType::Q5_K => shader!("decode/q5_k.wgsl"),
        DType::Q6_K => shader!("decode/q6_k.wgsl"),
        other => {
            return Err(op_err(
                op,
                format!("no GPU decode for {other} (it is converted to F16 at load)"),
            ))
        }
    };
    let w = w.file(shader!("decode/bytes.wgsl"));
    let w = match dtype {
        DType::Q4_K | DType::Q5_K => w.file(shader!("decode/kscales.wgsl")),
        _ => w,
    };
    Ok(w.file(decode))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q6_K blocks move 212 bytes apart with 2 zero bytes after each (whatever was in the
    /// destination); every other encoding is left as in the file.
    #[test]
    fn q6_k_blocks_lie_212_bytes_apart() {
        let src: Vec<u8> = (0..3 * 210).map(|i| (i % 251) as u8 + 1).collect();
        assert_eq!(gpu_row_bytes(DType::Q6_K, 768), Some(3 * 212));
        assert_eq!(gpu_row_bytes(DType::Q6_K, 700), None);
        let out = to_gpu_layout(DType::Q6_K, &src);
        assert_eq!(out.len(), 3 * 212);
        let mut dst = vec![0xaau8; 3 * 212];
        fill_gpu_layout(DType::Q6_K, &src, &mut dst);
        assert_eq!(&dst[..], &out[..]);
        for b in 0..3 {
            assert_eq!(&out[212 * b..212 * b + 210], &src[210 * b..210 * (b + 1)]);
            assert_eq!(&out[212 * b + 210..212 * (b + 1)], &[0, 0]);
        }
        for dtype in [DType::Q4_K, DType::Q8_0, DType::F16, DType::Q5_K] {
            assert_eq!(gpu_block_bytes(dtype), dtype.block_bytes());
            assert!(matches!(to_gpu_layout(dtype, &src), Cow::Borrowed(_)));
        }
    }
}
