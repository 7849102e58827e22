//! The nodes of one RWKV-7 block (steps 1–17 of `graph.rs`'s list), with the LoRA terms of
//! the active adapters (`model::lora`) on the six large products.

use crate::adapter::LoraTarget;
use crate::error::{EngineError, Result};
use crate::model::config::Rwkv7Config;
use crate::model::gpu_weights::{GpuLayer, LayerVecs};
use crate::model::graph::{GN_EPS, LN_EPS};
use crate::model::lora::ActiveLoras;
use crate::model::regions::Regions;
use crate::ops::ln_shift::LnShiftArgs;
use crate::ops::matmul::{coop_ksplit, matmul, matmul_split, Act, LoraArgs, MatmulArgs, SMALL_T};
use crate::ops::wkv::WkvArgs;
use crate::ops::wkv_fused::WkvFusedArgs;
use crate::ops::wkv_out::WkvOutArgs;
use crate::ops::wkv_prep::WkvPrepArgs;
use crate::ops::{self, Count, Ctx, GpuMatrix, Node, Small};

/// For decode passes, runs the products of `segs` (independent, nodes `nodes` in the
/// same order) whose matrices share the buffer most of them share as one
/// `matvec_group` dispatch: in the first such node's place, the others dispatch nothing.
/// Larger passes keep every node's own kernels.
pub(super) fn group_decode(
    cx: &Ctx,
    name: &'static str,
    layer: Option<usize>,
    nodes: &mut [Node],
    segs: &[(&GpuMatrix, MatmulArgs)],
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<()> {
    let in_buf = |b: &wgpu::Buffer| segs.iter().filter(|(m, _)| m.buffer == *b).count();
    let Some(buf) = segs
        .iter()
        .map(|(m, _)| m.buffer.clone())
        .max_by_key(|b| in_buf(b))
    else {
        return Ok(());
    };
    let members: Vec<usize> = (0..segs.len())
        .filter(|&i| segs[i].0.buffer == buf)
        .collect();
    let group: Vec<_> = members.iter().map(|&i| segs[i]).collect();
    let lo = group.iter().map(|(m, _)| m.offset).min().unwrap_or(0);
    let hi = group
        .iter()
        .map(|(m, _)| m.offset + m.span())
        .max()
        .unwrap_or(0);
    // One binding covers the group: skip grouping where that exceeds the device's limit.
    if members.len() < 2 || members.len() > 4 || hi - lo > cx.gpu.max_binding() {
        return Ok(());
    }
    let mut fused = Some(ops::matvec_group::matvec_group(
        cx, name, layer, &group, vecs, act,
    )?);
    for &i in &members {
        let node = &mut nodes[i];
        // The decode variant hangs below the node's matrix × vector variant.
        let Some(mv) = node.small.as_mut() else {
            return Err(EngineError::Op {
                op: "graph",
                what: format!("{}: no matrix × vector variant", node.op),
            });
        };
        let instead = match fused.take() {
            Some(f) => f,
            None => mv.node.skip(),
        };
        mv.node.small = Some(Small {
            count: Count::Tokens,
            max: SMALL_T,
            node: Box::new(instead),
        });
    }
    Ok(())
}

/// `y (+)= act(W x + bias)` at these offsets (tokens; scale 1; no LoRA term).
#[allow(clippy::too_many_arguments)]
pub(super) fn mm(
    x_off: usize,
    k: usize,
    y_off: usize,
    n: usize,
    act: Act,
    accumulate: bool,
    bias: Option<usize>,
) -> MatmulArgs {
    MatmulArgs {
        x_off,
        x_stride: k,
        y_off,
        y_stride: n,
        act,
        accumulate,
        bias_off: bias,
        rows: Count::Tokens,
        scale: 1.0,
        lora: None,
    }
}

/// What the nodes of every block share.
pub(super) struct Blocks<'a> {
    pub cx: &'a Ctx<'a>,
    pub cfg: Rwkv7Config,
    pub rg: Regions,
    pub t_cap: usize,
    pub slot_len: usize,
    pub meta: &'a wgpu::Buffer,
    pub state: &'a wgpu::Buffer,
    pub act: &'a wgpu::Buffer,
    /// The k-split scratch, and whether the tensor-core kernel may split.
    pub split: &'a wgpu::Buffer,
    pub split_ok: bool,
    pub loras: Option<&'a ActiveLoras>,
}

