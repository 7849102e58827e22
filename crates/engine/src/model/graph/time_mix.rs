//! The time mix of one RWKV-7 block (steps 1–12 of the list in `mod.rs`), with the LoRA
//! terms of the active adapters (`model::lora`) on its large products (`lora.rs`).
//! The same split as llama.cpp's `build_rwkv7_time_mix`; the channel mix is
//! `channel_mix.rs`.

use super::blocks::Blocks;
use super::group::{group_decode, one_token_instead, push_grouped, Member};
use crate::adapter::LoraTarget;
use crate::config::GN_EPS;
use crate::error::Result;
use crate::model::gpu_weights::{GpuLayer, LayerVecs};
use crate::ops::matmul::{matmul_split, Act, LoraArgs, MatmulArgs};
use crate::ops::matvec_group::{groupable, matvec_group_one_token};
use crate::ops::wkv::WkvArgs;
use crate::ops::wkv_fused::WkvFusedArgs;
use crate::ops::wkv_out::WkvOutArgs;
use crate::ops::wkv_prep::WkvPrepArgs;
use crate::ops::{self, GpuMatrix, Node};

/// A low-rank chain `out = act2(act1(x A) B + bias)` of steps 5–8 (decay `w`, in-context
/// learning rate `a`, gate `g`, value residual `v`).
struct Chain<'m> {
    /// Profile names of the first and the second product.
    names: [&'static str; 2],
    /// `A` `[D, C]` and `B` `[C, D]` as products (`y = W x`).
    first: &'m GpuMatrix,
    second: &'m GpuMatrix,
    /// Offsets (f32) of the input mix, the hidden `[T, D]` and the output.
    x: usize,
    hidden: usize,
    out: usize,
    act1: Act,
    act2: Act,
    /// Offset of the bias in the layer's vectors (`w0`, `a0`, `v0`).
    bias: Option<usize>,
}

impl<'a> Blocks<'a> {
    /// The nodes of block `l`'s time mix (steps 1–12) onto `body`; with `ln_made`, one-token
    /// passes skip steps 1–3 (the previous block's value ran them: `channel_mix`). Returns
    /// whether one-token passes run the channel mix's steps 13–15 in the output (step 12).
    pub(super) fn time_mix(
        &self,
        l: usize,
        ly: &GpuLayer,
        ln_made: bool,
        body: &mut Vec<Node>,
    ) -> Result<bool> {
        let c = self.cfg.n_embd;
        let v = &ly.vecs;
        // 1–3: ln1, the six lerps with the previous token, the shift state.
        let state = 0; // the time mix's shift state opens the layer's state
        let ln = self.ln_shift(l, v, 6, LayerVecs::MIX * c, LayerVecs::LN1 * c, state)?;
        let skip = ln.skip();
        body.push(ln);
        if ln_made {
            let at = body.len() - 1;
            one_token_instead(&mut body[at..], skip);
        }
        // 5–8, first products: they run before r, k, v together with the adapters' first
        // products of r, k, v (a decode step: one `matvec_group` dispatch).
        let chains = self.chains(ly);
        let rkv_sites = [
            (LoraTarget::Receptance, 0, self.mix(0), c),
            (LoraTarget::Key, 1, self.mix(2), c),
            (LoraTarget::Value, 2, self.mix(3), c),
        ];
        let (terms, lora_a) = self.lora_first_nodes(l, &rkv_sites, v)?;
        let adapted = !lora_a.is_empty() || terms.iter().any(Option::is_some);
        let mut firsts = self.chain_products(l, v, &chains, false)?;
        firsts.extend(lora_a);
        let lora1_at = body.len();
        push_grouped(
            self.cx,
            "att.lora1",
            Some(l),
            firsts,
            v,
            self.act,
            self.tiles(),
            body,
        )?;
        // 4: r, k, v (one `matvec_group` dispatch in a decode step).
        self.rkv(l, ly, &terms, body)?;
        // One-token passes without adapters: the first products and r, k, v as one dispatch.
        if !adapted {
            self.fuse_lora1_rkv(l, ly, &chains, &mut body[lora1_at..])?;
        }
        // 5–8, second products (another dispatch).
        let seconds = self.chain_products(l, v, &chains, true)?;
        push_grouped(
            self.cx,
            "att.lora2",
            Some(l),
            seconds,
            v,
            self.act,
            self.tiles(),
            body,
        )?;
        // 9–11: WKV.
        self.wkv(l, v, body)?;
        // 12: x += Wo o
        self.output(l, ly, body)
    }

