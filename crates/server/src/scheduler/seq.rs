//! One sequence of the running batch: its state slot, where it is in its prompt, and
//! its sampler, text decoder and stop matcher.

use std::sync::Arc;
use std::time::Instant;

use rwkv_engine::sampler::{Sampler, StopMatcher};
use rwkv_engine::tokenizer::END_OF_TEXT;
use rwkv_engine::{Constraint, StateId, StreamDecoder, Tokenizer};

use super::logprobs::token_logprob;
use super::{Done, Event, Finish, GenJob};
use crate::openai::response::TokenLogprob;

pub(super) struct Seq {
    pub job: GenJob,
    pub state: StateId,
    /// Prompt tokens in the state (the cached ones included).
    pub fed: usize,
    /// Prompt tokens that came from the conversation cache.
    pub cached: usize,
    pub sampler: Sampler,
    /// The reply's constraint (`response_format`, `tools`): its mask is applied before
    /// the sampler, and the next one computed while the GPU runs the next step.
    pub constraint: Option<Box<Constraint>>,
    pub decoder: StreamDecoder,
    pub stop: StopMatcher,
    pub generated: Vec<u32>,
    /// The last sampled token, to be fed by the next step.
    pub next: Option<u32>,
    /// Logits to sample from without a pass (the whole prompt was cached with them).
    pub ready: Option<Arc<[f32]>>,
    pub first_at: Option<Instant>,
    pub finish: Option<Finish>,
}

impl Seq {
    pub fn new(
        mut job: GenJob,
        state: StateId,
        cached: usize,
        sampler: Sampler,
        tok: &Tokenizer,
    ) -> Self {
        let stop = sampler.stop_matcher();
        Seq {
            constraint: job.constraint.take(),
            job,
            state,
            fed: cached,
            cached,
            sampler,
            decoder: tok.stream_decoder(),
            stop,
            generated: Vec::new(),
            next: None,
            ready: None,
            first_at: None,
            finish: None,
        }
    }

    /// Prompt tokens still to feed.
    pub fn prompt_left(&self) -> &[u32] {
        &self.job.prompt[self.fed..]
    }

    /// Whether the client went away.
    pub fn cancelled(&self) -> bool {
        self.job.events.is_closed()
    }

    /// Samples the next token from `logits` (`[vocab]`, modified by penalties), sends it
    /// with the text it releases, and decides whether the sequence is done (sets
    /// `finish`; otherwise `next` holds the token to feed).
    pub fn sample(&mut self, logits: &mut [f32], tok: &Tokenizer) {
        let raw = self.job.params.logprobs.map(|_| logits.to_vec());
        let id = match self.draw(logits) {
            Ok(id) => id,
            // No drawable token (all logits non-finite), or a constraint failure: end
            // here rather than loop.
            Err(e) => {
                log::warn!("sampling failed, ending the reply: {e}");
                self.finish = Some(Finish::Stop);
                return;
            }
        };
        let logprob = match (raw, self.job.params.logprobs) {
            (Some(raw), Some(k)) => Some(token_logprob(tok, &raw, id, k)),
            _ => None,
        };
        self.take(id, logprob);
    }

    /// When this sequence's next draw may be the GPU's argmax of its logits
    /// ([`Self::take_argmax`]): the adjustments (bans, penalties) of its greedy sampler,
    /// without a constraint or log-probabilities; `None` otherwise.
    pub fn greedy_adjustments(&self) -> Option<Vec<(u32, f32)>> {
        if self.constraint.is_some() || self.job.params.logprobs.is_some() {
            return None;
        }
        self.sampler.greedy_adjustments()
    }

    /// [`Self::sample`] for a sequence with [`Self::greedy_adjustments`], from the (token,
    /// logit) the GPU found largest after them: the token the CPU draw would take from the
    /// same logits.
    pub fn take_argmax(&mut self, (id, max): (u32, f32)) {
        if max == f32::NEG_INFINITY {
            log::warn!("sampling failed, ending the reply: no finite logit (all NaN or -inf)");
            self.finish = Some(Finish::Stop);
            return;
        }
        self.take(id, None);
    }

    /// The drawn token `id`: recorded, sent with its text (and `logprob`), and the
    /// sequence's end decided.
    fn take(&mut self, id: u32, logprob: Option<TokenLogprob>) {
        self.sampler.accept(id);
        self.generated.push(id);
        if self.first_at.is_none() {
            self.first_at = Some(Instant::now());
        }
        let closed = match self.constraint.as_mut() {
            // End-of-text under a constraint: the structure is complete (the mask allows
            // it nowhere else), whatever the stop tokens say.
            Some(_) if id == END_OF_TEXT => true,
            Some(c) => {
                if let Err(e) = c.commit(id) {
                    log::warn!("constraint: {e}");
                    self.finish = Some(Finish::Stop);
                    return;
                }
                false
            }
            None => false,
        };
        if closed || self.sampler.is_stop(id) {
            let _ = self.job.events.send(Event::Token {
                id,
                text: String::new(),
                logprob,
            });
            self.finish = Some(Finish::Stop);
            return;
        }
        let text = self
            .decoder
            .push(id)
            .map(str::to_string)
            .unwrap_or_default();
        let step = self.stop.push(&text);
        let _ = self.job.events.send(Event::Token {
            id,
            text: step.emit,
            logprob,
        });
        if step.stopped || self.constraint.as_ref().is_some_and(|c| c.is_stopped()) {
            self.finish = Some(Finish::Stop);
        } else if self.generated.len() >= self.job.params.max_tokens {
            self.finish = Some(Finish::Length);
        } else {
            self.next = Some(id);
        }
    }

    /// The next token: under a constraint, end-of-text where it is the only one allowed,
    /// else a draw from the allowed tokens (masked before penalties and top-p).
    fn draw(&mut self, logits: &mut [f32]) -> rwkv_engine::Result<u32> {
        if let Some(c) = self.constraint.as_mut() {
            if c.forced()? == Some(END_OF_TEXT) {
                return Ok(END_OF_TEXT);
            }
            c.apply(logits)?;
        }
        self.sampler.try_sample(logits)
    }

    /// The tokens the state holds: the prompt and every generated token but the last
    /// (sampled, never fed).
    pub fn state_tokens(&self) -> Vec<u32> {
        let fed_gen = self.generated.len().saturating_sub(1);
        let mut t = Vec::with_capacity(self.job.prompt.len() + fed_gen);
        t.extend_from_slice(&self.job.prompt[..self.fed]);
        if self.fed == self.job.prompt.len() {
            t.extend_from_slice(&self.generated[..fed_gen]);
        }
        t
    }

    /// Sends the end of the generation.
    pub fn done(&mut self) {
        let finish = self.finish.unwrap_or(Finish::Stop);
        let mut tail = String::new();
        if !self.stop.stopped() {
            let flushed = self.decoder.flush().to_string();
            tail.push_str(&self.stop.push(&flushed).emit);
            if !self.stop.stopped() {
                tail.push_str(&self.stop.finish());
            }
        }
        let ttft_s = self
            .first_at
            .map_or(0.0, |t| t.duration_since(self.job.arrived).as_secs_f64());
        let _ = self.job.events.send(Event::Done(Done {
            finish,
            tail,
            prompt_tokens: self.job.prompt.len(),
            cached_tokens: self.cached,
            completion_tokens: self.generated.len(),
            tokens: self.generated.clone(),
            ttft_s,
        }));
    }
}
