//! The [`Graph`]: its buffers at a given capacity and its nodes, block by block.

use std::sync::Arc;

use super::blocks::Blocks;
use super::hplan::HPlan;
use super::regions::Regions;
use super::state_parts::StateParts;
use crate::config::{Rwkv7Config, LN_EPS};
use crate::error::{EngineError, Result};
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{buffer, GpuContext};
use crate::model::gpu_weights::{GlobalVecs, GpuWeights};
use crate::model::host_embedding::HostEmbedding;
use crate::model::lora::ActiveLoras;
use crate::ops::embed::EmbedRows;
use crate::ops::matmul::{
    coop_ksplit, matmul, medium_plan, waves_plan, Act, MatmulArgs, MEDIUM_T, SMALL_T,
};
use crate::ops::{self, Count, Ctx, Dims, Node};

/// A profiled dispatch: (label `op@layer`, op, layer).
pub type DispatchLabel = (String, &'static str, Option<usize>);

/// What a greedy step's commands depend on: the pass's [`Dims`] (as bytes) and its output
/// rows (the argmax rows read back). The token metadata, the state slots and the
/// adjustments are written before each submission, not recorded.
pub(crate) type SpareKey = (Vec<u8>, usize);

/// GPU buffers and nodes of the forward pass at a given capacity.
pub struct Graph {
    pub t_cap: usize,
    pub r_cap: usize,
    pub b_cap: usize,
    pub n_slots: usize,
    pub slot_len: usize,
    pub regions: Regions,
    pub dims: wgpu::Buffer,
    /// The pass's metadata (token ids, their sequences and positions, the sequences, the
    /// output rows; `Dims`' offsets), then the tokens' embedding rows ([`Graph::emb_rows`]).
    pub meta: wgpu::Buffer,
    /// The embedding in host memory, and where its rows for a pass lie in `meta`.
    pub(super) emb: Arc<HostEmbedding>,
    pub(super) emb_rows: EmbedRows,
    pub act: wgpu::Buffer,
    /// The states, their layers split over as few buffers as the binding limit allows.
    pub state: StateParts,
    pub logits: wgpu::Buffer,
    /// Host-readable copy of the logits (first `r_cap × vocab` f32) and the embeddings
    /// (`r_cap × C` f32 after them), filled by the pass that computes them.
    pub readback: wgpu::Buffer,
    /// Greedy passes ([`Graph::record`]'s `greedy`): the bans and penalties of the rows'
    /// draws (`adjust_buf`: a count, then (logit index, delta) entries, written before the
    /// pass) applied by `adjust`, then each output row's argmax (`[r_cap]` × (u32 index,
    /// f32 bits)) by `argmax` into `argmax_out`.
    pub adjust_buf: wgpu::Buffer,
    pub adjust: Node,
    pub argmax_out: wgpu::Buffer,
    pub argmax: Node,
    /// Sampled draws prepared on the GPU ([`Graph::record_draw`]): after `adjust`, each
    /// output row's largest logit, eligible mass and candidates (`ops::candidates`) under
    /// its options (`draw_opts`: `[r_cap, 4]` u32, written before the pass) into `cand_out`
    /// (`[r_cap, ops::candidates::row_words()]` u32).
    pub draw_opts: wgpu::Buffer,
    pub cand_out: wgpu::Buffer,
    pub candidates: Node,
    /// Embedding … ln_out (everything but the head).
    pub body: Vec<Node>,
    pub head: Vec<Node>,
    pub(super) dims_host: Dims,
    /// The [`Dims`] the last pass wrote into `dims` (a decode loop's steps all have the
    /// same: [`Graph::write_meta`] writes them only when they change).
    pub(super) dims_written: std::sync::Mutex<Option<Dims>>,
    /// A server's next greedy step recorded while the GPU ran the last one
    /// (`Engine::forward_greedy`): its key (the pass's [`Dims`] and output rows) and
    /// commands, used if the next step has the same key (kept here, so a rebuilt graph
    /// never runs another's commands).
    pub(crate) spare_step: std::sync::Mutex<Option<(SpareKey, wgpu::CommandBuffer)>>,
    /// Batch-invariant passes: every node runs its large variant whatever the pass size,
    /// so a sequence's numbers do not depend on what shares its pass (see
    /// [`crate::LoadOptions::batch_invariant`]).
    pub invariant: bool,
    /// Ops whose dispatches the recorded passes leave out: a timing instrument only
    /// ([`crate::Engine::decode_wall_costs`]; the results are then wrong). Empty otherwise.
    pub(crate) timing_skip: Vec<String>,
    /// The LoRA h sets of the one-token products that make their own (bound by them).
    h_sets: Option<wgpu::Buffer>,
}

impl Graph {
    /// GPU bytes of its buffers that scale with the model: activations, states, logits
    /// (and the LoRA h sets), and the pass metadata with its tokens' embedding rows.
    pub fn bytes(&self) -> u64 {
        let h_sets = self.h_sets.as_ref().map_or(0, |b| b.size());
        self.act.size() + self.state.bytes() + self.logits.size() + h_sets + self.meta.size()
    }

    /// Allocates buffers for `t_cap` tokens, `r_cap` output rows, `b_cap` sequences per
    /// pass and `n_slots` states, and builds every node.
    ///
    /// Errors: [`EngineError::TooLarge`] when a buffer exceeds one binding; pipeline
    /// compilation errors ([`PipelineCache::finish`]).
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
        let regions = Regions::new(&cfg, t_cap, r_cap, loras.map_or(0, |l| l.max_rank));
        let slot_len = cfg.state_len();
        check_bindings(gpu, &cfg, &regions, r_cap)?;
        let dims_host = Dims {
            t_cap: t_cap as u32,
            off_tok_seq: t_cap as u32,
            off_tok_pos: 2 * t_cap as u32,
            off_seqs: 3 * t_cap as u32,
            off_rows: (3 * t_cap + 4 * b_cap) as u32,
            ..Default::default()
        };
        let dims = buffer::uniform(gpu, "dims", &dims_host);
        let emb = wts.emb.clone();
        let emb_rows = EmbedRows {
            dtype: emb.dtype,
            c: cfg.n_embd,
            rows_off: (3 * t_cap + 4 * b_cap + r_cap).next_multiple_of(4) * 4,
            row_bytes: emb.row_bytes,
        };
        let meta_bytes = emb_rows.rows_off + t_cap * emb_rows.row_bytes;
        let meta = buffer::storage(gpu, "meta", meta_bytes as u64);
        let act = buffer::storage(gpu, "activations", regions.len as u64 * 4);
        let state = StateParts::new(gpu, &cfg, n_slots, gpu.tuning.state_parts.unwrap_or(1))?;
        let logits = buffer::storage(gpu, "logits", (r_cap * cfg.vocab_size) as u64 * 4);
        let (split, split_ok) = split_scratch(gpu, &cfg, t_cap);
        let readback = buffer::readback(
            gpu,
            "readback",
            ((r_cap * cfg.vocab_size).next_multiple_of(2) + r_cap * cfg.n_embd) as u64 * 4,
        );
        let cx = Ctx {
            gpu,
            pipelines,
            dims: &dims,
            lora: loras.map(|l| &l.b),
        };
        let hplan = match loras {
            Some(l) => HPlan::new(gpu, l, cfg.n_layer)?,
            None => None,
        };
        let blocks = Blocks {
            cx: &cx,
            cfg,
            rg: regions,
            t_cap,
            meta: &meta,
            emb_rows,
            state: &state,
            act: &act,
            split: &split,
            split_ok,
            loras,
            hplan: hplan.as_ref(),
        };
        let body = body_nodes(&blocks, wts)?;
        let head = head_nodes(&cx, wts, &regions, &act, &logits)?;
        let adjust_buf = ops::argmax::adjust_buffer(gpu, r_cap);
        let adjust = ops::argmax::adjust(&cx, cfg.vocab_size, &adjust_buf, &logits)?;
        let argmax_out = buffer::storage(gpu, "argmax", r_cap as u64 * 8);
        let argmax = ops::argmax::argmax(&cx, cfg.vocab_size, &logits, &argmax_out)?;
        let draw_opts = buffer::storage(gpu, "draw options", r_cap as u64 * 16);
        let cand_words = (r_cap * ops::candidates::row_words()) as u64;
        let cand_out = buffer::storage(gpu, "draw candidates", cand_words * 4);
        let candidates =
            ops::candidates::candidates(&cx, cfg.vocab_size, &draw_opts, &logits, &cand_out)?;
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
            emb,
            emb_rows,
            act,
            state,
            logits,
            readback,
            adjust_buf,
            adjust,
            argmax_out,
            argmax,
            draw_opts,
            cand_out,
            candidates,
            body,
            head,
            dims_host,
            dims_written: std::sync::Mutex::new(Some(dims_host)),
            spare_step: std::sync::Mutex::new(None),
            invariant: false,
            timing_skip: Vec::new(),
            h_sets: hplan.map(|p| p.sets),
        })
    }
}

