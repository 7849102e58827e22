//! Where each activation lives: the static offsets of the forward pass's regions in its one
//! f32 buffer (`t_cap` rows each), so every bind group is built once.

use crate::config::Rwkv7Config;

/// Offsets (f32 elements) of the activation regions.
#[derive(Debug, Clone, Copy)]
pub struct Regions {
    pub x: usize,
    /// Six lerp outputs, `t_cap × C` apart.
    pub mix: usize,
    pub r: usize,
    pub k: usize,
    pub v: usize,
    pub a: usize,
    pub w: usize,
    pub g: usize,
    pub vmix: usize,
    pub vfirst: usize,
    pub kk: usize,
    pub y: usize,
    pub o: usize,
    /// LoRA hidden `[t_cap, d_max]` (four of them: w, a, g, v).
    pub lora: usize,
    /// Hidden `h` of the active adapters, three `[t_cap, R]` slots (r, k, v at once;
    /// output and the channel mix reuse the first), `R` the largest stacked rank.
    pub adapter_h: usize,
    /// `R` of [`Regions::adapter_h`] (0: no adapter active).
    pub adapter_rank: usize,
    pub ffn: usize,
    /// Gathered rows `[r_cap, C]` and their `ln_out` (the embeddings).
    pub head_in: usize,
    pub head_norm: usize,
    /// (mean, rstd) of the residual's channel-mix LayerNorm, from a one-token pass's key
    /// to its value (`ops::matmul::ln_fuse`): 4 floats at a multiple of 4.
    pub ln_stats: usize,
    /// A u32 counter of a one-token value's finished workgroups (`ops::matmul::ln_fuse`,
    /// `LnNext`): 0 in the fresh buffer, and left 0 by each dispatch that counts.
    pub ln_done: usize,
    /// The channel-mix key's output as 8-bit x for a one-token pass's value
    /// (`ops::matmul::ln_fuse`, `LnFuse::x8`): F / 4 words, then F / 16 f32, at a
    /// multiple of 4.
    pub ffn_q8: usize,
    pub len: usize,
}

impl Regions {
    pub(crate) fn new(cfg: &Rwkv7Config, t_cap: usize, r_cap: usize, adapter_rank: usize) -> Self {
        let tc = t_cap * cfg.n_embd;
        let d_max = Regions::lora_width(cfg);
        let mut at = 0;
        let mut take = |n: usize| {
            let o = at;
            at += n;
            o
        };
        let x = take(tc);
        let mix = take(6 * tc);
        let r = take(tc);
        let k = take(tc);
        let v = take(tc);
        let a = take(tc);
        let w = take(tc);
        let g = take(tc);
        let vmix = take(tc);
        let vfirst = take(tc);
        let kk = take(tc);
        let y = take(tc);
        let o = take(tc);
        let lora = take(4 * t_cap * d_max);
        let adapter_h = take(3 * t_cap * adapter_rank);
        // The channel mix's h = relu(Wk xk)² in the mixes' slots 1.. where it fits: the
        // channel mix reads only slot 0 (its xk) of them, and the next block's time mix
        // writes them anew after the value has read h (in one-token passes the value's last
        // workgroups write them, once every workgroup has read its h).
        let ffn = if Regions::ffn_in_mix(cfg) {
            mix + tc
        } else {
            take(t_cap * cfg.ffn_dim)
        };
        let head_in = take(r_cap * cfg.n_embd);
        let head_norm = take(r_cap * cfg.n_embd);
        // 4 floats at a multiple of 4 within 7.
        let ln_stats = take(7).next_multiple_of(4);
        let ln_done = take(1);
        let f = cfg.ffn_dim;
        let ffn_q8 = take(f / 4 + f / 16 + 3).next_multiple_of(4);
        Regions {
            x,
            mix,
            r,
            k,
            v,
            a,
            w,
            g,
            vmix,
            vfirst,
            kk,
            y,
            o,
            lora,
            adapter_h,
            adapter_rank,
            ffn,
            head_in,
            head_norm,
            ln_stats,
            ln_done,
            ffn_q8,
            len: at,
        }
    }

    /// Whether the channel mix's h (`[t_cap, F]`) shares the mixes' slots 1–5 rather than
    /// taking a region of its own: where F ≤ 5 C (4 C in RWKV-7 models).
    pub fn ffn_in_mix(cfg: &Rwkv7Config) -> bool {
        cfg.ffn_dim <= 5 * cfg.n_embd
    }

    /// Width of each LoRA hidden region: the largest of the four ranks.
    pub fn lora_width(cfg: &Rwkv7Config) -> usize {
        cfg.lora
            .decay_w
            .max(cfg.lora.iclr_a)
            .max(cfg.lora.value_v)
            .max(cfg.lora.gate_g)
    }

    /// Slot `i` (0–2) of the adapters' `h`.
    pub fn adapter_slot(&self, i: usize, t_cap: usize) -> usize {
        self.adapter_h + i * t_cap * self.adapter_rank
    }

    /// f32 elements of activations per token of capacity (for sizing `t_cap`), without
    /// adapters.
    pub fn per_token(cfg: &Rwkv7Config) -> usize {
        let d_max = Regions::lora_width(cfg);
        let ffn = if Regions::ffn_in_mix(cfg) {
            0
        } else {
            cfg.ffn_dim
        };
        19 * cfg.n_embd + 4 * d_max + ffn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// h shares the mixes' slots 1.. only, never slot 0 (the channel mix's xk, which the
    /// key reads while writing h) nor any region live across the channel mix.
    #[test]
    fn the_channel_mix_h_lies_in_the_mixes_after_slot_0() {
        let mut cfg = Rwkv7Config {
            n_layer: 4,
            n_embd: 256,
            head_size: 64,
            n_head: 4,
            ffn_dim: 1024,
            vocab_size: 65536,
            lora: crate::config::LoraRanks {
                decay_w: 32,
                iclr_a: 32,
                value_v: 32,
                gate_g: 64,
            },
        };
        let (t_cap, c) = (16, cfg.n_embd);
        let rg = Regions::new(&cfg, t_cap, 4, 0);
        let (tc, hf) = (t_cap * c, t_cap * cfg.ffn_dim);
        assert!(Regions::ffn_in_mix(&cfg));
        assert!(rg.ffn >= rg.mix + tc && rg.ffn + hf <= rg.mix + 6 * tc);
        let alone = Regions::new(&cfg, t_cap, 4, 0).len;
        cfg.ffn_dim = 6 * c;
        let wide = Regions::new(&cfg, t_cap, 4, 0);
        assert!(!Regions::ffn_in_mix(&cfg));
        assert!(
            wide.ffn >= wide.mix + 6 * tc,
            "a wider h has its own region"
        );
        // (The 8-bit copy of h for one-token passes grows by 5 / 16 of the 2 C more.)
        let q8 = 5 * 2 * c / 16;
        assert_eq!(
            wide.len - alone,
            6 * tc + q8,
            "the region h saves where it fits"
        );
        assert_eq!(
            Regions::per_token(&cfg) - 6 * c,
            19 * c + 4 * Regions::lora_width(&cfg)
        );
    }
}
