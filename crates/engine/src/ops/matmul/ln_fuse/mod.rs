//! LayerNorm + token shift fused into the one-token products around it: in a decode step
//! of one token, the channel mix's key makes its own x — the token shift of the
//! LayerNorm of the residual (RWKV_x070's steps 13–14), then 8-bit x — in its prologue
//! (`shaders/matvec/q8_x_ln.wgsl`), and the value, which adds to that residual, saves
//! the LayerNorm of the residual before its add as the new shift state (step 15,
//! `shaders/matvec/ln_save.wgsl`), instead of an `ln_shift` dispatch before the key.
//!
//! The shift state must be read by every workgroup of the key before it is overwritten,
//! so no workgroup of the key may write it; the value's rows are each read (the residual
//! before the add) and written by one invocation, so each saves its own channel there,
//! with the (mean, rstd) the key's first workgroup left in the activations. A dispatch a
//! block less: an H200 spent 6.8 µs of wall time a dispatch on `ln_shift` (2.9B).
//!
//! The value can also open the next block ([`LnEnd::Next`], [`LnNext`]): the workgroups
//! that finish last (a counter in the activations, behind device-scope fences) run that
//! block's time-mix LayerNorm + token shift (steps 1–3: the six lerps and its shift state)
//! over the whole new residual (`shaders/matvec/ln_next.wgsl`), in place of its `ln_shift`
//! dispatch: C / 1024 workgroups' tail instead of a dispatch of as many (H200, 2.9B: 7–10
//! µs of wall time each). Where the key makes no x of its own (keys without 8-bit x), the
//! value does that alone ([`LnEnd::NextOnly`]), and the time mix's output, which adds to
//! the same residual before the channel mix, runs the channel mix's LayerNorm + token
//! shift (one lerp: [`LnNext::mixes`]) the same way in its last workgroups.
//!
//! And the key can hand its ReLU² to a Q4_K value as 8-bit x ([`LnFuse::x8`],
//! [`Q8Handoff`]): its workgroups of 32 rows quantize their rows (runs of 32) in an
//! epilogue, and the value's step reads them, with no prologue of its own — where each of
//! its workgroups (320 on a 2.9B model) would read and quantize the whole x (10,240 values).
//! The same bits as the value's own quantization.

use crate::error::Result;
use crate::ops::{op_err, Count, Ctx, GpuMatrix, Grid, Node};

use super::matvec::{base_spec, one_token_kernel, row_sum_mode, LnEnd, MatvecLora, Q8Handoff};
use super::q8::q8_pays;
use super::{MatmulArgs, Params};

/// Where the fused LayerNorm + token shift reads and writes.
pub struct LnFuse<'a> {
    /// The token metadata (`tmeta`: the token's sequence and its state slot).
    pub meta: &'a wgpu::Buffer,
    /// The state part holding the shift state, its f32 offset in a slot's slice, and
    /// that slice's length.
    pub state: &'a wgpu::Buffer,
    pub state_off: usize,
    pub slot_len: usize,
    /// Offsets (f32) in the layer's vectors of the LayerNorm's weight and bias and of the
    /// lerp's mix, each `[C]`.
    pub ln_w: usize,
    pub ln_b: usize,
    pub mix: usize,
    pub eps: f32,
    /// Offset (f32, a multiple of 4) in the activations of the 4 floats that carry
    /// (mean, rstd) from the key to the value.
    pub stats: usize,
    /// Where the key hands its output to the value as 8-bit x ([`q8_handoff_fits`]):
    /// u32 index (a multiple of 4) in the activations of F / 4 words of int8 values then F / 16
    /// f32 of (d, d · Σ q) per run of 32; `None`: the value quantizes x itself.
    pub x8: Option<usize>,
}

