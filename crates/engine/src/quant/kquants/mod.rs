//! ggml's k-quants: 256-element super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
//!
//! Layouts: `ggml-common.h` (`block_q2_K` …, `QK_K = 256`). Decoders: `ggml-quants.c`
//! `dequantize_row_q2_K` …, reproduced operation for operation in f32 (e.g. Q4_K's
//! `(d * sc) * q - dmin * m`) so the results are bit-identical to ggml and gguf-py.
//! Quantizers (in `quantize.rs`): `quantize_row_q4_K_ref` and `quantize_row_q6_K_ref`
//! (what `llama-quantize` runs without an importance matrix).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::Block;
use crate::format::DType;

mod quantize;

pub use quantize::{quantize_q4_k, quantize_q4_k_rtn, quantize_q6_k, quantize_q6_k_rtn};

/// Elements per super-block (ggml `QK_K`).
pub const QK_K: usize = 256;

/// `block_q2_K`: 16 sub-blocks of 16; sub-block `s` has scale `d * (scales[s] & 15)` and
/// min `dmin * (scales[s] >> 4)`; `x = dl * q - ml`, q ∈ [0, 3] (2 bits in `qs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// `block_q3_K`: 16 sub-blocks of 16 with 6-bit signed scales (`scales`, packed 12 bytes,
/// offset 32); `x = d * (sc - 32) * (q - (hbit ? 0 : 4))`, 2 low bits in `qs`, the third
/// bit in `hmask`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// `block_q4_K`: 8 sub-blocks of 32 with 6-bit scales and mins packed in `scales`
/// (see [`get_scale_min_k4`]); `x = d * sc * q - dmin * m`, q ∈ [0, 15].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// `block_q5_K`: as [`BlockQ4K`] plus a fifth bit per element in `qh`; q ∈ [0, 31].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// `block_q6_K`: 16 sub-blocks of 16 with signed 8-bit scales; `x = d * sc * (q - 32)`,
/// q ∈ [0, 63]: 4 low bits in `ql`, 2 high bits in `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// ggml `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K /
/// Q5_K `scales` array. Sub-blocks 0..4 hold them in the low 6 bits of bytes `j`, `j+4`;
/// sub-blocks 4..8 split them into a nibble of byte `j+4` and the top 2 bits of `j-4`, `j`.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (d, m)
    }
}

impl Block for BlockQ2K {
    const DTYPE: DType = DType::Q2_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        let mut is = 0;
        let mut o = 0;
        for n in 0..QK_K / 128 {
            let q = &self.qs[n * 32..n * 32 + 32];
            for j in 0..4 {
                let shift = 2 * j;
                for half in 0..2 {
                    let sc = self.scales[is];
                    is += 1;
                    let dl = d * f32::from(sc & 0x0f);
                    let ml = min * f32::from(sc >> 4);
                    for l in 0..16 {
                        let v = (q[half * 16 + l] >> shift) & 3;
                        y[o] = dl * f32::from(v) - ml;
                        o += 1;
                    }
                }
            }
        }
    }
}

impl Block for BlockQ3K {
    const DTYPE: DType = DType::Q3_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d_all = self.d.to_f32();
        let mut scales = [0i8; 16];
        for (is, s) in scales.iter_mut().enumerate() {
            let low = if is < 8 {
                self.scales[is] & 0x0f
            } else {
                self.scales[is - 8] >> 4
            };
            let high = (self.scales[8 + is % 4] >> (2 * (is / 4))) & 3;
            *s = ((low | (high << 4)) as i8).wrapping_sub(32);
        }
        let mut is = 0;
        let mut o = 0;
        let mut m = 1u8;
        for n in 0..QK_K / 128 {
            let q = &self.qs[n * 32..n * 32 + 32];
            for j in 0..4 {
                let shift = 2 * j;
                for half in 0..2 {
                    let dl = d_all * f32::from(scales[is]);
                    is += 1;
                    for l in 0..16 {
                        let k = half * 16 + l;
                        let lo = ((q[k] >> shift) & 3) as i8;
                        let hi = if self.hmask[k] & m != 0 { 0 } else { 4 };
                        y[o] = dl * f32::from(lo - hi);
                        o += 1;
                    }
                }
                m = m.wrapping_shl(1);
            }
        }
    }
}

impl Block for BlockQ4K {
    const DTYPE: DType = DType::Q4_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        for n in 0..QK_K / 64 {
            let q = &self.qs[n * 32..n * 32 + 32];
            let (sc, m) = get_scale_min_k4(2 * n, &self.scales);
            let d1 = d * f32::from(sc);
            let m1 = min * f32::from(m);
            let (sc, m) = get_scale_min_k4(2 * n + 1, &self.scales);
            let d2 = d * f32::from(sc);
            let m2 = min * f32::from(m);
            let out = &mut y[n * 64..n * 64 + 64];
            for l in 0..32 {
                out[l] = d1 * f32::from(q[l] & 0x0f) - m1;
                out[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
            }
        }
    }
}

impl Block for BlockQ5K {
    const DTYPE: DType = DType::Q5_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        let mut u1 = 1u8;
        let mut u2 = 2u8;
        for n in 0..QK_K / 64 {
            let ql = &self.qs[n * 32..n * 32 + 32];
            let (sc, m) = get_scale_min_k4(2 * n, &self.scales);
            let d1 = d * f32::from(sc);
            let m1 = min * f32::from(m);
            let (sc, m) = get_scale_min_k4(2 * n + 1, &self.scales);
            let d2 = d * f32::from(sc);
            let m2 = min * f32::from(m);
            let out = &mut y[n * 64..n * 64 + 64];
            for l in 0..32 {
                let h1 = if self.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if self.qh[l] & u2 != 0 { 16 } else { 0 };
                out[l] = d1 * f32::from((ql[l] & 0x0f) + h1) - m1;
                out[l + 32] = d2 * f32::from((ql[l] >> 4) + h2) - m2;
            }
            u1 = u1.wrapping_shl(2);
            u2 = u2.wrapping_shl(2);
        }
    }
}

impl Block for BlockQ6K {
    const DTYPE: DType = DType::Q6_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for n in 0..QK_K / 128 {
            let ql = &self.ql[n * 64..n * 64 + 64];
            let qh = &self.qh[n * 32..n * 32 + 32];
            let sc = &self.scales[n * 8..n * 8 + 8];
            let out = &mut y[n * 128..n * 128 + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                // ggml: `d * sc[is] * q`, evaluated left to right in f32.
                out[l] = d * f32::from(sc[is]) * f32::from(q1);
                out[l + 32] = d * f32::from(sc[is + 2]) * f32::from(q2);
                out[l + 64] = d * f32::from(sc[is + 4]) * f32::from(q3);
                out[l + 96] = d * f32::from(sc[is + 6]) * f32::from(q4);
            }
        }
    }
}
