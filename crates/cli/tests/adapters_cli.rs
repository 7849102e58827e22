#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! `rwkv inspect` on adapter / state files and `rwkv merge`, run as the binary.

mod support;

use support::rwkv;

#[test]
fn inspect_describes_a_gguf_lora() {
    let (ok, out, err) = rwkv(&[
        "inspect",
        "--json",
        "tests/fixtures/adapters/rwkv7-small.lora.gguf",
    ]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    // make_adapters.py: small = rank 8, alpha 2r, every attention and FFN matrix of 4 layers.
    assert_eq!(j["kind"], "lora");
    assert_eq!(j["format"], "Gguf");
    assert_eq!(j["rank"], 8);
    assert_eq!(j["alpha"], 16.0);
    assert_eq!(j["default_scale"], 2.0);
    assert_eq!(j["n_embd"], 256);
    assert_eq!(j["ffn_dim"], 1024);
    assert_eq!(j["min_layers"], 4);
    let targets = j["targets"].as_object().unwrap();
    assert_eq!(targets.len(), 6);
    assert!(targets
        .values()
        .all(|l| l == &serde_json::json!([0, 1, 2, 3])));
}

#[test]
fn inspect_describes_a_state_and_says_pth_has_no_alpha() {
    let (ok, out, err) = rwkv(&["inspect", "tests/fixtures/adapters/rwkv7-tiny.state.pth"]);
    assert!(ok, "{err}");
    assert!(out.contains("2 layers × 2 heads × 64×64"), "{out}");
    let (ok, out, err) = rwkv(&["inspect", "tests/fixtures/adapters/rwkv7-tiny.lora.pth"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("rank          16") && out.contains("default scale 1"),
        "{out}"
    );
}

#[test]
fn merge_writes_a_loadable_model_and_refuses_a_mismatch() {
    let dir = std::env::temp_dir().join(format!("rwkv-merge-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("m.safetensors");
    let out_s = out.to_str().unwrap();
    let (ok, stdout, err) = rwkv(&[
        "merge",
        "--base",
        "../shared/fixtures/rwkv7-tiny.safetensors",
        "--lora",
        "tests/fixtures/adapters/rwkv7-tiny.lora.pth:2",
        "--out",
        out_s,
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("12 adapted"), "{stdout}");
    assert!(err.contains("scale 2"), "{err}");
    let (ok, desc, err) = rwkv(&["inspect", out_s]);
    assert!(ok, "{err}");
    assert!(desc.contains("2 layers, C 128"), "{desc}");
    // The tiny adapter on the small model: refused, naming the tensor; nothing written.
    let bad = dir.join("bad.safetensors");
    let (ok, _, err) = rwkv(&[
        "merge",
        "--base",
        "../shared/fixtures/rwkv7-small-Q4_K_M.gguf",
        "--lora",
        "tests/fixtures/adapters/rwkv7-tiny.lora.gguf",
        "--out",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("blocks.0.att.receptance") && err.contains("256×256"),
        "{err}"
    );
    assert!(!bad.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// With no adapter, `rwkv merge` converts a model: the demo GGUF (Q4_K_M) as BlinkDL's
/// SafeTensors (its blocks decoded to F32) scores the held-out text as the GGUF does.
#[test]
fn merge_without_adapters_converts_the_model() {
    let dir = std::env::temp_dir().join(format!("rwkv-convert-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = "assets/models/rwkv7-demo-6x256-Q4_K_M.gguf";
    let out = dir.join("demo.safetensors");
    let out_s = out.to_str().unwrap();
    let (ok, stdout, err) = rwkv(&["merge", "--base", base, "--out", out_s]);
    assert!(ok, "{err}");
    assert!(stdout.contains("0 adapted"), "{stdout}");
    let (ok, desc, err) = rwkv(&["inspect", "--json", out_s]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&desc).unwrap();
    assert_eq!(j["format"], "SafeTensors", "{desc}");
    let ppl = |model: &str, name: &str| -> f64 {
        let json = dir.join(name);
        let (ok, _, err) = rwkv(&[
            "perplexity",
            "--model",
            model,
            "--text",
            "benchmarks/perplexity/lincoln-1861-1862.txt",
            "--ctx",
            "64",
            "--chunks",
            "2",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        j["perplexity"].as_f64().unwrap()
    };
    let (a, b) = (ppl(base, "gguf.json"), ppl(out_s, "st.json"));
    assert!(a.is_finite() && a > 1.0, "{a}");
    assert!(
        (a - b).abs() / a < 1e-3,
        "perplexity {a} (GGUF) against {b} (converted)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
