//! Shapes of the matrix kernels: the tensor-core tiles, their k slices and the order of
//! their loads (the W tile transposed, rotated k steps), the matrix × vector step per
//! encoding and the head's lanes.

use crate::gpu::Tuning;

/// Tile shapes of `matmul_coop`: (BM tokens, BN rows, WM tokens per subgroup).
pub const COOP_TILES: [(u32, u32, u32); 4] =
    [(128, 128, 64), (64, 128, 32), (32, 64, 32), (32, 128, 32)];

/// Workgroup memory of a `matmul_coop` tile in bytes: two f16 x and W tiles of stride 40
/// halves, and one 16 × 16 f32 tile per subgroup.
pub fn coop_tile_bytes((bm, bn, wm): (u32, u32, u32)) -> u32 {
    2 * (bm + bn) * 40 * 2 + (bm / wm) * (bn / 32) * 1024
}

/// The `matmul_coop` tile for `n` output rows on a device with `wg_bytes` of workgroup
/// memory. The weights are decoded once per BM tokens and each subgroup's products per
/// tile load grow with its block, so the largest tile that fits wins for the N = C and
/// N = 4C products (the 128 × 128 block with 64 × 32 per subgroup is what reached
/// 118–144 TFLOP/s on an H100 in ../shared/anchor/wgpu-coopmat-probe); 32 × 64 for the
/// low-rank products. `RWKV_COOP_TILE=BMxBN` ([`Tuning::coop_tile`], one of `COOP_TILES`)
/// overrides it for tuning runs.
pub(super) fn coop_tile(tuning: &Tuning, n: u32, wg_bytes: u32) -> (u32, u32, u32) {
    let fits = |t: &&(u32, u32, u32)| coop_tile_bytes(**t) <= wg_bytes;
    let forced = tuning.coop_tile.and_then(|(m, n)| {
        COOP_TILES
            .iter()
            .filter(fits)
            .find(|t| t.0 == m && t.1 == n)
            .copied()
    });
    let small = COOP_TILES[2];
    match forced {
        Some(t) if n >= 1024 => t,
        _ if n >= 1024 => COOP_TILES[..2].iter().find(fits).copied().unwrap_or(small),
        _ => small,
    }
}

/// Passes of more than `SMALL_T` and at most this many tokens (a server's decode step of
/// 9–64 sequences, a short prompt) run a tensor-core product's medium variant
/// ([`medium_plan`]).
pub const MEDIUM_T: u32 = 64;

/// The medium variant of a tensor-core product of `n` rows and depth `k`: its tile and
/// its k slices at most (1: none), or `None` where the product keeps its large variant
/// for every pass of more than `SMALL_T` tokens — fewer than 1024 rows (the low-rank
/// products already take 32-token tiles), a depth below 1024, a tile that does not fit
/// `wg_bytes`, or `RWKV_MEDIUM=0` ([`Tuning::medium`]).
///
/// A pass of 32 tokens in the 128-token tile did the tensor-core work of 128 and, with 8
/// k slices, ran 160 workgroups of 40 steps for the 2,560-row channel-mix value: a
/// quarter of an H100 busy. Swept on an H100 (2.9B Q4_K, `rwkv batch`, ms a step, serving
/// tuning): 64 × 128 tiles with 16 slices of the C-row products and 8 of the wider ones
/// took B = 16 / 32 / 64 from 17.8–18.0 / 19.8–20.3 / 25.0–25.7 to 14.5–15.2 /
/// 17.3–17.5 / 23.1–23.3; 32 × 128 with 16 / 16 was as fast at 16 and 32 and slower at 64
/// (28.6), 32 slices slower than 16, and at B = 128 the large variant stays best.
pub fn medium_plan(
    tuning: &Tuning,
    n: u32,
    k: u32,
    wg_bytes: u32,
) -> Option<((u32, u32, u32), u32)> {
    let tile = COOP_TILES[1];
    if !tuning.medium || n < 1024 || k < 1024 || coop_tile_bytes(tile) > wg_bytes {
        return None;
    }
    let ks: u32 = if n > 4096 { 8 } else { 16 };
    // Each slice at least 4 steps of 32.
    Some((tile, ks.min(k / 128).max(1)))
}

