//! The RWKV-7 forward pass as a list of named dispatches over B sequences × T tokens.
//!
//! Activations live in one f32 buffer at static offsets ([`Regions`], each `t_cap` rows),
//! so every bind group is built once; a pass writes the token metadata and [`Dims`] and
//! records the nodes into one compute pass. Per layer (RWKV_x070, numbered as below):
//!
//! 1. `xx = ln1(x)`; 2. six lerps with the previous token (state for the first);
//! 3. save the shift state (1–3: one `ln_shift` dispatch); 4. `r, k, v = W xr, W xk, W xv`;
//! 5. `w = w0 + tanh(xw W1) W2`; 6. `a = σ(a0 + xa A1 A2)`; 7. `g = σ(xg G1) G2`;
//! 8. (layer > 0) `v_mix = σ(v0 + xv V1 V2)`; 9. kk, k, v residual, decay;
//! 10. WKV recurrence; 11. GroupNorm + bonus + gate; 12. `x += Wo o`;
//! 13. `xx = ln2(x)`; 14. lerp; 15. save shift (13–15: `ln_shift`); 16. `h = relu(Wk xk)²`; 17. `x += Wv h`.
//!
//! Then the head: gather the wanted rows, `ln_out`, logits in row chunks of the head.
//!
//! Passes of at most [`SMALL_T`] tokens (decode) run other kernels, picked per pass from
//! each node's variants: `ln_shift` over channel slices, r/k/v and each set of low-rank
//! products as one `matvec_group` dispatch, 9–11 as one `wkv_fused`. Larger passes
//! (prefill) run the tiled products — on tensor cores where the adapter has them, with k
//! split for the C-row products — and the per-op WKV kernels.
//!
//! With LoRA adapters active (`model::lora`), each adapted product of a block
//! (r, k, v, output, channel-mix key and value) is preceded by the adapters' first
//! products `h = s · A x` and adds `B h` in its own epilogue (`graph_layer.rs`); in a
//! one-token pass the output, channel-mix key and value products make their h in their
//! own dispatch instead (`graph_lora.rs`).

use crate::error::{EngineError, Result};
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{buffer, GpuContext};
use crate::model::gpu_weights::{GlobalVecs, GpuWeights};
use crate::model::graph_layer::Blocks;
use crate::model::graph_lora::HPlan;
use crate::model::lora::ActiveLoras;
use crate::ops::matmul::{coop_ksplit, matmul, waves_plan, Act, MatmulArgs};
use crate::ops::{self, Count, Ctx, Dims, Node};

pub use crate::model::regions::Regions;

