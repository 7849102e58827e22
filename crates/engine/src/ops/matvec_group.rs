//! Up to eight matrix × vector products in one dispatch (`shaders/matvec_group.wgsl`):
//! in a decode step the first products of the low-rank chains with the adapters' first
//! products of r, k and v, or the second products of the chains, or r, k and v — whose
//! matrices the loader puts in one buffer (`GpuMatrix::offset`), plus at most one second
//! buffer of F16 matrices (an adapter's `A`).

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::matmul::{
    matvec_step, mv_lanes, mv_unroll, q8_depth_fits, row_sum_mode, step_files, MatmulArgs, RowSum,
};
use crate::ops::{buffer_range, op_err, Count, Ctx, GpuMatrix, Grid, Node, COMMON};
use crate::DType;

/// Segments one dispatch takes.
pub const MAX_SEGS: usize = 8;

/// The `matvec_group` kernel: the group's buffer in `dtype`, with F32 beside F16 (or F16
/// beside F32) matrices in it (`second`), with a second buffer of F16 matrices
/// (`second_buffer`), with LoRA terms; lanes, row sums, tokens and unrolling as
/// [`crate::ops::matmul::MatvecSpec`]'s; with `wide` (Q4_K alone, no LoRA term) the
/// 8-token kernel with two rows a lane group (`shaders/matvec_group/wide.wgsl`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatvecGroupSpec {
    pub dtype: DType,
    pub lanes: u32,
    pub row_sum: RowSum,
    pub second: bool,
    pub second_buffer: bool,
    pub lora: bool,
    pub one_token: bool,
    pub unroll: u32,
    pub wide: bool,
    /// As [`crate::ops::matmul::MatvecSpec::q8k`]: one-token Q4_K groups (every segment
    /// in the first encoding, no LoRA term) whose workgroups quantize their segment's x
    /// to 8 bits first; the deepest segment's depth, or 0.
    pub q8k: u32,
}

impl KernelSpec for MatvecGroupSpec {
    fn label(&self) -> String {
        format!("matvec_group[{}]", self.dtype)
    }

    fn source(&self) -> Result<String> {
        if self.wide {
            let w = Wgsl::new().u32("LANES", self.lanes).file(COMMON);
            return Ok(with_decode(w, self.dtype, "matvec_group")?
                .file(shader!("product/out_act_vec4.wgsl"))
                .file(self.row_sum.file())
                .file(shader!("matvec_group/head.wgsl"))
                .file(shader!("matvec/q4_k_wide_step.wgsl"))
                .file(shader!("matvec_group/wide.wgsl"))
                .build());
        }
        let mut w = Wgsl::new()
            .u32("LANES", self.lanes)
            .flag("NT1", self.one_token)
            .u32("UNR", self.unroll);
        if self.q8k != 0 {
            w = w.u32("Q8K", self.q8k);
        }
        let w = w.file(COMMON);
        let [step, prologue] = step_files(self.dtype, self.q8k);
        // Source 1: the group's second encoding, `mv_row2` over `mv_step2`.
        let second = match (self.second, self.dtype) {
            (false, _) => shader!("matvec_group/second_none.wgsl"),
            (true, DType::F16) => shader!("matvec_group/second_f32.wgsl"),
            (true, _) => shader!("matvec_group/second_f16.wgsl"),
        };
        // Source 2: F16 matrices of a second buffer (binding 8), `mv_row3` over `mv_step3`.
        let third = match self.second_buffer {
            true => shader!("matvec_group/third_f16.wgsl"),
            false => shader!("matvec_group/third_none.wgsl"),
        };
        Ok(with_decode(w, self.dtype, "matvec_group")?
            .file(shader!("product/out_act_vec4.wgsl"))
            .file(self.row_sum.file())
            .file(step)
            .file(prologue)
            .file(shader!("matvec/row.wgsl"))
            .file(second)
            .file(third)
            .file(shader!("matvec_group/rows.wgsl"))
            .file(shader!("matvec_group/head.wgsl"))
            .file(match self.lora {
                true => shader!("matvec/lora.wgsl"),
                false => shader!("matvec/lora_off.wgsl"),
            })
            .file(shader!("matvec_group.wgsl"))
            .build())
    }
}

