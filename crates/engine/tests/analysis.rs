#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! Document analysis against the peers and against the engine's own forward pass:
//! embeddings (fixtures of BlinkDL's `rwkv` package), batching, field analysis, and bad
//! input. States as files, forks and the caches are in `states.rs`.
//!
//! Tolerances:
//! - `EMB_TOL` (1e-3): the engine's hidden states vs the `rwkv` package's, as in
//!   `peers.rs` (fp32 on the GPU vs fp32 on the CPU, other summation orders, 45 tokens
//!   through a random model).
//! - `BATCH_TOL` (1e-4): the same sequence batched with others or alone; measured
//!   ≤ 5e-7 on lavapipe (only the packing of rows into tiles differs). 1e-4 leaves room
//!   for other devices' reduction orders, and still catches any mixing of sequences or
//!   states, which shows as differences of order 0.1.
//! - Exact (`assert_eq!`): where the same dispatches run on the same inputs (embed vs
//!   forward with the head).

mod support;

use rwkv_engine::analysis::{EmbedInput, Field, FieldOptions, Pooling, StateKey, MAX_FIELDS};
use rwkv_engine::{EngineError, LoadOptions, Rows};
use support::*;

const EMB_TOL: f32 = 1e-3;
const BATCH_TOL: f32 = 1e-4;

#[test]
fn embed_matches_the_rwkv_package_and_forward() {
    let r = Reference::load("tiny");
    let t = r.tokens.len();
    for (file, implementation) in [
        ("rwkv7-tiny.safetensors", "rwkv"),
        ("rwkv7-tiny-Q8_0.gguf", "rwkv_deq_q8_0"),
    ] {
        let mut eng = engine(file);
        let c = eng.config().n_embd;
        let reference = npy(&format!(
            "rwkv7-tiny.ref.{implementation}.embeddings.f32.npy"
        ));
        assert_eq!(reference.len(), t * c);
        let emb = eng
            .embed(&[EmbedInput::new(&r.tokens)], Pooling::Last)
            .unwrap();
        assert_eq!((emb.len(), emb.dim), (1, c));
        let d = max_abs(emb.row(0).unwrap(), &reference[(t - 1) * c..]);
        eprintln!("{file}: last-token embedding vs {implementation}: max |Δ| {d}");
        assert!(d < EMB_TOL, "{file}: last-token embedding max |Δ| {d}");

        // The same rows computed by forward with the head: identical dispatches up to
        // ln_out, so identical bits.
        let (_, out) = forward_new(&mut eng, &r.tokens, Rows::Last);
        assert_eq!(out.logits[0].len(), eng.config().vocab_size);
        assert_eq!(emb.row(0).unwrap(), &out.embeddings[0][..], "{file}");

        // Mean pooling: the mean of the reference's 45 rows (each within EMB_TOL, so
        // their mean is too).
        let mean = eng
            .embed(&[EmbedInput::new(&r.tokens)], Pooling::Mean)
            .unwrap();
        let want: Vec<f32> = (0..c)
            .map(|j| (0..t).map(|i| reference[i * c + j]).sum::<f32>() / t as f32)
            .collect();
        let d = max_abs(mean.row(0).unwrap(), &want);
        assert!(d < EMB_TOL, "{file}: mean embedding max |Δ| {d}");
        assert!(
            max_abs(mean.row(0).unwrap(), emb.row(0).unwrap()) > 1e-2,
            "mean and last pooling should differ"
        );
    }
}

