//! ggml's Q4_K and Q6_K quantizers (`quantize_row_q4_K_ref`, `quantize_row_q6_K_ref`,
//! no importance matrix), and their round-to-nearest variants for large random models.

use bytemuck::Zeroable;
use half::f16;

use super::{get_scale_min_k4, BlockQ4K, BlockQ6K, QK_K};

/// ggml `nearest_int`: round half to even through the float adder (`x + 1.5·2^23` puts
/// the integer in the low mantissa bits), valid for |x| ≤ 2^22 − 1, which every caller
/// guarantees by construction. Bit operations only: no libm call on targets without
/// SSE4.1 `roundss`.
#[inline]
fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// ggml `make_qkx2_quants`: the scale and (negated) min of an affine `nmax`-level
/// quantization of `x` minimising the `weights`-weighted squared error over a small
/// search (`rmin + rdelta * is`, `is = 0..=nstep`). Writes levels to `l`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    if nstep < 1 {
        // No search: the weights only feed the error of the search, skip them.
        for i in 0..n {
            l[i] = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        }
        return (scale, -min);
    }
    let mut best_error = 0.0f32;
    for i in 0..n {
        let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = li as u8;
        let diff = scale * f32::from(l[i]) + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = li as u8;
            let w = weights[i];
            let lf = li as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Quantizes `x` (`x.len()` a multiple of 256) to Q4_K like ggml's
/// `quantize_row_q4_K_ref`: per sub-block of 32 an affine fit by `make_qkx2_quants`
/// (weights `sqrt(mean x²) + |x|`), the 8 scales and mins then quantized to 6 bits
/// against the super-block's `d`, `dmin` (f16), and each element rounded to nearest
/// against its sub-block's decoded scale and min. A trailing partial super-block is
/// quantized as if zero-padded (callers pass whole rows).
pub fn quantize_q4_k(x: &[f32]) -> Vec<BlockQ4K> {
    per_super_block(x, |b| quantize_block_q4_k(b, 20))
}

/// [`quantize_q4_k`] without the scale search (`make_qkx2_quants` with `nstep = 0`: each
/// sub-block's scale and min come straight from its min and max, then round to nearest).
/// About 10× faster, ~10 % more RMS error; used to synthesise large random models.
pub fn quantize_q4_k_rtn(x: &[f32]) -> Vec<BlockQ4K> {
    per_super_block(x, |b| quantize_block_q4_k(b, 0))
}

/// `quantize_block` over each super-block of `x`, a trailing partial one zero-padded.
fn per_super_block<B>(x: &[f32], quantize_block: impl Fn(&[f32; QK_K]) -> B) -> Vec<B> {
    x.chunks(QK_K)
        .map(|chunk| {
            let mut xs = [0.0f32; QK_K];
            xs[..chunk.len()].copy_from_slice(chunk);
            quantize_block(&xs)
        })
        .collect()
}

fn quantize_block_q4_k(x: &[f32; QK_K], nstep: i32) -> BlockQ4K {
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut scales = [0.0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 32 {
        let xj = &x[32 * j..32 * j + 32];
        if nstep > 0 {
            let sum_x2: f32 = xj.iter().fold(0.0, |a, v| a + v * v);
            let av_x = (sum_x2 / 32.0).sqrt();
            for (w, v) in weights.iter_mut().zip(xj) {
                *w = av_x + v.abs();
            }
        }
        let (scale, min) = make_qkx2_quants(
            xj,
            &weights,
            15,
            &mut l[32 * j..32 * j + 32],
            &mut laux,
            -1.0,
            0.1,
            nstep,
        );
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..QK_K / 32 {
        // C: `uint8_t ls = nearest_int(...)` then MIN(63, ls); values are in [0, 63].
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let dj = d.to_f32() * f32::from(sc);
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dj).clamp(0, 15) as u8;
        }
    }
    let mut qs = [0u8; QK_K / 2];
    for n in 0..QK_K / 64 {
        for k in 0..32 {
            qs[n * 32 + k] = l[n * 64 + k] | (l[n * 64 + k + 32] << 4);
        }
    }
    BlockQ4K {
        d,
        dmin,
        scales: packed,
        qs,
    }
}

/// ggml `GROUP_MAX_EPS`: groups whose largest magnitude is below this are all-zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// The value of largest magnitude in `x` (first one on ties) and its magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// ggml `make_qx_quants` with `rmse_type = 1` (`search`) or `rmse_type = 0` (plain round
/// to nearest against `max / -nmax`).
fn make_qx_quants_q6(search: bool, x: &[f32], nmax: i32, out: &mut [i8]) -> f32 {
    if search {
        return make_qx_quants_rmse1(x, nmax, out);
    }
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (nearest_int(iscale * v).clamp(-nmax, nmax - 1) + nmax) as i8;
    }
    1.0 / iscale
}

