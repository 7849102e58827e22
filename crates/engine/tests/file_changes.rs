//! A model file that changes while it loads (issue 33, item 6): cut short by another
//! process (a download or a copy over it) the load must end with an error naming the file
//! — before, the upload read the file's mapping and the process died of SIGBUS, which no
//! handler, `catch_unwind` or Python exception can catch. Written to in place, the load
//! must refuse to keep a mix of two files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use rwkv_engine::{Engine, EngineError, LoadOptions, LoadProgress, ModelFile};
use support::*;

fn copy_of(name: &str, test: &str) -> std::path::PathBuf {
    let dir = scratch(test);
    let p = dir.join(name);
    std::fs::copy(fixtures().join(name), &p).unwrap();
    p
}

fn assert_changed(e: &EngineError, path: &std::path::Path) {
    let msg = e.to_string();
    assert!(
        matches!(e, EngineError::Io { .. }) && msg.contains("changed while the model was loading"),
        "{e:?}"
    );
    assert!(
        msg.contains(&path.display().to_string()),
        "names the file: {msg}"
    );
}

#[test]
fn a_file_cut_short_during_the_upload_is_an_error_not_sigbus() {
    let path = copy_of("rwkv7-tiny.safetensors", "cut-short");
    let len = std::fs::metadata(&path).unwrap().len();
    let mut cut = false;
    let r = Engine::load_with_progress(&path, &LoadOptions::default(), &mut |p| {
        // The first tensor is in staging memory: every later one's bytes are read after
        // the file lost its second half.
        if let LoadProgress::Upload { .. } = p {
            if !cut {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(len / 2).unwrap();
                cut = true;
            }
        }
    });
    assert!(cut, "the load reached its upload");
    match r {
        Ok(_) => panic!("a model whose file lost half its bytes during the load was loaded"),
        Err(e) => assert_changed(&e, &path),
    }
}

#[test]
fn reads_past_the_new_end_and_writes_in_place_are_named() {
    let path = copy_of("rwkv7-tiny-Q8_0.gguf", "changed");
    let mf = ModelFile::open(&path).unwrap();
    let last = mf.tensors().last().unwrap().name.clone();
    let src = mf.tensor(&last).unwrap().bytes;
    let mut dst = vec![0u8; src.len()];
    mf.read_into(src, &mut dst).unwrap();
    assert_eq!(dst, src, "an unchanged file reads the mapping's bytes");
    mf.check_unchanged().unwrap();

    // In place, same length: the modification time tells (the coarse clock ticks within
    // 10 ms; 50 ms apart is a new time).
    std::thread::sleep(std::time::Duration::from_millis(50));
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(b"GGUF").unwrap();
    }
    assert_changed(&mf.check_unchanged().unwrap_err(), &path);

    // Cut short before the last tensor: reading it is an error, not SIGBUS.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(1024).unwrap();
    assert_changed(&mf.read_into(src, &mut dst).unwrap_err(), &path);
}
