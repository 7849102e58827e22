#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // benchmark harness code
//! What the analysis caches save: the hit path next to recomputing, on the tiny Q8_0
//! fixture (2 layers × 128) on whatever Vulkan device wgpu picks (lavapipe in CI).
//!
//! - `embed_6_fields`: six fields of 1–17 tokens, batched `embed` vs `embed_cached` with
//!   a warm cache (lookups + copies); `…_after_doc` starts each field from a document
//!   state, so the hit path also reads the state back and hashes it (its identity).
//! - `prefill_doc_45`: the fixtures' 45-token text into a new state, `prefill` vs
//!   `prefill_cached` with the text cached (one GPU fork).
//!
//! Run: `WGPU_BACKEND=vulkan cargo bench -p rwkv-engine --bench cache`.

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use rwkv_engine::analysis::{EmbedInput, EmbeddingCache, Pooling, PrefixCache};

fn caches(c: &mut Criterion) {
    let mut eng = support::engine("rwkv7-tiny-Q8_0.gguf");
    let r = support::Reference::load("tiny");
    let ids: Vec<Vec<u32>> = support::FIELD_TEXTS
        .iter()
        .map(|t| eng.tokenizer().encode(t))
        .collect();
    let doc = eng.prefill(&r.tokens).unwrap();

    for (name, from) in [
        ("embed_6_fields", None),
        ("embed_6_fields_after_doc", Some(doc)),
    ] {
        let inputs: Vec<EmbedInput> = ids.iter().map(|t| EmbedInput { tokens: t, from }).collect();
        let mut cache = EmbeddingCache::new(64 << 20, 100_000);
        eng.embed_cached(&mut cache, &inputs, Pooling::Last)
            .unwrap();
        let mut g = c.benchmark_group(name);
        g.sample_size(20);
        g.bench_function("recompute", |b| {
            b.iter(|| eng.embed(&inputs, Pooling::Last).unwrap())
        });
        g.bench_function("cache_hit", |b| {
            b.iter(|| {
                let (e, hits) = eng
                    .embed_cached(&mut cache, &inputs, Pooling::Last)
                    .unwrap();
                assert!(hits.iter().all(|&h| h));
                e
            })
        });
        g.finish();
    }

    let mut prefix = PrefixCache::new(256 << 20, 64);
    let warm = eng.prefill_cached(&mut prefix, &r.tokens).unwrap();
    eng.free_state(warm.state).unwrap();
    let mut g = c.benchmark_group("prefill_doc_45");
    g.sample_size(20);
    g.bench_function("recompute", |b| {
        b.iter(|| {
            let st = eng.prefill(&r.tokens).unwrap();
            // Read one state back so the GPU work is finished inside the iteration.
            let mut s = vec![0f32; eng.state_len()];
            eng.read_state(st, &mut s).unwrap();
            eng.free_state(st).unwrap();
        })
    });
    g.bench_function("prefix_hit", |b| {
        b.iter(|| {
            let p = eng.prefill_cached(&mut prefix, &r.tokens).unwrap();
            assert_eq!(p.reused, r.tokens.len());
            let mut s = vec![0f32; eng.state_len()];
            eng.read_state(p.state, &mut s).unwrap();
            eng.free_state(p.state).unwrap();
        })
    });
    g.finish();
    prefix.release(&mut eng).unwrap();
}

criterion_group!(benches, caches);
criterion_main!(benches);