/// A LayerNorm + token shift of the residual a product adds to, run by its last
/// workgroups ([`LnEnd::Next`], [`LnEnd::NextOnly`]): the next block's time mix's after a
/// channel-mix value (six lerps), or the same block's channel mix's after the time mix's
/// output (one).
pub struct LnNext<'a> {
    /// That block's vectors, and in them (f32 offsets) the LayerNorm's weight and bias
    /// (`[C]` each) and the lerps' mixes (`[mixes, C]`).
    pub vecs: &'a wgpu::Buffer,
    pub ln_w: usize,
    pub ln_b: usize,
    pub mix: usize,
    /// Lerps: 6 (`xr, xw, xk, xv, xa, xg`) or 1 (the channel mix's `xk`); at most 6.
    pub mixes: usize,
    /// The state part holding its time-mix shift state, the state's f32 offset in a slot's
    /// slice, and that slice's length.
    pub state: &'a wgpu::Buffer,
    pub state_off: usize,
    pub slot_len: usize,
    /// f32 offset in the activations of the first lerp's output `[C]`, and from one to the
    /// next.
    pub out: usize,
    pub out_stride: usize,
    /// Index (u32) in the activations of the counter of finished workgroups: 0 when the
    /// graph is made (a fresh buffer), and left 0 by every dispatch.
    pub done: usize,
}

impl LnNext<'_> {
    /// Whether every offset the tail reads or writes as vec4s is a multiple of 4 (and
    /// it has 1–6 lerps).
    pub fn aligned(&self) -> bool {
        (1..=6).contains(&self.mixes)
            && [
                self.ln_w,
                self.ln_b,
                self.mix,
                self.state_off,
                self.slot_len,
                self.out,
                self.out_stride,
            ]
            .iter()
            .all(|o| o % 4 == 0)
    }
}

impl LnFuse<'_> {
    /// Whether every offset the kernels read as vec4s is a multiple of 4 (else
    /// [`matvec_ln`] refuses; the graph keeps `ln_shift`).
    pub fn aligned(&self) -> bool {
        [
            self.stats,
            self.ln_w,
            self.ln_b,
            self.mix,
            self.state_off,
            self.slot_len,
            self.x8.unwrap_or(0),
        ]
        .iter()
        .all(|o| o % 4 == 0)
    }
}

/// Params of the kernel: the product's, then the LayerNorm's (mirrored by `Params` of
/// `shaders/matvec/params_ln.wgsl`).
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct LnParams {
    pub(crate) base: Params,
    pub(crate) ln_w: u32,
    pub(crate) ln_b: u32,
    pub(crate) ln_mix: u32,
    pub(crate) ln_state: u32,
    pub(crate) ln_slot_len: u32,
    pub(crate) ln_eps: f32,
    pub(crate) ln_stats: u32,
    pub(crate) ln_done: u32,
    pub(crate) nx_ln_w: u32,
    pub(crate) nx_ln_b: u32,
    pub(crate) nx_mix: u32,
    pub(crate) nx_state: u32,
    pub(crate) nx_slot_len: u32,
    pub(crate) nx_out: u32,
    pub(crate) nx_out_stride: u32,
    pub(crate) nx_wgs: u32,
    pub(crate) nx_tail: u32,
    pub(crate) x8: u32,
    pub(crate) nx_mixes: u32,
    pub(crate) _nx: u32,
}

/// Whether a one-token pass can run the LayerNorm + token shift before `key` (`[F, C]`)
/// inside it and `value` (`[C, F]`) as [`matvec_ln`] does: on (`RWKV_LN_FUSE`), the key's
/// one-token kernel with 8-bit x ([`q8_pays`]), subgroups of at least 8 (the prologue's
/// shuffles), the value's output as wide as the key's input, neither a slice of a larger
/// matrix.
pub fn ln_fuse_fits(cx: &Ctx, key: &GpuMatrix, value: &GpuMatrix) -> bool {
    let (spec, _) = one_token_kernel(cx, key, base_spec(cx, key, false));
    cx.gpu.tuning.ln_fuse
        && q8_pays(cx, key, spec.lora != MatvecLora::None, spec.logits)
        && shuffles(cx)
        && value.n_out == key.n_in
        && key.row0 == 0
        && value.row0 == 0
}

/// Whether the one-token `key` (`[F, C]`, with the LayerNorm prologue: [`ln_fuse_fits`])
/// can hand its output to `value` (`[C, F]`) as 8-bit x ([`LnFuse::x8`]): on
/// (`RWKV_Q8_HANDOFF`), the value's one-token kernel a Q4_K one with 8-bit x and 64-value
/// steps, F a multiple of 32 (whole runs in the key's workgroups of 32 rows), and the
/// value's storage bindings (ten with the next block's tail) within the device's limit.
pub fn q8_handoff_fits(cx: &Ctx, key: &GpuMatrix, value: &GpuMatrix) -> bool {
    let (spec, _) = one_token_kernel(cx, value, base_spec(cx, value, false));
    cx.gpu.tuning.q8_handoff
        && spec.q8k != 0
        && spec.q8_pair
        && key.n_out == value.n_in
        && key.n_out % 32 == 0
        && cx.gpu.limits.max_storage_buffers_per_shader_stage >= 10
}

