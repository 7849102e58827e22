//! IQ4_NL: 32-element blocks of 4-bit indices into a fixed non-linear codebook.
//!
//! Layout: `ggml-common.h` `block_iq4_nl`; decoder: `ggml-quants.c` `dequantize_row_iq4_nl`
//! (`x = d * kvalues_iq4nl[q]`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::Block;
use crate::format::DType;

/// Elements per block (ggml `QK4_NL`).
pub const QK4_NL: usize = 32;

/// ggml `kvalues_iq4nl`: the 16 levels, roughly uniform in the quantile of a Gaussian.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `block_iq4_nl`: element `j` (< 16) is `d * KVALUES_IQ4NL[qs[j] & 15]`, element `j + 16`
/// uses the high nibble.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockIQ4NL {
    pub d: f16,
    pub qs: [u8; QK4_NL / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);

impl Block for BlockIQ4NL {
    const DTYPE: DType = DType::IQ4_NL;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
            y[j + QK4_NL / 2] = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
    }
}
