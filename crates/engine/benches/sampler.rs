//! Sampling cost per token on the host (the GPU waits for it between decode steps): a
//! 65,536-token vocabulary (World), logits shaped like a language model's — a long
//! Gaussian tail and a few tokens far above it — under the chat default (temperature 1,
//! top-p 0.3, presence / frequency penalties), greedy, top-k 40 + temperature 0.8 and
//! top-p 0.95; the chat default where most of the vocabulary lies ≥ 100 below the rest
//! (exp underflows, few tokens are candidates); and the chat default on near-uniform
//! logits (a random-weight model's: a nucleus of thousands of tokens).
//!
//! Run: `cargo bench -p rwkv-engine --bench sampler` (add `-- --measurement-time 3` for a
//! quick run).

// Not library code: a failed setup should stop the run loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rwkv_engine::sampler::{Sampler, SamplerOptions};

const VOCAB: usize = 65_536;

/// Logits of a small English model: as [`logits`], but 90 % of the vocabulary (tokens it
/// never saw in training: other scripts) 100–140 below the rest, where exp underflows.
fn english_logits(seed: u64) -> Vec<f32> {
    let mut l = logits(seed);
    let mut rng = StdRng::seed_from_u64(seed + 1000);
    for v in l.iter_mut() {
        if rng.gen::<f32>() < 0.9 {
            *v -= rng.gen_range(100.0..140.0);
        }
    }
    l
}

/// Logits of one step: N(0, 3²)-ish tail (sum of uniforms) and 8 tokens 12–20 above it.
fn logits(seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut l: Vec<f32> = (0..VOCAB)
        .map(|_| (0..4).map(|_| rng.gen::<f32>() - 0.5).sum::<f32>() * 5.2)
        .collect();
    for _ in 0..8 {
        let t = rng.gen_range(0..VOCAB);
        l[t] += rng.gen_range(12.0..20.0);
    }
    l
}

fn bench(c: &mut Criterion) {
    let wide: Vec<Vec<f32>> = (0..16).map(logits).collect();
    let english: Vec<Vec<f32>> = (0..16).map(english_logits).collect();
    // Near-uniform (a random-weight model's): top-p 0.3 is a nucleus of ≈ 20,000 tokens.
    let flat: Vec<Vec<f32>> = wide
        .iter()
        .map(|l| l.iter().map(|v| v * 0.01).collect())
        .collect();
    let cases = [
        (
            "chat default, 90 % of the vocabulary unseen",
            SamplerOptions::default(),
        ),
        (
            "chat default, near-uniform logits",
            SamplerOptions::default(),
        ),
        ("chat default", SamplerOptions::default()),
        ("greedy", SamplerOptions::greedy()),
        (
            "top-k 40, temperature 0.8",
            SamplerOptions {
                top_k: 40,
                top_p: 1.0,
                temperature: 0.8,
                ..SamplerOptions::default()
            },
        ),
        (
            "top-p 0.95",
            SamplerOptions {
                top_p: 0.95,
                ..SamplerOptions::default()
            },
        ),
    ];
    let mut g = c.benchmark_group("sample a token (65,536 logits)");
    for (i, (name, opts)) in cases.into_iter().enumerate() {
        let steps = match i {
            0 => &english,
            1 => &flat,
            _ => &wide,
        };
        let mut s = Sampler::new(
            SamplerOptions {
                seed: Some(1),
                ..opts
            },
            VOCAB,
        )
        .unwrap();
        let mut buf = vec![0.0f32; VOCAB];
        let mut i = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.copy_from_slice(&steps[i % steps.len()]);
                i += 1;
                let t = s.sample(black_box(&mut buf));
                s.accept(t);
                t
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
