//! `rwkv generate --greedy` on the demo model continues a fixed prompt as BlinkDL's `rwkv`
//! package does on the same (dequantized GGUF) weights: 32 tokens, reference made by
//! `scripts/reference/demo_greedy.py` on the GPU machine (`tests/data/demo_greedy_ref.json`
//! in the engine crate). A difference is allowed only after a near-tie: where the
//! reference's own top-1/top-2 gap is below what f32 summation order can move (the
//! engine's logits sit within 2e-3 of the package's on every fixture, so 1e-2 here).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

const NEAR_TIE: f64 = 1e-2;

#[test]
fn demo_model_continues_like_the_rwkv_package() {
    let root = support::repo();
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("crates/engine/tests/data/demo_greedy_ref.json"))
            .unwrap(),
    )
    .unwrap();
    let model = support::shared_models().join(reference["model"].as_str().unwrap());
    let prompt = reference["prompt"].as_str().unwrap();
    let want: Vec<u64> = reference["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let gaps: Vec<f64> = reference["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let mut cmd = support::rwkv_cmd();
    cmd.args(["generate", "--model"]).arg(&model).args([
        "--prompt",
        prompt,
        "-n",
        "32",
        "--greedy",
        "--print-ids",
    ]);
    let out = support::output(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rwkv generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<u64> = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(ids.len(), 32, "{stdout}");
    for (i, (&got, &w)) in ids.iter().zip(&want).enumerate() {
        if got != w {
            assert!(
                gaps[i] < NEAR_TIE,
                "token {i}: {got} vs the rwkv package's {w}, whose top-2 gap {} is not a near-tie",
                gaps[i]
            );
            eprintln!(
                "token {i}: near-tie (reference gap {}): {got} vs {w}; the rest may differ",
                gaps[i]
            );
            return;
        }
    }
    assert!(
        stdout.starts_with(prompt),
        "the prompt is echoed before the continuation"
    );
}
