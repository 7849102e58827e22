//! Decode steps with LoRA adapters: the adapters' first products `h = s · A x` of
//! ffn.key (K), att.output (O) and ffn.value (V) run inside the kernels that produce x
//! instead of a dispatch each (`ops::lora_out`; a decode dispatch costs ≈ 2.7 µs even
//! empty): K as extra workgroups of the channel-mix `ln_shift`, O in `wkv_fused` and V in
//! ffn.key's matrix × vector kernel — those two in fixed point into accumulators that the
//! block's time-mix `ln_shift` zeroes (and where it copies the channel-mix shift vector
//! that K reads). O and V's base products read h from the accumulators (`LoraArgs::fixed`).
//! Passes larger than [`SMALL_T`] are untouched.
//!
//! `RWKV_LORA_FUSE` (read at graph build): unset or `1`, all three; `0`, none (each its
//! own dispatch, for A/B runs); otherwise the letters of the ones to fuse (`k`, `o`, `v`).

use crate::adapter::LoraTarget;
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::model::graph_layer::Blocks;
use crate::ops::ln_shift::LnShiftFuse;
use crate::ops::lora_out::{fits, LoraOut};
use crate::ops::matmul::{matmul, matmul_lora_out, LoraArgs, MatmulArgs, SMALL_T};
use crate::ops::wkv_fused::WkvFusedArgs;
use crate::ops::{Count, GpuMatrix, Node, Small};

/// Which of K, O, V `RWKV_LORA_FUSE` lets a decode step fuse.
fn knob() -> [bool; 3] {
    match std::env::var("RWKV_LORA_FUSE").ok().as_deref() {
        None | Some("1") => [true; 3],
        Some(v) => ['k', 'o', 'v'].map(|c| v.to_ascii_lowercase().contains(c)),
    }
}

/// Storage bindings of the producers' own: `ln_shift` and `wkv_fused` 4; ffn.key's
/// `matvec` 4, and 1 for the `B` blocks of its own LoRA term.
fn own_bindings(t: LoraTarget, key_term: bool) -> u32 {
    match t {
        LoraTarget::FfnValue => 4 + u32::from(key_term),
        _ => 4,
    }
}

/// `node` whose variants for passes of at most [`SMALL_T`] tokens are `dec`'s (a node of
/// the same product: its matrix × vector variants). Where `node`'s matrix × vector
/// variant also serves larger passes (few-row products: `MATVEC_ALWAYS_ROWS`), it keeps
/// doing so.
fn decode_variant(mut node: Node, dec: Node) -> Node {
    let Some(dec_mv) = dec.small.map(|s| s.node) else {
        return node;
    };
    match node.small.as_mut() {
        Some(s) if s.max > SMALL_T => {
            s.node.small = Some(Small {
                count: Count::Tokens,
                max: SMALL_T,
                node: dec_mv,
            })
        }
        _ => {
            node.small = Some(Small {
                count: Count::Tokens,
                max: SMALL_T,
                node: dec_mv,
            })
        }
    }
    node
}

/// `node` dispatching nothing in passes of at most [`SMALL_T`] tokens, its variants for
/// larger passes as they were.
fn skip_in_decode(node: &mut Node) {
    match node.small.as_mut() {
        Some(s) if s.max > SMALL_T => skip_in_decode(&mut s.node),
        _ => {
            let skip = node.skip();
            node.small = Some(Small {
                count: Count::Tokens,
                max: SMALL_T,
                node: Box::new(skip),
            });
        }
    }
}

impl<'a> Blocks<'a> {
    /// Whether a decode step of block `l` runs target `t`'s first products fused: K, O or
    /// V with 1–4 adapters there that the producer can bind, and the knob lets it.
    pub(super) fn fused(&self, l: usize, t: LoraTarget) -> bool {
        let Some(loras) = self.loras else {
            return false;
        };
        let n = loras.firsts(l, t).len();
        let on = knob();
        let gpu: &GpuContext = self.cx.gpu;
        let key_term = loras.site(l, LoraTarget::FfnKey).is_some();
        let fixed = t != LoraTarget::FfnKey;
        let allowed = match t {
            LoraTarget::FfnKey => on[0],
            LoraTarget::Output => on[1],
            LoraTarget::FfnValue => on[2],
            _ => false,
        };
        allowed && self.rg.adapter_rank > 0 && fits(gpu, own_bindings(t, key_term), n, fixed)
    }

    /// `act` offset of O's (`Output`) or V's fixed-point accumulator: `[T, R, 2]` i32
    /// pairs, both in one `[T, 2, R, 2]` region ([`crate::model::regions::Regions::adapter_acc`]).
    fn acc_off(&self, t: LoraTarget) -> usize {
        let second = usize::from(t == LoraTarget::FfnValue);
        self.rg.adapter_acc + second * 2 * self.rg.adapter_rank
    }

    /// The accumulators' stride per token (f32 elements).
    fn acc_stride(&self) -> usize {
        4 * self.rg.adapter_rank
    }

