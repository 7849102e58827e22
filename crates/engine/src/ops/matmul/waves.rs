//! A wide tensor-core product whose tiles end in a mostly empty wave (the channel-mix key
//! of a 2.9B model at 512 tokens: 320 tiles for an H100's 264 slots) as two products of
//! its own kernels: the first rows as whole-depth tiles that fill the whole waves, and the
//! remaining rows in k slices ([`coop_waves`]) that make one short wave, with their reduce
//! step. (One grouped dispatch of both ran the whole-depth tiles at one workgroup per SM:
//! the group's table indexing costs the tile kernel registers.)

use super::{coop_tile, coop_waves, matmul, matmul_split, LoraArgs, MatmulArgs};
use crate::error::Result;
use crate::ops::{Ctx, GpuMatrix, Node, Small};

/// Rows `r0..r1` of the product `(m, a)` as a product of their own: W from row r0 on, y,
/// the bias and the LoRA term's `B` rows shifted by r0.
pub(crate) fn rows_of(
    m: &GpuMatrix,
    a: &MatmulArgs,
    r0: usize,
    r1: usize,
) -> (GpuMatrix, MatmulArgs) {
    let piece = GpuMatrix {
        name: format!("{} rows {r0}..{r1}", m.name),
        buffer: m.buffer.clone(),
        offset: m.offset + (r0 * m.row_bytes) as u64,
        dtype: m.dtype,
        row0: m.row0,
        n_out: r1 - r0,
        n_in: m.n_in,
        row_bytes: m.row_bytes,
    };
    let args = MatmulArgs {
        y_off: a.y_off + r0,
        bias_off: a.bias_off.map(|b| b + r0),
        lora: a.lora.map(|l| LoraArgs {
            b_off: l.b_off + r0 * l.rank,
            ..l
        }),
        ..*a
    };
    (piece, args)
}

/// The wave split of an `[n, k]` product at `t_cap` tokens on this device: (head rows,
/// tail slices, the tail's scratch in f32), or `None` (no tensor cores, or a product
/// [`coop_waves`] leaves whole).
pub fn waves_plan(
    gpu: &crate::gpu::GpuContext,
    n: usize,
    k: usize,
    t_cap: usize,
) -> Option<(usize, u32, usize)> {
    if !gpu.features.coopmat {
        return None;
    }
    let (bm, bn, _) = coop_tile(
        &gpu.tuning,
        n as u32,
        gpu.limits.max_compute_workgroup_storage_size,
    );
    let (head, ks) = coop_waves(&gpu.tuning, n, k, t_cap, (bm, bn))?;
    Some((head, ks, ks as usize * t_cap * (n - head)))
}

