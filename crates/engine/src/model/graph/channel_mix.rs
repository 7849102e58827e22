//! The channel mix of one RWKV-7 block (steps 13–17 of the list in `mod.rs`), with the
//! LoRA terms of the active adapters on its key and value (`lora.rs`). The same split as
//! llama.cpp's `build_rwkv7_channel_mix`.

use super::blocks::{mm, Blocks};
use crate::adapter::LoraTarget;
use crate::error::Result;
use crate::model::gpu_weights::{GpuLayer, LayerVecs};
use crate::ops::matmul::{lora_in_tiles, matmul, Act, MatmulArgs};
use crate::ops::Node;

impl<'a> Blocks<'a> {
    /// The nodes of block `l`'s channel mix (steps 13–17) onto `body`.
    pub(super) fn channel_mix(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<()> {
        let (c, v) = (self.cfg.n_embd, &ly.vecs);
        // 13–15: ln2, the lerp with the previous token, the shift state (after the time
        // mix's shift state and WKV state in the layer's state).
        let cfg = &self.cfg;
        let state = c + cfg.n_head * cfg.head_size * cfg.head_size;
        body.push(self.ln_shift(l, v, 1, LayerVecs::FFN_X_K * c, LayerVecs::LN2 * c, state)?);
        // 16: h = relu(Wk xk)²
        self.ffn_key(l, ly, body)?;
        // 17: x += Wv h
        self.ffn_value(l, ly, body)
    }

    /// 16: `h = relu(Wk xk)²` of block `l` (with its adapters' term) onto `body`.
    fn ffn_key(&self, l: usize, ly: &GpuLayer, body: &mut Vec<Node>) -> Result<()> {
        let (cx, rg, act, v) = (self.cx, &self.rg, self.act, &ly.vecs);
        let (c, f) = (self.cfg.n_embd, self.cfg.ffn_dim);
        // With adapters and no tensor cores, larger passes leave relu² to `B h`'s product.
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
            return self.make_own_h(l, t, "ffn.key", &ly.ffn_key, v, &with, &mut body[at]);
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
        Ok(())
    }

    /// 17: `x += Wv h` of block `l` (with its adapters' term) onto `body`.
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
}
