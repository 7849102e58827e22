//! Greedy decode steps of many sequences: each output row's bans and penalties applied
//! and its argmax taken on the GPU, and the logits read back only for the sequences that
//! need them (a server's step of 128 greedy sequences otherwise copies 128 × 256 KB of
//! logits to the host and scans them).

use super::forward::{rows_of, rows_per_seq, PassSeq};
use super::{CancelToken, Engine, SeqInput};
use crate::error::{EngineError, Result};
use crate::gpu::buffer;
use crate::ops::argmax::ADJUST_PER_ROW;
use crate::output;

/// Outputs of [`Engine::forward_greedy`], per sequence, rows in position order.
#[derive(Debug, Clone, Default)]
pub struct GreedyOutput {
    /// (token id, its logit) of each output row: the lowest index of the row's largest
    /// logit after the sequence's adjustments, a NaN never chosen — the token the sampler's
    /// greedy draw takes from the same logits (`Sampler::greedy_adjustments`).
    /// `(u32::MAX, −inf)` for a row of NaN only.
    pub argmax: Vec<Vec<(u32, f32)>>,
    /// `[rows, vocab]` logits (without adjustments) of the sequences that get them (see
    /// [`Engine::forward_greedy`]); empty for the others.
    pub logits: Vec<Vec<f32>>,
}

impl Engine {
    /// [`Engine::forward`] with logits wanted at the output rows, where the host needs only
    /// each row's greedy draw for most sequences: `greedy[i]` = `Some(adj)` for a sequence
    /// whose draw is the argmax after the adjustments `adj` ((token, delta): its logit
    /// `−= delta`, +inf bans; distinct tokens; `Sampler::greedy_adjustments`), applied and
    /// taken on the GPU (8 bytes a row come back); `None` for one that needs its logits.
    /// A greedy sequence whose adjustments do not fit the pass's room
    /// ([`crate::ops::argmax::ADJUST_PER_ROW`] a row) gets its logits instead (and its
    /// argmax without them); so does every sequence with `RWKV_GPU_ARGMAX=0`
    /// ([`crate::gpu::Tuning::gpu_argmax`]). The states advance as with `forward`; the
    /// logits are the same.
    ///
    /// Errors: `greedy.len() != seqs.len()`, an adjustment's token ≥ vocab; as
    /// [`Engine::forward`] (the output bound counts the logits that may come back).
    pub fn forward_greedy(
        &mut self,
        seqs: &[SeqInput],
        greedy: &[Option<&[(u32, f32)]>],
        cancel: Option<&CancelToken>,
    ) -> Result<GreedyOutput> {
        if greedy.len() != seqs.len() {
            return Err(EngineError::invalid(format!(
                "forward_greedy: {} choices for {} sequences",
                greedy.len(),
                seqs.len()
            )));
        }
        self.check_inputs(seqs)?;
        let vocab = self.weights.config.vocab_size;
        if let Some(&(t, _)) = greedy
            .iter()
            .flatten()
            .flat_map(|a| a.iter())
            .find(|a| a.0 as usize >= vocab)
        {
            return Err(EngineError::invalid(format!(
                "forward_greedy: adjusted token {t} is not below the vocabulary size {vocab}"
            )));
        }
        // `RWKV_GPU_ARGMAX=0`: every sequence's logits, as `forward` reads them back.
        let none = vec![None; seqs.len()];
        let greedy = if self.gpu.tuning.gpu_argmax {
            greedy
        } else {
            &none[..]
        };
        let full: Vec<bool> = greedy.iter().map(Option::is_none).collect();
        // Any greedy sequence may fall back to its logits: bound them all.
        let rows: usize = seqs.iter().map(rows_of).sum();
        output::check(
            || format!("logits (× {vocab}) of {rows} rows"),
            (rows as u64).saturating_mul(vocab as u64),
            4,
        )?;
        let mut out = GreedyOutput::default();
        for (s, &f) in seqs.iter().zip(&full) {
            out.argmax.push(Vec::with_capacity(rows_of(s)));
            let n = if f { rows_of(s) * vocab } else { 0 };
            out.logits
                .push(output::vec(|| format!("logits of {} rows", rows_of(s)), n)?);
        }
        self.want_rows(rows);
        self.each_pass(seqs, cancel, |eng, pass, rows| {
            eng.run_greedy_pass(pass, rows, greedy, &mut out)
        })?;
        Ok(out)
    }

