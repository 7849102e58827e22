#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! The forward pass against itself in every shape it can take: chunk sizes, token by
//! token, batched sequences, forked states — and bad input.

mod support;

use rwkv_engine::{CancelToken, EngineError, LoadOptions, Rows, SeqInput, Want};
use support::*;

const BOTH: Want = Want {
    logits: true,
    embeddings: false,
};

/// Rounding differs between chunkings (other tile shapes, matvec vs tiled kernels), so
/// equality is up to f32 noise: 1e-3 on logits of magnitude ~10.
const TOL: f32 = 1e-3;

#[test]
fn chunk_sizes_and_token_by_token_agree() {
    let r = Reference::load("tiny");
    let mut full = None;
    for chunk in [1usize, 7, 32, 256] {
        let mut eng = engine_with(
            "rwkv7-tiny-Q8_0.gguf",
            &LoadOptions {
                max_chunk: chunk,
                ..Default::default()
            },
        );
        let (_, out) = forward_new(&mut eng, &r.tokens, Rows::All);
        match &full {
            None => full = Some(out.logits[0].clone()),
            Some(f) => {
                let d = max_abs(f, &out.logits[0]);
                assert!(d < TOL, "chunk {chunk}: max |Δ| {d}");
            }
        }
    }
    // Token by token through the public API, one call per token.
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let st = eng.new_state().unwrap();
    let mut got = Vec::new();
    for t in &r.tokens {
        let out = eng
            .forward(
                &[SeqInput {
                    state: st,
                    tokens: std::slice::from_ref(t),
                    rows: Rows::Last,
                }],
                BOTH,
                None,
            )
            .unwrap();
        got.extend_from_slice(&out.logits[0]);
    }
    let d = max_abs(full.as_ref().unwrap(), &got);
    assert!(d < TOL, "token by token: max |Δ| {d}");
}

#[test]
fn batched_sequences_equal_separate_runs() {
    let r = Reference::load("tiny");
    let seqs: [&[u32]; 3] = [&r.tokens[..45], &r.tokens[3..10], &r.tokens[20..41]];
    let mut eng = engine_with(
        "rwkv7-tiny.safetensors",
        &LoadOptions {
            max_chunk: 16,
            ..Default::default()
        },
    );
    let want = Want {
        logits: true,
        embeddings: true,
    };
    let mut separate = Vec::new();
    for s in seqs {
        let st = eng.new_state().unwrap();
        let out = eng
            .forward(
                &[SeqInput {
                    state: st,
                    tokens: s,
                    rows: Rows::Last,
                }],
                want,
                None,
            )
            .unwrap();
        let mut state = vec![0f32; eng.state_len()];
        eng.read_state(st, &mut state).unwrap();
        separate.push((out.logits[0].clone(), out.embeddings[0].clone(), state));
    }
    let states: Vec<_> = (0..3).map(|_| eng.new_state().unwrap()).collect();
    let inputs: Vec<SeqInput> = seqs
        .iter()
        .zip(&states)
        .map(|(s, &st)| SeqInput {
            state: st,
            tokens: s,
            rows: Rows::Last,
        })
        .collect();
    let out = eng.forward(&inputs, want, None).unwrap();
    for i in 0..3 {
        let mut state = vec![0f32; eng.state_len()];
        eng.read_state(states[i], &mut state).unwrap();
        assert!(
            max_abs(&separate[i].0, &out.logits[i]) < TOL,
            "sequence {i} logits"
        );
        assert!(
            max_abs(&separate[i].1, &out.embeddings[i]) < TOL,
            "sequence {i} embedding"
        );
        assert!(max_abs(&separate[i].2, &state) < TOL, "sequence {i} state");
    }
}

#[test]
fn forked_states_are_independent() {
    let r = Reference::load("tiny");
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let parent = eng.new_state().unwrap();
    let run = |eng: &mut rwkv_engine::Engine, st, toks: &[u32]| {
        eng.forward(
            &[SeqInput {
                state: st,
                tokens: toks,
                rows: Rows::Last,
            }],
            BOTH,
            None,
        )
        .unwrap()
        .logits
        .swap_remove(0)
    };
    run(&mut eng, parent, &r.tokens[..20]);
    let mut before = vec![0f32; eng.state_len()];
    eng.read_state(parent, &mut before).unwrap();
    let a = eng.fork_state(parent).unwrap();
    let b = eng.fork_state(parent).unwrap();
    let la = run(&mut eng, a, &r.tokens[20..30]);
    let lb = run(&mut eng, b, &r.tokens[30..45]);
    let mut after = vec![0f32; eng.state_len()];
    eng.read_state(parent, &mut after).unwrap();
    assert_eq!(before, after, "the parent is untouched by its branches");
    // Branch a equals a fresh run of the same 30 tokens.
    let fresh = eng.new_state().unwrap();
    let mut joined = r.tokens[..20].to_vec();
    joined.extend_from_slice(&r.tokens[20..30]);
    let lf = run(&mut eng, fresh, &joined);
    assert!(max_abs(&la, &lf) < TOL);
    assert!(
        max_abs(&la, &lb) > 0.1,
        "different branches give different logits"
    );
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let st = eng.new_state().unwrap();
    let empty = eng.forward(
        &[SeqInput {
            state: st,
            tokens: &[],
            rows: Rows::Last,
        }],
        BOTH,
        None,
    );
    assert!(
        matches!(empty, Err(EngineError::InvalidInput { .. })),
        "{empty:?}"
    );
    let big = eng.forward(
        &[SeqInput {
            state: st,
            tokens: &[1, 65536],
            rows: Rows::Last,
        }],
        BOTH,
        None,
    );
    let msg = format!("{}", big.unwrap_err());
    assert!(msg.contains("65536"), "{msg}");
    let gone = eng.new_state().unwrap();
    eng.free_state(gone).unwrap();
    assert!(matches!(
        eng.fork_state(gone),
        Err(EngineError::State { .. })
    ));
    assert!(eng.write_state(st, &[0.0; 3]).is_err());
    // A cancelled job stops before its first pass and the state is still usable.
    let cancel = CancelToken::new();
    cancel.cancel();
    let r = eng.forward(
        &[SeqInput {
            state: st,
            tokens: &[1, 2, 3],
            rows: Rows::Last,
        }],
        BOTH,
        Some(&cancel),
    );
    assert!(matches!(r, Err(EngineError::Cancelled)));
    let stats = eng
        .generate(st, &[1, 2, 3], 100, &mut |_| Ok(5), &cancel, &mut |_| true)
        .unwrap();
    assert_eq!(stats.stop, rwkv_engine::StopReason::Cancelled);
    assert_eq!(stats.generated_tokens, 0);
    cancel.reset();
    let mut n = 0;
    let stats = eng
        .generate(st, &[1, 2, 3], 100, &mut |_| Ok(5), &cancel, &mut |_| {
            n += 1;
            if n == 4 {
                cancel.cancel();
            }
            true
        })
        .unwrap();
    assert_eq!(stats.stop, rwkv_engine::StopReason::Cancelled);
    assert_eq!(stats.generated_tokens, 4);
}

