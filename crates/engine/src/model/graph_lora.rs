//! Decode steps with LoRA adapters: the adapters' first products `h = s · A x` of
//! ffn.key (K) run inside the kernel that produces x instead of a dispatch of their own
//! (`ops::lora_out`; a decode dispatch costs ≈ 2.7 µs even empty): as extra workgroups of
//! the channel-mix `ln_shift`, which read the old channel-mix shift vector from the copy
//! the block's time-mix `ln_shift` makes. Passes larger than [`SMALL_T`] are untouched.
//!
//! `RWKV_LORA_FUSE` (read at graph build): unset or `1`, fused; `0`, each its own
//! dispatch (for A/B runs); otherwise the letters of the ones to fuse (`k`).

use crate::adapter::LoraTarget;
use crate::model::graph_layer::Blocks;
use crate::ops::ln_shift::LnShiftFuse;
use crate::ops::lora_out::{fits, LoraOut};
use crate::ops::matmul::SMALL_T;
use crate::ops::{Count, Node, Small};

/// Which of K `RWKV_LORA_FUSE` lets a decode step fuse.
fn knob() -> [bool; 1] {
    match std::env::var("RWKV_LORA_FUSE").ok().as_deref() {
        None | Some("1") => [true; 1],
        Some(v) => ['k'].map(|c| v.to_ascii_lowercase().contains(c)),
    }
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
    /// Whether a decode step of block `l` runs target `t`'s first products fused: K with
    /// 1–4 adapters there that `ln_shift` can bind, and the knob lets it.
    pub(super) fn fused(&self, l: usize, t: LoraTarget) -> bool {
        let Some(loras) = self.loras else {
            return false;
        };
        let n = loras.firsts(l, t).len();
        let on = knob();
        let allowed = match t {
            LoraTarget::FfnKey => on[0],
            _ => false,
        };
        allowed && self.rg.adapter_rank > 0 && fits(self.cx.gpu, 4, n, false)
    }

    /// What the producer of (l, t)'s first products computes and where it puts h.
    fn lora_out(&self, l: usize, t: LoraTarget) -> Option<LoraOut<'a>> {
        let loras = self.loras?;
        if !self.fused(l, t) {
            return None;
        }
        let h_off = self.rg.adapter_slot(0, self.t_cap);
        Some(LoraOut {
            firsts: loras.firsts(l, t),
            h_off,
            h_stride: loras.term(l, t, h_off)?.h_stride,
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
    /// copy of the channel-mix shift vector (for K); the channel mix's K workgroups.
    /// `None`: nothing to add.
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
        k.then_some(LnShiftFuse {
            prev_off,
            copy_from: Some(ffn_state),
            zero: None,
            lora: None,
        })
    }
}
