//! Double-array trie over token bytes, for greedy longest-match encoding.
//!
//! Why a double array: the match loop is then one load and one compare per input byte
//! (`unit = units[base + byte]`) from one flat array — no pointers, no per-node allocation,
//! no hashing. For the World vocabulary (116 k trie nodes, ≈150 k slots) the array the loop
//! walks is ≈0.6 MiB of `u32`, plus the 512 KiB two-byte table `pairs`.
//!
//! Construction works on `u64` build units:
//! - bits 0..32: `base` of this node's children: child with byte `c` sits at `base + c`.
//!   `0` = no children (a leaf). Bases are unique among inner nodes, which is what makes
//!   checking the label (instead of the parent's index) sufficient: if slot `base + c` holds
//!   label `c`, its parent's base is `base`, hence its parent is this node. Base 0 is never
//!   given to an inner node, so a lookup from a leaf (`0 + c`) finds a label other than `c`.
//! - bits 32..41: `check` = `0x100 | label` (the byte on the edge into this node); `0` for a
//!   free slot and for the root, so neither can ever match a byte.
//! - bits 41..64: token id ending at this node, `0` = none (id 0 is end-of-text and has no
//!   bytes, so it is never in the trie). 23 bits: ids below 8 388 608.
//!
//! which are then compacted into the `u32` units the loop reads (22-bit base, check,
//! terminal flag; see `Compact`) and a parallel `ids` array read once per token.
//! The array is padded so that `base + 255 < units.len()` for every base.

use std::collections::VecDeque;

const CHECK_SHIFT: u32 = 32;
const CHECK_MASK: u64 = 0x1FF << CHECK_SHIFT;
const CHECK_BIT: u64 = 0x100;
const ID_SHIFT: u32 = 41;
/// Largest token id a unit can hold (23 bits).
pub(crate) const MAX_ID: u32 = (1 << 23) - 1;
/// Largest base a unit can hold, with room for `base + 255`.
const MAX_BASE: usize = u32::MAX as usize - 256;

/// `check` field for an edge labelled `b`, in place.
#[inline(always)]
fn check_of(b: u8) -> u64 {
    (CHECK_BIT | b as u64) << CHECK_SHIFT
}

/// A built trie. `units[0]` is the root.
#[derive(Debug, Clone)]
pub(crate) struct Trie {
    /// The compact form the match loop walks (see [`Compact`]): half the bytes of the
    /// build units, so more of the trie stays in cache.
    units: Vec<u32>,
    /// Token id of each slot (read once per token, at the end of its match).
    ids: Vec<u32>,
    root_base: usize,
    /// The first two steps of every match in one load: entry `b0 << 8 | b1` holds, laid out
    /// like a unit, the longest token among `b0` and `b0 b1` (id in the id field, its length
    /// 1 or 2 in bit [`PAIR_LEN2_BIT`]) and the base of node `b0 b1` to continue from (0 when
    /// that node is absent or a leaf). 65 536 × 8 bytes = 512 KiB; saves one dependent load
    /// per token, the most frequent step.
    pairs: Vec<u64>,
}

/// The match loop's unit (`u32`): bits 0..22 base, bits 22..31 check (`0x100 | label`),
/// bit 31 set when a token ends at this node (its id is in `Trie::ids`).
struct Compact;

impl Compact {
    const BASE_MASK: u32 = (1 << 22) - 1;
    const CHECK_SHIFT: u32 = 22;
    const CHECK_MASK: u32 = 0x1FF << Self::CHECK_SHIFT;
    const TERMINAL: u32 = 1 << 31;

    #[inline(always)]
    fn check_of(b: u8) -> u32 {
        (0x100 | b as u32) << Self::CHECK_SHIFT
    }
}