/// One product of the group, mirrored by `Seg` of `shaders/matvec_group.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Seg {
    pub(crate) k: u32,
    pub(crate) n: u32,
    pub(crate) row_bytes: u32,
    pub(crate) w_off: u32,
    pub(crate) x_off: u32,
    pub(crate) x_stride: u32,
    pub(crate) y_off: u32,
    pub(crate) y_stride: u32,
    pub(crate) act: u32,
    pub(crate) bias_off: u32,
    pub(crate) wg0: u32,
    pub(crate) src: u32,
    pub(crate) scale: f32,
    pub(crate) lora_rank: u32,
    pub(crate) lora_h: u32,
    pub(crate) lora_stride: u32,
    pub(crate) lora_b: u32,
    pub(crate) _p: [u32; 3],
}

/// Mirrors `Params` of `shaders/matvec_group.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) nseg: u32,
    pub(crate) _p: [u32; 3],
    pub(crate) seg: [Seg; MAX_SEGS],
}

fn floats(d: DType) -> bool {
    matches!(d, DType::F16 | DType::F32)
}

/// Whether `segs` can be one [`matvec_group`] dispatch: at most [`MAX_SEGS`]; the
/// matrices in the first one's buffer in one encoding (or F16 and F32), the others all
/// F16 in one second buffer; each buffer's span within one binding of `max_binding`.
pub fn groupable(segs: &[&GpuMatrix], max_binding: u64) -> bool {
    let Some(first) = segs.first() else {
        return false;
    };
    let second = segs.iter().find(|m| m.buffer != first.buffer);
    let fits = |b: &wgpu::Buffer| {
        let (lo, hi) = span(segs.iter().copied(), b);
        hi - lo <= max_binding
    };
    segs.len() <= MAX_SEGS
        && segs.iter().all(|m| {
            if m.buffer == first.buffer {
                m.dtype == first.dtype || (floats(m.dtype) && floats(first.dtype))
            } else {
                second.is_some_and(|s| m.buffer == s.buffer) && m.dtype == DType::F16
            }
        })
        && fits(&first.buffer)
        && second.is_none_or(|s| fits(&s.buffer))
}

/// Lowest offset and end of the matrices of `segs` in buffer `b`.
fn span<'a>(segs: impl Iterator<Item = &'a GpuMatrix>, b: &wgpu::Buffer) -> (u64, u64) {
    let mut lo = u64::MAX;
    let mut hi = 0;
    for m in segs.filter(|m| m.buffer == *b) {
        lo = lo.min(m.offset);
        hi = hi.max(m.offset + m.span());
    }
    (lo.min(hi), hi)
}

/// The [`Seg`] of `m` with arguments `a`, read from source `src` at `m.offset - base`
/// (its `wg0` set later), and the LoRA weights its term reads.
///
/// Errors: arguments a group does not take (a residual add, gathered rows, a row offset),
/// x offset / stride or K not aligned; as [`MatmulArgs::lora_fields`].
fn segment<'c>(
    cx: &Ctx<'c>,
    op: &'static str,
    m: &GpuMatrix,
    a: &MatmulArgs,
    src: u32,
    base: u64,
) -> Result<(Seg, Option<&'c wgpu::Buffer>)> {
    let (scale, lora, buf) = a.lora_fields(cx, op, m)?;
    if a.accumulate || a.add_before_act || a.rows != Count::Tokens || m.row0 != 0 {
        return Err(op_err(op, format!("{}: unsupported arguments", m.name)));
    }
    if a.x_off % 4 != 0 || a.x_stride % 4 != 0 || m.n_in % 32 != 0 {
        return Err(op_err(
            op,
            format!("{}: x offset/stride or K not aligned", m.name),
        ));
    }
    let sg = Seg {
        k: m.n_in as u32,
        n: m.n_out as u32,
        row_bytes: m.row_bytes as u32,
        w_off: (m.offset - base) as u32,
        x_off: a.x_off as u32,
        x_stride: a.x_stride as u32,
        y_off: a.y_off as u32,
        y_stride: a.y_stride as u32,
        act: a.act as u32,
        bias_off: a.bias_off.map_or(u32::MAX, |o| o as u32),
        wg0: 0,
        src,
        scale,
        lora_rank: lora[0],
        lora_h: lora[1],
        lora_stride: lora[2],
        lora_b: lora[3],
        _p: [0; 3],
    };
    Ok((sg, buf))
}

