//! Outputs sized by the caller (issue 33, item 3): logits, embeddings, forward rows —
//! a request past `output::MAX_OUTPUT_BYTES` is `EngineError::OutputTooLarge` with the
//! requested and allowed bytes, before any work (no state made, no pass run); before the
//! check, a million positions of logits asked for 256 GiB and aborted the process. GPU
//! tests (lavapipe in CI: `WGPU_BACKEND=vulkan`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use rwkv_engine::output::MAX_OUTPUT_BYTES;
use rwkv_engine::{EmbedInput, EngineError, Pooling, Rows, SeqInput, Want};
use support::*;

/// `e` is `OutputTooLarge` asking for `requested` bytes, naming `what`.
#[track_caller]
fn assert_too_large(e: EngineError, requested: u64, what: &str) {
    match &e {
        EngineError::OutputTooLarge {
            what: w,
            requested: r,
            allowed,
        } => {
            assert_eq!((*r, *allowed), (requested, MAX_OUTPUT_BYTES), "{e}");
            assert!(w.contains(what), "{e}");
            assert_eq!(e.code(), "output_too_large");
            let msg = e.to_string();
            assert!(
                msg.contains(&requested.to_string()) && msg.contains(&MAX_OUTPUT_BYTES.to_string()),
                "{msg}"
            );
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
}

#[test]
fn too_large_outputs_are_refused_before_any_work() {
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let (vocab, c) = (eng.config().vocab_size as u64, eng.config().n_embd as u64);
    let live = eng.live_states();

    // Logits of a million positions: 1e6 × 65,536 × 4 bytes = 262 GB.
    let ids = vec![1u32; 1_000_000];
    let e = eng.logits_all(&ids, None).unwrap_err();
    assert_too_large(e, 1_000_000 * vocab * 4, "1000000 positions");
    assert_eq!(eng.live_states(), live, "no state was made");

    // forward() sums the rows of all its sequences: two of 5,000 rows of logits and
    // embeddings (1.3 GB each, under the limit alone) pass it together.
    let (a, b) = (eng.new_state().unwrap(), eng.new_state().unwrap());
    let toks = vec![1u32; 5000];
    let seq = |state| SeqInput {
        state,
        tokens: &toks,
        rows: Rows::All,
    };
    let both = Want {
        logits: true,
        embeddings: true,
    };
    let e = eng.forward(&[seq(a), seq(b)], both, None).unwrap_err();
    assert_too_large(e, 10_000 * (vocab + c) * 4, "10000 rows in 2 sequences");
    // Nothing ran: the states are still zero.
    assert!(eng.read_state_vec(a).unwrap().iter().all(|&v| v == 0.0));

    // Embeddings with mean pooling need every row: 4.2 M tokens × 128 × 4 > 2 GiB.
    let n = (MAX_OUTPUT_BYTES / (c * 4) + 1) as usize;
    let long = vec![1u32; n];
    let e = eng
        .embed(&[EmbedInput::new(&long)], Pooling::Mean)
        .unwrap_err();
    assert_too_large(e, n as u64 * c * 4, "embeddings");
    assert_eq!(
        eng.live_states(),
        live + 2,
        "embed freed its temporary state"
    );

    // Under the limit the same kind of call works, and the engine is unharmed.
    let short = SeqInput {
        tokens: &toks[..40],
        ..seq(a)
    };
    let out = eng.forward(&[short], both, None).unwrap();
    assert_eq!(out.logits[0].len(), 40 * vocab as usize);
    assert_eq!(out.embeddings[0].len(), 40 * c as usize);
    assert_eq!(
        eng.logits_all(&[1, 2, 3], None).unwrap().len(),
        3 * vocab as usize
    );
    eng.free_state(a).unwrap();
    eng.free_state(b).unwrap();
}
