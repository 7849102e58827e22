//! Embeddings without the head: B sequences → `[B, C]` f32, the hidden state after
//! `ln_out` (llama.cpp's `t_embd`), in batched, chunked forward passes.

use serde::{Deserialize, Serialize};

use crate::api::{Engine, Rows, SeqInput, StateId, Want};
use crate::error::{EngineError, Result};

/// How a sequence's per-token hidden states become one vector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The last token's hidden state (what the head would see).
    #[default]
    Last,
    /// The mean over the sequence's own tokens (not those of a state it starts from).
    Mean,
}

/// One sequence to embed.
#[derive(Debug, Clone, Copy)]
pub struct EmbedInput<'a> {
    /// Token ids, at least one, each below the vocabulary size.
    pub tokens: &'a [u32],
    /// Start from a fork of this state (left untouched); `None`: the zero state.
    pub from: Option<StateId>,
}

impl<'a> EmbedInput<'a> {
    /// From the zero state.
    pub fn new(tokens: &'a [u32]) -> Self {
        EmbedInput { tokens, from: None }
    }

    /// After the tokens held by `state` (a fork of it; `state` is untouched).
    pub fn after(tokens: &'a [u32], state: StateId) -> Self {
        EmbedInput {
            tokens,
            from: Some(state),
        }
    }
}

/// `[B, C]` embeddings, row-major: row `i` belongs to input `i`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Embeddings {
    /// C (the model's `n_embd`).
    pub dim: usize,
    /// `B × C` f32, row-major.
    pub data: Vec<f32>,
}

impl Embeddings {
    /// B.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Row `i` (`[C]`), if it exists.
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        self.data.get(i * self.dim..(i + 1) * self.dim)
    }

    /// The rows in order.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.dim.max(1))
    }
}

impl Engine {
    /// Sequences that share one [`Engine::forward`] call in [`Engine::embed`]: each needs
    /// a temporary state slot, and all slots live in one binding, so groups stay well
    /// below what the device binds (never fewer than 1, at most 64).
    pub fn embed_group_len(&self) -> usize {
        let state_bytes = (self.state_len() as u64 * 4).max(1);
        let fit = (self.gpu().max_binding() / state_bytes / 2).max(1);
        (fit as usize).clamp(1, 64)
    }

