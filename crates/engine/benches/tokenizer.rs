//! World tokenizer speed: ours next to the `rwkv-tokenizer` crate (pure Rust, by
//! cahya-wirawan), the published World tokenizer we measure against.
//!
//! Inputs: `tests/data/english_212.txt` (an English document of 212 tokens) and the
//! ≈1 MB mixed-language corpus `tests/data/tokenizer_corpus.jsonl.gz` (all records
//! concatenated). Both tokenizers are checked to produce the same ids before timing.
//!
//! Run: `cargo bench -p rwkv-engine --bench tokenizer` (add `-- --measurement-time 3` for
//! a quick run). Numbers and the machine are in `docs/tokenizer.md`.

// Not library code: a failed setup or assertion should stop the run loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rwkv_engine::tokenizer::WORLD_VOCAB_FILE;
use rwkv_engine::Tokenizer;
use rwkv_tokenizer::WorldTokenizer;

/// The crate folder (holding `tests/data/` and `assets/`); `RWKV_BENCH_DIR` overrides it
/// so that the built bench binary can run on another machine.
fn crate_dir() -> PathBuf {
    std::env::var_os("RWKV_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn data(name: &str) -> PathBuf {
    crate_dir().join("tests/data").join(name)
}

/// The peer, reading the same vocabulary file as ours (identical bytes) from our assets.
fn peer() -> WorldTokenizer {
    let vocab = crate_dir().join("assets/rwkv_vocab_v20230424.txt");
    WorldTokenizer::new(Some(vocab.to_str().unwrap())).unwrap()
}

fn english_212() -> String {
    std::fs::read_to_string(data("english_212.txt")).unwrap()
}

fn mixed_1mb() -> String {
    let mut jsonl = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(data("tokenizer_corpus.jsonl.gz")).unwrap())
        .read_to_string(&mut jsonl)
        .unwrap();
    jsonl
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["text"].as_str().unwrap().to_string()
        })
        .collect()
}

fn check_same_ids(name: &str, ours: &Tokenizer, peer: &WorldTokenizer, text: &str) {
    let a = ours.encode(text);
    let b: Vec<u32> = peer.encode(text).into_iter().map(u32::from).collect();
    if a == b {
        eprintln!(
            "{name}: {} bytes, {} tokens; rwkv-tokenizer gives the same ids",
            text.len(),
            a.len()
        );
    } else {
        let at = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        eprintln!(
            "{name}: {} bytes, {} tokens; rwkv-tokenizer DIFFERS from token {at} ({} tokens)",
            text.len(),
            a.len(),
            b.len()
        );
    }
}

fn encode(c: &mut Criterion) {
    let ours = Tokenizer::world().unwrap();
    let peer = peer();
    let inputs = [
        ("english_212_tokens", english_212()),
        ("mixed_1MB", mixed_1mb()),
    ];
    for (name, text) in &inputs {
        check_same_ids(name, &ours, &peer, text);
        let mut g = c.benchmark_group(format!("encode/{name}"));
        g.throughput(Throughput::Bytes(text.len() as u64));
        if text.len() > 100_000 {
            g.sample_size(20);
        }
        g.bench_with_input(BenchmarkId::new("rwkv-engine", "encode"), text, |b, t| {
            b.iter(|| ours.encode(black_box(t)))
        });
        let mut buf = Vec::with_capacity(text.len());
        g.bench_with_input(
            BenchmarkId::new("rwkv-engine", "encode_into"),
            text,
            |b, t| {
                b.iter(|| {
                    buf.clear();
                    ours.encode_into(black_box(t.as_bytes()), &mut buf);
                    buf.len()
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("rwkv-tokenizer-0.9.1", "encode"),
            text,
            |b, t| b.iter(|| peer.encode(black_box(t))),
        );
        g.finish();
    }
}

fn decode(c: &mut Criterion) {
    let ours = Tokenizer::world().unwrap();
    let peer = peer();
    let text = mixed_1mb();
    let ids = ours.encode(&text);
    let ids16: Vec<u16> = ids.iter().map(|&i| i as u16).collect();
    let mut g = c.benchmark_group("decode/mixed_1MB");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(20);
    g.bench_function(BenchmarkId::new("rwkv-engine", "decode"), |b| {
        b.iter(|| ours.decode(black_box(&ids)).unwrap())
    });
    g.bench_function(BenchmarkId::new("rwkv-tokenizer-0.9.1", "decode"), |b| {
        b.iter(|| peer.decode(black_box(ids16.clone())).unwrap())
    });
    g.finish();
}

fn load(c: &mut Criterion) {
    let mut g = c.benchmark_group("load_world_vocab");
    g.sample_size(10);
    g.bench_function("rwkv-engine", |b| {
        b.iter(|| Tokenizer::from_world_vocab(black_box(WORLD_VOCAB_FILE), "bench").unwrap())
    });
    g.bench_function("rwkv-tokenizer-0.9.1", |b| b.iter(peer));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = encode, decode, load
}
criterion_main!(benches);
