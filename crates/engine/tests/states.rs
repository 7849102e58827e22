#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! States as files, forks and the analysis caches, against the peers and against the
//! engine's own forward pass; bad state files.
//!
//! Tolerances:
//! - `EMB_TOL` (1e-3): the engine's hidden states vs the `rwkv` package's, as in
//!   `peers.rs` and `analysis.rs`.
//! - `SPLIT_TOL` (1e-3): the same tokens cut into other passes (batch packing, chunk
//!   boundaries, a state saved in between) take other kernels and tile shapes (matvec vs
//!   tiled matmul), so results agree to f32 noise, not bits; 1e-3 is `forward.rs`'s bound
//!   for logits of magnitude ~10, hidden states after `ln_out` are smaller (~1–3).
//! - Exact (`assert_eq!`): where the same dispatches run on the same inputs (a cache hit,
//!   a state copied through a file or a fork).

mod support;

use rwkv_engine::analysis::{
    EmbedInput, EmbeddingCache, Field, FieldOptions, Pooling, PrefixCache,
};
use rwkv_engine::format::{read_state_header, STATE_HEADER_BYTES};
use rwkv_engine::{EngineError, Rows, SeqInput, StateId, Want};
use support::*;

const EMB_TOL: f32 = 1e-3;
const SPLIT_TOL: f32 = 1e-3;

fn last_logits(eng: &mut rwkv_engine::Engine, st: StateId, tokens: &[u32]) -> Vec<f32> {
    eng.forward(
        &[SeqInput {
            state: st,
            tokens,
            rows: Rows::Last,
        }],
        Want {
            logits: true,
            embeddings: false,
        },
        None,
    )
    .unwrap()
    .logits
    .swap_remove(0)
}

