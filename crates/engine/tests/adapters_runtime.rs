#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! The committed test adapters (`tests/fixtures/adapters`) applied at run time
//! (`Engine::load_lora` / `set_active_loras`, the base kept in its file encoding) on the
//! F16 (tiny SafeTensors), Q8_0 (tiny GGUF) and Q4_K_M (small GGUF) bases, against:
//! BlinkDL's `rwkv` package on the merged weights (`make_adapters.py`), the engine on the
//! `merge_to_safetensors` file, and llama.cpp's own run-time LoRA (`make_llama_refs.py`);
//! initial states from `new_state_from`, alone and with the LoRA; two chats that switch
//! adapters without a reload.
//!
//! Tolerances: 2e-3 against the fp32 package and against the merged file: all are f32,
//! differing in summation order (`W x + s·B(A x)` at run time vs `(W + s·B·A) x`) through
//! 2–4 layers of a random model, as in peers.rs. 0.4 against llama.cpp, whose Q8_0 /
//! K-quant dot products quantize activations: its own spread against the fp32 package on
//! these weights is 0.10–0.30 (`comparisons` in `rwkv7-*.adapters.llama.json`), 10× below
//! what the adapter moves (4.4–4.9).

mod support;

use std::path::PathBuf;

use rwkv_engine::api::merge_to_safetensors;
use rwkv_engine::{Engine, InitState, LoadOptions, LoraAdapter, ModelFile, Rows, SeqInput, Want};
use support::*;

const TOL: f32 = 2e-3;
const LLAMA_TOL: f32 = 0.4;

fn dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/adapters"
    ))
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir().join(name)).unwrap()).unwrap()
}

fn tokens(j: &serde_json::Value) -> Vec<u32> {
    j["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn top20(j: &serde_json::Value, run: &str) -> Vec<Vec<(u32, f32)>> {
    j["top20"][run]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
                .collect()
        })
        .collect()
}

fn last_logits(model: &str, run: &str) -> Vec<f32> {
    rwkv_engine::npy::read_f32(dir().join(format!(
        "rwkv7-{model}.adapters.ref.{run}.last_logits.f32.npy"
    )))
    .unwrap()
    .1
}

fn lora(model: &str, ext: &str) -> LoraAdapter {
    LoraAdapter::open(dir().join(format!("rwkv7-{model}.lora.{ext}"))).unwrap()
}

#[test]
fn run_time_lora_matches_the_package_the_merged_file_and_llama_cpp() {
    let scratch = scratch("adapters-runtime");
    // (model, base file, refs from make_adapters.py for this base?)
    for (model, base_file, package_refs) in [
        ("tiny", "rwkv7-tiny.safetensors", true),
        ("tiny", "rwkv7-tiny-Q8_0.gguf", false),
        ("small", "rwkv7-small-Q4_K_M.gguf", true),
    ] {
        let what = format!("{model} on {base_file}");
        let refs = json(&format!("rwkv7-{model}.adapters.ref.json"));
        let llama = json(&format!("rwkv7-{model}.adapters.llama.json"));
        let toks = tokens(&refs);
        let mut eng = engine(base_file);
        let vocab = eng.config().vocab_size;
        let base_logits = eng.logits_all(&toks, None).unwrap();
        // Every format of the adapter, at the scale that makes 2·B·A.
        for (ext, scale) in [("gguf", None), ("safetensors", None), ("pth", Some(2.0))] {
            let a = lora(model, ext);
            let s = scale.unwrap_or_else(|| a.default_scale());
            let id = eng.load_lora(&a).unwrap();
            eng.set_active_loras(&[(id, s)]).unwrap();
            let logits = eng.logits_all(&toks, None).unwrap();
            let w = format!("{what} + {ext} LoRA");
            if package_refs {
                check_top20(&w, &logits, vocab, &top20(&refs, "lora"), TOL);
                let d = max_abs(
                    &logits[(toks.len() - 1) * vocab..],
                    &last_logits(model, "lora"),
                );
                assert!(d < TOL, "{w}: last logits |Δ| {d}");
            }
            if llama["base"] == base_file {
                check_top20(&w, &logits, vocab, &top20(&llama, "rwkv_lora"), TOL);
                check_llama(&w, &logits, vocab, &top20(&llama, "llama_lora"), LLAMA_TOL);
            }
            eng.set_active_loras(&[]).unwrap();
            eng.unload_lora(id).unwrap();
            if ext == "gguf" {
                // The same adapter merged into a file and loaded as a model.
                let out = scratch.join(format!(
                    "{model}-{}.safetensors",
                    base_file.replace('.', "_")
                ));
                let base = ModelFile::open(fixtures().join(base_file)).unwrap();
                merge_to_safetensors(&base, &[(&a, s)], &out).unwrap();
                let mut m = Engine::load_on(gpu(), &out, &LoadOptions::default()).unwrap();
                let merged = m.logits_all(&toks, None).unwrap();
                let d = max_abs(&logits, &merged);
                assert!(d < TOL, "{w}: run time vs merged file |Δ| {d}");
                for t in 0..toks.len() {
                    let r = t * vocab..(t + 1) * vocab;
                    assert_eq!(
                        top20_of(&logits[r.clone()])[0],
                        top20_of(&merged[r])[0],
                        "{w}: top-1 at {t}"
                    );
                }
            }
        }
        // With the set emptied, the base again, exactly.
        assert_eq!(
            eng.logits_all(&toks, None).unwrap(),
            base_logits,
            "{what}: base after unload"
        );
    }
}

