//! What the app keeps on disk, under the app data dir:
//!
//! ```text
//! chats/<chat>.json              a chat: settings, messages, stats
//! chats/<chat>/<message>.rwkvstate  state after that assistant message (engine state file)
//! documents/<doc>.json           a document: name, sizes, prefill timings
//! documents/<doc>.txt            its text (to prefill again for another model)
//! documents/<doc>.rwkvstate      its prefilled state (docs/state-format.md)
//! bench/history.json             benchmark runs
//!
//! set-aside/                     files `Store::open` could not read, moved out of the way
//! ```
//!
//! The folder, bottom up: `records.rs` (what a chat, document or history file holds, ids,
//! and the checks a file passes before it is used), `files.rs` (the file operations),
//! `recovery.rs` (what opening repairs and sets aside) and this file ([`Store`], which reads
//! and writes records through them). Nothing below imports this file.
//!
//! Folders are private to the user (0700) and files too (0600); the store never follows a
//! symbolic link, and a record is used only under its own id (`files.rs`, `recovery.rs`).
//!
//! Every write goes through a temporary file, an fsync and a rename ([`write_atomic`]), so a
//! process killed at any moment leaves each file either old or new, never half written;
//! [`Store::open`] (`recovery.rs`) removes what a killed write or delete left behind and sets
//! aside files that do not read, so one damaged file never stops the app.

mod files;
mod records;
mod recovery;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rwkv_bench::BenchReport;
use rwkv_engine::GenerateOptions;
use serde::Serialize;

use crate::error::{AppError, AppResult};
pub(crate) use files::read_json;
use files::write_json;
pub use files::{
    create_private, describe, entries, private_dir, read_regular, remove_entry, sync_dir,
    write_atomic, MAX_RECORD_BYTES,
};
pub use records::*;
pub(crate) use recovery::set_aside;

/// The root of the app's data (cheap to clone into engine jobs).
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// What [`Store::open`] found unreadable and moved to `set-aside/`.
    set_aside: Arc<Vec<SetAside>>,
}

/// Record `<stem>.json` of `dir`, read and checked by `check` (its id is its name), the
/// way [`Store::open`] checked it: a file changed since then never passes as another
/// record.
fn read_record<T>(
    path: &Path,
    stem: &str,
    check: fn(&str, &[u8]) -> Result<T, String>,
) -> AppResult<T> {
    let bytes = read_regular(path, MAX_RECORD_BYTES).map_err(|e| AppError::io(path, e))?;
    check(stem, &bytes).map_err(|e| AppError::corrupt(path, e))
}

/// `*.json` records of a folder, read with `check` ([`read_record`]); links and files that
/// do not read are logged and skipped so that one bad file never hides the others.
fn list_records<T>(dir: &Path, check: fn(&str, &[u8]) -> Result<T, String>) -> Vec<T> {
    let Ok(all) = entries(dir) else {
        return Vec::new();
    };
    all.into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|(p, _)| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            match read_record(&p, &stem, check) {
                Ok(v) => Some(v),
                Err(e) => {
                    log::warn!("skipping {}: {e}", p.display());
                    None
                }
            }
        })
        .collect()
}

/// Default chat settings: the RWKV chat template stops at the blank line after a reply.
pub fn default_chat_settings() -> GenerateOptions {
    let d = GenerateOptions::default();
    GenerateOptions {
        max_tokens: 200,
        sampler: rwkv_engine::sampler::SamplerOptions {
            stop_strings: vec!["\n\n".to_string()],
            ..d.sampler
        },
        constraint: None,
    }
}

