//! A LoRA first product computed in parts by the dispatch that produces its input, for
//! passes of few tokens (decode): `wkv_fused` writes each head's part of the attention
//! output's `h = s · A o`, `ln_shift` each channel slice's part of the channel-mix key's
//! `h = s · A xk`; the adapted product's matrix × vector kernel sums the parts
//! (`LoraArgs::parts`, `shaders/lora_parts.wgsl`). The first product then needs no
//! dispatch of its own, and no workgroup waits on another.

use crate::error::Result;
use crate::ops::{op_err, GpuMatrix};
use crate::DType;

/// Mirrors `struct LoraParts` of `shaders/lora_parts_producer.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PartsArgs {
    /// Rows of A (the adapter's rank).
    pub rank: u32,
    /// Stride of the parts (the site's `h` width, ≥ rank; the columns past rank get 0).
    pub width: u32,
    /// `act` offset of the parts `[T, P, width]` (f32 elements).
    pub off: u32,
    /// The adapter's scale `s`.
    pub scale: f32,
}

/// The first product a producer computes in parts: its A and where the parts go.
pub struct Parts<'a> {
    pub a: &'a GpuMatrix,
    pub args: PartsArgs,
}

/// Largest rank a producer takes (one row of A a thread; four a row in `ln_shift`).
pub const MAX_RANK: usize = 64;

impl Parts<'_> {
    /// Checks the product against its producer's `c` channels and `threads` a workgroup.
    ///
    /// Errors: an A that is not F16 `[rank, c]`, a rank above [`MAX_RANK`], a width below
    /// the rank or above `threads`, `c` not a multiple of 64, an offset not a multiple
    /// of 4.
    pub fn check(&self, op: &'static str, c: usize, threads: usize) -> Result<()> {
        let (r, w) = (self.args.rank as usize, self.args.width as usize);
        let a = self.a;
        if a.dtype != DType::F16 || a.n_out != r || a.n_in != c {
            return Err(op_err(
                op,
                format!(
                    "LoRA parts: {} is {} [{}, {}], not F16 [{r}, {c}]",
                    a.name, a.dtype, a.n_out, a.n_in
                ),
            ));
        }
        if r == 0 || r > MAX_RANK || w < r || w > threads || c % 64 != 0 || self.args.off % 4 != 0 {
            return Err(op_err(
                op,
                format!("LoRA parts: rank {r}, width {w} over {c} channels ({threads} threads)"),
            ));
        }
        Ok(())
    }
}