/// `y (+)= act(W x + bias)` (with its LoRA term) on tensor cores as [`coop_waves`] splits
/// it: `[head, tail, reduce]` — rows `0..head` as whole-depth tiles (for passes of at most
/// `MEDIUM_T` tokens — `SMALL_T` where the product has no medium variant — this node runs
/// the whole product's medium and matrix × vector variants), rows `head..n` in k slices
/// into `scratch` and the reduce step that sums them (both nothing for such passes). `None` where the product is not split that way: no tensor cores,
/// tiles that fill their waves, or a tail beyond `scratch` (`ks × t_cap × (n − head)` f32).
///
/// Errors: as [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_waves(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    a: &MatmulArgs,
    scratch: &wgpu::Buffer,
    t_cap: usize,
) -> Result<Option<[Node; 3]>> {
    let Some((head, ks, tail_f32)) = waves_plan(cx.gpu, m.n_out, m.n_in, t_cap) else {
        return Ok(None);
    };
    if tail_f32 as u64 * 4 > scratch.size() {
        return Ok(None);
    }
    let (hm, ha) = rows_of(m, a, 0, head);
    let (tm, ta) = rows_of(m, a, head, m.n_out);
    let whole = matmul(cx, op, layer, m, vecs, act, None, a)?;
    let mut first = matmul(cx, op, layer, &hm, vecs, act, None, &ha)?;
    first.small = whole.small;
    let (mut tail, mut reduce) = matmul_split(cx, op, layer, &tm, vecs, act, &ta, scratch, ks)?;
    // Passes that the head node runs whole (its medium and decode variants): the tail
    // and its reduce step do nothing.
    let max = first.small.as_ref().map_or(0, |s| s.max);
    for n in [&mut tail, &mut reduce] {
        n.small = Some(Small {
            count: a.rows,
            max,
            node: Box::new(n.skip()),
        });
    }
    Ok(Some([first, tail, reduce]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::matmul::{reference, Act, MEDIUM_T};
    use crate::ops::testing::*;
    use crate::ops::{Count, Dims};
    use crate::DType;

    /// The split's shape: the 2.9B key at 512 tokens is 64 whole row tiles + 16 in 4
    /// slices; products that fill their waves, narrow ones and short ones stay whole.
    #[test]
    fn waves_split_only_a_mostly_empty_last_wave() {
        let t = crate::gpu::Tuning::default();
        assert_eq!(
            coop_waves(&t, 10240, 2560, 512, (128, 128)),
            Some((8192, 4))
        );
        // 16384 rows at 512 tokens: exactly two waves.
        assert_eq!(coop_waves(&t, 16384, 4096, 512, (128, 128)), None);
        // 3 × 80 tiles: one wave.
        assert_eq!(coop_waves(&t, 10240, 2560, 384, (128, 128)), None);
        assert_eq!(coop_waves(&t, 4096, 2560, 512, (128, 128)), None);
        // A last wave more than half full (33 × 4 tiles past two waves): no gain worth the
        // scratch; 8 × 4 past them: 5 slices (k / 512).
        assert_eq!(coop_waves(&t, 161 * 128, 2560, 512, (128, 128)), None);
        assert_eq!(
            coop_waves(&t, 136 * 128, 2560, 512, (128, 128)),
            Some((16384, 5))
        );
        // Not with `RWKV_WAVES=0`.
        let off = crate::gpu::Tuning {
            waves: false,
            ..t.clone()
        };
        assert_eq!(coop_waves(&off, 10240, 2560, 512, (128, 128)), None);
        // Slices of at least 16 steps of 32.
        assert_eq!(
            coop_waves(&t, 10240, 1024, 512, (128, 128)),
            Some((8192, 2))
        );
        assert_eq!(coop_waves(&t, 10240, 960, 512, (128, 128)), None);
    }

    /// A wide F16 product with relu² (and with a LoRA term, as the channel-mix key takes
    /// it) through [`matmul_waves`] at 130 and 200 tokens with a 512-token capacity: the
    /// head's and the tail's rows equal the reference. At 5 tokens (a decode pass) and 40
    /// (a medium pass) the head node runs the whole product's matrix × vector or medium
    /// variant, the tail and its reduce step nothing.
    #[test]
    fn waves_match_reference() {
        let (n, k, r) = (10240usize, 1024usize, 32usize);
        let w = rand_vec(11, n * k, 0.1);
        let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
        let wf: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
        let b16: Vec<half::f16> = rand_vec(12, n * r, 0.3)
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect();
        let bf: Vec<f32> = b16.iter().map(|v| v.to_f32()).collect();
        for (t, lora) in [(5usize, true), (40, true), (130, false), (200, true)] {
            let h = Harness::new(Dims {
                n_tokens: t as u32,
                ..Default::default()
            });
            let bytes = bytemuck::cast_slice(&w16);
            let m = GpuMatrix::upload(&h.gpu, "key".into(), DType::F16, bytes, n, k).unwrap();
            let x = rand_vec(13, t * k, 1.0);
            let hid = rand_vec(14, t * r, 1.0);
            let mut act = x.clone();
            let h_off = act.len();
            act.extend(&hid);
            let y_off = act.len();
            act.resize(y_off + t * n, 7.0);
            let act_buf = h.f32_buf(&act);
            let b_bytes = bytemuck::cast_slice(&b16);
            let lora_buf = buffer::storage_init(&h.gpu, "lora", b_bytes).unwrap();
            let vecs = h.f32_buf(&[0.0; 4]);
            let args = MatmulArgs {
                x_off: 0,
                x_stride: k,
                y_off,
                y_stride: n,
                act: Act::ReluSq,
                accumulate: false,
                add_before_act: false,
                bias_off: None,
                rows: Count::Tokens,
                scale: 1.0,
                lora: lora.then_some(LoraArgs {
                    h_off,
                    h_stride: r,
                    rank: r,
                    b_off: 0,
                }),
            };
            let cx = Ctx {
                lora: Some(&lora_buf),
                ..h.ctx()
            };
            let scratch = buffer::storage(&h.gpu, "scratch", (2 * 512 * 2048 * 4) as u64);
            let got = matmul_waves(&cx, "key", None, &m, &vecs, &act_buf, &args, &scratch, 512);
            let Some(nodes) = got.unwrap() else {
                // No tensor cores (lavapipe): nothing to split.
                assert!(!h.gpu.features.coopmat);
                return;
            };
            if t as u32 <= MEDIUM_T {
                assert!(nodes[1].pick(&h.dims).grid.size(&h.dims).is_none());
                assert!(nodes[2].pick(&h.dims).grid.size(&h.dims).is_none());
            }
            h.run(&nodes);
            let got = h.read(&act_buf, y_off, t * n);
            // The LoRA term as r more columns of W and of x.
            let kr = if lora { k + r } else { k };
            let mut wx = Vec::with_capacity(n * kr);
            for o in 0..n {
                wx.extend(&wf[o * k..(o + 1) * k]);
                if lora {
                    wx.extend(&bf[o * r..(o + 1) * r]);
                }
            }
            let mut xr = Vec::with_capacity(t * kr);
            for ti in 0..t {
                xr.extend(&x[ti * k..(ti + 1) * k]);
                if lora {
                    xr.extend(&hid[ti * r..(ti + 1) * r]);
                }
            }
            let want = reference(&wx, n, kr, &xr, None, Act::ReluSq);
            // Both row ranges, the last row included.
            for (lo, hi) in [(0, 8192), (8192, n)] {
                let err = (0..t)
                    .flat_map(|ti| (lo..hi).map(move |o| ti * n + o))
                    .map(|i| (got[i] - want[i]).abs() / (1.0 + want[i].abs()))
                    .fold(0.0f32, f32::max);
                assert!(err < 2e-2, "T={t} rows {lo}..{hi}: max rel |Δ| {err}");
            }
        }
    }
}
