//! The command layer through Tauri's IPC (mock runtime): argument names as the frontend
//! sends them, `{ code, message, details }` errors, and the real engine on the bundled model
//! (lavapipe in CI: `apt-get install mesa-vulkan-drivers`, `WGPU_BACKEND=vulkan`).

mod support;

use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{
    CancelToken, Engine, GenerateOptions, LoadOptions, Rows, SeqInput, StopReason, Want,
};
use serde_json::{json, Value};
use support::{model, test_app};
use tauri::ipc::InvokeResponseBody;

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampler: SamplerOptions {
            stop_strings: vec!["\n\n".into()],
            ..SamplerOptions::greedy()
        },
        constraint: None,
    }
}

#[test]
fn errors_reach_the_ui_as_code_message_details() {
    let t = test_app("errors");
    assert_eq!(t.ok("model_info", json!({})), Value::Null);
    let e = t.err("chat_get", json!({ "id": "../../etc/passwd" }));
    assert_eq!(e["code"], "bad_request");
    assert!(e["message"]
        .as_str()
        .is_some_and(|m| m.contains("not an id")));
    let e = t.err("chat_get", json!({ "id": "00aa" }));
    assert_eq!(e["code"], "not_found");
    assert_eq!(e["details"]["id"], "00aa");
    // Sending without a model: a readable error, and the turn is taken back.
    let chat = t.ok("chat_create", json!({}));
    let id = chat["id"].as_str().expect("id");
    let e = t.err(
        "chat_send",
        json!({ "id": id, "text": "Hello", "onEvent": "__CHANNEL__:2" }),
    );
    assert_eq!(e["code"], "no_model");
    assert_eq!(t.ok("chat_get", json!({ "id": id }))["messages"], json!([]));
    // Invalid sampling settings are refused by the engine's own validation.
    let mut bad = serde_json::to_value(greedy(10)).expect("json");
    bad["sampler"]["top_p"] = json!(1.5);
    let e = t.err("chat_settings", json!({ "id": id, "settings": bad }));
    assert_eq!(e["code"], "invalid_input");
    assert!(e["message"].as_str().is_some_and(|m| m.contains("top_p")));
}

#[test]
fn user_paths_must_be_chosen_first() {
    let t = test_app("scope");
    for (cmd, args) in [
        ("read_text_file", json!({ "path": "/etc/passwd" })),
        (
            "write_text_file",
            json!({ "path": "/tmp/x.csv", "contents": "a" }),
        ),
        (
            "model_load",
            json!({ "path": "/etc/passwd", "adapter": null, "onProgress": "__CHANNEL__:1" }),
        ),
        ("doc_import", json!({ "path": "/etc/passwd" })),
    ] {
        assert_eq!(t.err(cmd, args)["code"], "scope", "{cmd}");
    }
    let p = t.dir().join("note.txt");
    std::fs::create_dir_all(t.dir()).expect("dir");
    std::fs::write(&p, "Dear Sir,").expect("write");
    t.allow(&p);
    assert_eq!(
        t.ok("read_text_file", json!({ "path": p })),
        json!("Dear Sir,")
    );
    // Issue 33, item 6: chosen to be opened, it cannot be overwritten.
    let e = t.err(
        "write_text_file",
        json!({ "path": p, "contents": "overwritten" }),
    );
    assert_eq!(e["code"], "scope", "{e}");
    assert_eq!(std::fs::read_to_string(&p).expect("read"), "Dear Sir,");
}

