//! The token loop under [`Engine::generate_with`] and [`Engine::generate_text`]: the
//! prompt's prefill, then one decode step a token, the next step's commands recorded while
//! the GPU runs the current one.
//!
//! With the built-in sampler ([`Drawer::Sampler`]) a step also prepares its draw on the GPU
//! where the sampler allows (`Sampler::gpu_draw`: bans and penalties subtracted there, then
//! `ops::candidates`), so that it reads back ≈ 8 KB instead of the row's logits and the
//! host draws among a few candidates instead of scanning the vocabulary — the part of a
//! chat token the GPU otherwise waits for (benchmarks.md, "what a chat token costs beyond
//! the decode step"). Where the candidates do not decide the draw, the same step's
//! adjusted logits are read back and drawn from.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::{CancelToken, Engine, Rows, SeqInput, StateId, Want};
use crate::error::{EngineError, Result};
use crate::gpu::buffer;
use crate::gpu::pacing::Pacer;
use crate::ops::argmax::ADJUST_PER_ROW;
use crate::ops::candidates::{self, CandRow};
use crate::sampler::Sampler;

/// Per-call timing of [`Engine::generate`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Prefill of the prompt up to the first sampled token, ms.
    pub ttft_ms: f64,
    pub prefill_ms: f64,
    /// The decode steps after the first token: each step's submission, GPU pass and
    /// readback (its logits, or its draw's candidates), ms. The draws between them
    /// (`sample`, the host's part of a GPU-prepared draw, `on_token`) are not counted, as
    /// llama-bench's tg counts no sampling; time the call for the wall time a user sees.
    pub decode_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// Of `decode_ms`, CPU time spent recording and submitting the steps' commands (the
    /// next step is recorded while the GPU runs the current one).
    pub decode_record_ms: f64,
    /// Of `decode_ms`, CPU time writing the steps' token metadata (and draw adjustments),
    /// ms: the GPU idles through it.
    pub decode_write_ms: f64,
    /// Of `decode_ms`, CPU time submitting the steps' recorded commands, ms: the GPU
    /// idles through it too (with a step's opening submitted on its own,
    /// `RWKV_SPLIT_SUBMIT`, that submission; the rest's, which the GPU overlaps, is counted
    /// in `decode_record_ms`).
    pub decode_submit_ms: f64,
    /// Of `decode_ms`, time waiting for the steps' results and copying them to the host,
    /// ms (the GPU's pass, then the wake-up, the mapping and the copy).
    pub decode_read_ms: f64,
    /// Draws of the built-in sampler decided by candidates prepared on the GPU
    /// ([`Engine::generate_sampled`]); the others read the logits back.
    pub gpu_draws: usize,
    /// With a constraint: compiling it (before the prompt is fed), ms.
    pub constraint_compile_ms: f64,
    /// With a constraint: CPU time computing allowed-token masks, ms (all but the first
    /// run while the GPU computes the step's logits), and how many masks.
    pub constraint_mask_ms: f64,
    pub constraint_masks: usize,
    /// Why generation stopped.
    pub stop: StopReason,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    #[default]
    MaxTokens,
    StopToken,
    StopString,
    Cancelled,
    Callback,
}

/// Who draws the tokens.
pub(super) enum Drawer<'a> {
    /// A caller's draw from the whole logits.
    Logits(&'a mut dyn FnMut(&mut [f32]) -> Result<u32>),
    /// The built-in sampler, each token accepted (its penalty counts) once drawn.
    Sampler(&'a mut Sampler),
}

/// What the last submitted step left in the read-back buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Left {
    Logits,
    Candidates,
}