/// Checks that the activations and `r_cap` rows of logits each fit one binding
/// ([`EngineError::TooLarge`] naming the one that does not; the states split by layer:
/// [`StateParts`]).
fn check_bindings(
    gpu: &GpuContext,
    cfg: &Rwkv7Config,
    regions: &Regions,
    r_cap: usize,
) -> Result<()> {
    let max = gpu.max_binding();
    let need = [
        ("activations", regions.len as u64 * 4),
        ("logits", (r_cap * cfg.vocab_size) as u64 * 4),
    ];
    for (what, bytes) in need {
        if bytes > max {
            return Err(EngineError::TooLarge {
                what: format!("{what} need {bytes} bytes in one binding; the device allows {max}"),
            });
        }
    }
    Ok(())
}

/// The scratch of the k-split tensor-core products, and whether they may split: `[KSPLIT][T][N]`
/// f32 for the largest split one of the C-row products, the channel-mix key (N = ffn_dim;
/// not split unless `RWKV_KSPLIT_WIDE` asks), their medium variants (`medium_plan`, at
/// `MEDIUM_T` tokens) and the key's k-split tail rows (`matmul_waves`). A group of
/// low-rank products whose slices do not fit in it runs its products one by one
/// (`push_grouped`).
fn split_scratch(gpu: &GpuContext, cfg: &Rwkv7Config, t_cap: usize) -> (wgpu::Buffer, bool) {
    let tail = waves_plan(gpu, cfg.ffn_dim, cfg.n_embd, t_cap).map_or(0, |w| w.2 as u64 * 4);
    let split_bytes = [
        (cfg.n_embd, cfg.n_embd),
        (cfg.n_embd, cfg.ffn_dim),
        (cfg.ffn_dim, cfg.n_embd),
    ]
    .iter()
    .map(|&(n, k)| {
        let large = match coop_ksplit(&gpu.tuning, n, k, t_cap) {
            1 => 0,
            ks => ks as u64 * (t_cap * n) as u64 * 4,
        };
        let wg_bytes = gpu.limits.max_compute_workgroup_storage_size;
        let medium = medium_plan(&gpu.tuning, n as u32, k as u32, wg_bytes)
            .filter(|_| t_cap > SMALL_T as usize)
            .map_or(0, |(_, ks)| {
                ks as u64 * MEDIUM_T.min(t_cap as u32) as u64 * n as u64 * 4
            });
        large.max(medium)
    })
    .max()
    .unwrap_or(0)
    .max(tail);
    let split_ok = gpu.features.coopmat && split_bytes <= gpu.max_binding();
    let bytes = if split_ok { split_bytes.max(16) } else { 16 };
    (
        buffer::storage(gpu, "k-split partial sums", bytes),
        split_ok,
    )
}

