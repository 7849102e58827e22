//! Generation: token by token with a caller's sampler ([`Engine::generate`]), or text
//! with the built-in sampler, stop tokens and stop strings ([`Engine::generate_text`]).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::decode_loop::{Drawer, GenerateStats, StopReason};
use super::{Engine, StateId};
use crate::constraint::{Constraint, ConstraintCompiler, ConstraintSpec};
use crate::error::{EngineError, Result};
use crate::sampler::{Sampler, SamplerOptions};
use crate::tokenizer::END_OF_TEXT;

/// A cancel flag shared between the caller and a running job; checked between passes
/// and tokens.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    pub fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl Engine {
    /// Feeds `prompt` into `state` and samples up to `max_tokens` tokens with `sample`
    /// (given the last logits, returns the next token), calling `on_token(token)` for
    /// each; `on_token` returns `false` to stop. Stops at cancellation without losing
    /// anything: the state then holds every token fed so far.
    ///
    /// Errors: as [`Engine::forward`]; an empty prompt.
    pub fn generate(
        &mut self,
        state: StateId,
        prompt: &[u32],
        max_tokens: usize,
        sample: &mut dyn FnMut(&mut [f32]) -> Result<u32>,
        cancel: &CancelToken,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<GenerateStats> {
        self.generate_with(
            state,
            prompt,
            max_tokens,
            sample,
            cancel,
            on_token,
            &mut |_| Ok(()),
        )
    }

    /// [`Self::generate`] with `after_submit(token)`, called once the GPU pass that feeds
    /// `token` is submitted and before its logits are read back: CPU work for the next
    /// token (a constraint's mask) done there runs while the GPU computes. Not called for
    /// the last sampled token (it is never fed).
    ///
    /// Errors: as [`Self::generate`]; what `after_submit` returns (generation stops).
    #[allow(clippy::too_many_arguments)]
    pub fn generate_with(
        &mut self,
        state: StateId,
        prompt: &[u32],
        max_tokens: usize,
        sample: &mut dyn FnMut(&mut [f32]) -> Result<u32>,
        cancel: &CancelToken,
        on_token: &mut dyn FnMut(u32) -> bool,
        after_submit: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<GenerateStats> {
        self.decode_loop(
            state,
            prompt,
            max_tokens,
            Drawer::Logits(sample),
            cancel,
            on_token,
            after_submit,
        )
    }

    /// [`Self::generate`] drawing with `sampler` (each token accepted once drawn): the
    /// draws' O(vocab) part on the GPU where the sampler allows (no repetition penalty;
    /// greedy, top-k or top-p; at most `ops::argmax::ADJUST_PER_ROW` penalised tokens), so a
    /// step reads back its draw's candidates instead of its logits — the tokens those of
    /// [`Sampler::sample`] on the logits but for the eligible mass's last bits
    /// (`sampler/gpu.rs`). `RWKV_GPU_ARGMAX=0` draws on the host.
    ///
    /// Errors: as [`Self::generate`]; a sampler for another vocabulary size.
    pub fn generate_sampled(
        &mut self,
        state: StateId,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
        cancel: &CancelToken,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<GenerateStats> {
        self.decode_loop(
            state,
            prompt,
            max_tokens,
            Drawer::Sampler(sampler),
            cancel,
            on_token,
            &mut |_| Ok(()),
        )
    }
}

/// Options of [`Engine::generate_text`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampler: SamplerOptions,
    /// What the output must match (JSON Schema, regex, grammar); `None`: free text.
    pub constraint: Option<ConstraintSpec>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerOptions::default(),
            constraint: None,
        }
    }
}

/// What [`Engine::generate_text`] streams.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TextEvent {
    /// New text (valid UTF-8, never part of a stop string), with the tokens it came from.
    Text { text: String, tokens: usize },
}

/// Result of [`Engine::generate_text`].
#[derive(Debug, Clone, Serialize)]
pub struct TextOutput {
    pub text: String,
    pub tokens: Vec<u32>,
    pub stats: GenerateStats,
    /// With a constraint: whether `text` is a complete match of it (`false` when
    /// `max_tokens`, a stop string or a cancel cut it). `None` without a constraint.
    pub complete: Option<bool>,
}

impl Engine {
    /// The constraint compiler for this model's vocabulary (built on first use, ≈ 0.1–0.3
    /// s, then shared by every engine with this tokenizer).
    ///
    /// Errors: [`EngineError::Constraint`] when the vocabulary cannot be used.
    pub fn constraint_compiler(&self) -> Result<Arc<ConstraintCompiler>> {
        ConstraintCompiler::shared(&self.tokenizer, self.weights.config.vocab_size)
    }

