//! SafeTensors and PyTorch `.pth` (zip + pickle) readers through `ModelFile::from_bytes`
//! (the format is chosen by magic, as for files), then the RWKV-7 mapping: any input must
//! give `Ok` or an error, never a panic; tensors lie inside the input.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rwkv_engine::format::{pth, safetensors};
use rwkv_engine::{ModelFile, Rwkv7Weights};

fuzz_target!(|data: &[u8]| {
    let p = Path::new("fuzz.bin");
    let parsed = if data.starts_with(b"PK\x03\x04") {
        pth::parse(p, data).map(|t| t.len())
    } else {
        safetensors::parse(p, data).map(|(t, _)| t.len())
    };
    if parsed.is_err() {
        return;
    }
    let Ok(file) = ModelFile::from_bytes("fuzz.bin", data) else {
        return;
    };
    for t in file.tensors() {
        assert!(t.offset.checked_add(t.len).is_some_and(|e| e <= data.len()));
    }
    if let Ok(w) = Rwkv7Weights::from_file(&file) {
        let _ = w.ln_out.bias.to_f32();
        for b in &w.blocks {
            let _ = b.att.x_r.to_f32();
            let _ = b.att.a1.to_f32_out_in();
        }
    }
});