/// ggml `make_qx_quants` with `rmse_type = 1` (weights `x²`) and no importance matrix:
/// symmetric `nmax`-level quantization of `x`, levels `l + nmax` written to `out`,
/// returns the scale. Searches `nmax ± 0.1·is`, `is ∈ [-9, 9]`.
fn make_qx_quants_rmse1(x: &[f32], nmax: i32, out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = (l + nmax) as i8;
        let w = v * v;
        let lf = l as f32;
        sumlx += w * v * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            let w = v * v;
            let lf = l as f32;
            sumlx += w * v * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in out.iter_mut().zip(x) {
                let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
                *o = (l + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Quantizes `x` (a multiple of 256 long) to Q6_K like ggml's `quantize_row_q6_K_ref`:
/// per sub-block of 16 a symmetric 6-bit fit (`make_qx_quants`, weights `x²`), the 16
/// scales quantized to i8 against the super-block's f16 `d`, then each element rounded
/// to nearest against its decoded scale. llama-quantize's Q4_K_M stores `output.weight`
/// as Q6_K.
pub fn quantize_q6_k(x: &[f32]) -> Vec<BlockQ6K> {
    per_super_block(x, |b| quantize_block_q6_k(b, true))
}

/// [`quantize_q6_k`] without the scale search (`make_qx_quants` with `rmse_type = 0`:
/// scale = max / −32, round to nearest). Several times faster; used to synthesise large
/// random models.
pub fn quantize_q6_k_rtn(x: &[f32]) -> Vec<BlockQ6K> {
    per_super_block(x, |b| quantize_block_q6_k(b, false))
}

fn quantize_block_q6_k(x: &[f32; QK_K], search: bool) -> BlockQ6K {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for ib in 0..QK_K / 16 {
        let scale = make_qx_quants_q6(
            search,
            &x[16 * ib..16 * ib + 16],
            32,
            &mut l[16 * ib..16 * ib + 16],
        );
        scales[ib] = scale;
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        return BlockQ6K::zeroed();
    }
    let iscale = -128.0 / max_scale;
    let d = f16::from_f32(1.0 / iscale);
    let mut sc = [0i8; QK_K / 16];
    for (s, &v) in sc.iter_mut().zip(scales.iter()) {
        // C: MIN(127, nearest_int(...)) stored in int8_t; the minimum is -128 by design.
        *s = nearest_int(iscale * v).min(127) as i8;
    }
    for j in 0..QK_K / 16 {
        let dj = d.to_f32() * f32::from(sc[j]);
        if dj == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / dj).clamp(-32, 31);
            l[16 * j + ii] = (q + 32) as i8;
        }
    }
    let mut ql = [0u8; QK_K / 2];
    let mut qh = [0u8; QK_K / 4];
    for n in 0..QK_K / 128 {
        let j = n * 128;
        for k in 0..32 {
            let lv = |o: usize| l[j + k + o] as u8;
            ql[n * 64 + k] = (lv(0) & 0x0f) | ((lv(64) & 0x0f) << 4);
            ql[n * 64 + k + 32] = (lv(32) & 0x0f) | ((lv(96) & 0x0f) << 4);
            qh[n * 32 + k] =
                (lv(0) >> 4) | ((lv(32) >> 4) << 2) | ((lv(64) >> 4) << 4) | ((lv(96) >> 4) << 6);
        }
    }
    BlockQ6K {
        ql,
        qh,
        scales: sc,
        d,
    }
}
