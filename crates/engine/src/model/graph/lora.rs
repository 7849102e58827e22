//! The LoRA side of a block's nodes (`time_mix.rs`, `channel_mix.rs`): the adapters' first products
//! `h = s · A x`, the base products with their `B h` term, and — for a one-token pass —
//! the output, channel-mix key and value products that make their own h
//! ([`matvec_hprod`]: no dispatch of its own before them), with the plan of their h sets in `hplan.rs`.

use super::blocks::Blocks;
use super::group::{push_grouped, Member};
use crate::adapter::LoraTarget;
use crate::error::{EngineError, Result};
use crate::ops::matmul::{
    lora_in_tiles, matmul, matmul_split, matvec_hprod, Act, HProd, LoraArgs, MatmulArgs,
};
use crate::ops::{Count, GpuMatrix, Node, Small};

/// The one-token variant of `node` (the end of its chain of small variants).
fn one_token(node: &Node) -> Result<&Node> {
    let mut n = node;
    while let Some(s) = &n.small {
        if s.max == 1 {
            return Ok(&s.node);
        }
        n = &s.node;
    }
    Err(EngineError::Op {
        op: "graph",
        what: format!("{}: no one-token variant", node.label()),
    })
}

/// `node` with `one` as its one-token variant.
fn set_one_token(node: &mut Node, one: Node) -> Result<()> {
    let label = node.label();
    let mut n = node;
    while let Some(s) = n.small.as_mut() {
        if s.max == 1 {
            *s.node = one;
            return Ok(());
        }
        n = &mut s.node;
    }
    Err(EngineError::Op {
        op: "graph",
        what: format!("{label}: no one-token variant"),
    })
}

impl<'a> Blocks<'a> {
    /// (set, set it empties) where the product at (l, t) makes its own h in a one-token
    /// pass.
    pub(super) fn h_set(&self, l: usize, t: LoraTarget) -> Option<(usize, usize)> {
        self.hplan.and_then(|p| p.at(l, t))
    }