/// Workgroups a split product of C rows aims at: two 128 × 128 tiles fit on each SM at
/// once (registers), so ≈ 2 × the SM count fills one wave. wgpu does not report SMs;
/// 256 is a wave of the large GPUs (H100: 132 SMs, 264 slots) and several waves of a small one.
const SPLIT_TARGET_WGS: usize = 256;

/// Slices of k for a tensor-core product of `n` rows and depth `k` at `t_cap` tokens (see
/// [`matmul_split`]). Products of 1024–4096 rows (the C-row products) get as many slices as
/// keep their workgroups within one wave of [`SPLIT_TARGET_WGS`], each slice ≥ 16 steps of
/// 32: on an H100 at 512 tokens a 2560-row product has 80 tiles, so 3 slices (240
/// workgroups, one wave) beat 2 (160, SMs left idle) and 4 (320, a second wave at 21 %):
/// 2.9B Q4_K prefill 8,478 / 8,118 → 9,499 / 9,457 tok/s with 3, 8,962 / 8,828 with 4. The
/// few-row low-rank first products (n < 1024: 16 tiles of 32 tokens at 512 tokens) are
/// split much finer, slices of 8 steps, up to 16 (H100: a 64-row first product with k =
/// 10240 took 75 µs in 4 slices of 80 steps). Wider products are not split (their scratch
/// would be 4 × C wide; 2 slices of the 10240-row key gave ≤ 2 %). The graph bounds it by
/// its scratch. `RWKV_KSPLIT_WIDE` / `RWKV_KSPLIT_C` (1–8; [`Tuning::ksplit_wide`],
/// [`Tuning::ksplit_c`]) override the wide and the C-row products' slices for tuning runs.
pub fn coop_ksplit(tuning: &Tuning, n: usize, k: usize, t_cap: usize) -> u32 {
    let forced = |knob: Option<u32>| knob.filter(|s| k as u32 / 32 >= *s);
    if n > 4096 {
        return forced(tuning.ksplit_wide).unwrap_or(1);
    }
    if n < 1024 {
        return (k / 256).clamp(1, 16) as u32;
    }
    let tiles = n.div_ceil(128) * t_cap.div_ceil(128);
    let by_wave = (SPLIT_TARGET_WGS / tiles.max(1)).max(1);
    let by_k = (k / (16 * 32)).max(1);
    forced(tuning.ksplit_c).unwrap_or(by_wave.min(by_k).min(8) as u32)
}

/// The wave split of a wide tensor-core product (`n` > 4096 rows, depth `k`, at `t_cap`
/// tokens, tiles of `bm` tokens × `bn` rows): `(head rows, tail slices)` when its tiles
/// end in a partial wave of [`SPLIT_TARGET_WGS`] workgroups at most half full — the first
/// rows as whole-depth tiles in whole waves, the rest in k slices (≤ 8, each ≥ 16 steps
/// of 32) that make about one more wave of short workgroups (`matmul_waves`). On an H100
/// at 512 tokens the 10240-row channel-mix key has 320 tiles for 264 slots (two tiles an
/// SM): the second wave, 21 % full, takes as long as the first. `None` otherwise, or
/// with `RWKV_WAVES=0` ([`Tuning::waves`], A/B runs).
pub fn coop_waves(
    tuning: &Tuning,
    n: usize,
    k: usize,
    t_cap: usize,
    (bm, bn): (u32, u32),
) -> Option<(usize, u32)> {
    if n <= 4096 || !tuning.waves {
        return None;
    }
    let (bm, bn) = (bm as usize, bn as usize);
    let token_tiles = t_cap.div_ceil(bm).max(1);
    let row_tiles = n.div_ceil(bn);
    let whole = row_tiles * token_tiles / SPLIT_TARGET_WGS * SPLIT_TARGET_WGS;
    let head = whole / token_tiles;
    if head == 0 || head >= row_tiles {
        return None;
    }
    let tail = (row_tiles - head) * token_tiles;
    let ks = (SPLIT_TARGET_WGS / tail).min(8).min(k / (16 * 32));
    (ks >= 2).then_some((head * bn, ks as u32))
}

