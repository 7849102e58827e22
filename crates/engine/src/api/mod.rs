//! The engine façade: load a model, run the forward pass over states, generate, embed.
//!
//! One [`Engine`] owns the device, the weights on it and the forward graph. States live
//! in GPU slots addressed by [`StateId`]; forking copies a slot on the GPU.
//!
//! The façade in pieces: `load` (files onto a GPU), `state` (slots), `forward` (the
//! batched pass), `greedy` (decode steps that read back argmax rows), `generate` (tokens and text). Every public type is re-exported here.

mod decode_loop;
mod forward;
mod generate;
mod greedy;
mod load;
mod lora;
mod merge;
mod state;
mod state_files;

pub use decode_loop::{GenerateStats, StopReason};
pub use forward::{ForwardOutput, Rows, SeqInput, Want};
pub use generate::{CancelToken, GenerateOptions, TextEvent, TextOutput};
pub use greedy::GreedyOutput;
pub use load::{LoadOptions, LoadProgress, ModelInfo};
pub use lora::LoraId;
pub use merge::{merge_to_safetensors, MergeSummary};
pub use state::StateId;

use std::sync::Arc;

use crate::config::Rwkv7Config;
use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::GpuContext;
use crate::model::gpu_weights::GpuWeights;
use crate::model::graph::Graph;
use crate::tokenizer::Tokenizer;

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
    /// Per slot: bumped when its state is freed ([`StateId`]'s second half).
    generation: Vec<u32>,
    max_batch: usize,
    /// LoRA adapters on the GPU and the active set.
    adapters: lora::Adapters,
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

    /// The ops whose dispatches recorded passes leave out (`crate::wall_costs` only: the
    /// results are wrong while any is set); the previous set.
    pub(crate) fn set_timing_skip(&mut self, ops: Vec<String>) -> Vec<String> {
        // A spare step recorded with the old list would run the ops it lists.
        if let Ok(mut spare) = self.graph.spare_step.lock() {
            spare.take();
        }
        std::mem::replace(&mut self.graph.timing_skip, ops)
    }
}
