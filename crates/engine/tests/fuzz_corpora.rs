//! The fuzz targets' seeds and minimized corpora (`fuzz/seeds/<target>/`,
//! `fuzz/corpus-min/<target>/`) replayed as ordinary tests, with the same checks as the
//! targets (`fuzz/fuzz_targets/state_file.rs`, `npy.rs`): every input that once found a new
//! path still gives `Ok` or an error naming the file, and what is accepted round-trips.
//! The seeds are valid files, so they must be accepted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
use std::path::{Path, PathBuf};

use rwkv_engine::analysis::{read_state_file, read_state_header, write_state_file};
use rwkv_engine::npy;
use sha2::{Digest, Sha256};

/// `(name, bytes, is_seed)` of every input of `target`.
fn inputs(target: &str) -> Vec<(String, Vec<u8>, bool)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for (dir, seed) in [("seeds", true), ("corpus-min", false)] {
        let Ok(rd) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
            continue;
        };
        for e in rd {
            let p = e.expect("dir entry").path();
            let bytes = std::fs::read(&p).expect("corpus file");
            out.push((p.display().to_string(), bytes, seed));
        }
    }
    out.sort();
    assert!(
        out.iter().any(|i| i.2),
        "no seeds for {target}: run fuzz/make_seeds.py"
    );
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rwkv-corpora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

#[test]
fn state_file_corpus_replays() {
    let mut accepted = 0;
    for (name, input, seed) in inputs("state_file") {
        // As the target: a flag byte, then the file; bit 0 asks for the checksum fixed up.
        let Some((&flag, file)) = input.split_first() else {
            continue;
        };
        let mut data = file.to_vec();
        if flag & 1 == 1 && data.len() >= 128 {
            let sha: [u8; 32] = Sha256::digest(&data[128..]).into();
            data[88..120].copy_from_slice(&sha);
        }
        let input = scratch("in.rwkvstate");
        std::fs::write(&input, &data).expect("write");
        let header = read_state_header(&input);
        match read_state_file(&input) {
            Ok((h, values)) => {
                accepted += 1;
                assert_eq!(header.as_ref().ok(), Some(&h), "{name}");
                assert_eq!(h.layout.values(), Some(values.len()), "{name}");
                assert!(values.iter().all(|v| v.is_finite()), "{name}");
                let again = scratch("again.rwkvstate");
                write_state_file(&again, h.fingerprint, h.layout, h.tokens, &values)
                    .expect("rewrite");
                // Bytes 120..128 are reserved: zeros on write, ignored on read.
                let mut want = data.clone();
                want[120..128].fill(0);
                assert_eq!(std::fs::read(&again).expect("read"), want, "{name}");
            }
            Err(e) => {
                assert!(!seed, "seed {name} rejected: {e}");
                assert!(e.to_string().contains("in.rwkvstate"), "{name}: {e}");
            }
        }
    }
    assert!(accepted >= 2);
}

#[test]
fn npy_corpus_replays() {
    let path = Path::new("fuzz.npy");
    for (name, data, seed) in inputs("npy") {
        match npy::parse_f32(path, &data) {
            Ok((shape, values)) => {
                assert_eq!(shape.iter().product::<usize>(), values.len(), "{name}");
                let bytes = npy::encode_f32(&shape, &values).expect("encode");
                let (s2, v2) = npy::parse_f32(path, &bytes).expect("parse back");
                assert_eq!(s2, shape, "{name}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&v2), bits(&values), "{name}");
            }
            Err(e) => {
                assert!(!seed, "seed {name} rejected: {e}");
                assert!(e.to_string().contains("fuzz.npy"), "{name}: {e}");
            }
        }
    }
}