    /// One-token passes run the low-rank chains' first products and r, k, v (`nodes`: what
    /// steps 4–8's first half pushed) as one `matvec_group` dispatch, `att.lora1+rkv` (both
    /// read only the lerps of step 2; r, k, v in their buffer's encoding, 8-bit x where it
    /// is Q4_K, the F16 first products from theirs), where the matrices group
    /// ([`groupable`]): a dispatch less a block. Passes of 2–8 tokens keep the two groups (r, k,
    /// v then take the 8-token kernel). H200, 2.9B Q4_K: `att.lora1` took ≈ 11 µs a block
    /// of GPU time for ≈ 300 rows.
    fn fuse_lora1_rkv(
        &self,
        l: usize,
        ly: &GpuLayer,
        chains: &[Chain<'_>],
        nodes: &mut [Node],
    ) -> Result<()> {
        let (rg, c) = (&self.rg, self.cfg.n_embd);
        let mut segs: Vec<(&GpuMatrix, MatmulArgs)> = vec![
            (
                &ly.receptance,
                MatmulArgs::dense(self.mix(0), c, rg.r, c, Act::None, false, None),
            ),
            (
                &ly.key,
                MatmulArgs::dense(self.mix(2), c, rg.k, c, Act::None, false, None),
            ),
            (
                &ly.value,
                MatmulArgs::dense(self.mix(3), c, rg.v, c, Act::None, false, None),
            ),
        ];
        for ch in chains {
            let d = ch.first.n_out;
            segs.push((
                ch.first,
                MatmulArgs::dense(ch.x, c, ch.hidden, d, ch.act1, false, None),
            ));
        }
        let mats: Vec<&GpuMatrix> = segs.iter().map(|(m, _)| *m).collect();
        if !groupable(&mats, self.cx.gpu.max_binding()) {
            return Ok(());
        }
        let fused =
            matvec_group_one_token(self.cx, "att.lora1+rkv", Some(l), &segs, &ly.vecs, self.act)?;
        one_token_instead(nodes, fused);
        Ok(())
    }

    /// Offset of lerp output `i` (`xr, xw, xk, xv, xa, xg`).
    fn mix(&self, i: usize) -> usize {
        self.rg.mix + i * self.t_cap * self.cfg.n_embd
    }

    /// The low-rank chains of steps 5–8 of `ly` (v only past layer 0).
    fn chains<'m>(&self, ly: &'m GpuLayer) -> Vec<Chain<'m>> {
        let (rg, c) = (&self.rg, self.cfg.n_embd);
        let d_max = super::regions::Regions::lora_width(&self.cfg);
        let hidden = |i: usize| rg.lora + i * self.t_cap * d_max;
        let mut chains = vec![
            Chain {
                names: ["att.w1", "att.w2"],
                first: &ly.w1,
                second: &ly.w2,
                x: self.mix(1),
                hidden: hidden(0),
                out: rg.w,
                act1: Act::Tanh,
                act2: Act::None,
                bias: Some(LayerVecs::W0 * c),
            },
            Chain {
                names: ["att.a1", "att.a2"],
                first: &ly.a1,
                second: &ly.a2,
                x: self.mix(4),
                hidden: hidden(1),
                out: rg.a,
                act1: Act::None,
                act2: Act::Sigmoid,
                bias: Some(LayerVecs::A0 * c),
            },
            Chain {
                names: ["att.g1", "att.g2"],
                first: &ly.g1,
                second: &ly.g2,
                x: self.mix(5),
                hidden: hidden(2),
                out: rg.g,
                act1: Act::Sigmoid,
                act2: Act::None,
                bias: None,
            },
        ];
        if let (Some(v1), Some(v2)) = (&ly.v1, &ly.v2) {
            chains.push(Chain {
                names: ["att.v1", "att.v2"],
                first: v1,
                second: v2,
                x: self.mix(3),
                hidden: hidden(3),
                out: rg.vmix,
                act1: Act::None,
                act2: Act::Sigmoid,
                bias: Some(LayerVecs::V0 * c),
            });
        }
        chains
    }

    /// The first (or `second`) products of `chains` as members of a grouped dispatch.
    fn chain_products<'m>(
        &self,
        l: usize,
        v: &wgpu::Buffer,
        chains: &[Chain<'m>],
        second: bool,
    ) -> Result<Vec<Member<'m>>> {
        let c = self.cfg.n_embd;
        let mut out = Vec::new();
        for ch in chains {
            let d = ch.first.n_out;
            let (name, m, args) = if second {
                let args = MatmulArgs::dense(ch.hidden, d, ch.out, c, ch.act2, false, ch.bias);
                (ch.names[1], ch.second, args)
            } else {
                (
                    ch.names[0],
                    ch.first,
                    MatmulArgs::dense(ch.x, c, ch.hidden, d, ch.act1, false, None),
                )
            };
            // First products (few rows, k = C): k split on tensor cores.
            let ks = if second { 1 } else { self.ks(m.n_out, m.n_in) };
            let (node, reduce) = matmul_split(
                self.cx,
                name,
                Some(l),
                m,
                v,
                self.act,
                &args,
                self.split,
                ks,
            )?;
            out.push((node, reduce, m, args, ks));
        }
        Ok(out)
    }

    /// Step 4: r, k, v with the adapters' `terms` (one `matvec_group` dispatch in a decode
    /// step) onto `body`.
    fn rkv(
        &self,
        l: usize,
        ly: &GpuLayer,
        terms: &[Option<LoraArgs>],
        body: &mut Vec<Node>,
    ) -> Result<()> {
        let (rg, c, v) = (&self.rg, self.cfg.n_embd, &ly.vecs);
        let rkv = [
            ("att.receptance", &ly.receptance, self.mix(0), rg.r),
            ("att.key", &ly.key, self.mix(2), rg.k),
            ("att.value", &ly.value, self.mix(3), rg.v),
        ];
        let targets = [LoraTarget::Receptance, LoraTarget::Key, LoraTarget::Value];
        let mut nodes = Vec::new();
        let mut reduces = Vec::new();
        let mut seconds = Vec::new();
        let mut segs = Vec::new();
        for (((name, m, x, y), term), t) in rkv.into_iter().zip(terms).zip(targets) {
            let args = MatmulArgs::dense(x, c, y, c, Act::None, false, None);
            let (node, reduce, second) = self.adapted_big(l, v, name, m, &args, t, *term)?;
            nodes.push(node);
            reduces.push(reduce);
            seconds.extend(second);
            segs.push((
                m,
                MatmulArgs {
                    lora: *term,
                    ..args
                },
            ));
        }
        // (One grouped tensor-core dispatch for r, k and v without k slices was no faster on
        // an H100 than three split products: 242 against 3 × 78 µs per block, 2.9B F16.)
        group_decode(self.cx, "att.rkv", Some(l), &mut nodes, &segs, v, self.act)?;
        for (node, reduce) in nodes.into_iter().zip(reduces) {
            body.push(node);
            body.push(reduce);
        }
        body.extend(seconds);
        Ok(())
    }

    /// Steps 9–11 of block `l` onto `body`: kk, the k and v residuals and the decay
    /// (`wkv_prep`), the WKV recurrence (`wkv`), GroupNorm + bonus + gate (`wkv_out`);
    /// passes whose sequences all have few tokens (decode steps of any batch) run the three
    /// as one `wkv_fused` dispatch instead ([`fused_wkv`]).
    fn wkv(&self, l: usize, v: &wgpu::Buffer, body: &mut Vec<Node>) -> Result<()> {
        let (cx, rg, act, lid) = (self.cx, &self.rg, self.act, Some(l));
        let (c, h) = (self.cfg.n_embd, self.cfg.n_head);
        let layer0 = u32::from(l == 0);
        // The WKV state follows the time mix's shift state in the layer's part of a slot.
        let (state, state_off, slot_len) = self.layer_state(l, c);
        let (state_off, slot_len) = (state_off as u32, slot_len as u32);
        let prep = WkvPrepArgs {
            c: c as u32,
            n_head: h as u32,
            layer0,
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
        let mut prep_node = ops::wkv_prep::wkv_prep(cx, lid, &prep, v, act)?;
        prep_node.small = Some(fused_wkv(cx, prep_node.skip()));
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
            state_off,
            slot_len,
            _p: [0; 2],
        };
        let fused = WkvFusedArgs {
            c: c as u32,
            layer0,
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
            state_off,
            slot_len,
            eps: GN_EPS,
            _p: [0; 2],
        };
        let mut wkv_node = ops::wkv::wkv(cx, lid, &wkv, self.meta, state, act)?;
        wkv_node.small = Some(fused_wkv(
            cx,
            ops::wkv_fused::wkv_fused(cx, lid, &fused, self.meta, state, act, v)?,
        ));
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
        out_node.small = Some(fused_wkv(cx, out_node.skip()));
        body.push(out_node);
        Ok(())
    }

    /// Step 12 of block `l`: `x += Wo o`, with the adapters' term, onto `body`; without
    /// one, one-token passes may also run the channel mix's steps 13–15 in its last
    /// workgroups ([`Blocks::output_with_channel_mix_ln`]): returns whether they do.
    fn output(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<bool> {
        let (rg, c, v) = (&self.rg, self.cfg.n_embd, &ly.vecs);
        let args = MatmulArgs::dense(rg.o, c, rg.x, c, Act::None, true, None);
        let term = self.lora_firsts(l, &[(LoraTarget::Output, 0, rg.o, c)], v, body)?[0];
        let t = LoraTarget::Output;
        let (mut node, reduce, second) =
            self.adapted_big(l, v, "att.output", &ly.output, &args, t, term)?;
        let with = MatmulArgs { lora: term, ..args };
        self.make_own_h(l, t, "att.output", &ly.output, v, &with, &mut node)?;
        let at = body.len();
        body.push(node);
        body.push(reduce);
        body.extend(second);
        if term.is_none() {
            if let Some(fused) = self.output_with_channel_mix_ln(l, ly)? {
                one_token_instead(&mut body[at..], fused);
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// `node` as the variant of `wkv_prep`, `wkv` and `wkv_out` (all three alike) for passes
/// where `wkv_fused` runs: every sequence at most [`Tuning::wkv_fused_len`] tokens
/// (default 8), whatever the batch — a server's decode step of 128 sequences runs one
/// dispatch a layer instead of three. The fused kernel steps a sequence's tokens one by
/// one in one workgroup, so a long sequence in the pass (a prompt) sends the whole pass
/// to the chunked scan. `wkv_fused_len = 0`: passes of at most 8 tokens in all (the rule
/// before).
///
/// [`Tuning::wkv_fused_len`]: crate::gpu::Tuning::wkv_fused_len
fn fused_wkv(cx: &ops::Ctx, node: Node) -> ops::Small {
    match cx.gpu.tuning.wkv_fused_len {
        0 => super::blocks::few(node),
        max => ops::Small {
            count: ops::Count::Longest,
            max,
            node: Box::new(node),
        },
    }
}