#[test]
fn state_round_trip_through_a_file_in_a_fresh_engine() {
    let r = Reference::load("tiny");
    let (a, b) = r.tokens.split_at(20);
    let dir = scratch("analysis-roundtrip");
    let path = dir.join("a.rwkvstate");
    let file = "rwkv7-tiny.safetensors";

    let mut eng = engine(file);
    let st = eng.prefill(a).unwrap();
    let saved = eng.read_state_vec(st).unwrap();
    let header = eng.save_state(st, a.len() as u64, &path).unwrap();
    assert_eq!(header.tokens, 20);
    assert_eq!(header.fingerprint, eng.info().fingerprint);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len() as usize,
        STATE_HEADER_BYTES + 4 * eng.state_len()
    );
    assert_eq!(read_state_header(&path).unwrap(), header);
    // Reference: A+B in one go, from the zero state.
    let whole = eng.new_state().unwrap();
    let want = last_logits(&mut eng, whole, &r.tokens);
    drop(eng);

    // A fresh engine of the same model on the same device.
    let mut eng2 = engine(file);
    let (loaded, h2) = eng2.load_state_with_header(&path).unwrap();
    assert_eq!(h2, header);
    assert_eq!(
        eng2.read_state_vec(loaded).unwrap(),
        saved,
        "bits survive the file"
    );
    let got = last_logits(&mut eng2, loaded, b);
    let d = max_abs(&got, &want);
    assert!(
        d < SPLIT_TOL,
        "prefill A, save, load, continue B vs A+B: max |Δ| {d}"
    );

    // .npy export of the full 45-token state in the fixtures' layout, against the
    // `rwkv` package's final state.
    let out = dir.join("npy");
    let paths = eng2.export_state_npy(loaded, &out).unwrap();
    assert_eq!(paths.len(), 3);
    for name in [
        "state_att_x_prev.f32.npy",
        "state_att_kv.f32.npy",
        "state_ffn_x_prev.f32.npy",
    ] {
        let (shape, ours) = rwkv_engine::npy::read_f32(out.join(name)).unwrap();
        let (rshape, theirs) =
            rwkv_engine::npy::read_f32(fixtures().join(format!("rwkv7-tiny.ref.rwkv.{name}")))
                .unwrap();
        assert_eq!(shape, rshape, "{name}");
        let d = max_abs(&ours, &theirs);
        assert!(d < EMB_TOL, "{name}: max |Δ| {d} vs the rwkv package");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn forks_do_not_affect_each_other_or_the_parent() {
    let r = Reference::load("tiny");
    let (a, rest) = r.tokens.split_at(15);
    let (b, c) = rest.split_at(15);
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let parent = eng.prefill(a).unwrap();
    let before = eng.read_state_vec(parent).unwrap();
    let x = eng.fork_state(parent).unwrap();
    let y = eng.fork_state(parent).unwrap();
    assert_eq!(eng.read_state_vec(x).unwrap(), before, "a fork is a copy");
    // Both branches in one batched call, then each against its own fresh run.
    let out = eng
        .forward(
            &[
                SeqInput {
                    state: x,
                    tokens: b,
                    rows: Rows::Last,
                },
                SeqInput {
                    state: y,
                    tokens: c,
                    rows: Rows::Last,
                },
            ],
            Want {
                logits: true,
                embeddings: false,
            },
            None,
        )
        .unwrap();
    assert_eq!(
        eng.read_state_vec(parent).unwrap(),
        before,
        "parent untouched"
    );
    for (branch, tail, got) in [(x, b, &out.logits[0]), (y, c, &out.logits[1])] {
        let fresh = eng.prefill(a).unwrap();
        let want = last_logits(&mut eng, fresh, tail);
        let d = max_abs(got, &want);
        assert!(d < SPLIT_TOL, "branch {branch:?}: max |Δ| {d}");
    }
    // The two branches hold different states.
    assert!(
        max_abs(
            &eng.read_state_vec(x).unwrap(),
            &eng.read_state_vec(y).unwrap()
        ) > 1e-3
    );
    // Freeing a branch leaves the other and the parent usable.
    eng.free_state(x).unwrap();
    assert_eq!(eng.read_state_vec(parent).unwrap(), before);
    assert!(eng.read_state_vec(x).is_err());
}

/// States whose layers are split over several buffers (`RWKV_STATE_PARTS`, what 128 states
/// of a 2.9B model need under a 2 GiB binding) give the same bits as one buffer: the
/// demo model's 6 layers in 3 parts against 1, prefill and decode logits, whole states read
/// back, a fork fed further, a state written across engines, and states kept through the
/// rebuilds that grow the slots.
#[test]
fn states_in_several_buffers_are_the_same_states() {
    let file = "rwkv7-demo-6x256-Q4_K_M.gguf";
    let mut split = (*gpu()).clone();
    split.tuning.state_parts = Some(3);
    let path = models().join(file);
    let mut parts =
        rwkv_engine::Engine::load_on(std::sync::Arc::new(split), &path, &Default::default())
            .unwrap();
    let mut whole = engine(file);
    let toks: Vec<u32> = (0..40).map(|i| (i * 37 % 5000 + 11) as u32).collect();
    let (a, b) = toks.split_at(30);
    let (sa, sb) = (whole.prefill(a).unwrap(), parts.prefill(a).unwrap());
    let state = whole.read_state_vec(sa).unwrap();
    assert_eq!(parts.read_state_vec(sb).unwrap(), state, "prefill state");
    // A fork fed one token at a time (decode) in the split engine, the parent in the other.
    let fork = parts.fork_state(sb).unwrap();
    for (i, t) in b.iter().enumerate() {
        let w = last_logits(&mut whole, sa, &[*t]);
        let p = last_logits(&mut parts, fork, &[*t]);
        assert_eq!(w, p, "decode step {i}");
    }
    assert_eq!(
        parts.read_state_vec(sb).unwrap(),
        state,
        "the parent is untouched"
    );
    // A state written into the split engine continues as in the other.
    let moved = parts.new_state().unwrap();
    parts
        .write_state(moved, &whole.read_state_vec(sa).unwrap())
        .unwrap();
    assert_eq!(
        last_logits(&mut parts, moved, &[5]),
        last_logits(&mut whole, sa, &[5])
    );
    // Enough states to grow the slots (graph rebuilds): the first ones are kept.
    let kept = parts.read_state_vec(fork).unwrap();
    let more: Vec<StateId> = (0..40).map(|_| parts.new_state().unwrap()).collect();
    assert_eq!(parts.read_state_vec(fork).unwrap(), kept);
    assert_eq!(parts.read_state_vec(sb).unwrap(), state);
    assert!(parts
        .read_state_vec(more[39])
        .unwrap()
        .iter()
        .all(|&v| v == 0.0));
}

/// Issue 33, item 4: an id kept after `free_state` is refused everywhere, even once its
/// slot (the free list hands the last freed slot out first) holds another state, and the
/// other state is neither read nor changed through it.
#[test]
fn a_freed_state_id_never_reaches_the_state_that_reuses_its_slot() {
    let r = Reference::load("tiny");
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let stale = eng.prefill(&r.tokens[..10]).unwrap();
    eng.free_state(stale).unwrap();
    let live = eng.prefill(&r.tokens[10..20]).unwrap();
    assert_eq!(eng.live_states(), 1);
    assert_ne!(stale, live, "a new state never gets a freed state's id");
    let kept = eng.read_state_vec(live).unwrap();

    let zeros = vec![0.0; eng.state_len()];
    let mut buf = vec![0.0; eng.state_len()];
    let tokens = [r.tokens[0]];
    let attempts = [
        ("read", eng.read_state(stale, &mut buf)),
        ("write", eng.write_state(stale, &zeros)),
        ("fork", eng.fork_state(stale).map(drop)),
        (
            "forward",
            eng.forward(
                &[SeqInput {
                    state: stale,
                    tokens: &tokens,
                    rows: Rows::Last,
                }],
                Want {
                    logits: true,
                    embeddings: false,
                },
                None,
            )
            .map(drop),
        ),
        ("free", eng.free_state(stale)),
    ];
    for (what, res) in attempts {
        match res {
            Err(EngineError::State { what: msg }) => {
                assert!(msg.contains("was freed"), "{what}: {msg}")
            }
            other => panic!("{what} through a stale id: {other:?}"),
        }
    }
    assert_eq!(eng.live_states(), 1, "the stale free freed nothing");
    assert_eq!(
        eng.read_state_vec(live).unwrap(),
        kept,
        "the live state is untouched"
    );
    eng.free_state(live).unwrap();
    assert_eq!(eng.live_states(), 0);
}

#[test]
fn embedding_cache_hits_are_identical_and_bounded() {
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let ids: Vec<Vec<u32>> = FIELD_TEXTS
        .iter()
        .map(|t| eng.tokenizer().encode(t))
        .collect();
    let inputs: Vec<EmbedInput> = ids.iter().map(|t| EmbedInput::new(t)).collect();
    let mut cache = EmbeddingCache::new(1 << 20, 1000);
    let (first, hits) = eng
        .embed_cached(&mut cache, &inputs, Pooling::Last)
        .unwrap();
    assert_eq!(hits, vec![false; 6]);
    let (second, hits) = eng
        .embed_cached(&mut cache, &inputs, Pooling::Last)
        .unwrap();
    assert_eq!(hits, vec![true; 6]);
    assert_eq!(first, second, "a hit returns the stored bits");
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.entries), (6, 6, 6));
    // Other pooling, other context: other keys (misses), not the cached vectors.
    let (_, hits) = eng
        .embed_cached(&mut cache, &inputs, Pooling::Mean)
        .unwrap();
    assert_eq!(hits, vec![false; 6]);
    let doc = eng.prefill(&[510, 3358, 41]).unwrap();
    let after: Vec<EmbedInput> = ids.iter().map(|t| EmbedInput::after(t, doc)).collect();
    let (ctx, hits) = eng.embed_cached(&mut cache, &after, Pooling::Last).unwrap();
    assert_eq!(hits, vec![false; 6]);
    assert!(max_abs(&ctx.data, &first.data) > 1e-2);
    // A fork holds the same contents: same identity, so hits.
    let doc2 = eng.fork_state(doc).unwrap();
    assert_eq!(eng.state_key(doc).unwrap(), eng.state_key(doc2).unwrap());
    let after2: Vec<EmbedInput> = ids.iter().map(|t| EmbedInput::after(t, doc2)).collect();
    let (ctx2, hits) = eng
        .embed_cached(&mut cache, &after2, Pooling::Last)
        .unwrap();
    assert_eq!(hits, vec![true; 6]);
    assert_eq!(ctx2, ctx);
    // Field analysis through the cache reports the hits.
    let fields: Vec<Field> = FIELD_TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("f{i}"), *t))
        .collect();
    let fa = eng
        .analyze_fields(
            &fields,
            Some(doc),
            &FieldOptions::default(),
            Some(&mut cache),
        )
        .unwrap();
    assert!(fa.fields.iter().all(|f| f.cached && f.time_share == 0.0));
    assert_eq!(fa.fields[2].embedding, ctx.row(2).unwrap());

    // A budget of three entries of the longest field: never exceeded, LRU evicted.
    let c = eng.config().n_embd;
    let longest = ids.iter().map(Vec::len).max().unwrap();
    let budget =
        3 * (4 * longest as u64 + 4 * c as u64 + rwkv_engine::analysis::ENTRY_OVERHEAD_BYTES);
    let mut small = EmbeddingCache::new(budget, 1000);
    for round in 0..2 {
        for inp in &inputs {
            eng.embed_cached(&mut small, std::slice::from_ref(inp), Pooling::Last)
                .unwrap();
            let s = small.stats();
            assert!(
                s.bytes <= budget,
                "round {round}: {} > {budget} bytes",
                s.bytes
            );
            assert!(s.entries <= 3);
        }
    }
    let s = small.stats();
    assert!(s.evictions >= 6, "{s:?}");
    assert_eq!(s.hits, 0, "cycling 6 keys through 3 LRU slots never hits");
    // An entry cap.
    let mut capped = EmbeddingCache::new(1 << 30, 2);
    eng.embed_cached(&mut capped, &inputs, Pooling::Last)
        .unwrap();
    assert_eq!(capped.stats().entries, 2);
}

