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

/// `rwkv perplexity args…`, which must succeed; its stdout.
fn measured(args: &[&str]) -> String {
    let (ok, stdout, stderr) = support::rwkv(&[&["perplexity"], args].concat());
    assert!(ok, "{args:?}: {stderr}");
    stdout
}

/// `rwkv perplexity args…`, which must fail with every one of `needles` in its message.
fn refused(args: &[&str], needles: &[&str]) {
    let (ok, _, stderr) = support::rwkv(&[&["perplexity"], args].concat());
    assert!(!ok, "{args:?} succeeded");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: no `{n}` in {stderr}");
    }
}

#[test]
fn perplexity_base_file_and_kl_divergence_round_trip() {
    let dir = scratch();
    let tokens: Vec<u32> = (0..100u32).map(|i| (i * 7919 + 13) % 5000).collect();
    let tok = dir.join("tokens.json");
    std::fs::write(&tok, serde_json::to_string(&tokens).unwrap()).unwrap();
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (base, tok) = (s(&dir.join("base.kld")), s(&tok));
    let (out, kl, dec) = (
        s(&dir.join("ppl.json")),
        s(&dir.join("kl.json")),
        s(&dir.join("decode.json")),
    );
    let m = s(&support::tiny());

    let stdout = measured(&[
        "--model",
        &m,
        "--tokens",
        &tok,
        "--ctx",
        "16",
        "--kl-divergence-base",
        &base,
        "--json",
        &out,
    ]);
    assert!(stdout.contains("Final estimate: PPL = "), "{stdout}");
    let p = json(out.as_ref());
    let ppl = p["perplexity"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{p}");
    assert_eq!(p["chunks"], 6, "100 tokens / 16");
    assert_eq!(p["scored"], 6 * 7, "16 − 1 − 8 positions a chunk");

    // The same model against its own base: no divergence, the same perplexity.
    let stdout = measured(&["--model", &m, "--kl-divergence", &base, "--json", &kl]);
    assert!(stdout.contains("Same top p: 100.000"), "{stdout}");
    let k = json(kl.as_ref());
    assert!(
        (k["perplexity"].as_f64().unwrap() / ppl - 1.0).abs() < 1e-4,
        "{k}"
    );
    assert!(
        k["kl"]["kld"]["value"].as_f64().unwrap().abs() < 1e-3,
        "{k}"
    );

    // The one-token path reads the same base and agrees with the prefill path.
    let stdout = measured(&[
        "--model",
        &m,
        "--kl-divergence",
        &base,
        "--decode",
        "--chunks",
        "2",
        "--json",
        &dec,
    ]);
    assert!(stdout.contains("one-token passes"), "{stdout}");
    let d = json(dec.as_ref());
    assert_eq!(d["scored"], 2 * 7);
    assert!(
        d["kl"]["kld"]["value"].as_f64().unwrap().abs() < 1e-3,
        "{d}"
    );

    // A truncated base file, a file that is not one, too few tokens for two chunks.
    let bytes = std::fs::read(&base).unwrap();
    let cut = s(&dir.join("cut.kld"));
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    refused(
        &["--model", &m, "--kl-divergence", &cut],
        &["cut.kld", "truncated"],
    );
    refused(
        &["--model", &m, "--kl-divergence", &tok],
        &["tokens.json", "_logits_"],
    );
    refused(
        &["--model", &m, "--tokens", &tok, "--ctx", "64"],
        &["100 tokens", "at least 128"],
    );
    std::fs::remove_dir_all(&dir).ok();
}
