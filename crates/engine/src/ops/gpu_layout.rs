//! How the blocks of a quantized row lie on the GPU: as in the file, except where the
//! file's layout leaves words off a 4-byte boundary, which WGSL can only read as two loads
//! and a funnel shift (`rd_u32`), branching on the alignment — and a subgroup's lanes,
//! which cover several blocks, then take both paths. The loader lays such rows out while
//! it streams them (`model::upload`, `Source::Spread`); tests and the kernel
//! microbenchmark through [`to_gpu_layout`] (`GpuMatrix::upload`).
//!
//! - **Q6_K** (ggml `block_q6_K`: ql[128], qh[64], i8 scales[16], f16 d — 210 bytes, so
//!   every other block starts 2 bytes off a word): each block followed by 2 zero bytes,
//!   212 apart (+0.95 %). Every word of every block is then aligned
//!   (`shaders/decode/q6_k.wgsl`, `matvec/q6_k*.wgsl`).
//! - **Q8_0** (`block_q8_0`: f16 d, 32 × i8 — 34 bytes): the blocks of a row in groups of
//!   eight, each group's eight scales first (16 bytes), then its eight runs of 32 values
//!   (256 bytes) — the same 272 bytes as the file's eight blocks. A row's last group of
//!   m < 8 blocks (rows of K not a multiple of 256: the low-rank products) keeps the
//!   16-byte scale header, `16 + 32 m` bytes. Rows then start on 16 bytes and every run on
//!   an 8-byte boundary (`shaders/decode/q8_0.wgsl`).

use std::borrow::Cow;

use crate::format::DType;

/// Q6_K's block stride on the GPU, bytes.
pub const Q6_K_GPU_BLOCK: usize = 212;

/// Q8_0 blocks a group on the GPU, and a group's bytes (scales, then runs).
pub const Q8_0_GROUP: usize = 8;
const Q8_0_GROUP_BYTES: usize = 16 + 32 * Q8_0_GROUP;

/// Whether rows of `dtype` lie otherwise on the GPU than in the file.
pub fn relaid(dtype: DType) -> bool {
    matches!(dtype, DType::Q6_K | DType::Q8_0)
}

/// Bytes of a row of `n_in` values of `dtype` on the GPU (`None`: not whole blocks).
pub fn gpu_row_bytes(dtype: DType, n_in: usize) -> Option<usize> {
    let file = dtype.bytes_for(n_in)?;
    let blocks = file / dtype.block_bytes().max(1);
    match dtype {
        DType::Q6_K => blocks.checked_mul(Q6_K_GPU_BLOCK),
        DType::Q8_0 => {
            let (groups, tail) = (blocks / Q8_0_GROUP, blocks % Q8_0_GROUP);
            let tail = if tail == 0 { 0 } else { 16 + 32 * tail };
            groups.checked_mul(Q8_0_GROUP_BYTES)?.checked_add(tail)
        }
        _ => Some(file),
    }
}

/// Bytes of a row of `n_in` values of `dtype` in the file and on the GPU, where the rows
/// lie otherwise on the GPU ([`relaid`]) and are whole blocks; `None` elsewhere.
pub fn relaid_rows(dtype: DType, n_in: usize) -> Option<(usize, usize)> {
    let file = dtype.bytes_for(n_in)?;
    let gpu = gpu_row_bytes(dtype, n_in)?;
    (relaid(dtype) && file > 0).then_some((file, gpu))
}

/// Rows of `n_in` values of `dtype` (`src`: whole rows, as in the file) laid out as the
/// kernels read them into `dst` (as many rows of [`gpu_row_bytes`]; gaps zeroed). Bytes
/// of an encoding laid out as in the file, or of rows that are not whole blocks (which the
/// loader refuses before), are copied as they are.
///
/// Panics if `dst` is shorter than the rows.
pub fn fill_gpu_layout(dtype: DType, n_in: usize, src: &[u8], dst: &mut [u8]) {
    let Some((file_row, gpu_row)) = relaid_rows(dtype, n_in) else {
        dst[..src.len()].copy_from_slice(src);
        return;
    };
    let rows = src.len() / file_row;
    let src_rows = src.chunks_exact(file_row);
    for (s, d) in src_rows.zip(dst[..rows * gpu_row].chunks_exact_mut(gpu_row)) {
        match dtype {
            DType::Q6_K => {
                let file_block = DType::Q6_K.block_bytes(); // 210
                let blocks = s.chunks_exact(file_block);
                for (sb, db) in blocks.zip(d.chunks_exact_mut(Q6_K_GPU_BLOCK)) {
                    db[..file_block].copy_from_slice(sb);
                    db[file_block..].fill(0);
                }
            }
            _ => q8_0_row(s, d),
        }
    }
}

