//! The engine façade: load a model, run the forward pass over states, generate, embed.
//!
//! One [`Engine`] owns the device, the weights on it and the forward graph. States live
//! in GPU slots addressed by [`StateId`]; forking copies a slot on the GPU.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::format::{DType, ModelFile};
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{buffer, AdapterChoice, GpuContext};
use crate::model::config::Rwkv7Config;
use crate::model::gpu_weights::{GpuWeights, UploadOptions};
use crate::model::graph::{Graph, Regions};
use crate::model::weights::Rwkv7Weights;
use crate::sampler::{Sampler, SamplerOptions};
use crate::tokenizer::Tokenizer;

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub adapter: AdapterChoice,
    /// Most tokens per forward pass (prefill chunk). Clamped to what the device binds.
    pub max_chunk: usize,
    /// Most sequences per forward pass.
    pub max_batch: usize,
    /// Most GPU memory the weights may take, in bytes (`None`: what the device has). A
    /// model that needs more fails to load with [`EngineError::TooLarge`] naming the
    /// tensor that crossed the limit — the same error a device too small for it gives.
    pub max_gpu_bytes: Option<u64>,
    /// How the weights stream to the GPU (staging waves, threads); the default suits
    /// every device.
    pub upload: UploadOptions,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            adapter: AdapterChoice::Auto,
            max_chunk: 256,
            max_batch: 16,
            max_gpu_bytes: None,
            upload: UploadOptions::default(),
        }
    }
}

/// Load phases reported to a progress callback.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum LoadProgress {
    Open,
    Device,
    Upload {
        tensors_done: usize,
        tensors_total: usize,
        /// Bytes of the weights as laid out on the GPU.
        bytes_done: u64,
        bytes_total: u64,
    },
    Compile,
    Ready,
}

/// What a loaded model is, for model cards and benchmark reports.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub path: String,
    pub format: String,
    pub file_bytes: u64,
    pub config: Rwkv7Config,
    /// Encodings on the GPU, with tensor counts.
    pub gpu_types: Vec<(String, usize)>,
    pub gpu_weight_bytes: u64,
    pub gpu_total_bytes: u64,
    pub adapter: crate::gpu::context::AdapterSummary,
    pub features: crate::gpu::GpuFeatures,
    /// Call → GPU-ready (weights uploaded, pipelines compiled, device idle), ms.
    pub load_ms: f64,
    /// sha256 of the config and the tensor table (names, types, shapes); states and
    /// cached embeddings are tied to it (see `analysis::model_fingerprint`).
    pub fingerprint: crate::analysis::ModelFingerprint,
}

/// A sequence's recurrent state, held on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct StateId(pub u32);

/// A cancel flag shared between the caller and a running job; checked between passes
/// and tokens.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    pub fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Which positions of a sequence produce outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    None,
    Last,
    All,
}

/// One sequence of a forward call.
#[derive(Debug, Clone, Copy)]
pub struct SeqInput<'a> {
    pub state: StateId,
    pub tokens: &'a [u32],
    pub rows: Rows,
}

/// Outputs of a forward call, per sequence, rows in position order.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// `[rows, vocab]` logits per sequence (empty unless asked for).
    pub logits: Vec<Vec<f32>>,
    /// `[rows, C]` hidden states after `ln_out` per sequence (empty unless asked for).
    pub embeddings: Vec<Vec<f32>>,
}

/// What to compute at the output rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub logits: bool,
    pub embeddings: bool,
}

/// Per-call timing of [`Engine::generate`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Prefill of the prompt up to the first sampled token, ms.
    pub ttft_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// Of `decode_ms`, CPU time spent recording and submitting the steps' commands (the
    /// next step is recorded while the GPU runs the current one).
    pub decode_record_ms: f64,
    /// Why generation stopped.
    pub stop: StopReason,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    #[default]
    MaxTokens,
    StopToken,
    StopString,
    Cancelled,
    Callback,
}

