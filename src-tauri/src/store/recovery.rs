//! What [`Store::open`](super::Store::open) does before the app uses its data:
//! undo what a killed process left half done, and move unreadable files out of the way.
//!
//! A process killed at any moment (SIGKILL, power cut) can leave, besides complete files:
//! - `*.tmp` files of a write that never reached its rename ([`super::write_atomic`],
//!   the engine's state-file writer): never data, removed;
//! - `chats/<id>/` (message states) of a chat whose `chats/<id>.json` was deleted, and
//!   states of messages an edit or regenerate had dropped from the chat: removed;
//! - `documents/<id>.txt|.rwkvstate` of a document whose `.json` (written last on create,
//!   removed first on delete) is absent: removed.
//!
//! A file that does not read — hand-edited, truncated by a full disk, written by a newer
//! version — is moved to `set-aside/` untouched and reported (the app names it), so one bad
//! chat never hides the others nor stops the app. "Reads" means: a regular file of valid
//! JSON of the right shape (`records.rs`: [`check_chat`], [`check_document`],
//! [`check_history`]).
//!
//! Nothing is followed: entries are judged by their own type (`DirEntry::file_type`,
//! `symlink_metadata`). A symbolic link (or a device, FIFO, socket) where the store keeps
//! a record or a folder — `chats/` itself included — is set aside like a damaged file (the
//! link moves; its target is never read, walked or deleted); inside a chat's states folder,
//! whatever is not a live message's state file is removed, a link as a link.

use std::collections::HashSet;
use std::fs::FileType;
use std::path::{Path, PathBuf};

use super::files::{
    describe, entries, private_dir, read_regular, remove_entry, sync_dir, MAX_RECORD_BYTES,
};
use super::records::{check_chat, check_document, check_history, now_ms, SetAside};

/// Reads record `p` (a regular file, [`MAX_RECORD_BYTES`] at most) and checks it.
fn read_checked<T>(p: &Path, check: impl FnOnce(&[u8]) -> Result<T, String>) -> Result<T, String> {
    read_regular(p, MAX_RECORD_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|b| check(&b))
}

/// The entries of store folder `root/<name>` with their types, links not followed. A link
/// or anything but a folder in its place is set aside (pushed to `out`) and reads as empty.
fn folder(
    root: &Path,
    name: &str,
    out: &mut Vec<SetAside>,
) -> std::io::Result<Vec<(PathBuf, FileType)>> {
    let dir = root.join(name);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if !m.file_type().is_dir() => {
            let why = format!("it is {}", describe(m.file_type()));
            out.push(set_aside(root, &dir, name, format!("folder {name}"), why));
            Ok(Vec::new())
        }
        _ => entries(&dir),
    }
}

/// Sets aside each entry of `all` that is neither a regular file nor a real folder (links,
/// devices, FIFOs), pushing it to `out`; returns the others.
fn set_aside_links(
    root: &Path,
    folder: &str,
    all: Vec<(PathBuf, FileType)>,
    out: &mut Vec<SetAside>,
) -> Vec<(PathBuf, FileType)> {
    let mut kept = Vec::new();
    for (p, t) in all {
        if t.is_file() || t.is_dir() {
            kept.push((p, t));
        } else {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let was = format!("{folder}/{}", name.unwrap_or_default());
            let why = format!("it is {}", describe(t));
            out.push(set_aside(root, &p, &was, was.clone(), why));
        }
    }
    kept
}

fn is_tmp(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "tmp")
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn remove(p: &Path) {
    match remove_entry(p) {
        Ok(()) => log::info!("removed the leftover {}", p.display()),
        Err(e) => log::warn!("could not remove the leftover {}: {e}", p.display()),
    }
}