/// Embedding … `ln_out`: the embedding, `ln0`, every block (time mix, channel mix), the
/// gather of the wanted rows and `ln_out` (everything but the head).
fn body_nodes(b: &Blocks, wts: &GpuWeights) -> Result<Vec<Node>> {
    let (cx, rg, act, c) = (b.cx, &b.rg, b.act, b.cfg.n_embd);
    let mut body = vec![ops::embed::embed(cx, b.emb_rows, b.meta, act, rg.x)?];
    let (g, ln0, ln_out) = (&wts.globals, GlobalVecs::LN0 * c, GlobalVecs::LN_OUT * c);
    body.push(ops::layer_norm::layer_norm(
        cx,
        None,
        c,
        g,
        act,
        rg.x,
        rg.x,
        ln0,
        Count::Tokens,
        LN_EPS,
    )?);
    // Whether the previous block's value runs this block's LayerNorm + token shift in
    // one-token passes.
    let mut ln_made = false;
    for (l, ly) in wts.layers.iter().enumerate() {
        // Whether the time mix's output runs the channel mix's LayerNorm + token shift.
        let cm_ln_made = b.time_mix(l, ly, ln_made, &mut body)?;
        ln_made = b.channel_mix(l, ly, wts.layers.get(l + 1), cm_ln_made, &mut body)?;
    }
    body.push(ops::gather_rows::gather_rows(
        cx, c, b.meta, act, rg.x, rg.head_in,
    )?);
    body.push(ops::layer_norm::layer_norm(
        cx,
        None,
        c,
        g,
        act,
        rg.head_in,
        rg.head_norm,
        ln_out,
        Count::Rows,
        LN_EPS,
    )?);
    Ok(body)
}

/// The head: logits of the wanted rows, one product per row chunk of the head matrix.
fn head_nodes(
    cx: &Ctx,
    wts: &GpuWeights,
    rg: &Regions,
    act: &wgpu::Buffer,
    logits: &wgpu::Buffer,
) -> Result<Vec<Node>> {
    let cfg = &wts.config;
    let args = MatmulArgs {
        x_off: rg.head_norm,
        x_stride: cfg.n_embd,
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
    let mut head = Vec::new();
    for chunk in &wts.head {
        let g = &wts.globals;
        head.push(matmul(
            cx,
            "head",
            None,
            chunk,
            g,
            act,
            Some(logits),
            &args,
        )?);
    }
    Ok(head)
}