#[test]
fn initial_state_alone_and_with_the_lora_match_the_package() {
    for (model, base_file) in [
        ("tiny", "rwkv7-tiny.safetensors"),
        ("small", "rwkv7-small-Q4_K_M.gguf"),
    ] {
        let refs = json(&format!("rwkv7-{model}.adapters.ref.json"));
        let toks = tokens(&refs);
        let mut eng = engine(base_file);
        let vocab = eng.config().vocab_size;
        let init = InitState::open(dir().join(format!("rwkv7-{model}.state.pth"))).unwrap();
        let st = eng.new_state_from(&init).unwrap();
        let logits = eng.logits_all(&toks, Some(st)).unwrap();
        check_top20(
            &format!("{model} from state"),
            &logits,
            vocab,
            &top20(&refs, "state"),
            TOL,
        );
        let a = lora(model, "gguf");
        let id = eng.load_lora(&a).unwrap();
        eng.set_active_loras(&[(id, a.default_scale())]).unwrap();
        let logits = eng.logits_all(&toks, Some(st)).unwrap();
        let what = format!("{model} LoRA + state");
        check_top20(&what, &logits, vocab, &top20(&refs, "lora_state"), TOL);
        let d = max_abs(
            &logits[(toks.len() - 1) * vocab..],
            &last_logits(model, "lora_state"),
        );
        assert!(d < TOL, "{what}: last logits |Δ| {d}");
    }
}

/// Two chats on one loaded model, taking turns: chat A with the LoRA, chat B on the base
/// from the initial state; the active set switches before every turn (no reload). Each
/// chat's last logits must be its own reference, as if it had run alone.
#[test]
fn two_chats_switch_adapters_without_a_reload() {
    let model = "tiny";
    let refs = json(&format!("rwkv7-{model}.adapters.ref.json"));
    let toks = tokens(&refs);
    let mut eng = engine("rwkv7-tiny.safetensors");
    let a = lora(model, "pth");
    let id = eng.load_lora(&a).unwrap();
    let init = InitState::open(dir().join(format!("rwkv7-{model}.state.safetensors"))).unwrap();
    let chat_a = eng.new_state().unwrap();
    let chat_b = eng.new_state_from(&init).unwrap();
    let want = Want {
        logits: true,
        embeddings: false,
    };
    let (mut last_a, mut last_b) = (Vec::new(), Vec::new());
    for turn in toks.chunks(9) {
        eng.set_active_loras(&[(id, 2.0)]).unwrap();
        let out = eng
            .forward(
                &[SeqInput {
                    state: chat_a,
                    tokens: turn,
                    rows: Rows::Last,
                }],
                want,
                None,
            )
            .unwrap();
        last_a = out.logits.into_iter().next().unwrap();
        eng.set_active_loras(&[]).unwrap();
        let out = eng
            .forward(
                &[SeqInput {
                    state: chat_b,
                    tokens: turn,
                    rows: Rows::Last,
                }],
                want,
                None,
            )
            .unwrap();
        last_b = out.logits.into_iter().next().unwrap();
    }
    let da = max_abs(&last_a, &last_logits(model, "lora"));
    let db = max_abs(&last_b, &last_logits(model, "state"));
    assert!(da < TOL, "chat A (LoRA) last logits |Δ| {da}");
    assert!(db < TOL, "chat B (state, no LoRA) last logits |Δ| {db}");
    // And they are different chats: the two references differ by whole units.
    assert!(max_abs(&last_a, &last_b) > 0.5);
}
