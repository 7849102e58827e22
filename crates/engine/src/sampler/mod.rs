//! Seeded next-token sampling from logits: greedy, temperature, top-k, top-p (nucleus),
//! min-p, RWKV-style presence / frequency penalties with decaying occurrence counts, a
//! repetition penalty, banned tokens, stop tokens, and a [`StopMatcher`] for stop strings.
//!
//! Order of operations per token (as BlinkDL's `rwkv` `PIPELINE` and llama.cpp's default
//! chain: penalties first, temperature last):
//! 1. banned tokens → −∞; NaN logits → −∞ (see "Non-finite logits" below);
//! 2. penalties on every token seen since the last [`Sampler::reset`]:
//!    `logit[t] -= presence + occurrence[t] * frequency` (ChatRWKV), then the repetition
//!    penalty (CTRL / llama.cpp: positive logits divided by it, negative multiplied);
//! 3. greedy (`temperature == 0` or `top_k == 1`): the arg-max, lowest id on ties;
//! 4. otherwise probabilities `p = softmax(logit)` at temperature 1, then min-p
//!    (`p < min_p · p_max` dropped), top-k, top-p (smallest set of most probable tokens whose
//!    mass reaches `top_p`), then temperature (`p^(1/T)`, renormalised), and one draw.
//!
//! Cost is O(vocab) per token in passes the compiler vectorises; top-k and top-p sort only
//! the tokens above a probability floor that holds the k best / the nucleus (`draw.rs`),
//! never the vocabulary.
//!
//! After a token is chosen, [`Sampler::accept`] decays every occurrence count
//! (`occurrence[t] *= penalty_decay`) and adds 1 to the chosen token's (ChatRWKV).
//!
//! **Non-finite logits.** NaN is treated as −∞ (that token is never drawn); +∞ beats every
//! finite logit (the lowest such id is returned). If no token is drawable (every logit NaN
//! or −∞, or an empty slice), [`Sampler::try_sample`] returns
//! [`EngineError::InvalidInput`] and [`Sampler::sample`] returns the first stop token
//! (or 0, the World tokenizer's end of text) so that a generation loop ends. Never a panic.

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

mod draw;
mod gpu;
mod stop;
#[cfg(test)]
mod tests;

pub use gpu::{row_options, row_words, CandRow, GpuDraw, CAP};
pub use stop::{StopMatcher, StopStep};

/// Sampling parameters. `Default` is RWKV's usual chat setting (ChatRWKV's
/// `API_DEMO_CHAT.py` of the RWKV-6/7 era; older demos and RWKV Runner use presence 0,
/// frequency 1): temperature 1.0, top-p 0.3, presence 0.5, frequency 0.5, decay 0.996; top-k, min-p and the repetition penalty off; stop on token 0
/// (World `END_OF_TEXT`) and on `"\n\nUser:"` (the chat template's next turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerOptions {
    /// Softmax temperature; 0 = greedy. Range [0, 100].
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// Keep only the `top_k` most probable tokens; 0 = off, 1 = greedy.
    pub top_k: usize,
    /// Drop tokens with probability below `min_p × p_max`; 0 = off. Range [0, 1].
    pub min_p: f32,
    /// Subtracted once from the logit of every token seen (ChatRWKV `alpha_presence`).
    pub presence_penalty: f32,
    /// Subtracted `occurrence[t]` times (ChatRWKV `alpha_frequency`).
    pub frequency_penalty: f32,
    /// Occurrence counts are multiplied by this after every token (ChatRWKV
    /// `penalty_decay`). Range [0, 1].
    pub penalty_decay: f32,
    /// CTRL-style repetition penalty on seen tokens; 1 = off. Range [1, 10].
    pub repetition_penalty: f32,
    /// RNG seed; `None` seeds from the OS. The same seed, options and logits give the same
    /// tokens (rand 0.8 `StdRng`, ChaCha12).
    pub seed: Option<u64>,
    /// Tokens that end generation ([`Sampler::is_stop`]); they can still be sampled.
    pub stop_tokens: Vec<u32>,
    /// Strings that end generation (see [`StopMatcher`]).
    pub stop_strings: Vec<String>,
    /// Tokens never sampled.
    pub banned_tokens: Vec<u32>,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            temperature: 1.0,
            top_p: 0.3,
            top_k: 0,
            min_p: 0.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.5,
            penalty_decay: 0.996,
            repetition_penalty: 1.0,
            seed: None,
            stop_tokens: vec![0],
            stop_strings: vec!["\n\nUser:".to_string()],
            banned_tokens: Vec::new(),
        }
    }
}