/// A profiled dispatch: (label `op@layer`, op, layer).
pub type DispatchLabel = (String, &'static str, Option<usize>);

/// LayerNorm eps (torch default, RWKV_x070) and GroupNorm eps of `ln_x`.
pub const LN_EPS: f32 = 1e-5;
pub const GN_EPS: f32 = 64e-5;

/// GPU buffers and nodes of the forward pass at a given capacity.
pub struct Graph {
    pub t_cap: usize,
    pub r_cap: usize,
    pub b_cap: usize,
    pub n_slots: usize,
    pub slot_len: usize,
    pub regions: Regions,
    pub dims: wgpu::Buffer,
    pub meta: wgpu::Buffer,
    pub act: wgpu::Buffer,
    pub state: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    /// Host-readable copy of the logits (first `r_cap × vocab` f32) and the embeddings
    /// (`r_cap × C` f32 after them), filled by the pass that computes them.
    pub readback: wgpu::Buffer,
    /// Embedding … ln_out (everything but the head).
    pub body: Vec<Node>,
    pub head: Vec<Node>,
    pub(super) dims_host: Dims,
    /// The LoRA h sets of the one-token products that make their own (bound by them).
    h_sets: Option<wgpu::Buffer>,
}

impl Graph {
    /// GPU bytes of its buffers that scale with the model: activations, states, logits
    /// (and the LoRA h sets).
    pub fn bytes(&self) -> u64 {
        let h_sets = self.h_sets.as_ref().map_or(0, |b| b.size());
        self.act.size() + self.state.size() + self.logits.size() + h_sets
    }

    /// Allocates buffers for `t_cap` tokens, `r_cap` output rows, `b_cap` sequences per
    /// pass and `n_slots` states, and builds every node.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: &GpuContext,
        pipelines: &PipelineCache,
        wts: &GpuWeights,
        t_cap: usize,
        r_cap: usize,
        b_cap: usize,
        n_slots: usize,
        loras: Option<&ActiveLoras>,
    ) -> Result<Self> {
        let cfg = wts.config;
        let c = cfg.n_embd;
        let regions = Regions::new(&cfg, t_cap, r_cap, loras.map_or(0, |l| l.max_rank));
        let slot_len = cfg.state_len();
        let max = gpu.max_binding();
        let need = [
            ("activations", regions.len as u64 * 4),
            ("states", (slot_len * n_slots) as u64 * 4),
            ("logits", (r_cap * cfg.vocab_size) as u64 * 4),
        ];
        for (what, bytes) in need {
            if bytes > max {
                return Err(EngineError::TooLarge {
                    what: format!(
                        "{what} need {bytes} bytes in one binding; the device allows {max}"
                    ),
                });
            }
        }
        let dims_host = Dims {
            t_cap: t_cap as u32,
            off_tok_seq: t_cap as u32,
            off_tok_pos: 2 * t_cap as u32,
            off_seqs: 3 * t_cap as u32,
            off_rows: (3 * t_cap + 4 * b_cap) as u32,
            ..Default::default()
        };
        let dims = buffer::uniform(gpu, "dims", &dims_host);
        let meta = buffer::storage(gpu, "meta", (3 * t_cap + 4 * b_cap + r_cap) as u64 * 4);
        let act = buffer::storage(gpu, "activations", regions.len as u64 * 4);
        let state = buffer::storage(gpu, "states", (slot_len * n_slots) as u64 * 4);
        let logits = buffer::storage(gpu, "logits", (r_cap * cfg.vocab_size) as u64 * 4);
        // Scratch of the k-split tensor-core products: [KSPLIT][T][N] f32 for the largest
        // split one of the C-row products, the channel-mix key (N = ffn_dim; not split
        // unless `RWKV_KSPLIT_WIDE` asks) and the key's k-split tail rows (`matmul_waves`).
        // A group of low-rank products whose slices do not fit in it runs its products one
        // by one (`push_grouped`).
        let tail = waves_plan(gpu, cfg.ffn_dim, cfg.n_embd, t_cap).map_or(0, |w| w.2 as u64 * 4);
        let split_bytes = [
            (cfg.n_embd, cfg.n_embd),
            (cfg.n_embd, cfg.ffn_dim),
            (cfg.ffn_dim, cfg.n_embd),
        ]
        .iter()
        .map(|&(n, k)| match coop_ksplit(&gpu.tuning, n, k, t_cap) {
            1 => 0,
            ks => ks as u64 * (t_cap * n) as u64 * 4,
        })
        .max()
        .unwrap_or(0)
        .max(tail);
        let split_ok = gpu.features.coopmat && split_bytes <= max;
        let split = buffer::storage(
            gpu,
            "k-split partial sums",
            if split_ok { split_bytes.max(16) } else { 16 },
        );
        let readback = buffer::readback(
            gpu,
            "readback",
            ((r_cap * cfg.vocab_size).next_multiple_of(2) + r_cap * c) as u64 * 4,
        );
        let cx = Ctx {
            gpu,
            pipelines,
            dims: &dims,
            lora: loras.map(|l| &l.b),
        };
        let rg = regions;

        let mut body = Vec::new();
        for chunk in &wts.emb {
            body.push(ops::embed::embed(&cx, chunk, &meta, &act, rg.x)?);
        }
        body.push(ops::layer_norm::layer_norm(
            &cx,
            None,
            c,
            &wts.globals,
            &act,
            rg.x,
            rg.x,
            GlobalVecs::LN0 * c,
            Count::Tokens,
            LN_EPS,
        )?);

        let hplan = match loras {
            Some(l) => HPlan::new(gpu, l, cfg.n_layer)?,
            None => None,
        };
        let blocks = Blocks {
            cx: &cx,
            cfg,
            rg: regions,
            t_cap,
            slot_len,
            meta: &meta,
            state: &state,
            act: &act,
            split: &split,
            split_ok,
            loras,
            hplan: hplan.as_ref(),
        };
        for (l, ly) in wts.layers.iter().enumerate() {
            blocks.layer(l, ly, &mut body)?;
        }
        body.push(ops::gather_rows::gather_rows(
            &cx, c, &meta, &act, rg.x, rg.head_in,
        )?);
        body.push(ops::layer_norm::layer_norm(
            &cx,
            None,
            c,
            &wts.globals,
            &act,
            rg.head_in,
            rg.head_norm,
            GlobalVecs::LN_OUT * c,
            Count::Rows,
            LN_EPS,
        )?);

        let mut head = Vec::new();
        for chunk in &wts.head {
            let args = MatmulArgs {
                x_off: rg.head_norm,
                x_stride: c,
                y_off: 0,
                y_stride: cfg.vocab_size,
                act: Act::None,
                accumulate: false,
                add_before_act: false,
                bias_off: None,
                rows: Count::Rows,
                scale: 1.0,
                lora: None,
            };
            head.push(matmul(
                &cx,
                "head",
                None,
                chunk,
                &wts.globals,
                &act,
                Some(&logits),
                &args,
            )?);
        }
        // The pipelines compile on worker threads while the graph is built (and the
        // weights upload): the graph is ready once every compile is done.
        pipelines.finish()?;
        Ok(Graph {
            t_cap,
            r_cap,
            b_cap,
            n_slots,
            slot_len,
            regions,
            dims,
            meta,
            act,
            state,
            logits,
            readback,
            body,
            head,
            dims_host,
            h_sets: hplan.map(|p| p.sets),
        })
    }
}
