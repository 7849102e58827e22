//! [`PrefixCache`]: a trie of token prefixes → states kept in the engine's GPU state slots
//! and, past the GPU's share of the budget, in host memory (as ai00's `Trie<Tokens,
//! CachedItem>` and llama-server's RAM prompt cache), bounded and LRU-evicted, so
//! re-analysing a document or continuing a chat feeds only the tokens past the longest
//! cached prefix.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use super::CacheStats;
use crate::api::{Engine, StateId};
use crate::error::{EngineError, Result};
use spill::Held;

mod spill;
pub use spill::MAX_SPILLS_IN_FLIGHT;

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
    held: Held,
    /// The logits after the last token of the prefix (`[vocab]` f32), when the caller
    /// gave them: a request whose whole prompt is cached samples from them at once.
    logits: Option<Arc<[f32]>>,
    tick: u64,
    bytes: u64,
}

/// What [`PrefixCache::resume`] gives back.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// A new state holding the first `depth` tokens; the caller owns it.
    pub state: StateId,
    /// Leading tokens that came from the cache.
    pub depth: usize,
    /// The logits after token `depth − 1`, when `depth` is the whole token list and the
    /// entry kept them (otherwise the caller feeds `tokens[depth..]`).
    pub logits: Option<Arc<[f32]>>,
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

/// A trie of token prefixes whose entries are states of one engine, in its GPU slots or
/// spilled to host memory.
///
/// An entry costs `4·state_len + 4·vocab (if it keeps logits) + PREFIX_NODE_BYTES·tokens`
/// bytes (state plus an over-estimate of its trie path). After every insert `bytes ≤
/// budget_bytes` and `entries ≤ max_entries` hold, evicting least recently used entries;
/// the states on the GPU take at most `gpu_budget_bytes` of it: past that (or when the
/// engine has no slot left) the least recently used GPU entries move to host memory
/// instead of being dropped, their slots freed at once and their states read back off
/// the caller's thread (`spill`). The cache binds to the first engine it is
/// used with; using it with another is an error. Call [`PrefixCache::release`] before
/// dropping it, or its slots stay taken until the engine is dropped.
pub struct PrefixCache {
    nodes: Vec<TrieNode>,
    free_nodes: Vec<usize>,
    lru: BTreeMap<u64, usize>,
    tick: u64,
    owner: Option<u64>,
    stats: CacheStats,
    reused_tokens: u64,
    gpu_budget_bytes: u64,
    gpu_bytes: u64,
    /// Spills whose copies have not landed in host memory yet.
    in_flight: usize,
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
    /// An empty cache holding at most `budget_bytes` bytes and `max_entries` states, all
    /// of them allowed on the GPU.
    pub fn new(budget_bytes: u64, max_entries: usize) -> Self {
        Self::with_gpu_budget(budget_bytes, budget_bytes, max_entries)
    }

