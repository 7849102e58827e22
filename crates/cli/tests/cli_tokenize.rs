#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! `rwkv tokenize` / `rwkv detokenize` as a user runs them, against the reference ids of
//! `shared/fixtures/tokenizer_ref.json` (BlinkDL's `rwkv` package).

mod support;

use anyhow::{anyhow, ensure, Result};
use serde_json::Value;

fn rwkv(args: &[&str]) -> Result<(bool, Vec<u8>, String)> {
    let mut cmd = support::rwkv_cmd();
    cmd.args(args);
    let out = support::output(cmd);
    Ok((
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn tokenize_json_matches_reference_and_detokenize_inverts_it() -> Result<()> {
    let reference: Value = serde_json::from_slice(&std::fs::read(
        support::fixtures().join("tokenizer_ref.json"),
    )?)?;
    let gguf = support::fixtures()
        .join("rwkv7-tiny-Q8_0.gguf")
        .display()
        .to_string();
    let cases = reference["cases"]
        .as_array()
        .ok_or_else(|| anyhow!("no cases"))?;
    ensure!(!cases.is_empty());
    for case in cases {
        let text = case["text"].as_str().ok_or_else(|| anyhow!("no text"))?;
        for model in [None, Some(gguf.as_str())] {
            let mut args = vec!["tokenize", "--json"];
            if let Some(m) = model {
                args.extend(["--model", m]);
            }
            args.push(text);
            let (ok, stdout, stderr) = rwkv(&args)?;
            assert!(ok, "{stderr}");
            let got: Value = serde_json::from_slice(&stdout)?;
            assert_eq!(
                got["ids"], case["ids"],
                "{} (model {model:?})",
                case["name"]
            );
            assert_eq!(
                got["count"].as_u64(),
                case["ids"].as_array().map(|a| a.len() as u64)
            );

            let ids: Vec<String> = got["ids"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.to_string())
                .collect();
            let mut args: Vec<&str> = vec!["detokenize"];
            args.extend(ids.iter().map(String::as_str));
            let (ok, stdout, stderr) = rwkv(&args)?;
            assert!(ok, "{stderr}");
            assert_eq!(stdout, text.as_bytes(), "{}: detokenize", case["name"]);
        }
    }
    Ok(())
}

#[test]
fn tokenize_prints_ids_then_escaped_pieces() -> Result<()> {
    let (ok, stdout, _) = rwkv(&["tokenize", "Hello, world\n😀"])?;
    assert!(ok);
    let out = String::from_utf8(stdout)?;
    let mut lines = out.lines();
    // "Hello" "," " world" "\n" then 😀 as F0 9F | 98 | 80 (tokenizer_ref.json, emoji case).
    assert_eq!(lines.next(), Some("33155 45 40213 11 3319 153 129"));
    let rest: Vec<&str> = lines.collect();
    assert_eq!(rest[2], " 40213  \" world\"");
    assert_eq!(rest[3], "    11  \"\\n\"");
    assert_eq!(rest[4], "  3319  \"\\xf0\\x9f\"");
    Ok(())
}

#[test]
fn detokenize_rejects_unknown_ids_naming_them() -> Result<()> {
    let (ok, _, stderr) = rwkv(&["detokenize", "33155", "65530"])?;
    assert!(!ok);
    assert!(stderr.contains("65530"), "{stderr}");
    let (ok, _, stderr) = rwkv(&["detokenize", "12,abc"])?;
    assert!(!ok);
    assert!(stderr.contains("abc"), "{stderr}");
    Ok(())
}
