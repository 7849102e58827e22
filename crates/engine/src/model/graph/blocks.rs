//! What the builders of a block's nodes share ([`Blocks`]: the context, the regions, the
//! buffers) and their small helpers: the k-split products, the LayerNorm + token shift
//! node.

use super::hplan::HPlan;
use super::regions::Regions;
use super::state_parts::StateParts;
use crate::config::{Rwkv7Config, LN_EPS};
use crate::error::Result;
use crate::model::lora::ActiveLoras;
use crate::ops::ln_shift::LnShiftArgs;
use crate::ops::matmul::{coop_ksplit, matmul_split, matmul_waves, MatmulArgs, SMALL_T};
use crate::ops::{self, Count, Ctx, GpuMatrix, Node, Small};

/// What the nodes of every block share.
pub(super) struct Blocks<'a> {
    pub cx: &'a Ctx<'a>,
    pub cfg: Rwkv7Config,
    pub rg: Regions,
    pub t_cap: usize,
    pub meta: &'a wgpu::Buffer,
    /// Where a pass's embedding rows lie in `meta`.
    pub emb_rows: crate::ops::embed::EmbedRows,
    /// The state buffers: each node binds the part of its layer.
    pub state: &'a StateParts,
    pub act: &'a wgpu::Buffer,
    /// The k-split scratch, and whether the tensor-core kernel may split.
    pub split: &'a wgpu::Buffer,
    pub split_ok: bool,
    pub loras: Option<&'a ActiveLoras>,
    /// The products that make their own LoRA h in one-token passes (`hplan.rs`).
    pub hplan: Option<&'a HPlan>,
}

impl<'a> Blocks<'a> {
    /// k slices for a tensor-core product of `n` rows and depth `k`: [`coop_ksplit`],
    /// bounded by what the scratch holds at `t_cap` tokens (1 without the split).
    pub(super) fn ks(&self, n: usize, k: usize) -> u32 {
        if !self.split_ok {
            return 1;
        }
        let fits = (self.split.size() / 4) as usize / (self.t_cap * n).max(1);
        coop_ksplit(&self.cx.gpu.tuning, n, k, self.t_cap).min(fits.max(1) as u32)
    }

    /// The k-split scratch and the token capacity for grouped tensor-core products
    /// (`push_grouped`), where the tiles may split.
    pub(super) fn tiles(&self) -> Option<(&'a wgpu::Buffer, usize)> {
        self.split_ok.then_some((self.split, self.t_cap))
    }

    /// A C-row product (k split on tensor cores, `matmul_split`) of block `l`.
    pub(super) fn big(
        &self,
        l: usize,
        v: &wgpu::Buffer,
        name: &'static str,
        m: &GpuMatrix,
        args: &MatmulArgs,
    ) -> Result<(Node, Node)> {
        let ks = self.ks(m.n_out, m.n_in);
        matmul_split(self.cx, name, Some(l), m, v, self.act, args, self.split, ks)
    }

    /// The state part of block `l`, the f32 offset of `off` (an offset in the layer's
    /// state) in a slot's slice of it, and that slice's length.
    pub(super) fn layer_state(&self, l: usize, off: usize) -> (&'a wgpu::Buffer, usize, usize) {
        let (part, at) = self.state.of_layer(l);
        (&part.buffer, at + off, part.slot_len)
    }

    /// LayerNorm + token shift of the residual of block `l` into the mix region (one
    /// dispatch): `n_mix` lerps with the vectors at `mix_off`, the LayerNorm's at
    /// `ln_off`, the shift state at `state_off` of the layer's state (steps 1–3 and 13–15).
    pub(super) fn ln_shift(
        &self,
        l: usize,
        v: &wgpu::Buffer,
        n_mix: usize,
        mix_off: usize,
        ln_off: usize,
        state_off: usize,
    ) -> Result<Node> {
        let c = self.cfg.n_embd;
        let (state, state_off, slot_len) = self.layer_state(l, state_off);
        let args = LnShiftArgs {
            c,
            n_mix,
            mix_off,
            ln_off,
            x_off: self.rg.x,
            out_off: self.rg.mix,
            out_stride: self.t_cap * c,
            state_off,
            slot_len,
            eps: LN_EPS,
        };
        ops::ln_shift::ln_shift(self.cx, Some(l), &args, v, self.meta, state, self.act)
    }

    /// A wide product of block `l` that is not k-split and whose tiles end in a mostly
    /// empty wave as [`matmul_waves`] (whole tiles, a k-split tail, its reduce) onto
    /// `body`; false (nothing pushed) where it is not split that way.
    pub(super) fn push_waves(
        &self,
        l: usize,
        v: &wgpu::Buffer,
        name: &'static str,
        m: &GpuMatrix,
        args: &MatmulArgs,
        body: &mut Vec<Node>,
    ) -> Result<bool> {
        if !self.split_ok || self.ks(m.n_out, m.n_in) > 1 {
            return Ok(false);
        }
        let (cx, act, split) = (self.cx, self.act, self.split);
        let waves = matmul_waves(cx, name, Some(l), m, v, act, args, split, self.t_cap)?;
        let Some(nodes) = waves else {
            return Ok(false);
        };
        body.extend(nodes);
        Ok(true)
    }
}

/// `node` as the variant for passes of at most [`SMALL_T`] tokens (decode).
pub(super) fn few(node: Node) -> Small {
    Small {
        count: Count::Tokens,
        max: SMALL_T,
        node: Box::new(node),
    }
}