    /// An empty cache holding at most `budget_bytes` bytes and `max_entries` states, of
    /// which at most `gpu_budget_bytes` in GPU slots (the rest spilled to host memory).
    pub fn with_gpu_budget(budget_bytes: u64, gpu_budget_bytes: u64, max_entries: usize) -> Self {
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
            gpu_budget_bytes: gpu_budget_bytes.min(budget_bytes),
            gpu_bytes: 0,
            in_flight: 0,
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

    /// [`Self::longest_where`] after collecting the finished spills, its entry in GPU or
    /// host memory (a spill in flight lands first; one that failed is gone, and the search
    /// runs again).
    fn deepest_landed(
        &mut self,
        eng: &mut Engine,
        tokens: &[u32],
        ok: impl Fn(&PrefixEntry, usize) -> bool,
    ) -> (usize, usize) {
        self.settle(eng);
        loop {
            let (node, depth) = self.longest_where(tokens, &ok);
            if depth == 0 || self.land(eng, node) {
                return (node, depth);
            }
        }
    }

    /// The deepest cached node along `tokens` whose entry passes `ok(entry, depth)`.
    fn longest_where(
        &self,
        tokens: &[u32],
        ok: impl Fn(&PrefixEntry, usize) -> bool,
    ) -> (usize, usize) {
        let (mut node, mut best) = (ROOT, (ROOT, 0));
        for (depth, t) in tokens.iter().enumerate() {
            match self.nodes[node].children.get(t) {
                Some(&n) => node = n,
                None => break,
            }
            if self.nodes[node]
                .entry
                .as_ref()
                .is_some_and(|e| ok(e, depth + 1))
            {
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
        match e.held {
            Held::Gpu(st) => {
                let _ = eng.free_state(st);
                self.gpu_bytes -= e.bytes;
            }
            Held::Host(_) => self.stats.host_entries -= 1,
            // The copy's thread finishes on its own; its state is dropped.
            Held::Spilling(_) => {
                self.stats.host_entries -= 1;
                self.in_flight -= 1;
            }
        }
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
    fn insert(
        &mut self,
        eng: &mut Engine,
        tokens: &[u32],
        state: StateId,
        logits: Option<Arc<[f32]>>,
    ) -> Result<bool> {
        if tokens.is_empty() {
            return Ok(false);
        }
        let logit_bytes = logits.as_ref().map_or(0, |l| 4 * l.len() as u64);
        let bytes =
            4 * eng.state_len() as u64 + logit_bytes + PREFIX_NODE_BYTES * tokens.len() as u64;
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
        while self.gpu_bytes + bytes > self.gpu_budget_bytes {
            if !self.spill_one(eng) {
                break;
            }
        }
        // The engine's slots are bounded by one binding: when they run out, cached
        // states move to host memory (LRU first); if none is left on the GPU, the state
        // is not cached.
        let fork = loop {
            match eng.fork_state(state) {
                Ok(f) => break f,
                Err(EngineError::TooLarge { .. }) => {
                    if !self.spill_one(eng) {
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
            held: Held::Gpu(fork),
            logits,
            tick: 0,
            bytes,
        });
        self.touch(node);
        self.stats.entries += 1;
        self.stats.bytes += bytes;
        self.gpu_bytes += bytes;
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

    /// A new state resumed from the longest cached prefix of `tokens`, for a caller that
    /// needs the logits after the last token: an entry for all of `tokens` counts only
    /// if it kept its logits (then [`Resumed::logits`] holds them); otherwise the deepest
    /// entry short of the end is taken and the caller feeds the rest. `None` on a miss
    /// (nothing cached along `tokens`).
    ///
    /// Errors: the cache belongs to another engine; no state slot for the new state.
    pub fn resume(&mut self, eng: &mut Engine, tokens: &[u32]) -> Result<Option<Resumed>> {
        self.bind(eng)?;
        let n = tokens.len();
        let (node, depth) = self.deepest_landed(eng, tokens, |e, d| d < n || e.logits.is_some());
        if depth == 0 {
            self.stats.misses += 1;
            return Ok(None);
        }
        self.stats.hits += 1;
        self.reused_tokens += depth as u64;
        self.touch(node);
        let state = self.materialize(eng, node)?;
        let logits = match &self.nodes[node].entry {
            Some(e) if depth == n => e.logits.clone(),
            _ => None,
        };
        Ok(Some(Resumed {
            state,
            depth,
            logits,
        }))
    }

    /// Caches a copy of `state` as the state after `tokens`, with the logits after the
    /// last token when given (`[vocab]` f32). Replaces an entry for the same tokens.
    /// Returns whether it was stored (not for empty `tokens`, an entry larger than the
    /// budget, or no slot left even after spilling every entry to host memory).
    ///
    /// Errors: the cache belongs to another engine; unknown `state`.
    pub fn store(
        &mut self,
        eng: &mut Engine,
        tokens: &[u32],
        state: StateId,
        logits: Option<Arc<[f32]>>,
    ) -> Result<bool> {
        self.bind(eng)?;
        self.settle(eng);
        self.insert(eng, tokens, state, logits)
    }

    /// Moves the least recently used cached state on the GPU to host memory, freeing its
    /// slot for a caller that has none left. `false` when none is on the GPU.
    pub fn spill_lru(&mut self, eng: &mut Engine) -> bool {
        if self.owner != Some(eng.instance_id()) {
            return false;
        }
        self.settle(eng);
        self.spill_one(eng)
    }

    /// Bytes of the entries held in GPU slots now.
    pub fn gpu_bytes(&self) -> u64 {
        self.gpu_bytes
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
        let (node, depth) = cache.deepest_landed(self, tokens, |_, _| true);
        let state = if depth > 0 {
            cache.stats.hits += 1;
            cache.reused_tokens += depth as u64;
            cache.touch(node);
            let st = cache.materialize(self, node)?;
            match self.feed(st, &tokens[depth..]) {
                Ok(()) => st,
                Err(e) => {
                    let _ = self.free_state(st);
                    return Err(e);
                }
            }
        } else {
            cache.stats.misses += 1;
            self.prefill(tokens)?
        };
        if depth < tokens.len() {
            if let Err(e) = cache.insert(self, tokens, state, None) {
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
        cache.store(self, tokens, state, None)
    }
}
