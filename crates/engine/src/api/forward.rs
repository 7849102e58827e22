//! The forward pass over a batch of sequences, each feeding tokens into its own state.

use super::{CancelToken, Engine, StateId};
use crate::error::{EngineError, Result};
use crate::gpu::buffer;
use crate::output;

/// Which positions of a sequence produce outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    None,
    Last,
    All,
}

/// One sequence of a forward call.
#[derive(Debug, Clone, Copy)]
pub struct SeqInput<'a> {
    pub state: StateId,
    pub tokens: &'a [u32],
    pub rows: Rows,
}

/// Outputs of a forward call, per sequence, rows in position order.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// `[rows, vocab]` logits per sequence (empty unless asked for).
    pub logits: Vec<Vec<f32>>,
    /// `[rows, C]` hidden states after `ln_out` per sequence (empty unless asked for).
    pub embeddings: Vec<Vec<f32>>,
}

/// What to compute at the output rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub logits: bool,
    pub embeddings: bool,
}

impl Engine {
    /// `[T, vocab]` next-token logits after each of `tokens` (row-major f32), run from a
    /// fresh zero state or from a fork of `from`, which is left as it was; the state used
    /// is freed. What the Python package's `Model.logits` and `rwkv pybench` time.
    ///
    /// Errors: as [`Engine::forward`] ([`EngineError::OutputTooLarge`] when `T × vocab`
    /// f32 exceed [`output::MAX_OUTPUT_BYTES`], before any state is made); an unknown
    /// `from`; no free state slot.
    pub fn logits_all(&mut self, tokens: &[u32], from: Option<StateId>) -> Result<Vec<f32>> {
        let vocab = self.weights.config.vocab_size as u64;
        output::check(
            || format!("logits of {} positions × {vocab}", tokens.len()),
            (tokens.len() as u64).saturating_mul(vocab),
            4,
        )?;
        let st = match from {
            Some(p) => self.fork_state(p)?,
            None => self.new_state()?,
        };
        let seq = SeqInput {
            state: st,
            tokens,
            rows: Rows::All,
        };
        let want = Want {
            logits: true,
            embeddings: false,
        };
        let out = self.forward(&[seq], want, None);
        let freed = self.free_state(st);
        let logits = out?.logits.into_iter().next().unwrap_or_default();
        freed?;
        Ok(logits)
    }

    /// Runs `seqs` through the model, each from and into its state, in chunked passes
    /// that batch sequences together. Returns the wanted outputs per sequence.
    ///
    /// Errors: empty token list, token id ≥ vocab, unknown state, the same state twice,
    /// [`EngineError::OutputTooLarge`] when the wanted rows × (vocab, C) f32 exceed
    /// [`output::MAX_OUTPUT_BYTES`] (checked before any pass runs),
    /// [`EngineError::Cancelled`] (states then hold the tokens of the passes that ran).
    pub fn forward(
        &mut self,
        seqs: &[SeqInput],
        want: Want,
        cancel: Option<&CancelToken>,
    ) -> Result<ForwardOutput> {
        self.check_inputs(seqs)?;
        let rows: usize = seqs.iter().map(rows_of).sum();
        let mut out = self.reserve_outputs(seqs, want, rows)?;
        self.want_rows(rows);
        self.each_pass(seqs, cancel, |eng, pass, rows| {
            eng.run_pass(pass, rows, want, &mut out)
        })?;
        Ok(out)
    }

    /// Feeds `seqs` in the passes [`Self::fill_pass`] makes, each through `run` (its
    /// sequences and output rows), `cancel` checked before each; then checks that the
    /// device is not lost.
    ///
    /// Errors: [`EngineError::Cancelled`]; what `run` returns; a lost device.
    pub(super) fn each_pass(
        &self,
        seqs: &[SeqInput],
        cancel: Option<&CancelToken>,
        mut run: impl FnMut(&Self, &[PassSeq], &[u32]) -> Result<()>,
    ) -> Result<()> {
        let mut cursor = vec![0usize; seqs.len()];
        loop {
            if cancel.is_some_and(|c| c.is_cancelled()) {
                return Err(EngineError::Cancelled);
            }
            let (pass, rows) = self.fill_pass(seqs, &mut cursor);
            if pass.is_empty() {
                break;
            }
            run(self, &pass, &rows)?;
        }
        self.gpu.check_lost()
    }

    /// Every sequence's state is live and appears once, its tokens are below the
    /// vocabulary size and it has at least one ([`EngineError::InvalidInput`] otherwise).
    pub(crate) fn check_inputs(&self, seqs: &[SeqInput]) -> Result<()> {
        let vocab = self.weights.config.vocab_size;
        for (i, s) in seqs.iter().enumerate() {
            self.check(s.state)?;
            if s.tokens.is_empty() {
                return Err(EngineError::invalid(format!("sequence {i} has no tokens")));
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(EngineError::invalid(format!(
                    "token id {bad} is not below the vocabulary size {vocab}"
                )));
            }
            if seqs[..i].iter().any(|o| o.state == s.state) {
                return Err(EngineError::invalid(format!(
                    "state {} appears twice in one call",
                    s.state.0
                )));
            }
        }
        Ok(())
    }

