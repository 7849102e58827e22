//! Up to eight matrix × vector products in one dispatch (`shaders/matvec_group.wgsl`):
//! in a decode step the first products of the low-rank chains with the adapters' first
//! products of r, k and v, or the second products of the chains, or r, k and v — whose
//! matrices the loader puts in one buffer (`GpuMatrix::offset`), plus at most one second
//! buffer of F16 matrices (an adapter's `A`).

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::matmul::{
    matvec_step, mv_lanes, mv_unroll, q8_depth_fits, row_sum_mode, step_files, wide_body,
    wide_lanes, wide_q8_chunk, wide_q8_lanes, MatmulArgs, RowSum,
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
    /// With `q8k`: the Q4_K segments take a whole sub-block pair a lane step (64 values
    /// under one read of the block header: `shaders/matvec/q4_k_q8_pair.wgsl`, as
    /// `MatvecSpec::q8_pair`) instead of 16 values (`Tuning::mv_q8_pair`).
    pub q8_pair: bool,
    /// Not 0 (with `wide`): the 8-token kernel takes 8-bit x a chunk of this many values
    /// at a time (`shaders/matvec/q4_k_q8_wide_step.wgsl`), as `MatvecSpec::wide_q8`.
    pub wide_q8: u32,
}

impl KernelSpec for MatvecGroupSpec {
    fn label(&self) -> String {
        format!("matvec_group[{}]", self.dtype)
    }

    fn source(&self) -> Result<String> {
        if self.wide {
            let (w, step) = wide_body(self.wide_q8);
            let w = w.u32("LANES", self.lanes).file(COMMON);
            return Ok(with_decode(w, self.dtype, "matvec_group")?
                .file(shader!("product/out_act_vec4.wgsl"))
                .file(&self.row_sum.wide_file())
                .file(shader!("matvec_group/head.wgsl"))
                .file(step)
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
        let (step, prologue) =
            step_files(self.dtype, self.q8k, self.q8_pair, self.row_sum, self.lanes);
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
            .file(&prologue)
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
/// F16 in one second buffer; each buffer's span within one binding of `max_binding`;
/// Q4_K matrices on 16-byte boundaries (every one-token Q4_K step reads a block's header
/// and nibbles as vec4s: `shaders/matvec/q4_k_pair.wgsl`; a product alone binds its
/// matrix at its own offset, which wgpu already wants on 256).
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
        && segs
            .iter()
            .all(|m| m.dtype != DType::Q4_K || m.offset % 16 == 0)
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
    group_node(cx, op, layer, segs, vecs, act, false)
}

/// The one-token kernel of [`matvec_group`] alone (its small variant, without the 2–8-token
/// one): for a fused dispatch that only one-token passes take. Errors as [`matvec_group`].
pub fn matvec_group_one_token(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    segs: &[(&GpuMatrix, MatmulArgs)],
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    group_node(cx, op, layer, segs, vecs, act, true)
}

fn group_node(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    segs: &[(&GpuMatrix, MatmulArgs)],
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    one_token_only: bool,
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
    // `RWKV_MV_LANES` as for single products (tuning runs, the op tests).
    let lanes = cx
        .gpu
        .tuning
        .mv_lanes
        .unwrap_or_else(|| mv_lanes(steps, rows_max));
    for (i, (m, _)) in segs.iter().enumerate() {
        p.seg[i].wg0 = wg;
        wg += (m.n_out as u32).div_ceil(256 / lanes);
    }
    // The 8-token variant's table: twice the rows a workgroup of `lanes` lanes a row.
    let wide_table = |lanes: u32| {
        let mut pw = p;
        let mut n_wg = 0u32;
        for (i, (m, _)) in segs.iter().enumerate() {
            pw.seg[i].wg0 = n_wg;
            n_wg += (m.n_out as u32).div_ceil(2 * 256 / lanes);
        }
        (pw, n_wg)
    };
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
        q8_pair: false,
        wide_q8: 0,
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
    // One-token passes of Q4_K groups without LoRA terms: 8-bit x for the segments in the
    // group's first buffer and encoding (the prologue runs in their workgroups only; F16
    // segments of a second buffer read f32 x), as `matvec`'s (`q8_pays`).
    let mut one = spec.clone();
    one.one_token = true;
    let firsts = || {
        segs.iter()
            .zip(&p.seg)
            .filter(|(_, sg)| sg.src == 0)
            .map(|((m, _), _)| m.n_in)
    };
    if first.dtype == DType::Q4_K && !dt2 && !spec.lora && firsts().all(|k| q8_depth_fits(cx, k)) {
        one.q8k = firsts().max().unwrap_or(0) as u32;
        // 64-value steps (the segments start on 16 bytes: `groupable`).
        one.q8_pair = cx.gpu.tuning.mv_q8_pair;
    }
    if one_token_only {
        return cx.node_at(op, layer, &one, &p, res, grid);
    }
    // Groups serve decode passes only: the 2–8-token variant compiles late. On Q4_K
    // without LoRA terms it is the 8-token kernel (as `matvec`'s, ops/matmul/matvec.rs).
    let wide = first.dtype == DType::Q4_K
        && !dt2
        && !spec.second_buffer
        && !spec.lora
        && cx.gpu.tuning.mv_wide;
    // With 8-bit x (as `wide_q8_pays`): a depth chunk that divides every segment's depth,
    // and lanes by the group's rows (`wide_q8_lanes`).
    let t = &cx.gpu.tuning;
    let wide_q8 = (wide && t.mv_q8 != Some(false) && t.mv_wide_q8)
        .then(|| {
            let depth = segs.iter().map(|(m, _)| m.n_in).max().unwrap_or(0);
            wide_q8_chunk(cx, depth)
        })
        .flatten()
        .filter(|&kc| segs.iter().all(|(m, _)| m.n_in % kc as usize == 0));
    let wide_spec = match wide_q8 {
        Some(kc) => {
            let rows: usize = segs.iter().map(|(m, _)| m.n_out).sum();
            let lanes = t.mv_lanes.unwrap_or_else(|| wide_q8_lanes(kc, rows));
            Some(MatvecGroupSpec {
                wide: true,
                wide_q8: kc,
                lanes,
                row_sum: row_sum_mode(cx, lanes),
                ..spec.clone()
            })
        }
        None => wide.then(|| {
            let rows: usize = segs.iter().map(|(m, _)| m.n_out).sum();
            let lanes = wide_lanes(t, steps, rows);
            MatvecGroupSpec {
                wide: true,
                lanes,
                row_sum: row_sum_mode(cx, lanes),
                ..spec.clone()
            }
        }),
    };
    let mut node = if let Some(ws) = wide_spec {
        let (p_wide, n_wg) = wide_table(ws.lanes);
        let grid = Grid::Tiles {
            x: n_wg,
            count: Count::Tokens,
            per_y: 8,
        };
        cx.node_at_late(op, layer, &ws, &p_wide, res.clone(), grid)?
    } else {
        cx.node_at_late(op, layer, &spec, &p, res.clone(), grid)?
    };
    // Passes of exactly one token: the kernel compiled for one (as `matvec`'s).
    node.small = Some(crate::ops::Small {
        count: Count::Tokens,
        max: 1,
        node: Box::new(cx.node_at(op, layer, &one, &p, res, grid)?),
    });
    Ok(node)
}

#[cfg(test)]
mod tests;
