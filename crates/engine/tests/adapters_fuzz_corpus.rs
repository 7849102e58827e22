#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! The `adapters` fuzz target's seeds and minimized corpus (`fuzz/seeds/adapters/`,
//! `fuzz/corpus-min/adapters/`) replayed as an ordinary test with the target's checks
//! (`fuzz/fuzz_targets/adapters.rs`): every input gives `Ok` or an error naming the file;
//! what is accepted is consistent (also read against the base, `from_bytes_for`). The
//! seeds are valid files: each must be accepted by the reader its name says (LoRA or
//! state) and fit the seeds' base shape.

use std::path::Path;

use rwkv_engine::{InitState, LoraAdapter, LoraBase, LoraRanks, Rwkv7Config};

fn inputs() -> Vec<(String, Vec<u8>, bool)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for (dir, seed) in [("seeds", true), ("corpus-min", false)] {
        let Ok(rd) = std::fs::read_dir(fuzz.join(dir).join("adapters")) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            out.push((p.display().to_string(), std::fs::read(&p).unwrap(), seed));
        }
    }
    out.sort();
    assert!(
        out.iter().filter(|i| i.2).count() >= 5,
        "seeds missing: run fuzz/make_adapter_seeds.py"
    );
    out
}

#[test]
fn adapters_corpus_replays() {
    // The seeds' base (fuzz/make_adapter_seeds.py): C 16, F 32, 2 layers, head 8.
    let base = Rwkv7Config {
        n_layer: 2,
        n_embd: 16,
        head_size: 8,
        n_head: 2,
        ffn_dim: 32,
        vocab_size: 8,
        lora: LoraRanks {
            decay_w: 4,
            iclr_a: 4,
            value_v: 4,
            gate_g: 4,
        },
    };
    let (mut loras, mut states) = (0, 0);
    for (name, data, seed) in inputs() {
        let is_lora = name.contains("lora");
        match LoraAdapter::from_bytes("fuzz.bin", &data) {
            Ok(a) => {
                loras += 1;
                for m in &a.matrices {
                    assert_eq!(m.a.len(), m.rank * m.n_in, "{name}");
                    assert_eq!(m.b.len(), m.n_out * m.rank, "{name}");
                    assert!(m.a.iter().chain(&m.b).all(|v| v.is_finite()), "{name}");
                }
                if seed {
                    assert!(is_lora, "{name} read as a LoRA");
                    a.check(&base).unwrap();
                    assert_eq!((a.matrices.len(), a.rank()), (12, 2), "{name}");
                }
            }
            Err(e) => {
                assert!(!seed || !is_lora, "seed {name} rejected: {e}");
                assert!(e.to_string().contains("fuzz.bin"), "{name}: {e}");
            }
        }
        // Checked against the base before decoding: the LoRA seeds still read, and what
        // reads fits the base; the corpus's hostile-* files are refused.
        match LoraAdapter::from_bytes_for("fuzz.bin", &data, &LoraBase::new(&base, 0)) {
            Ok(a) => a.check(&base).unwrap(),
            Err(e) => {
                assert!(
                    !seed || !is_lora,
                    "seed {name} rejected against the base: {e}"
                );
                assert!(e.to_string().contains("fuzz.bin"), "{name}: {e}");
            }
        }
        match InitState::from_bytes("fuzz.bin", &data) {
            Ok(s) => {
                states += 1;
                assert_eq!(
                    s.wkv.len(),
                    s.n_layer * s.n_head * s.head_size * s.head_size
                );
                assert!(s.wkv.iter().all(|v| v.is_finite()), "{name}");
                if seed {
                    assert!(!is_lora, "{name} read as a state");
                    assert_eq!(s.to_state(&base).unwrap().len(), base.state_len());
                }
            }
            Err(e) => {
                assert!(!seed || is_lora, "seed {name} rejected: {e}");
                assert!(e.to_string().contains("fuzz.bin"), "{name}: {e}");
            }
        }
    }
    assert!(
        loras >= 3 && states >= 2,
        "{loras} LoRAs, {states} states accepted"
    );
}