/// In a `pairs` entry: set when the best token so far is 2 bytes long, clear for 1 byte.
const PAIR_LEN2_BIT: u64 = 1 << CHECK_SHIFT;

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
            if id > MAX_ID {
                return Err(format!("token id {id} exceeds the trie's limit {MAX_ID}"));
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
        let mut best: Option<(usize, usize)> = None;
        for (depth, &b) in text.iter().enumerate() {
            let slot = base + b as usize;
            let Some(&unit) = units.get(slot) else {
                break;
            };
            if unit & Compact::CHECK_MASK != Compact::check_of(b) {
                break;
            }
            if unit & Compact::TERMINAL != 0 {
                best = Some((slot, depth + 1));
            }
            base = (unit & Compact::BASE_MASK) as usize;
        }
        best.and_then(|(slot, len)| Some((*self.ids.get(slot)?, len)))
    }

    /// Greedy longest-match encoding of `text`, appended to `out`.
    ///
    /// At each position the longest key that is a prefix of the rest is emitted and the
    /// position moves past it. A byte that starts no key (impossible for the vocabularies
    /// `Tokenizer` accepts, which hold every single byte) is skipped so the loop always
    /// advances; `Tokenizer` checks at construction that this cannot happen.
    pub(crate) fn encode_into(&self, text: &[u8], out: &mut Vec<u32>) {
        let units = &self.units[..];
        let ids = &self.ids[..];
        let pairs = &self.pairs[..];
        let n = text.len();
        let mut i = 0;
        while i + 1 < n {
            // Two bytes in one step (see `pairs`), then the trie from node `b0 b1`.
            let pair = (text[i] as usize) << 8 | text[i + 1] as usize;
            let e = pairs.get(pair).copied().unwrap_or(0);
            // Slot 0 is the root, never a token: `ids[0] == 0` means "the pair's token".
            let mut best_slot = 0;
            let mut best_end = i + 1 + usize::from(e & PAIR_LEN2_BIT != 0);
            let mut base = e as u32 as usize;
            let mut j = i + 2;
            while j < n {
                let b = text[j];
                let slot = base + b as usize;
                let Some(&unit) = units.get(slot) else {
                    break;
                };
                if unit & Compact::CHECK_MASK != Compact::check_of(b) {
                    break;
                }
                j += 1;
                if unit & Compact::TERMINAL != 0 {
                    best_slot = slot;
                    best_end = j;
                }
                base = (unit & Compact::BASE_MASK) as usize;
            }
            // Without a branch: `walked` is 0 unless the walk went past the pair's token.
            let walked = ids.get(best_slot).copied().unwrap_or(0);
            let best_id = if walked != 0 {
                walked
            } else {
                (e >> ID_SHIFT) as u32
            };
            if best_id != 0 {
                out.push(best_id);
            }
            i = best_end;
        }
        if i < n {
            // One byte left.
            if let Some((id, _)) = self.longest_prefix(&text[i..]) {
                out.push(id);
            }
        }
    }

    /// The `pairs` table of a built unit array (see [`Trie::pairs`]).
    fn build_pairs(units: &[u64], root_base: usize) -> Vec<u64> {
        let step = |base: usize, b: u8| -> Option<u64> {
            units
                .get(base + b as usize)
                .copied()
                .filter(|&u| u & CHECK_MASK == check_of(b))
        };
        let mut pairs = vec![0u64; 1 << 16];
        for b0 in 0..=255u8 {
            let Some(u1) = step(root_base, b0) else {
                // No token starts with b0: best = nothing, length 1 (the byte is skipped).
                continue;
            };
            let id1 = u1 >> ID_SHIFT;
            let base1 = u1 as u32 as usize;
            for b1 in 0..=255u8 {
                let e = &mut pairs[(b0 as usize) << 8 | b1 as usize];
                *e = match step(base1, b1).filter(|_| base1 != 0) {
                    Some(u2) if u2 >> ID_SHIFT != 0 => (u2 & !CHECK_MASK) | PAIR_LEN2_BIT,
                    Some(u2) => (id1 << ID_SHIFT) | (u2 as u32 as u64),
                    None => id1 << ID_SHIFT,
                };
            }
        }
        pairs
    }

    /// Bytes of the unit array and pair table (for reports).
    pub(crate) fn size_bytes(&self) -> usize {
        (self.units.len() + self.ids.len()) * std::mem::size_of::<u32>()
            + self.pairs.len() * std::mem::size_of::<u64>()
    }
}