#[test]
fn a_model_too_large_for_the_device_is_a_clear_error() {
    let path = fixtures().join("rwkv7-tiny-Q8_0.gguf");
    // 4 MiB of GPU memory cannot hold the 8.9 MB Q8_0 head (the embedding, as large,
    // stays in host memory and takes none).
    let opts = LoadOptions {
        max_gpu_bytes: Some(4 << 20),
        ..Default::default()
    };
    let err = rwkv_engine::Engine::load_on(gpu(), &path, &opts).unwrap_err();
    assert!(matches!(err, EngineError::TooLarge { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("output.weight") && msg.contains("limit"),
        "{msg}"
    );
    // The device is still usable afterwards.
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let st = eng.new_state().unwrap();
    let out = eng
        .forward(
            &[SeqInput {
                state: st,
                tokens: &[1, 2, 3],
                rows: Rows::Last,
            }],
            BOTH,
            None,
        )
        .unwrap();
    assert!(out.logits[0].iter().all(|v| v.is_finite()));
}

/// The embedding takes no GPU memory: it stays in host memory, and each pass uploads its
/// tokens' rows (the references of every other test here check what they decode to).
#[test]
fn the_embedding_takes_no_gpu_memory() {
    let eng = engine("rwkv7-tiny-Q8_0.gguf");
    let info = eng.info();
    // 65,536 rows of 128 Q8_0 values: 4 blocks of 34 bytes, half of the file (the head
    // is the other half; on the GPU its rows of 4 blocks take 144 bytes, not 136).
    let emb = 65536 * 4 * 34;
    assert!(
        info.gpu_weight_bytes + emb / 2 < info.file_bytes,
        "{} bytes of weights on the GPU for a {}-byte file with a {emb}-byte embedding",
        info.gpu_weight_bytes,
        info.file_bytes
    );
}

/// GPU memory follows use: a model starts with a batch's worth of output rows and two
/// state slots; all-row logits grow the rows (once, the same logits as passes split by
/// the old rows would give) and more states grow the slots, every state kept.
#[test]
fn output_rows_and_state_slots_grow_on_demand() {
    let r = Reference::load("tiny");
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let start = eng.info().gpu_total_bytes;
    // Two states exist from the start; a third makes the slots grow.
    let a = eng.new_state().unwrap();
    let out_a = eng
        .forward(
            &[SeqInput {
                state: a,
                tokens: &r.tokens[..5],
                rows: Rows::Last,
            }],
            BOTH,
            None,
        )
        .unwrap();
    assert_eq!(eng.info().gpu_total_bytes, start, "a chat needs no growth");
    let b = eng.new_state().unwrap();
    let c = eng.new_state().unwrap();
    let grown = eng.info().gpu_total_bytes;
    assert!(grown > start, "three states fit in two slots?");
    // State a survived the growth: continuing it equals running all tokens at once.
    let cont = eng
        .forward(
            &[SeqInput {
                state: a,
                tokens: &r.tokens[5..9],
                rows: Rows::Last,
            }],
            BOTH,
            None,
        )
        .unwrap();
    let (_, whole) = forward_new(&mut eng, &r.tokens[..9], Rows::Last);
    assert!(max_abs(&cont.logits[0], &whole.logits[0]) < TOL);
    assert!(!out_a.logits[0].is_empty());
    // All-row logits of more tokens than a batch's rows: the rows grow.
    let before = eng.info().gpu_total_bytes;
    let all = eng.logits_all(&r.tokens, None).unwrap();
    assert!(
        eng.info().gpu_total_bytes > before,
        "the output rows did not grow"
    );
    let vocab = eng.config().vocab_size;
    assert_eq!(all.len(), r.tokens.len() * vocab);
    // The same logits as a model whose rows were already large (chunked identically).
    let mut big = engine("rwkv7-tiny-Q8_0.gguf");
    big.logits_all(&r.tokens, None).unwrap();
    let again = big.logits_all(&r.tokens, None).unwrap();
    assert!(max_abs(&all, &again) < TOL);
    for s in [b, c] {
        eng.free_state(s).unwrap();
    }
}
