//! The draw of a sampled (not greedy) token — step 4 of the module docs — in passes over
//! the vocabulary that the compiler vectorises, sorting only the candidates that can
//! matter.
//!
//! A decode step's GPU work waits for this (the next step needs the token), so its cost
//! is paid on every token: on a 65,536-token vocabulary a scalar `f32::exp` per logit and
//! a partial selection over all of them took ≈ 0.5 ms a token on a 2-core VM, a fifth of
//! a 2.9B model's decode step (`benches/sampler.rs`).
//!
//! - Probabilities `p = exp(logit − max)` at temperature 1 (`exp_le0`, branch-free), then
//!   the sum and count of the eligible ones (`p > 0`, and `p ≥ min_p` with min-p: p_max = 1).
//! - Top-k and top-p need only the most probable tokens: the candidates are those with
//!   `p ≥ τ`, with τ = 2⁻⁸, 2⁻¹², 2⁻¹⁶, … until they hold the k best (at least k of them)
//!   or the nucleus (their mass reaches `top_p` of the whole). They are a prefix of the
//!   tokens in descending probability (ties by id), so the k best and the nucleus found
//!   among them are those of the whole vocabulary. A nucleus of over 2,048 tokens
//!   (near-uniform logits) is found by selections weighted by mass, not by a sort.
//! - Temperature last: weights `p^(1/T) = exp((logit − max) / T)`, one uniform draw.

use rand::Rng;

use super::Sampler;

/// e^x for x ≤ 0: Cody–Waite reduction x = n ln 2 + r (|r| ≤ ln 2 / 2; ln 2 split in a
/// short high part and a correction so that n · ln2_hi is exact), e^r by Cephes `expf`'s
/// degree-6 polynomial, 2^n put in the exponent bits. Relative error ≤ 3e-7 against
/// `f64::exp` (tested). Below ln(f32::MIN_POSITIVE) ≈ −87.34 (−∞ included) it returns 0:
/// such a token's weight is under 1e-38 of the most probable one's. No branches, so a
/// loop over a slice vectorises.
#[inline(always)]
pub(super) fn exp_le0(x: f32) -> f32 {
    const LO: f32 = -87.336_55;
    // 1.5 · 2²³: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = if x < LO { LO } else { x };
    let t = xc * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // n ∈ [−126, 0]: t's bits are those of ROUND plus n.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let scale = f32::from_bits(((ni + 127) << 23) as u32);
    if x < LO {
        0.0
    } else {
        y * scale
    }
}

/// Σ of the weights ≥ `lo` (f64, eight running sums) and how many there are.
fn eligible_mass(p: &[f32], lo: f32) -> (f64, usize) {
    let mut s = [0.0f64; 8];
    let mut c = [0usize; 8];
    let chunks = p.chunks_exact(8);
    let rem = chunks.remainder();
    for ch in chunks {
        for j in 0..8 {
            let ok = ch[j] >= lo;
            s[j] += if ok { f64::from(ch[j]) } else { 0.0 };
            c[j] += usize::from(ok);
        }
    }
    let mut sum: f64 = s.iter().sum();
    let mut count: usize = c.iter().sum();
    for &v in rem.iter().filter(|&&v| v >= lo) {
        sum += f64::from(v);
        count += 1;
    }
    (sum, count)
}

/// `(p, id)` of every weight ≥ `floor`, in id order, into `out`: eight at a time, where a
/// branch-free test of the eight says whether any is one (with a peaked distribution
/// almost none are).
fn gather(p: &[f32], floor: f32, out: &mut Vec<(f32, u32)>) {
    out.clear();
    let chunks = p.chunks_exact(8);
    let tail = p.len() - chunks.remainder().len();
    for (ci, ch) in chunks.enumerate() {
        let hits = ch.iter().fold(0u32, |n, &v| n + u32::from(v >= floor));
        if hits > 0 {
            for (j, &v) in ch.iter().enumerate() {
                if v >= floor {
                    out.push((v, (ci * 8 + j) as u32));
                }
            }
        }
    }
    for (j, &v) in p[tail..].iter().enumerate() {
        if v >= floor {
            out.push((v, (tail + j) as u32));
        }
    }
}

