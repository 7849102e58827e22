//! The channel mix of one RWKV-7 block (steps 13–17 of the list in `mod.rs`), with the
//! LoRA terms of the active adapters on its key and value (`lora.rs`). The same split as
//! llama.cpp's `build_rwkv7_channel_mix`; one-token passes without adapters fold steps
//! 13–15 into the key and the value (`fuse_ln`), and the next block's steps 1–3 into the
//! value's last workgroups (with or without that fusion: `value_opens_next`).

use super::blocks::Blocks;
use super::group::one_token_instead;
use crate::adapter::LoraTarget;
use crate::config::LN_EPS;
use crate::error::Result;
use crate::model::gpu_weights::{GpuLayer, LayerVecs};
use crate::ops::matmul::{
    ln_fuse_fits, ln_next_fits, lora_in_tiles, matmul, matvec_ln, q8_handoff_fits, Act, LnEnd,
    LnFuse, LnNext, MatmulArgs,
};
use crate::ops::Node;

impl<'a> Blocks<'a> {
    /// The nodes of block `l`'s channel mix (steps 13–17) onto `body`; with `ln_made`,
    /// one-token passes skip steps 13–15 (the time mix's output ran them:
    /// [`Blocks::output_opens_channel_mix`]). Returns whether one-token passes also run the
    /// time mix's LayerNorm + token shift of `next` (the next block, steps 1–3) in the
    /// value (its `ln_shift` then dispatches nothing for them).
    pub(super) fn channel_mix(
        &self,
        l: usize,
        ly: &GpuLayer,
        next: Option<&GpuLayer>,
        ln_made: bool,
        body: &mut Vec<Node>,
    ) -> Result<bool> {
        let (c, v) = (self.cfg.n_embd, &ly.vecs);
        // 13–15: ln2, the lerp with the previous token, the shift state (after the time
        // mix's shift state and WKV state in the layer's state).
        let state = self.channel_mix_state();
        let ln_at = body.len();
        let ln = self.ln_shift(l, v, 1, LayerVecs::FFN_X_K * c, LayerVecs::LN2 * c, state)?;
        let skip = ln.skip();
        body.push(ln);
        if ln_made {
            one_token_instead(&mut body[ln_at..], skip);
        }
        // 16: h = relu(Wk xk)²
        let key_adapted = self.ffn_key(l, ly, body)?;
        // 17: x += Wv h
        let value_at = body.len();
        let value_adapted = self.ffn_value(l, ly, body)?;
        // One-token passes without adapters: 13–15 inside the key and the value.
        let next = next.filter(|_| ln_next_fits(self.cx, &ly.ffn_value));
        if !ln_made
            && !key_adapted
            && !value_adapted
            && ln_fuse_fits(self.cx, &ly.ffn_key, &ly.ffn_value)
        {
            let (key_nodes, value_nodes) = body[ln_at..].split_at_mut(value_at - ln_at);
            return self.fuse_ln(l, ly, state, next, key_nodes, value_nodes);
        }
        // Keys without 8-bit x keep their `ln_shift`; the value can still open the next
        // block (its adapters aside).
        match next {
            Some(n) if !value_adapted => self.value_opens_next(l, ly, n, &mut body[value_at..]),
            _ => Ok(false),
        }
    }

    /// One-token passes run block `l`'s value (`value_nodes`: what step 17 pushed) with the
    /// next block's time-mix LayerNorm + token shift in its last workgroups
    /// ([`LnEnd::NextOnly`]), the channel mix's own LayerNorm left to its `ln_shift`:
    /// returns whether it does (then the next block's `ln_shift` dispatches nothing).
    fn value_opens_next(
        &self,
        l: usize,
        ly: &GpuLayer,
        next: &GpuLayer,
        value_nodes: &mut [Node],
    ) -> Result<bool> {
        let (cx, rg, act, v) = (self.cx, &self.rg, self.act, &ly.vecs);
        let (c, f) = (self.cfg.n_embd, self.cfg.ffn_dim);
        let ln = self.meta_only_ln(l);
        let nx = self.ln_next(l, next);
        if !ln.aligned() || !nx.aligned() {
            return Ok(false);
        }
        let va = MatmulArgs::dense(rg.ffn, f, rg.x, c, Act::None, true, None);
        let m = &ly.ffn_value;
        let end = LnEnd::NextOnly;
        let value = matvec_ln(
            cx,
            "ffn.value",
            Some(l),
            m,
            v,
            act,
            &va,
            &ln,
            end,
            Some(&nx),
        )?;
        one_token_instead(value_nodes, value);
        Ok(true)
    }

