//! Ours vs `rwkv-tokenizer` 0.9.1, interleaved: rounds alternate the two tokenizers on the
//! same input and the minimum and median time per call are reported. Complements the
//! criterion bench (`benches/tokenizer.rs`), whose groups run one after another and so
//! see different background load on a shared 2-core machine; the minimum over interleaved
//! rounds is the least disturbed number for both.
//!
//! Run: `cargo bench -p rwkv-engine --bench tokenizer_interleaved`.

// Not library code: a failed setup should stop the run loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

use rwkv_engine::Tokenizer;
use rwkv_tokenizer::WorldTokenizer;

/// Minimum and median of per-call times (seconds).
fn stats(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (samples[0], samples[samples.len() / 2])
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let english = std::fs::read_to_string(dir.join("tests/data/english_212.txt")).unwrap();
    let mut jsonl = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(dir.join("tests/data/tokenizer_corpus.jsonl.gz")).unwrap(),
    )
    .read_to_string(&mut jsonl)
    .unwrap();
    let records: Vec<(String, String)> = jsonl
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["kind"].as_str().unwrap().to_string(),
                v["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mixed: String = records.iter().map(|(_, t)| t.as_str()).collect();
    // The corpus's English records (sentences and vocabulary words): English text that,
    // unlike the 212-token document, does not repeat, so branch predictors cannot learn it.
    let english_corpus: String = records
        .iter()
        .filter(|(k, _)| k == "english" || k == "english_words")
        .map(|(_, t)| t.as_str())
        .collect();
    let ours = Tokenizer::world().unwrap();
    let vocab = dir.join("assets/rwkv_vocab_v20230424.txt");
    let peer = WorldTokenizer::new(Some(vocab.to_str().unwrap())).unwrap();

    // Cold: the 212-token document once, after 64 MiB of other memory traffic has evicted
    // both tokenizers' tables from every cache level — a prompt tokenized between GPU work.
    let mut junk = vec![1u8; 64 << 20];
    let mut evict = |round: u8| {
        for x in junk.iter_mut().step_by(64) {
            *x = x.wrapping_add(round);
        }
        black_box(&junk);
    };
    let (mut a, mut c) = (Vec::new(), Vec::new());
    for r in 0..40u8 {
        evict(r);
        let t = Instant::now();
        black_box(ours.encode(black_box(&english)));
        a.push(t.elapsed().as_secs_f64());
        evict(r);
        let t = Instant::now();
        black_box(peer.encode(black_box(&english)));
        c.push(t.elapsed().as_secs_f64());
    }
    for (who, s) in [
        ("rwkv-engine encode", &mut a),
        ("rwkv-tokenizer 0.9.1 encode", &mut c),
    ] {
        let (min, med) = stats(s);
        println!(
            "{:<20} {who:<28} min {:>10.3} µs                median {:>10.3} µs",
            "english_212_cold",
            min * 1e6,
            med * 1e6
        );
    }

    for (name, text, rounds, calls) in [
        ("english_212_tokens", &english, 300, 200),
        ("english_corpus", &english_corpus, 100, 2),
        ("mixed_1MB", &mixed, 30, 2),
    ] {
        let ids: Vec<u32> = peer.encode(text).into_iter().map(u32::from).collect();
        assert_eq!(
            ours.encode(text),
            ids,
            "{name}: the two tokenizers disagree"
        );
        let mut buf = Vec::with_capacity(text.len());
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..calls {
                black_box(ours.encode(black_box(text)));
            }
            a.push(t.elapsed().as_secs_f64() / calls as f64);
            let t = Instant::now();
            for _ in 0..calls {
                buf.clear();
                ours.encode_into(black_box(text.as_bytes()), &mut buf);
                black_box(&buf);
            }
            b.push(t.elapsed().as_secs_f64() / calls as f64);
            let t = Instant::now();
            for _ in 0..calls {
                black_box(peer.encode(black_box(text)));
            }
            c.push(t.elapsed().as_secs_f64() / calls as f64);
        }
        let mb = text.len() as f64 / (1024.0 * 1024.0);
        for (who, s) in [
            ("rwkv-engine encode", &mut a),
            ("rwkv-engine encode_into", &mut b),
            ("rwkv-tokenizer 0.9.1 encode", &mut c),
        ] {
            let (min, med) = stats(s);
            println!(
                "{name:<20} {who:<28} min {:>10.3} µs ({:>7.1} MiB/s)  median {:>10.3} µs",
                min * 1e6,
                mb / min,
                med * 1e6
            );
        }
    }
}