/// Double-array construction: breadth-first over the sorted keys; each node's children
/// are placed at the first base (unused by any other node) whose slots are all free.
/// Free slots form a doubly linked list so the search skips occupied ones; a free slot
/// that has been rejected as an anchor [`MAX_REJECTS`] times leaves the list (it stays
/// free and can still receive a child), which keeps the search from rescanning the same
/// hard-to-fill holes for every node: construction stays linear in practice.
struct Builder {
    units: Vec<u64>,
    base_used: Vec<bool>,
    /// For a listed free slot: the next / previous listed free slot (`NIL` at the ends).
    next_free: Vec<u32>,
    prev_free: Vec<u32>,
    listed: Vec<bool>,
    rejects: Vec<u8>,
    head_free: u32,
    tail_free: u32,
}

const NIL: u32 = u32::MAX;
const MAX_REJECTS: u8 = 16;

impl Builder {
    fn new(n_keys: usize) -> Self {
        let mut b = Builder {
            units: Vec::new(),
            base_used: Vec::new(),
            next_free: Vec::new(),
            prev_free: Vec::new(),
            listed: Vec::new(),
            rejects: Vec::new(),
            head_free: NIL,
            tail_free: NIL,
        };
        // About 2 slots per key for the World vocabulary; grown on demand.
        b.grow(n_keys.saturating_mul(2).max(1024));
        // Slot 0 is the root; base 0 means "leaf" and is never given to an inner node.
        b.unlink(0);
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
        self.listed.resize(new_len, true);
        self.rejects.resize(new_len, 0);
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

    /// Removes slot `s` from the free list (no-op if it is not listed).
    fn unlink(&mut self, s: usize) {
        if !self.listed[s] {
            return;
        }
        self.listed[s] = false;
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
    }

    fn is_free(&self, s: usize) -> bool {
        s != 0 && self.units.get(s).is_none_or(|&u| u & CHECK_MASK == 0)
    }

    /// First unused base ≥ 1 where `base + l` is free for every label `l` (ascending).
    fn find_base(&mut self, labels: &[u8]) -> Result<usize, String> {
        let first = labels.first().map_or(0, |&l| l as usize);
        let mut f = self.head_free;
        loop {
            if f == NIL {
                // No listed free slot: grow and continue from the new slots.
                let len = self.units.len();
                self.grow(len + len / 2 + 256);
                f = len as u32;
            }
            let slot = f as usize;
            let next = self.next_free[slot];
            if slot > first {
                let base = slot - first;
                if base > MAX_BASE {
                    return Err(format!("the trie needs more than {MAX_BASE} slots"));
                }
                let used = self.base_used.get(base).copied().unwrap_or(false);
                if !used && labels[1..].iter().all(|&l| self.is_free(base + l as usize)) {
                    return Ok(base);
                }
                self.rejects[slot] = self.rejects[slot].saturating_add(1);
                if self.rejects[slot] >= MAX_REJECTS {
                    self.unlink(slot);
                }
            }
            f = next;
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
                    self.unlink(child);
                    self.units[child] = check_of(c);
                    queue.push_back((child, depth + 1, s, e));
                }
                base
            };
            if slot == 0 {
                root_base = base;
            }
            let check = self.units[slot] & CHECK_MASK;
            self.units[slot] = check | base as u64 | ((id as u64) << ID_SHIFT);
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
        let pairs = Trie::build_pairs(&self.units, root_base);
        if self.units.len() > Compact::BASE_MASK as usize {
            return Err(format!(
                "the trie needs {} slots, more than {}",
                self.units.len(),
                Compact::BASE_MASK
            ));
        }
        let units = self
            .units
            .iter()
            .map(|&u| {
                // Base < len ≤ BASE_MASK (checked above); check bits move down; id → flag.
                let base = u as u32 & Compact::BASE_MASK;
                let check = (((u & CHECK_MASK) >> CHECK_SHIFT) as u32) << Compact::CHECK_SHIFT;
                let terminal = if u >> ID_SHIFT != 0 {
                    Compact::TERMINAL
                } else {
                    0
                };
                base | check | terminal
            })
            .collect();
        let ids = self.units.iter().map(|&u| (u >> ID_SHIFT) as u32).collect();
        Ok(Trie {
            units,
            ids,
            root_base,
            pairs,
        })
    }
}
