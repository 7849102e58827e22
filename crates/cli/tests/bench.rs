//! `rwkv bench` and `rwkv profile` on the tiny fixture (lavapipe in CI): the report has
//! every key scripts rely on, the quality check passes, and a deliberately perturbed
//! weight makes it FAIL. Timings are printed, never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::fixtures;

fn bench(
    model: &std::path::Path,
    reference: &std::path::Path,
    json: &std::path::Path,
    md: &std::path::Path,
) -> std::process::Output {
    let mut cmd = support::rwkv_cmd();
    cmd.args(["bench", "--model"])
        .arg(model)
        .args([
            "--title",
            "ci",
            "--change",
            "test",
            "--prefill",
            "16,40",
            "--gen",
            "4",
            "--repeat",
            "1",
        ])
        .args(["--load-repeat", "1", "--fields", "2", "--reference"])
        .arg(reference)
        .arg("--json")
        .arg(json)
        .arg("--md")
        .arg(md);
    support::output(cmd)
}

#[test]
fn bench_reports_every_figure_and_catches_a_perturbed_weight() {
    let dir = std::env::temp_dir().join(format!("rwkv-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = fixtures().join("rwkv7-tiny-Q8_0.gguf");
    let reference = dir.join("reference.json");
    let (json, md) = (dir.join("run.json"), dir.join("benchmarks.md"));
    let out = bench(&model, &reference, &json, &md);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "adapter",
        "backend",
        "commit",
        "command",
        "load_ms",
        "ttft_ms",
        "decode_tok_s",
        "doc_state_ms",
        "fields_ms",
        "tokenize_us",
        "gpu_mem_mib",
    ] {
        assert!(!r[key].is_null(), "report lacks `{key}`: {r}");
    }
    // Opening the process's device is a figure of its own, beside the loads onto it.
    assert!(r["figures"]["device_open_ms"]["median"].as_f64().unwrap() > 0.0);
    // Decode with the chat's sampler, beside greedy decode.
    assert!(
        r["figures"]["decode_chat_tok_s"]["median"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(r["model"]["n_layer"], 2);
    assert_eq!(r["model"]["n_embd"], 128);
    assert!(r["model"]["types"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t.as_str().unwrap().ends_with("Q8_0")));
    assert!(
        r["prefill_tok_s"]["16"].as_f64().unwrap() > 0.0
            && r["prefill_tok_s"]["40"].as_f64().unwrap() > 0.0
    );
    assert_eq!(r["quality"]["pass"], true, "{}", r["quality"]);
    assert_eq!(r["quality"]["top1"], true);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("## ci") && text.contains("| test |") && text.contains("PASS"),
        "{text}"
    );

    // Perturb one weight matrix (the Q8_0 scales of layer 0's receptance) and bench the
    // copy against the original's reference: the quality check must FAIL.
    let file = rwkv_engine::ModelFile::open(&model).unwrap();
    let t = file
        .tensors()
        .iter()
        .find(|t| t.name == "blk.0.time_mix_receptance.weight")
        .unwrap()
        .clone();
    let mut bytes = std::fs::read(&model).unwrap();
    for b in 0..t.len / 34 {
        // f16 scale d at the start of each 34-byte block: flip its sign bit.
        bytes[t.offset + b * 34 + 1] ^= 0x80;
    }
    let bad = dir.join("perturbed.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let out = bench(&bad, &reference, &dir.join("bad.json"), &md);
    assert!(
        !out.status.success(),
        "a perturbed model must fail the quality check"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("bad.json")).unwrap()).unwrap();
    assert_eq!(r["quality"]["pass"], false, "{}", r["quality"]);
    assert!(std::fs::read_to_string(&md).unwrap().contains("**FAIL**"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A decode-sized pass (3 tokens: the fused kernels) and a prefill-sized one (20 tokens:
/// the per-op kernels) both name every op they ran, per layer, in the JSON and the SVG.
#[test]
fn profile_names_every_op_and_layer() {
    let decode = [
        "wkv_fused",
        "ln_shift",
        "att.lora1",
        "att.lora2",
        "att.rkv",
        "layer_norm",
        "att.output",
        "ffn.value",
        "head",
        "embed",
    ];
    let prefill = [
        "wkv",
        "wkv_prep",
        "wkv_out",
        "ln_shift",
        "att.w1",
        "att.a2",
        "att.key",
        "ffn.value",
        "head",
        "embed",
    ];
    for (tokens, want) in [("3", &decode[..]), ("20", &prefill[..])] {
        profile_case(tokens, want);
    }
}

fn profile_case(tokens: &str, want: &[&str]) {
    let dir =
        std::env::temp_dir().join(format!("rwkv-profile-test-{}-{tokens}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("profile.json");
    let svg = dir.join("profile.svg");
    let mut cmd = support::rwkv_cmd();
    cmd.args(["profile", "--model"])
        .arg(fixtures().join("rwkv7-tiny-Q8_0.gguf"))
        .args(["--tokens", tokens, "--json"])
        .arg(&json)
        .arg("--svg")
        .arg(&svg);
    let out = support::output(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ops: Vec<&str> = p["by_op"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for op in want {
        assert!(
            ops.contains(op),
            "{tokens} tokens: profile lacks `{op}`: {ops:?}"
        );
    }
    let layers: Vec<&str> = p["by_layer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        layers.contains(&"layer 0") && layers.contains(&"layer 1"),
        "{layers:?}"
    );
    let pct: f64 = p["by_op"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["percent"].as_f64().unwrap())
        .sum();
    assert!((pct - 100.0).abs() < 0.5, "op shares sum to {pct}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("ffn.value"),
        "{}",
        &svg[..svg.len().min(200)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rwkv profile --wall`: a row for each op a decode token dispatches, with the GPU
/// profile's dispatch count, and the whole token's time.
#[test]
fn profile_wall_costs_every_decode_op() {
    let dir = std::env::temp_dir().join(format!("rwkv-wall-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("wall.json");
    let mut cmd = support::rwkv_cmd();
    cmd.args([
        "profile", "--wall", "--gen", "4", "--repeat", "1", "--model",
    ])
    .arg(fixtures().join("rwkv7-tiny-Q8_0.gguf"))
    .arg("--json")
    .arg(&json)
    // Subgroups on lavapipe too, so the one-token graph is the GPUs' (see below).
    .env("RWKV_SUBGROUPS", "1");
    let out = support::output(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(w["token_us"].as_f64().unwrap() > 0.0);
    assert!(w["host_us"].as_f64().unwrap() > 0.0);
    let ops: Vec<(&str, u64)> = w["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["op"].as_str().unwrap(), o["dispatches"].as_u64().unwrap()))
        .collect();
    // One `ln_shift` a token, the first block's time mix's: the first block's channel-mix
    // value runs the second block's in its last workgroups (`RWKV_LN_NEXT`), and each
    // block's time-mix output its channel mix's (Q8_0 keys make no x of their own).
    for (op, n) in [
        ("ln_shift", 1),
        ("wkv_fused", 2),
        ("ffn.value", 2),
        ("head", 1),
    ] {
        assert!(ops.contains(&(op, n)), "no {op} × {n}: {ops:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
