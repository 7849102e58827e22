//! The shipped catalog meets the schema; a user catalog merges over it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use rwkv_models::{Catalog, PullError};

#[test]
fn shipped_catalog_meets_the_schema() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/catalog/models.json"),
    )
    .unwrap();
    let cat = Catalog::parse(&text, Path::new("models.json"), true).unwrap();
    assert!(!cat.entries.is_empty());
    for e in &cat.entries {
        assert!(e.source.starts_with("https://"), "{}: source", e.name);
        assert!(
            e.urls.iter().all(|u| u.starts_with("https://")),
            "{}: urls",
            e.name
        );
        assert!(e.size_bytes > 0, "{}: size", e.name);
        if let Some(h) = &e.sha256 {
            assert!(
                h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()),
                "{}",
                e.name
            );
        }
        assert!(
            e.urls.iter().all(|u| u.ends_with(&e.file_name)),
            "{}: url/file",
            e.name
        );
    }
    // The compiled-in copy is the same file.
    assert_eq!(Catalog::shipped().unwrap().entries, cat.entries);
}

#[test]
fn schema_rejects_unknown_fields_http_and_bad_hashes() {
    let entry = |extra: &str, url: &str, sha: &str| {
        format!(
            r#"{{"version":1,"models":[{{"name":"m","family":"f","parameters":"1B","encoding":"gguf-q4_k_m",
            "file_name":"m.gguf","size_bytes":10,"sha256":{sha},"urls":["{url}"],"license":"MIT",
            "ram_bytes":null,"vram_bytes":null,"description":"d","source":"https://x"{extra}}}]}}"#
        )
    };
    let p = Path::new("t.json");
    assert!(Catalog::parse(&entry("", "https://h/m.gguf", "null"), p, true).is_ok());
    for bad in [
        entry(r#","color":"red""#, "https://h/m.gguf", "null"),
        entry("", "http://h/m.gguf", "null"),
        entry("", "https://h/m.gguf", r#""abc""#),
    ] {
        assert!(matches!(
            Catalog::parse(&bad, p, true),
            Err(PullError::Catalog { .. })
        ));
    }
    // A user catalog may point at plain http (a local mirror).
    assert!(Catalog::parse(&entry("", "http://h/m.gguf", "null"), p, false).is_ok());
}

#[test]
fn user_catalog_adds_and_replaces_entries() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = Catalog::shipped().unwrap();
    let first = shipped.entries[0].clone();
    let mut replaced = first.clone();
    replaced.description = "my own copy".into();
    replaced.urls = vec!["http://127.0.0.1:1/x.pth".into()];
    let mut added = first.clone();
    added.name = "my-model".into();
    let user = dir.path().join("catalog.json");
    let json = serde_json::json!({ "version": 1, "models": [replaced, added] });
    std::fs::write(&user, json.to_string()).unwrap();
    let cat = Catalog::load(Some(&user)).unwrap();
    assert_eq!(cat.entries.len(), shipped.entries.len() + 1);
    assert_eq!(cat.find(&first.name).unwrap().description, "my own copy");
    assert!(cat.find("my-model").is_ok());
    assert!(matches!(
        cat.find("nope"),
        Err(PullError::UnknownModel { .. })
    ));
}

#[test]
fn a_saved_user_entry_reads_back_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("config").join("catalog.json");
    let mut e = Catalog::shipped().unwrap().entries[0].clone();
    e.name = "local-demo".into();
    e.urls = vec!["http://127.0.0.1:8000/demo.gguf".into()];
    rwkv_models::catalog::save_user_entry(&user, e.clone()).unwrap();
    let mut e2 = e.clone();
    e2.description = "replaced".into();
    let written = rwkv_models::catalog::save_user_entry(&user, e2).unwrap();
    assert_eq!(written.entries.len(), 1, "same name replaces");
    let cat = Catalog::load(Some(&user)).unwrap();
    assert_eq!(cat.find("local-demo").unwrap().description, "replaced");

    let mut bad = e.clone();
    bad.name = "second".into();
    bad.sha256 = Some("XYZ".into());
    let err = rwkv_models::catalog::save_user_entry(&user, bad).unwrap_err();
    assert!(
        matches!(&err, PullError::Catalog { reason, .. } if reason.contains("\"second\"")),
        "{err}"
    );
    // The file on disk is untouched by the refused entry.
    let cat = Catalog::load(Some(&user)).unwrap();
    assert!(cat.find("second").is_err());
}