/// An RWKV-7 model on a GPU.
pub struct Engine {
    gpu: Arc<GpuContext>,
    pipelines: PipelineCache,
    weights: GpuWeights,
    graph: Graph,
    info: ModelInfo,
    tokenizer: Arc<Tokenizer>,
    free: Vec<u32>,
    used: Vec<bool>,
    max_batch: usize,
    /// Unique per `Engine` value in this process (prefix caches hold state slots of one
    /// engine and check it).
    instance: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("info", &self.info).finish()
    }
}

impl Engine {
    /// Loads `path` (GGUF, SafeTensors or `.pth`) onto the chosen GPU.
    ///
    /// Errors: anything [`ModelFile::open`] and [`Rwkv7Weights::from_file`] report
    /// (naming file and tensor), [`EngineError::Gpu`], [`EngineError::TooLarge`].
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        Self::load_with_progress(path, opts, &mut |_| {})
    }

    /// [`Engine::load`] with a progress callback.
    pub fn load_with_progress(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Self> {
        let t0 = Instant::now();
        progress(LoadProgress::Open);
        let file = ModelFile::open(path.as_ref())?;
        let weights = Rwkv7Weights::from_file(&file)?;
        progress(LoadProgress::Device);
        let gpu = Arc::new(GpuContext::new(&opts.adapter)?);
        Self::from_weights(gpu, &file, &weights, opts, progress, t0)
    }

    /// Loads `path` onto an already opened device (several models, or tests, share one).
    pub fn load_on(
        gpu: Arc<GpuContext>,
        path: impl AsRef<Path>,
        opts: &LoadOptions,
    ) -> Result<Self> {
        let t0 = Instant::now();
        let file = ModelFile::open(path.as_ref())?;
        let weights = Rwkv7Weights::from_file(&file)?;
        Self::from_weights(gpu, &file, &weights, opts, &mut |_| {}, t0)
    }

    /// Uploads already-mapped weights onto `gpu`.
    pub fn from_weights(
        gpu: Arc<GpuContext>,
        file: &ModelFile,
        weights: &Rwkv7Weights,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(LoadProgress),
        t0: Instant,
    ) -> Result<Self> {
        let cfg = weights.config;
        let release = |b: &[u8]| file.release(b);
        let t_upload = Instant::now();
        // Buffers first (limits checked, nothing copied), then two things at once: this
        // thread streams the weights into them while another builds the graph, whose
        // pipeline compilation is the other long step of a load. The graph only binds the
        // buffers; nothing is submitted before the copies, so it reads filled weights.
        let (gw, pending) = GpuWeights::plan(&gpu, weights, opts.max_gpu_bytes)?;
        let max = gpu.max_binding() as usize;
        // Token capacity: the prefill chunk, bounded by the activation binding.
        let per_tok = Regions::per_token(&cfg) * 4 + 2 * cfg.n_embd * 4;
        let t_cap = opts.max_chunk.clamp(1, (max / per_tok).max(1));
        let r_cap = t_cap.min((max / (cfg.vocab_size * 4)).max(1));
        let b_cap = opts.max_batch.clamp(1, t_cap);
        let n_slots = 8usize.min((max / (cfg.state_len() * 4)).max(1));
        let pipelines = PipelineCache::default();
        let (graph, t_graph, t_stream) = std::thread::scope(|s| {
            let building = std::thread::Builder::new()
                .name("rwkv-graph".into())
                .spawn_scoped(s, || {
                    let graph = Graph::new(&gpu, &pipelines, &gw, t_cap, r_cap, b_cap, n_slots);
                    (graph, t_upload.elapsed())
                })
                .map_err(|e| EngineError::gpu(format!("cannot start the graph thread: {e}")))?;
            let streamed = pending.stream(&gpu, &opts.upload, &release, &mut |p| {
                progress(LoadProgress::Upload {
                    tensors_done: p.tensors_done,
                    tensors_total: p.tensors_total,
                    bytes_done: p.bytes_done,
                    bytes_total: p.bytes_total,
                })
            });
            let t_stream = t_upload.elapsed();
            progress(LoadProgress::Compile);
            let (graph, t_graph) = building
                .join()
                .map_err(|_| EngineError::gpu("building the graph panicked"))?;
            streamed?;
            Ok::<_, EngineError>((graph?, t_graph, t_stream))
        })?;
        let t_wait = Instant::now();
        gpu.wait()?;
        log::debug!(
            "load: open + parse + device {:.1} ms; then at once: upload {:.1} ms, \
             graph + pipelines {:.1} ms; then GPU idle after {:.1} ms more",
            (t_upload - t0).as_secs_f64() * 1e3,
            t_stream.as_secs_f64() * 1e3,
            t_graph.as_secs_f64() * 1e3,
            t_wait.elapsed().as_secs_f64() * 1e3,
        );
        let graph_bytes =
            (graph.regions.len + graph.slot_len * n_slots + r_cap * cfg.vocab_size) as u64 * 4;
        let info = ModelInfo {
            path: file.path().display().to_string(),
            format: file.format().name().to_string(),
            file_bytes: file.file_len() as u64,
            config: cfg,
            gpu_types: gw
                .types
                .iter()
                .map(|(d, n)| (d.name().to_string(), *n))
                .collect(),
            gpu_weight_bytes: gw.bytes,
            gpu_total_bytes: gw.bytes + graph_bytes,
            adapter: gpu.summary.clone(),
            features: gpu.features,
            load_ms: t0.elapsed().as_secs_f64() * 1e3,
            fingerprint: crate::analysis::model_fingerprint(file, &cfg),
        };
        let tokenizer = match Tokenizer::from_gguf(file)? {
            Some(t) => Arc::new(t),
            None => Arc::new(Tokenizer::world()?),
        };
        if tokenizer.vocab_size() > cfg.vocab_size {
            return Err(EngineError::Tokenizer {
                what: format!(
                    "{}: the tokenizer has {} tokens, the model's vocabulary {}",
                    file.path().display(),
                    tokenizer.vocab_size(),
                    cfg.vocab_size
                ),
            });
        }
        progress(LoadProgress::Ready);
        Ok(Engine {
            gpu,
            pipelines,
            weights: gw,
            graph,
            info,
            tokenizer,
            free: (0..n_slots as u32).rev().collect(),
            used: vec![false; n_slots],
            max_batch: b_cap,
            instance: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
        })
    }

    /// An id unique to this `Engine` value within the process (state ids are only
    /// meaningful together with it).
    pub fn instance_id(&self) -> u64 {
        self.instance
    }

    /// Most sequences per forward pass (after clamping [`LoadOptions::max_batch`]).
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn config(&self) -> &Rwkv7Config {
        &self.weights.config
    }

    pub fn gpu(&self) -> &GpuContext {
        &self.gpu
    }

    /// The model's tokenizer (its GGUF vocabulary, else the bundled World vocabulary).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Encodings of the uploaded weights.
    pub fn gpu_types(&self) -> &[(DType, usize)] {
        &self.weights.types
    }

    /// The graph and device, after checking `state` exists (for the profiler).
    pub(crate) fn graph_and_gpu(&self, state: StateId) -> Result<(&Graph, &GpuContext)> {
        self.check(state)?;
        Ok((&self.graph, &self.gpu))
    }

    fn grow_slots(&mut self) -> Result<()> {
        let old = self.graph.n_slots;
        let new = old * 2;
        let max = self.gpu.max_binding() as usize;
        if new * self.graph.slot_len * 4 > max {
            return Err(EngineError::TooLarge {
                what: format!(
                    "{new} states of {} bytes exceed one binding ({max} bytes)",
                    self.graph.slot_len * 4
                ),
            });
        }
        let g = &self.graph;
        let graph = Graph::new(
            &self.gpu,
            &self.pipelines,
            &self.weights,
            g.t_cap,
            g.r_cap,
            g.b_cap,
            new,
        )?;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(
            &self.graph.state,
            0,
            &graph.state,
            0,
            (old * self.graph.slot_len * 4) as u64,
        );
        self.gpu.queue.submit([enc.finish()]);
        self.graph = graph;
        self.used.resize(new, false);
        self.free.extend((old as u32..new as u32).rev());
        self.info.gpu_total_bytes += (old * self.graph.slot_len * 4) as u64;
        Ok(())
    }

    /// A new zero state (the state before any token).
    pub fn new_state(&mut self) -> Result<StateId> {
        if self.free.is_empty() {
            self.grow_slots()?;
        }
        let slot = self.free.pop().ok_or_else(|| EngineError::State {
            what: "no free state slot".into(),
        })?;
        self.used[slot as usize] = true;
        let len = self.graph.slot_len as u64 * 4;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.clear_buffer(&self.graph.state, slot as u64 * len, Some(len));
        self.gpu.queue.submit([enc.finish()]);
        Ok(StateId(slot))
    }

    fn check(&self, id: StateId) -> Result<()> {
        if self.used.get(id.0 as usize).copied().unwrap_or(false) {
            Ok(())
        } else {
            Err(EngineError::State {
                what: format!("state {} does not exist (freed or never made)", id.0),
            })
        }
    }

    /// States made and not yet freed (GPU slots in use), for leak checks.
    pub fn live_states(&self) -> usize {
        self.used.iter().filter(|u| **u).count()
    }

    /// Frees a state's slot.
    pub fn free_state(&mut self, id: StateId) -> Result<()> {
        self.check(id)?;
        self.used[id.0 as usize] = false;
        self.free.push(id.0);
        Ok(())
    }

    /// A copy of `id` (made on the GPU).
    pub fn fork_state(&mut self, id: StateId) -> Result<StateId> {
        self.check(id)?;
        let new = self.new_state()?;
        let len = self.graph.slot_len as u64 * 4;
        // WebGPU forbids a copy within one buffer: go through a scratch buffer.
        let tmp = buffer::storage(&self.gpu, "fork", len);
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.graph.state, id.0 as u64 * len, &tmp, 0, len);
        enc.copy_buffer_to_buffer(&tmp, 0, &self.graph.state, new.0 as u64 * len, len);
        self.gpu.queue.submit([enc.finish()]);
        self.gpu.check_lost()?;
        Ok(new)
    }

    /// f32 elements of one state: `n_layer × [att_shift C | wkv H×N×N | ffn_shift C]`.
    pub fn state_len(&self) -> usize {
        self.graph.slot_len
    }

    /// Reads a state into `out` (`state_len()` f32).
    pub fn read_state(&self, id: StateId, out: &mut [f32]) -> Result<()> {
        self.check(id)?;
        let len = self.graph.slot_len;
        if out.len() != len {
            return Err(EngineError::State {
                what: format!("buffer holds {} values, a state has {len}", out.len()),
            });
        }
        buffer::read_bytes(
            &self.gpu,
            &self.graph.state,
            (id.0 as usize * len * 4) as u64,
            (len * 4) as u64,
            bytemuck::cast_slice_mut(out),
        )
    }

    /// Overwrites a state with `data` (`state_len()` f32).
    pub fn write_state(&mut self, id: StateId, data: &[f32]) -> Result<()> {
        self.check(id)?;
        let len = self.graph.slot_len;
        if data.len() != len {
            return Err(EngineError::State {
                what: format!("{} values given, a state has {len}", data.len()),
            });
        }
        if let Some(bad) = data.iter().position(|v| !v.is_finite()) {
            return Err(EngineError::State {
                what: format!("value {bad} of the state is not finite"),
            });
        }
        self.gpu.queue.write_buffer(
            &self.graph.state,
            (id.0 as usize * len * 4) as u64,
            bytemuck::cast_slice(data),
        );
        Ok(())
    }

    /// Runs `seqs` through the model, each from and into its state, in chunked passes
    /// that batch sequences together. Returns the wanted outputs per sequence.
    ///
    /// Errors: empty token list, token id ≥ vocab, unknown state, the same state twice,
    /// [`EngineError::Cancelled`] (states then hold the tokens of the passes that ran).
    pub fn forward(
        &mut self,
        seqs: &[SeqInput],
        want: Want,
        cancel: Option<&CancelToken>,
    ) -> Result<ForwardOutput> {
        let vocab = self.weights.config.vocab_size;
        let c = self.weights.config.n_embd;
        for (i, s) in seqs.iter().enumerate() {
            self.check(s.state)?;
            if s.tokens.is_empty() {
                return Err(EngineError::invalid(format!("sequence {i} has no tokens")));
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(EngineError::invalid(format!(
                    "token id {bad} is not below the vocabulary size {vocab}"
                )));
            }
            if seqs[..i].iter().any(|o| o.state == s.state) {
                return Err(EngineError::invalid(format!(
                    "state {} appears twice in one call",
                    s.state.0
                )));
            }
        }
        let mut out = ForwardOutput {
            logits: vec![Vec::new(); seqs.len()],
            embeddings: vec![Vec::new(); seqs.len()],
        };
        let mut cursor = vec![0usize; seqs.len()];
        let (t_cap, r_cap) = (self.graph.t_cap, self.graph.r_cap);
        loop {
            if cancel.is_some_and(|c| c.is_cancelled()) {
                return Err(EngineError::Cancelled);
            }
            // Fill one pass: sequences in order, as many tokens as capacity allows.
            let mut pass: Vec<(usize, u32, &[u32])> = Vec::new();
            let mut rows: Vec<u32> = Vec::new();
            let (mut t, mut r) = (0usize, 0usize);
            for (i, s) in seqs.iter().enumerate() {
                let left = s.tokens.len() - cursor[i];
                if left == 0 || pass.len() == self.max_batch || t == t_cap {
                    continue;
                }
                let mut n = left.min(t_cap - t);
                if s.rows == Rows::All {
                    n = n.min(r_cap - r);
                    if n == 0 {
                        continue;
                    }
                }
                if s.rows == Rows::Last && n == left && r == r_cap {
                    n -= 1; // leave the last token (and its row) to the next pass
                    if n == 0 {
                        continue;
                    }
                }
                let toks = &s.tokens[cursor[i]..cursor[i] + n];
                match s.rows {
                    Rows::All => rows.extend((t..t + n).map(|x| x as u32)),
                    Rows::Last if n == left => rows.push((t + n - 1) as u32),
                    _ => {}
                }
                pass.push((i, s.state.0, toks));
                cursor[i] += n;
                t += n;
                r = rows.len();
            }
            if pass.is_empty() {
                break;
            }
            let run_head = want.logits && !rows.is_empty();
            let mut enc = self.gpu.device.create_command_encoder(&Default::default());
            let seq_list: Vec<(u32, &[u32])> = pass.iter().map(|p| (p.1, p.2)).collect();
            self.graph
                .encode(&self.gpu, &mut enc, &seq_list, &rows, run_head)?;
            // Results go to the graph's readback buffer in the same submission: logits
            // first, embeddings after them.
            let n_logits = if run_head { rows.len() * vocab } else { 0 };
            let n_emb = if want.embeddings { rows.len() * c } else { 0 };
            // Embeddings start 8-byte aligned (a mapping's offset must be).
            let emb_at_f = (r_cap * vocab).next_multiple_of(2);
            let emb_at = emb_at_f as u64 * 4;
            if n_logits > 0 {
                enc.copy_buffer_to_buffer(
                    &self.graph.logits,
                    0,
                    &self.graph.readback,
                    0,
                    n_logits as u64 * 4,
                );
            }
            if n_emb > 0 {
                enc.copy_buffer_to_buffer(
                    &self.graph.act,
                    self.graph.regions.head_norm as u64 * 4,
                    &self.graph.readback,
                    emb_at,
                    n_emb as u64 * 4,
                );
            }
            self.gpu.queue.submit([enc.finish()]);
            if rows.is_empty() {
                continue;
            }
            // One mapping: the logits, up to the embeddings' end when both are wanted.
            let (from, len) = match (n_logits > 0, n_emb > 0) {
                (true, true) => (0, emb_at_f + n_emb),
                (true, false) => (0, n_logits),
                (false, _) => (emb_at_f, n_emb),
            };
            let mut host = vec![0f32; len];
            buffer::read_staged(
                &self.gpu,
                &self.graph.readback,
                from as u64 * 4,
                bytemuck::cast_slice_mut(&mut host),
            )?;
            let logits = &host[..n_logits];
            let emb: &[f32] = &host[host.len() - n_emb..];
            // Hand rows back to their sequences, in order.
            let mut at = 0usize;
            let mut tok_at = 0usize;
            for &(i, _, toks) in &pass {
                let n_rows = rows
                    .iter()
                    .filter(|&&x| (x as usize) >= tok_at && (x as usize) < tok_at + toks.len())
                    .count();
                if run_head {
                    out.logits[i].extend_from_slice(&logits[at * vocab..(at + n_rows) * vocab]);
                }
                if want.embeddings {
                    out.embeddings[i].extend_from_slice(&emb[at * c..(at + n_rows) * c]);
                }
                at += n_rows;
                tok_at += toks.len();
            }
        }
        self.gpu.check_lost()?;
        Ok(out)
    }

    /// The commands of one decode step (see [`Graph::decode_dims`]) with its logits copied
    /// to the readback buffer.
    fn record_decode(&self) -> wgpu::CommandBuffer {
        let dims = self.graph.decode_dims();
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        self.graph.record(&mut enc, &dims, true);
        let bytes = self.weights.config.vocab_size as u64 * 4;
        enc.copy_buffer_to_buffer(&self.graph.logits, 0, &self.graph.readback, 0, bytes);
        enc.finish()
    }

    /// Feeds `prompt` into `state` and samples up to `max_tokens` tokens with `sample`
    /// (given the last logits, returns the next token), calling `on_token(token)` for
    /// each; `on_token` returns `false` to stop. Stops at cancellation without losing
    /// anything: the state then holds every token fed so far.
    ///
    /// Errors: as [`Engine::forward`]; an empty prompt.
    pub fn generate(
        &mut self,
        state: StateId,
        prompt: &[u32],
        max_tokens: usize,
        sample: &mut dyn FnMut(&mut [f32]) -> Result<u32>,
        cancel: &CancelToken,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<GenerateStats> {
        let t0 = Instant::now();
        let mut stats = GenerateStats {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        let seq = SeqInput {
            state,
            tokens: prompt,
            rows: Rows::Last,
        };
        let want = Want {
            logits: true,
            embeddings: false,
        };
        let mut logits = match self.forward(&[seq], want, Some(cancel)) {
            Err(EngineError::Cancelled) => {
                stats.stop = StopReason::Cancelled;
                return Ok(stats);
            }
            r => r?.logits.swap_remove(0),
        };
        stats.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        // Decode steps: the commands of step i + 1 are recorded while the GPU runs step
        // i (they are the same every step; only the token metadata, written just before
        // each submission, changes), and the logits come back through the kept readback
        // buffer in the same submission.
        let vocab = self.weights.config.vocab_size;
        let mut next_cmd = None;
        let mut decode_time = Duration::ZERO;
        let mut record_time = Duration::ZERO;
        for i in 0..max_tokens {
            let tok = sample(&mut logits)?;
            if i == 0 {
                stats.ttft_ms = t0.elapsed().as_secs_f64() * 1e3;
            }
            stats.generated_tokens += 1;
            if !on_token(tok) {
                stats.stop = StopReason::Callback;
                break;
            }
            if i + 1 == max_tokens {
                break;
            }
            if cancel.is_cancelled() {
                stats.stop = StopReason::Cancelled;
                break;
            }
            let td = Instant::now();
            if tok as usize >= vocab {
                return Err(EngineError::invalid(format!(
                    "sampled token id {tok} is not below the vocabulary size {vocab}"
                )));
            }
            self.graph
                .write_meta(&self.gpu, &[(state.0, &[tok])], &[0])?;
            let cmd = match next_cmd.take() {
                Some(c) => c,
                None => self.record_decode(),
            };
            self.gpu.queue.submit([cmd]);
            let tr = Instant::now();
            next_cmd = Some(self.record_decode());
            record_time += tr.elapsed();
            logits.resize(vocab, 0.0);
            buffer::read_staged(
                &self.gpu,
                &self.graph.readback,
                0,
                bytemuck::cast_slice_mut(&mut logits),
            )?;
            decode_time += td.elapsed();
        }
        stats.decode_record_ms = record_time.as_secs_f64() * 1e3;
        stats.decode_ms = decode_time.as_secs_f64() * 1e3;
        stats.prefill_tok_s = prompt.len() as f64 / (stats.prefill_ms / 1e3).max(1e-9);
        let decoded = stats.generated_tokens.saturating_sub(1);
        if decoded > 0 {
            stats.decode_tok_s = decoded as f64 / (stats.decode_ms / 1e3).max(1e-9);
        }
        Ok(stats)
    }
}

/// Options of [`Engine::generate_text`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampler: SamplerOptions,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerOptions::default(),
        }
    }
}