    /// The `LnFuse` of a [`LnEnd::NextOnly`] product of block `l`: only its metadata and
    /// eps are read (it saves no state of its own).
    fn meta_only_ln(&self, l: usize) -> LnFuse<'a> {
        let (buffer, state_off, slot_len) = self.layer_state(l, 0);
        LnFuse {
            meta: self.meta,
            state: buffer,
            state_off,
            slot_len,
            ln_w: 0,
            ln_b: 0,
            mix: 0,
            eps: LN_EPS,
            stats: self.rg.ln_stats,
            x8: None,
        }
    }

    /// Block `l`'s time-mix output (`x += Wo o`, no adapter term) for one-token passes
    /// with its channel mix's LayerNorm + token shift (steps 13–15) in its last
    /// workgroups, where [`Blocks::output_opens_channel_mix`]; `None` elsewhere.
    pub(super) fn output_with_channel_mix_ln(
        &self,
        l: usize,
        ly: &GpuLayer,
    ) -> Result<Option<Node>> {
        if !self.output_opens_channel_mix(ly) {
            return Ok(None);
        }
        let ln = self.meta_only_ln(l);
        let nx = self.ln_channel_mix(l, ly);
        if !ln.aligned() || !nx.aligned() {
            return Ok(None);
        }
        let (rg, c) = (&self.rg, self.cfg.n_embd);
        let a = MatmulArgs::dense(rg.o, c, rg.x, c, Act::None, true, None);
        let (m, v, end) = (&ly.output, &ly.vecs, LnEnd::NextOnly);
        let node = matvec_ln(
            self.cx,
            "att.output",
            Some(l),
            m,
            v,
            self.act,
            &a,
            &ln,
            end,
            Some(&nx),
        )?;
        Ok(Some(node))
    }

    /// Offset (f32) of the channel mix's shift state in a layer's state: after the time
    /// mix's shift state `[C]` and its WKV state `[H, N, N]`.
    fn channel_mix_state(&self) -> usize {
        let cfg = &self.cfg;
        cfg.n_embd + cfg.n_head * cfg.head_size * cfg.head_size
    }

    /// Whether one-token passes let block `l`'s time-mix output (`x += Wo o`) run its
    /// channel mix's LayerNorm + token shift (steps 13–15) in its last workgroups
    /// ([`LnEnd::NextOnly`] with one lerp), in place of their `ln_shift` dispatch: where
    /// the key does not make its own x from the residual ([`ln_fuse_fits`]: keys without
    /// 8-bit x, such as F16 ones) and the output takes the tail ([`ln_next_fits`]).
    fn output_opens_channel_mix(&self, ly: &GpuLayer) -> bool {
        !ln_fuse_fits(self.cx, &ly.ffn_key, &ly.ffn_value)
            && ln_next_fits(self.cx, &ly.output)
            && ly.output.n_out == self.cfg.n_embd
            && ly.output.row0 == 0
    }

    /// Where block `l`'s time-mix output writes its channel mix's LayerNorm + token shift:
    /// its `ln2`, the key's mix and the channel mix's shift state.
    fn ln_channel_mix<'n>(&'n self, l: usize, ly: &'n GpuLayer) -> LnNext<'n> {
        let state = self.channel_mix_state();
        self.ln_tail(l, state, &ly.vecs, LayerVecs::LN2, LayerVecs::FFN_X_K, 1)
    }

    /// Where block `l`'s value writes the time-mix LayerNorm + token shift of `next`
    /// (block `l + 1`): its `ln1`, six mixes and shift state (which opens its state).
    fn ln_next<'n>(&'n self, l: usize, next: &'n GpuLayer) -> LnNext<'n> {
        self.ln_tail(l + 1, 0, &next.vecs, LayerVecs::LN1, LayerVecs::MIX, 6)
    }

    /// A LayerNorm + token shift run in a product's last workgroups: the LayerNorm of
    /// `vecs`' row `ln` (weight, then bias), `mixes` lerps from row `mix`, the shift state
    /// at `state` (f32) of block `block`'s state, the lerps' outputs in the mixed-x region.
    fn ln_tail<'n>(
        &'n self,
        block: usize,
        state: usize,
        vecs: &'n wgpu::Buffer,
        ln: usize,
        mix: usize,
        mixes: usize,
    ) -> LnNext<'n> {
        let c = self.cfg.n_embd;
        let (state, state_off, slot_len) = self.layer_state(block, state);
        LnNext {
            vecs,
            ln_w: ln * c,
            ln_b: ln * c + c,
            mix: mix * c,
            mixes,
            state,
            state_off,
            slot_len,
            out: self.rg.mix,
            out_stride: self.t_cap * c,
            done: self.rg.ln_done,
        }
    }

    /// One-token passes run the LayerNorm + token shift of steps 13–15 inside the key and
    /// the value (`ops::matmul::ln_fuse`): the key's node, made from the residual in its
    /// prologue, in place of what `key_nodes` (the `ln_shift` and the key's) dispatch; the
    /// value's, which also saves the shift state (at `state` of the layer's state), in
    /// place of `value_nodes`'. A dispatch less a block. With `next` (the next block) the
    /// value's last workgroups also run that block's time-mix LayerNorm + token shift
    /// (`LnEnd::Next`): returns whether they do.
    fn fuse_ln(
        &self,
        l: usize,
        ly: &GpuLayer,
        state: usize,
        next: Option<&GpuLayer>,
        key_nodes: &mut [Node],
        value_nodes: &mut [Node],
    ) -> Result<bool> {
        let (cx, rg, act, v) = (self.cx, &self.rg, self.act, &ly.vecs);
        let (c, f) = (self.cfg.n_embd, self.cfg.ffn_dim);
        let (buffer, state_off, slot_len) = self.layer_state(l, state);
        let ln = LnFuse {
            meta: self.meta,
            state: buffer,
            state_off,
            slot_len,
            ln_w: LayerVecs::LN2 * c,
            ln_b: LayerVecs::LN2 * c + c,
            mix: LayerVecs::FFN_X_K * c,
            eps: LN_EPS,
            stats: rg.ln_stats,
            // The key's ReLU² to the value as 8-bit x, where the value takes it.
            x8: q8_handoff_fits(cx, &ly.ffn_key, &ly.ffn_value).then_some(rg.ffn_q8),
        };
        if !ln.aligned() {
            return Ok(false); // not reached with C a multiple of 4: `ln_shift` stays
        }
        let lid = Some(l);
        let ka = MatmulArgs::dense(rg.x, c, rg.ffn, f, Act::ReluSq, false, None);
        let key = matvec_ln(
            cx,
            "ffn.key",
            lid,
            &ly.ffn_key,
            v,
            act,
            &ka,
            &ln,
            LnEnd::In,
            None,
        )?;
        let va = MatmulArgs::dense(rg.ffn, f, rg.x, c, Act::None, true, None);
        // The next block's steps 1–3 (the time mix's shift state opens its state).
        let nx = next.map(|n| self.ln_next(l, n));
        let end = match nx {
            Some(_) => LnEnd::Next,
            None => LnEnd::Out,
        };
        let m = &ly.ffn_value;
        let value = matvec_ln(cx, "ffn.value", lid, m, v, act, &va, &ln, end, nx.as_ref())?;
        one_token_instead(key_nodes, key);
        one_token_instead(value_nodes, value);
        Ok(nx.is_some())
    }

    /// 16: `h = relu(Wk xk)²` of block `l` (with its adapters' term) onto `body`; whether
    /// it has one.
    fn ffn_key(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<bool> {
        let (cx, rg, act, v) = (self.cx, &self.rg, self.act, &ly.vecs);
        let (c, f) = (self.cfg.n_embd, self.cfg.ffn_dim);
        // With adapters and no tensor cores, larger passes leave relu² to `B h`'s product.
        let args = MatmulArgs::dense(rg.mix, c, rg.ffn, f, Act::ReluSq, false, None);
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
            return Ok(term.is_some());
        }
        let (mut node, reduce) = match term {
            None => self.big(l, v, "ffn.key", &ly.ffn_key, &args)?,
            Some(_) if in_tiles => self.big(l, v, "ffn.key", &ly.ffn_key, &with)?,
            Some(_) => {
                let pre = MatmulArgs {
                    act: Act::None,
                    ..args
                };
                let lid = Some(l);
                let node = Self::decode_from(
                    matmul(cx, "ffn.key", lid, &ly.ffn_key, v, act, None, &pre)?,
                    matmul(cx, "ffn.key", lid, &ly.ffn_key, v, act, None, &with)?,
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
        Ok(term.is_some())
    }

    /// 17: `x += Wv h` of block `l` (with its adapters' term) onto `body`; whether it has
    /// one.
    fn ffn_value(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<bool> {
        let (v, rg, f, c) = (&ly.vecs, &self.rg, self.cfg.ffn_dim, self.cfg.n_embd);
        let args = MatmulArgs::dense(rg.ffn, f, rg.x, c, Act::None, true, None);
        let term = self.lora_firsts(l, &[(LoraTarget::FfnValue, 0, rg.ffn, f)], v, body)?[0];
        let t = LoraTarget::FfnValue;
        let (mut node, reduce, second) =
            self.adapted_big(l, v, "ffn.value", &ly.ffn_value, &args, t, term)?;
        let with = MatmulArgs { lora: term, ..args };
        self.make_own_h(l, t, "ffn.value", &ly.ffn_value, v, &with, &mut node)?;
        body.push(node);
        body.push(reduce);
        body.extend(second);
        Ok(term.is_some())
    }
}