impl Blocks<'_> {
    /// The first products `h_i = s_i · A_i x` of the adapters at (l, t) into `h` slot
    /// `slot`, and the base product's LoRA term. A decode step runs a set of them that
    /// share a buffer (r, k, v of one adapter) as one `matvec_group` dispatch.
    fn lora_firsts(
        &self,
        l: usize,
        sites: &[(LoraTarget, usize, usize, usize)],
        vecs: &wgpu::Buffer,
        body: &mut Vec<Node>,
    ) -> Result<Vec<Option<LoraArgs>>> {
        let Some(loras) = self.loras else {
            return Ok(vec![None; sites.len()]);
        };
        let mut terms = Vec::new();
        let mut per_adapter: Vec<Vec<(Node, &GpuMatrix, MatmulArgs)>> =
            (0..loras.adapters.len()).map(|_| Vec::new()).collect();
        for &(t, slot, x_off, k) in sites {
            let h = self.rg.adapter_slot(slot, self.t_cap);
            let term = loras.term(l, t, h);
            if let (Some(term), Some(site)) = (term, loras.site(l, t)) {
                for (p, (a, scale, j0)) in site.parts.iter().zip(loras.firsts(l, t)) {
                    let mut args = mm(x_off, k, h + j0, term.h_stride, Act::None, false, None);
                    args.scale = scale;
                    let node = matmul(self.cx, "lora.a", Some(l), a, vecs, self.act, None, &args)?;
                    per_adapter[p.adapter].push((node, a, args));
                }
            }
            terms.push(term);
        }
        for set in per_adapter {
            let (mut nodes, segs): (Vec<Node>, Vec<_>) =
                set.into_iter().map(|(n, a, args)| (n, (a, args))).unzip();
            group_decode(
                self.cx,
                "lora.a",
                Some(l),
                &mut nodes,
                &segs,
                vecs,
                self.act,
            )?;
            body.extend(nodes);
        }
        Ok(terms)
    }

    /// The nodes of block `l` (steps 1–17) onto `body`.
    pub fn layer(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<()> {
        let (cx, rg, cfg, act) = (self.cx, &self.rg, &self.cfg, self.act);
        let c = cfg.n_embd;
        let tc = self.t_cap * c;
        let h = cfg.n_head;
        let per_layer = cfg.state_len_per_layer();
        let slot_len = self.slot_len;
        let d_max = Regions::lora_width(cfg);
        let lora = |i: usize| rg.lora + i * self.t_cap * d_max;
        let lid = Some(l);
        let v = &ly.vecs;
        let base = l * per_layer;
        // The C-row products, with k split on tensor cores (`matmul_split`).
        let big = |name: &'static str, m: &GpuMatrix, args: &MatmulArgs| {
            let ks = if self.split_ok {
                coop_ksplit(m.n_out, m.n_in)
            } else {
                1
            };
            matmul_split(cx, name, lid, m, v, act, args, self.split, ks)
        };
        // 1–3: ln1, lerps, shift state (one dispatch)
        let shift = LnShiftArgs {
            c,
            n_mix: 6,
            mix_off: LayerVecs::MIX * c,
            ln_off: LayerVecs::LN1 * c,
            x_off: rg.x,
            out_off: rg.mix,
            out_stride: tc,
            state_off: base,
            slot_len,
            eps: LN_EPS,
        };
        body.push(ops::ln_shift::ln_shift(
            cx, lid, &shift, v, self.meta, self.state, act,
        )?);
        let mix = |i: usize| rg.mix + i * tc;
        // 4: r, k, v (one `matvec_group` dispatch in a decode step), after the adapters'
        // first products.
        let terms = self.lora_firsts(
            l,
            &[
                (LoraTarget::Receptance, 0, mix(0), c),
                (LoraTarget::Key, 1, mix(2), c),
                (LoraTarget::Value, 2, mix(3), c),
            ],
            v,
            body,
        )?;
        let mut rkv = [
            (
                "att.receptance",
                &ly.receptance,
                mm(mix(0), c, rg.r, c, Act::None, false, None),
            ),
            (
                "att.key",
                &ly.key,
                mm(mix(2), c, rg.k, c, Act::None, false, None),
            ),
            (
                "att.value",
                &ly.value,
                mm(mix(3), c, rg.v, c, Act::None, false, None),
            ),
        ];
        for (i, term) in terms.into_iter().enumerate() {
            rkv[i].2.lora = term;
        }
        let mut nodes = Vec::new();
        let mut reduces = Vec::new();
        for (name, m, args) in &rkv {
            let (node, reduce) = big(name, m, args)?;
            nodes.push(node);
            reduces.push(reduce);
        }
        let segs: Vec<_> = rkv.iter().map(|(_, m, args)| (*m, *args)).collect();
        group_decode(cx, "att.rkv", lid, &mut nodes, &segs, v, act)?;
        for (node, reduce) in nodes.into_iter().zip(reduces) {
            body.push(node);
            body.push(reduce);
        }
        // The variant of a node for passes of at most SMALL_T tokens (decode).
        let few = |node: Node| Small {
            count: Count::Tokens,
            max: SMALL_T,
            node: Box::new(node),
        };
        // 5–8: low-rank chains `out = act2(act1(x A) B + bias)`: (op names, A, B, input
        // mix, hidden, act1, out, act2, bias). All first products run before the
        // second ones; a decode step runs each set as one `matvec_group` dispatch.
        let mut chains = vec![
            (
                ["att.w1", "att.w2"],
                &ly.w1,
                &ly.w2,
                mix(1),
                lora(0),
                Act::Tanh,
                rg.w,
                Act::None,
                Some(LayerVecs::W0 * c),
            ),
            (
                ["att.a1", "att.a2"],
                &ly.a1,
                &ly.a2,
                mix(4),
                lora(1),
                Act::None,
                rg.a,
                Act::Sigmoid,
                Some(LayerVecs::A0 * c),
            ),
            (
                ["att.g1", "att.g2"],
                &ly.g1,
                &ly.g2,
                mix(5),
                lora(2),
                Act::Sigmoid,
                rg.g,
                Act::None,
                None,
            ),
        ];
        if let (Some(v1), Some(v2)) = (&ly.v1, &ly.v2) {
            chains.push((
                ["att.v1", "att.v2"],
                v1,
                v2,
                mix(3),
                lora(3),
                Act::None,
                rg.vmix,
                Act::Sigmoid,
                Some(LayerVecs::V0 * c),
            ));
        }
        for second in [false, true] {
            let mut nodes = Vec::new();
            let mut reduces = Vec::new();
            let mut group = Vec::new();
            for &(names, m1, m2, x, hid, act1, y, act2, bias) in &chains {
                let d = m1.n_out;
                let (name, m, args) = if second {
                    (names[1], m2, mm(hid, d, y, c, act2, false, bias))
                } else {
                    (names[0], m1, mm(x, c, hid, d, act1, false, None))
                };
                // First products (few rows, k = C): k split on tensor cores.
                let ks = if self.split_ok && !second {
                    coop_ksplit(m.n_out, m.n_in)
                } else {
                    1
                };
                let (node, reduce) = matmul_split(cx, name, lid, m, v, act, &args, self.split, ks)?;
                nodes.push(node);
                reduces.push(reduce);
                group.push((m, args));
            }
            let name = if second { "att.lora2" } else { "att.lora1" };
            group_decode(cx, name, lid, &mut nodes, &group, v, act)?;
            for (node, reduce) in nodes.into_iter().zip(reduces) {
                body.push(node);
                body.push(reduce);
            }
        }
        // 9–11: WKV
        let prep = WkvPrepArgs {
            c: c as u32,
            n_head: h as u32,
            layer0: u32::from(l == 0),
            k_off: rg.k as u32,
            v_off: rg.v as u32,
            a_off: rg.a as u32,
            w_off: rg.w as u32,
            vmix_off: rg.vmix as u32,
            vfirst_off: rg.vfirst as u32,
            kk_off: rg.kk as u32,
            kk_w_off: (LayerVecs::K_K * c) as u32,
            ka_off: (LayerVecs::K_A * c) as u32,
        };
        // Passes of few tokens run 9–11 as one `wkv_fused` dispatch instead.
        let mut prep_node = ops::wkv_prep::wkv_prep(cx, lid, &prep, v, act)?;
        prep_node.small = Some(few(prep_node.skip()));
        body.push(prep_node);
        let wkv = WkvArgs {
            c: c as u32,
            r_off: rg.r as u32,
            w_off: rg.w as u32,
            k_off: rg.k as u32,
            v_off: rg.v as u32,
            kk_off: rg.kk as u32,
            a_off: rg.a as u32,
            y_off: rg.y as u32,
            state_off: (base + c) as u32,
            slot_len: slot_len as u32,
            _p: [0; 2],
        };
        let fused = WkvFusedArgs {
            c: c as u32,
            layer0: u32::from(l == 0),
            r_off: rg.r as u32,
            w_off: rg.w as u32,
            k_off: rg.k as u32,
            v_off: rg.v as u32,
            a_off: rg.a as u32,
            g_off: rg.g as u32,
            vmix_off: rg.vmix as u32,
            vfirst_off: rg.vfirst as u32,
            o_off: rg.o as u32,
            kkw_off: (LayerVecs::K_K * c) as u32,
            ka_off: (LayerVecs::K_A * c) as u32,
            rk_off: (LayerVecs::R_K * c) as u32,
            lnx_off: (LayerVecs::LN_X * c) as u32,
            state_off: (base + c) as u32,
            slot_len: slot_len as u32,
            eps: GN_EPS,
            _p: [0; 2],
        };
        let mut wkv_node = ops::wkv::wkv(cx, lid, &wkv, self.meta, self.state, act)?;
        wkv_node.small = Some(few(ops::wkv_fused::wkv_fused(
            cx, lid, &fused, self.meta, self.state, act, v,
        )?));
        body.push(wkv_node);
        let out = WkvOutArgs {
            c: c as u32,
            n_head: h as u32,
            y_off: rg.y as u32,
            r_off: rg.r as u32,
            k_off: rg.k as u32,
            v_off: rg.v as u32,
            g_off: rg.g as u32,
            o_off: rg.o as u32,
            rk_off: (LayerVecs::R_K * c) as u32,
            lnx_off: (LayerVecs::LN_X * c) as u32,
            eps: GN_EPS,
            _p: 0,
        };
        let mut out_node = ops::wkv_out::wkv_out(cx, lid, &out, v, act)?;
        out_node.small = Some(few(out_node.skip()));
        body.push(out_node);
        // 12: x += Wo o
        let mut args = mm(rg.o, c, rg.x, c, Act::None, true, None);
        args.lora = self.lora_firsts(l, &[(LoraTarget::Output, 0, rg.o, c)], v, body)?[0];
        let (node, reduce) = big("att.output", &ly.output, &args)?;
        body.push(node);
        body.push(reduce);
        // 13–17: channel mix
        let ffn_state = base + c + h * cfg.head_size * cfg.head_size;
        let shift = LnShiftArgs {
            c,
            n_mix: 1,
            mix_off: LayerVecs::FFN_X_K * c,
            ln_off: LayerVecs::LN2 * c,
            x_off: rg.x,
            out_off: rg.mix,
            out_stride: tc,
            state_off: ffn_state,
            slot_len,
            eps: LN_EPS,
        };
        body.push(ops::ln_shift::ln_shift(
            cx, lid, &shift, v, self.meta, self.state, act,
        )?);
        let f = cfg.ffn_dim;
        let mut args = mm(rg.mix, c, rg.ffn, f, Act::ReluSq, false, None);
        args.lora = self.lora_firsts(l, &[(LoraTarget::FfnKey, 0, rg.mix, c)], v, body)?[0];
        body.push(matmul(
            cx,
            "ffn.key",
            lid,
            &ly.ffn_key,
            v,
            act,
            None,
            &args,
        )?);
        let mut args = mm(rg.ffn, f, rg.x, c, Act::None, true, None);
        args.lora = self.lora_firsts(l, &[(LoraTarget::FfnValue, 0, rg.ffn, f)], v, body)?[0];
        let (node, reduce) = big("ffn.value", &ly.ffn_value, &args)?;
        body.push(node);
        body.push(reduce);
        Ok(())
    }
}
