//! Hostile input through the command layer (issue 14, part 5): each case gives the UI an
//! error it can show (`{ code, message, details }`), stores nothing half-done, and leaves
//! the app usable — the model still loaded, the next chat turn replying.

mod support;

use std::path::Path;

use rwkv_engine::format::{DType, MetaValue};
use rwkv_synth::gguf_write::{GgufTensorSpec, GgufWriter};
use serde_json::{json, Value};
use support::{scratch, test_app, Ipc, TestApp};
use tauri::async_runtime::block_on;

/// A chat turn still works: the app is usable.
fn still_usable(t: &TestApp) {
    let c = t.ok("chat_create", json!({}));
    let id = c["id"].as_str().expect("id");
    t.set_max_tokens(id, 4);
    let m = t.send(id, "Hello").expect("a turn after the error");
    assert_eq!(m["role"], "assistant");
    let info = t.ok("model_info", json!({}));
    assert!(info["path"].as_str().is_some(), "a model is loaded: {info}");
}

fn code(e: &Value) -> &str {
    e["code"].as_str().unwrap_or_default()
}

#[test]
fn a_10_mb_paste_is_refused_before_anything_is_stored() {
    let t = test_app("paste");
    t.load_default();
    let c = t.ok("chat_create", json!({}));
    let id = c["id"].as_str().expect("id");
    let line = "All work and no play makes Jack a dull boy. ";
    let paste = line.repeat((10 << 20) / line.len() + 1);
    assert!(paste.len() >= 10 << 20);
    let e = t.send(id, &paste).expect_err("too long");
    assert_eq!(code(&e), "too_long", "{e}");
    assert!(e["message"]
        .as_str()
        .unwrap_or_default()
        .contains("document"));
    assert_eq!(e["details"]["bytes"], paste.len());
    // Nothing was stored, not even the user message.
    let chat = t.ok("chat_get", json!({ "id": id }));
    assert_eq!(chat["messages"], json!([]));
    still_usable(&t);
}