#[test]
fn batched_fields_equal_single_embeddings() {
    // Chunks of 16 tokens: six sequences of 1–17 tokens pack into shared passes and
    // the longer ones straddle chunk boundaries.
    let mut eng = engine_with(
        "rwkv7-tiny-Q8_0.gguf",
        &LoadOptions {
            max_chunk: 16,
            ..Default::default()
        },
    );
    let ids: Vec<Vec<u32>> = FIELD_TEXTS
        .iter()
        .map(|t| eng.tokenizer().encode(t))
        .collect();
    let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
    assert!(lens.iter().min() != lens.iter().max(), "lengths {lens:?}");
    let r = Reference::load("tiny");
    let doc = eng.prefill(&r.tokens[..30]).unwrap();
    let doc_before = eng.read_state_vec(doc).unwrap();
    for pooling in [Pooling::Last, Pooling::Mean] {
        for from in [None, Some(doc)] {
            let inputs: Vec<EmbedInput> =
                ids.iter().map(|t| EmbedInput { tokens: t, from }).collect();
            let batched = eng.embed(&inputs, pooling).unwrap();
            assert_eq!(batched.len(), 6);
            let mut worst = 0f32;
            for (i, inp) in inputs.iter().enumerate() {
                let single = eng.embed(std::slice::from_ref(inp), pooling).unwrap();
                let d = max_abs(batched.row(i).unwrap(), single.row(0).unwrap());
                worst = worst.max(d);
                assert!(
                    d < BATCH_TOL,
                    "{pooling:?} from {from:?}: field {i} ({} tokens): max |Δ| {d}",
                    lens[i]
                );
            }
            eprintln!("{pooling:?} from {from:?}: batched vs single max |Δ| {worst}");
        }
    }
    // Embedding after the document never changed it.
    assert_eq!(eng.read_state_vec(doc).unwrap(), doc_before);
    // In context of the document, a field's vector differs from the bare one.
    let bare = eng
        .embed(&[EmbedInput::new(&ids[0])], Pooling::Last)
        .unwrap();
    let ctx = eng
        .embed(&[EmbedInput::after(&ids[0], doc)], Pooling::Last)
        .unwrap();
    assert!(max_abs(&bare.data, &ctx.data) > 1e-2);
}

#[test]
fn many_inputs_run_in_bounded_groups() {
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let group = eng.embed_group_len();
    assert!((1..=64).contains(&group));
    let r = Reference::load("tiny");
    // More inputs than one group: 1–5 tokens each, taken along the reference text.
    let n = group + 6;
    let seqs: Vec<&[u32]> = (0..n)
        .map(|i| {
            let s = i % 40;
            &r.tokens[s..s + 1 + i % 5]
        })
        .collect();
    let inputs: Vec<EmbedInput> = seqs.iter().map(|s| EmbedInput::new(s)).collect();
    let all = eng.embed(&inputs, Pooling::Last).unwrap();
    assert_eq!(all.len(), n);
    for i in [0, group - 1, group, n - 1] {
        let one = eng.embed(&inputs[i..=i], Pooling::Last).unwrap();
        let d = max_abs(all.row(i).unwrap(), one.row(0).unwrap());
        assert!(d < BATCH_TOL, "input {i}: max |Δ| {d}");
    }
}

