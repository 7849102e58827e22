//! Loading: a file (or typed weights) onto a GPU, with progress.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::Engine;
use crate::config::{Rwkv7Config, HEAD_SIZE};
use crate::error::{EngineError, Result};
use crate::format::ModelFile;
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{AdapterChoice, GpuContext};
use crate::model::gpu_weights::{GpuWeights, PendingUpload, UploadOptions};
use crate::model::graph::{Graph, Regions};
use crate::model::weights::Rwkv7Weights;
use crate::tokenizer::Tokenizer;

/// State slots a model starts with (doubled when a new state needs one more).
const INITIAL_SLOTS: usize = 2;

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
    /// Batch-invariant passes: every op runs its large-pass kernel whatever the pass
    /// size, so a sequence's logits are bit-identical whether it runs alone or beside
    /// others (the reduction order of every sum is fixed by the graph, not by the batch).
    /// Costs speed at 1–8 tokens a pass (no matrix × vector kernels); what a server that
    /// promises "batching does not change results" runs. Default off.
    pub batch_invariant: bool,
    /// Kernel knobs for this load's device instead of the environment's
    /// ([`crate::gpu::Tuning::from_env`]); a server picks its own for batched decode.
    pub tuning: Option<crate::gpu::Tuning>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            adapter: AdapterChoice::Auto,
            max_chunk: 256,
            max_batch: 16,
            max_gpu_bytes: None,
            upload: UploadOptions::default(),
            batch_invariant: false,
            tuning: None,
        }
    }
}

/// Load phases reported to a progress callback, in this order.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum LoadProgress {
    Open,
    /// The file is open and parsed as an RWKV-7 model (a file that does not parse fails
    /// before this phase) and nothing of the model is on the GPU yet: a caller replacing a
    /// loaded model may free it here, before the new one takes GPU memory.
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
    pub fingerprint: crate::format::ModelFingerprint,
}

