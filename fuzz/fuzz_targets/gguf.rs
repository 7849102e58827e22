//! GGUF header reader, then the RWKV-7 mapping and `to_f32` of every vector, on arbitrary
//! bytes: any input must give `Ok` or an error, never a panic, and what parses lies inside
//! the input. The header is also parsed under small metadata limits (4,096 elements,
//! 64 KiB), so inputs of a few KiB reach the budget's paths (the committed cases in
//! `corpus-min/gguf/hostile-*` do); what passes them is within them.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rwkv_engine::format::gguf;
use rwkv_engine::{ModelFile, Rwkv7Weights};

/// As `crates/engine/tests/hostile/mod.rs` `FUZZ_GGUF_LIMITS`.
const SMALL: gguf::Limits = gguf::Limits {
    meta_elements: 4096,
    meta_bytes: 64 << 10,
};

fuzz_target!(|data: &[u8]| {
    match gguf::parse_with(Path::new("fuzz.gguf"), data, &SMALL) {
        Ok(p) => {
            let elements: usize = p
                .metadata
                .iter()
                .map(|(_, v)| 1 + v.as_array().map_or(0, |a| a.len()))
                .sum();
            assert!(elements as u64 <= SMALL.meta_elements);
        }
        Err(e) => assert!(e.to_string().contains("fuzz.gguf"), "{e}"),
    }
    if let Ok(p) = gguf::parse(Path::new("fuzz.gguf"), data) {
        for t in &p.tensors {
            assert!(t.offset.checked_add(t.len).is_some_and(|e| e <= data.len()));
            assert_eq!(Some(t.len), t.dtype.bytes_for(t.numel()));
        }
        rwkv_common::exercise(data);
    }
});

mod rwkv_common {
    use super::*;

    /// Opens the bytes as a model and maps it; decodes the small tensors.
    pub fn exercise(data: &[u8]) {
        let Ok(file) = ModelFile::from_bytes("fuzz.gguf", data) else {
            return;
        };
        let Ok(w) = Rwkv7Weights::from_file(&file) else {
            return;
        };
        let _ = w.ln0.weight.to_f32();
        for b in &w.blocks {
            let _ = b.att.x_g.to_f32();
            let _ = b.att.r_k.to_f32();
            let _ = b.att.w1.to_f32_out_in();
        }
    }
}
