//! Issue 33, items 5 and 6: the store never follows a link, a record is used only under its
//! own id, what the store creates is private to the user, and `read_text_file` judges a
//! file by its size before reading it. Each case plants what a hostile or careless program
//! could leave in the data folder (links to folders and files outside it, a record copied
//! under another name) and checks that nothing outside the store is read, walked, written
//! or deleted.
#![cfg(unix)]

mod support;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use rwkv_studio_lib::store::{write_atomic, Message, Role, Store};
use serde_json::json;
use support::{scratch, test_app};

/// A folder outside the store with a file, a state-like file and a subfolder in it; the
/// list of what must still be there afterwards.
fn victim(base: &Path) -> (PathBuf, Vec<PathBuf>) {
    let v = base.join("victim");
    std::fs::create_dir_all(v.join("sub")).expect("victim dir");
    let files = vec![
        v.join("keep.txt"),
        v.join("00ac.rwkvstate"),
        v.join("a.tmp"),
        v.join("sub").join("x"),
    ];
    for f in &files {
        std::fs::write(f, b"not the store's").expect("victim file");
    }
    (v, files)
}

fn all_there(files: &[PathBuf]) {
    for f in files {
        assert_eq!(
            std::fs::read(f).ok().as_deref(),
            Some(&b"not the store's"[..]),
            "{} was touched",
            f.display()
        );
    }
}

fn message(id: &str) -> Message {
    Message {
        id: id.into(),
        role: Role::Assistant,
        text: "kept".into(),
        stats: None,
        model: None,
        created_ms: 0,
    }
}