/// Steps a lane of the matrix × vector kernels issues together (`UNR`): 2 for float
/// weights, 1 for block-quantized ones, or `RWKV_MV_UNROLL` ([`Tuning::mv_unroll`]) for
/// tuning runs. H100, same machine, decode tok/s at 1 / 2: 2.9B F16 227.6 / 243.6, 0.1B
/// F16 1,093 / 1,111; 2.9B Q4_K 255.9 / 250.7 (4: 221.5), 0.1B Q4_K 1,058 / 1,021 — a
/// quantized step holds more registers, and more steps in flight cost it more occupancy
/// than they hide.
pub(crate) fn mv_unroll(tuning: &Tuning, dtype: crate::DType) -> u32 {
    let float = matches!(
        dtype,
        crate::DType::F16 | crate::DType::F32 | crate::DType::BF16
    );
    tuning.mv_unroll.unwrap_or(if float { 2 } else { 1 })
}

/// Whether a tensor-core tile loads two steps ahead (`PF2`, see shaders/matmul_coop.wgsl):
/// for F16 weights in 128-token tiles, or as `RWKV_COOP_PF2=0|1` ([`Tuning::coop_pf2`])
/// forces it (A/B runs).
pub(crate) fn coop_pf2(tuning: &Tuning, dtype: crate::DType, bm: u32) -> bool {
    tuning
        .coop_pf2
        .unwrap_or(dtype == crate::DType::F16 && bm == 128)
}

/// Whether a tensor-core tile keeps its W tile transposed in workgroup memory (`BT`,
/// shaders/matmul_coop.wgsl) for a product of `n` rows and depth `k` (`group`: a
/// `matmul_group` tile). `RWKV_COOP_BT` ([`Tuning::coop_bt`]): 0 never, 1 single products
/// of more than 4096 rows or depth, 2 every tile; unset: never. The same products bit for
/// bit. H200, `rwkv kernels` at 512 tokens, µs without / with (F16; Q4_K): 10240 × 2560
/// 424 / 349 (414 / 386), 2560 × 10240 453 / 352 (537 / 472), 2560² 96 / 97 — yet in the
/// 2.9B models (1, on the channel mix's key and value) prefill 512 went F16 12,597 /
/// 12,650 → 11,361 / 11,581 tok/s, Q4_K 10,629 / 10,739 → 10,643 / 10,493: off until a
/// GPU's own runs say otherwise (benchmarks.md, "the tensor-core tiles' loads").
pub(crate) fn coop_bt(tuning: &Tuning, group: bool, n: usize, k: usize) -> bool {
    match tuning.coop_bt {
        Some(2) => true,
        Some(1) => !group && (n > 4096 || k > 4096),
        _ => false,
    }
}

/// Whether a tensor-core tile of `dtype` takes its k steps from a start rotated by its
/// row tile (`ROT`, shaders/matmul_coop.wgsl): for Q4_K weights, or as
/// `RWKV_COOP_ROTATE=0|1` ([`Tuning::coop_rotate`]) forces it. Each row tile's sums then
/// add the same products in another order (within f32 rounding of the order before).
/// H200, 2.9B at 512 tokens, prefill tok/s without / with, two rounds: Q4_K 10,629 /
/// 10,739 → 11,263 / 11,409 (+6 %; `rwkv kernels` 10240 × 2560 414 → 383 µs, 2560 × 10240
/// 537 → 462); F16 12,597 / 12,650 → 10,804 / 11,017, so not for F16 (benchmarks.md,
/// "the tensor-core tiles' loads").
pub(crate) fn coop_rotate(tuning: &Tuning, dtype: crate::DType) -> bool {
    tuning.coop_rotate.unwrap_or(dtype == crate::DType::Q4_K)
}

