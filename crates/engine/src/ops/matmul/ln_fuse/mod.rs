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

use crate::error::Result;
use crate::ops::{op_err, Count, Ctx, GpuMatrix, Grid, Node};

use super::matvec::{base_spec, one_token_kernel, q8_pays, LnEnd};
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
    pub(crate) _p: u32,
}

/// Whether a one-token pass can run the LayerNorm + token shift before `key` (`[F, C]`)
/// inside it and `value` (`[C, F]`) as [`matvec_ln`] does: on (`RWKV_LN_FUSE`), the key's
/// one-token kernel with 8-bit x ([`q8_pays`]), subgroups of at least 8 (the prologue's
/// shuffles), the value's output as wide as the key's input, neither a slice of a larger
/// matrix.
pub fn ln_fuse_fits(cx: &Ctx, key: &GpuMatrix, value: &GpuMatrix) -> bool {
    let (spec, _) = one_token_kernel(cx, key, base_spec(cx, key, false));
    cx.gpu.tuning.ln_fuse
        && q8_pays(cx, key, &spec)
        && shuffles(cx)
        && value.n_out == key.n_in
        && key.row0 == 0
        && value.row0 == 0
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
/// the shift state. Run it only for passes of one token, the `In` node before the `Out`.
///
/// Errors: `In` without 8-bit x on shuffles ([`ln_fuse_fits`]) or with a residual add;
/// `Out` without one (or adding before the activation); a LoRA term; gathered rows;
/// offsets of x or of the statistics not multiples of 4; as [`Ctx::node_at`].
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
) -> Result<Node> {
    let (mut spec, x) = one_token_kernel(cx, m, base_spec(cx, m, false));
    let q8 = spec.q8k != 0 && shuffles(cx);
    let bad = match end {
        LnEnd::In => !q8 || a.accumulate || m.row0 != 0,
        LnEnd::Out => !a.accumulate || a.add_before_act,
        LnEnd::None => true,
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
    let p = LnParams {
        base: Params::of(m, a, a.scale, [0; 4], 1),
        ln_w: ln.ln_w as u32,
        ln_b: ln.ln_b as u32,
        ln_mix: ln.mix as u32,
        ln_state: ln.state_off as u32,
        ln_slot_len: ln.slot_len as u32,
        ln_eps: ln.eps,
        ln_stats: ln.stats as u32,
        _p: 0,
    };
    let mut res = vec![
        (2, m.binding()),
        (3, vecs.as_entire_binding()),
        (4, act.as_entire_binding()),
        (5, m.binding()),
        (9, ln.meta.as_entire_binding()),
        (10, ln.state.as_entire_binding()),
    ];
    if end == LnEnd::In {
        res.push((11, vecs.as_entire_binding()));
    }
    let grid = Grid::Tiles {
        x,
        count: Count::Tokens,
        per_y: 4,
    };
    cx.node_at(op, layer, &spec, &p, res, grid)
}

#[cfg(test)]
mod tests;