/// Runs `f` inside an out-of-memory error scope on this thread; returns its result and the
/// first allocation the driver refused meanwhile.
pub(super) fn oom_scope<T>(gpu: &GpuContext, f: impl FnOnce() -> T) -> (T, Option<wgpu::Error>) {
    let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    // The validation errors a refused buffer causes (bind groups naming the invalid
    // buffer) belong to that refusal: caught here too, not left to mark the device
    // unusable. One without a refusal is a real fault and marks it as before.
    let validation = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let out = f();
    let invalid = pollster::block_on(validation.pop());
    let refused = pollster::block_on(oom.pop());
    if let (None, Some(e)) = (&refused, invalid) {
        gpu.mark_unusable(format!("GPU error: {e}"));
    }
    (out, refused)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// The load's error for an allocation the driver refused: [`EngineError::TooLarge`] naming
/// the file, the device, what was being allocated and the driver's error.
fn driver_oom(
    gpu: &GpuContext,
    file: &ModelFile,
    what: &str,
    e: &dyn std::fmt::Display,
) -> EngineError {
    EngineError::TooLarge {
        what: format!(
            "{}: {} ran out of memory allocating {what} ({e}); free GPU memory (close other \
             programs using it) or load a smaller model or quantization",
            file.path().display(),
            gpu.summary.name
        ),
    }
}

impl Engine {
    /// Loads `path` (GGUF, SafeTensors or `.pth`) onto the chosen GPU, through the
    /// process's open device for it ([`GpuContext::shared`]).
    ///
    /// Errors: anything [`ModelFile::open`] and [`Rwkv7Weights::from_file`] report
    /// (naming file and tensor), [`EngineError::Gpu`], [`EngineError::TooLarge`] (over the
    /// budget, over a binding, or an allocation the driver refused: out of memory).
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        Self::load_with_progress(path, opts, &mut |_| {})
    }

    /// [`Engine::load`] with a progress callback: the phases of [`LoadProgress`], in
    /// order; `Device` comes once the file has parsed, before the model takes GPU memory.
    pub fn load_with_progress(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Self> {
        let t0 = Instant::now();
        progress(LoadProgress::Open);
        // The process's device for the adapter ([`GpuContext::shared`]; opening one takes
        // ≈ 0.15 s on a discrete GPU, the first time) while this thread maps and parses
        // the file; a bad file is still reported first.
        let choice = opts.adapter.clone();
        let tuning = opts.tuning.clone();
        let opening = std::thread::Builder::new()
            .name("rwkv-device".into())
            .spawn(move || {
                let t = Instant::now();
                let gpu = match tuning {
                    Some(t) => GpuContext::shared_with(&choice, t),
                    None => GpuContext::shared(&choice),
                };
                (gpu, t.elapsed())
            })
            .map_err(|e| EngineError::gpu(format!("cannot start the device thread: {e}")))?;
        // On a bad file, the device thread is still joined (what it opened stays open for
        // the next load).
        let give_up = |opening: std::thread::JoinHandle<_>, e: EngineError| {
            let _ = opening.join();
            Err(e)
        };
        let file = match ModelFile::open(path.as_ref()) {
            Ok(f) => f,
            Err(e) => return give_up(opening, e),
        };
        let weights = match Rwkv7Weights::from_file(&file) {
            Ok(w) => w,
            Err(e) => return give_up(opening, e),
        };
        let t_parse = t0.elapsed();
        progress(LoadProgress::Device);
        let (gpu, t_device) = opening
            .join()
            .map_err(|_| EngineError::gpu("opening the device panicked"))?;
        let gpu = gpu?;
        log::debug!(
            "load: open + parse {:.1} ms while the device opened (or was found open) in {:.1} ms",
            t_parse.as_secs_f64() * 1e3,
            t_device.as_secs_f64() * 1e3
        );
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
        check_supported(file, &cfg)?;
        let t_upload = Instant::now();
        // Buffers first (limits checked, nothing copied), then two things at once: this
        // thread streams the weights into them while another builds the graph, whose
        // pipeline compilation is the other long step of a load. The graph only binds the
        // buffers; nothing is submitted before the copies, so it reads filled weights.
        // Every allocation of the load runs inside an out-of-memory error scope (scopes are
        // per thread): a driver that refuses one ends the load here, with the sizes, rather
        // than leaving an invalid buffer for a later pass to trip over.
        let (planned, oom) =
            oom_scope(&gpu, || GpuWeights::plan(&gpu, weights, opts.max_gpu_bytes));
        if let Some(e) = oom {
            let bytes = planned
                .as_ref()
                .map_or(file.file_len() as u64, |(gw, _)| gw.bytes);
            return Err(driver_oom(
                &gpu,
                file,
                &format!("the weights ({})", mib(bytes)),
                &e,
            ));
        }
        let (gw, pending) = planned?;
        let caps = Capacity::of(&gpu, &cfg, opts);
        let pipelines = PipelineCache::default();
        let loaded = upload_and_build(&gpu, file, &gw, pending, &pipelines, caps, opts, progress)?;
        let t_wait = Instant::now();
        // An allocation outside the scopes above (another thread's) that the driver refused.
        gpu.wait().map_err(|e| {
            if gpu.out_of_memory() {
                driver_oom(&gpu, file, "a buffer", &"Out of Memory")
            } else {
                e
            }
        })?;
        log::debug!(
            "load: open + parse + device {:.1} ms; then at once: upload {:.1} ms, \
             graph + pipelines {:.1} ms; then GPU idle after {:.1} ms more",
            (t_upload - t0).as_secs_f64() * 1e3,
            loaded.t_stream.as_secs_f64() * 1e3,
            loaded.t_graph.as_secs_f64() * 1e3,
            t_wait.elapsed().as_secs_f64() * 1e3,
        );
        let Loaded {
            mut graph,
            tokenizer,
            ..
        } = loaded;
        graph.invariant = opts.batch_invariant;
        let graph_bytes = graph.bytes();
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
            fingerprint: crate::format::model_fingerprint(file, &cfg),
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
        let n_slots = caps.n_slots;
        Ok(Engine {
            gpu,
            pipelines,
            weights: gw,
            graph,
            info,
            tokenizer,
            free: (0..n_slots as u32).rev().collect(),
            used: vec![false; n_slots],
            generation: vec![0; n_slots],
            max_batch: caps.b_cap,
            adapters: Default::default(),
            instance: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
        })
    }
}

/// A model this engine cannot run is refused before it takes GPU memory: a head size
/// other than [`HEAD_SIZE`] ([`EngineError::Unsupported`], naming the file).
fn check_supported(file: &ModelFile, cfg: &Rwkv7Config) -> Result<()> {
    if cfg.head_size != HEAD_SIZE {
        return Err(EngineError::Unsupported {
            path: file.path().to_path_buf(),
            what: format!(
                "unsupported head size {} (the WKV kernels are built for head size \
                 {HEAD_SIZE}, as every released RWKV-7)",
                cfg.head_size
            ),
        });
    }
    Ok(())
}

/// What the forward graph is built for at load.
#[derive(Debug, Clone, Copy)]
struct Capacity {
    /// Tokens a pass: the prefill chunk, bounded by the activation binding.
    t_cap: usize,
    /// Sequences a pass.
    b_cap: usize,
    /// Output rows a pass: a batch's worth to start with (grown on demand, `want_rows`).
    r_cap: usize,
    /// State slots to start with (grown on demand, `grow_slots`).
    n_slots: usize,
}

impl Capacity {
    /// Output rows and state slots start at what a batch of chats needs and grow on
    /// demand: GPU memory close to the file's size.
    fn of(gpu: &GpuContext, cfg: &Rwkv7Config, opts: &LoadOptions) -> Self {
        let max = gpu.max_binding() as usize;
        let per_tok = Regions::per_token(cfg) * 4 + 2 * cfg.n_embd * 4;
        let t_cap = opts.max_chunk.clamp(1, (max / per_tok).max(1));
        let b_cap = opts.max_batch.clamp(1, t_cap);
        Capacity {
            t_cap,
            b_cap,
            r_cap: b_cap.min((max / (cfg.vocab_size * 4)).max(1)),
            n_slots: INITIAL_SLOTS.min((max / (cfg.state_len() * 4)).max(1)),
        }
    }
}

/// What [`upload_and_build`] made, with how long its two halves took.
struct Loaded {
    graph: Graph,
    tokenizer: Arc<Tokenizer>,
    t_graph: std::time::Duration,
    t_stream: std::time::Duration,
}

/// Three things at once: this thread streams the weights into `gw`'s buffers (reporting
/// [`LoadProgress::Upload`]), one thread builds the graph (and compiles its pipelines),
/// one the tokenizer; then checks the file did not change while it was read.
#[allow(clippy::too_many_arguments)]
fn upload_and_build(
    gpu: &Arc<GpuContext>,
    file: &ModelFile,
    gw: &GpuWeights,
    pending: PendingUpload<'_>,
    pipelines: &PipelineCache,
    caps: Capacity,
    opts: &LoadOptions,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<Loaded> {
    let t_upload = Instant::now();
    let Capacity {
        t_cap,
        b_cap,
        r_cap,
        n_slots,
    } = caps;
    std::thread::scope(|s| {
        // The tokenizer (65 536 GGUF strings into its trie) builds beside both.
        let tokenizing = std::thread::Builder::new()
            .name("rwkv-tokenizer".into())
            .spawn_scoped(s, || -> Result<Arc<Tokenizer>> {
                Ok(match Tokenizer::from_gguf(file)? {
                    Some(t) => Arc::new(t),
                    None => Arc::new(Tokenizer::world()?),
                })
            })
            .map_err(|e| EngineError::gpu(format!("cannot start the tokenizer thread: {e}")))?;
        let building = std::thread::Builder::new()
            .name("rwkv-graph".into())
            .spawn_scoped(s, || {
                let (graph, oom) = oom_scope(gpu, || {
                    Graph::new(gpu, pipelines, gw, t_cap, r_cap, b_cap, n_slots, None)
                });
                let graph = match oom {
                    Some(e) => Err(driver_oom(
                        gpu,
                        file,
                        &format!(
                            "the working buffers (activations for {t_cap} tokens, \
                             logits, {n_slots} states) or the pipelines"
                        ),
                        &e,
                    )),
                    None => graph,
                };
                (graph, t_upload.elapsed())
            })
            .map_err(|e| EngineError::gpu(format!("cannot start the graph thread: {e}")))?;
        let (streamed, oom) = oom_scope(gpu, || {
            pending.stream(gpu, &opts.upload, file, &mut |p| {
                progress(LoadProgress::Upload {
                    tensors_done: p.tensors_done,
                    tensors_total: p.tensors_total,
                    bytes_done: p.bytes_done,
                    bytes_total: p.bytes_total,
                })
            })
        });
        let t_stream = t_upload.elapsed();
        progress(LoadProgress::Compile);
        let (graph, t_graph) = building
            .join()
            .map_err(|_| EngineError::gpu("building the graph panicked"))?;
        // The graph's error first (its own out-of-memory names the working buffers),
        // then the copy's: a refused staging buffer before the failed copy it caused.
        let graph = graph?;
        if let Some(e) = oom {
            return Err(driver_oom(
                gpu,
                file,
                "the staging buffers that copy the weights",
                &e,
            ));
        }
        streamed?;
        // Every byte is in staging memory: a file written to meanwhile (its length or
        // time changed) would leave a mix of two files on the GPU.
        file.check_unchanged()?;
        let tokenizer = tokenizing
            .join()
            .map_err(|_| EngineError::gpu("building the tokenizer panicked"))??;
        Ok(Loaded {
            graph,
            tokenizer,
            t_graph,
            t_stream,
        })
    })
}
