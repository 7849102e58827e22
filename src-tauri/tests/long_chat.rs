//! A long chat in the app (issue 26): replies in one chat through the command layer — each
//! at most 8,192 tokens, the app's cap — until `RWKV_LONG_CHAT_TOKENS` (default 20,000) are
//! generated, the heaps (`heap/`: Rust's live allocations and the driver's, as the soak
//! reads them) and RSS read after the first `RWKV_LONG_CHAT_EARLY` (2,000). The replies are
//! sampled with no stop token or string, so each runs to its length. Ignored by default
//! (lavapipe needs ≈ half an hour for 20,000 tokens): `cargo test --release -p rwkv-studio
//! --test long_chat -- --ignored --nocapture`, `RWKV_LONG_CHAT_MODEL=FILE` for another
//! model than the bundled one. Figures in docs/reliability.md, part 6.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)] // the soak uses more of it
mod heap;
mod support;

use std::path::PathBuf;

use serde_json::json;
use support::{env_usize, test_app};

/// Most Rust's live heap may grow: the chat holds the replies' text (a few bytes a token)
/// and its message list; 4 MiB is ≈ 20 times that for 18,000 tokens.
const RUST_SLACK: u64 = 4 << 20;

#[test]
#[ignore = "a long run (≈ 30 min on lavapipe): docs/reliability.md, part 6"]
fn a_long_chat_keeps_memory_flat() {
    // The kernels the app runs by default on this adapter (the test script forces the
    // subgroup kernels for the other binaries).
    std::env::remove_var("RWKV_SUBGROUPS");
    let total = env_usize("RWKV_LONG_CHAT_TOKENS", 20_000);
    let early = env_usize("RWKV_LONG_CHAT_EARLY", 2_000).min(8192);
    let t = test_app("long-chat");
    match std::env::var_os("RWKV_LONG_CHAT_MODEL").map(PathBuf::from) {
        Some(p) => {
            t.allow(&p);
            t.load(Some(&p)).expect("the model loads");
        }
        None => {
            t.load_default();
        }
    }
    let chat = t.ok("chat_create", json!({}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let settings = |n: usize| {
        json!({ "id": chat, "settings": { "max_tokens": n, "sampler": {
            "temperature": 1.0, "top_p": 0.9, "seed": 7, "stop_tokens": [], "stop_strings": [] } } })
    };
    let mut done = 0usize;
    let mut first = None;
    let t0 = std::time::Instant::now();
    while done < total {
        let n = if first.is_none() {
            early
        } else {
            (total - done).min(8192)
        };
        t.ok("chat_settings", settings(n));
        let msg = t.send(&chat, "Go on.").expect("a reply");
        let got = msg["stats"]["generated_tokens"].as_u64().unwrap() as usize;
        assert!(got > 0, "a reply of {n} tokens generated none: {msg}");
        done += got;
        if first.is_none() {
            first = Some(heap::read());
        }
        println!("{done} tokens, {:.0} s", t0.elapsed().as_secs_f64());
    }
    let last = heap::read();
    let first = first.unwrap();
    println!(
        "after {early} / {done} tokens: {}",
        heap::compare(&first, &last)
    );
    heap::assert_flat(
        &first,
        &last,
        RUST_SLACK,
        &format!("{} tokens", done - early),
    );
}