#[test]
fn prefix_cache_reuses_the_longest_prefix_and_stays_bounded() {
    let r = Reference::load("tiny");
    let (a, b) = r.tokens.split_at(25);
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let state_bytes = 4 * eng.state_len() as u64;
    let mut cache = PrefixCache::new(1 << 30, 8);

    let p1 = eng.prefill_cached(&mut cache, a).unwrap();
    assert_eq!((p1.reused, p1.fed), (0, 25));
    let p2 = eng.prefill_cached(&mut cache, a).unwrap();
    assert_eq!((p2.reused, p2.fed), (25, 0));
    assert_ne!(p1.state, p2.state, "each call returns its own state");
    assert_eq!(
        eng.read_state_vec(p1.state).unwrap(),
        eng.read_state_vec(p2.state).unwrap(),
        "a hit is a copy of the computed state"
    );
    // A longer text sharing the prefix feeds only its tail.
    let p3 = eng.prefill_cached(&mut cache, &r.tokens).unwrap();
    assert_eq!((p3.reused, p3.fed), (25, 20));
    let want = eng.prefill(&r.tokens).unwrap();
    let d = max_abs(
        &eng.read_state_vec(p3.state).unwrap(),
        &eng.read_state_vec(want).unwrap(),
    );
    assert!(d < SPLIT_TOL, "resumed vs whole prefill state: max |Δ| {d}");
    // Modifying a returned state does not touch the cache.
    eng.feed(p2.state, b).unwrap();
    let p4 = eng.prefill_cached(&mut cache, a).unwrap();
    assert_eq!(
        eng.read_state_vec(p4.state).unwrap(),
        eng.read_state_vec(p1.state).unwrap()
    );
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.entries), (3, 1, 2));
    assert_eq!(cache.reused_tokens(), 75);

    // Chat-style: the caller caches the state after a turn; the next turn resumes there.
    let turn = eng.prefill(&r.tokens[..40]).unwrap();
    assert!(eng.cache_prefix(&mut cache, &r.tokens[..40], turn).unwrap());
    let p5 = eng.prefill_cached(&mut cache, &r.tokens).unwrap();
    assert_eq!(p5.reused, 45, "the full text was cached by p3");
    let p6 = eng.prefill_cached(&mut cache, &r.tokens[..42]).unwrap();
    assert_eq!(p6.reused, 40);

    // Bounds: two entries' worth of bytes, then an entry cap of 2.
    let per = state_bytes + rwkv_engine::analysis::PREFIX_NODE_BYTES * 10;
    let mut small = PrefixCache::new(2 * per, 100);
    for i in 0..5usize {
        let p = eng
            .prefill_cached(&mut small, &r.tokens[i..i + 10])
            .unwrap();
        eng.free_state(p.state).unwrap();
        let s = small.stats();
        assert!(s.bytes <= 2 * per && s.entries <= 2, "{s:?}");
    }
    assert_eq!(small.stats().evictions, 3);
    // The least recently used went first: the last two are still there.
    let p = eng.prefill_cached(&mut small, &r.tokens[4..14]).unwrap();
    assert_eq!(p.reused, 10);
    let p = eng.prefill_cached(&mut small, &r.tokens[0..10]).unwrap();
    assert_eq!(p.reused, 0);
    small.release(&mut eng).unwrap();
    assert_eq!(small.stats().entries, 0);

    // A cache belongs to one engine.
    let mut other = engine("rwkv7-tiny-Q8_0.gguf");
    let e = other.prefill_cached(&mut cache, a).unwrap_err();
    assert!(matches!(e, EngineError::State { .. }), "{e}");
    cache.release(&mut eng).unwrap();
}

