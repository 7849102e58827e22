//! ggml's first-generation 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Layouts: `ggml-common.h` (`block_q4_0` …). Decoders: `ggml-quants.c`
//! `dequantize_row_q4_0` …, reproduced operation for operation in f32 so the results are
//! bit-identical (checked against gguf-py's `dequantize` in `quant/tests.rs`).
//! Quantizers: `quantize_row_q8_0_ref`, `quantize_row_q5_0_ref` (what `llama-quantize`
//! runs when no importance matrix is given).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::Block;
use crate::format::DType;

/// Elements per legacy block (ggml `QK4_0`, `QK8_0`, …).
pub const QK: usize = 32;

/// `block_q4_0`: `x = d * (q - 8)`, q ∈ [0, 15]; element `j` (< 16) is the low nibble of
/// `qs[j]`, element `j + 16` its high nibble.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// `block_q4_1`: `x = d * q + m`, q ∈ [0, 15], nibbles as in [`BlockQ4_0`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// `block_q5_0`: `x = d * (q - 16)`, q ∈ [0, 31]; low 4 bits as in [`BlockQ4_0`], bit 4 of
/// element `j` is bit `j` of the little-endian `u32` `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// `block_q5_1`: `x = d * q + m`, q ∈ [0, 31], bits as in [`BlockQ5_0`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// `block_q8_0`: `x = d * q`, q ∈ [-127, 127] (−128 never written by the quantizer).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

impl Block for BlockQ4_0 {
    const DTYPE: DType = DType::Q4_0;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            let x0 = i32::from(q & 0x0f) - 8;
            let x1 = i32::from(q >> 4) - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

impl Block for BlockQ4_1 {
    const DTYPE: DType = DType::Q4_1;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            let x0 = q & 0x0f;
            let x1 = q >> 4;
            y[j] = f32::from(x0) * d + m;
            y[j + QK / 2] = f32::from(x1) * d + m;
        }
    }
}

impl Block for BlockQ5_0 {
    const DTYPE: DType = DType::Q5_0;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        for (j, &q) in self.qs.iter().enumerate() {
            let xh0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = i32::from((q & 0x0f) | xh0) - 16;
            let x1 = i32::from((q >> 4) | xh1) - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

impl Block for BlockQ5_1 {
    const DTYPE: DType = DType::Q5_1;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        for (j, &q) in self.qs.iter().enumerate() {
            let xh0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = (q & 0x0f) | xh0;
            let x1 = (q >> 4) | xh1;
            y[j] = f32::from(x0) * d + m;
            y[j + QK / 2] = f32::from(x1) * d + m;
        }
    }
}

impl Block for BlockQ8_0 {
    const DTYPE: DType = DType::Q8_0;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, &q) in y.iter_mut().zip(self.qs.iter()) {
            *o = f32::from(q) * d;
        }
    }
}

/// Quantizes `x` (`x.len()` a multiple of 32) to Q8_0 like ggml's
/// `quantize_row_q8_0_ref`: `d = absmax / 127` (stored as f16), `q = round(x / d)`
/// (half away from zero, C `roundf`). Returns `x.len() / 32` blocks; a trailing partial
/// block is quantized as if zero-padded (callers pass whole rows).
pub fn quantize_q8_0(x: &[f32]) -> Vec<BlockQ8_0> {
    x.chunks(QK)
        .map(|chunk| {
            let mut xs = [0.0f32; QK];
            xs[..chunk.len()].copy_from_slice(chunk);
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut qs = [0i8; QK];
            for (q, &v) in qs.iter_mut().zip(xs.iter()) {
                // |v * id| <= 127 (+ rounding), so the cast cannot saturate meaningfully.
                *q = (v * id).round() as i8;
            }
            BlockQ8_0 {
                d: f16::from_f32(d),
                qs,
            }
        })
        .collect()
}

/// Quantizes `x` (a multiple of 32 long) to Q5_0 like ggml's `quantize_row_q5_0_ref`:
/// `d = max / -16` where `max` is the element of largest magnitude (sign kept), then
/// `q = min(31, trunc(x / d + 16.5))`. llama-quantize uses Q5_0 in place of Q4_K for
/// rows whose length is not a multiple of 256.
pub fn quantize_q5_0(x: &[f32]) -> Vec<BlockQ5_0> {
    x.chunks(QK)
        .map(|chunk| {
            let mut xs = [0.0f32; QK];
            xs[..chunk.len()].copy_from_slice(chunk);
            let mut amax = 0.0f32;
            let mut max = 0.0f32;
            for &v in &xs {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -16.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut qh = 0u32;
            let mut qs = [0u8; QK / 2];
            for j in 0..QK / 2 {
                let x0 = xs[j] * id;
                let x1 = xs[j + QK / 2] * id;
                // C: MIN(31, (int8_t)(x + 16.5f)): truncation toward zero into i8.
                let xi0 = (x0 + 16.5) as i8 as u8;
                let xi1 = (x1 + 16.5) as i8 as u8;
                let xi0 = xi0.min(31);
                let xi1 = xi1.min(31);
                qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
                qh |= u32::from((xi0 & 0x10) >> 4) << j;
                qh |= u32::from((xi1 & 0x10) >> 4) << (j + QK / 2);
            }
            BlockQ5_0 {
                d: f16::from_f32(d),
                qh: qh.to_le_bytes(),
                qs,
            }
        })
        .collect()
}