/// Descending probability, then ascending id: the order the filters rank tokens in.
fn by_p_desc(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

fn mass(cand: &[(f32, u32)]) -> f64 {
    cand.iter().map(|&(p, _)| f64::from(p)).sum()
}

/// Length of the shortest prefix of `sorted` whose mass reaches `target`, if any.
fn prefix_reaching(sorted: &[(f32, u32)], target: f64) -> Option<usize> {
    let mut acc = 0.0f64;
    for (i, &(p, _)) in sorted.iter().enumerate() {
        acc += f64::from(p);
        if acc >= target {
            return Some(i + 1);
        }
    }
    None
}

/// Top-k then top-p on `cand`, the tokens above a floor as (p, id): true when it holds the
/// k best / the nucleus (then `cand` is left holding the survivors, in descending
/// probability — but for a nucleus of over [`SORT_MAX`] tokens, left in a selection's
/// order), false when a lower floor is needed. `top_k`: active only when below the
/// eligible count; `top_p` of `sum`, the eligible tokens' mass; `last`: `cand` holds every
/// eligible token (then rounding that keeps the nucleus out of reach keeps them all).
pub(super) fn select(
    cand: &mut Vec<(f32, u32)>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    sum: f64,
    last: bool,
) -> bool {
    let target = if let Some(k) = top_k {
        if cand.len() < k && !last {
            return false;
        }
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, by_p_desc);
            cand.truncate(k);
        }
        cand.sort_unstable_by(by_p_desc);
        match top_p {
            Some(tp) => tp * mass(cand),
            None => return true,
        }
    } else {
        let target = top_p.unwrap_or(1.0) * sum;
        if mass(cand) < target && !last {
            return false;
        }
        if cand.len() > SORT_MAX {
            // A wide nucleus (near-uniform logits): selected, not sorted.
            match nucleus_select(cand, target) {
                Some(n) => cand.truncate(n),
                None if last => {}
                None => return false,
            }
            return true;
        }
        cand.sort_unstable_by(by_p_desc);
        target
    };
    match prefix_reaching(cand, target) {
        Some(n) => {
            cand.truncate(n);
            true
        }
        // Rounding kept the whole set's sorted mass under the target: keep it.
        None => last || top_k.is_some(),
    }
}

/// Candidates up to which top-p sorts them; above, `nucleus_select`.
const SORT_MAX: usize = 2048;

/// Moves the shortest prefix of `cand` in [`by_p_desc`] order whose mass reaches `target`
/// to its front — in the order a selection leaves, not sorted — and returns its length;
/// `None` when the whole mass is under `target`. Halving selections (`select_nth_unstable`)
/// over the undecided range: O(len), where a sort of a near-uniform distribution's
/// 20,000-token nucleus took ≈ 4 ms a token (benchmarks.md). The masses add in blocks,
/// so the edge may differ from a sorted prefix sum's by rounding.
fn nucleus_select(cand: &mut [(f32, u32)], target: f64) -> Option<usize> {
    // cand[..lo] is in the nucleus with mass `acc`; its edge lies in lo..hi.
    let (mut lo, mut hi, mut acc) = (0usize, cand.len(), 0.0f64);
    while hi - lo > 64 {
        let mid = lo + (hi - lo) / 2;
        cand[lo..hi].select_nth_unstable_by(mid - lo, by_p_desc);
        let upper = mass(&cand[lo..=mid]);
        if acc + upper >= target {
            hi = mid + 1;
        } else {
            acc += upper;
            lo = mid + 1;
        }
    }
    cand[lo..hi].sort_unstable_by(by_p_desc);
    for (i, &(p, _)) in cand[lo..hi].iter().enumerate() {
        acc += f64::from(p);
        if acc >= target {
            return Some(lo + i + 1);
        }
    }
    None
}

/// Tokens per chunk of the walk over the whole vocabulary (`draw_all`).
const WALK: usize = 256;

impl Sampler {
    /// The smallest eligible weight p = exp(l − max): min-p's floor (p_max = 1), else the
    /// smallest f32 above 0 (any token whose weight does not underflow).
    pub(super) fn eligible_floor(&self) -> f32 {
        if self.opts.min_p > 0.0 {
            self.opts.min_p
        } else {
            f32::from_bits(1)
        }
    }