impl SamplerOptions {
    /// Greedy decoding, no penalties (deterministic; for tests and evaluation).
    pub fn greedy() -> Self {
        SamplerOptions {
            temperature: 0.0,
            top_p: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: Some(0),
            ..Default::default()
        }
    }

    /// Checks every range documented on the fields.
    ///
    /// Errors: [`EngineError::InvalidInput`] naming the field and its value.
    pub fn validate(&self) -> Result<()> {
        let check = |name: &str, v: f32, lo: f32, hi: f32| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(EngineError::invalid(format!(
                    "sampler: {name} = {v}, expected {lo}..={hi}"
                )))
            }
        };
        check("temperature", self.temperature, 0.0, 100.0)?;
        check("top_p", self.top_p, 0.0, 1.0)?;
        if self.top_p == 0.0 {
            return Err(EngineError::invalid(
                "sampler: top_p = 0, expected (0, 1] (use temperature 0 for greedy)",
            ));
        }
        check("min_p", self.min_p, 0.0, 1.0)?;
        check("presence_penalty", self.presence_penalty, -100.0, 100.0)?;
        check("frequency_penalty", self.frequency_penalty, -100.0, 100.0)?;
        check("penalty_decay", self.penalty_decay, 0.0, 1.0)?;
        check("repetition_penalty", self.repetition_penalty, 1.0, 10.0)?;
        Ok(())
    }
}

/// Draws tokens from logits with [`SamplerOptions`]; holds the RNG and occurrence counts of
/// one sequence.
#[derive(Debug, Clone)]
pub struct Sampler {
    opts: SamplerOptions,
    vocab: usize,
    rng: StdRng,
    /// Decaying count per token id `[vocab]`.
    occurrence: Vec<f32>,
    /// Ids with an occurrence entry (ChatRWKV's dict keys), in first-seen order.
    seen: Vec<u32>,
    /// `(probability, id)` candidates of top-k / top-p, reused between calls.
    cand: Vec<(f32, u32)>,
    /// `[vocab]` probabilities (then weights) of the draw, reused.
    prob: Vec<f32>,
    /// Sums of the weights' chunks in a draw from the whole vocabulary, reused.
    chunk_sums: Vec<f64>,
    /// The GPU's candidates as (id, logit) sorted by id, for a tempered draw among them
    /// (`draw_from_candidates`), reused.
    by_id: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler for a vocabulary of `vocab` tokens.
    ///
    /// Errors: [`EngineError::InvalidInput`] for out-of-range options or `vocab == 0`.
    pub fn new(opts: SamplerOptions, vocab: usize) -> Result<Self> {
        opts.validate()?;
        if vocab == 0 || u32::try_from(vocab).is_err() {
            return Err(EngineError::invalid(format!("sampler: vocab = {vocab}")));
        }
        let rng = match opts.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        Ok(Sampler {
            opts,
            vocab,
            rng,
            occurrence: vec![0.0; vocab],
            seen: Vec::new(),
            cand: Vec::new(),
            prob: Vec::with_capacity(vocab),
            chunk_sums: Vec::new(),
            by_id: Vec::new(),
        })
    }

    pub fn options(&self) -> &SamplerOptions {
        &self.opts
    }

    /// Forgets occurrence counts (a new reply); the RNG stream continues.
    pub fn reset(&mut self) {
        for &t in &self.seen {
            self.occurrence[t as usize] = 0.0;
        }
        self.seen.clear();
    }

    /// For a greedy sampler (temperature 0 or top-k 1) without a repetition penalty: the
    /// (token, delta) pairs such that its next draw is the argmax of the logits after
    /// `logit[token] −= delta` — +inf for each banned token, `presence + occurrence ·
    /// frequency` (the same f32 expression [`Self::sample`] subtracts) for each token
    /// seen and not banned, zero deltas left out; one pair a token. A NaN is never the
    /// argmax, the lowest index wins ties. `None` for any other sampler (a repetition
    /// penalty divides). Such a draw may come from the GPU (`Engine::forward_greedy`).
    pub fn greedy_adjustments(&self) -> Option<Vec<(u32, f32)>> {
        if !self.is_greedy() {
            return None;
        }
        self.adjustments()
    }