impl Engine {
    /// See [`Engine::generate_with`]; `draw` is the caller's closure or the built-in
    /// sampler.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode_loop(
        &mut self,
        state: StateId,
        prompt: &[u32],
        max_tokens: usize,
        mut draw: Drawer,
        cancel: &CancelToken,
        on_token: &mut dyn FnMut(u32) -> bool,
        after_submit: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<GenerateStats> {
        let t0 = Instant::now();
        let mut stats = GenerateStats {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        let seq = SeqInput {
            state,
            tokens: prompt,
            rows: Rows::Last,
        };
        let want = Want {
            logits: true,
            embeddings: false,
        };
        let mut logits = match self.forward(&[seq], want, Some(cancel)) {
            Err(EngineError::Cancelled) => {
                stats.stop = StopReason::Cancelled;
                return Ok(stats);
            }
            r => r?.logits.swap_remove(0),
        };
        stats.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        // Decode steps: the commands of step i + 1 are recorded while the GPU runs step
        // i (they are the same every step; only the token metadata and the draw's
        // adjustments, written just before each submission, change), and what the host
        // reads comes back through the kept read-back buffer in the same submission.
        let vocab = self.weights.config.vocab_size;
        let row_bytes = candidates::row_words() as u64 * 4;
        let gpu_ok = self.gpu.tuning.gpu_argmax && self.graph.readback.size() >= row_bytes;
        let mut words: Vec<u32> = Vec::new();
        let mut left = Left::Logits;
        let mut next_cmd: Option<(Left, Vec<wgpu::CommandBuffer>)> = None;
        let mut decode_time = Duration::ZERO;
        let mut record_time = Duration::ZERO;
        let (mut write_time, mut submit_time) = (Duration::ZERO, Duration::ZERO);
        let mut read_time = Duration::ZERO;
        // Sleeps through most of each step's wait before polling for its result.
        let mut pacer = Pacer::default();
        for i in 0..max_tokens {
            let (tok, on_gpu) = self.draw_token(&mut draw, &mut logits, &words, left)?;
            stats.gpu_draws += usize::from(on_gpu);
            if i == 0 {
                stats.ttft_ms = t0.elapsed().as_secs_f64() * 1e3;
            }
            stats.generated_tokens += 1;
            if !on_token(tok) {
                stats.stop = StopReason::Callback;
                break;
            }
            if i + 1 == max_tokens {
                break;
            }
            if cancel.is_cancelled() {
                stats.stop = StopReason::Cancelled;
                break;
            }
            let td = Instant::now();
            if tok as usize >= vocab {
                return Err(EngineError::invalid(format!(
                    "sampled token id {tok} is not below the vocabulary size {vocab}"
                )));
            }
            self.graph
                .write_meta(&self.gpu, &[(state.0, &[tok])], &[0])?;
            left = match &draw {
                Drawer::Sampler(s) if gpu_ok && self.write_draw(s) => Left::Candidates,
                _ => Left::Logits,
            };
            let cmd = match next_cmd.take() {
                Some((k, c)) if k == left => c,
                _ => self.record_step(left),
            };
            let ts = Instant::now();
            write_time += ts - td;
            // The step's opening (where split off) first: the GPU starts on it while the
            // host submits the rest.
            let mut tr = ts;
            for (j, c) in cmd.into_iter().enumerate() {
                self.gpu.queue.submit([c]);
                if j == 0 {
                    tr = Instant::now();
                }
            }
            submit_time += tr - ts;
            next_cmd = Some((left, self.record_step(left)));
            record_time += tr.elapsed();
            after_submit(tok)?;
            let tw = Instant::now();
            let out: &mut [u8] = match left {
                Left::Logits => {
                    logits.resize(vocab, 0.0);
                    bytemuck::cast_slice_mut(&mut logits)
                }
                Left::Candidates => {
                    words.resize(candidates::row_words(), 0);
                    bytemuck::cast_slice_mut(&mut words)
                }
            };
            let sleep = match self.gpu.tuning.pace {
                true => pacer.sleep(),
                false => Duration::ZERO,
            };
            let rb = &self.graph.readback;
            let overslept = buffer::read_staged_paced(&self.gpu, rb, 0, out, sleep)?;
            pacer.record(tw.elapsed(), overslept);
            read_time += tw.elapsed();
            decode_time += td.elapsed();
        }
        stats.decode_record_ms = record_time.as_secs_f64() * 1e3;
        stats.decode_write_ms = write_time.as_secs_f64() * 1e3;
        stats.decode_submit_ms = submit_time.as_secs_f64() * 1e3;
        stats.decode_read_ms = read_time.as_secs_f64() * 1e3;
        stats.decode_ms = decode_time.as_secs_f64() * 1e3;
        stats.prefill_tok_s = prompt.len() as f64 / (stats.prefill_ms / 1e3).max(1e-9);
        let decoded = stats.generated_tokens.saturating_sub(1);
        if decoded > 0 {
            stats.decode_tok_s = decoded as f64 / (stats.decode_ms / 1e3).max(1e-9);
        }
        Ok(stats)
    }

    fn record_step(&self, left: Left) -> Vec<wgpu::CommandBuffer> {
        match left {
            Left::Logits => self.record_decode(),
            Left::Candidates => self.record_decode_draw(),
        }
    }

    /// Writes the next step's draw adjustments and options for `s`, if it takes a draw
    /// prepared on the GPU and its adjustments fit one row's room; whether it does.
    fn write_draw(&self, s: &Sampler) -> bool {
        let Some(plan) = s.gpu_draw() else {
            return false;
        };
        if plan.adjustments.len() > ADJUST_PER_ROW {
            return false;
        }
        // Row 0 of the pass: a logit index is the token id.
        let mut adj = Vec::with_capacity(1 + 2 * plan.adjustments.len());
        adj.push(plan.adjustments.len() as u32);
        for &(t, delta) in &plan.adjustments {
            adj.extend([t, delta.to_bits()]);
        }
        let q = &self.gpu.queue;
        q.write_buffer(&self.graph.adjust_buf, 0, bytemuck::cast_slice(&adj));
        q.write_buffer(
            &self.graph.draw_opts,
            0,
            bytemuck::cast_slice(&plan.options),
        );
        true
    }

    /// The next token from what the last step left: the caller's draw from the logits, or
    /// the sampler's from the candidates (from the step's adjusted logits, read back now,
    /// where those do not decide it), and whether the candidates decided it.
    fn draw_token(
        &self,
        draw: &mut Drawer,
        logits: &mut Vec<f32>,
        words: &[u32],
        left: Left,
    ) -> Result<(u32, bool)> {
        let s = match draw {
            Drawer::Logits(f) => return Ok((f(logits)?, false)),
            Drawer::Sampler(s) => s,
        };
        let mut on_gpu = false;
        let t = match left {
            Left::Logits => s.try_sample(logits)?,
            Left::Candidates => match s.draw_from_candidates(&CandRow::parse(words))? {
                Some(t) => {
                    on_gpu = true;
                    t
                }
                None => {
                    let vocab = self.weights.config.vocab_size;
                    let mut enc = self.gpu.device.create_command_encoder(&Default::default());
                    let (g, bytes) = (&self.graph, vocab as u64 * 4);
                    enc.copy_buffer_to_buffer(&g.logits, 0, &g.readback, 0, bytes);
                    self.gpu.queue.submit([enc.finish()]);
                    logits.resize(vocab, 0.0);
                    let out = bytemuck::cast_slice_mut(logits.as_mut_slice());
                    buffer::read_staged(&self.gpu, &g.readback, 0, out)?;
                    s.try_sample_adjusted(logits)?
                }
            },
        };
        s.accept(t);
        Ok((t, on_gpu))
    }
}
