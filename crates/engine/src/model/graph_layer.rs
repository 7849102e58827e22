//! The nodes of one RWKV-7 block (steps 1–17 of `graph.rs`'s list), with the LoRA terms of
//! the active adapters (`model::lora`) on the six large products (their nodes:
//! `graph_lora.rs`).

use crate::adapter::LoraTarget;
use crate::error::Result;
use crate::model::config::Rwkv7Config;
use crate::model::gpu_weights::{GpuLayer, LayerVecs};
use crate::model::graph::{GN_EPS, LN_EPS};
use crate::model::graph_group::{group_decode, push_grouped, Member};
use crate::model::graph_lora::HPlan;
use crate::model::lora::ActiveLoras;
use crate::model::regions::Regions;
use crate::ops::ln_shift::LnShiftArgs;
use crate::ops::matmul::{
    coop_ksplit, lora_in_tiles, matmul, matmul_split, matmul_waves, Act, MatmulArgs, SMALL_T,
};
use crate::ops::wkv::WkvArgs;
use crate::ops::wkv_fused::WkvFusedArgs;
use crate::ops::wkv_out::WkvOutArgs;
use crate::ops::wkv_prep::WkvPrepArgs;
use crate::ops::{self, Count, Ctx, GpuMatrix, Node, Small};

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
        add_before_act: false,
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
    /// The products that make their own LoRA h in one-token passes (`graph_lora.rs`).
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
        // LayerNorm + token shift of the residual into the mix region (one dispatch):
        // `n_mix` lerps at `mix_off`, the LayerNorm at `ln_off`, the shift state at `state_off`.
        let ln_shift = |n_mix: usize, mix_off: usize, ln_off: usize, state_off: usize| {
            let args = LnShiftArgs {
                c,
                n_mix,
                mix_off,
                ln_off,
                x_off: rg.x,
                out_off: rg.mix,
                out_stride: tc,
                state_off,
                slot_len,
                eps: LN_EPS,
            };
            ops::ln_shift::ln_shift(cx, lid, &args, v, self.meta, self.state, act)
        };
        // 1–3: ln1, lerps, shift state
        body.push(ln_shift(6, LayerVecs::MIX * c, LayerVecs::LN1 * c, base)?);
        let mix = |i: usize| rg.mix + i * tc;
        // The variant of a node for passes of at most SMALL_T tokens (decode).
        let few = |node: Node| Small {
            count: Count::Tokens,
            max: SMALL_T,
            node: Box::new(node),
        };
        // 5–8: low-rank chains `out = act2(act1(x A) B + bias)`: (op names, A, B, input
        // mix, hidden, act1, out, act2, bias). The first products run before r, k, v
        // together with the adapters' first products of r, k, v (a decode step: one
        // `matvec_group` dispatch), the second ones after r, k, v (another).
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
        let (terms, lora_a) = self.lora_first_nodes(
            l,
            &[
                (LoraTarget::Receptance, 0, mix(0), c),
                (LoraTarget::Key, 1, mix(2), c),
                (LoraTarget::Value, 2, mix(3), c),
            ],
            v,
        )?;
        let chain_products = |second: bool| -> Result<Vec<Member>> {
            let mut out = Vec::new();
            for &(names, m1, m2, x, hid, act1, y, act2, bias) in &chains {
                let d = m1.n_out;
                let (name, m, args) = if second {
                    (names[1], m2, mm(hid, d, y, c, act2, false, bias))
                } else {
                    (names[0], m1, mm(x, c, hid, d, act1, false, None))
                };
                // First products (few rows, k = C): k split on tensor cores.
                let ks = if second { 1 } else { self.ks(m.n_out, m.n_in) };
                let (node, reduce) = matmul_split(cx, name, lid, m, v, act, &args, self.split, ks)?;
                out.push((node, reduce, m, args, ks));
            }
            Ok(out)
        };
        let mut firsts = chain_products(false)?;
        firsts.extend(lora_a);
        push_grouped(cx, "att.lora1", lid, firsts, v, act, self.tiles(), body)?;
        // 4: r, k, v (one `matvec_group` dispatch in a decode step).
        let rkv = [
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
        let mut nodes = Vec::new();
        let mut reduces = Vec::new();
        let mut seconds = Vec::new();
        let mut segs = Vec::new();
        let targets = [LoraTarget::Receptance, LoraTarget::Key, LoraTarget::Value];
        for (((name, m, args), term), t) in rkv.iter().zip(&terms).zip(targets) {
            let (node, reduce, second) = self.adapted_big(l, v, name, m, args, t, *term)?;
            nodes.push(node);
            reduces.push(reduce);
            seconds.extend(second);
            segs.push((
                *m,
                MatmulArgs {
                    lora: *term,
                    ..*args
                },
            ));
        }
        // (One grouped tensor-core dispatch for r, k and v without k slices was no faster on
        // an H100 than three split products: 242 against 3 × 78 µs per block, 2.9B F16.)
        group_decode(cx, "att.rkv", lid, &mut nodes, &segs, v, act)?;
        for (node, reduce) in nodes.into_iter().zip(reduces) {
            body.push(node);
            body.push(reduce);
        }
        body.extend(seconds);
        let seconds = chain_products(true)?;
        push_grouped(cx, "att.lora2", lid, seconds, v, act, self.tiles(), body)?;
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
        let args = mm(rg.o, c, rg.x, c, Act::None, true, None);
        let term = self.lora_firsts(l, &[(LoraTarget::Output, 0, rg.o, c)], v, body)?[0];
        let t = LoraTarget::Output;
        let (mut node, reduce, second) =
            self.adapted_big(l, v, "att.output", &ly.output, &args, t, term)?;
        let with = MatmulArgs { lora: term, ..args };
        self.make_own_h(l, t, "att.output", &ly.output, v, &with, &mut node)?;
        body.push(node);
        body.push(reduce);
        body.extend(second);
        // 13–17: channel mix
        let ffn_state = base + c + h * cfg.head_size * cfg.head_size;
        body.push(ln_shift(
            1,
            LayerVecs::FFN_X_K * c,
            LayerVecs::LN2 * c,
            ffn_state,
        )?);
        let f = cfg.ffn_dim;
        // Channel-mix key: with adapters and no tensor cores, larger passes leave relu² to
        // `B h`'s product.
        let args = mm(rg.mix, c, rg.ffn, f, Act::ReluSq, false, None);
        let term = self.lora_firsts(l, &[(LoraTarget::FfnKey, 0, rg.mix, c)], v, body)?[0];
        let in_tiles = lora_in_tiles(cx.gpu);
        // (k slices only where `coop_ksplit` asks for them: see `RWKV_KSPLIT_WIDE`; a last
        // wave mostly empty is split off by `matmul_waves`.)
        let with = MatmulArgs { lora: term, ..args };
        let t = LoraTarget::FfnKey;
        let at = body.len();
        if (term.is_none() || in_tiles)
            && self.push_waves(l, v, "ffn.key", &ly.ffn_key, &with, body)?
        {
            // The head piece carries the whole product's decode variants.
            self.make_own_h(l, t, "ffn.key", &ly.ffn_key, v, &with, &mut body[at])?;
            return self.ffn_value(l, ly, body);
        }
        let (mut node, reduce) = match term {
            None => self.big(l, v, "ffn.key", &ly.ffn_key, &args)?,
            Some(_) if in_tiles => self.big(l, v, "ffn.key", &ly.ffn_key, &with)?,
            Some(_) => {
                let pre = MatmulArgs {
                    act: Act::None,
                    ..args
                };
                let dec = MatmulArgs { lora: term, ..args };
                let node = Self::decode_from(
                    matmul(cx, "ffn.key", lid, &ly.ffn_key, v, act, None, &pre)?,
                    matmul(cx, "ffn.key", lid, &ly.ffn_key, v, act, None, &dec)?,
                );
                let reduce = node.skip();
                (node, reduce)
            }
        };
        self.make_own_h(l, t, "ffn.key", &ly.ffn_key, v, &with, &mut node)?;
        let second = match in_tiles {
            true => None,
            false => self.lora_second(l, t, term, &node, rg.ffn, Act::ReluSq, true, v)?,
        };
        body.push(node);
        body.push(reduce);
        body.extend(second);
        self.ffn_value(l, ly, body)
    }

    /// 17: `x += Wv k` of block `l` (with its adapters' term) onto `body`.
    fn ffn_value(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<()> {
        let (v, rg, f, c) = (&ly.vecs, &self.rg, self.cfg.ffn_dim, self.cfg.n_embd);
        let args = mm(rg.ffn, f, rg.x, c, Act::None, true, None);
        let term = self.lora_firsts(l, &[(LoraTarget::FfnValue, 0, rg.ffn, f)], v, body)?[0];
        let t = LoraTarget::FfnValue;
        let (mut node, reduce, second) =
            self.adapted_big(l, v, "ffn.value", &ly.ffn_value, &args, t, term)?;
        let with = MatmulArgs { lora: term, ..args };
        self.make_own_h(l, t, "ffn.value", &ly.ffn_value, v, &with, &mut node)?;
        body.push(node);
        body.push(reduce);
        body.extend(second);
        Ok(())
    }

    /// A wide product of block `l` that is not k-split and whose tiles end in a mostly
    /// empty wave as [`matmul_waves`] (whole tiles, a k-split tail, its reduce) onto
    /// `body`; false (nothing pushed) where it is not split that way.
    fn push_waves(
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
