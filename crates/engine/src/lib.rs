//! `rwkv-engine`: an RWKV-7 ("Goose") inference engine on wgpu.
//!
//! Loads GGUF (as llama.cpp writes RWKV-7), SafeTensors and PyTorch `.pth` (BlinkDL names)
//! through a memory map, keeps weights in their file encoding on the GPU (Q4_K stays Q4_K),
//! and runs the forward pass in WGSL compute shaders. Math: BlinkDL's `RWKV_x070`
//! (rwkv pip package) and llama.cpp `rwkv7.cpp`.

pub mod adapter;
pub mod analysis;
pub mod api;
pub mod config;
pub mod constraint;
pub mod error;
mod files;
pub mod format;
pub mod gpu;
pub mod kernel_bench;
pub mod model;
pub mod npy;
pub mod ops;
pub mod output;
pub mod profile;
pub mod quant;
pub mod sampler;
pub mod tokenizer;
pub mod wall_costs;

pub use adapter::{AdapterFormat, InitState, LoraAdapter, LoraBase, LoraMatrix, LoraTarget};
pub use analysis::{
    CacheStats, EmbedInput, EmbeddingCache, Embeddings, Field, FieldAnalysis, FieldOptions,
    Pooling, PrefixCache, Resumed, MAX_SPILLS_IN_FLIGHT,
};
pub use api::{
    CancelToken, Engine, ForwardOutput, GenerateOptions, GenerateStats, GreedyOutput, LoadOptions,
    LoadProgress, LoraId, ModelInfo, Rows, SeqInput, StateId, StopReason, TextEvent, TextOutput,
    Want,
};
pub use config::{LoraRanks, Rwkv7Config, GN_EPS, HEAD_SIZE, LN_EPS};
pub use constraint::{Constraint, ConstraintCompiler, ConstraintSpec};
pub use error::{EngineError, Result};
pub use format::{
    DType, FileFormat, ModelFile, ModelFingerprint, StateHeader, StateLayout, TensorInfo,
    TensorView,
};
pub use model::gpu_weights::{UploadOptions, UploadProgress};
pub use model::graph::StateDownload;
pub use model::weights::Rwkv7Weights;
pub use tokenizer::{StreamDecoder, Tokenizer};
