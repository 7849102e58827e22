//! `rwkv batch` on the bundled demo model. `--check`: a step of B sequences gives each the
//! logits it gets alone (the 8-token kernels of 2–8-token passes included), and a
//! mismatch fails the command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

/// `rwkv batch ARGS --model <demo>`: its stdout, after checking that it succeeded.
fn batch(args: &[&str]) -> String {
    let model = support::repo().join("assets/models/rwkv7-demo-6x256-Q4_K_M.gguf");
    let out = support::rwkv_cmd()
        .arg("batch")
        .args(args)
        .arg("--model")
        .arg(&model)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rwkv batch {args:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

#[test]
fn batched_steps_match_each_sequence_alone() {
    let stdout = batch(&["--check", "--batch", "1,3,8,11"]);
    for b in [1, 3, 8, 11] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("B = {b:4}:")))
            .unwrap_or_else(|| panic!("no line for B = {b}:\n{stdout}"));
        assert!(line.ends_with("PASS"), "{line}");
        assert!(
            line.contains(&format!("top token the same for {b}/{b}")),
            "{line}"
        );
    }
}

/// `rwkv batch --prompt N` times a burst of B prompts of N tokens beside one prompt of
/// their B × N tokens, after the decode steps of each size (figures not asserted).
#[test]
fn prompt_bursts_are_timed_beside_one_prompt() {
    let stdout = batch(&["--batch", "2", "--steps", "1", "--prompt", "5"]);
    let line = stdout
        .lines()
        .find(|l| l.contains("prompts of"))
        .unwrap_or_else(|| panic!("no prompt line:\n{stdout}"));
    assert!(
        line.starts_with("B =    2: 2 prompts of 5 tokens") && line.contains("one of 10 tokens"),
        "{line}"
    );
}
