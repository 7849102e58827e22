#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! `rwkv pull` end to end against a local HTTP server (the same server and download code
//! as crates/models' tests): by URL, by a catalog name from the user's catalog, and the
//! named errors on stderr with a non-zero status.

mod support;

#[path = "../../models/tests/support/server.rs"]
mod server;

use std::time::Duration;

use server::{body, Config, Server};
use sha2::{Digest, Sha256};

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn serve() -> (Server, Vec<u8>) {
    let data = body(300_000);
    let s = Server::start(Config {
        body: data.clone(),
        ranges: true,
        delay: Duration::from_millis(1),
        drop_first_after: None,
    });
    (s, data)
}

/// `rwkv pull ARGS` with the user's config and data folders inside `home`.
fn pull(home: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let mut cmd = support::rwkv_cmd();
    cmd.arg("pull").args(args);
    cmd.env("XDG_CONFIG_HOME", home.join("config"));
    cmd.env("XDG_DATA_HOME", home.join("data"));
    cmd.env_remove("RWKV_MODELS_DIR");
    let out = support::output(cmd);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn pull_url_prints_the_verified_file_path() {
    let (s, data) = serve();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("lib");
    let (ok, stdout, stderr) = pull(
        home.path(),
        &[
            &s.url,
            "--sha256",
            &sha(&data),
            "--dir",
            dir.to_str().unwrap(),
        ],
    );
    assert!(ok, "stderr: {stderr}");
    let path = dir.join("model.bin");
    assert_eq!(stdout.trim(), path.display().to_string());
    assert_eq!(sha(&std::fs::read(&path).unwrap()), sha(&data));
    assert!(stderr.contains("verified"), "{stderr}");
}

#[test]
fn pull_name_uses_the_user_catalog_and_the_xdg_data_dir() {
    let (s, data) = serve();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config/rwkv-studio");
    std::fs::create_dir_all(&cfg).unwrap();
    let entry = serde_json::json!({ "version": 1, "models": [{
        "name": "local-test", "family": "test", "parameters": "0", "encoding": "gguf-q8_0",
        "file_name": "local-test.gguf", "size_bytes": data.len(), "sha256": sha(&data),
        "urls": [s.url], "license": "MIT", "ram_bytes": null, "vram_bytes": null,
        "description": "test entry", "source": "https://example.invalid/test"
    }]});
    std::fs::write(cfg.join("catalog.json"), entry.to_string()).unwrap();
    let (ok, stdout, stderr) = pull(home.path(), &["local-test"]);
    assert!(ok, "stderr: {stderr}");
    let path = home.path().join("data/rwkv-studio/models/local-test.gguf");
    assert_eq!(stdout.trim(), path.display().to_string());
    assert_eq!(std::fs::read(&path).unwrap(), data);
}

#[test]
fn pull_errors_are_named_and_exit_non_zero() {
    let (s, data) = serve();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("lib");
    let d = dir.to_str().unwrap();
    let missing = s.url.replace("model.bin", "gone.gguf");
    let (ok, stdout, stderr) = pull(home.path(), &[&missing, "--dir", d]);
    assert!(!ok && stdout.is_empty());
    assert!(stderr.contains("404"), "{stderr}");

    let (ok, _, stderr) = pull(
        home.path(),
        &[&s.url, "--sha256", &"0".repeat(64), "--dir", d],
    );
    assert!(!ok);
    assert!(stderr.contains("checksum mismatch"), "{stderr}");
    assert!(!dir.join("model.bin").exists() && !dir.join("model.bin.part").exists());

    let (ok, _, stderr) = pull(home.path(), &["no-such-model", "--dir", d]);
    assert!(!ok);
    assert!(stderr.contains("no model named"), "{stderr}");
    let _ = data;
}
