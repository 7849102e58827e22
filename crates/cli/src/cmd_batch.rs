//! `rwkv batch`: batched decode on the engine alone — B sequences × 1 token a pass, as the
//! server's steps run them — with every row's logits read back, and with only each row's
//! argmax (a server's greedy steps, `Engine::forward_greedy`), so a server figure can be
//! split into engine time and the rest.

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
    /// Instead of timing: check that batching does not change results — for each batch
    /// size, a step of B sequences (a 16-token prompt each, then one token) against each
    /// sequence run alone: max |Δ logit| and whether the top token agrees. Exits non-zero
    /// when a top token differs or |Δ| exceeds 1e-2.
    #[arg(long)]
    pub check: bool,
    /// Also profile one step of each batch size (GPU time a dispatch, as `rwkv profile`;
    /// the per-op table without the per-layer one).
    #[arg(long)]
    pub profile: bool,
    /// Also time the prefill of B prompts of this many tokens in one call (a server
    /// admitting a burst of requests; the last row's logits of each read back) beside one
    /// prompt of B × N tokens: whether many short prompts cost more than their tokens.
    #[arg(long, value_name = "N")]
    pub prompt: Option<usize>,
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
    if a.check {
        return check(&mut eng, &sizes, vocab);
    }
    for &b in &sizes {
        let states: Vec<_> = (0..b).map(|_| eng.new_state()).collect::<Result<_, _>>()?;
        for (greedy, label) in [
            (false, "logits read back"),
            (true, "argmax read back (greedy)"),
        ] {
            let want = Want {
                logits: true,
                embeddings: false,
            };
            let none: Vec<Option<&[(u32, f32)]>> = vec![Some(&[]); b];
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
                match greedy {
                    false => drop(eng.forward(&inputs, want, None)?),
                    true => drop(eng.forward_greedy(&inputs, &none, None)?),
                }
                let dt = t.elapsed().as_secs_f64();
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
        if a.profile {
            let toks: Vec<[u32; 1]> = (0..b)
                .map(|i| [(i as u32 * 31) % (vocab - 1) + 1])
                .collect();
            let seqs: Vec<_> = states
                .iter()
                .zip(&toks)
                .map(|(&s, t)| (s, &t[..]))
                .collect();
            eng.profile_seqs(&seqs)?;
            let mut p = eng.profile_seqs(&seqs)?;
            p.by_layer.clear();
            println!("profile of a step of B = {b}:");
            crate::cmd_bench::print_profile(&p);
        }
        for s in states {
            eng.free_state(s)?;
        }
        if let Some(n) = a.prompt {
            let (many, one) = time_prompts(&mut eng, b, n.max(1), a.steps.max(1), vocab)?;
            let t = (b * n.max(1)) as f64;
            println!(
                "B = {b:4}: {b} prompts of {n} tokens {many:8.2} ms ({:9.1} tok/s), \
                 one of {t} tokens {one:8.2} ms ({:9.1} tok/s)",
                t / (many / 1e3),
                t / (one / 1e3),
            );
        }
    }
    Ok(())
}

