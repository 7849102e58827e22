//! The `store` fuzz target's seeds and minimized corpus (`fuzz/seeds/store/`,
//! `fuzz/corpus-min/store/`) replayed through the checks `Store::open` runs
//! (`store::check_chat`, `check_document`, `check_history`), as the target does: no
//! panic, accepted items read back the same. The seeds are valid files: they must pass,
//! and a store holding them opens with nothing set aside.

use std::path::Path;

use rwkv_studio_lib::store::{check_chat, check_document, check_history, Store};

const STEM: &str = "00000000000000010000";

#[test]
fn store_corpus_replays_and_seeds_open() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let root = std::env::temp_dir().join(format!("rwkv-store-corpus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut seeds = 0;
    for (dir, seed) in [("seeds", true), ("corpus-min", false)] {
        let Ok(rd) = std::fs::read_dir(fuzz.join(dir).join("store")) else {
            continue;
        };
        for e in rd {
            let p = e.expect("entry").path();
            let data = std::fs::read(&p).expect("corpus file");
            let Some((&kind, bytes)) = data.split_first() else {
                continue;
            };
            let name = p.display();
            let ok = match kind % 3 {
                0 => check_chat(STEM, bytes).map(|c| {
                    let again = serde_json::to_vec(&c).expect("serialize");
                    let back = check_chat(STEM, &again).expect("re-read");
                    assert_eq!(back.messages, c.messages, "{name}");
                }),
                1 => check_document(STEM, bytes).map(|d| {
                    let again = serde_json::to_vec(&d).expect("serialize");
                    assert_eq!(check_document(STEM, &again).expect("re-read"), d, "{name}");
                }),
                _ => check_history(bytes).map(|r| {
                    let again = serde_json::to_vec(&r).expect("serialize");
                    assert_eq!(check_history(&again).expect("re-read").len(), r.len());
                }),
            };
            if seed {
                seeds += 1;
                assert!(ok.is_ok(), "seed {name} rejected: {ok:?}");
                // The seed as a file where the app keeps it.
                let rel = match kind % 3 {
                    0 => format!("chats/{STEM}.json"),
                    1 => format!("documents/{STEM}.json"),
                    _ => "bench/history.json".to_string(),
                };
                let dest = root.join(rel);
                std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
                std::fs::write(&dest, bytes).expect("write");
                let s = Store::open(&root).expect("open");
                assert!(s.set_aside().is_empty(), "{name}: {:?}", s.set_aside());
            }
        }
    }
    assert!(seeds >= 4, "no seeds: run fuzz/make_seeds.py");
    std::fs::remove_dir_all(&root).ok();
}
