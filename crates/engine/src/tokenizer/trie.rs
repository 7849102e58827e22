//! Double-array trie over token bytes, for greedy longest-match encoding.
//!
//! Why a double array: the match loop is then one load and one compare per input byte
//! (`unit = units[base + byte]`), from one flat `Vec<u64>` of about 1.5 MiB for the World
//! vocabulary (116 k trie nodes) — no pointers, no per-node allocation, no hashing.
//!
//! Layout of a unit (`u64`), the slot of one trie node:
//! - bits 0..9: `check` = `0x100 | label` (the byte on the edge into this node); `0` for a
//!   free slot and for the root, so neither can ever match a byte.
//! - bits 9..32: `base` of this node's children: child with byte `c` sits at `base + c`.
//!   `0` = no children (a leaf). Bases are unique among inner nodes, which is what makes
//!   checking the label (instead of the parent's index) sufficient: if slot `base + c` holds
//!   label `c`, its parent's base is `base`, hence its parent is this node. Base 0 is never
//!   given to an inner node, so a lookup from a leaf (`0 + c`) finds a label other than `c`.
//! - bits 32..64: token id ending at this node, `0` = none (id 0 is end-of-text and has no
//!   bytes, so it is never in the trie).
//!
//! The array is padded so that `base + 255 < units.len()` for every base.

use std::collections::VecDeque;

const CHECK_MASK: u64 = 0x1FF;
const CHECK_BIT: u64 = 0x100;
const BASE_SHIFT: u32 = 9;
const BASE_MASK: u64 = 0x7F_FFFF;
/// Largest base a unit can hold (23 bits).
const MAX_BASE: usize = BASE_MASK as usize;

/// A built trie. `units[0]` is the root.
#[derive(Debug, Clone)]
pub(crate) struct Trie {
    units: Vec<u64>,
    root_base: usize,
}

impl Trie {
    /// Builds the trie of `keys` (`(bytes, id)`, bytes non-empty, id ≥ 1).
    ///
    /// When two ids have the same bytes the larger id wins, as in BlinkDL's
    /// `TRIE_TOKENIZER` (its `token2idx` dict keeps the last id of the vocab file).
    /// Errors (as text, wrapped by the caller): an empty key, id 0, or a vocabulary whose
    /// trie needs more than 2^23 slots.
    pub(crate) fn build(keys: &[(&[u8], u32)]) -> Result<Trie, String> {
        let mut sorted: Vec<(&[u8], u32)> = Vec::with_capacity(keys.len());
        for &(k, id) in keys {
            if k.is_empty() {
                return Err(format!("token {id} has no bytes and cannot be matched"));
            }
            if id == 0 {
                return Err("token 0 is end-of-text and cannot have bytes".into());
            }
            sorted.push((k, id));
        }
        // Equal keys: order by id so that `dedup` below keeps the largest.
        sorted.sort_unstable();
        let mut dedup: Vec<(&[u8], u32)> = Vec::with_capacity(sorted.len());
        for (k, id) in sorted {
            match dedup.last_mut() {
                Some(last) if last.0 == k => last.1 = id,
                _ => dedup.push((k, id)),
            }
        }
        Builder::new(dedup.len()).build(&dedup)
    }

    /// Longest key that is a prefix of `text`: `(id, length in bytes)`, or `None` when no
    /// key is (never for a vocabulary holding all 256 single bytes and a non-empty text).
    #[inline]
    pub(crate) fn longest_prefix(&self, text: &[u8]) -> Option<(u32, usize)> {
        let units = &self.units[..];
        let mut base = self.root_base;
        let mut best: Option<(u32, usize)> = None;
        for (depth, &b) in text.iter().enumerate() {
            let Some(&unit) = units.get(base + b as usize) else {
                break;
            };
            if unit & CHECK_MASK != CHECK_BIT | b as u64 {
                break;
            }
            let id = (unit >> 32) as u32;
            if id != 0 {
                best = Some((id, depth + 1));
            }
            base = ((unit >> BASE_SHIFT) & BASE_MASK) as usize;
        }
        best
    }

    /// Greedy longest-match encoding of `text`, appended to `out`.
    ///
    /// At each position the longest key that is a prefix of the rest is emitted and the
    /// position moves past it. A byte that starts no key (impossible for the vocabularies
    /// `Tokenizer` accepts, which hold every single byte) is skipped so the loop always
    /// advances; `Tokenizer` checks at construction that this cannot happen.
    pub(crate) fn encode_into(&self, text: &[u8], out: &mut Vec<u32>) {
        let units = &self.units[..];
        let root_base = self.root_base;
        let n = text.len();
        let mut i = 0;
        while i < n {
            let mut base = root_base;
            let mut best_id = 0u32;
            let mut best_end = i + 1;
            let mut j = i;
            while j < n {
                let b = text[j];
                let Some(&unit) = units.get(base + b as usize) else {
                    break;
                };
                if unit & CHECK_MASK != CHECK_BIT | b as u64 {
                    break;
                }
                j += 1;
                let id = (unit >> 32) as u32;
                if id != 0 {
                    best_id = id;
                    best_end = j;
                }
                base = ((unit >> BASE_SHIFT) & BASE_MASK) as usize;
            }
            if best_id != 0 {
                out.push(best_id);
            }
            i = best_end;
        }
    }

    /// Bytes of the unit array (for reports).
    pub(crate) fn size_bytes(&self) -> usize {
        self.units.len() * std::mem::size_of::<u64>()
    }
}