/// Whether a one-token `value` (`[C, F]`) can open the next block ([`LnEnd::Next`],
/// [`LnEnd::NextOnly`]): on (`RWKV_LN_NEXT`), subgroups of at least 8 (the tail's row
/// statistics are shuffles within runs of 8), and [`tail_wgs`] has workgroups for its C.
pub fn ln_next_fits(cx: &Ctx, value: &GpuMatrix) -> bool {
    cx.gpu.tuning.ln_next && shuffles(cx) && tail_wgs(cx, value.n_out).is_some()
}

/// The workgroups of the value's last that run the next block's LayerNorm + token shift
/// of `c` channels, one vec4 a thread (`shaders/matvec/ln_next.wgsl`): c / 1024 rounded up;
/// on llvmpipe, whose few threads each run a workgroup to its end (a tail workgroup that
/// waited for another might wait for one no thread runs), only one, so only for c ≤ 1024.
fn tail_wgs(cx: &Ctx, c: usize) -> Option<u32> {
    let k = c.div_ceil(1024) as u32;
    (k == 1 || !cx.gpu.is_llvmpipe()).then_some(k)
}

/// Lanes a row of a one-token product reading 8-bit x handed over ([`Q8Handoff::Reads`]),
/// from the `lanes` of its one-token kernel: `RWKV_MV_X8_LANES`, or `RWKV_MV_LANES`, where
/// set ([`crate::gpu::Tuning::mv_x8_lanes`]).
pub(crate) fn x8_reads_lanes(tuning: &crate::gpu::Tuning, lanes: u32) -> u32 {
    tuning.mv_x8_lanes.or(tuning.mv_lanes).unwrap_or(lanes)
}

/// Whether the device's subgroups (as the kernels use them) hold runs of 8 invocations:
/// the fused prologue's sums and 8-bit x are shuffles within them.
fn shuffles(cx: &Ctx) -> bool {
    cx.gpu.features.subgroup && cx.gpu.features.subgroup_min_size >= 8
}