#[test]
fn bad_state_files_are_clear_errors() {
    let r = Reference::load("tiny");
    let dir = scratch("analysis-bad");
    let mut eng = engine("rwkv7-tiny.safetensors");
    let st = eng.prefill(&r.tokens[..5]).unwrap();
    let good = dir.join("good.rwkvstate");
    eng.save_state(st, 5, &good).unwrap();
    let bytes = std::fs::read(&good).unwrap();

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "magic"),
        ("magic", [b"GGUF".as_slice(), &bytes[4..]].concat(), "magic"),
        (
            "version",
            {
                let mut b = bytes.clone();
                b[8] = 2;
                b
            },
            "version 2",
        ),
        (
            "layout",
            {
                let mut b = bytes.clone();
                b[48] = 7;
                b
            },
            "layout 7",
        ),
        ("header", bytes[..100].to_vec(), "truncated"),
        ("truncated", bytes[..bytes.len() - 4].to_vec(), "truncated"),
        (
            "padded",
            [bytes.as_slice(), &[0u8; 4]].concat(),
            "truncated or padded",
        ),
        (
            "corrupt",
            {
                let mut b = bytes.clone();
                let n = b.len();
                b[n - 10] ^= 0x40;
                b
            },
            "checksum",
        ),
        (
            "count",
            {
                let mut b = bytes.clone();
                b[80..88].copy_from_slice(&u64::MAX.to_le_bytes());
                b
            },
            "values",
        ),
    ];
    for (name, data, needle) in cases {
        let p = dir.join(format!("{name}.rwkvstate"));
        std::fs::write(&p, &data).unwrap();
        let e = eng.load_state(&p).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, EngineError::Malformed { .. }), "{name}: {msg}");
        assert!(msg.contains(needle), "{name}: `{msg}` lacks `{needle}`");
        assert!(msg.contains(&p.display().to_string()), "{name}: {msg}");
    }
    assert!(matches!(
        eng.load_state(dir.join("missing.rwkvstate")).unwrap_err(),
        EngineError::Io { .. }
    ));

    // Another model (the Q8_0 GGUF of the same weights has another tensor table).
    let mut other = engine("rwkv7-tiny-Q8_0.gguf");
    assert_ne!(other.info().fingerprint, eng.info().fingerprint);
    let e = other.load_state(&good).unwrap_err();
    assert!(matches!(e, EngineError::State { .. }), "{e}");
    assert!(e.to_string().contains("another model"), "{e}");
    // The good file still loads where it belongs.
    let back = eng.load_state(&good).unwrap();
    assert_eq!(
        eng.read_state_vec(back).unwrap(),
        eng.read_state_vec(st).unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