#[test]
fn field_analysis_returns_vectors_matrix_norms_and_timing() {
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let fields: Vec<Field> = FIELD_TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("f{i}"), *t))
        .collect();
    let r = Reference::load("tiny");
    let doc = eng.prefill(&r.tokens).unwrap();
    let fa = eng
        .analyze_fields(&fields, Some(doc), &FieldOptions::default(), None)
        .unwrap();
    assert!(fa.with_document);
    assert_eq!(fa.fields.len(), 6);
    // Each vector is the field embedded after the document.
    for (i, f) in fa.fields.iter().enumerate() {
        let ids = eng.tokenizer().encode(FIELD_TEXTS[i]);
        assert_eq!(f.tokens, ids.len());
        let one = eng
            .embed(&[EmbedInput::after(&ids, doc)], Pooling::Last)
            .unwrap();
        assert!(max_abs(&f.embedding, &one.data) < BATCH_TOL);
        let n = f.embedding.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((f.norm - n).abs() < 1e-3 * n);
    }
    // Cosine matrix: symmetric, unit diagonal, each entry from the vectors.
    for i in 0..6 {
        assert!((fa.similarity[i][i] - 1.0).abs() < 1e-5);
        for j in 0..6 {
            assert_eq!(fa.similarity[i][j], fa.similarity[j][i]);
            let (a, b) = (&fa.fields[i].embedding, &fa.fields[j].embedding);
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let want = dot / (fa.fields[i].norm * fa.fields[j].norm);
            assert!((fa.similarity[i][j] - want).abs() < 1e-4);
        }
    }
    let shares: f64 = fa.fields.iter().map(|f| f.time_share).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    assert!(fa.timing.total_ms >= fa.timing.forward_ms && fa.timing.forward_ms > 0.0);
    // Serializable for the app and --json.
    let json = serde_json::to_value(&fa).unwrap();
    assert_eq!(json["fields"][3]["label"], "f3");
    assert_eq!(json["model"], eng.info().fingerprint.to_hex());
    // Without the document the vectors differ.
    let bare = eng
        .analyze_fields(&fields, None, &FieldOptions::default(), None)
        .unwrap();
    assert!(!bare.with_document);
    assert!(max_abs(&bare.fields[0].embedding, &fa.fields[0].embedding) > 1e-2);
}

#[test]
fn bad_field_and_embed_input_are_clear_errors() {
    let mut eng = engine("rwkv7-tiny-Q8_0.gguf");
    let opts = FieldOptions::default();
    let invalid = |e: EngineError, needle: &str| {
        assert!(matches!(e, EngineError::InvalidInput { .. }), "{e}");
        assert!(e.to_string().contains(needle), "`{e}` lacks `{needle}`");
    };
    invalid(
        eng.analyze_fields(&[], None, &opts, None).unwrap_err(),
        "no fields",
    );
    invalid(
        eng.analyze_fields(&[Field::new("Title", "")], None, &opts, None)
            .unwrap_err(),
        "`Title` has an empty text",
    );
    invalid(
        eng.analyze_fields(&[Field::new(" ", "x")], None, &opts, None)
            .unwrap_err(),
        "empty label",
    );
    let many: Vec<Field> = (0..10_000)
        .map(|i| Field::new(format!("f{i}"), "word"))
        .collect();
    let t = std::time::Instant::now();
    invalid(
        eng.analyze_fields(&many, None, &opts, None).unwrap_err(),
        &format!("at most {MAX_FIELDS}"),
    );
    assert!(t.elapsed().as_secs() < 5, "rejected before any work");
    invalid(Field::parse("no equals sign").unwrap_err(), "Label=text");
    assert_eq!(
        Field::parse("Title=a=b").unwrap(),
        Field::new("Title", "a=b")
    );
    // A document state that does not exist.
    let gone = eng.new_state().unwrap();
    eng.free_state(gone).unwrap();
    let e = eng
        .analyze_fields(&[Field::new("T", "x")], Some(gone), &opts, None)
        .unwrap_err();
    assert!(matches!(e, EngineError::State { .. }), "{e}");
    // Embed: empty sequence, token id past the vocabulary, named by index.
    let ok = [1u32, 2, 3];
    invalid(
        eng.embed(&[EmbedInput::new(&ok), EmbedInput::new(&[])], Pooling::Last)
            .unwrap_err(),
        "input 1 has no tokens",
    );
    invalid(
        eng.embed(&[EmbedInput::new(&[70_000])], Pooling::Mean)
            .unwrap_err(),
        "token id 70000",
    );
    // No inputs: no rows.
    assert!(eng.embed(&[], Pooling::Last).unwrap().is_empty());
    // After all these errors the engine still works (and freed what it made).
    let e1 = eng.embed(&[EmbedInput::new(&ok)], Pooling::Last).unwrap();
    assert_eq!(e1.len(), 1);
    let _ = StateKey::of_values(&[0.0]);
}