/// Moves `p` (relative name `was`) into `root/set-aside/` under a name that keeps the
/// original and never overwrites an earlier one.
pub(crate) fn set_aside(
    root: &Path,
    p: &Path,
    was: &str,
    item: String,
    reason: String,
) -> SetAside {
    let dir = root.join("set-aside");
    let flat = was.replace(['/', '\\'], "-");
    let dest = dir.join(format!("{}-{flat}", now_ms()));
    let moved = private_dir(&dir).and_then(|_| std::fs::rename(p, &dest));
    let now = match moved {
        Ok(()) => dest.display().to_string(),
        // Not movable (read-only folder): it stays, and is skipped by the lists anyway.
        Err(e) => {
            log::warn!("could not move {} aside: {e}", p.display());
            p.display().to_string()
        }
    };
    SetAside {
        item,
        was: was.to_string(),
        now,
        reason,
    }
}

/// Recovers the store at `root` (see the module docs). Returns what was set aside.
pub fn recover(root: &Path) -> std::io::Result<Vec<SetAside>> {
    let mut out = Vec::new();

    // Chats: links set aside, leftovers removed, then every chat file read once.
    let all = folder(root, "chats", &mut out)?;
    let all = set_aside_links(root, "chats", all, &mut out);
    let mut chat_ids: std::collections::HashMap<String, HashSet<String>> = Default::default();
    for (p, t) in &all {
        if is_tmp(p) {
            remove(p);
        } else if t.is_file() && p.extension().is_some_and(|x| x == "json") {
            let id = stem(p);
            let was = format!("chats/{id}.json");
            match read_checked(p, |b| check_chat(&id, b)) {
                Ok(chat) => {
                    let msgs = chat.messages.into_iter().map(|m| m.id).collect();
                    chat_ids.insert(id, msgs);
                }
                Err(reason) => out.push(set_aside(root, p, &was, format!("chat {id}"), reason)),
            }
        }
    }
    for (p, t) in &all {
        if !t.is_dir() || is_tmp(p) {
            continue;
        }
        match chat_ids.get(&stem(p)) {
            None => remove(p), // the states of a deleted (or set-aside) chat
            // Temporaries, states of messages a killed edit had already dropped, and
            // anything that is not a state file (a link goes as a link).
            Some(msgs) => {
                for (q, qt) in entries(p)? {
                    if !qt.is_file() || is_tmp(&q) || !msgs.contains(&stem(&q)) {
                        remove(&q);
                    }
                }
            }
        }
    }

    // Documents: a document exists once its .json does (written last, removed first).
    let all = folder(root, "documents", &mut out)?;
    let all = set_aside_links(root, "documents", all, &mut out);
    let mut doc_ids = HashSet::new();
    for (p, t) in &all {
        if is_tmp(p) {
            remove(p);
        } else if t.is_file() && p.extension().is_some_and(|x| x == "json") {
            let id = stem(p);
            let was = format!("documents/{id}.json");
            match read_checked(p, |b| check_document(&id, b)) {
                Ok(_) => {
                    doc_ids.insert(id);
                }
                Err(reason) => out.push(set_aside(root, p, &was, format!("document {id}"), reason)),
            }
        }
    }
    for (p, t) in &all {
        let part = p
            .extension()
            .is_some_and(|x| x == "txt" || x == "rwkvstate");
        if part && t.is_file() && !doc_ids.contains(&stem(p)) {
            remove(p);
        }
    }

    // Benchmark history: one file.
    let all = folder(root, "bench", &mut out)?;
    for (p, _) in set_aside_links(root, "bench", all, &mut out) {
        if is_tmp(&p) {
            remove(&p);
        }
    }
    let history = root.join("bench").join("history.json");
    if std::fs::symlink_metadata(&history).is_ok_and(|m| m.file_type().is_file()) {
        if let Err(reason) = read_checked(&history, |b| check_history(b).map(|_| ())) {
            out.push(set_aside(
                root,
                &history,
                "bench/history.json",
                "benchmark history".to_string(),
                reason,
            ));
        }
    }
    for name in ["chats", "documents", "bench"] {
        let d = root.join(name);
        if std::fs::symlink_metadata(&d).is_ok_and(|m| m.file_type().is_dir()) {
            sync_dir(&d)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{write_atomic, Store};

    fn temp_root(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rwkv-recovery-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn damaged_files_are_set_aside_and_named_and_the_rest_opens() {
        let root = temp_root("aside");
        let s = Store::new(&root);
        let good = s.create_chat(None, Default::default()).unwrap();
        let bad = s.create_chat(None, Default::default()).unwrap();
        let bad_path = root.join("chats").join(format!("{}.json", bad.id));
        // A hand edit that breaks the JSON, a chat whose name and id disagree, a history
        // that is not a list.
        std::fs::write(&bad_path, b"{\"id\": \"broken").unwrap();
        let renamed = root.join("chats").join("00aa.json");
        std::fs::write(
            &renamed,
            serde_json::to_vec(&s.load_chat(&good.id).unwrap()).unwrap(),
        )
        .unwrap();
        write_atomic(&root.join("bench/history.json"), b"{}").unwrap();

        let s = Store::open(&root).unwrap();
        let aside = s.set_aside();
        let mut items: Vec<&str> = aside.iter().map(|a| a.item.as_str()).collect();
        items.sort();
        assert_eq!(
            items,
            [
                "benchmark history",
                "chat 00aa",
                &format!("chat {}", bad.id)
            ]
        );
        let broken = aside.iter().find(|a| a.item.contains(&bad.id)).unwrap();
        assert_eq!(broken.was, format!("chats/{}.json", bad.id));
        assert!(broken.reason.contains("EOF"), "{}", broken.reason);
        // Moved, not deleted: the bytes are still there for the user.
        assert_eq!(
            std::fs::read(&broken.now).unwrap(),
            b"{\"id\": \"broken".to_vec()
        );
        assert!(!bad_path.exists() && !renamed.exists());
        let ids: Vec<String> = s.list_chats().into_iter().map(|c| c.id).collect();
        assert_eq!(ids, std::slice::from_ref(&good.id));
        assert!(s.bench_history().unwrap().is_empty());
        // A second start finds nothing more to set aside.
        assert!(Store::open(&root).unwrap().set_aside().is_empty());
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn leftovers_of_killed_writes_and_deletes_are_removed() {
        let root = temp_root("leftovers");
        let s = Store::new(&root);
        let mut chat = s.create_chat(None, Default::default()).unwrap();
        chat.messages.push(crate::store::Message {
            id: "00ab".into(),
            role: crate::store::Role::Assistant,
            text: "kept".into(),
            stats: None,
            model: None,
            created_ms: 0,
        });
        s.save_chat(&chat).unwrap();
        let chats = root.join("chats");
        std::fs::create_dir_all(chats.join(&chat.id)).unwrap();
        let state = chats.join(&chat.id).join("00ab.rwkvstate");
        std::fs::write(&state, b"x").unwrap();
        let partial = [
            chats.join(format!("{}.json.123-0.tmp", chat.id)),
            chats.join(&chat.id).join("00ac.rwkvstate.tmp"),
            chats.join(&chat.id).join("00ad.rwkvstate"), // a message an edit dropped
            chats.join("00dd"),                          // the states folder of a deleted chat
            root.join("documents/00ee.txt"),             // a document whose .json was never written
            root.join("documents/00ee.rwkvstate"),
            root.join("documents/00ee.json.9-1.tmp"),
        ];
        std::fs::create_dir_all(root.join("documents")).unwrap();
        for p in &partial {
            if p.extension().is_none() {
                std::fs::create_dir_all(p).unwrap();
            } else {
                std::fs::write(p, b"half").unwrap();
            }
        }
        let s = Store::open(&root).unwrap();
        for p in &partial {
            assert!(!p.exists(), "{} should be gone", p.display());
        }
        assert!(state.exists(), "a live message's state is kept");
        assert_eq!(s.load_chat(&chat.id).unwrap().id, chat.id);
        assert!(s.set_aside().is_empty());
        std::fs::remove_dir_all(&root).ok();
    }
}