#[test]
fn binary_empty_and_non_utf8_files_are_not_documents() {
    let t = test_app("docs");
    t.load_default();
    let dir = scratch("docs-files");
    let cases: [(&str, Vec<u8>, &str); 3] = [
        // A binary (an ELF header and zeros), Latin-1 text, an empty file.
        (
            "bin",
            b"\x7fELF\x02\x01\x01\0\0\0\xff\xfe".repeat(100),
            "not_text",
        ),
        (
            "latin1.txt",
            b"caf\xe9 cr\xe8me br\xfbl\xe9e".to_vec(),
            "not_text",
        ),
        ("empty.txt", Vec::new(), "bad_request"),
    ];
    for (name, bytes, want) in cases {
        let p = dir.join(name);
        std::fs::write(&p, &bytes).expect("write");
        t.allow(&p);
        // The documents view reads the file, then creates the document from its text.
        let e = match t.call("read_text_file", json!({ "path": p })) {
            Err(e) => e,
            Ok(text) => t.err("doc_create", json!({ "name": name, "text": text })),
        };
        assert_eq!(code(&e), want, "{name}: {e}");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(msg.contains(name) || want == "bad_request", "{name}: {msg}");
    }
    assert_eq!(t.ok("doc_list", json!({})), json!([]));
    still_usable(&t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A valid GGUF of another architecture (llama), as llama.cpp writes its metadata.
fn llama_gguf(path: &Path) {
    let meta = [
        ("general.architecture", MetaValue::String("llama".into())),
        ("general.name", MetaValue::String("tiny llama".into())),
        ("llama.block_count", MetaValue::U32(1)),
        ("llama.embedding_length", MetaValue::U32(8)),
        ("llama.attention.head_count", MetaValue::U32(2)),
        ("llama.context_length", MetaValue::U32(64)),
    ]
    .map(|(k, v)| (k.to_string(), v));
    let tensors = ["token_embd.weight", "blk.0.attn_q.weight", "output.weight"]
        .map(|n| GgufTensorSpec {
            name: n.into(),
            ne: vec![8, 8],
            dtype: DType::F32,
        })
        .to_vec();
    let mut w = GgufWriter::create(path, &meta, tensors).expect("create");
    for _ in 0..3 {
        w.write_tensor_data(&[0u8; 256]).expect("data");
    }
    w.finish().expect("finish");
}

#[test]
fn a_llama_gguf_is_refused_and_the_model_stays() {
    let t = test_app("llama");
    let before = t.load_default();
    let dir = scratch("llama-file");
    let p = dir.join("tiny-llama.gguf");
    llama_gguf(&p);
    t.allow(&p);
    let e = t.load(Some(&p)).expect_err("not RWKV-7");
    assert_eq!(code(&e), "not_rwkv7", "{e}");
    assert!(
        e["message"].as_str().unwrap_or_default().contains("llama"),
        "{e}"
    );
    assert_eq!(t.ok("model_info", json!({}))["path"], before["path"]);
    still_usable(&t);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_model_that_disappears_before_its_load_runs_is_an_io_error() {
    let t = test_app("vanish");
    let before = t.load_default();
    let dir = scratch("vanish-file");
    let copy = dir.join("copy.gguf");
    std::fs::copy(support::model(), &copy).expect("copy");
    t.allow(&copy);
    // Hold the engine thread, queue the load behind it, remove the file, release.
    let (engine, ipc): (_, &Ipc) = (t.engine(), &t);
    let (release, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (started, running) = std::sync::mpsc::channel::<()>();
        let hold = s.spawn(|| {
            block_on(engine.run(move |_| {
                let _ = started.send(());
                let _ = wait.recv();
                Ok(())
            }))
        });
        // The engine thread is busy with the hold job before any load is queued.
        running.recv().expect("the hold job runs");
        let load = s.spawn(|| ipc.load(Some(&copy)));
        // Whether the load is queued before or after the removal, it runs after it.
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::remove_file(&copy).expect("remove");
        release.send(()).expect("release");
        hold.join().expect("hold").expect("hold job");
        let e = load
            .join()
            .expect("load thread")
            .expect_err("the file is gone");
        assert_eq!(code(&e), "io", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("copy.gguf"),
            "{e}"
        );
    });
    assert_eq!(t.ok("model_info", json!({}))["path"], before["path"]);
    still_usable(&t);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_loads_in_a_row_both_finish_and_the_last_one_wins() {
    let t = test_app("twice");
    let dir = scratch("twice-file");
    let copy = dir.join("second.gguf");
    std::fs::copy(support::model(), &copy).expect("copy");
    t.allow(&copy);
    let (engine, ipc): (_, &Ipc) = (t.engine(), &t);
    let (release, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (started, running) = std::sync::mpsc::channel::<()>();
        let hold = s.spawn(|| {
            block_on(engine.run(move |_| {
                let _ = started.send(());
                let _ = wait.recv();
                Ok(())
            }))
        });
        // The engine thread is busy with the hold job before any load is queued.
        running.recv().expect("the hold job runs");
        // Queued in this order (a second is ample for a command to send its job).
        let first = s.spawn(|| ipc.load(None));
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let second = s.spawn(|| ipc.load(Some(&copy)));
        std::thread::sleep(std::time::Duration::from_millis(1000));
        release.send(()).expect("release");
        hold.join().expect("hold").expect("hold job");
        let a = first.join().expect("first").expect("first load");
        let b = second.join().expect("second").expect("second load");
        assert!(a["path"]
            .as_str()
            .is_some_and(|p| !p.contains("second.gguf")));
        assert!(b["path"]
            .as_str()
            .is_some_and(|p| p.contains("second.gguf")));
    });
    // Jobs run in order: the second load replaced the first.
    let info = t.ok("model_info", json!({}));
    assert!(
        info["path"]
            .as_str()
            .is_some_and(|p| p.contains("second.gguf")),
        "{info}"
    );
    still_usable(&t);
    let _ = std::fs::remove_dir_all(&dir);
}
