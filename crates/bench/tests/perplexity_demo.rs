#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! Nothing lost, in CI: the trained demo model's perplexity and KL divergence on held-out
//! public-domain text (`benchmarks/perplexity/lincoln-1861-1862.txt`), computed here on
//! whatever adapter the test finds (lavapipe in CI), against the figures stored in
//! `benchmarks/perplexity/ci-figures.json`.
//!
//! Four chunks of 512 tokens (1,020 scored positions) through the prefill path, one
//! (255 positions) through the one-token path (a pass per token is slow on lavapipe):
//! - the F16 SafeTensors, prefill path: perplexity, and the base file the others score
//!   against;
//! - the bundled Q4_K_M GGUF, prefill path, and the one-token (decode) path with and
//!   without 8-bit activations (`Tuning::mv_q8`): perplexity, mean KL divergence, top-1
//!   agreement;
//! - the F16 SafeTensors through the decode path: its KL divergence against its own
//!   prefill is the decode kernels' rounding alone.
//!
//! Tolerances (stated in the JSON, checked here): perplexity within 0.1 % of the stored
//! figure, mean KL within 3 % + 2e-5 nats, top-1 agreement within 1 point (2.5 of the
//! one-token run's 255 positions: 8-bit x rounds a little differently with and without
//! subgroups). A run's standard error is larger (±4 % on perplexity over 1,020
//! positions), but every figure is deterministic up to float summation order, which
//! moves perplexity by ≤ 0.03 % (subgroup and workgroup-memory kernels on lavapipe); a
//! kernel that changes the math moves it by more than the tolerance. After a deliberate
//! change, `RWKV_PERPLEXITY_WRITE=1` rewrites the JSON (then record the before / after
//! in benchmarks.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rwkv_bench::perplexity::{self, PerplexityReport, Scoring};
use rwkv_engine::gpu::{AdapterChoice, GpuContext, Tuning};
use rwkv_engine::{Engine, LoadOptions};
use serde_json::{json, Value};

const CTX: usize = 512;
const CHUNKS: usize = 4;
const DECODE_CHUNKS: usize = 1;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn engine(gpu: &Arc<GpuContext>, path: &Path) -> Engine {
    Engine::load_on(gpu.clone(), path, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn gpu(q8: Option<bool>) -> Arc<GpuContext> {
    let mut t = Tuning::from_env();
    t.mv_q8 = q8;
    Arc::new(GpuContext::with_tuning(&AdapterChoice::Auto, t).expect("a GPU adapter (lavapipe)"))
}

fn figures(r: &PerplexityReport) -> Value {
    let mut v = json!({ "perplexity": r.perplexity, "scored": r.scored });
    if let Some(k) = &r.kl {
        v["kld"] = json!(k.kld.value);
        v["same_top_p"] = json!(k.same_top_p.value);
    }
    v
}

fn check(name: &str, got: &Value, want: &Value, tol: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let rel = f(tol, "perplexity_rel");
    let (g, w) = (f(got, "perplexity"), f(want, "perplexity"));
    if ((g - w) / w).abs() > rel || g.is_nan() {
        bad.push(format!(
            "{name}: perplexity {g:.4}, stored {w:.4} (tolerance {:.2} %)",
            rel * 100.0
        ));
    }
    if got.get("kld").is_some() {
        let (g, w) = (f(got, "kld"), f(want, "kld"));
        let t = f(tol, "kld_rel") * w.abs() + f(tol, "kld_abs");
        if (g - w).abs() > t || g.is_nan() {
            bad.push(format!(
                "{name}: mean KLD {g:.6}, stored {w:.6} (tolerance {t:.6})"
            ));
        }
        let (g, w) = (f(got, "same_top_p"), f(want, "same_top_p"));
        if (g - w).abs() > f(tol, "same_top_p_abs") || g.is_nan() {
            bad.push(format!("{name}: same top p {g:.4}, stored {w:.4}"));
        }
    }
    if got["scored"] != want["scored"] {
        bad.push(format!(
            "{name}: {} positions scored, stored {}",
            got["scored"], want["scored"]
        ));
    }
    bad
}

#[test]
fn demo_model_perplexity_and_kl_divergence_hold() {
    let models = root().join("../shared/models");
    let f16 = models.join("rwkv7-demo-6x256.safetensors");
    let q4 = root().join("assets/models/rwkv7-demo-6x256-Q4_K_M.gguf");
    let stored_path = root().join("benchmarks/perplexity/ci-figures.json");
    let text = std::fs::read_to_string(root().join("benchmarks/perplexity/lincoln-1861-1862.txt"))
        .expect("the held-out text");
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let dir = std::env::temp_dir().join(format!("rwkv-ppl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("f16.kld");
    let prefill = Scoring {
        limit: Some(CHUNKS),
        decode: false,
    };
    let decode = Scoring {
        limit: Some(DECODE_CHUNKS),
        decode: true,
    };
    let zero = &mut |e: &mut Engine| e.new_state();

    let default_gpu = gpu(None);
    let mut got = serde_json::Map::new();
    {
        let mut e = engine(&default_gpu, &f16);
        let tokens = e.tokenizer().encode(text);
        let r = perplexity::perplexity(&mut e, &tokens, CTX, prefill, zero, Some(&base)).unwrap();
        got.insert("f16_prefill".into(), figures(&r));
        let r = perplexity::kl_divergence(&mut e, &base, decode, zero).unwrap();
        got.insert("f16_decode".into(), figures(&r));
    }
    {
        let mut e = engine(&default_gpu, &q4);
        let r = perplexity::kl_divergence(&mut e, &base, prefill, zero).unwrap();
        got.insert("q4_k_m_prefill".into(), figures(&r));
        let r = perplexity::kl_divergence(&mut e, &base, decode, zero).unwrap();
        got.insert("q4_k_m_decode".into(), figures(&r));
    }
    {
        let mut e = engine(&gpu(Some(false)), &q4);
        let r = perplexity::kl_divergence(&mut e, &base, decode, zero).unwrap();
        got.insert("q4_k_m_decode_f32_x".into(), figures(&r));
    }
    std::fs::remove_dir_all(&dir).ok();
    let got = Value::Object(got);
    eprintln!("{}", serde_json::to_string_pretty(&got).unwrap());

    // The decode path of F16 differs from its prefill path by rounding alone.
    let f16_decode_kld = got["f16_decode"]["kld"].as_f64().unwrap();
    assert!(
        f16_decode_kld < 1e-3,
        "F16 decode vs prefill KLD {f16_decode_kld}"
    );

    if std::env::var_os("RWKV_PERPLEXITY_WRITE").is_some() {
        let tolerance = json!({
            "perplexity_rel": 0.001, "kld_rel": 0.03, "kld_abs": 2e-5, "same_top_p_abs": 0.01
        });
        let doc = json!({
            "about": "benchmarks/perplexity/lincoln-1861-1862.txt, ctx 512, 4 chunks (the \
                      *_decode runs: 1); base = the F16 SafeTensors' prefill; \
                      crates/bench/tests/perplexity_demo.rs",
            "tolerance": tolerance,
            "figures": got,
        });
        std::fs::write(
            &stored_path,
            serde_json::to_string_pretty(&doc).unwrap() + "\n",
        )
        .unwrap();
        return;
    }
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(&stored_path).unwrap()).unwrap();
    let mut bad = Vec::new();
    for (name, want) in stored["figures"].as_object().unwrap() {
        bad.extend(check(name, &got[name], want, &stored["tolerance"]));
    }
    assert!(
        bad.is_empty(),
        "perplexity figures moved:\n{}",
        bad.join("\n")
    );
}
