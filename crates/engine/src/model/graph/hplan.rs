//! The plan of the one-token LoRA h sets: which adapted products make their own h
//! (`lora.rs`, [`crate::ops::matmul::matvec_hprod`]) and in which slots of one buffer.

use crate::adapter::LoraTarget;
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::model::lora::ActiveLoras;
use crate::ops::matmul::h_sets;

/// The adapted products whose one-token variant makes its own h, in pass order (per
/// layer: output, channel-mix key, channel-mix value — the products whose input comes
/// from the dispatch right before them; r, k and v's first products already share the
/// low-rank chains' dispatch), each with a set of `R₃₂` slots in one buffer. Each one
/// empties the set of the next (the last the first's, for the next pass).
pub struct HPlan {
    pub sets: wgpu::Buffer,
    /// `[layer][target]`: (its set, the set it empties), u32 offsets.
    at: Vec<[Option<(usize, usize)>; 6]>,
}

impl HPlan {
    /// The plan for `loras` over `n_layer` blocks: the sites with one adapter (a site of
    /// several keeps its first-product dispatch), when at least two are (`None` otherwise,
    /// or with `RWKV_LORA_HPROD=0`: `Tuning::lora_hprod`).
    ///
    /// Errors: as [`h_sets`].
    pub fn new(gpu: &GpuContext, loras: &ActiveLoras, n_layer: usize) -> Result<Option<Self>> {
        if !gpu.tuning.lora_hprod {
            return Ok(None);
        }
        let mut order = Vec::new();
        let mut slots = 0;
        for l in 0..n_layer {
            for t in [LoraTarget::Output, LoraTarget::FfnKey, LoraTarget::FfnValue] {
                if let Some(site) = loras.site(l, t).filter(|s| s.parts.len() == 1) {
                    order.push((l, t, slots));
                    slots += site.width;
                }
            }
        }
        if order.len() < 2 {
            return Ok(None);
        }
        let mut at: Vec<[Option<(usize, usize)>; 6]> =
            (0..n_layer).map(|_| Default::default()).collect();
        for (i, &(l, t, set)) in order.iter().enumerate() {
            let next = order[(i + 1) % order.len()].2;
            at[l][t.index()] = Some((set, next));
        }
        Ok(Some(HPlan {
            sets: h_sets(gpu, slots)?,
            at,
        }))
    }

    /// (set, set it empties) of (layer, target), if its product makes its own h.
    pub fn at(&self, l: usize, t: LoraTarget) -> Option<(usize, usize)> {
        self.at.get(l).and_then(|r| r[t.index()])
    }
}
