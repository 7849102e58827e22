//! Several tensor-core products of one weight buffer in one dispatch: `matmul_coop` and
//! `matmul_reduce` with GROUP = 1. A prefill pass runs the low-rank chains' first products
//! (and the adapters' `A x` of r, k, v) and the chains' second products this way: each is
//! a few dozen to a few hundred workgroups of a few k-steps, latency-bound alone (H100,
//! 2.9B at 512 tokens: 16–36 µs each, 15 % of the pass with their reduce steps), and
//! together they fill the GPU once.

use super::{
    coop_bt, coop_pf2, coop_rotate, coop_tile, CoopSpec, MatmulArgs, Params, ReduceSpec, SMALL_T,
};
use crate::error::Result;
use crate::ops::decode::gpu_native;
use crate::ops::{buffer_range, op_err, Count, Ctx, GpuMatrix, Grid, Node, Small};

/// Products one grouped dispatch takes (the shaders' `Group` table).
pub const MAX_GROUP: usize = 8;

/// Mirrors `struct Group` of `shaders/product/group.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Group {
    pub(crate) nseg: u32,
    pub(crate) _g: [u32; 3],
    pub(crate) wg0: [u32; MAX_GROUP],
    pub(crate) seg: [Params; MAX_GROUP],
}

/// One product of a [`matmul_group`]: its matrix, where it reads and writes, and its k
/// slices (1: the epilogue in the tile kernel; more: raw slices, summed by the reduce).
#[derive(Clone, Copy)]
pub struct GroupItem<'a> {
    pub m: &'a GpuMatrix,
    pub args: MatmulArgs,
    pub ks: u32,
}

/// Whether `items` can be one [`matmul_group`] on this device: tensor cores; 2 to
/// [`MAX_GROUP`] products; matrices in one buffer and one encoding the kernels read, each
/// at a 16-byte offset, their span within one binding; the same tile shape; all split or
/// none; all with a LoRA term (aligned for the tiles, as [`super::matmul`] asks) or none;
/// tokens (not gathered rows); x offsets and strides multiples of 4.
pub fn tile_groupable(cx: &Ctx, items: &[GroupItem]) -> bool {
    let Some(first) = items.first() else {
        return false;
    };
    let wg_bytes = cx.gpu.limits.max_compute_workgroup_storage_size;
    let tile = |m: &GpuMatrix| coop_tile(&cx.gpu.tuning, m.n_out as u32, wg_bytes);
    let (lo, hi) = span(items);
    cx.gpu.features.coopmat
        && (2..=MAX_GROUP).contains(&items.len())
        && gpu_native(first.m.dtype)
        && hi - lo <= cx.gpu.max_binding()
        && items.iter().all(|it| {
            it.m.buffer == first.m.buffer
                && it.m.dtype == first.m.dtype
                && it.m.offset % 16 == 0
                && it.m.n_in % 32 == 0
                && tile(it.m) == tile(first.m)
                && (it.ks > 1) == (first.ks > 1)
                && it.args.lora.is_some() == first.args.lora.is_some()
                && it.args.lora.is_none_or(|l| {
                    cx.lora.is_some()
                        && l.rank > 0
                        && l.rank % 32 == 0
                        && l.h_off % 4 == 0
                        && l.h_stride % 4 == 0
                        && l.b_off % 8 == 0
                        && it.m.row0 == 0
                })
                && it.args.rows == Count::Tokens
                && it.args.x_off % 4 == 0
                && it.args.x_stride % 4 == 0
        })
}

/// Lowest offset and end of the items' matrices in their buffer.
fn span(items: &[GroupItem]) -> (u64, u64) {
    let lo = items.iter().map(|it| it.m.offset).min().unwrap_or(0);
    let hi = items
        .iter()
        .map(|it| it.m.offset + it.m.span())
        .max()
        .unwrap_or(0);
    (lo, hi.max(lo))
}

/// A group's table and totals: workgroups (x), rows, f32 of k slices, the LoRA weights
/// its terms read.
struct Table<'a> {
    group: Group,
    wgs: u32,
    rows: u32,
    part: u64,
    lora: Option<&'a wgpu::Buffer>,
}