/// The app's chat turns equal one live engine state fed the same template: snapshots store
/// and restore the state exactly, regenerate and edit resume from the right one.
#[test]
fn chat_turns_resume_from_snapshots_like_one_live_state() {
    let t = test_app("chat");
    let info = t.load_default();
    assert_eq!(info["config"]["n_layer"], 6);
    assert_eq!(info["config"]["n_embd"], 256);

    // Reference: the engine alone, one state across both turns.
    let opts = greedy(12);
    let mut eng = Engine::load(model(), &LoadOptions::default()).expect("reference engine");
    let st = eng.new_state().expect("state");
    let c = CancelToken::new();
    let r1 = eng
        .generate_text(
            st,
            "User: Where is the ship?\n\nAssistant:",
            &opts,
            &c,
            &mut |_| true,
        )
        .expect("turn 1");
    if !matches!(
        r1.stats.stop,
        StopReason::StopToken | StopReason::StopString
    ) {
        let last = *r1.tokens.last().expect("a token");
        let seq = SeqInput {
            state: st,
            tokens: &[last],
            rows: Rows::None,
        };
        eng.forward(
            &[seq],
            Want {
                logits: false,
                embeddings: false,
            },
            None,
        )
        .expect("feed last");
    }
    let r2 = eng
        .generate_text(
            st,
            "\n\nUser: And the captain?\n\nAssistant:",
            &opts,
            &c,
            &mut |_| true,
        )
        .expect("turn 2");
    drop(eng);

    let chat = t.ok("chat_create", json!({}));
    let id = chat["id"].as_str().expect("id").to_string();
    t.ok("chat_settings", json!({ "id": id, "settings": opts }));
    let m1 = t.ok(
        "chat_send",
        json!({ "id": id, "text": "Where is the ship?", "onEvent": "__CHANNEL__:3" }),
    );
    assert_eq!(m1["text"], json!(r1.text));
    let m2 = t.ok(
        "chat_send",
        json!({ "id": id, "text": "And the captain?", "onEvent": "__CHANNEL__:4" }),
    );
    assert_eq!(
        m2["text"],
        json!(r2.text),
        "turn 2 from the stored state = the live state"
    );
    assert_eq!(m2["stats"]["resumed"], true);
    assert!(
        m2["stats"]["decode_tok_s"]
            .as_f64()
            .is_some_and(|x| x > 0.0)
            || r2.tokens.len() < 2
    );
    assert!(m2["stats"]["ttft_ms"].as_f64().is_some_and(|x| x > 0.0));

    // Regenerate the second reply (index 3): same state, greedy, same text; nothing grows.
    let m2b = t.ok(
        "chat_regenerate",
        json!({ "id": id, "index": 3, "onEvent": "__CHANNEL__:5" }),
    );
    assert_eq!(m2b["text"], m2["text"]);
    assert_ne!(m2b["id"], m2["id"]);
    let chat = t.ok("chat_get", json!({ "id": id }));
    assert_eq!(chat["messages"].as_array().map(Vec::len), Some(4));

    // Edit the first message: the chat restarts from the zero state with the new text.
    let r1e = {
        let mut eng = Engine::load(model(), &LoadOptions::default()).expect("reference engine");
        let st = eng.new_state().expect("state");
        eng.generate_text(
            st,
            "User: Who is at the door?\n\nAssistant:",
            &opts,
            &c,
            &mut |_| true,
        )
        .expect("edited turn")
    };
    let m1e = t.ok(
        "chat_edit",
        json!({ "id": id, "index": 0, "text": "Who is at the door?", "onEvent": "__CHANNEL__:6" }),
    );
    assert_eq!(m1e["text"], json!(r1e.text));
    let chat = t.ok("chat_get", json!({ "id": id }));
    assert_eq!(chat["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(chat["messages"][0]["text"], "Who is at the door?");
    // The list shows it, titled by its first message.
    let list = t.ok("chat_list", json!({}));
    assert_eq!(list[0]["messages"], 2);
}

#[test]
fn a_truncated_gguf_is_a_readable_error_and_the_model_stays() {
    let t = test_app("broken");
    t.load_default();
    std::fs::create_dir_all(t.dir()).expect("dir");
    let broken = t.dir().join("broken.gguf");
    let bytes = std::fs::read(model()).expect("model");
    std::fs::write(&broken, &bytes[..1_000_000]).expect("write");
    t.allow(&broken);
    let e = t.err(
        "model_load",
        json!({ "path": broken, "adapter": null, "onProgress": "__CHANNEL__:1" }),
    );
    assert_eq!(e["code"], "malformed_file", "{e}");
    assert!(e["message"]
        .as_str()
        .is_some_and(|m| m.contains("broken.gguf")));
    assert!(e["details"]["path"]
        .as_str()
        .is_some_and(|p| p.ends_with("broken.gguf")));
    let info = t.ok("model_info", json!({}));
    assert!(info["path"]
        .as_str()
        .is_some_and(|p| p.ends_with("Q4_K_M.gguf")));
}

#[test]
fn documents_feed_fields_and_export_their_state() {
    let t = test_app("docs");
    t.load_default();
    let text = "My dear Sister, I write to you from the deck of the Prospect, three days out of Liverpool.";
    let doc = t.ok("doc_create", json!({ "name": "Letter", "text": text }));
    assert!(doc["tokens"].as_u64().is_some_and(|n| n > 10));
    assert!(doc["tok_s"].as_f64().is_some_and(|x| x > 0.0));
    let id = doc["id"].as_str().expect("id").to_string();
    assert_eq!(t.ok("doc_list", json!({}))[0]["name"], "Letter");

    let fields = json!([
        { "label": "Title", "text": "A letter from the sea" },
        { "label": "Place", "text": "Liverpool" },
        { "label": "Mood", "text": "homesick and hopeful" },
    ]);
    let body = t
        .call_raw("fields_run", json!({ "document": id, "fields": fields }))
        .expect("fields_run");
    let InvokeResponseBody::Raw(bytes) = body else {
        panic!("fields_run must answer with raw bytes");
    };
    let h = u32::from_le_bytes(bytes[..4].try_into().expect("len")) as usize;
    let meta: Value = serde_json::from_slice(&bytes[4..4 + h]).expect("meta");
    assert_eq!(meta["dim"], 256);
    let labels: Vec<&str> = meta["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .map(|f| f["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["Title", "Place", "Mood"]);
    assert_eq!(meta["resumed"], true, "the document's state file was used");
    assert_eq!(meta["with_document"], true);
    assert_eq!(
        meta["fields"][0]["embedding"],
        json!([]),
        "vectors travel as bytes"
    );
    let sim = &meta["similarity"];
    assert!((sim[0][0].as_f64().expect("f") - 1.0).abs() < 1e-4);
    assert_eq!(sim[0][1], sim[1][0]);
    let start = (4 + h).div_ceil(4) * 4;
    let v: Vec<f32> = bytes[start..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    assert_eq!(v.len(), 3 * 256);
    assert!(v.iter().all(|x| x.is_finite()));
    assert_ne!(v[..256], v[256..512], "different fields, different vectors");

    // Export, then import the state file as a new document.
    let out = t.dir().join("letter.rwkvstate");
    t.allow_write(&out);
    t.ok("doc_export", json!({ "id": id, "path": out }));
    // Chosen in the save dialog: it cannot be read back until it is opened.
    let e = t.err("doc_import", json!({ "path": out }));
    assert_eq!(e["code"], "scope", "{e}");
    t.allow(&out);
    let imported = t.ok("doc_import", json!({ "path": out }));
    assert_eq!(imported["name"], "letter", "named after the file");
    assert_eq!(imported["tokens"], doc["tokens"]);
    // A chat about the document starts from its state.
    let chat = t.ok("doc_chat", json!({ "id": id }));
    assert_eq!(chat["document"]["name"], "Letter");
    t.ok("doc_delete", json!({ "id": id }));
    assert_eq!(
        t.ok("doc_list", json!({})).as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn a_benchmark_run_is_measured_charted_and_kept() {
    let t = test_app("bench");
    t.load_default();
    let dash = t.ok(
        "bench_run",
        json!({ "options": { "title": "ci", "prompt_tokens": 32, "decode_tokens": 4 }, "onProgress": "__CHANNEL__:7" }),
    );
    let run = &dash["runs"][0];
    assert_eq!(run["title"], "ci");
    assert!(run["load_ms"].as_f64().is_some_and(|x| x > 0.0));
    assert!(
        run["prefill_tok_s"]["32"].as_f64().is_some_and(|x| x > 0.0),
        "{run}"
    );
    assert!(run["decode_tok_s"].as_f64().is_some_and(|x| x > 0.0));
    // The CLI's charts: SVG from rwkv_bench::charts.
    assert!(dash["history_svg"]
        .as_str()
        .is_some_and(|s| s.contains("<svg")));
    assert!(dash["profile_svg"]
        .as_str()
        .is_some_and(|s| s.contains("<svg")));
    // The model is back after the run.
    assert!(t.ok("model_info", json!({}))["path"].is_string());
    let again = t.ok("bench_dashboard", json!({}));
    assert_eq!(again["runs"].as_array().map(Vec::len), Some(1));
    let e = t.err(
        "bench_run",
        json!({ "options": { "title": "x", "prompt_tokens": 0, "decode_tokens": 4 }, "onProgress": "__CHANNEL__:8" }),
    );
    assert_eq!(e["code"], "bad_request");
}