    /// What the producer of (l, t)'s first products computes and where it puts h.
    fn lora_out(&self, l: usize, t: LoraTarget) -> Option<LoraOut<'a>> {
        let loras = self.loras?;
        if !self.fused(l, t) {
            return None;
        }
        let (h_off, h_stride) = match t {
            LoraTarget::FfnKey => {
                let h = self.rg.adapter_slot(0, self.t_cap);
                (h, loras.term(l, t, h)?.h_stride)
            }
            _ => (self.acc_off(t), self.acc_stride()),
        };
        Some(LoraOut {
            firsts: loras.firsts(l, t),
            h_off,
            h_stride,
        })
    }

    /// The base product `node` of (l, t) (`m`, `args`) with, when O or V is fused there,
    /// decode variants whose LoRA term reads h from the fixed-point accumulator.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fixed_decode(
        &self,
        l: usize,
        vecs: &wgpu::Buffer,
        name: &'static str,
        m: &GpuMatrix,
        args: &MatmulArgs,
        t: LoraTarget,
        node: Node,
    ) -> Result<Node> {
        let Some(f) = self.fixed_term(l, t) else {
            return Ok(node);
        };
        let dec = matmul(
            self.cx,
            name,
            Some(l),
            m,
            vecs,
            self.act,
            None,
            &args.with(f),
        )?;
        Ok(decode_variant(node, dec))
    }

    /// The decode variant's LoRA term of O or V's base product when fused: h from the
    /// fixed-point accumulator.
    fn fixed_term(&self, l: usize, t: LoraTarget) -> Option<LoraArgs> {
        if t == LoraTarget::FfnKey || !self.fused(l, t) {
            return None;
        }
        let term = self.loras?.term(l, t, self.acc_off(t))?;
        Some(LoraArgs {
            h_stride: self.acc_stride(),
            fixed: true,
            ..term
        })
    }

    /// `nodes` (the first products of `sites`, their reduce steps and groups) dispatching
    /// nothing in decode where the site's are fused.
    pub(super) fn skip_fused(
        &self,
        l: usize,
        sites: &[(LoraTarget, usize, usize, usize)],
        nodes: &mut [Node],
    ) {
        if sites.iter().any(|s| self.fused(l, s.0)) {
            nodes.iter_mut().for_each(skip_in_decode);
        }
    }

    /// The block's `ln_shift` work for fused first products: the time mix's (`time`)
    /// copy of the channel-mix shift vector (for K) and zeroing of O and V's
    /// accumulators; the channel mix's K workgroups. `None`: nothing to add.
    pub(super) fn ln_shift_fuse(&self, l: usize, time: bool) -> Option<LnShiftFuse<'a>> {
        let k = self.fused(l, LoraTarget::FfnKey);
        let prev_off = self.rg.adapter_prev;
        if !time {
            let lora = self.lora_out(l, LoraTarget::FfnKey)?;
            return Some(LnShiftFuse {
                prev_off,
                copy_from: None,
                zero: None,
                lora: Some(lora),
            });
        }
        let cfg = &self.cfg;
        let ffn_state =
            l * cfg.state_len_per_layer() + cfg.n_embd + cfg.n_head * cfg.head_size * cfg.head_size;
        let acc = self.fused(l, LoraTarget::Output) || self.fused(l, LoraTarget::FfnValue);
        (k || acc).then(|| LnShiftFuse {
            prev_off,
            copy_from: k.then_some(ffn_state),
            zero: acc.then(|| (self.rg.adapter_acc, self.acc_stride())),
            lora: None,
        })
    }

    /// The `wkv_fused` node of block `l`, with O's first products when fused.
    pub(super) fn wkv_fused_node(
        &self,
        l: usize,
        a: &WkvFusedArgs,
        vecs: &wgpu::Buffer,
    ) -> Result<Node> {
        let (cx, lid) = (self.cx, Some(l));
        match self.lora_out(l, LoraTarget::Output) {
            Some(lo) => crate::ops::wkv_fused::wkv_fused_lora_out(
                cx, lid, a, self.meta, self.state, self.act, vecs, &lo,
            ),
            None => {
                crate::ops::wkv_fused::wkv_fused(cx, lid, a, self.meta, self.state, self.act, vecs)
            }
        }
    }

    /// ffn.key's `node` with, when V is fused, decode variants that also run ffn.value's
    /// first products on their relu² outputs (`args` with ffn.key's own LoRA `term`).
    pub(super) fn ffn_key_lora_out(
        &self,
        l: usize,
        vecs: &wgpu::Buffer,
        m: &GpuMatrix,
        args: &MatmulArgs,
        term: Option<LoraArgs>,
        node: Node,
    ) -> Result<Node> {
        let Some(lo) = self.lora_out(l, LoraTarget::FfnValue) else {
            return Ok(node);
        };
        let dec = MatmulArgs {
            lora: term,
            ..*args
        };
        let fused = matmul_lora_out(self.cx, "ffn.key", Some(l), m, vecs, self.act, &dec, &lo)?;
        Ok(decode_variant(node, fused))
    }
}