/// The [`Group`] table of `items` (tiles of `bn` rows; W offsets from `lo`; each split
/// item's slices after the previous ones', `ks × t_cap × N` f32 each).
///
/// Errors: as [`MatmulArgs::lora_fields`].
fn table<'a>(
    cx: &Ctx<'a>,
    op: &'static str,
    items: &[GroupItem],
    bn: u32,
    t_cap: usize,
    lo: u64,
) -> Result<Table<'a>> {
    let split = items.first().is_some_and(|it| it.ks > 1);
    let mut t = Table {
        group: Group {
            nseg: items.len() as u32,
            _g: [0; 3],
            wg0: [0; MAX_GROUP],
            seg: [bytemuck::Zeroable::zeroed(); MAX_GROUP],
        },
        wgs: 0,
        rows: 0,
        part: 0,
        lora: None,
    };
    for (i, it) in items.iter().enumerate() {
        let (m, a) = (it.m, &it.args);
        let ks = it.ks.max(1);
        let (scale, lf, buf) = a.lora_fields(cx, op, m)?;
        t.lora = t.lora.or(buf);
        t.group.wg0[i] = t.wgs;
        t.wgs += (m.n_out as u32).div_ceil(bn) * ks;
        t.rows += m.n_out as u32;
        t.group.seg[i] = Params {
            part_off: t.part as u32,
            w_off: (m.offset - lo) as u32,
            ..Params::of(m, a, scale, lf, ks)
        };
        if split {
            t.part += u64::from(ks) * (t_cap * m.n_out) as u64;
        }
    }
    Ok(t)
}

