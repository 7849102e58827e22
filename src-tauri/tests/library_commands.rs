//! The Library view's commands through Tauri's IPC (mock runtime), as `src/lib/api.ts`
//! calls them: the catalog (shipped + a user entry added through `catalog_add`), the
//! library listing a model file in the library folder, `model_load` accepting that path
//! without a file dialog (and still refusing a path that is neither chosen nor in the
//! library), and delete. The real engine loads the bundled model's copy (lavapipe in CI:
//! `apt-get install mesa-vulkan-drivers`, `WGPU_BACKEND=vulkan`).
//!
//! The library and config folders come from the environment (`RWKV_MODELS_DIR`,
//! `XDG_CONFIG_HOME`), set once before the app starts: this binary holds this one test.

mod support;

use serde_json::json;
use support::{app_at, model, scratch};

#[test]
fn a_library_model_is_listed_loaded_without_a_dialog_and_deleted() {
    let dir = scratch("library-commands");
    let lib = dir.join("models");
    std::fs::create_dir_all(&lib).unwrap();
    std::env::set_var("RWKV_MODELS_DIR", &lib);
    std::env::set_var("XDG_CONFIG_HOME", dir.join("config"));
    let copy = lib.join("demo-copy.gguf");
    std::fs::copy(model(), &copy).unwrap();
    let mut t = app_at(&dir.join("data"));
    t.cleanup = Some(dir.clone());

    // The catalog: the shipped entries, then one of the user's own added through the view.
    let cat = t.ok("catalog_list", json!({}));
    let shipped = cat["entries"].as_array().unwrap().len();
    assert!(shipped >= 5, "{cat}");
    assert_eq!(cat["library_dir"], lib.display().to_string());
    let mut entry = cat["entries"][0].clone();
    // `user` is the view's flag, not a field of the catalog's schema.
    entry.as_object_mut().unwrap().remove("user");
    entry["name"] = json!("my-copy");
    entry["file_name"] = json!("demo-copy.gguf");
    entry["urls"] = json!(["http://127.0.0.1:9/demo-copy.gguf"]);
    entry["vram_bytes"] = json!(31_000_000);
    let cat = t.ok("catalog_add", json!({ "entry": entry }));
    let entries = cat["entries"].as_array().unwrap();
    assert_eq!(entries.len(), shipped + 1);
    let mine = entries.iter().find(|e| e["name"] == "my-copy").unwrap();
    assert_eq!(mine["user"], true);
    assert!(dir.join("config/rwkv-studio/catalog.json").exists());
    // A broken entry is refused with the catalog's rule named, and nothing is written.
    let mut bad = entry.clone();
    bad["name"] = json!("two words");
    let e = t.err("catalog_add", json!({ "entry": bad }));
    assert_eq!(e["code"], "catalog");
    assert!(e["message"].as_str().unwrap().contains("name"), "{e}");

    // The library lists the file with the catalog entry's facts and the GPU's memory.
    let view = t.ok("library_list", json!({}));
    let models = view["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{view}");
    assert_eq!(models[0]["file_name"], "demo-copy.gguf");
    assert_eq!(models[0]["catalog"], "my-copy");
    assert_eq!(models[0]["vram_bytes"], 31_000_000);
    assert_eq!(models[0]["origin"], "downloaded");
    assert!(
        view["gpu"]["adapter"]
            .as_str()
            .is_some_and(|a| !a.is_empty()),
        "{view}"
    );

    // Loaded by its library path, no dialog; a path outside the library is still refused.
    let info = t.load(Some(&copy)).expect("the library model loads");
    assert_eq!(info["path"], copy.display().to_string());
    let outside = dir.join("elsewhere.gguf");
    std::fs::copy(model(), &outside).unwrap();
    let e = t.load(Some(&outside)).unwrap_err();
    assert_eq!(e["code"], "scope");

    // Delete removes the file; the path is then no library model.
    let view = t.ok("library_delete", json!({ "path": copy }));
    assert_eq!(view["models"], json!([]));
    assert!(!copy.exists());
    let e = t.err("library_reveal", json!({ "path": copy }));
    assert_eq!(e["code"], "not_found");
}
