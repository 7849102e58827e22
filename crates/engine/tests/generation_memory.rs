//! A long generation keeps memory flat (issue 26): the live heap — Rust's allocations,
//! counted by this binary's global allocator, and the driver's (Mesa, LLVM), through
//! glibc's malloc statistics (`src-tauri/tests/heap`, the soak's counters) — must not
//! grow between token `RWKV_GEN_MEM_WARM` (default 200) and token `RWKV_GEN_MEM_TOKENS`
//! (default 1,000; the full run in docs/reliability.md: 2,000 and 20,000). RSS is
//! printed beside them, not asserted (allocator slack).
//!
//! It runs the kernels the CLI, the Python package and the app run on this adapter
//! (`RWKV_SUBGROUPS` removed: the default choice). On lavapipe the subgroup kernels
//! grew the driver's heap ≈ 0.9 MB a token (`gpu::context::subgroups_wanted`):
//! `RWKV_SUBGROUPS=1 cargo test --test generation_memory` shows that failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)] // the soak uses more of it
#[path = "../../../src-tauri/tests/heap/mod.rs"]
mod heap;
mod support;

use rwkv_engine::CancelToken;
use support::env_usize;

/// Most Rust's live heap may grow (the driver's: [`heap::DRIVER_SLACK`]): the loop keeps
/// nothing per token (the raw `generate` returns no text), so this is only scheduling noise
/// of wgpu's internal pools.
const RUST_SLACK: u64 = 1 << 20;

#[test]
fn a_long_generation_keeps_the_heap_flat() {
    // Default kernels, whatever the test script forces for the other binaries. This is
    // the binary's only test, so no other thread reads the environment meanwhile.
    if let Some(v) = std::env::var_os("RWKV_SUBGROUPS_UNDER_TEST") {
        std::env::set_var("RWKV_SUBGROUPS", v);
    } else {
        std::env::remove_var("RWKV_SUBGROUPS");
    }
    let warm = env_usize("RWKV_GEN_MEM_WARM", 200);
    let total = env_usize("RWKV_GEN_MEM_TOKENS", 1000).max(warm + 1);
    let mut eng = support::engine("rwkv7-tiny.safetensors");
    println!(
        "{} with subgroup kernels: {}",
        eng.gpu().summary.name,
        eng.gpu().features.subgroup
    );
    let st = eng.new_state().unwrap();
    let prompt = eng.tokenizer().encode("Once upon a time");
    let mut n = 0usize;
    let mut first: Option<heap::Heap> = None;
    let stats = eng
        .generate(
            st,
            &prompt,
            total,
            &mut |logits: &mut [f32]| {
                let mut best = 0;
                for (i, v) in logits.iter().enumerate() {
                    if *v > logits[best] {
                        best = i;
                    }
                }
                Ok(best as u32)
            },
            &CancelToken::new(),
            &mut |_tok| {
                n += 1;
                if n == warm {
                    first = Some(heap::read());
                }
                true
            },
        )
        .unwrap();
    let last = heap::read();
    let first = first.expect("the warm-up token was reached");
    assert_eq!(stats.generated_tokens, total);
    println!(
        "after {warm} / {total} tokens: {}, {:.0} tok/s",
        heap::compare(&first, &last),
        stats.decode_tok_s
    );
    heap::assert_flat(
        &first,
        &last,
        RUST_SLACK,
        &format!("{} tokens", total - warm),
    );
}