/// `y_i (+)= act_i(W_i x_i + bias_i)` for every item, as one tensor-core dispatch (passes
/// of more than [`SMALL_T`] tokens; smaller ones dispatch nothing — the products' own
/// decode variants serve them) and, when the items are split, one reduce step over all
/// of them (the second node; `None` otherwise). The slices of item i lie in `scratch` at
/// `Σ_{j<i} ks_j × t_cap × N_j` f32.
///
/// Errors: items that are not [`tile_groupable`], or slices beyond the scratch.
#[allow(clippy::too_many_arguments)]
pub fn matmul_group<'a>(
    cx: &Ctx<'a>,
    op: &'static str,
    layer: Option<usize>,
    items: &[GroupItem<'a>],
    vecs: &'a wgpu::Buffer,
    act: &'a wgpu::Buffer,
    scratch: &'a wgpu::Buffer,
    t_cap: usize,
) -> Result<(Node, Option<Node>)> {
    if !tile_groupable(cx, items) {
        return Err(op_err(
            op,
            format!(
                "{} products cannot share a tensor-core dispatch",
                items.len()
            ),
        ));
    }
    let first = items[0].m;
    let wg_bytes = cx.gpu.limits.max_compute_workgroup_storage_size;
    let (bm, bn, wm) = coop_tile(&cx.gpu.tuning, first.n_out as u32, wg_bytes);
    let split = items[0].ks > 1;
    let (lo, hi) = span(items);
    let t = table(cx, op, items, bn, t_cap, lo)?;
    if t.part * 4 > scratch.size() || t.part > u64::from(u32::MAX) {
        return Err(op_err(
            op,
            format!(
                "slices of {} f32 beyond the {}-byte scratch",
                t.part,
                scratch.size()
            ),
        ));
    }
    let (g, wg, rows, lora_buf) = (t.group, t.wgs, t.rows, t.lora);
    let w = buffer_range(&first.buffer, (lo, hi));
    let mut spec = CoopSpec {
        dtype: first.dtype,
        logits: false,
        bm,
        bn,
        wm,
        // More than 1: the products are split (each by its own Params' ksplit).
        ksplit: if split { 2 } else { 1 },
        pf2: coop_pf2(&cx.gpu.tuning, first.dtype, bm),
        lora: false,
        group: true,
        bt: coop_bt(&cx.gpu.tuning, true, 0, 0),
        rotate: coop_rotate(&cx.gpu.tuning, first.dtype),
    };
    let mut res = vec![
        (2, w.clone()),
        (3, vecs.as_entire_binding()),
        (4, act.as_entire_binding()),
        (5, w),
    ];
    if split {
        res.push((6, scratch.as_entire_binding()));
    }
    if let Some(b) = lora_buf {
        // `B h` as extra k-steps of each product's last slice.
        spec.lora = true;
        res.push((7, b.as_entire_binding()));
    }
    let mut node = cx.node_at(
        op,
        layer,
        &spec,
        &g,
        res,
        Grid::Tiles {
            x: wg,
            count: Count::Tokens,
            per_y: bm,
        },
    )?;
    let decode = |n: &Node| Small {
        count: Count::Tokens,
        max: SMALL_T,
        node: Box::new(n.skip()),
    };
    node.small = Some(decode(&node));
    let reduce = if split {
        let mut r = cx.node_at(
            "matmul_reduce",
            layer,
            &ReduceSpec {
                ksplit: 2,
                group: true,
            },
            &g,
            vec![
                (2, scratch.as_entire_binding()),
                (3, vecs.as_entire_binding()),
                (4, act.as_entire_binding()),
            ],
            Grid::Linear {
                count: Count::Tokens,
                per: rows,
                wg_size: 256,
            },
        )?;
        r.small = Some(decode(&r));
        Some(r)
    } else {
        None
    };
    Ok((node, reduce))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::matmul::{reference, Act, LoraArgs};
    use crate::ops::testing::*;
    use crate::ops::Dims;
    use crate::DType;

    /// F16 matrices at aligned offsets of one buffer (`(rows, K)`), their x and y regions in
    /// one activation buffer; with `ks` slices each; with `lora`, each also a rank-32 term
    /// `B_i h_i` (`h_i` of row stride 36 in the activations, `B_i` f16 in the LoRA buffer).
    fn case(shapes: &[(usize, usize, Act, bool)], ks: &[u32], t: usize, lora: bool) {
        let (r, hs) = (32usize, 36usize);
        let h = Harness::new(Dims {
            n_tokens: t as u32,
            ..Default::default()
        });
        let mut bytes = Vec::new();
        let mut ws = Vec::new();
        let mut offs = Vec::new();
        for (i, &(n, k, _, _)) in shapes.iter().enumerate() {
            bytes.resize(bytes.len().next_multiple_of(256), 0);
            let w = rand_vec(70 + i as u64, n * k, 0.2);
            let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            ws.push(w16.iter().map(|v| v.to_f32()).collect::<Vec<f32>>());
            offs.push(bytes.len() as u64);
            bytes.extend_from_slice(bytemuck::cast_slice(&w16));
        }
        let buf = buffer::storage_init(&h.gpu, "group", &bytes).unwrap();
        let mats: Vec<GpuMatrix> = shapes
            .iter()
            .zip(&offs)
            .map(|(&(n, k, _, _), &offset)| GpuMatrix {
                name: format!("m{offset}"),
                buffer: buf.clone(),
                offset,
                dtype: DType::F16,
                row0: 0,
                n_out: n,
                n_in: k,
                row_bytes: 2 * k,
            })
            .collect();
        let mut act = Vec::new();
        let mut xs = Vec::new();
        let mut args = Vec::new();
        let mut y0s = Vec::new();
        let mut halves = vec![half::f16::ZERO; 8];
        let mut terms = Vec::new(); // (h, B) as f32
        for (i, &(n, k, a, acc)) in shapes.iter().enumerate() {
            let term = lora.then(|| {
                let h_off = act.len();
                let hid = rand_vec(60 + i as u64, t * hs, 1.0);
                act.extend(&hid);
                let b_off = halves.len();
                let b16: Vec<half::f16> = rand_vec(50 + i as u64, n * r, 0.5)
                    .iter()
                    .map(|&v| half::f16::from_f32(v))
                    .collect();
                halves.extend(&b16);
                halves.resize(halves.len().next_multiple_of(8), half::f16::ZERO);
                terms.push((hid, b16.iter().map(|v| v.to_f32()).collect::<Vec<f32>>()));
                LoraArgs {
                    h_off,
                    h_stride: hs,
                    rank: r,
                    b_off,
                }
            });
            let x_off = act.len();
            let x = rand_vec(80 + i as u64, t * k, 1.0);
            act.extend(&x);
            xs.push(x);
            let y_off = act.len();
            let y0 = rand_vec(90 + i as u64, t * n, 1.0);
            act.extend(&y0);
            y0s.push(y0);
            args.push(MatmulArgs {
                x_off,
                x_stride: k,
                y_off,
                y_stride: n,
                act: a,
                accumulate: acc,
                add_before_act: false,
                bias_off: (i % 2 == 0).then_some(0),
                rows: Count::Tokens,
                scale: if i == 1 { 0.5 } else { 1.0 },
                lora: term,
            });
        }
        let act_buf = h.f32_buf(&act);
        let lora_buf = buffer::storage_init(&h.gpu, "lora", bytemuck::cast_slice(&halves)).unwrap();
        let bias = rand_vec(99, 4096, 0.5);
        let vecs = h.f32_buf(&bias);
        let items: Vec<GroupItem> = mats
            .iter()
            .zip(&args)
            .zip(ks)
            .map(|((m, a), &ks)| GroupItem { m, args: *a, ks })
            .collect();
        let cx = Ctx {
            lora: Some(&lora_buf),
            ..h.ctx()
        };
        if !h.gpu.features.coopmat {
            // No tensor cores (lavapipe): the group is refused, and says so.
            assert!(!tile_groupable(&cx, &items));
            let scratch = buffer::storage(&h.gpu, "scratch", 16);
            assert!(matmul_group(&cx, "g", None, &items, &vecs, &act_buf, &scratch, t).is_err());
            return;
        }
        let slices: usize = items.iter().map(|it| it.ks as usize * t * it.m.n_out).sum();
        let scratch = buffer::storage(&h.gpu, "scratch", (slices.max(4) * 4) as u64);
        let (node, reduce) =
            matmul_group(&cx, "g", None, &items, &vecs, &act_buf, &scratch, t).unwrap();
        assert_eq!(reduce.is_some(), ks[0] > 1);
        if t as u32 <= SMALL_T {
            // Decode passes: the group dispatches nothing (the members' own variants run).
            assert!(node.pick(&h.dims).grid.size(&h.dims).is_none());
            assert!(reduce.is_none_or(|r| r.pick(&h.dims).grid.size(&h.dims).is_none()));
            return;
        }
        let mut nodes = vec![node];
        nodes.extend(reduce);
        h.run(&nodes);
        for (i, &(n, k, a, acc)) in shapes.iter().enumerate() {
            let got = h.read(&act_buf, args[i].y_off, t * n);
            let b = (i % 2 == 0).then(|| &bias[..n]);
            // scale multiplies the raw sum before the bias: fold it into W's reference.
            // (the LoRA term as r more columns of W and x: [W | B] [x | h])
            let s = args[i].scale;
            let kr = if lora { k + r } else { k };
            let mut wsc = Vec::with_capacity(n * kr);
            let mut xr = Vec::with_capacity(t * kr);
            for o in 0..n {
                wsc.extend(ws[i][o * k..(o + 1) * k].iter().map(|v| v * s));
                if let Some((_, bm)) = terms.get(i) {
                    wsc.extend(bm[o * r..(o + 1) * r].iter().map(|v| v * s));
                }
            }
            for ti in 0..t {
                xr.extend(&xs[i][ti * k..(ti + 1) * k]);
                if let Some((hid, _)) = terms.get(i) {
                    xr.extend(&hid[ti * hs..ti * hs + r]);
                }
            }
            let mut want = reference(&wsc, n, kr, &xr, b, a);
            if acc {
                want.iter_mut().zip(&y0s[i]).for_each(|(w, y)| *w += y);
            }
            let err = max_abs(&got, &want);
            // f16 x on the tensor cores: errors grow with sqrt(K).
            assert!(
                err < 2e-2 * (k as f32 / 256.0).sqrt(),
                "product {i} T={t}: max |Δ| {err}"
            );
        }
    }

    /// Few-row first products with different k slices (uneven ones included), and C-row
    /// second products without slices (tanh, sigmoid, bias, a residual add, a scale), at 9
    /// and 130 tokens: each product of the group equals its own reference; at 3 tokens (a
    /// decode pass) the group dispatches nothing.
    #[test]
    fn grouped_products_match_reference() {
        let firsts = [
            (96, 512, Act::None, false),
            (320, 512, Act::None, false),
            (64, 256, Act::None, false),
        ];
        let seconds = [
            (1100, 96, Act::Tanh, false),
            (1100, 320, Act::Sigmoid, false),
            (1100, 64, Act::None, true),
        ];
        for t in [3, 9, 130] {
            case(&firsts, &[3, 4, 2], t, false);
            case(&seconds, &[1, 1, 1], t, false);
        }
    }

    /// r, k and v with their LoRA terms as one group (C-row products without slices, as the
    /// graph groups them), and the same terms on split products (on the last slice).
    #[test]
    fn grouped_products_with_lora_terms() {
        let rkv = [
            (1100, 256, Act::None, false),
            (1100, 256, Act::None, false),
            (1100, 256, Act::None, true),
        ];
        for t in [9, 130] {
            case(&rkv, &[1, 1, 1], t, true);
            case(&rkv, &[2, 3, 2], t, true);
        }
    }
}
