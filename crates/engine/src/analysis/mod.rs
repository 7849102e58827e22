//! Document analysis on the engine: embeddings without the head (batched), states as
//! files (prefill, save, load, `.npy` export), field analysis, and the caches that make
//! re-analysis cheap.
//!
//! - [`embed`]: `[B, C]` hidden states after `ln_out`, B sequences of any lengths in
//!   batched, chunked passes, each from the zero state or a fork of a given state.
//! - [`state_file`]: the model fingerprint and the `.rwkvstate` format
//!   (`docs/state-format.md`).
//! - [`fields`]: labelled texts → embeddings, norms, cosine-similarity matrix, timing.
//! - [`cache`]: LRU embedding cache and the prefix-state trie, both bounded.

pub mod cache;
pub mod embed;
pub mod fields;
pub mod fingerprint;
pub mod state_file;
mod state_ops;

pub use cache::{
    CacheStats, EmbedKey, EmbeddingCache, Prefilled, PrefixCache, StateKey, ENTRY_OVERHEAD_BYTES,
    PREFIX_NODE_BYTES,
};
pub use embed::{cosine, norm, EmbedInput, Embeddings, Pooling};
pub use fields::{
    Field, FieldAnalysis, FieldOptions, FieldResult, FieldTiming, MAX_FIELDS, MAX_FIELD_TOKENS,
};
pub use fingerprint::{model_fingerprint, ModelFingerprint};
pub use state_file::{
    read_state_file, read_state_header, write_state_file, StateArrays, StateHeader, StateLayout,
    LAYOUT_PER_LAYER_V1, STATE_HEADER_BYTES, STATE_MAGIC, STATE_VERSION,
};
