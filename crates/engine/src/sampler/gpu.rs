//! Draws whose O(vocab) part ran on the GPU (`ops::candidates`): the bans and penalties
//! applied to the logits there (`adjust_logits`, the same f32 subtraction), the largest
//! logit, the eligible mass and the tokens above a floor found there; the host ranks those
//! few tokens and draws as [`Sampler::sample`] does from the whole logits.
//!
//! The one difference from a draw on the host is the eligible mass top-p takes its share
//! of: an f32 sum on the GPU (a tree) instead of an f64 one, ≈ 1e-6 apart, which moves the
//! nucleus's edge only where a prefix's mass lands that close to it.

use super::draw::{exp_le0, select};
use super::Sampler;
use crate::error::{EngineError, Result};

/// Candidate pairs a row has room for: a nucleus or top-k set larger than this draws from
/// the whole logits instead.
pub const CAP: usize = 1024;

/// Header words of a row's output.
const HEAD: usize = 8;

/// u32 words of one row's output: the header, then [`CAP`] (id, logit bits) pairs.
pub const fn row_words() -> usize {
    HEAD + 2 * CAP
}

/// One row's draw options for the kernel: `[lo bits, top_k, top_p bits, 0]` — `lo` the
/// smallest eligible probability relative to the largest (min-p's floor, or the smallest
/// f32 above 0), `top_k` 0 when off, `top_p` 1 when off.
pub fn row_options(lo: f32, top_k: usize, top_p: f32) -> [u32; 4] {
    [
        lo.to_bits(),
        u32::try_from(top_k).unwrap_or(u32::MAX),
        top_p.to_bits(),
        0,
    ]
}

/// One row's output of the kernel, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct CandRow {
    /// The largest logit (±inf, or −inf for a row of NaN, when nothing else was done).
    pub max: f32,
    /// Its lowest index (`u32::MAX` for a row of NaN).
    pub argmax: u32,
    /// Σ exp(l − max) over the eligible tokens (f32).
    pub sum: f32,
    /// How many tokens are eligible.
    pub count: usize,
    /// The floor whose tokens were gathered; 0 when none of the kernel's floors holds the
    /// k best or the nucleus.
    pub floor: f32,
    /// How many tokens passed the floor (more than `cands.len()` when over [`CAP`]).
    pub found: usize,
    /// (token id, its logit after the adjustments), in no particular order.
    pub cands: Vec<(u32, f32)>,
}

impl CandRow {
    /// Parses one row's words (`row_words()` of them, or fewer: then only what they hold).
    pub fn parse(w: &[u32]) -> CandRow {
        let at = |i: usize| w.get(i).copied().unwrap_or(0);
        let found = at(5) as usize;
        let n = found.min(CAP).min(w.len().saturating_sub(HEAD) / 2);
        CandRow {
            max: f32::from_bits(at(0)),
            argmax: at(1),
            sum: f32::from_bits(at(2)),
            count: at(3) as usize,
            floor: f32::from_bits(at(4)),
            found,
            cands: (0..n)
                .map(|i| (at(HEAD + 2 * i), f32::from_bits(at(HEAD + 2 * i + 1))))
                .collect(),
        }
    }
}

/// The GPU part of a [`Sampler`]'s next draw.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuDraw {
    /// (token, delta): `logit −= delta` before anything else (+inf bans), one entry a token.
    pub adjustments: Vec<(u32, f32)>,
    /// The kernel's options ([`row_options`]).
    pub options: [u32; 4],
}

impl Sampler {
    /// The bans and penalties of the next draw as (token, delta) subtractions — +inf for a
    /// banned token, `presence + occurrence · frequency` (the f32 expression
    /// [`Self::sample`] subtracts) for each token seen and not banned, zero deltas left
    /// out — or `None` with a repetition penalty (it divides).
    pub fn adjustments(&self) -> Option<Vec<(u32, f32)>> {
        let o = &self.opts;
        if o.repetition_penalty != 1.0 {
            return None;
        }
        let mut adj: Vec<(u32, f32)> = Vec::new();
        for &t in &o.banned_tokens {
            if (t as usize) < self.vocab && !adj.iter().any(|a| a.0 == t) {
                adj.push((t, f32::INFINITY));
            }
        }
        let (pres, freq) = (o.presence_penalty, o.frequency_penalty);
        for &t in &self.seen {
            if o.banned_tokens.contains(&t) {
                continue;
            }
            let delta = pres + self.occurrence[t as usize] * freq;
            if delta != 0.0 {
                adj.push((t, delta));
            }
        }
        Some(adj)
    }

