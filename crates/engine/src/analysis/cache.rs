//! Caches of document analysis, both bounded (bytes and entries) and LRU-evicted:
//!
//! - [`EmbeddingCache`]: embeddings keyed by (model fingerprint, token ids, pooling,
//!   identity of the state they start from), on the host.
//! - [`PrefixCache`]: a trie of token prefixes → states kept in the engine's GPU state
//!   slots (as ai00's `Trie<Tokens, CachedItem>`), so re-analysing a document or
//!   continuing a chat feeds only the tokens past the longest cached prefix.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::analysis::embed::{EmbedInput, Embeddings, Pooling};
use crate::analysis::fingerprint::{hex, ModelFingerprint};
use crate::api::{Engine, StateId};
use crate::error::{EngineError, Result};

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

/// Key of a cached embedding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmbedKey {
    pub model: ModelFingerprint,
    pub tokens: Vec<u32>,
    pub pooling: Pooling,
    /// Identity of the state the sequence starts from; `None`: the zero state.
    pub context: Option<StateKey>,
}

/// Bytes charged per entry on top of its vectors: key struct, hash-map slot, LRU node
/// and allocation headers, rounded up (an estimate; the budget is approximate by this).
pub const ENTRY_OVERHEAD_BYTES: u64 = 192;

struct EmbedEntry {
    value: Arc<[f32]>,
    tick: u64,
    bytes: u64,
}

/// An LRU cache of embeddings with a byte budget and an entry cap.
///
/// An entry costs `4·tokens + 4·C + ENTRY_OVERHEAD_BYTES` bytes; after every insert
/// `bytes ≤ budget_bytes` and `entries ≤ max_entries` hold (least recently used entries
/// are evicted first; an entry larger than the whole budget is not stored).
pub struct EmbeddingCache {
    map: HashMap<Arc<EmbedKey>, EmbedEntry>,
    lru: BTreeMap<u64, Arc<EmbedKey>>,
    tick: u64,
    stats: CacheStats,
}

impl std::fmt::Debug for EmbeddingCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingCache")
            .field("stats", &self.stats)
            .finish()
    }
}