/// What [`Engine::generate_text`] streams.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TextEvent {
    /// New text (valid UTF-8, never part of a stop string), with the tokens it came from.
    Text { text: String, tokens: usize },
}

/// Result of [`Engine::generate_text`].
#[derive(Debug, Clone, Serialize)]
pub struct TextOutput {
    pub text: String,
    pub tokens: Vec<u32>,
    pub stats: GenerateStats,
}

impl Engine {
    /// Encodes `prompt`, feeds it into `state` and generates text with `opts`, streaming
    /// it to `on_text` (return `false` to stop). Stop tokens end generation silently;
    /// stop strings are cut from the output. The state ends holding the prompt and every
    /// emitted token but the last one sampled.
    ///
    /// Errors: an empty prompt, invalid sampler options, anything [`Engine::forward`]
    /// reports. Cancellation is not an error: `stats.stop` says
    /// [`StopReason::Cancelled`].
    pub fn generate_text(
        &mut self,
        state: StateId,
        prompt: &str,
        opts: &GenerateOptions,
        cancel: &CancelToken,
        on_text: &mut dyn FnMut(TextEvent) -> bool,
    ) -> Result<TextOutput> {
        opts.sampler.validate()?;
        let ids = self.tokenizer.encode(prompt);
        if ids.is_empty() {
            return Err(EngineError::invalid("the prompt is empty"));
        }
        let mut sampler = Sampler::new(opts.sampler.clone(), self.weights.config.vocab_size)?;
        let mut stop = sampler.stop_matcher();
        let mut decoder = self.tokenizer.stream_decoder();
        let mut text = String::new();
        let mut tokens = Vec::new();
        let mut reason = None;
        let mut pending_tokens = 0usize;
        let tokenizer = self.tokenizer.clone();
        let mut stats = {
            // Each sampled token is accepted (penalty counts) before the next draw.
            let mut last: Option<u32> = None;
            let mut sample = |logits: &mut [f32]| -> Result<u32> {
                if let Some(t) = last {
                    sampler.accept(t);
                }
                let t = sampler.try_sample(logits)?;
                last = Some(t);
                Ok(t)
            };
            let mut on_token = |tok: u32| -> bool {
                if opts.sampler.stop_tokens.contains(&tok) {
                    reason = Some(StopReason::StopToken);
                    return false;
                }
                tokens.push(tok);
                pending_tokens += 1;
                let piece = match decoder.push(tok) {
                    Ok(p) => p.to_string(),
                    Err(_) => {
                        String::from_utf8_lossy(tokenizer.token_bytes(tok).unwrap_or_default())
                            .into_owned()
                    }
                };
                let step = stop.push(&piece);
                if !step.emit.is_empty() {
                    text.push_str(&step.emit);
                    let n = std::mem::take(&mut pending_tokens);
                    if !on_text(TextEvent::Text {
                        text: step.emit,
                        tokens: n,
                    }) {
                        reason = Some(StopReason::Callback);
                        return false;
                    }
                }
                if step.stopped {
                    reason = Some(StopReason::StopString);
                    return false;
                }
                true
            };
            self.generate(
                state,
                &ids,
                opts.max_tokens,
                &mut sample,
                cancel,
                &mut on_token,
            )?
        };
        if reason.is_none() || reason == Some(StopReason::Callback) {
            // Flush what the decoder and the stop matcher still hold.
            let mut tail = decoder.flush().to_string();
            if reason.is_none() {
                tail = stop.push(&tail).emit + &stop.finish();
                if !tail.is_empty() {
                    text.push_str(&tail);
                    on_text(TextEvent::Text {
                        text: tail,
                        tokens: pending_tokens,
                    });
                }
            }
        }
        if let Some(r) = reason {
            if stats.stop != StopReason::Cancelled {
                stats.stop = r;
            }
        }
        Ok(TextOutput {
            text,
            tokens,
            stats,
        })
    }
}
