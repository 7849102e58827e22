//! Adapters through the command layer (Tauri IPC, mock runtime, the real engine on the
//! bundled model): chats with different LoRAs and initial states each give what the engine
//! alone gives with that set, switching between them reloads nothing, each chat's set
//! survives a restart, and bad adapter files are readable errors that leave the app usable.
//!
//! The adapters are `tests/e2e/adapters/` (`make_adapters.py`): LoRA A rank 4 alpha 8 on
//! all six matrices, LoRA B rank 2 on the attention matrices, a state-tuned initial state.

mod support;

use std::path::{Path, PathBuf};

use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{CancelToken, Engine, GenerateOptions, InitState, LoadOptions, LoraAdapter};
use serde_json::{json, Value};
use support::{app_at, model, scratch, TestApp};

fn adapter(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/e2e/adapters")
        .join(name)
}

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

const PROMPT: &str = "Where is the ship?";

/// The reply the engine alone gives to the first turn with `loras` active, from `init` (or
/// the zero state): what the app's chat must reproduce.
fn reference(eng: &mut Engine, loras: &[(&Path, f32)], init: Option<&Path>) -> String {
    let mut active = Vec::new();
    for (p, s) in loras {
        let a = LoraAdapter::open(p).expect("LoRA reads");
        active.push((eng.load_lora(&a).expect("LoRA loads"), *s));
    }
    eng.set_active_loras(&active).expect("active set");
    let st = match init {
        Some(p) => eng
            .new_state_from(&InitState::open(p).expect("state reads"))
            .expect("state from init"),
        None => eng.new_state().expect("state"),
    };
    let prompt = format!("User: {PROMPT}\n\nAssistant:");
    let out = eng
        .generate_text(st, &prompt, &greedy(16), &CancelToken::new(), &mut |_| true)
        .expect("reference reply");
    let _ = eng.free_state(st);
    out.text
}

/// Model loads and LoRA files loaded since the app started.
fn loads(t: &TestApp) -> (u64, u64) {
    tauri::async_runtime::block_on(
        t.engine()
            .run(|w| Ok((w.model_loads, w.adapters.lora_loads))),
    )
    .expect("engine thread")
}

fn new_chat(t: &TestApp) -> (String, Value) {
    let chat = t.ok("chat_create", json!({}));
    let id = chat["id"].as_str().expect("id").to_string();
    t.ok(
        "chat_settings",
        json!({ "id": id, "settings": serde_json::to_value(greedy(16)).expect("json") }),
    );
    (id, chat["adapters"].clone())
}

fn reply(t: &TestApp, chat: &str) -> String {
    let m = t.send(chat, PROMPT).expect("reply");
    m["text"].as_str().expect("text").to_string()
}