/// Double-array construction: breadth-first over the sorted keys; each node's children
/// are placed at the first base (unused by any other node) whose slots are all free.
/// Free slots form a doubly linked list so the search skips occupied ones.
struct Builder {
    units: Vec<u64>,
    base_used: Vec<bool>,
    /// For a free slot: the next / previous free slot (`NIL` at the ends).
    next_free: Vec<u32>,
    prev_free: Vec<u32>,
    head_free: u32,
    tail_free: u32,
}

const NIL: u32 = u32::MAX;

impl Builder {
    fn new(n_keys: usize) -> Self {
        let mut b = Builder {
            units: Vec::new(),
            base_used: Vec::new(),
            next_free: Vec::new(),
            prev_free: Vec::new(),
            head_free: NIL,
            tail_free: NIL,
        };
        // About 2 slots per key for the World vocabulary; grown on demand.
        b.grow(n_keys.saturating_mul(2).max(1024));
        // Slot 0 is the root; base 0 means "leaf" and is never given to an inner node.
        b.take(0);
        b.base_used[0] = true;
        b
    }

    fn grow(&mut self, new_len: usize) {
        let old = self.units.len();
        if new_len <= old {
            return;
        }
        self.units.resize(new_len, 0);
        self.base_used.resize(new_len, false);
        self.next_free.resize(new_len, NIL);
        self.prev_free.resize(new_len, NIL);
        for s in old..new_len {
            let s32 = s as u32;
            self.prev_free[s] = self.tail_free;
            if self.tail_free == NIL {
                self.head_free = s32;
            } else {
                self.next_free[self.tail_free as usize] = s32;
            }
            self.tail_free = s32;
        }
    }

    /// Removes free slot `s` from the free list.
    fn take(&mut self, s: usize) {
        let (p, n) = (self.prev_free[s], self.next_free[s]);
        if p == NIL {
            self.head_free = n;
        } else {
            self.next_free[p as usize] = n;
        }
        if n == NIL {
            self.tail_free = p;
        } else {
            self.prev_free[n as usize] = p;
        }
        self.next_free[s] = NIL;
        self.prev_free[s] = NIL;
    }

    fn is_free(&self, s: usize) -> bool {
        self.units.get(s).is_none_or(|&u| u & CHECK_MASK == 0) && s != 0
    }

    /// First unused base ≥ 1 where `base + l` is free for every label `l` (ascending).
    fn find_base(&mut self, labels: &[u8]) -> Result<usize, String> {
        let first = labels.first().map_or(0, |&l| l as usize);
        let mut f = self.head_free;
        loop {
            if f == NIL {
                // Everything is full: grow and continue from the new slots.
                let len = self.units.len();
                self.grow(len + len / 2 + 256);
                f = len as u32;
            }
            let slot = f as usize;
            if slot > first {
                let base = slot - first;
                if base > MAX_BASE {
                    return Err(format!("the trie needs more than {MAX_BASE} slots"));
                }
                let used = self.base_used.get(base).copied().unwrap_or(false);
                if !used && labels[1..].iter().all(|&l| self.is_free(base + l as usize)) {
                    return Ok(base);
                }
            }
            f = self.next_free[slot];
        }
    }

    fn build(mut self, keys: &[(&[u8], u32)]) -> Result<Trie, String> {
        // Work items: (slot, depth, key range). All keys in the range share their first
        // `depth` bytes, which spell the path to `slot`.
        let mut queue: VecDeque<(usize, usize, usize, usize)> = VecDeque::new();
        queue.push_back((0, 0, 0, keys.len()));
        let mut labels: Vec<u8> = Vec::with_capacity(256);
        let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(256);
        let mut root_base = 0;
        let mut max_base = 0;
        while let Some((slot, depth, lo, hi)) = queue.pop_front() {
            let mut k = lo;
            let mut id = 0u32;
            // Sorted order puts the key that ends here first.
            if k < hi && keys[k].0.len() == depth {
                id = keys[k].1;
                k += 1;
            }
            labels.clear();
            ranges.clear();
            while k < hi {
                let c = keys[k].0[depth];
                let start = k;
                while k < hi && keys[k].0[depth] == c {
                    k += 1;
                }
                labels.push(c);
                ranges.push((start, k));
            }
            let base = if labels.is_empty() {
                0
            } else {
                let base = self.find_base(&labels)?;
                // Keep `base + 255` inside the array so lookups never fall off its end.
                self.grow(base + 256);
                self.base_used[base] = true;
                max_base = max_base.max(base);
                for (&c, &(s, e)) in labels.iter().zip(ranges.iter()) {
                    let child = base + c as usize;
                    self.take(child);
                    self.units[child] = CHECK_BIT | c as u64;
                    queue.push_back((child, depth + 1, s, e));
                }
                base
            };
            if slot == 0 {
                root_base = base;
            }
            let check = self.units[slot] & CHECK_MASK;
            self.units[slot] = check | ((base as u64) << BASE_SHIFT) | ((id as u64) << 32);
        }
        // Trim the free tail, keeping the padding after the largest base.
        let used_end = self
            .units
            .iter()
            .rposition(|&u| u != 0)
            .map_or(1, |p| p + 1);
        let len = used_end.max(max_base + 256);
        self.units.truncate(len);
        self.units.shrink_to_fit();
        Ok(Trie {
            units: self.units,
            root_base,
        })
    }
}