    /// The call's outputs, empty and reserved per sequence, once their total (`rows`
    /// rows of logits and / or embeddings) was checked against
    /// [`output::MAX_OUTPUT_BYTES`] ([`EngineError::OutputTooLarge`] otherwise).
    fn reserve_outputs(&self, seqs: &[SeqInput], want: Want, rows: usize) -> Result<ForwardOutput> {
        let vocab = self.weights.config.vocab_size;
        let c = self.weights.config.n_embd;
        let per_row = (if want.logits { vocab } else { 0 }) + (if want.embeddings { c } else { 0 });
        output::check(
            || {
                format!(
                    "{}{}{} of {rows} rows in {} sequences",
                    if want.logits {
                        format!("logits (× {vocab})")
                    } else {
                        String::new()
                    },
                    if want.logits && want.embeddings {
                        " and "
                    } else {
                        ""
                    },
                    if want.embeddings {
                        format!("embeddings (× {c})")
                    } else {
                        String::new()
                    },
                    seqs.len()
                )
            },
            (rows as u64).saturating_mul(per_row as u64),
            4,
        )?;
        let mut out = ForwardOutput::default();
        for s in seqs {
            let n = rows_of(s);
            let n_logits = if want.logits { n * vocab } else { 0 };
            let n_emb = if want.embeddings { n * c } else { 0 };
            out.logits
                .push(output::vec(|| format!("logits of {n} rows"), n_logits)?);
            out.embeddings
                .push(output::vec(|| format!("embeddings of {n} rows"), n_emb)?);
        }
        Ok(out)
    }