    /// `node` (the product `name` of `m` at (l, t) with its LoRA term in `with`) with a
    /// one-token variant that makes the term's h itself, where the plan has it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_own_h(
        &self,
        l: usize,
        t: LoraTarget,
        name: &'static str,
        m: &GpuMatrix,
        v: &wgpu::Buffer,
        with: &MatmulArgs,
        node: &mut Node,
    ) -> Result<()> {
        let (Some(plan), Some((set, reset)), Some(loras)) =
            (self.hplan, self.h_set(l, t), self.loras)
        else {
            return Ok(());
        };
        let firsts = loras.firsts(l, t);
        let [(a, scale, 0)] = firsts.as_slice() else {
            // The plan takes sites of one adapter only, whose first products the caller
            // has already left out of one-token passes.
            return Err(EngineError::Op {
                op: "graph",
                what: format!("{name}@{l}: planned to make its own h, but not one adapter"),
            });
        };
        let hp = HProd {
            a,
            scale: *scale,
            sync: &plan.sets,
            set,
            reset,
            spin: self.cx.gpu.tuning.hprod_spin,
        };
        let one = matvec_hprod(self.cx, name, Some(l), m, v, self.act, with, &hp)?;
        set_one_token(node, one)
    }

    /// The first products `h_i = s_i · A_i x` of the adapters at (l, t) into `h` slot
    /// `slot` as (node, its reduce step, A, arguments), and the base products' LoRA terms.
    #[allow(clippy::type_complexity)]
    pub(super) fn lora_first_nodes(
        &self,
        l: usize,
        sites: &[(LoraTarget, usize, usize, usize)],
        vecs: &wgpu::Buffer,
    ) -> Result<(Vec<Option<LoraArgs>>, Vec<Member<'a>>)> {
        let Some(loras) = self.loras else {
            return Ok((vec![None; sites.len()], Vec::new()));
        };
        let mut terms = Vec::new();
        let mut firsts = Vec::new();
        for &(t, slot, x_off, k) in sites {
            let h = self.rg.adapter_slot(slot, self.t_cap);
            let term = loras.term(l, t, h);
            if let Some(tm) = term {
                for (a, scale, j0) in loras.firsts(l, t) {
                    let mut args =
                        MatmulArgs::dense(x_off, k, h + j0, tm.h_stride, Act::None, false, None);
                    args.scale = scale;
                    // Few rows, long k: k split on tensor cores, as the model's own
                    // first low-rank products.
                    let ks = self.ks(a.n_out, a.n_in);
                    let (node, reduce) = matmul_split(
                        self.cx,
                        "lora.a",
                        Some(l),
                        a,
                        vecs,
                        self.act,
                        &args,
                        self.split,
                        ks,
                    )?;
                    firsts.push((node, reduce, a, args, ks));
                }
            }
            terms.push(term);
        }
        Ok((terms, firsts))
    }

    /// [`Blocks::lora_first_nodes`] onto `body`: a decode step runs them in as few
    /// `matvec_group` dispatches as their buffers allow. The base products' LoRA terms.
    ///
    /// Where a site's product makes its own h in a one-token pass ([`Blocks::h_set`]),
    /// its first products dispatch nothing in such a pass.
    pub(super) fn lora_firsts(
        &self,
        l: usize,
        sites: &[(LoraTarget, usize, usize, usize)],
        vecs: &wgpu::Buffer,
        body: &mut Vec<Node>,
    ) -> Result<Vec<Option<LoraArgs>>> {
        let (terms, mut firsts) = self.lora_first_nodes(l, sites, vecs)?;
        if sites.iter().any(|s| self.h_set(l, s.0).is_some()) {
            for f in firsts.iter_mut() {
                let skip = one_token(&f.0)?.skip();
                set_one_token(&mut f.0, skip)?;
            }
        }
        let tiles = self.tiles();
        push_grouped(
            self.cx,
            "lora.a",
            Some(l),
            firsts,
            vecs,
            self.act,
            tiles,
            body,
        )?;
        Ok(terms)
    }

    /// The product `y (+)= B h` of the active adapters at (l, t) for passes larger than
    /// `main`'s matrix × vector variant serves (which adds the term itself): into the
    /// residual or the base product's output (`add_before_act` with `act` for a product
    /// whose activation must see the sum). `None` without adapters there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lora_second(
        &self,
        l: usize,
        t: LoraTarget,
        term: Option<LoraArgs>,
        main: &Node,
        y_off: usize,
        act_fn: Act,
        before_act: bool,
        vecs: &wgpu::Buffer,
    ) -> Result<Option<Node>> {
        let (Some(loras), Some(term)) = (self.loras, term) else {
            return Ok(None);
        };
        let Some(b) = loras.b_matrix(l, t) else {
            return Ok(None);
        };
        let mut args = MatmulArgs::dense(
            term.h_off,
            term.h_stride,
            y_off,
            b.n_out,
            act_fn,
            true,
            None,
        );
        args.add_before_act = before_act;
        let mut node = matmul(self.cx, "lora.b", Some(l), &b, vecs, self.act, None, &args)?;
        let max = main.small.as_ref().map_or(0, |s| s.max);
        node.small = Some(Small {
            count: Count::Tokens,
            max,
            node: Box::new(node.skip()),
        });
        Ok(Some(node))
    }

    /// [`Blocks::big`] with the adapters' `term` at (l, t), when there is one: the node
    /// (its decode variant adds `B h`; on tensor cores every variant does), its reduce
    /// step, and — without tensor cores — the larger passes' `B h` product (into
    /// `args.y_off`, no activation) to run after both.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn adapted_big(
        &self,
        l: usize,
        v: &wgpu::Buffer,
        name: &'static str,
        m: &GpuMatrix,
        args: &MatmulArgs,
        t: LoraTarget,
        term: Option<LoraArgs>,
    ) -> Result<(Node, Node, Option<Node>)> {
        if term.is_none() || lora_in_tiles(self.cx.gpu) {
            // Tensor cores: every variant adds the term itself.
            let (node, reduce) = self.big(
                l,
                v,
                name,
                m,
                &MatmulArgs {
                    lora: term,
                    ..*args
                },
            )?;
            return Ok((node, reduce, None));
        }
        let (node, reduce) = self.big(l, v, name, m, args)?;
        let dec = MatmulArgs {
            lora: term,
            ..*args
        };
        let node = Self::decode_from(node, self.big(l, v, name, m, &dec)?.0);
        let second = self.lora_second(l, t, term, &node, args.y_off, Act::None, false, v)?;
        Ok((node, reduce, second))
    }

    /// `node` with the matrix × vector variant of `dec` (the same product with the LoRA
    /// term): decode adds `B h` in that kernel's epilogue.
    pub(super) fn decode_from(mut node: Node, dec: Node) -> Node {
        if dec.small.is_some() {
            node.small = dec.small;
        }
        node
    }
}
