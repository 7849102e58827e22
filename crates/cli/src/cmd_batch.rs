//! `rwkv batch`: batched decode on the engine alone — B sequences × 1 token a pass, as the
//! server's steps run them — with and without the logits read back, so a server figure
//! can be split into engine time and the rest.

use std::time::Instant;

use clap::Args;
use rwkv_engine::{Rows, SeqInput, Want};

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct BatchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,8,32,128")]
    pub batch: String,
    /// Timed steps per batch size (after 3 untimed ones).
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Batch-invariant kernels (as `rwkv serve --batch-invariant`).
    #[arg(long)]
    pub batch_invariant: bool,
}

pub fn batch(a: BatchArgs) -> anyhow::Result<()> {
    let sizes: Vec<usize> = a
        .batch
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let max = sizes.iter().copied().max().unwrap_or(1);
    let mut model = a.model.clone();
    model.chunk = model.chunk.max(max);
    let mut opts = model.load_options();
    opts.max_batch = max;
    opts.batch_invariant = a.batch_invariant;
    // The server's kernel knobs (k-split for few-token products), as it would serve.
    opts.tuning = Some(rwkv_server::serving_tuning());
    let mut eng = model.load_with(&opts, false)?;
    eng.reserve_slots(max)?;
    let vocab = eng.config().vocab_size as u32;
    for &b in &sizes {
        let states: Vec<_> = (0..b).map(|_| eng.new_state()).collect::<Result<_, _>>()?;
        for (logits, label) in [(true, "logits read back"), (false, "no logits")] {
            let want = Want {
                logits,
                embeddings: false,
            };
            let mut t_total = 0.0;
            for step in 0..a.steps + 3 {
                let toks: Vec<[u32; 1]> = (0..b)
                    .map(|i| [((i * 7919 + step * 104_729) as u32 % (vocab - 1)) + 1])
                    .collect();
                let inputs: Vec<SeqInput> = states
                    .iter()
                    .zip(&toks)
                    .map(|(&state, t)| SeqInput {
                        state,
                        tokens: t,
                        rows: Rows::Last,
                    })
                    .collect();
                let t = Instant::now();
                let out = eng.forward(&inputs, want, None)?;
                if !logits {
                    // The pass is queued, not done: wait for it (a 4-byte state read).
                    let mut one = vec![0f32; eng.state_len()];
                    eng.read_state(states[0], &mut one)?;
                }
                let dt = t.elapsed().as_secs_f64();
                drop(out);
                if step >= 3 {
                    t_total += dt;
                }
            }
            let ms = t_total / a.steps as f64 * 1e3;
            println!(
                "B = {b:4}: {ms:8.2} ms a step, {:9.1} tok/s ({label})",
                b as f64 / (ms / 1e3)
            );
        }
        for s in states {
            eng.free_state(s)?;
        }
    }
    Ok(())
}