#[test]
fn chats_with_different_adapters_each_get_their_own_results_without_a_reload() {
    let (a, b, s) = (
        adapter("demo-lora-r4.safetensors"),
        adapter("demo-lora-att-r2.safetensors"),
        adapter("demo-state.safetensors"),
    );
    // The engine alone, one set at a time.
    let mut eng = Engine::load(model(), &LoadOptions::default()).expect("reference engine");
    let want_base = reference(&mut eng, &[], None);
    let want_a = reference(&mut eng, &[(&a, 2.0)], None);
    let want_bs = reference(&mut eng, &[(&b, 1.0)], Some(&s));
    drop(eng);
    // Preconditions: the adapters change the reply, so equal texts below mean something.
    assert_ne!(want_a, want_base, "LoRA A moves the greedy reply");
    assert_ne!(
        want_bs, want_base,
        "LoRA B + the state move the greedy reply"
    );
    assert_ne!(want_a, want_bs);

    let dir = scratch("adapters");
    let data = dir.join("data");
    let (chat_a, chat_bs, chat_base);
    {
        let t = app_at(&data);
        t.load_default();
        // Add A (enabled, at alpha / rank = 8 / 4): what the Model view lists.
        t.allow(&a);
        let lib = t.ok("lora_add", json!({ "path": a }));
        let e = &lib["loras"][0];
        assert_eq!(
            (&e["name"], &e["rank"], &e["alpha"], &e["layers"]),
            (
                &json!("demo-lora-r4.safetensors"),
                &json!(4),
                &json!(8.0),
                &json!(6)
            )
        );
        assert_eq!(e["targets"].as_array().map(Vec::len), Some(6));
        assert_eq!(
            (&e["default_scale"], &e["scale"], &e["enabled"]),
            (&json!(2.0), &json!(2.0), &json!(true))
        );
        let (id, set) = new_chat(&t);
        assert_eq!(
            set,
            json!({ "loras": [{ "path": a, "scale": 2.0 }], "init_state": null })
        );
        chat_a = id;

        // Then B at scale 1 with the initial state, A switched off.
        t.ok(
            "lora_update",
            json!({ "path": a, "scale": 2.0, "enabled": false }),
        );
        t.allow(&b);
        let lib = t.ok("lora_add", json!({ "path": b }));
        assert_eq!(
            lib["loras"][1]["default_scale"], 1.0,
            "no alpha in the file: 1"
        );
        t.allow(&s);
        let lib = t.ok("init_state_add", json!({ "path": s }));
        assert_eq!(
            (
                &lib["states"][0]["n_layer"],
                &lib["states"][0]["n_head"],
                &lib["states"][0]["active"]
            ),
            (&json!(6), &json!(4), &json!(true))
        );
        let (id, set) = new_chat(&t);
        assert_eq!(
            set,
            json!({ "loras": [{ "path": b, "scale": 1.0 }], "init_state": s })
        );
        chat_bs = id;

        // And the base: nothing on.
        t.ok(
            "lora_update",
            json!({ "path": b, "scale": 1.0, "enabled": false }),
        );
        t.ok("init_state_use", json!({ "path": null }));
        let (id, set) = new_chat(&t);
        assert_eq!(set, json!({ "loras": [], "init_state": null }));
        chat_base = id;

        // Interleaved: every chat gets its own set's reply.
        assert_eq!(reply(&t, &chat_a), want_a);
        assert_eq!(reply(&t, &chat_bs), want_bs);
        assert_eq!(reply(&t, &chat_base), want_base);
        let again = t.ok(
            "chat_regenerate",
            json!({ "id": chat_a, "index": 1, "onEvent": "__CHANNEL__:9" }),
        );
        assert_eq!(
            again["text"],
            json!(want_a),
            "back to A after B and the base"
        );
        // One model load; each LoRA read once (when added), never again on a switch.
        assert_eq!(loads(&t), (1, 2));
    }

    // A restart: the chats keep their sets, and their files are loaded from the chats' own
    // records (no dialog in this run).
    let t = app_at(&data);
    let lib = t.ok("adapter_library", json!({}));
    assert_eq!(lib["loras"].as_array().map(Vec::len), Some(2));
    assert_eq!(lib["loras"][0]["enabled"], false);
    let c = t.ok("chat_get", json!({ "id": chat_bs }));
    assert_eq!(
        c["adapters"],
        json!({ "loras": [{ "path": b, "scale": 1.0 }], "init_state": s })
    );
    t.load_default();
    for (chat, want) in [
        (&chat_bs, &want_bs),
        (&chat_a, &want_a),
        (&chat_base, &want_base),
    ] {
        let m = t.ok(
            "chat_regenerate",
            json!({ "id": chat, "index": 1, "onEvent": "__CHANNEL__:10" }),
        );
        assert_eq!(m["text"], json!(want), "chat {chat} after the restart");
    }
    assert_eq!(loads(&t), (1, 2));
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn documents_and_field_analyses_run_with_the_current_adapters() {
    let dir = scratch("adapters-docs");
    let t = app_at(&dir.join("data"));
    t.load_default();
    let (a, s) = (
        adapter("demo-lora-r4.safetensors"),
        adapter("demo-state.safetensors"),
    );
    let text = "My dear Sister, I write to you from the deck of the Prospect.";
    let fields =
        json!([{ "label": "Title", "text": "A letter" }, { "label": "Place", "text": "the sea" }]);
    let run_fields = |doc: Value| -> (Value, Vec<f32>) {
        let body = t
            .call_raw("fields_run", json!({ "document": doc, "fields": fields }))
            .expect("fields_run");
        let tauri::ipc::InvokeResponseBody::Raw(bytes) = body else {
            panic!("fields_run answers with bytes");
        };
        let h = u32::from_le_bytes(bytes[..4].try_into().expect("len")) as usize;
        let meta: Value = serde_json::from_slice(&bytes[4..4 + h]).expect("meta");
        let start = (4 + h).div_ceil(4) * 4;
        let v = bytes[start..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        (meta, v)
    };
    let (base_meta, base_vecs) = run_fields(Value::Null);
    assert_eq!(
        base_meta["adapters"],
        json!({ "loras": [], "init_state": null })
    );
    let plain = t.ok("doc_create", json!({ "name": "plain", "text": text }));

    t.allow(&a);
    t.ok("lora_add", json!({ "path": a }));
    t.allow(&s);
    t.ok("init_state_add", json!({ "path": s }));
    let set = json!({ "loras": [{ "path": a, "scale": 2.0 }], "init_state": s });
    let (meta, vecs) = run_fields(Value::Null);
    assert_eq!(meta["adapters"], set);
    assert_ne!(vecs, base_vecs, "the LoRA and the state change the vectors");

    let doc = t.ok("doc_create", json!({ "name": "tuned", "text": text }));
    assert_eq!(doc["adapters"], set);
    assert_eq!(doc["tokens"], plain["tokens"]);
    // A chat about the document runs with the document's adapters.
    let chat = t.ok("doc_chat", json!({ "id": doc["id"] }));
    assert_eq!(chat["adapters"], set);
    // Fields against a document use the document's adapters, whatever the list says now.
    t.ok(
        "lora_update",
        json!({ "path": a, "scale": 2.0, "enabled": false }),
    );
    let (meta, _) = run_fields(plain["id"].clone());
    assert_eq!(meta["adapters"], json!({ "loras": [], "init_state": null }));
    let (meta, tuned) = run_fields(doc["id"].clone());
    assert_eq!(meta["adapters"], set);
    assert_eq!(meta["resumed"], true, "the document's stored state");
    let (_, plain_vecs) = run_fields(plain["id"].clone());
    assert_ne!(tuned, plain_vecs);
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_adapter_files_are_readable_errors_and_the_app_stays_usable() {
    let dir = scratch("adapters-bad");
    let t = app_at(&dir.join("data"));
    // Only chosen files.
    let a = adapter("demo-lora-r4.safetensors");
    assert_eq!(t.err("lora_add", json!({ "path": a }))["code"], "scope");
    t.load_default();

    // Truncated, a base model given as a LoRA, a LoRA given as a state: each named.
    let truncated = dir.join("cut.safetensors");
    let bytes = std::fs::read(&a).expect("adapter");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let base = model();
    for (cmd, p) in [
        ("lora_add", &truncated),
        ("lora_add", &base),
        ("init_state_add", &a),
    ] {
        t.allow(p);
        let e = t.err(cmd, json!({ "path": p }));
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        assert!(
            e["message"].as_str().is_some_and(|m| m.contains(&name)),
            "{cmd} {name}: {e}"
        );
        assert_ne!(e["code"], "internal", "{e}");
    }
    assert_eq!(
        t.ok("adapter_library", json!({})),
        json!({ "loras": [], "states": [] }),
        "nothing half added"
    );

    // A chat whose LoRA file went away: its turn fails naming the file, the others go on.
    let gone = dir.join("gone.safetensors");
    std::fs::copy(&a, &gone).expect("copy");
    t.allow(&gone);
    t.ok("lora_add", json!({ "path": gone }));
    let (lora_chat, _) = new_chat(&t);
    t.ok("adapter_remove", json!({ "path": gone }));
    std::fs::remove_file(&gone).expect("remove");
    let e = t.send(&lora_chat, PROMPT).expect_err("the file is gone");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("gone.safetensors")),
        "{e}"
    );
    assert_eq!(
        t.ok("chat_get", json!({ "id": lora_chat }))["messages"],
        json!([])
    );
    let (plain, set) = new_chat(&t);
    assert_eq!(set["loras"], json!([]));
    let m = t
        .send(&plain, PROMPT)
        .expect("a chat without that file still replies");
    assert!(
        m["stats"]["generated_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{m}"
    );
    let e = t.err(
        "lora_update",
        json!({ "path": "/not/listed", "scale": 1.0, "enabled": true }),
    );
    assert_eq!(e["code"], "not_found");
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_benchmark_run_applies_and_names_the_current_adapters() {
    let dir = scratch("adapters-bench");
    let t = app_at(&dir.join("data"));
    t.load_default();
    let bench = |title: &str| {
        t.ok(
            "bench_run",
            json!({ "options": { "title": title, "prompt_tokens": 16, "decode_tokens": 4 }, "onProgress": "__CHANNEL__:7" }),
        )
    };
    let base = bench("base")["runs"][0].clone();
    assert_eq!(
        base.get("loras"),
        None,
        "a base run names no adapters: {base}"
    );
    assert_eq!(base.get("init_state"), None);
    let (a, s) = (
        adapter("demo-lora-r4.safetensors"),
        adapter("demo-state.safetensors"),
    );
    t.allow(&a);
    t.ok("lora_add", json!({ "path": a }));
    t.ok(
        "lora_update",
        json!({ "path": a, "scale": 1.5, "enabled": true }),
    );
    t.allow(&s);
    t.ok("init_state_add", json!({ "path": s }));
    let dash = bench("lora");
    let run = &dash["runs"][1];
    assert_eq!(
        run["lora"],
        json!(["demo-lora-r4.safetensors ×1.5 (rank 4)"]),
        "{run}"
    );
    assert_eq!(run["init_state"], json!(s));
    assert!(run["figures"]["lora_load_ms"]["median"]
        .as_f64()
        .is_some_and(|x| x > 0.0));
    // The LoRA's matrices were on the GPU during the run: f32 A and Bᵀ, rank 4 × (4
    // attention matrices × (256 + 256) + 2 FFN × (256 + 1024)) × 4 bytes × 6 layers
    // = 442,368 bytes ≈ 0.42 MiB more than the same run on the base.
    let (mib, base_mib) = (
        run["gpu_mem_mib"].as_f64().expect("mib"),
        base["gpu_mem_mib"].as_f64().expect("mib"),
    );
    assert!(
        mib - base_mib >= 0.42,
        "{mib} MiB with the LoRA, {base_mib} without"
    );
    // Kept in the history as it ran.
    let again = t.ok("bench_dashboard", json!({}));
    assert_eq!(again["runs"][1]["lora"], run["lora"]);
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}