    /// Whether `token` is one of the stop tokens.
    pub fn is_stop(&self, token: u32) -> bool {
        self.opts.stop_tokens.contains(&token)
    }

    /// A matcher for this sampler's stop strings.
    pub fn stop_matcher(&self) -> StopMatcher {
        StopMatcher::new(self.opts.stop_strings.clone())
    }

    /// Records that `token` was emitted: every occurrence count decays by `penalty_decay`,
    /// then `token`'s count grows by 1. Ids ≥ vocab are ignored.
    pub fn accept(&mut self, token: u32) {
        self.accept_weighted(token, 1.0);
    }

    /// [`Self::accept`] adding `weight` instead of 1. ChatRWKV adds 0 for tokens whose text
    /// is a space, tab or digit (they still get the presence penalty, not the frequency
    /// one); the caller, who has the decoded text, decides.
    pub fn accept_weighted(&mut self, token: u32, weight: f32) {
        let decay = self.opts.penalty_decay;
        for &t in &self.seen {
            self.occurrence[t as usize] *= decay;
        }
        if let Some(o) = self.occurrence.get_mut(token as usize) {
            if !self.seen.contains(&token) {
                self.seen.push(token);
            }
            *o += weight;
        }
    }

    /// Current (decayed) occurrence count of `token`.
    pub fn occurrence(&self, token: u32) -> f32 {
        self.occurrence.get(token as usize).copied().unwrap_or(0.0)
    }

    /// Draws the next token from `logits` (`[vocab]`, f32, modified in place by bans and
    /// penalties). Does not call [`Self::accept`]. See the module docs for non-finite input:
    /// when nothing is drawable, returns the first stop token or 0.
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        match self.try_sample(logits) {
            Ok(t) => t,
            Err(_) => self.opts.stop_tokens.first().copied().unwrap_or(0),
        }
    }

    /// As [`Self::sample`], but reports bad input.
    ///
    /// Errors: [`EngineError::InvalidInput`] when `logits.len() != vocab` or no token has a
    /// logit above −∞ after bans (all NaN / −∞).
    pub fn try_sample(&mut self, logits: &mut [f32]) -> Result<u32> {
        if logits.len() != self.vocab {
            return Err(EngineError::invalid(format!(
                "sampler: {} logits for a vocabulary of {}",
                logits.len(),
                self.vocab
            )));
        }
        self.apply_bans_and_penalties(logits);
        self.draw_prepared(logits)
    }

    /// Steps 3–4 of the module docs on logits after steps 1–2.
    fn draw_prepared(&mut self, logits: &[f32]) -> Result<u32> {
        let (best, max) = argmax(logits);
        if max == f32::NEG_INFINITY {
            return Err(EngineError::invalid(
                "sampler: no finite logit (all NaN or -inf)",
            ));
        }
        if max == f32::INFINITY || self.is_greedy() {
            return Ok(best);
        }
        Ok(self.draw(logits, max))
    }

    fn apply_bans_and_penalties(&self, logits: &mut [f32]) {
        for l in logits.iter_mut() {
            if l.is_nan() {
                *l = f32::NEG_INFINITY;
            }
        }
        for &t in &self.opts.banned_tokens {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        let (pres, freq, rep) = (
            self.opts.presence_penalty,
            self.opts.frequency_penalty,
            self.opts.repetition_penalty,
        );
        for &t in &self.seen {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= pres + self.occurrence[t as usize] * freq;
                if rep != 1.0 {
                    *l = if *l > 0.0 { *l / rep } else { *l * rep };
                }
            }
        }
    }
}

/// Index and value of the largest logit (lowest index on ties); NaN never wins.
/// `(0, -inf)` when nothing is above −∞. (One scalar pass: an eight-lane maximum and a
/// second pass for its index measured slower, 42–57 against 31 µs on 65,536 logits.)
fn argmax(logits: &[f32]) -> (u32, f32) {
    let mut best = 0u32;
    let mut max = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            max = l;
            best = i as u32;
        }
    }
    (best, max)
}