/// Lanes a row of the one-token head (the logits product, f32 x) of `steps` steps a row:
/// the most lanes, a power of two from 4 to 32, that still give each lane 4 steps —
/// 32 lanes left a 768-wide model's head (48 Q6_K steps a row) 1.5 steps a lane, its
/// 65,536 rows' workgroups each a single round trip. H200, `rwkv profile`, the head's GPU
/// µs at 32 / 16 / 8 / 4 lanes: 0.1B Q4_K_M (768 wide) 45.3 / 35.2 / 35.3 / 40.0, 2.9B
/// (2,560) 96.6 / 97.7 / 97.7 / 115.4 (benchmarks.md, "the one-token head's lanes").
/// `RWKV_HEAD_LANES` ([`Tuning::head_lanes`]) sets it; `None` where `RWKV_MV_LANES`
/// (or llvmpipe's 4) sets every product's lanes.
pub(crate) fn head_lanes(tuning: &Tuning, steps: u32) -> Option<u32> {
    tuning.head_lanes.or_else(|| {
        tuning.mv_lanes.is_none().then(|| {
            let mut lanes = 32;
            while lanes > 4 && steps / lanes < 4 {
                lanes /= 2;
            }
            lanes
        })
    })
}

/// Weights per lane step of the `matvec` kernel for an encoding (`MV_STEP` in
/// shaders/matvec/).
pub(crate) fn matvec_step(dtype: crate::DType) -> usize {
    match dtype {
        crate::DType::Q4_K | crate::DType::Q6_K => 16,
        crate::DType::F32 => 4,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// The rotated steps are Q4_K's default, either way by the knob; the transposed W
    /// tile nowhere by default, on single products of more than 4096 rows or depth with
    /// 1, everywhere with 2.
    #[test]
    fn rotated_steps_for_q4_k_and_the_transposed_tile_by_knob() {
        let t = Tuning::default();
        assert!(coop_rotate(&t, DType::Q4_K));
        assert!(!coop_rotate(&t, DType::F16));
        let off = Tuning {
            coop_rotate: Some(false),
            ..Tuning::default()
        };
        assert!(!coop_rotate(&off, DType::Q4_K));
        let on = Tuning {
            coop_rotate: Some(true),
            ..Tuning::default()
        };
        assert!(coop_rotate(&on, DType::F16));
        assert!(!coop_bt(&t, false, 10240, 2560));
        let wide = Tuning {
            coop_bt: Some(1),
            ..Tuning::default()
        };
        assert!(coop_bt(&wide, false, 10240, 2560));
        assert!(coop_bt(&wide, false, 2560, 10240));
        assert!(!coop_bt(&wide, false, 2560, 2560));
        assert!(!coop_bt(&wide, true, 10240, 2560));
        let all = Tuning {
            coop_bt: Some(2),
            ..Tuning::default()
        };
        assert!(coop_bt(&all, true, 2560, 2560));
    }

    /// The head's lanes: 4 steps a lane at least, within 4–32; the knobs win.
    #[test]
    fn head_lanes_give_each_lane_four_steps() {
        let t = Tuning::default();
        assert_eq!(head_lanes(&t, 48), Some(8)); // 768 wide, Q6_K: 16-value steps
        assert_eq!(head_lanes(&t, 160), Some(32)); // 2,560 wide
        assert_eq!(head_lanes(&t, 64), Some(16)); // 1,024 wide
        assert_eq!(head_lanes(&t, 8), Some(4));
        let knob = Tuning {
            head_lanes: Some(64),
            ..Tuning::default()
        };
        assert_eq!(head_lanes(&knob, 48), Some(64));
        let global = Tuning {
            mv_lanes: Some(4),
            ..Tuning::default()
        };
        assert_eq!(head_lanes(&global, 160), None);
    }
}
