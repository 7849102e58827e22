//! What each op's dispatches cost a decode token in wall time (`rwkv profile --wall`):
//! greedy decode with that op's dispatches left out of every recorded step, against the
//! whole step. A timing instrument: while an op is left out the logits are wrong (the
//! tokens it picks are not a model's), but the other kernels' times do not depend on the
//! values they read. Unlike the GPU profile (one compute pass per dispatch, timestamps
//! between), this includes what a dispatch costs the step around it: its launch, the
//! barrier before the next one, the drain between them — at batch 1 most of a small
//! kernel's price (H200, benchmarks.md: 4–7 µs a dispatch whatever its work).

use serde::Serialize;

use crate::api::{CancelToken, Engine};
use crate::error::{EngineError, Result};

/// One op's share of a decode token.
#[derive(Debug, Clone, Serialize)]
pub struct WallCost {
    pub op: String,
    /// Its dispatches a decode token (from a GPU profile of one).
    pub dispatches: usize,
    /// Wall time a token saves without them, µs (median of the runs; may be ≤ 0 within
    /// noise for cheap ops).
    pub us_per_token: f64,
    pub us_per_dispatch: f64,
    /// Of the whole token's wall time.
    pub percent: f64,
}

/// [`Engine::decode_wall_costs`]'s report.
#[derive(Debug, Clone, Serialize)]
pub struct WallCosts {
    /// A whole decode token's wall time, µs (median).
    pub token_us: f64,
    /// A decode token's wall time with every dispatch left out, µs (median): the host's
    /// share of a step — the logits' readback, the draw, the token's write, the submission
    /// — during which the GPU waits (it copies the logits and runs nothing else).
    pub host_us: f64,
    pub gen: usize,
    pub repeats: usize,
    /// Largest first.
    pub ops: Vec<WallCost>,
    pub method: String,
}

impl Engine {
    /// Decode `gen` greedy tokens after `prompt` `repeats` times with every op's
    /// dispatches recorded and then with each op's left out in turn (every op a one-token
    /// pass dispatches, from a GPU profile of one); each op's cost is the difference of
    /// the two medians of a token's wall time.
    ///
    /// Errors: `gen` < 2 or `repeats` = 0; as [`Engine::profile`] (an adapter without
    /// timestamp queries) and [`Engine::generate`]. The engine records every op again
    /// afterwards, also on error.
    pub fn decode_wall_costs(
        &mut self,
        prompt: &[u32],
        gen: usize,
        repeats: usize,
    ) -> Result<WallCosts> {
        if gen < 2 || repeats == 0 {
            return Err(EngineError::invalid(
                "wall costs: at least 2 tokens and 1 run",
            ));
        }
        let st = self.new_state()?;
        let tok = prompt.last().copied().unwrap_or(0);
        let profile = self.profile(st, &[tok]);
        self.free_state(st)?;
        let profile = profile?;
        let token_us = self.timed_tokens(Vec::new(), prompt, gen, repeats)?;
        let every: Vec<String> = profile.by_op.iter().map(|t| t.name.clone()).collect();
        let host_us = self.timed_tokens(every, prompt, gen, repeats)?;
        let mut out = Vec::new();
        for t in &profile.by_op {
            let dispatches = t.dispatches;
            let without = self.timed_tokens(vec![t.name.clone()], prompt, gen, repeats)?;
            let saved = token_us - without;
            out.push(WallCost {
                op: t.name.clone(),
                dispatches,
                us_per_token: saved,
                us_per_dispatch: saved / dispatches.max(1) as f64,
                percent: 100.0 * saved / token_us.max(1e-9),
            });
        }
        out.sort_by(|a, b| b.us_per_token.total_cmp(&a.us_per_token));
        Ok(WallCosts {
            token_us,
            host_us,
            gen,
            repeats,
            ops: out,
            method: "greedy decode with one op's dispatches left out of every step, against \
                     the whole step (median of the runs)"
                .into(),
        })
    }

    /// Median wall time of a decode token, µs, over `repeats` runs of `gen` greedy tokens
    /// after `prompt` with the ops of `skip` left out (the set is cleared afterwards).
    fn timed_tokens(
        &mut self,
        skip: Vec<String>,
        prompt: &[u32],
        gen: usize,
        repeats: usize,
    ) -> Result<f64> {
        self.set_timing_skip(skip);
        let run = self.timed_runs(prompt, gen, repeats);
        self.set_timing_skip(Vec::new());
        let mut v = run?;
        v.sort_by(f64::total_cmp);
        Ok(v[v.len() / 2])
    }

    fn timed_runs(&mut self, prompt: &[u32], gen: usize, repeats: usize) -> Result<Vec<f64>> {
        let cancel = CancelToken::new();
        let mut greedy = |l: &mut [f32]| -> Result<u32> {
            Ok(l.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| i as u32))
        };
        let mut v = Vec::new();
        // One untimed run first (late pipelines, clocks).
        for r in 0..=repeats {
            let st = self.new_state()?;
            let s = self.generate(st, prompt, gen, &mut greedy, &cancel, &mut |_| true);
            self.free_state(st)?;
            let s = s?;
            let steps = s.generated_tokens.saturating_sub(1).max(1) as f64;
            if r > 0 {
                v.push(s.decode_ms * 1e3 / steps);
            }
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests;
