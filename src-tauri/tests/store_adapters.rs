//! The store's schema across versions: chat and document files written before adapters
//! existed open as the base model; a chat's adapter set is stored and read back.

use rwkv_studio_lib::store::{AdapterSet, LoraUse, Store};

#[test]
fn files_without_adapters_open_and_sets_round_trip() {
    let dir = std::env::temp_dir().join(format!("rwkv-store-adapters-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = Store::new(&dir);
    let id = "00000000000000010000";
    // As the app wrote them before adapters existed (no `adapters` key).
    let old_chat = format!(
        r#"{{"id": "{id}", "title": "Old", "created_ms": 1, "updated_ms": 2,
            "settings": {{"max_tokens": 200, "sampler": {{"temperature": 1.0}}}},
            "document": null,
            "messages": [{{"id": "00000000000000020000", "role": "user", "text": "Hi", "created_ms": 1}}]}}"#
    );
    let old_doc = format!(
        r#"{{"id": "{id}", "name": "letter", "chars": 9, "tokens": 3, "prefill_ms": 1.5,
            "tok_s": 2000.0, "model": "m.gguf", "created_ms": 5, "preview": "A letter."}}"#
    );
    std::fs::create_dir_all(s.root().join("chats")).unwrap();
    std::fs::create_dir_all(s.root().join("documents")).unwrap();
    std::fs::write(s.root().join(format!("chats/{id}.json")), old_chat).unwrap();
    std::fs::write(s.root().join(format!("documents/{id}.json")), old_doc).unwrap();
    std::fs::write(s.root().join(format!("documents/{id}.txt")), "A letter.").unwrap();
    let s = Store::open(s.root()).unwrap();
    assert!(s.set_aside().is_empty(), "{:?}", s.set_aside());
    let chat = s.load_chat(id).unwrap();
    assert_eq!(chat.messages.len(), 1);
    assert!(chat.adapters.is_empty());
    assert_eq!(s.list_chats()[0].adapters, AdapterSet::default());
    assert!(s.load_document(id).unwrap().adapters.is_empty());

    let set = AdapterSet {
        loras: vec![
            LoraUse {
                path: "/l/a.safetensors".into(),
                scale: 0.5,
            },
            LoraUse {
                path: "/l/b.pth".into(),
                scale: -2.0,
            },
        ],
        init_state: Some("/l/state.pth".into()),
    };
    let c = s.create_chat(None, set.clone()).unwrap();
    let back = Store::open(s.root()).unwrap().load_chat(&c.id).unwrap();
    assert_eq!(back.adapters, set);
    assert!(!back.adapters.is_empty());
    std::fs::remove_dir_all(s.root()).ok();
}