    /// Step 4 of the module docs; `max` is the finite maximum of `logits`.
    pub(super) fn draw(&mut self, logits: &[f32], max: f32) -> u32 {
        let (top_k, top_p, t) = (self.opts.top_k, self.opts.top_p, self.opts.temperature);
        let lo = self.eligible_floor();
        self.prob.resize(logits.len(), 0.0);
        for (p, &l) in self.prob.iter_mut().zip(logits) {
            *p = exp_le0(l - max);
        }
        // The arg-max has p = 1 ≥ lo, so one token is eligible at least.
        let (sum, count) = eligible_mass(&self.prob, lo);
        let top_k = (top_k > 0 && top_k < count).then_some(top_k);
        let top_p = (top_p < 1.0).then_some(f64::from(top_p));
        if top_k.is_none() && top_p.is_none() {
            return self.draw_all(logits, max, lo, t);
        }
        let mut tau = 2f32.powi(-8);
        loop {
            // `last`: this pass holds every eligible token.
            let last = tau <= lo;
            gather(&self.prob, tau.max(lo), &mut self.cand);
            tau /= 16.0;
            if select(&mut self.cand, top_k, top_p, sum, last) {
                break;
            }
        }
        self.walk_candidates(|id| logits[id as usize], max, t)
    }

    /// The draw among `self.cand` (the filters' survivors, as (p, id)): temperature last,
    /// p^(1/T) = exp((l − max) / T) with `logit(id)` = l, renormalised by the draw.
    pub(super) fn walk_candidates(&mut self, logit: impl Fn(u32) -> f32, max: f32, t: f32) -> u32 {
        if t != 1.0 {
            for c in &mut self.cand {
                c.0 = exp_le0((logit(c.1) - max) / t);
            }
        }
        let total = mass(&self.cand);
        let mut r = self.rng.gen::<f64>() * total;
        for &(p, id) in &self.cand {
            r -= f64::from(p);
            if r < 0.0 {
                return id;
            }
        }
        // Rounding left `r` a hair above 0: the last candidate with p > 0.
        self.cand
            .iter()
            .rev()
            .find(|c| c.0 > 0.0)
            .or(self.cand.first())
            .map_or(0, |c| c.1)
    }

    /// A draw from every eligible token (weight ≥ `lo` at temperature 1), in id order:
    /// chunks of [`WALK`] weights summed first, then the walk inside the chunk that holds
    /// the uniform draw.
    fn draw_all(&mut self, logits: &[f32], max: f32, lo: f32, t: f32) -> u32 {
        let w = &mut self.prob;
        for (p, &l) in w.iter_mut().zip(logits) {
            let ok = *p >= lo;
            let tempered = if t != 1.0 { exp_le0((l - max) / t) } else { *p };
            *p = if ok { tempered } else { 0.0 };
        }
        self.chunk_sums.clear();
        self.chunk_sums
            .extend(w.chunks(WALK).map(|c| eligible_mass(c, 0.0).0));
        let total: f64 = self.chunk_sums.iter().sum();
        let mut r = self.rng.gen::<f64>() * total;
        for (ci, &s) in self.chunk_sums.iter().enumerate() {
            if r >= s {
                r -= s;
                continue;
            }
            for (j, &p) in w[ci * WALK..].iter().take(WALK).enumerate() {
                r -= f64::from(p);
                if r < 0.0 {
                    return (ci * WALK + j) as u32;
                }
            }
        }
        // Rounding left `r` a hair above the sum: the last token with a weight.
        w.iter().rposition(|&p| p > 0.0).map_or(0, |i| i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_le0_matches_f64_exp() {
        let mut worst = 0.0f64;
        let mut x = 0.0f32;
        while x > -87.3 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_le0(x));
            worst = worst.max((got - want).abs() / want);
            x -= 0.000_731;
        }
        // Cephes' polynomial is good to ≈ 1 ulp of f32 (6e-8) plus the reduction's
        // rounding: 3e-7 leaves room for neither to be broken (a coefficient off by
        // one digit errs by ≥ 1e-5).
        assert!(worst < 3e-7, "worst relative error {worst:e}");
        assert_eq!(exp_le0(0.0), 1.0);
        assert_eq!(exp_le0(-88.0), 0.0);
        assert_eq!(exp_le0(f32::NEG_INFINITY), 0.0);
    }
}