    /// Encodes `prompt`, feeds it into `state` and generates text with `opts`, streaming
    /// it to `on_text` (return `false` to stop). Stop tokens end generation silently;
    /// stop strings are cut from the output. The state ends holding the prompt and every
    /// emitted token but the last one sampled.
    ///
    /// With `opts.constraint`, the constraint is compiled first (an error then leaves the
    /// state untouched), every token is drawn from the tokens it allows (the mask is
    /// applied before penalties, top-p and temperature), the mask of the next token is
    /// computed while the GPU runs the current step, and generation ends where the
    /// constraint allows nothing but end-of-text. [`TextOutput::complete`] says whether
    /// the text is a complete match.
    ///
    /// Errors: an empty prompt, invalid sampler options, [`EngineError::Constraint`] for a
    /// schema or grammar that cannot be used, anything [`Engine::forward`] reports.
    /// Cancellation is not an error: `stats.stop` says [`StopReason::Cancelled`].
    pub fn generate_text(
        &mut self,
        state: StateId,
        prompt: &str,
        opts: &GenerateOptions,
        cancel: &CancelToken,
        on_text: &mut dyn FnMut(TextEvent) -> bool,
    ) -> Result<TextOutput> {
        opts.sampler.validate()?;
        let ids = self.tokenizer.encode(prompt);
        if ids.is_empty() {
            return Err(EngineError::invalid("the prompt is empty"));
        }
        let constraint = match &opts.constraint {
            Some(spec) => Some(Constraint::compile(&*self.constraint_compiler()?, spec)?),
            None => None,
        };
        let constraint = RefCell::new(constraint);
        let mut sampler = Sampler::new(opts.sampler.clone(), self.weights.config.vocab_size)?;
        let mut stop = sampler.stop_matcher();
        let mut decoder = self.tokenizer.stream_decoder();
        let mut text = String::new();
        let mut tokens = Vec::new();
        let mut reason = None;
        let mut pending_tokens = 0usize;
        let tokenizer = self.tokenizer.clone();
        let mut stats = {
            let mut after_submit = |tok: u32| -> Result<()> {
                match constraint.borrow_mut().as_mut() {
                    // Commit, then the next mask while the GPU computes the next logits.
                    Some(c) => {
                        c.commit(tok)?;
                        c.prepare()
                    }
                    None => Ok(()),
                }
            };
            let constrained = opts.constraint.is_some();
            let mut on_token = |tok: u32| -> bool {
                if opts.sampler.stop_tokens.contains(&tok) || (constrained && tok == END_OF_TEXT) {
                    reason = Some(StopReason::StopToken);
                    return false;
                }
                tokens.push(tok);
                pending_tokens += 1;
                let piece = match decoder.push(tok) {
                    Ok(p) => p.to_string(),
                    Err(_) => {
                        String::from_utf8_lossy(tokenizer.token_bytes(tok).unwrap_or_default())
                            .into_owned()
                    }
                };
                let step = stop.push(&piece);
                if !step.emit.is_empty() {
                    text.push_str(&step.emit);
                    let n = std::mem::take(&mut pending_tokens);
                    if !on_text(TextEvent::Text {
                        text: step.emit,
                        tokens: n,
                    }) {
                        reason = Some(StopReason::Callback);
                        return false;
                    }
                }
                if step.stopped {
                    reason = Some(StopReason::StopString);
                    return false;
                }
                true
            };
            if constrained {
                // Each sampled token is accepted (penalty counts) before the next draw.
                let mut last: Option<u32> = None;
                let mut sample = |logits: &mut [f32]| -> Result<u32> {
                    if let Some(t) = last {
                        sampler.accept(t);
                    }
                    let t = match constraint.borrow_mut().as_mut() {
                        None => sampler.try_sample(logits)?,
                        Some(c) => match c.forced()? {
                            // The structure is closed: end-of-text, whatever the sampler says.
                            Some(END_OF_TEXT) => END_OF_TEXT,
                            _ => {
                                c.apply(logits)?;
                                sampler.try_sample(logits)?
                            }
                        },
                    };
                    last = Some(t);
                    Ok(t)
                };
                self.generate_with(
                    state,
                    &ids,
                    opts.max_tokens,
                    &mut sample,
                    cancel,
                    &mut on_token,
                    &mut after_submit,
                )?
            } else {
                // The built-in sampler alone: its draws prepared on the GPU.
                self.decode_loop(
                    state,
                    &ids,
                    opts.max_tokens,
                    Drawer::Sampler(&mut sampler),
                    cancel,
                    &mut on_token,
                    &mut after_submit,
                )?
            }
        };
        if reason.is_none() || reason == Some(StopReason::Callback) {
            // Flush what the decoder and the stop matcher still hold.
            let mut tail = decoder.flush().to_string();
            if reason.is_none() {
                tail = stop.push(&tail).emit + &stop.finish();
                if !tail.is_empty() {
                    text.push_str(&tail);
                    on_text(TextEvent::Text {
                        text: tail,
                        tokens: pending_tokens,
                    });
                }
            }
        }
        if let Some(r) = reason {
            if stats.stop != StopReason::Cancelled {
                stats.stop = r;
            }
        }
        let complete = constraint
            .into_inner()
            .map(|mut c| constraint_outcome(&mut c, &tokens, &mut stats));
        Ok(TextOutput {
            text,
            tokens,
            stats,
            complete,
        })
    }
}

/// Whether the constrained output `tokens` is a complete match, and the constraint's
/// timings into `stats`. The last emitted token was sampled but never fed, so it is
/// committed here (the others were committed after their GPU submission).
fn constraint_outcome(c: &mut Constraint, tokens: &[u32], stats: &mut GenerateStats) -> bool {
    let (mask, masks) = c.mask_stats();
    stats.constraint_compile_ms = c.compile_time().as_secs_f64() * 1e3;
    stats.constraint_mask_ms = mask.as_secs_f64() * 1e3;
    stats.constraint_masks = masks;
    if matches!(stats.stop, StopReason::StopString | StopReason::Cancelled) {
        return false;
    }
    // Fed tokens = every emitted one but the last, unless generation ended on a stop
    // token (then every emitted token was fed, and the stop token was not emitted).
    let fed = if stats.stop == StopReason::StopToken {
        tokens.len()
    } else {
        tokens.len().saturating_sub(1)
    };
    if fed < tokens.len() && c.commit(tokens[tokens.len() - 1]).is_err() {
        return false;
    }
    c.is_complete()
}
