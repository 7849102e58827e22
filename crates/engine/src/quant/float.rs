//! Plain float encodings: F32, F16 (IEEE binary16) and BF16 (bfloat16), little-endian.
//! Decoding is exact (every f16 / bf16 value is an f32); encoding F16 rounds to nearest
//! even, as ggml's `GGML_FP32_TO_FP16` and NumPy's `astype(float16)` do.

use half::{bf16, f16};

/// `bytes` (little-endian f32, 4 per element) → `out`. Caller checks lengths.
pub(crate) fn decode_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// `bytes` (little-endian f16, 2 per element) → `out`. Caller checks lengths.
pub(crate) fn decode_f16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

/// `bytes` (little-endian bf16, 2 per element) → `out`: the bf16 bits are the top half of
/// the f32 (gguf-py: `int16 << 16` viewed as f32). Caller checks lengths.
pub(crate) fn decode_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

/// Encodes `x` as F16 (round to nearest even; overflow → ±inf, as ggml).
pub fn quantize_f16(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

/// Encodes `x` as little-endian F16 bytes (2 per element) into `out`
/// (`out.len() == 2 * x.len()`, else only the common prefix is written).
pub fn encode_f16_bytes(x: &[f32], out: &mut [u8]) {
    for (c, &v) in out.chunks_exact_mut(2).zip(x) {
        c.copy_from_slice(&f16::from_f32(v).to_le_bytes());
    }
}
