//! LoRA adapter and initial-state readers (`LoraAdapter::from_bytes`,
//! `LoraAdapter::from_bytes_for` — factors checked against the base before decoding —,
//! `InitState::from_bytes`: GGUF / SafeTensors / `.pth` sniffed by magic) and the checks
//! against a base shape: any input must give `Ok` or an error naming the file, never a
//! panic; what is accepted is consistent (factor lengths, finite values, state size).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rwkv_engine::{InitState, LoraAdapter, LoraBase, LoraRanks, Rwkv7Config};

fn cfg(c: usize, f: usize, layers: usize, head: usize) -> Rwkv7Config {
    Rwkv7Config {
        n_layer: layers,
        n_embd: c,
        head_size: head,
        n_head: c / head,
        ffn_dim: f,
        vocab_size: 8,
        lora: LoraRanks {
            decay_w: 4,
            iclr_a: 4,
            value_v: 4,
            gate_g: 4,
        },
    }
}

fuzz_target!(|data: &[u8]| {
    // The seeds' base shape (fuzz/make_adapter_seeds.py): C 16, F 32, 2 layers, head 8.
    let base = cfg(16, 32, 2, 8);
    match LoraAdapter::from_bytes("fuzz.bin", data) {
        Ok(a) => {
            assert!(!a.matrices.is_empty());
            for m in &a.matrices {
                assert_eq!(m.a.len(), m.rank * m.n_in);
                assert_eq!(m.b.len(), m.n_out * m.rank);
                assert!(m.a.iter().chain(&m.b).all(|v| v.is_finite()));
            }
            let _ = a.default_scale();
            let _ = a.check(&base);
        }
        Err(e) => assert!(e.to_string().contains("fuzz.bin"), "{e}"),
    }
    // Against the base: what it accepts fits the base (and was checked before decoding).
    match LoraAdapter::from_bytes_for("fuzz.bin", data, &LoraBase::new(&base, 0)) {
        Ok(a) => assert!(a.check(&base).is_ok()),
        Err(e) => assert!(e.to_string().contains("fuzz.bin"), "{e}"),
    }
    match InitState::from_bytes("fuzz.bin", data) {
        Ok(s) => {
            assert_eq!(
                s.wkv.len(),
                s.n_layer * s.n_head * s.head_size * s.head_size
            );
            assert!(s.wkv.iter().all(|v| v.is_finite()));
            if s.check(&base).is_ok() {
                let v = s.to_state(&base).expect("to_state after check");
                assert_eq!(v.len(), base.state_len());
            }
        }
        Err(e) => assert!(e.to_string().contains("fuzz.bin"), "{e}"),
    }
});