    /// One pass of [`Self::forward_greedy`]: the head, the greedy sequences' adjustments
    /// and the argmax on the GPU, then one read-back of the argmax rows followed by the
    /// logit rows of the sequences that take them, packed.
    fn run_greedy_pass(
        &self,
        pass: &[PassSeq],
        rows: &[u32],
        greedy: &[Option<&[(u32, f32)]>],
        out: &mut GreedyOutput,
    ) -> Result<()> {
        let vocab = self.weights.config.vocab_size;
        let g = &self.graph;
        let run_head = !rows.is_empty();
        let n = rows.len();
        let per_seq = rows_per_seq(pass, rows);
        // The adjustments of each greedy sequence's rows, while they fit; the rest of the
        // sequences take their logits.
        let room = ADJUST_PER_ROW * n;
        let mut adj: Vec<u32> = vec![0];
        let mut full = vec![false; pass.len()];
        let mut at = 0usize;
        for ((k, p), &nr) in pass.iter().enumerate().zip(&per_seq) {
            match greedy[p.0] {
                Some(a) if (adj.len() - 1) / 2 + nr * a.len() <= room => {
                    for r in at..at + nr {
                        for &(t, delta) in a {
                            adj.extend([(r * vocab) as u32 + t, delta.to_bits()]);
                        }
                    }
                }
                _ => full[k] = true,
            }
            at += nr;
        }
        adj[0] = ((adj.len() - 1) / 2) as u32;
        if run_head {
            self.gpu
                .queue
                .write_buffer(&g.adjust_buf, 0, bytemuck::cast_slice(&adj));
        }
        let seq_list: Vec<(u32, &[u32])> = pass.iter().map(|p| (p.1, p.2)).collect();
        // A step whose every sequence takes its argmax (a server's decode step) records
        // the same commands as the last one of its shape: the spare recorded while the GPU
        // ran that one serves, and a spare for the next is recorded while this one runs.
        let all_greedy = run_head && !full.iter().any(|&f| f);
        if all_greedy {
            let dims = g.write_meta(&self.gpu, &seq_list, rows)?;
            let key = (bytemuck::bytes_of(&dims).to_vec(), n);
            let spare = g.spare_step.lock().ok().and_then(|mut s| s.take());
            let cmd = match spare {
                Some((k, c)) if k == key => c,
                _ => self.record_greedy_step(&dims, n)?,
            };
            self.gpu.queue.submit([cmd]);
            let next = self.record_greedy_step(&dims, n)?;
            if let Ok(mut s) = g.spare_step.lock() {
                *s = Some((key, next));
            }
        } else {
            let mut enc = self.gpu.device.create_command_encoder(&Default::default());
            g.encode(&self.gpu, &mut enc, &seq_list, rows, run_head, run_head)?;
            if !run_head {
                self.gpu.queue.submit([enc.finish()]);
                return Ok(());
            }
            // Read-back layout (f32 words): [2 × R argmax][the logit rows taken, × vocab].
            // (The head's logits of a greedy row are adjusted in place; rows taken are not.)
            enc.copy_buffer_to_buffer(&g.argmax_out, 0, &g.readback, 0, n as u64 * 8);
            let (mut at, mut packed) = (0usize, 0usize);
            for ((k, _), &nr) in pass.iter().enumerate().zip(&per_seq) {
                if full[k] && nr > 0 {
                    enc.copy_buffer_to_buffer(
                        &g.logits,
                        (at * vocab * 4) as u64,
                        &g.readback,
                        ((2 * n + packed * vocab) * 4) as u64,
                        (nr * vocab * 4) as u64,
                    );
                    packed += nr;
                }
                at += nr;
            }
            self.gpu.queue.submit([enc.finish()]);
        }
        let packed_rows: usize = (per_seq.iter().zip(&full))
            .filter(|(_, &f)| f)
            .map(|(&nr, _)| nr)
            .sum();
        let len = 2 * n + packed_rows * vocab;
        let mut host: Vec<f32> = output::vec(|| format!("one pass's {len} output values"), len)?;
        host.resize(len, 0.0);
        buffer::read_staged(
            &self.gpu,
            &g.readback,
            0,
            bytemuck::cast_slice_mut(&mut host),
        )?;
        let (mut at, mut packed) = (0usize, 0usize);
        for ((k, p), &nr) in pass.iter().enumerate().zip(&per_seq) {
            for r in at..at + nr {
                out.argmax[p.0].push((host[2 * r].to_bits(), host[2 * r + 1]));
            }
            if full[k] {
                let from = 2 * n + packed * vocab;
                out.logits[p.0].extend_from_slice(&host[from..from + nr * vocab]);
                packed += nr;
            }
            at += nr;
        }
        Ok(())
    }

    /// The commands of a greedy step of `dims` with `n` output rows (every row's argmax
    /// read back, no logits): the pass with its adjustments and argmax, then the argmax
    /// rows' copy to the read-back buffer.
    ///
    /// Errors: a late-compiled variant the pass takes that failed to compile.
    fn record_greedy_step(&self, dims: &crate::ops::Dims, n: usize) -> Result<wgpu::CommandBuffer> {
        let g = &self.graph;
        g.check_late(dims)?;
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        g.record(&mut enc, dims, true, true);
        enc.copy_buffer_to_buffer(&g.argmax_out, 0, &g.readback, 0, n as u64 * 8);
        Ok(enc.finish())
    }
}