    /// Embeds `inputs`: `[B, C]` hidden states after `ln_out`, pooled by `pooling`; the
    /// head never runs. The inputs run in batched, chunked passes (sequences of
    /// different lengths share passes), [`Engine::embed_group_len`] sequences per
    /// [`Engine::forward`] call, so any B is bounded in GPU memory. Each input starts
    /// from a temporary zero state or fork, freed before returning (also on error).
    ///
    /// Errors: [`EngineError::InvalidInput`] naming the input for an empty token list or
    /// a token id ≥ vocab; [`EngineError::OutputTooLarge`] when `B × C` f32 — or, with
    /// [`Pooling::Mean`], one group's `tokens × C` rows — exceed
    /// [`crate::output::MAX_OUTPUT_BYTES`] (checked before the work);
    /// [`EngineError::State`] for an unknown `from` state; GPU errors.
    pub fn embed(&mut self, inputs: &[EmbedInput], pooling: Pooling) -> Result<Embeddings> {
        let c = self.config().n_embd;
        let vocab = self.config().vocab_size;
        for (i, inp) in inputs.iter().enumerate() {
            if inp.tokens.is_empty() {
                return Err(EngineError::InvalidInput {
                    what: format!("embedding input {i} has no tokens"),
                });
            }
            if let Some(&bad) = inp.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(EngineError::InvalidInput {
                    what: format!(
                        "embedding input {i}: token id {bad} is not below the vocabulary \
                         size {vocab}"
                    ),
                });
            }
        }
        let mut data = crate::output::vec(
            || format!("embeddings of {} inputs × {c}", inputs.len()),
            inputs.len() * c,
        )?;
        for group in inputs.chunks(self.embed_group_len()) {
            let mut temps = Vec::with_capacity(group.len());
            let res = self.embed_group(group, pooling, &mut temps);
            for st in temps {
                // Frees can only fail for unknown ids; these were just made.
                let _ = self.free_state(st);
            }
            data.extend(res?);
        }
        Ok(Embeddings { dim: c, data })
    }

    /// One forward call over `group`; the temporary states go into `temps` as they are
    /// made (the caller frees them).
    fn embed_group(
        &mut self,
        group: &[EmbedInput],
        pooling: Pooling,
        temps: &mut Vec<StateId>,
    ) -> Result<Vec<f32>> {
        let c = self.config().n_embd;
        for inp in group {
            let st = match inp.from {
                Some(parent) => self.fork_state(parent)?,
                None => self.new_state()?,
            };
            temps.push(st);
        }
        let rows = match pooling {
            Pooling::Last => Rows::Last,
            Pooling::Mean => Rows::All,
        };
        let seqs: Vec<SeqInput> = group
            .iter()
            .zip(temps.iter())
            .map(|(inp, &state)| SeqInput {
                state,
                tokens: inp.tokens,
                rows,
            })
            .collect();
        let out = self.forward(
            &seqs,
            Want {
                logits: false,
                embeddings: true,
            },
            None,
        )?;
        let mut data = crate::output::vec(
            || format!("embeddings of {} inputs × {c}", group.len()),
            group.len() * c,
        )?;
        for (i, (e, inp)) in out.embeddings.iter().zip(group).enumerate() {
            let rows_got = e.len() / c.max(1);
            let rows_want = match pooling {
                Pooling::Last => 1,
                Pooling::Mean => inp.tokens.len(),
            };
            if rows_got != rows_want || e.len() % c.max(1) != 0 {
                return Err(EngineError::Op {
                    op: "embed",
                    what: format!(
                        "input {i}: forward returned {} values, expected {rows_want} rows of {c}",
                        e.len()
                    ),
                });
            }
            match pooling {
                Pooling::Last => data.extend_from_slice(e),
                Pooling::Mean => data.extend(mean_rows(e, c)),
            }
        }
        Ok(data)
    }

    /// Tokenizes each text and embeds it from the zero state (see [`Engine::embed`]).
    ///
    /// Errors: a text that encodes to no tokens (named by index); as [`Engine::embed`].
    pub fn embed_texts(&mut self, texts: &[&str], pooling: Pooling) -> Result<Embeddings> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.tokenizer().encode(t)).collect();
        let inputs: Vec<EmbedInput> = ids.iter().map(|t| EmbedInput::new(t)).collect();
        self.embed(&inputs, pooling)
    }
}

/// Column means of `rows` (`[n, c]` row-major), summed in f64 so the mean of a long
/// sequence does not lose the last tokens to rounding.
fn mean_rows(rows: &[f32], c: usize) -> Vec<f32> {
    let mut acc = vec![0f64; c];
    let mut n = 0usize;
    for r in rows.chunks_exact(c.max(1)) {
        for (a, &v) in acc.iter_mut().zip(r) {
            *a += f64::from(v);
        }
        n += 1;
    }
    acc.into_iter()
        .map(|a| (a / n.max(1) as f64) as f32)
        .collect()
}

/// Cosine similarity of `a` and `b`; 0 when either has norm 0 (no direction).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        dot += f64::from(x) * f64::from(y);
        na += f64::from(x) * f64::from(x);
        nb += f64::from(y) * f64::from(y);
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())) as f32
}

/// Euclidean norm, summed in f64.
pub fn norm(a: &[f32]) -> f32 {
    a.iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt() as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_cosine_norm() {
        assert_eq!(mean_rows(&[1.0, 2.0, 3.0, 6.0], 2), vec![2.0, 4.0]);
        assert!((cosine(&[1.0, 0.0], &[0.0, 1.0])).abs() < 1e-7);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        assert!((norm(&[3.0, 4.0]) - 5.0).abs() < 1e-6);
    }
}
