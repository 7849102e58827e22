//! The app's store files (`src-tauri`: `chats/<id>.json`, `documents/<id>.json`,
//! `bench/history.json`) through the checks `Store::open` runs at startup
//! (`store::check_chat`, `check_document`, `check_history`): any bytes give the parsed
//! item or a reason (the file is then set aside), never a panic; an accepted item written
//! again reads back the same.
//!
//! The app crate pulls in Tauri and WebKit, too heavy to build with sanitizers: its
//! dependency-light modules (`error.rs` and the `store/` folder) are compiled in here from
//! their source files instead.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src-tauri/src/error.rs"]
mod error;
// Re-exports the app uses elsewhere are unused here.
#[allow(dead_code, unused_imports)]
#[path = "../../src-tauri/src/store/mod.rs"]
mod store;

/// The id of the seed files (`fuzz/seeds/store/`), so that mutations keep passing the
/// name check and reach the rest.
const STEM: &str = "00000000000000010000";

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(chat) = store::check_chat(STEM, bytes) {
                let again = serde_json::to_vec(&chat).expect("serialize");
                let back = store::check_chat(STEM, &again).expect("re-read");
                assert_eq!(serde_json::to_vec(&back).expect("serialize"), again);
                assert_eq!(back.messages, chat.messages);
            }
        }
        1 => {
            if let Ok(doc) = store::check_document(STEM, bytes) {
                let again = serde_json::to_vec(&doc).expect("serialize");
                assert_eq!(store::check_document(STEM, &again).expect("re-read"), doc);
            }
        }
        _ => {
            if let Ok(runs) = store::check_history(bytes) {
                let again = serde_json::to_vec(&runs).expect("serialize");
                let back = store::check_history(&again).expect("re-read");
                assert_eq!(back.len(), runs.len());
            }
        }
    }
});