#[test]
fn recovery_never_walks_a_linked_states_folder() {
    let base = scratch("links-states");
    let (v, files) = victim(&base);
    let root = base.join("data");
    let s = Store::new(&root);
    let mut chat = s.create_chat(None, Default::default()).expect("chat");
    chat.messages.push(message("00ab"));
    s.save_chat(&chat).expect("save");
    let link = root.join("chats").join(&chat.id);
    symlink(&v, &link).expect("symlink");

    let s = Store::open(&root).expect("open");
    all_there(&files);
    let aside = s.set_aside();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(aside[0].was, format!("chats/{}", chat.id));
    assert!(aside[0].reason.contains("link"), "{}", aside[0].reason);
    assert!(std::fs::symlink_metadata(&link).is_err(), "the link moved");
    assert_eq!(s.load_chat(&chat.id).expect("the chat opens").id, chat.id);
    // Pruning and deleting go on without the link, and never reach the victim.
    s.prune_chat_states(&chat);
    s.delete_chat(&chat.id).expect("delete");
    all_there(&files);
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn recovery_never_walks_a_linked_chats_folder() {
    let base = scratch("links-chats");
    let (v, files) = victim(&base);
    let root = base.join("data");
    std::fs::create_dir_all(&root).expect("root");
    symlink(&v, root.join("chats")).expect("symlink");
    symlink(&v, root.join("documents")).expect("symlink");

    let s = Store::open(&root).expect("open");
    all_there(&files);
    let mut was: Vec<&str> = s.set_aside().iter().map(|a| a.was.as_str()).collect();
    was.sort();
    assert_eq!(was, ["chats", "documents"]);
    // The store goes on with real folders of its own.
    let chat = s.create_chat(None, Default::default()).expect("chat");
    assert_eq!(s.list_chats().len(), 1);
    assert!(std::fs::symlink_metadata(root.join("chats"))
        .expect("chats")
        .is_dir());
    assert!(!v.join(format!("{}.json", chat.id)).exists());
    std::fs::remove_dir_all(&base).ok();
}

/// The data folder itself may be a link (moved to another disk by its user): followed, and
/// nothing under it is set aside for it.
#[test]
fn a_linked_data_folder_is_followed() {
    let base = scratch("links-root");
    let real = base.join("elsewhere");
    std::fs::create_dir_all(&real).expect("real");
    symlink(&real, base.join("data")).expect("symlink");
    let s = Store::open(base.join("data")).expect("open");
    let chat = s.create_chat(None, Default::default()).expect("chat");
    assert!(real.join(format!("chats/{}.json", chat.id)).is_file());
    let s = Store::open(base.join("data")).expect("open again");
    assert!(s.set_aside().is_empty(), "{:?}", s.set_aside());
    assert_eq!(s.list_chats().len(), 1);
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn pruning_never_follows_a_linked_states_folder() {
    let base = scratch("links-prune");
    let (v, files) = victim(&base);
    let s = Store::new(base.join("data"));
    let chat = s.create_chat(None, Default::default()).expect("chat");
    // Planted after startup: recovery never saw it.
    symlink(&v, s.root().join("chats").join(&chat.id)).expect("symlink");
    s.prune_chat_states(&chat);
    all_there(&files);
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn linked_records_are_set_aside_not_read() {
    let base = scratch("links-records");
    let root = base.join("data");
    let s = Store::new(&root);
    let chat = s.create_chat(None, Default::default()).expect("chat");
    // The chat's file becomes a link to a copy outside the store (same bytes, same id).
    let chat_file = root.join("chats").join(format!("{}.json", chat.id));
    let outside = base.join("outside.json");
    std::fs::rename(&chat_file, &outside).expect("move");
    symlink(&outside, &chat_file).expect("symlink");
    // And the benchmark history a link to a valid history outside the store.
    std::fs::create_dir_all(root.join("bench")).expect("bench");
    let history = base.join("history.json");
    std::fs::write(&history, b"[]").expect("history");
    symlink(&history, root.join("bench/history.json")).expect("symlink");

    let s = Store::open(&root).expect("open");
    let mut was: Vec<String> = s.set_aside().iter().map(|a| a.was.clone()).collect();
    was.sort();
    assert_eq!(
        was,
        [
            "bench/history.json".to_string(),
            format!("chats/{}.json", chat.id)
        ]
    );
    assert!(s.list_chats().is_empty());
    assert!(std::fs::read(&outside).is_ok_and(|b| !b.is_empty()));
    assert_eq!(std::fs::read(&history).expect("history"), b"[]");
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn a_record_is_used_only_under_its_own_id() {
    let base = scratch("links-ids");
    let s = Store::new(base.join("data"));
    let a = s.create_chat(None, Default::default()).expect("chat");
    // Chat a's file copied under another id, after startup.
    let other = "00ff";
    let dir = s.root().join("chats");
    std::fs::copy(
        dir.join(format!("{}.json", a.id)),
        dir.join(format!("{other}.json")),
    )
    .expect("copy");
    let e = s.load_chat(other).expect_err("another chat's record");
    assert_eq!(e.code.as_str(), "corrupt_file", "{e}");
    assert!(e.message.contains(&a.id), "{}", e.message);
    let ids: Vec<String> = s.list_chats().into_iter().map(|c| c.id).collect();
    assert_eq!(
        ids,
        std::slice::from_ref(&a.id),
        "listed once, under its own id"
    );
    // The same for documents.
    let doc = rwkv_studio_lib::store::Document {
        id: "0a0a".into(),
        name: "Letter".into(),
        chars: 1,
        tokens: 1,
        prefill_ms: 0.0,
        tok_s: 0.0,
        model: "m".into(),
        created_ms: 0,
        preview: "x".into(),
        adapters: Default::default(),
    };
    s.save_document(&doc, "x").expect("doc");
    let docs = s.root().join("documents");
    std::fs::copy(docs.join("0a0a.json"), docs.join("0b0b.json")).expect("copy");
    assert_eq!(
        s.load_document("0b0b").expect_err("mismatch").code.as_str(),
        "corrupt_file"
    );
    assert_eq!(s.list_documents().len(), 1);
    std::fs::remove_dir_all(&base).ok();
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
}

#[test]
fn store_folders_and_files_are_private() {
    let base = scratch("private");
    let root = base.join("data");
    let s = Store::open(&root).expect("open");
    let chat = s.create_chat(None, Default::default()).expect("chat");
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&root.join("chats")), 0o700);
    assert_eq!(mode(&root.join(format!("chats/{}.json", chat.id))), 0o600);
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn a_planted_temporary_name_is_never_written_through() {
    let base = scratch("planted-tmp");
    let dir = base.join("data");
    std::fs::create_dir_all(&dir).expect("dir");
    let target = base.join("target.txt");
    std::fs::write(&target, b"not the store's").expect("target");
    // Every temporary name this process could use for `planted.json` (`<name>.<pid>-<n>.tmp`,
    // n counting the process's writes), as links to the target.
    let pid = std::process::id();
    for n in 0..2000 {
        symlink(&target, dir.join(format!("planted.json.{pid}-{n}.tmp"))).expect("symlink");
    }
    let r = write_atomic(&dir.join("planted.json"), b"{}");
    assert_eq!(std::fs::read(&target).expect("target"), b"not the store's");
    if r.is_ok() {
        assert!(std::fs::symlink_metadata(dir.join("planted.json"))
            .expect("written")
            .is_file());
    }
    std::fs::remove_dir_all(&base).ok();
}

#[test]
fn read_text_file_judges_the_size_before_reading() {
    let t = test_app("read-size");
    let dir = scratch("read-size-files");
    // 1 TiB, sparse: reading it first (as the old code did) asks for 1 TiB of memory.
    let huge = dir.join("huge.txt");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(1 << 40))
        .expect("sparse file");
    t.allow(&huge);
    let e = t.err("read_text_file", json!({ "path": huge }));
    assert_eq!(e["code"], "bad_request", "{e}");
    assert_eq!(e["details"]["bytes"], json!(1u64 << 40));
    // A device that never ends is not a regular file. (After the case above, which the
    // old code fails first: it read this one until memory ran out.)
    let zero = Path::new("/dev/zero");
    t.allow(zero);
    let e = t.err("read_text_file", json!({ "path": zero }));
    assert_eq!(e["code"], "bad_request", "{e}");
    assert!(e["message"]
        .as_str()
        .is_some_and(|m| m.contains("not a regular file")));
    // A file at the limit still reads.
    let ok = dir.join("ok.txt");
    std::fs::write(&ok, "a".repeat(16 << 20)).expect("write");
    t.allow(&ok);
    let text = t.ok("read_text_file", json!({ "path": ok }));
    assert_eq!(text.as_str().map(str::len), Some(16 << 20));
    std::fs::remove_dir_all(&dir).ok();
}