/// One Q8_0 row: groups of eight blocks as (eight f16 scales, eight runs of 32 int8).
fn q8_0_row(src: &[u8], dst: &mut [u8]) {
    dst.fill(0);
    let blocks = src.chunks_exact(DType::Q8_0.block_bytes()); // 34
    for (b, block) in blocks.enumerate() {
        let (g, j) = (b / Q8_0_GROUP, b % Q8_0_GROUP);
        let base = g * Q8_0_GROUP_BYTES;
        dst[base + 2 * j..base + 2 * j + 2].copy_from_slice(&block[..2]);
        dst[base + 16 + 32 * j..base + 48 + 32 * j].copy_from_slice(&block[2..]);
    }
}

/// `bytes` (whole rows of `n_in` values of `dtype`, as in the file) as the kernels read
/// them (tests, the kernel microbenchmark; the loader lays them out while it streams them);
/// as they are where [`fill_gpu_layout`] copies them.
pub fn to_gpu_layout(dtype: DType, n_in: usize, bytes: &[u8]) -> Cow<'_, [u8]> {
    let Some((file_row, gpu_row)) = relaid_rows(dtype, n_in) else {
        return Cow::Borrowed(bytes);
    };
    let mut out = vec![0u8; bytes.len() / file_row * gpu_row];
    fill_gpu_layout(dtype, n_in, bytes, &mut out);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8 + 1).collect()
    }

    /// Q6_K blocks move 212 bytes apart with 2 zero bytes after each (whatever was in the
    /// destination); encodings the kernels read as in the file stay as they are.
    #[test]
    fn q6_k_blocks_lie_212_bytes_apart() {
        let src = bytes(2 * 3 * 210); // two rows of 768
        assert_eq!(gpu_row_bytes(DType::Q6_K, 768), Some(3 * 212));
        assert_eq!(gpu_row_bytes(DType::Q6_K, 700), None);
        let out = to_gpu_layout(DType::Q6_K, 768, &src);
        assert_eq!(out.len(), 6 * 212);
        let mut dst = vec![0xaau8; 6 * 212];
        fill_gpu_layout(DType::Q6_K, 768, &src, &mut dst);
        assert_eq!(&dst[..], &out[..]);
        for b in 0..6 {
            assert_eq!(&out[212 * b..212 * b + 210], &src[210 * b..210 * (b + 1)]);
            assert_eq!(&out[212 * b + 210..212 * (b + 1)], &[0, 0]);
        }
        for dtype in [DType::Q4_K, DType::F16, DType::Q5_K] {
            assert_eq!(gpu_row_bytes(dtype, 768), dtype.bytes_for(768));
            assert!(matches!(to_gpu_layout(dtype, 768, &src), Cow::Borrowed(_)));
        }
    }

    /// Q8_0 rows in groups of eight blocks, scales first: a row of 320 values (ten
    /// blocks: a whole group and a tail of two) takes 272 + 16 + 64 bytes, and every
    /// block's scale and run are where the kernels look for them.
    #[test]
    fn q8_0_blocks_in_groups_of_eight_scales_first() {
        let k = 320;
        let src = bytes(2 * 10 * 34);
        assert_eq!(gpu_row_bytes(DType::Q8_0, 2560), Some(10 * 272)); // as the file
        assert_eq!(gpu_row_bytes(DType::Q8_0, k), Some(272 + 16 + 64));
        let row = 272 + 16 + 64;
        let out = to_gpu_layout(DType::Q8_0, k, &src);
        assert_eq!(out.len(), 2 * row);
        for r in 0..2 {
            for b in 0..10 {
                let s = &src[(r * 10 + b) * 34..][..34];
                let (g, j) = (b / 8, b % 8);
                let base = r * row + g * 272;
                assert_eq!(&out[base + 2 * j..][..2], &s[..2], "row {r} block {b} d");
                assert_eq!(
                    &out[base + 16 + 32 * j..][..32],
                    &s[2..],
                    "row {r} block {b} q"
                );
            }
            // The tail group's unused scale slots are zero.
            assert!(out[r * row + 272 + 4..r * row + 272 + 16]
                .iter()
                .all(|&v| v == 0));
        }
    }
}
