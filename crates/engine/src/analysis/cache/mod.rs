//! Caches of document analysis, both bounded (bytes and entries) and LRU-evicted:
//!
//! - [`EmbeddingCache`]: embeddings keyed by (model fingerprint, token ids, pooling,
//!   identity of the state they start from), on the host.
//! - [`PrefixCache`]: a trie of token prefixes → states kept in the engine's GPU state
//!   slots (as ai00's `Trie<Tokens, CachedItem>`), so re-analysing a document or
//!   continuing a chat feeds only the tokens past the longest cached prefix.
//!
//! This module holds what both share ([`CacheStats`], [`StateKey`]); the caches are in
//! `embeddings.rs` and `prefix.rs`.

mod embeddings;
mod prefix;

pub use embeddings::{EmbedKey, EmbeddingCache, ENTRY_OVERHEAD_BYTES};
pub use prefix::{Prefilled, PrefixCache, Resumed, MAX_SPILLS_IN_FLIGHT, PREFIX_NODE_BYTES};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::{Engine, StateId};
use crate::error::Result;
use crate::format::fingerprint::hex;

/// Counters and sizes of a cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Lookups that found an entry (for the prefix cache: a non-empty prefix).
    pub hits: u64,
    pub misses: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub entries: usize,
    /// Bytes charged to the entries now held (see each cache's doc for what counts).
    pub bytes: u64,
    pub budget_bytes: u64,
    pub max_entries: usize,
    /// Prefix cache only: entries whose state was moved from a GPU slot to host memory
    /// (the GPU share of the budget or the slots ran out), and how many are there now.
    #[serde(default)]
    pub spills: u64,
    #[serde(default)]
    pub host_entries: usize,
}

/// Identity of a state's contents: sha256 of its f32 values (little-endian).
/// Two states with equal keys hold the same numbers, whatever their ids or history.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StateKey(pub [u8; 32]);

impl StateKey {
    /// The key of a state's values.
    pub fn of_values(values: &[f32]) -> Self {
        let mut h = Sha256::new();
        for v in values {
            h.update(v.to_le_bytes());
        }
        StateKey(h.finalize().into())
    }
}

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateKey({})", &hex(&self.0)[..12])
    }
}

impl Engine {
    /// The content identity of state `id` (reads it back: `state_len() × 4` bytes).
    pub fn state_key(&self, id: StateId) -> Result<StateKey> {
        Ok(StateKey::of_values(&self.read_state_vec(id)?))
    }
}