impl EmbeddingCache {
    /// An empty cache holding at most `budget_bytes` bytes and `max_entries` entries.
    pub fn new(budget_bytes: u64, max_entries: usize) -> Self {
        EmbeddingCache {
            map: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            stats: CacheStats {
                budget_bytes,
                max_entries,
                ..Default::default()
            },
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Bytes an entry for `key` with a `dim`-vector is charged.
    pub fn entry_bytes(key: &EmbedKey, dim: usize) -> u64 {
        4 * key.tokens.len() as u64 + 4 * dim as u64 + ENTRY_OVERHEAD_BYTES
    }

    /// The cached vector for `key` (marks it most recently used; counts a hit or miss).
    pub fn get(&mut self, key: &EmbedKey) -> Option<Arc<[f32]>> {
        self.tick += 1;
        let tick = self.tick;
        match self.map.get_mut(key) {
            Some(e) => {
                if let Some(k) = self.lru.remove(&e.tick) {
                    self.lru.insert(tick, k);
                }
                e.tick = tick;
                self.stats.hits += 1;
                Some(e.value.clone())
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Stores `value` under `key` (replacing an older value), evicting least recently
    /// used entries until the budget and the entry cap hold. Returns whether it was
    /// stored (not when it alone exceeds the budget, or the cap is 0).
    pub fn insert(&mut self, key: EmbedKey, value: &[f32]) -> bool {
        let bytes = Self::entry_bytes(&key, value.len());
        self.remove(&key);
        if bytes > self.stats.budget_bytes || self.stats.max_entries == 0 {
            return false;
        }
        while self.stats.bytes + bytes > self.stats.budget_bytes
            || self.stats.entries + 1 > self.stats.max_entries
        {
            if !self.evict_one() {
                break;
            }
        }
        self.tick += 1;
        let key = Arc::new(key);
        self.lru.insert(self.tick, key.clone());
        self.map.insert(
            key,
            EmbedEntry {
                value: value.into(),
                tick: self.tick,
                bytes,
            },
        );
        self.stats.entries += 1;
        self.stats.bytes += bytes;
        self.stats.inserts += 1;
        true
    }

    fn remove(&mut self, key: &EmbedKey) {
        if let Some(e) = self.map.remove(key) {
            self.lru.remove(&e.tick);
            self.stats.entries -= 1;
            self.stats.bytes -= e.bytes;
        }
    }

    fn evict_one(&mut self) -> bool {
        let Some((_, key)) = self.lru.pop_first() else {
            return false;
        };
        if let Some(e) = self.map.remove(&key) {
            self.stats.entries -= 1;
            self.stats.bytes -= e.bytes;
            self.stats.evictions += 1;
        }
        true
    }

    /// Drops every entry (counters stay).
    pub fn clear(&mut self) {
        self.map.clear();
        self.lru.clear();
        self.stats.entries = 0;
        self.stats.bytes = 0;
    }
}

impl Engine {
    /// [`Engine::embed`] through `cache`: inputs found in the cache are not computed;
    /// the others run in one batched call and are stored. The key of an input that
    /// starts from a state holds that state's [`StateKey`] (read back once per distinct
    /// state). Returns the embeddings and, per input, whether it was a hit.
    ///
    /// Errors: as [`Engine::embed`].
    pub fn embed_cached(
        &mut self,
        cache: &mut EmbeddingCache,
        inputs: &[EmbedInput],
        pooling: Pooling,
    ) -> Result<(Embeddings, Vec<bool>)> {
        let c = self.config().n_embd;
        let model = self.fingerprint();
        let mut contexts: HashMap<StateId, StateKey> = HashMap::new();
        let mut keys = Vec::with_capacity(inputs.len());
        for inp in inputs {
            let context = match inp.from {
                Some(st) => Some(match contexts.get(&st) {
                    Some(k) => *k,
                    None => {
                        let k = self.state_key(st)?;
                        contexts.insert(st, k);
                        k
                    }
                }),
                None => None,
            };
            keys.push(EmbedKey {
                model,
                tokens: inp.tokens.to_vec(),
                pooling,
                context,
            });
        }
        let mut found: Vec<Option<Arc<[f32]>>> = keys.iter().map(|k| cache.get(k)).collect();
        let missing: Vec<usize> = (0..inputs.len()).filter(|&i| found[i].is_none()).collect();
        let hits: Vec<bool> = found.iter().map(Option::is_some).collect();
        if !missing.is_empty() {
            let todo: Vec<EmbedInput> = missing.iter().map(|&i| inputs[i]).collect();
            let fresh = self.embed(&todo, pooling)?;
            for (j, &i) in missing.iter().enumerate() {
                let row = fresh.row(j).ok_or_else(|| EngineError::Op {
                    op: "embed_cached",
                    what: format!("row {j} missing from {} embeddings", fresh.len()),
                })?;
                cache.insert(keys[i].clone(), row);
                found[i] = Some(row.into());
            }
        }
        let mut data = Vec::with_capacity(inputs.len() * c);
        for v in found.into_iter().flatten() {
            data.extend_from_slice(&v);
        }
        Ok((Embeddings { dim: c, data }, hits))
    }
}

/// Host bytes charged per token of a prefix-cache entry (trie node: token, children map
/// slot, parent link), an over-estimate because entries share their common prefixes.
pub const PREFIX_NODE_BYTES: u64 = 64;

struct TrieNode {
    token: u32,
    parent: usize,
    children: HashMap<u32, usize>,
    /// The cached state after the tokens on the path from the root to here.
    entry: Option<PrefixEntry>,
}

struct PrefixEntry {
    state: StateId,
    tick: u64,
    bytes: u64,
}

/// What [`Engine::prefill_cached`] gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Prefilled {
    /// A new state holding all the tokens; the caller owns it.
    pub state: StateId,
    /// Leading tokens that came from the cache (not fed again).
    pub reused: usize,
    /// Tokens fed through the model.
    pub fed: usize,
}

/// A trie of token prefixes whose entries are states in one engine's GPU slots.
///
/// An entry costs `4·state_len + PREFIX_NODE_BYTES·tokens` bytes (GPU state plus an
/// over-estimate of its trie path); after every insert `bytes ≤ budget_bytes` and
/// `entries ≤ max_entries` hold, evicting least recently used entries (freeing their
/// slots). The cache binds to the first engine it is used with; using it with another
/// is an error. Call [`PrefixCache::release`] before dropping it, or its slots stay
/// taken until the engine is dropped.
pub struct PrefixCache {
    nodes: Vec<TrieNode>,
    free_nodes: Vec<usize>,
    lru: BTreeMap<u64, usize>,
    tick: u64,
    owner: Option<u64>,
    stats: CacheStats,
    reused_tokens: u64,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("stats", &self.stats)
            .finish()
    }
}

const ROOT: usize = 0;

impl PrefixCache {
    /// An empty cache holding at most `budget_bytes` bytes and `max_entries` states.
    pub fn new(budget_bytes: u64, max_entries: usize) -> Self {
        PrefixCache {
            nodes: vec![TrieNode {
                token: 0,
                parent: ROOT,
                children: HashMap::new(),
                entry: None,
            }],
            free_nodes: Vec::new(),
            lru: BTreeMap::new(),
            tick: 0,
            owner: None,
            stats: CacheStats {
                budget_bytes,
                max_entries,
                ..Default::default()
            },
            reused_tokens: 0,
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Tokens not fed again thanks to hits, in total.
    pub fn reused_tokens(&self) -> u64 {
        self.reused_tokens
    }

    fn bind(&mut self, eng: &Engine) -> Result<()> {
        match self.owner {
            None => {
                self.owner = Some(eng.instance_id());
                Ok(())
            }
            Some(o) if o == eng.instance_id() => Ok(()),
            Some(o) => Err(EngineError::State {
                what: format!(
                    "this prefix cache holds states of engine #{o}, not of engine #{}",
                    eng.instance_id()
                ),
            }),
        }
    }

    /// The deepest cached node along `tokens` and its depth (`(ROOT, 0)` if none).
    fn longest(&self, tokens: &[u32]) -> (usize, usize) {
        let (mut node, mut best) = (ROOT, (ROOT, 0));
        for (depth, t) in tokens.iter().enumerate() {
            match self.nodes[node].children.get(t) {
                Some(&n) => node = n,
                None => break,
            }
            if self.nodes[node].entry.is_some() {
                best = (node, depth + 1);
            }
        }
        best
    }

    fn new_node(&mut self, token: u32, parent: usize) -> usize {
        let n = TrieNode {
            token,
            parent,
            children: HashMap::new(),
            entry: None,
        };
        match self.free_nodes.pop() {
            Some(i) => {
                self.nodes[i] = n;
                i
            }
            None => {
                self.nodes.push(n);
                self.nodes.len() - 1
            }
        }
    }

    fn touch(&mut self, node: usize) {
        self.tick += 1;
        if let Some(e) = self.nodes[node].entry.as_mut() {
            self.lru.remove(&e.tick);
            e.tick = self.tick;
            self.lru.insert(self.tick, node);
        }
    }

    /// Removes the entry at `node` (freeing its slot) and prunes the emptied path.
    fn remove_entry(&mut self, eng: &mut Engine, node: usize) {
        let Some(e) = self.nodes[node].entry.take() else {
            return;
        };
        self.lru.remove(&e.tick);
        let _ = eng.free_state(e.state);
        self.stats.entries -= 1;
        self.stats.bytes -= e.bytes;
        let mut n = node;
        while n != ROOT && self.nodes[n].entry.is_none() && self.nodes[n].children.is_empty() {
            let (p, t) = (self.nodes[n].parent, self.nodes[n].token);
            self.nodes[p].children.remove(&t);
            self.free_nodes.push(n);
            n = p;
        }
    }

    fn evict_one(&mut self, eng: &mut Engine) -> bool {
        let Some((_, node)) = self.lru.pop_first() else {
            return false;
        };
        self.remove_entry(eng, node);
        self.stats.evictions += 1;
        true
    }

    /// Stores a fork of `state` as the state after `tokens`, evicting as needed.
    /// Returns whether it was stored (not for empty `tokens`, an entry larger than the
    /// budget, a cap of 0, or when the engine has no slot left even after evicting).
    fn insert(&mut self, eng: &mut Engine, tokens: &[u32], state: StateId) -> Result<bool> {
        if tokens.is_empty() {
            return Ok(false);
        }
        let bytes = 4 * eng.state_len() as u64 + PREFIX_NODE_BYTES * tokens.len() as u64;
        if bytes > self.stats.budget_bytes || self.stats.max_entries == 0 {
            return Ok(false);
        }
        // An existing entry for exactly these tokens is replaced.
        let mut node = ROOT;
        let mut exact = true;
        for t in tokens {
            match self.nodes[node].children.get(t) {
                Some(&n) => node = n,
                None => {
                    exact = false;
                    break;
                }
            }
        }
        if exact && self.nodes[node].entry.is_some() {
            self.remove_entry(eng, node);
        }
        while self.stats.bytes + bytes > self.stats.budget_bytes
            || self.stats.entries + 1 > self.stats.max_entries
        {
            if !self.evict_one(eng) {
                break;
            }
        }
        // The engine's slots are bounded by one binding: when they run out, cached
        // states give way (LRU first); if none is left, the state is not cached.
        let fork = loop {
            match eng.fork_state(state) {
                Ok(f) => break f,
                Err(EngineError::TooLarge { .. }) => {
                    if !self.evict_one(eng) {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let mut node = ROOT;
        for &t in tokens {
            node = match self.nodes[node].children.get(&t) {
                Some(&n) => n,
                None => {
                    let n = self.new_node(t, node);
                    self.nodes[node].children.insert(t, n);
                    n
                }
            };
        }
        self.nodes[node].entry = Some(PrefixEntry {
            state: fork,
            tick: 0,
            bytes,
        });
        self.touch(node);
        self.stats.entries += 1;
        self.stats.bytes += bytes;
        self.stats.inserts += 1;
        Ok(true)
    }

    /// Frees every cached state in `eng` and empties the cache (counters stay).
    ///
    /// Errors: `eng` is not the engine the cache holds states of.
    pub fn release(&mut self, eng: &mut Engine) -> Result<()> {
        if self.owner.is_none() {
            return Ok(());
        }
        self.bind(eng)?;
        // A release is not an eviction: no counter moves but `entries` and `bytes`.
        while let Some((_, node)) = self.lru.pop_first() {
            self.remove_entry(eng, node);
        }
        self.nodes.truncate(1);
        self.nodes[ROOT].children.clear();
        self.free_nodes.clear();
        self.owner = None;
        Ok(())
    }
}

impl Engine {
    /// A new state holding `tokens`, resumed from the longest prefix of `tokens` cached
    /// in `cache` (a fork of it; only the rest is fed). The final state is cached too
    /// (a fork), so the same or a longer text later starts from it.
    ///
    /// Errors: `cache` belongs to another engine; as [`Engine::prefill`].
    pub fn prefill_cached(&mut self, cache: &mut PrefixCache, tokens: &[u32]) -> Result<Prefilled> {
        cache.bind(self)?;
        let (node, depth) = cache.longest(tokens);
        let state = if depth > 0 {
            cache.stats.hits += 1;
            cache.reused_tokens += depth as u64;
            cache.touch(node);
            let parent = match &cache.nodes[node].entry {
                Some(e) => e.state,
                None => {
                    return Err(EngineError::State {
                        what: "prefix cache node lost its entry".into(),
                    })
                }
            };
            self.prefill_from(parent, &tokens[depth..])?
        } else {
            cache.stats.misses += 1;
            self.prefill(tokens)?
        };
        if depth < tokens.len() {
            if let Err(e) = cache.insert(self, tokens, state) {
                let _ = self.free_state(state);
                return Err(e);
            }
        }
        Ok(Prefilled {
            state,
            reused: depth,
            fed: tokens.len() - depth,
        })
    }

    /// Caches a fork of `state` as the state after `tokens` (e.g. after a chat turn, so
    /// the next turn resumes from it). Returns whether it was stored.
    ///
    /// Errors: `cache` belongs to another engine; unknown `state`.
    pub fn cache_prefix(
        &mut self,
        cache: &mut PrefixCache,
        tokens: &[u32],
        state: StateId,
    ) -> Result<bool> {
        cache.bind(self)?;
        cache.insert(self, tokens, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &[u32]) -> EmbedKey {
        EmbedKey {
            model: ModelFingerprint([1; 32]),
            tokens: t.to_vec(),
            pooling: Pooling::Last,
            context: None,
        }
    }

    #[test]
    fn lru_order_and_budget() {
        let dim = 8;
        let one = EmbeddingCache::entry_bytes(&key(&[0]), dim);
        let mut c = EmbeddingCache::new(3 * one, 100);
        for i in 0..3u32 {
            assert!(c.insert(key(&[i]), &[i as f32; 8]));
        }
        // Touch 0: 1 is now the least recently used.
        assert!(c.get(&key(&[0])).is_some());
        assert!(c.insert(key(&[3]), &[3.0; 8]));
        assert!(c.get(&key(&[1])).is_none());
        assert!(c.get(&key(&[0])).is_some());
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (3, 1));
        assert!(s.bytes <= s.budget_bytes);
        // Larger than the whole budget: not stored, nothing evicted.
        assert!(!c.insert(key(&[9; 300]), &[0.0; 8]));
        assert_eq!(c.stats().entries, 3);
    }
}