/// `y_s = act_s(W_s x_s + bias_s)` for each segment `(W_s, args_s)` (no residual add, no
/// row offset; tokens, not gathered rows). See [`groupable`] for the matrices it takes;
/// offsets of x and y multiples of 4.
///
/// Errors: no segments or more than [`MAX_SEGS`], matrices that are not [`groupable`],
/// unsupported arguments.
pub fn matvec_group(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    segs: &[(&GpuMatrix, MatmulArgs)],
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    let Some((first, _)) = segs.first() else {
        return Err(op_err(op, "a group needs a matrix"));
    };
    let mats: Vec<&GpuMatrix> = segs.iter().map(|(m, _)| *m).collect();
    if !groupable(&mats, u64::MAX) {
        return Err(op_err(
            op,
            format!(
                "{} matrices not in one buffer and encoding (plus one buffer of F16), or more than {MAX_SEGS}",
                segs.len()
            ),
        ));
    }
    let second = mats.iter().find(|m| m.buffer != first.buffer).copied();
    let mut p = Params {
        nseg: segs.len() as u32,
        ..Default::default()
    };
    let range1 = span(mats.iter().copied(), &first.buffer);
    let range2 = second.map(|s| span(mats.iter().copied(), &s.buffer));
    let mut wg = 0u32;
    let mut lora_buf = None;
    let mut dt2 = false;
    for (i, (m, a)) in segs.iter().enumerate() {
        let (src, base) = match (second, range2) {
            (Some(s), Some((lo, _))) if m.buffer == s.buffer => (2, lo),
            _ if m.dtype != first.dtype => (1, range1.0),
            _ => (0, range1.0),
        };
        dt2 |= src == 1;
        let (sg, buf) = segment(cx, op, m, a, src, base)?;
        p.seg[i] = sg;
        lora_buf = lora_buf.or(buf);
    }
    let steps = segs
        .iter()
        .map(|(m, _)| m.n_in / matvec_step(m.dtype))
        .max()
        .unwrap_or(1) as u32;
    let rows_max = segs.iter().map(|(m, _)| m.n_out).max().unwrap_or(0);
    let lanes = mv_lanes(steps, rows_max);
    // The 8-token variant's table: twice the rows a workgroup.
    let mut p_wide = p;
    let mut wg_wide = 0u32;
    for (i, (m, _)) in segs.iter().enumerate() {
        p.seg[i].wg0 = wg;
        wg += (m.n_out as u32).div_ceil(256 / lanes);
        p_wide.seg[i].wg0 = wg_wide;
        wg_wide += (m.n_out as u32).div_ceil(2 * 256 / lanes);
    }
    let mut spec = MatvecGroupSpec {
        dtype: first.dtype,
        lanes,
        row_sum: row_sum_mode(cx, lanes),
        second: dt2,
        second_buffer: false,
        lora: false,
        one_token: false,
        unroll: mv_unroll(&cx.gpu.tuning, first.dtype),
        wide: false,
        q8k: 0,
    };
    let mut res = vec![
        (2, buffer_range(&first.buffer, range1)),
        (3, vecs.as_entire_binding()),
        (4, act.as_entire_binding()),
        (5, buffer_range(&first.buffer, range1)),
    ];
    if let (Some(s), Some(r2)) = (second, range2) {
        spec.second_buffer = true;
        res.push((8, buffer_range(&s.buffer, r2)));
    }
    if let Some(b) = lora_buf {
        spec.lora = true;
        res.push((7, b.as_entire_binding()));
    }
    let grid = Grid::Tiles {
        x: wg,
        count: Count::Tokens,
        per_y: 4,
    };
    // Groups serve decode passes only: the 2–8-token variant compiles late. On Q4_K
    // without LoRA terms it is the 8-token kernel (as `matvec`'s, ops/matmul/matvec.rs).
    let wide = first.dtype == DType::Q4_K
        && !dt2
        && !spec.second_buffer
        && !spec.lora
        && matches!(spec.row_sum, RowSum::Subgroup | RowSum::Tree)
        && cx.gpu.tuning.mv_wide;
    let mut node = if wide {
        let wide_spec = MatvecGroupSpec {
            wide: true,
            ..spec.clone()
        };
        let grid = Grid::Tiles {
            x: wg_wide,
            count: Count::Tokens,
            per_y: 8,
        };
        cx.node_at_late(op, layer, &wide_spec, &p_wide, res.clone(), grid)?
    } else {
        cx.node_at_late(op, layer, &spec, &p, res.clone(), grid)?
    };
    // Passes of exactly one token: the kernel compiled for one (as `matvec`'s).
    spec.one_token = true;
    let depth = segs.iter().map(|(m, _)| m.n_in).max().unwrap_or(0);
    if first.dtype == DType::Q4_K
        && !dt2
        && !spec.second_buffer
        && !spec.lora
        && segs.iter().all(|(m, _)| q8_depth_fits(cx, m.n_in))
        && q8_depth_fits(cx, depth)
    {
        spec.q8k = depth as u32;
    }
    node.small = Some(crate::ops::Small {
        count: Count::Tokens,
        max: 1,
        node: Box::new(cx.node_at(op, layer, &spec, &p, res, grid)?),
    });
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::matmul::{reference, Act};
    use crate::ops::testing::*;
    use crate::ops::Dims;
    use crate::DType;

    /// Three matrices (F16, F32, F16 — or F32, F16, F16: the group's first encoding F32)
    /// of different shapes at aligned offsets of one buffer and two F16 matrices in a
    /// second buffer (an adapter's `A`), with their own inputs, outputs, biases and
    /// epilogues, for 1 and 3 tokens; with subgroup sums and without.
    #[test]
    fn matches_separate_products() {
        let mut plain = (*gpu()).clone();
        plain.features.subgroup = false;
        for g in [gpu(), std::sync::Arc::new(plain)] {
            for t in [1, 3] {
                for f32_at in [1, 0] {
                    check(g.clone(), t, f32_at);
                }
            }
        }
    }

    /// The group above with matrix `f32_at` of the first buffer in F32.
    fn check(gpu: std::sync::Arc<crate::gpu::GpuContext>, t: usize, f32_at: usize) {
        let h = Harness::with_gpu(
            Dims {
                n_tokens: t as u32,
                ..Default::default()
            },
            gpu,
        );
        // (rows, K, activation, buffer)
        let shapes = [
            (96usize, 256usize, Act::Tanh, 0),
            (40, 64, Act::Sigmoid, 0),
            (320, 256, Act::None, 0),
            (64, 256, Act::None, 1),
            (32, 128, Act::None, 1),
        ];
        let mut bytes = [Vec::new(), Vec::new()];
        let mut mats = Vec::new();
        let mut ws = Vec::new();
        // One matrix in F32 beside F16 ones (llama.cpp keeps the decay LoRA F32).
        for (i, &(n, k, _, bi)) in shapes.iter().enumerate() {
            let w = rand_vec(90 + i as u64, n * k, 0.2);
            let b = &mut bytes[bi];
            // The second buffer's matrices start past offset 0, as in an adapter's buffer.
            b.resize(b.len().next_multiple_of(256) + 256 * bi, 0);
            if i == f32_at {
                mats.push((b.len() as u64, n, k, DType::F32, bi));
                b.extend_from_slice(bytemuck::cast_slice(&w));
                ws.push(w);
            } else {
                let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
                ws.push(w16.iter().map(|v| v.to_f32()).collect::<Vec<f32>>());
                mats.push((b.len() as u64, n, k, DType::F16, bi));
                b.extend_from_slice(bytemuck::cast_slice(&w16));
            }
        }
        let bufs = [0, 1].map(|i| buffer::storage_init(&h.gpu, "group", &bytes[i]).unwrap());
        let gm: Vec<GpuMatrix> = mats
            .iter()
            .map(|&(offset, n, k, dtype, bi)| GpuMatrix {
                name: format!("m{offset}"),
                buffer: bufs[bi].clone(),
                offset,
                dtype,
                row0: 0,
                n_out: n,
                n_in: k,
                row_bytes: if dtype == DType::F32 { 4 * k } else { 2 * k },
            })
            .collect();
        // act: x_i [t, k_i] then y_i [t, n_i]
        let mut act = Vec::new();
        let mut xs = Vec::new();
        let mut args = Vec::new();
        let bias = rand_vec(99, 512, 0.5);
        for (i, &(n, k, a, _)) in shapes.iter().enumerate() {
            let x = rand_vec(95 + i as u64, t * k, 1.0);
            let x_off = act.len();
            act.extend(&x);
            xs.push(x);
            args.push((x_off, n, k, a));
        }
        let mut margs = Vec::new();
        for (i, &(x_off, n, k, a)) in args.iter().enumerate() {
            let y_off = act.len();
            act.extend(vec![0.0; t * n]);
            margs.push(MatmulArgs {
                x_off,
                x_stride: k,
                y_off,
                y_stride: n,
                act: a,
                accumulate: false,
                add_before_act: false,
                bias_off: (i == 1).then_some(0),
                rows: Count::Tokens,
                scale: if i == 3 { 0.5 } else { 1.0 },
                lora: None,
            });
        }
        let act_buf = h.f32_buf(&act);
        let segs: Vec<(&GpuMatrix, MatmulArgs)> = gm.iter().zip(margs.iter().copied()).collect();
        let node =
            matvec_group(&h.ctx(), "group", None, &segs, &h.f32_buf(&bias), &act_buf).unwrap();
        h.run(&[node]);
        for (i, &(n, k, a, _)) in shapes.iter().enumerate() {
            let got = h.read(&act_buf, margs[i].y_off, t * n);
            let b = (i == 1).then(|| &bias[..n]);
            let mut want = reference(&ws[i], n, k, &xs[i], b, a);
            if i == 3 {
                want.iter_mut().for_each(|v| *v *= 0.5);
            }
            let err = max_abs(&got, &want);
            assert!(
                err < 2e-3,
                "segment {i} T={t} F32 at {f32_at}: max |Δ| {err}"
            );
        }
    }

    /// Three Q4_K matrices in one buffer (r, k and v of a decode step: 300, 200 and 40
    /// rows, the last workgroups part-filled) at every T of 1–8 — the 8-token kernel
    /// (`shaders/matvec_group/wide.wgsl`) with subgroup sums and the workgroup-memory
    /// tree, and the 4-token kernel (`RWKV_MV_WIDE=0`); at T = 1 the one-token kernel
    /// with 8-bit x (against W times x rounded to 8 bits: `q8_rounded`) and with f32 x
    /// (`RWKV_MV_Q8=0`) — with a bias and an epilogue.
    #[test]
    fn q4k_group_every_small_t() {
        let mut gpus = Vec::new();
        for (wide, subgroup, q8) in [
            (true, true, true),
            (true, false, true),
            (false, true, false),
        ] {
            let mut g = (*gpu()).clone();
            g.tuning.mv_wide = wide;
            g.tuning.mv_q8 = q8;
            g.features.subgroup &= subgroup;
            gpus.push(std::sync::Arc::new(g));
        }
        let shapes = [(300usize, Act::None), (200, Act::Tanh), (40, Act::Sigmoid)];
        let k = 512;
        let mut bytes = Vec::new();
        let mut ws = Vec::new();
        let mut offsets = Vec::new();
        for (i, &(n, _)) in shapes.iter().enumerate() {
            let w = rand_vec(70 + i as u64, n * k, 0.2);
            let q: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
            let mut wd = vec![0f32; n * k];
            crate::quant::dequantize(DType::Q4_K, &q, &mut wd).unwrap();
            bytes.resize(bytes.len().next_multiple_of(256), 0);
            offsets.push(bytes.len() as u64);
            bytes.extend_from_slice(&q);
            ws.push(wd);
        }
        for g in gpus {
            for t in 1..=8 {
                let h = Harness::with_gpu(
                    Dims {
                        n_tokens: t as u32,
                        ..Default::default()
                    },
                    g.clone(),
                );
                let buf = buffer::storage_init(&h.gpu, "group", &bytes).unwrap();
                let x = rand_vec(80 + t as u64, t * k, 1.0);
                let mut act = x.clone();
                // One token with 8-bit x: W times x rounded to 8 bits.
                let x_ref = match t == 1 && g.tuning.mv_q8 {
                    true => q8_rounded(&x),
                    false => x.clone(),
                };
                let bias = rand_vec(81, 300, 0.5);
                let mut gm = Vec::new();
                let mut margs = Vec::new();
                for (i, &(n, a)) in shapes.iter().enumerate() {
                    gm.push(GpuMatrix {
                        name: format!("q{i}"),
                        buffer: buf.clone(),
                        offset: offsets[i],
                        dtype: DType::Q4_K,
                        row0: 0,
                        n_out: n,
                        n_in: k,
                        row_bytes: k / 256 * 144,
                    });
                    margs.push(MatmulArgs {
                        x_off: 0,
                        x_stride: k,
                        y_off: act.len(),
                        y_stride: n,
                        act: a,
                        accumulate: false,
                        add_before_act: false,
                        bias_off: (i == 1).then_some(0),
                        rows: Count::Tokens,
                        scale: 1.0,
                        lora: None,
                    });
                    act.extend(vec![0.0; t * n]);
                }
                let act_buf = h.f32_buf(&act);
                let segs: Vec<(&GpuMatrix, MatmulArgs)> =
                    gm.iter().zip(margs.iter().copied()).collect();
                let node =
                    matvec_group(&h.ctx(), "group", None, &segs, &h.f32_buf(&bias), &act_buf)
                        .unwrap();
                h.run(&[node]);
                for (i, &(n, a)) in shapes.iter().enumerate() {
                    let got = h.read(&act_buf, margs[i].y_off, t * n);
                    let b = (i == 1).then(|| &bias[..n]);
                    let want = reference(&ws[i], n, k, &x_ref, b, a);
                    let err = max_abs(&got, &want);
                    assert!(err < 2e-3, "segment {i} T={t}: max |Δ| {err}");
                }
            }
        }
    }

    /// Matrices of a third buffer, or a second buffer that is not F16, are refused.
    #[test]
    fn refuses_what_it_cannot_group() {
        let h = Harness::new(Dims::default());
        let m = |dtype: DType, tag: &str| GpuMatrix {
            name: tag.to_string(),
            buffer: buffer::storage(&h.gpu, tag, 4096),
            offset: 0,
            dtype,
            row0: 0,
            n_out: 4,
            n_in: 256,
            row_bytes: if dtype == DType::F32 { 1024 } else { 512 },
        };
        let (a, b, c, d) = (
            m(DType::F16, "a"),
            m(DType::F16, "b"),
            m(DType::F16, "c"),
            m(DType::F32, "d"),
        );
        assert!(groupable(&[&a, &b], u64::MAX));
        assert!(!groupable(&[&a, &b, &c], u64::MAX));
        assert!(!groupable(&[&a, &d], u64::MAX));
        assert!(!groupable(&[&a; MAX_SEGS + 1], u64::MAX));
        assert!(groupable(&[&a; MAX_SEGS], u64::MAX));
    }
}
