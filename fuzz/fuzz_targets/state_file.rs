//! `.rwkvstate` reader (`read_state_header`, `read_state_file`) on arbitrary bytes: any
//! input gives `Ok` or an error naming the file, never a panic or an allocation sized by the
//! file's claims; what it accepts has exactly the values the layout needs, all finite, and
//! writing them again with the header's fields gives back the input byte for byte (but the
//! reserved bytes).
//!
//! The reader takes paths (it checks the header before reading the data), so each input
//! goes through a file in a RAM folder (`/dev/shm` where there is one).
#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use rwkv_engine::format::{read_state_file, read_state_header, write_state_file};
use sha2::{Digest, Sha256};

fn scratch(name: &str) -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("rwkv-fuzz-{}-{name}.rwkvstate", std::process::id()))
}

/// The input is a flag byte and the file. Flag bit 0 set: the data's sha256 is written into
/// the header first, so that mutated values get past the checksum and reach the checks
/// behind it (a file from a buggy writer: valid checksum, bad values).
fn file_of(input: &[u8]) -> Option<Vec<u8>> {
    let (&flag, file) = input.split_first()?;
    let mut file = file.to_vec();
    if flag & 1 == 1 && file.len() >= 128 {
        let sha: [u8; 32] = Sha256::digest(&file[128..]).into();
        file[88..120].copy_from_slice(&sha);
    }
    Some(file)
}

fuzz_target!(|input: &[u8]| {
    let Some(data) = file_of(input) else { return };
    let data = &data[..];
    let input = scratch("in");
    std::fs::write(&input, data).expect("scratch file");
    let header = read_state_header(&input);
    match read_state_file(&input) {
        Ok((h, values)) => {
            assert_eq!(
                header.as_ref().ok(),
                Some(&h),
                "header alone and whole file agree"
            );
            assert_eq!(h.layout.values(), Some(values.len()));
            assert_eq!(h.values as usize, values.len());
            assert!(values.iter().all(|v| v.is_finite()));
            let again = scratch("again");
            let h2 = write_state_file(&again, h.fingerprint, h.layout, h.tokens, &values)
                .expect("rewrite");
            assert_eq!(h2, h);
            // Bytes 120..128 are reserved: written as zeros, ignored on read
            // (docs/state-format.md), so they are the one part that may differ.
            let mut want = data.to_vec();
            want[120..128].fill(0);
            assert_eq!(
                std::fs::read(&again).expect("read back"),
                want,
                "round trip"
            );
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("rwkvstate"), "the error names the file: {msg}");
        }
    }
});
