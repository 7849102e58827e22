//! A LoRA first product folded into the dispatch that produces its input, for passes of
//! few tokens (decode): `h[t, j] = s · Σ_c A[j, c] v[t, c]` computed by `ln_shift` (the
//! channel-mix key's input) or `wkv_fused` (the attention output's input) as parts of 64
//! channels, which the last workgroup of that dispatch sums (`shaders/lora/fold.wgsl`).
//! The product then needs no dispatch of its own: a decode step of a block with a LoRA on
//! every matrix runs two dispatches fewer.
//!
//! The last workgroup is found by a counter each workgroup increments once its parts are
//! written, between two device-scope storage barriers (release, then acquire); it sets
//! the counter back to 0. No workgroup waits on another.

use crate::error::Result;
use crate::gpu::{buffer, GpuContext};
use crate::ops::{op_err, GpuMatrix};
use crate::DType;

/// Largest rank a folded product takes (its last workgroup's sums in workgroup memory).
pub const MAX_RANK: usize = 128;

/// Mirrors `struct Fold` of `shaders/lora/fold_params.wgsl` (all zeros: nothing folded).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FoldParams {
    /// Rows of A (the adapter's rank).
    pub rank: u32,
    /// Columns of A: the producer's channels, a multiple of 64.
    pub k: u32,
    /// `act` offset of h `[T, h_stride]` (f32 elements).
    pub h_off: u32,
    pub h_stride: u32,
    /// The adapter's scale `s`.
    pub scale: f32,
    /// This product's counter in the scratch.
    pub count: u32,
    pub _p: [u32; 2],
}

/// The counters and parts every folded product of a graph uses (one dispatch at a time:
/// a decode step's dispatches run in order).
pub struct FoldScratch {
    pub buffer: wgpu::Buffer,
    counters: usize,
    /// Byte offset of the parts `[T ≤ t_max, k_max / 64, rank ≤ MAX_RANK]` f32.
    parts_at: u64,
}

impl FoldScratch {
    /// Scratch for `counters` folded products of passes of at most `t_max` tokens over at
    /// most `k_max` channels. The counters start at 0 (a new buffer is zeroed).
    pub fn new(gpu: &GpuContext, counters: usize, t_max: usize, k_max: usize) -> Self {
        let align = u64::from(gpu.limits.min_storage_buffer_offset_alignment).max(256);
        let parts_at = (counters.max(1) as u64 * 4).next_multiple_of(align);
        let parts = (t_max * k_max.div_ceil(64) * MAX_RANK) as u64 * 4;
        let buffer = buffer::storage(gpu, "LoRA fold scratch", parts_at + parts);
        FoldScratch {
            buffer,
            counters: counters.max(1),
            parts_at,
        }
    }
}

/// One folded product: its A, where h goes, its counter.
pub struct Fold<'a> {
    pub a: &'a GpuMatrix,
    pub scratch: &'a FoldScratch,
    pub params: FoldParams,
}

impl Fold<'_> {
    /// Whether a product of `rank` rows over `k` channels can fold.
    pub fn fits(rank: usize, k: usize) -> bool {
        (1..=MAX_RANK).contains(&rank) && k % 64 == 0 && k > 0
    }

    /// Checks the product against its producer's `c` channels.
    ///
    /// Errors: an A that is not F16 `[rank, c]`, a rank outside 1..=[`MAX_RANK`], `c`
    /// not a multiple of 64, a counter past the scratch's.
    pub fn check(&self, op: &'static str, c: usize) -> Result<()> {
        let p = &self.params;
        let bad = |what: String| Err(op_err(op, format!("LoRA fold: {what}")));
        if !Self::fits(p.rank as usize, c) || p.k as usize != c {
            return bad(format!("rank {} over {} channels (C = {c})", p.rank, p.k));
        }
        if self.a.dtype != DType::F16 || self.a.n_out != p.rank as usize || self.a.n_in != c {
            return bad(format!(
                "{} is {} [{}, {}], not F16 [{}, {c}]",
                self.a.name, self.a.dtype, self.a.n_out, self.a.n_in, p.rank
            ));
        }
        if p.count as usize >= self.scratch.counters {
            return bad(format!("counter {} of {}", p.count, self.scratch.counters));
        }
        Ok(())
    }

    /// Bindings 6 (A), 7 (parts) and 8 (counters) of the producer's shader.
    pub fn resources(&self) -> Vec<(u32, wgpu::BindingResource<'_>)> {
        let s = self.scratch;
        let range = |offset: u64, size: u64| {
            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &s.buffer,
                offset,
                size: std::num::NonZeroU64::new(size),
            })
        };
        vec![
            (6, self.a.binding()),
            (7, range(s.parts_at, s.buffer.size() - s.parts_at)),
            (8, range(0, s.counters as u64 * 4)),
        ]
    }
}