/// The one-token node of `m`'s product with arguments `a` at end `end` of a fused
/// LayerNorm + token shift `ln`: [`LnEnd::In`], x is the residual row at `a.x_off`
/// (`[C]`, C = K) and the product reads `xn + (prev − xn) · mix` of it (8-bit); or
/// [`LnEnd::Out`], a residual add (`a.accumulate`) that saves the residual's LayerNorm as
/// the shift state; or [`LnEnd::Next`], `Out` whose last workgroups then run `next` (the
/// next block's time-mix LayerNorm + token shift of the new residual); or
/// [`LnEnd::NextOnly`], that without the save (`ln`'s metadata and eps only: the channel
/// mix's LayerNorm has its own dispatch). Run it only for passes of one token, the `In`
/// node before the `Out`.
///
/// Errors: `In` without 8-bit x on shuffles ([`ln_fuse_fits`]) or with a residual add;
/// `Out` / `Next` / `NextOnly` without one (or adding before the activation); `Next` /
/// `NextOnly` without `next`
/// or its residual not a whole row `[C]` (`row0` 0, C a multiple of 4); a LoRA term;
/// gathered rows; offsets of x, of the statistics or of `next`'s vectors, state and
/// outputs not multiples of 4; `ln.x8` where the key's rows are not whole runs of 32 or
/// the value has no 64-value Q4_K step with 8-bit x; as [`Ctx::node_at`].
#[allow(clippy::too_many_arguments)]
pub fn matvec_ln(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    a: &MatmulArgs,
    ln: &LnFuse,
    end: LnEnd,
    next: Option<&LnNext>,
) -> Result<Node> {
    let (mut spec, mut x) = one_token_kernel(cx, m, base_spec(cx, m, false));
    let q8 = spec.q8k != 0 && shuffles(cx);
    let whole = m.row0 == 0 && m.n_out % 4 == 0 && a.y_off % 4 == 0;
    let bad = match (end, next) {
        (LnEnd::In, None) => !q8 || a.accumulate || m.row0 != 0,
        (LnEnd::Out, None) => !a.accumulate || a.add_before_act,
        (LnEnd::Next | LnEnd::NextOnly, Some(nx)) => {
            let tail = tail_wgs(cx, m.n_out).is_some_and(|k| k <= x);
            !a.accumulate || a.add_before_act || !whole || !nx.aligned() || !shuffles(cx) || !tail
        }
        _ => true,
    };
    if bad || a.lora.is_some() || a.rows != Count::Tokens {
        return Err(op_err(
            op,
            format!(
                "{}: not a product for the {end:?} end of a fused LayerNorm",
                m.name
            ),
        ));
    }
    if a.x_off % 4 != 0 || a.x_stride % 4 != 0 || !ln.aligned() {
        return Err(op_err(
            op,
            format!(
                "{}: x, the LayerNorm's vectors or the shift state not at multiples of 4",
                m.name
            ),
        ));
    }
    spec.ln = end;
    // The 8-bit handoff: the key in workgroups of 32 rows (8 lanes a row: H200 sweeps of
    // the fused key, benchmarks.md), the value with the 64-value step.
    if let (Some(_), LnEnd::In | LnEnd::Out | LnEnd::Next) = (ln.x8, end) {
        let fits = if end == LnEnd::In {
            spec.x8 = Q8Handoff::Writes;
            spec.lanes = 8;
            spec.rows = 1;
            spec.row_sum = row_sum_mode(cx, 8);
            x = (m.n_out as u32).div_ceil(32);
            m.n_out % 32 == 0
        } else {
            spec.x8 = Q8Handoff::Reads;
            spec.lanes = x8_reads_lanes(&cx.gpu.tuning, spec.lanes);
            spec.row_sum = row_sum_mode(cx, spec.lanes);
            x = (m.n_out as u32).div_ceil(spec.rows * 256 / spec.lanes);
            let tail = end == LnEnd::Out || tail_wgs(cx, m.n_out).is_some_and(|k| k <= x);
            spec.q8_pair && m.n_in % 32 == 0 && tail
        };
        if !fits {
            return Err(op_err(
                op,
                format!("{}: no 8-bit handoff for this product", m.name),
            ));
        }
    }
    let p = LnParams {
        base: Params::of(m, a, a.scale, [0; 4], 1),
        ln_w: ln.ln_w as u32,
        ln_b: ln.ln_b as u32,
        ln_mix: ln.mix as u32,
        ln_state: ln.state_off as u32,
        ln_slot_len: ln.slot_len as u32,
        ln_eps: ln.eps,
        ln_stats: ln.stats as u32,
        ln_done: next.map_or(0, |nx| nx.done as u32),
        nx_ln_w: next.map_or(0, |nx| nx.ln_w as u32),
        nx_ln_b: next.map_or(0, |nx| nx.ln_b as u32),
        nx_mix: next.map_or(0, |nx| nx.mix as u32),
        nx_state: next.map_or(0, |nx| nx.state_off as u32),
        nx_slot_len: next.map_or(0, |nx| nx.slot_len as u32),
        nx_out: next.map_or(0, |nx| nx.out as u32),
        nx_out_stride: next.map_or(0, |nx| nx.out_stride as u32),
        nx_wgs: x,
        nx_tail: next.map_or(0, |_| tail_wgs(cx, m.n_out).unwrap_or(0)),
        x8: ln.x8.unwrap_or(0) as u32,
        nx_mixes: next.map_or(0, |nx| nx.mixes as u32),
        _nx: 0,
    };
    let mut res = vec![
        (2, m.binding()),
        (3, vecs.as_entire_binding()),
        (4, act.as_entire_binding()),
        (5, m.binding()),
        (9, ln.meta.as_entire_binding()),
    ];
    if end != LnEnd::NextOnly {
        res.push((10, ln.state.as_entire_binding()));
    }
    if end == LnEnd::In {
        res.push((11, vecs.as_entire_binding()));
    }
    if let Some(nx) = next {
        res.push((12, nx.vecs.as_entire_binding()));
        res.push((13, nx.state.as_entire_binding()));
        res.push((14, act.as_entire_binding()));
    }
    if spec.x8 != Q8Handoff::None {
        res.push((15, act.as_entire_binding()));
    }
    let grid = Grid::Tiles {
        x,
        count: Count::Tokens,
        per_y: 4,
    };
    cx.node_at(op, layer, &spec, &p, res, grid)
}

#[cfg(test)]
mod handoff_tests;
#[cfg(test)]
mod tests;