/// Median ms of prefilling `b` fresh states with `n`-token prompts in one call (each
/// one's last row of logits read back, as the server does) and of one fresh state with
/// their `b × n` tokens, over `reps` repeats after one untimed.
fn time_prompts(
    eng: &mut rwkv_engine::Engine,
    b: usize,
    n: usize,
    reps: usize,
    vocab: u32,
) -> anyhow::Result<(f64, f64)> {
    let want = Want {
        logits: true,
        embeddings: false,
    };
    let prompts: Vec<Vec<u32>> = (0..b)
        .map(|i| {
            (0..n)
                .map(|j| ((i * 7919 + j * 131) as u32 % (vocab - 1)) + 1)
                .collect()
        })
        .collect();
    let joined: Vec<u32> = prompts.concat();
    let mut many = Vec::new();
    let mut one = Vec::new();
    for rep in 0..reps + 1 {
        let states: Vec<_> = (0..b).map(|_| eng.new_state()).collect::<Result<_, _>>()?;
        let inputs: Vec<SeqInput> = states
            .iter()
            .zip(&prompts)
            .map(|(&state, p)| SeqInput {
                state,
                tokens: p,
                rows: Rows::Last,
            })
            .collect();
        let t = Instant::now();
        let out = eng.forward(&inputs, want, None);
        let dt = t.elapsed().as_secs_f64() * 1e3;
        for s in states {
            eng.free_state(s)?;
        }
        drop(out?);
        let st = eng.new_state()?;
        let input = SeqInput {
            state: st,
            tokens: &joined,
            rows: Rows::Last,
        };
        let t = Instant::now();
        let out = eng.forward(&[input], want, None);
        let dt1 = t.elapsed().as_secs_f64() * 1e3;
        eng.free_state(st)?;
        drop(out?);
        if rep > 0 {
            many.push(dt);
            one.push(dt1);
        }
    }
    Ok((median(&mut many), median(&mut one)))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// One decode step of `b` sequences after distinct 16-token prompts: the logits of each
/// sequence, from a step of all `b` together (`together`) or of it alone.
fn step_logits(
    eng: &mut rwkv_engine::Engine,
    b: usize,
    vocab: u32,
    together: bool,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let prompts: Vec<Vec<u32>> = (0..b)
        .map(|i| {
            (0..16)
                .map(|j| ((i * 131 + j * 7919) as u32 % (vocab - 1)) + 1)
                .collect()
        })
        .collect();
    let states: Vec<_> = (0..b).map(|_| eng.new_state()).collect::<Result<_, _>>()?;
    let none = Want {
        logits: false,
        embeddings: false,
    };
    let want = Want {
        logits: true,
        embeddings: false,
    };
    let mut out = Vec::new();
    let groups: Vec<Vec<usize>> = match together {
        true => vec![(0..b).collect()],
        false => (0..b).map(|i| vec![i]).collect(),
    };
    for g in groups {
        // Each prompt prefilled alone (the same kernels either way), then the step.
        for &i in &g {
            let input = SeqInput {
                state: states[i],
                tokens: &prompts[i],
                rows: Rows::Last,
            };
            eng.forward(&[input], none, None)?;
        }
        let toks: Vec<[u32; 1]> = g
            .iter()
            .map(|&i| [(i as u32 * 17) % (vocab - 1) + 1])
            .collect();
        let inputs: Vec<SeqInput> = g
            .iter()
            .zip(&toks)
            .map(|(&i, t)| SeqInput {
                state: states[i],
                tokens: t,
                rows: Rows::Last,
            })
            .collect();
        out.extend(eng.forward(&inputs, want, None)?.logits);
    }
    for s in states {
        eng.free_state(s)?;
    }
    Ok(out)
}

/// `rwkv batch --check`: each batch size's step against its sequences run alone.
fn check(eng: &mut rwkv_engine::Engine, sizes: &[usize], vocab: u32) -> anyhow::Result<()> {
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i)
    };
    let mut ok = true;
    for &b in sizes {
        let together = step_logits(eng, b, vocab, true)?;
        let alone = step_logits(eng, b, vocab, false)?;
        let mut max_d = 0f32;
        let mut top_same = 0;
        for (x, y) in together.iter().zip(&alone) {
            max_d = x
                .iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(max_d, f32::max);
            top_same += usize::from(argmax(x) == argmax(y));
        }
        let pass = top_same == b && max_d <= 1e-2;
        ok &= pass;
        println!(
            "B = {b:4}: max |Δ logit| {max_d:.2e} against each alone, top token the same for {top_same}/{b}: {}",
            if pass { "PASS" } else { "FAIL" }
        );
    }
    anyhow::ensure!(ok, "batching changed results");
    Ok(())
}
