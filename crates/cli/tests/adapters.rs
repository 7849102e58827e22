//! `--lora FILE[:SCALE]` and `--init-state FILE` on the CLI, with the test adapters of
//! tests/fixtures/adapters on the tiny fixture model: each changes the greedy text, a
//! scale of 0 is the base exactly, the GGUF adapter and the SafeTensors one (the same
//! matrices, scale alpha / rank = the file's default) agree, and a file that is not an
//! adapter ends the command with a message naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

fn fixture(name: &str) -> String {
    support::adapter_fixture(name).display().to_string()
}

fn model() -> String {
    support::tiny().display().to_string()
}

/// Greedy token ids of `rwkv generate` with `extra` arguments.
fn greedy(extra: &[&str]) -> Result<Vec<u32>, String> {
    let m = model();
    let mut args = vec![
        "generate",
        "--model",
        &m,
        "--prompt",
        "The quick brown fox",
        "-n",
        "12",
        "--greedy",
        "--print-ids",
    ];
    args.extend_from_slice(extra);
    let mut cmd = support::rwkv_cmd();
    cmd.args(&args);
    let out = support::output(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        return Err(stderr);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .unwrap_or_else(|| panic!("no ids in {stdout}"));
    Ok(serde_json::from_str(line.trim()).unwrap())
}

#[test]
fn lora_and_initial_state_flags_change_the_text() {
    let base = greedy(&[]).unwrap();
    let st = fixture("rwkv7-tiny.lora.safetensors");
    let gguf = fixture("rwkv7-tiny.lora.gguf");
    let with = greedy(&["--lora", &st]).unwrap();
    assert_ne!(with, base, "the adapter changes nothing");
    let zero = format!("{st}:0");
    assert_eq!(greedy(&["--lora", &zero]).unwrap(), base);
    assert_eq!(greedy(&["--lora", &gguf]).unwrap(), with);
    let init = fixture("rwkv7-tiny.state.safetensors");
    let from_init = greedy(&["--init-state", &init]).unwrap();
    assert_ne!(from_init, base, "the initial state changes nothing");
    let both = greedy(&["--lora", &st, "--init-state", &init]).unwrap();
    assert_ne!(both, from_init);
    assert_ne!(both, with);
}

#[test]
fn a_model_given_as_an_adapter_is_refused_by_name() {
    let m = model();
    let err = greedy(&["--lora", &m]).unwrap_err();
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("rwkv7-tiny.safetensors"), "{err}");
    let lora = fixture("rwkv7-tiny.lora.safetensors");
    let err = greedy(&["--init-state", &lora]).unwrap_err();
    assert!(err.contains("rwkv7-tiny.lora.safetensors"), "{err}");
}
