//! [`EmbeddingCache`]: embeddings on the host, keyed by (model fingerprint, token ids,
//! pooling, identity of the starting state), bounded in bytes and entries, LRU-evicted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{CacheStats, StateKey};
use crate::analysis::embed::{EmbedInput, Embeddings, Pooling};
use crate::api::{Engine, StateId};
use crate::error::{EngineError, Result};
use crate::format::fingerprint::ModelFingerprint;

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
        crate::output::check(
            || format!("embeddings of {} inputs × {c}", inputs.len()),
            (inputs.len() as u64).saturating_mul(c as u64),
            4,
        )?;
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
        let mut data = crate::output::vec(
            || format!("embeddings of {} inputs × {c}", inputs.len()),
            inputs.len() * c,
        )?;
        for v in found.into_iter().flatten() {
            data.extend_from_slice(&v);
        }
        Ok((Embeddings { dim: c, data }, hits))
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