    /// One pass's sequences — (index, slot, tokens), in order, as many tokens as the
    /// graph's capacity allows from each one's `cursor` (advanced) — and the token
    /// positions of its output rows.
    fn fill_pass<'s>(
        &self,
        seqs: &'s [SeqInput],
        cursor: &mut [usize],
    ) -> (Vec<PassSeq<'s>>, Vec<u32>) {
        let (t_cap, r_cap) = (self.graph.t_cap, self.graph.r_cap);
        let mut pass: Vec<PassSeq> = Vec::new();
        let mut rows: Vec<u32> = Vec::new();
        let (mut t, mut r) = (0usize, 0usize);
        for (i, s) in seqs.iter().enumerate() {
            let left = s.tokens.len() - cursor[i];
            if left == 0 || pass.len() == self.max_batch || t == t_cap {
                continue;
            }
            let mut n = left.min(t_cap - t);
            if s.rows == Rows::All {
                n = n.min(r_cap - r);
                if n == 0 {
                    continue;
                }
            }
            if s.rows == Rows::Last && n == left && r == r_cap {
                n -= 1; // leave the last token (and its row) to the next pass
                if n == 0 {
                    continue;
                }
            }
            let toks = &s.tokens[cursor[i]..cursor[i] + n];
            match s.rows {
                Rows::All => rows.extend((t..t + n).map(|x| x as u32)),
                Rows::Last if n == left => rows.push((t + n - 1) as u32),
                _ => {}
            }
            pass.push((i, s.state.0, toks));
            cursor[i] += n;
            t += n;
            r = rows.len();
        }
        (pass, rows)
    }

    /// Runs one pass (`fill_pass`) and appends its logits / embeddings rows to each
    /// sequence's outputs in `out`.
    fn run_pass(
        &self,
        pass: &[PassSeq],
        rows: &[u32],
        want: Want,
        out: &mut ForwardOutput,
    ) -> Result<()> {
        let vocab = self.weights.config.vocab_size;
        let c = self.weights.config.n_embd;
        let r_cap = self.graph.r_cap;
        let run_head = want.logits && !rows.is_empty();
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        let seq_list: Vec<(u32, &[u32])> = pass.iter().map(|p| (p.1, p.2)).collect();
        self.graph
            .encode(&self.gpu, &mut enc, &seq_list, rows, run_head, false)?;
        // Results go to the graph's readback buffer in the same submission: logits
        // first, embeddings after them.
        let n_logits = if run_head { rows.len() * vocab } else { 0 };
        let n_emb = if want.embeddings { rows.len() * c } else { 0 };
        // Embeddings start 8-byte aligned (a mapping's offset must be).
        let emb_at_f = (r_cap * vocab).next_multiple_of(2);
        let emb_at = emb_at_f as u64 * 4;
        if n_logits > 0 {
            enc.copy_buffer_to_buffer(
                &self.graph.logits,
                0,
                &self.graph.readback,
                0,
                n_logits as u64 * 4,
            );
        }
        if n_emb > 0 {
            enc.copy_buffer_to_buffer(
                &self.graph.act,
                self.graph.regions.head_norm as u64 * 4,
                &self.graph.readback,
                emb_at,
                n_emb as u64 * 4,
            );
        }
        self.gpu.queue.submit([enc.finish()]);
        if rows.is_empty() {
            return Ok(());
        }
        // One mapping: the logits, up to the embeddings' end when both are wanted.
        let (from, len) = match (n_logits > 0, n_emb > 0) {
            (true, true) => (0, emb_at_f + n_emb),
            (true, false) => (0, n_logits),
            (false, _) => (emb_at_f, n_emb),
        };
        // At most one pass's rows (the graph's r_cap), not the whole call's.
        let mut host = output::vec(|| format!("one pass's {len} output values"), len)?;
        host.resize(len, 0.0);
        buffer::read_staged(
            &self.gpu,
            &self.graph.readback,
            from as u64 * 4,
            bytemuck::cast_slice_mut(&mut host),
        )?;
        let logits = &host[..n_logits];
        let emb: &[f32] = &host[host.len() - n_emb..];
        // Hand rows back to their sequences, in order.
        let mut at = 0usize;
        for (&(i, _, _), &n_rows) in pass.iter().zip(&rows_per_seq(pass, rows)) {
            if run_head {
                out.logits[i].extend_from_slice(&logits[at * vocab..(at + n_rows) * vocab]);
            }
            if want.embeddings {
                out.embeddings[i].extend_from_slice(&emb[at * c..(at + n_rows) * c]);
            }
            at += n_rows;
        }
        Ok(())
    }

    /// The commands of one decode step (see [`Graph::decode_dims`]) with its logits copied
    /// to the readback buffer.
    pub(super) fn record_decode(&self) -> Vec<wgpu::CommandBuffer> {
        let dims = self.graph.decode_dims();
        let (mut out, k) = self.record_opening(&dims);
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        self.graph.record_from(&mut enc, &dims, k, true, false);
        let bytes = self.weights.config.vocab_size as u64 * 4;
        enc.copy_buffer_to_buffer(&self.graph.logits, 0, &self.graph.readback, 0, bytes);
        out.push(enc.finish());
        out
    }

    /// [`Self::record_decode`] for a draw prepared on the GPU: the step, its row's
    /// adjustments and draw candidates, and those (not the logits) copied for reading back
    /// (`ops::candidates::row_words()` u32 at the read-back buffer's start).
    pub(super) fn record_decode_draw(&self) -> Vec<wgpu::CommandBuffer> {
        let dims = self.graph.decode_dims();
        let (mut out, k) = self.record_opening(&dims);
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        self.graph.record_draw_from(&mut enc, &dims, k);
        let bytes = crate::ops::candidates::row_words() as u64 * 4;
        enc.copy_buffer_to_buffer(&self.graph.cand_out, 0, &self.graph.readback, 0, bytes);
        out.push(enc.finish());
        out
    }

    /// A decode step's opening as a command buffer of its own where
    /// [`crate::gpu::Tuning::split_submit`] asks for one (its first nodes, submitted ahead
    /// of the rest so that the GPU starts while the host submits the rest), and how many
    /// body nodes it holds.
    fn record_opening(&self, dims: &crate::ops::Dims) -> (Vec<wgpu::CommandBuffer>, usize) {
        let k = self.gpu.tuning.split_submit as usize;
        if k == 0 {
            return (Vec::new(), 0);
        }
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        self.graph.record_opening(&mut enc, dims, k);
        (vec![enc.finish()], k)
    }
}

/// How many of a pass's output `rows` (token indices into the pass) fall in each of its
/// sequences, in order.
pub(super) fn rows_per_seq(pass: &[PassSeq], rows: &[u32]) -> Vec<usize> {
    let mut tok_at = 0usize;
    pass.iter()
        .map(|&(_, _, toks)| {
            let r = tok_at..tok_at + toks.len();
            tok_at += toks.len();
            rows.iter().filter(|&&x| r.contains(&(x as usize))).count()
        })
        .collect()
}

/// Output rows a pass would take for `s`: every token of a `Rows::All` sequence, one for
/// `Rows::Last`, none for `Rows::None`.
pub(super) fn rows_of(s: &SeqInput) -> usize {
    match s.rows {
        Rows::All => s.tokens.len(),
        Rows::Last => 1,
        Rows::None => 0,
    }
}

/// One sequence's part of a pass: (its index in the call, its state's slot, its tokens).
pub(super) type PassSeq<'s> = (usize, u32, &'s [u32]);