impl Store {
    /// A store over `root` as it is (no recovery; see [`Store::open`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Store {
            root: root.into(),
            set_aside: Arc::new(Vec::new()),
        }
    }

    /// Opens the store at startup: creates `root`, removes what killed writes and deletes
    /// left (`*.tmp` files, states of deleted chats, parts of documents never completed),
    /// and moves every chat, document or history file that does not read to `set-aside/`
    /// ([`Store::set_aside`] names them). Fails only when `root` cannot be created or read.
    pub fn open(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        create_private(&root)?;
        let set_aside = recovery::recover(&root)?;
        for s in &set_aside {
            log::warn!("set aside {} ({}): {}", s.was, s.item, s.reason);
        }
        Ok(Store {
            root,
            set_aside: Arc::new(set_aside),
        })
    }

    /// This store with `more` set-aside files named besides those of [`Store::open`] (the
    /// adapter list's, `library::recover`).
    pub fn with_set_aside(mut self, more: Vec<SetAside>) -> Self {
        if !more.is_empty() {
            let mut all = self.set_aside.as_ref().clone();
            all.extend(more);
            self.set_aside = Arc::new(all);
        }
        self
    }

    /// The files [`Store::open`] moved aside.
    pub fn set_aside(&self) -> &[SetAside] {
        &self.set_aside
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    // ---- chats ----

    fn chat_path(&self, id: &str) -> AppResult<PathBuf> {
        Ok(self
            .root
            .join("chats")
            .join(format!("{}.json", check_id(id)?)))
    }

    /// Where the state after assistant message `msg` of chat `chat` lives.
    pub fn chat_state_path(&self, chat: &str, msg: &str) -> AppResult<PathBuf> {
        Ok(self
            .root
            .join("chats")
            .join(check_id(chat)?)
            .join(format!("{}.rwkvstate", check_id(msg)?)))
    }

    pub fn list_chats(&self) -> Vec<ChatSummary> {
        let mut chats: Vec<Chat> = list_records(&self.root.join("chats"), check_chat);
        chats.sort_by_key(|c| std::cmp::Reverse(c.updated_ms));
        chats
            .into_iter()
            .map(|c| ChatSummary {
                messages: c.messages.len(),
                id: c.id,
                title: c.title,
                updated_ms: c.updated_ms,
                document: c.document,
                adapters: c.adapters,
            })
            .collect()
    }

    /// Chat `id`, whose file must say it is chat `id` ([`check_chat`]).
    pub fn load_chat(&self, id: &str) -> AppResult<Chat> {
        let p = self.chat_path(id)?;
        if std::fs::symlink_metadata(&p).is_err() {
            return Err(AppError::not_found("chat", id));
        }
        read_record(&p, id, check_chat)
    }

    pub fn save_chat(&self, chat: &Chat) -> AppResult<()> {
        write_json(&self.chat_path(&chat.id)?, chat)
    }

    /// A new empty chat that runs with `adapters` (starting from `document`'s state, if any).
    pub fn create_chat(&self, document: Option<DocRef>, adapters: AdapterSet) -> AppResult<Chat> {
        let now = now_ms();
        let chat = Chat {
            id: new_id(),
            title: match &document {
                Some(d) => format!("About {}", d.name),
                None => "New chat".to_string(),
            },
            created_ms: now,
            updated_ms: now,
            settings: default_chat_settings(),
            document,
            adapters,
            messages: Vec::new(),
        };
        self.save_chat(&chat)?;
        Ok(chat)
    }

    pub fn delete_chat(&self, id: &str) -> AppResult<()> {
        let p = self.chat_path(id)?;
        std::fs::remove_file(&p).map_err(|e| AppError::io(&p, e))?;
        // The chat is gone once its file is; its states folder follows (a kill in between
        // leaves an orphan folder, which `Store::open` removes).
        let _ = sync_dir(&self.root.join("chats"));
        // (A link there goes, never what it points to.)
        let dir = self.root.join("chats").join(id);
        match remove_entry(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(AppError::io(&dir, e)),
            _ => Ok(()),
        }
    }

    /// Removes the state files of messages no longer in the chat. Only a real folder is
    /// walked (a link in place of `chats/<id>/` is left alone: its target is not ours),
    /// and only its files and links go, never a folder's content.
    pub fn prune_chat_states(&self, chat: &Chat) {
        let dir = self.root.join("chats").join(&chat.id);
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_dir()) {
            return;
        }
        for (p, t) in entries(&dir).unwrap_or_default() {
            let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
            if !t.is_dir() && stem.is_some_and(|s| !chat.messages.iter().any(|m| m.id == s)) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }

    // ---- documents ----

    fn doc_file(&self, id: &str, ext: &str) -> AppResult<PathBuf> {
        Ok(self
            .root
            .join("documents")
            .join(format!("{}.{ext}", check_id(id)?)))
    }

    pub fn doc_state_path(&self, id: &str) -> AppResult<PathBuf> {
        self.doc_file(id, "rwkvstate")
    }

    pub fn list_documents(&self) -> Vec<Document> {
        let mut docs: Vec<Document> = list_records(&self.root.join("documents"), check_document);
        docs.sort_by_key(|d| std::cmp::Reverse(d.created_ms));
        docs
    }

    /// Document `id`, whose file must say it is document `id` ([`check_document`]).
    pub fn load_document(&self, id: &str) -> AppResult<Document> {
        let p = self.doc_file(id, "json")?;
        if std::fs::symlink_metadata(&p).is_err() {
            return Err(AppError::not_found("document", id));
        }
        read_record(&p, id, check_document)
    }

    pub fn document_text(&self, id: &str) -> AppResult<String> {
        let p = self.doc_file(id, "txt")?;
        let bytes = read_regular(&p, MAX_RECORD_BYTES).map_err(|e| AppError::io(&p, e))?;
        String::from_utf8(bytes).map_err(|e| AppError::corrupt(&p, e))
    }

    pub fn save_document(&self, doc: &Document, text: &str) -> AppResult<()> {
        write_atomic(&self.doc_file(&doc.id, "txt")?, text.as_bytes())?;
        write_json(&self.doc_file(&doc.id, "json")?, doc)
    }

    pub fn delete_document(&self, id: &str) -> AppResult<()> {
        self.load_document(id)?;
        for ext in ["json", "txt", "rwkvstate"] {
            let p = self.doc_file(id, ext)?;
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(AppError::io(&p, e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    // ---- benchmarks ----

    fn bench_path(&self) -> PathBuf {
        self.root.join("bench").join("history.json")
    }

    /// Every stored `rwkv bench` report, oldest first.
    pub fn bench_history(&self) -> AppResult<Vec<BenchReport>> {
        let p = self.bench_path();
        if !p.exists() {
            return Ok(Vec::new());
        }
        read_json(&p)
    }

    pub fn add_bench_run(&self, run: &BenchReport) -> AppResult<()> {
        let mut runs = self.bench_history()?;
        runs.push(run.clone());
        write_json(&self.bench_path(), &runs)
    }

    /// The last profile: its SVG chart and its time by op (JSON), if any.
    pub fn bench_profile(&self) -> (Option<String>, serde_json::Value) {
        let dir = self.root.join("bench");
        let svg = read_regular(&dir.join("profile.svg"), MAX_RECORD_BYTES)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let by_op = read_json(&dir.join("profile-by-op.json")).unwrap_or(serde_json::Value::Null);
        (svg, by_op)
    }

    pub fn save_bench_profile<T: Serialize>(&self, svg: &str, by_op: &T) -> AppResult<()> {
        let dir = self.root.join("bench");
        write_atomic(&dir.join("profile.svg"), svg.as_bytes())?;
        write_json(&dir.join("profile-by-op.json"), by_op)
    }

    pub fn clear_bench_history(&self) -> AppResult<()> {
        let dir = self.root.join("bench");
        for name in ["history.json", "profile.svg", "profile-by-op.json"] {
            let p = dir.join(name);
            if p.exists() {
                std::fs::remove_file(&p).map_err(|e| AppError::io(&p, e))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn temp_store(name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("rwkv-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Store::new(dir)
    }

    #[test]
    fn chats_persist_and_list_newest_first() {
        let s = temp_store("chats");
        let a = s.create_chat(None, Default::default()).unwrap();
        let mut b = s.create_chat(None, Default::default()).unwrap();
        b.updated_ms = a.updated_ms + 10;
        b.title = "second".into();
        s.save_chat(&b).unwrap();
        let list = s.list_chats();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].title, "second");
        let back = s.load_chat(&a.id).unwrap();
        assert_eq!(
            (back.id, back.title, back.created_ms),
            (a.id.clone(), a.title, a.created_ms)
        );
        assert_eq!(back.settings.max_tokens, 200);
        s.delete_chat(&a.id).unwrap();
        assert_eq!(s.load_chat(&a.id).unwrap_err().code, ErrorCode::NotFound);
        std::fs::remove_dir_all(s.root()).ok();
    }

    #[test]
    fn ids_from_outside_cannot_name_other_files() {
        let s = temp_store("ids");
        assert_eq!(
            s.load_chat("../../etc/passwd").unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            s.load_document("a/b").unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert!(s.chat_state_path("abc", "..").is_err());
    }

    #[test]
    fn a_corrupt_chat_file_is_skipped_in_the_list() {
        let s = temp_store("corrupt");
        let good = s.create_chat(None, Default::default()).unwrap();
        std::fs::write(s.root().join("chats").join("00ff.json"), b"{not json").unwrap();
        let list = s.list_chats();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].id, good.id);
        assert_eq!(
            s.load_chat("00ff").unwrap_err().code,
            ErrorCode::CorruptFile
        );
        std::fs::remove_dir_all(s.root()).ok();
    }

    #[test]
    fn chat_settings_use_the_rwkv_template_stop() {
        let o = default_chat_settings();
        assert_eq!(o.sampler.stop_strings, vec!["\n\n".to_string()]);
        assert!(o.sampler.validate().is_ok());
    }
}
