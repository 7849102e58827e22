//! The 8-bit activations of the matrix × vector kernels: which products quantize x to 8
//! bits a run of 32 (one token: [`q8_pays`]; 2–8 tokens: [`wide_q8_pays`]), at which depth
//! chunk and lanes (the snippets that read and make it: `step_files` in `matvec.rs`).

use crate::format::DType;
use crate::ops::{Ctx, GpuMatrix};

/// Whether the one-token kernel of `m` takes 8-bit activations (`MatvecSpec::q8k`): Q4_K or
/// Q6_K weights without a LoRA term (`lora`), writing the activations (not `logits`), at a
/// depth [`q8_depth_fits`].
pub(crate) fn q8_pays(cx: &Ctx, m: &GpuMatrix, lora: bool, logits: bool) -> bool {
    matches!(m.dtype, DType::Q4_K | DType::Q6_K) && !lora && !logits && q8_depth_fits(cx, m.n_in)
}

/// Whether a one-token Q4_K kernel of depth `k` may quantize x to 8 bits in workgroup
/// memory (`shaders/matvec/q4_k_q8_x.wgsl`): a whole number of blocks whose 8-bit x (k
/// bytes, and (d, d · Σ q) a run of 32: k / 4 bytes) fits the workgroup memory beside
/// the row sums' tree (4 KiB); `RWKV_MV_Q8=0` (A/B runs) keeps f32 x.
pub(crate) fn q8_depth_fits(cx: &Ctx, k: usize) -> bool {
    let k = k as u64;
    k % 256 == 0
        && k + k / 4 + 4096 <= u64::from(cx.gpu.limits.max_compute_workgroup_storage_size)
        && cx.gpu.tuning.mv_q8 != Some(false)
}

/// Rows a lane group of a one-token kernel with 8-bit x computes ([`MatvecSpec::rows`]):
/// 2 for products of at least 8,192 rows (the channel-mix key, whose 1,280 workgroups of
/// 8 rows would each quantize the whole x for 8 rows), else 1; `RWKV_MV_ROWS` overrides
/// it for tuning runs. H100, `rwkv kernels`, µs with 1 / 2 / 4 / 8 rows: 10240 × 2560
/// 14.8 / 13.7 / 15.3 / 21.2; 2560 × 10240 17.6 / 20.3 / 28.4 / 52.6; 2560 × 2560
/// 6.9 / 8.0 / 10.4 / 17.8 (fewer workgroups than the GPU has SMs; benchmarks.md).
pub(crate) fn q8_rows(tuning: &crate::gpu::Tuning, n_out: usize) -> u32 {
    tuning.mv_rows.unwrap_or(if n_out >= 8192 { 2 } else { 1 })
}

/// The depth chunk (KC) of the 8-token Q4_K kernel with 8-bit x
/// (`shaders/matvec/q4_k_q8_wide_step.wgsl`) for depth `k`: the largest divisor of `k` that is a
/// multiple of 256 and whose 8-bit x for 8 tokens (10 bytes a value: 64 values take 80)
/// fits the workgroup memory beside the row sums' tree (4 KiB) — 2,560 for both depths of
/// a 2.9B model; `None` where none does or `k` is not whole Q4_K blocks.
pub(crate) fn wide_q8_chunk(cx: &Ctx, k: usize) -> Option<u32> {
    let limit = cx.gpu.limits.max_compute_workgroup_storage_size as usize;
    if k == 0 || k % 256 != 0 {
        return None;
    }
    (1..=k / 256)
        .filter(|n| k % n == 0 && (k / n) % 256 == 0)
        .map(|n| k / n)
        .find(|kc| 10 * kc + 4096 <= limit)
        .map(|kc| kc as u32)
}

/// Lanes a row of the 8-token kernel with 8-bit x for `n_out` rows (at depth chunk `kc`):
/// about 80 workgroups of 2 · 256 / lanes rows — each workgroup quantizes its tokens' x
/// for every chunk, so fewer, taller workgroups pay it fewer times — and at most a lane a
/// sub-block pair of the chunk. H100, `rwkv kernels` at T = 8, µs with 4 / 8 / 16 / 32
/// lanes: 2560 × 2560 24.3 / 18.3 / **16.0** / 26.3; 10240 × 2560 **25.0** / 35.1 / 43.5 /
/// 62.1; 2560 × 10240 75.5 / 49.8 / **41.2** / 68.3; 65536 × 2560 **118.5** / 166.7 /
/// 270.3 / 443.0 (benchmarks.md, "8-bit x for batched decode steps").
pub(crate) fn wide_q8_lanes(kc: u32, n_out: usize) -> u32 {
    let fill = (40_960 / n_out.max(1)).max(1) as u32;
    fill.next_power_of_two()
        .clamp(4, 32)
        .min((kc / 64).next_power_of_two().max(4))
}

/// Whether passes of 2–8 tokens of the product of `m` take the 8-token Q4_K kernel with
/// 8-bit x, and its depth chunk: Q4_K, no LoRA term, writing the activations, 8-bit x not
/// turned off (`RWKV_MV_Q8=0`), the 8-token kernels on (`RWKV_MV_WIDE`) and this one
/// (`RWKV_MV_WIDE_Q8`), and a chunk that fits ([`wide_q8_chunk`]).
pub(crate) fn wide_q8_pays(cx: &Ctx, m: &GpuMatrix, lora: bool, logits: bool) -> Option<u32> {
    let t = &cx.gpu.tuning;
    if m.dtype != DType::Q4_K || lora || logits || t.mv_q8 == Some(false) {
        return None;
    }
    if !t.mv_wide || !t.mv_wide_q8 {
        return None;
    }
    wide_q8_chunk(cx, m.n_in)
}