    /// Whether the draw is the argmax (temperature 0 or top-k 1).
    pub(super) fn is_greedy(&self) -> bool {
        self.opts.temperature == 0.0 || self.opts.top_k == 1
    }

    /// What the GPU does for the next draw, or `None` when the host needs the whole logits:
    /// a repetition penalty, or a draw from every eligible token (neither top-k nor top-p).
    pub fn gpu_draw(&self) -> Option<GpuDraw> {
        let o = &self.opts;
        if !self.is_greedy() && o.top_k == 0 && o.top_p >= 1.0 {
            return None;
        }
        Some(GpuDraw {
            adjustments: self.adjustments()?,
            options: row_options(self.eligible_floor(), o.top_k, o.top_p),
        })
    }

    /// The draw from a row the GPU prepared with [`Self::gpu_draw`]'s plan: `Ok(None)` when
    /// its candidates do not decide it (no floor of the kernel held the k best or the
    /// nucleus, more than [`CAP`] of them, or rounding at the floor's edge)
    /// — then draw from the adjusted logits ([`Self::try_sample_adjusted`]). Does not call
    /// [`Self::accept`].
    ///
    /// Errors: [`EngineError::InvalidInput`] when no logit is above −∞ (all NaN / −∞).
    pub fn draw_from_candidates(&mut self, row: &CandRow) -> Result<Option<u32>> {
        if row.max == f32::NEG_INFINITY {
            return Err(EngineError::invalid(
                "sampler: no finite logit (all NaN or -inf)",
            ));
        }
        if row.max == f32::INFINITY || self.is_greedy() {
            return Ok(Some(row.argmax));
        }
        if row.floor <= 0.0 || row.found > row.cands.len() {
            return Ok(None);
        }
        let lo = self.eligible_floor();
        let o = &self.opts;
        let top_k = (o.top_k > 0 && o.top_k < row.count).then_some(o.top_k);
        let top_p = (o.top_p < 1.0).then_some(f64::from(o.top_p));
        let (m, floor, t) = (row.max, row.floor.max(lo), o.temperature);
        self.cand.clear();
        for &(id, l) in &row.cands {
            let p = exp_le0(l - m);
            if p >= floor {
                self.cand.push((p, id));
            }
        }
        if !select(&mut self.cand, top_k, top_p, f64::from(row.sum), false) {
            return Ok(None);
        }
        if t == 1.0 {
            // The walk weighs the survivors by p and reads no logit.
            return Ok(Some(self.walk_candidates(|_| f32::NEG_INFINITY, m, t)));
        }
        // The candidates' logits by id, for the temperature (a scratch vector kept between
        // draws, sorted here: the kernel writes its candidates in no particular order).
        let mut by_id = std::mem::take(&mut self.by_id);
        by_id.clear();
        by_id.extend_from_slice(&row.cands);
        by_id.sort_unstable_by_key(|c| c.0);
        let logit = |id: u32| {
            by_id
                .binary_search_by_key(&id, |c| c.0)
                .map_or(f32::NEG_INFINITY, |i| by_id[i].1)
        };
        let id = self.walk_candidates(logit, m, t);
        self.by_id = by_id;
        Ok(Some(id))
    }

    /// [`Self::try_sample`] on logits whose bans and penalties were already subtracted
    /// (on the GPU, [`Self::adjustments`]): NaN → −∞, then the draw.
    ///
    /// Errors: as [`Self::try_sample`].
    pub fn try_sample_adjusted(&mut self, logits: &mut [f32]) -> Result<u32> {
        if logits.len() != self.vocab {
            return Err(EngineError::invalid(format!(
                "sampler: {} logits for a vocabulary of {}",
                logits.len(),
                self.vocab
            )));
        }
        for l in logits.iter_mut() {
            if l.is_nan() {
                *l = f32::NEG_INFINITY;
            }
        }
        self.draw_prepared(logits)
    }
}
