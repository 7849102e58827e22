#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! `rwkv inspect` end to end: the JSON report of the fixtures against their manifests
//! (written by gguf-py / make_model.py), and a bad file → non-zero exit naming it.

mod support;

use serde_json::Value;
use support::fixtures;

fn inspect_json(file: &str) -> anyhow::Result<Value> {
    let mut cmd = support::rwkv_cmd();
    cmd.args(["inspect", "--json"]).arg(fixtures().join(file));
    let out = support::output(cmd);
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[test]
fn gguf_report_matches_manifest() -> anyhow::Result<()> {
    let r = inspect_json("rwkv7-tiny-Q8_0.gguf")?;
    let m: Value = serde_json::from_slice(&std::fs::read(
        fixtures().join("rwkv7-tiny-Q8_0.gguf.json"),
    )?)?;
    assert_eq!(r["format"], "GGUF");
    assert_eq!(r["architecture"], "rwkv7");
    assert_eq!(r["gguf"]["data_offset"], m["data_offset"]);
    assert_eq!(r["config"]["n_layer"], 2);
    assert_eq!(r["config"]["lora"]["gate_g"], 32);
    assert_eq!(r["tokenizer"]["vocab_size"], 65536);
    assert_eq!(r["tokenizer"]["model"], "rwkv");
    let rows = r["tensors"].as_array().unwrap_or(&Vec::new()).clone();
    let want = m["tensors"].as_array().unwrap_or(&Vec::new()).clone();
    assert_eq!(rows.len(), 62);
    let mut total = 0;
    for (row, t) in rows.iter().zip(&want) {
        assert_eq!(row["name"], t["name"]);
        assert_eq!(row["dtype"], t["type"]);
        assert_eq!(row["offset"], t["offset"]);
        assert_eq!(row["bytes"], t["n_bytes"]);
        total += t["n_bytes"].as_u64().unwrap_or(0);
    }
    assert_eq!(r["totals"]["bytes"], total);
    assert_eq!(r["totals"]["by_type"]["Q8_0"]["tensors"], 14);
    Ok(())
}

#[test]
fn safetensors_report() -> anyhow::Result<()> {
    let r = inspect_json("rwkv7-tiny.safetensors")?;
    let m: Value = serde_json::from_slice(&std::fs::read(fixtures().join("rwkv7-tiny.json"))?)?;
    assert_eq!(r["format"], "SafeTensors");
    assert_eq!(r["naming"], "blinkdl");
    assert_eq!(r["config"]["n_embd"], m["n_embd"]);
    assert_eq!(r["totals"]["params"], m["n_params"]);
    assert_eq!(
        r["totals"]["by_type"]["F16"]["bytes"],
        2 * m["n_params"].as_u64().unwrap_or(0)
    );
    Ok(())
}

#[test]
fn bad_file_fails_naming_it() -> anyhow::Result<()> {
    let readme = fixtures().join("README.md");
    let mut cmd = support::rwkv_cmd();
    cmd.arg("inspect").arg(&readme);
    let out = support::output(cmd);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("README.md") && err.contains("malformed"),
        "{err}"
    );
    Ok(())
}
