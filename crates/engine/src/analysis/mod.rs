//! Document analysis on the engine: embeddings without the head (batched), field
//! analysis, and the caches that make re-analysis cheap. (States — prefill, save, load,
//! export — are the engine's own API, `api/state.rs`; their files are `format/state_file.rs`.)
//!
//! - [`embed`]: `[B, C]` hidden states after `ln_out`, B sequences of any lengths in
//!   batched, chunked passes, each from the zero state or a fork of a given state.
//! - [`fields`]: labelled texts → embeddings, norms, cosine-similarity matrix, timing.
//! - [`cache`]: LRU embedding cache and the prefix-state trie, both bounded.

pub mod cache;
pub mod embed;
pub mod fields;

pub use cache::{
    CacheStats, EmbedKey, EmbeddingCache, Prefilled, PrefixCache, Resumed, StateKey,
    ENTRY_OVERHEAD_BYTES, MAX_SPILLS_IN_FLIGHT, PREFIX_NODE_BYTES,
};
pub use embed::{cosine, norm, EmbedInput, Embeddings, Pooling};
pub use fields::{
    Field, FieldAnalysis, FieldOptions, FieldResult, FieldTiming, MAX_FIELDS, MAX_FIELD_TOKENS,
};
