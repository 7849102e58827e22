//! `rwkv perplexity` on the tiny fixture (lavapipe in CI): a run writes its base file and
//! JSON; the same model scored against that base has no divergence and the same
//! perplexity; a truncated base, a foreign file and too short an input are refused with
//! errors that name the file or the numbers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::Value;

fn scratch() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rwkv-ppl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn perplexity_base_file_and_kl_divergence_round_trip() {
    let dir = scratch();
    let tiny = support::tiny();
    let tokens: Vec<u32> = (0..100u32).map(|i| (i * 7919 + 13) % 5000).collect();
    let tok = dir.join("tokens.json");
    std::fs::write(&tok, serde_json::to_string(&tokens).unwrap()).unwrap();
    let (base, out, kl) = (
        dir.join("base.kld"),
        dir.join("ppl.json"),
        dir.join("kl.json"),
    );
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let m = s(&tiny);

    let (ok, stdout, stderr) = support::rwkv(&[
        "perplexity",
        "--model",
        &m,
        "--tokens",
        &s(&tok),
        "--ctx",
        "16",
        "--kl-divergence-base",
        &s(&base),
        "--json",
        &s(&out),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("Final estimate: PPL = "), "{stdout}");
    let p = json(&out);
    let ppl = p["perplexity"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{p}");
    assert_eq!(p["chunks"], 6, "100 tokens / 16");
    assert_eq!(p["scored"], 6 * 7, "16 − 1 − 8 positions a chunk");

    let (ok, stdout, stderr) = support::rwkv(&[
        "perplexity",
        "--model",
        &m,
        "--kl-divergence",
        &s(&base),
        "--json",
        &s(&kl),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("Same top p: 100.000"), "{stdout}");
    let k = json(&kl);
    assert!(
        (k["perplexity"].as_f64().unwrap() / ppl - 1.0).abs() < 1e-4,
        "{k}"
    );
    assert!(
        k["kl"]["kld"]["value"].as_f64().unwrap().abs() < 1e-3,
        "{k}"
    );

    // The one-token path reads the same base and agrees with the prefill path.
    let (ok, stdout, stderr) = support::rwkv(&[
        "perplexity",
        "--model",
        &m,
        "--kl-divergence",
        &s(&base),
        "--decode",
        "--chunks",
        "2",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("one-token passes"), "{stdout}");

    // A truncated base file.
    let bytes = std::fs::read(&base).unwrap();
    let cut = dir.join("cut.kld");
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    let (ok, _, stderr) =
        support::rwkv(&["perplexity", "--model", &m, "--kl-divergence", &s(&cut)]);
    assert!(!ok);
    assert!(
        stderr.contains("cut.kld") && stderr.contains("truncated"),
        "{stderr}"
    );

    // A file that is not a base file at all.
    let (ok, _, stderr) =
        support::rwkv(&["perplexity", "--model", &m, "--kl-divergence", &s(&tok)]);
    assert!(!ok);
    assert!(
        stderr.contains("tokens.json") && stderr.contains("_logits_"),
        "{stderr}"
    );

    // Too few tokens for two chunks.
    let (ok, _, stderr) = support::rwkv(&[
        "perplexity",
        "--model",
        &m,
        "--tokens",
        &s(&tok),
        "--ctx",
        "64",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("100 tokens") && stderr.contains("at least 128"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
