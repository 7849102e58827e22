//! The LoRA terms of a block's six large products (`model::lora`): the adapters' first
//! products `h = s · A x` (or, in a decode step, their parts from the dispatch that
//! produced x: `ops::lora_parts`), and each base product with its `B h` term.

use crate::adapter::LoraTarget;
use crate::error::Result;
use crate::model::graph_group::push_grouped;
use crate::model::graph_layer::{mm, Blocks};
use crate::ops::lora_parts::{Parts, PartsArgs, MAX_RANK};
use crate::ops::matmul::{
    lora_in_tiles, matmul, matmul_split, max_parts, Act, LoraArgs, MatmulArgs, SMALL_T,
};
use crate::ops::{Count, GpuMatrix, Node, Small};

/// `node` dispatching nothing in passes of at most SMALL_T tokens (the dispatch that
/// produced its input does its work there).
fn skip_decode(node: &mut Node) {
    node.small = Some(Small {
        count: Count::Tokens,
        max: SMALL_T,
        node: Box::new(node.skip()),
    });
}

impl<'a> Blocks<'a> {
    /// In a decode step, the first product of the adapter at (l, t) computed in `np`
    /// parts by the dispatch that produces its input (`ops::lora_parts`; `threads` a
    /// workgroup there): the producer's part of it, and the base product's LoRA term
    /// reading the parts. `None` — the first product keeps its own dispatch — with several
    /// adapters at (l, t), a rank above [`MAX_RANK`], more parts than the matrix × vector
    /// kernel sums, or `RWKV_LORA_PARTS=0` (A/B runs).
    pub(super) fn parts_plan(
        &self,
        l: usize,
        t: LoraTarget,
        np: usize,
        threads: usize,
    ) -> Option<(Parts<'a>, LoraArgs)> {
        let loras = self.loras?;
        if std::env::var_os("RWKV_LORA_PARTS").is_some_and(|v| v == "0") {
            return None;
        }
        let firsts = loras.firsts(l, t);
        let [(a, scale, 0)] = firsts.as_slice() else {
            return None;
        };
        let term = loras.term(l, t, self.rg.lora_parts)?;
        let width = term.rank;
        if a.n_out > MAX_RANK || width > threads || np > max_parts(width) {
            return None;
        }
        let parts = Parts {
            a,
            args: PartsArgs {
                rank: a.n_out as u32,
                width: width as u32,
                off: self.rg.lora_parts as u32,
                scale: *scale,
            },
        };
        let dec = LoraArgs {
            h_stride: np * width,
            parts: np,
            ..term
        };
        Some((parts, dec))
    }

    /// The first products `h_i = s_i · A_i x` of the adapters at (l, t) into `h` slot
    /// `slot` as (node, its reduce step, A, arguments), and the base products' LoRA terms.
    #[allow(clippy::type_complexity)]
    pub(super) fn lora_first_nodes(
        &self,
        l: usize,
        sites: &[(LoraTarget, usize, usize, usize)],
        vecs: &wgpu::Buffer,
    ) -> Result<(
        Vec<Option<LoraArgs>>,
        Vec<(Node, Node, &'a GpuMatrix, MatmulArgs)>,
    )> {
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
                    let mut args = mm(x_off, k, h + j0, tm.h_stride, Act::None, false, None);
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
                    firsts.push((node, reduce, a, args));
                }
            }
            terms.push(term);
        }
        Ok((terms, firsts))
    }

    /// [`Blocks::lora_first_nodes`] onto `body`: a decode step runs them in as few
    /// `matvec_group` dispatches as their buffers allow, or none when their input's
    /// producer computes them `in_parts`. The base products' LoRA terms.
    pub(super) fn lora_firsts(
        &self,
        l: usize,
        sites: &[(LoraTarget, usize, usize, usize)],
        vecs: &wgpu::Buffer,
        body: &mut Vec<Node>,
        in_parts: bool,
    ) -> Result<Vec<Option<LoraArgs>>> {
        let (terms, mut firsts) = self.lora_first_nodes(l, sites, vecs)?;
        if in_parts {
            for (node, reduce, _, _) in &mut firsts {
                skip_decode(node);
                skip_decode(reduce);
            }
        }
        push_grouped(self.cx, "lora.a", Some(l), firsts, vecs, self.act, body)?;
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
        let mut args = mm(
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

    /// `node` whose passes of at most SMALL_T tokens take the matrix × vector variants of
    /// `dec` (the same product with its LoRA term read from parts, which only those passes
    /// write); larger passes keep `node`'s own variants (a product that takes the matrix ×
    /// vector kernel at every T among them).
    pub(super) fn decode_parts(mut node: Node, dec: Node) -> Node {
        let Some(d) = dec.small else {
            return node;
        };
        let parts = Small {
            count: Count::Tokens,
            max: SMALL_T,
            node: d.node,
        };
        match node.small.as_mut() {
            Some(own) => own.node.small = Some(parts),
            None => node.small = Some(parts),
        }
        node
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
