#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! Decode passes with the adapters' first products of att.output, ffn.key and ffn.value
//! fused into the kernels that produce their inputs (`RWKV_LORA_FUSE`, read when the
//! graph is built: `model/graph_lora.rs`) against the same passes with each first product
//! its own dispatch (`RWKV_LORA_FUSE=0`, the path `lora_runtime.rs` checks against merged
//! weights): two adapters at once, two sequences, passes of 1, 2, 5 and 8 tokens.
//!
//! One test function: the knob is an environment variable of this process.
//!
//! Tolerance: both sides run the same kernels for everything but the three first products,
//! whose h differs by f32 summation order (one reduction against partials in fixed point,
//! 2⁻²⁵ each) — ~1e-6 relative on h, amplified through 2 layers: 1e-4 relative to the
//! largest logit.

mod support;

use rand::{Rng, SeedableRng};
use rwkv_engine::{
    AdapterFormat, Engine, LoraAdapter, LoraId, LoraMatrix, LoraTarget, Rows, SeqInput, Want,
};
use support::*;

/// A seeded adapter of `rank` on every adapted matrix of the tiny model (C 128, F 512,
/// 2 layers), f16 values.
fn adapter(seed: u64, rank: usize) -> LoraAdapter {
    let (c, f) = (128, 512);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut rng = move || half::f16::from_f32(rng.gen_range(-0.3..0.3)).to_f32();
    let mut matrices = Vec::new();
    for layer in 0..2 {
        for t in LoraTarget::ALL {
            let (n_out, n_in) = match t {
                LoraTarget::FfnKey => (f, c),
                LoraTarget::FfnValue => (c, f),
                _ => (c, c),
            };
            matrices.push(LoraMatrix {
                layer,
                target: t,
                rank,
                n_in,
                n_out,
                a: (0..rank * n_in).map(|_| rng()).collect(),
                b: (0..n_out * rank).map(|_| rng()).collect(),
            });
        }
    }
    LoraAdapter {
        name: format!("seeded-{seed}"),
        format: AdapterFormat::SafeTensors,
        alpha: None,
        matrices,
    }
}

/// Rebuilds the graph with `RWKV_LORA_FUSE=fuse` and the two adapters, then runs two
/// sequences (a prefill of 12 and 9 tokens, then decode passes of 3 + 2, 1 + 1, 1 and
/// 4 + 4 tokens): every decode pass's logits, in order.
fn decode_logits(eng: &mut Engine, set: &[(LoraId, f32)], fuse: &str) -> Vec<f32> {
    std::env::set_var("RWKV_LORA_FUSE", fuse);
    eng.set_active_loras(&[]).unwrap();
    eng.set_active_loras(set).unwrap();
    let toks = Reference::load("tiny").tokens;
    let (a, b) = (eng.new_state().unwrap(), eng.new_state().unwrap());
    let want = Want {
        logits: true,
        embeddings: false,
    };
    let mut out = Vec::new();
    let passes: [(&[u32], &[u32]); 5] = [
        (&toks[..12], &toks[20..29]),
        (&toks[12..15], &toks[29..31]),
        (&toks[15..16], &toks[31..32]),
        (&toks[16..17], &[]),
        (&toks[17..21], &toks[32..36]),
    ];
    for (i, (ta, tb)) in passes.into_iter().enumerate() {
        let mut seqs = vec![SeqInput {
            state: a,
            tokens: ta,
            rows: Rows::All,
        }];
        if !tb.is_empty() {
            seqs.push(SeqInput {
                state: b,
                tokens: tb,
                rows: Rows::All,
            });
        }
        let r = eng.forward(&seqs, want, None).unwrap();
        if i > 0 {
            out.extend(r.logits.concat());
        }
    }
    eng.free_state(a).unwrap();
    eng.free_state(b).unwrap();
    out
}

/// Dispatches of a one-token decode pass per block (the profile's labels).
fn per_block(eng: &mut Engine) -> Vec<usize> {
    let st = eng.new_state().unwrap();
    let p = eng.profile(st, &[1]).unwrap();
    eng.free_state(st).unwrap();
    let n_layer = eng.config().n_layer;
    (0..n_layer)
        .map(|l| p.dispatches.iter().filter(|d| d.layer == Some(l)).count())
        .collect()
}

#[test]
fn fused_first_products_match_their_own_dispatches() {
    let mut eng = engine("rwkv7-tiny.safetensors");
    let ia = eng.load_lora(&adapter(21, 8)).unwrap();
    let ib = eng.load_lora(&adapter(22, 16)).unwrap();
    let set = [(ia, 0.7), (ib, -0.4)];
    let plain = decode_logits(&mut eng, &set, "0");
    let plain_n = per_block(&mut eng);
    let fused = decode_logits(&mut eng, &set, "1");
    let fused_n = per_block(&mut eng);
    std::env::remove_var("RWKV_LORA_FUSE");
    let scale = plain.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = max_abs(&fused, &plain);
    assert!(
        d <= 1e-4 * scale,
        "fused vs separate first products: max |Δ| {d} (logits up to {scale})"
    );
    eprintln!("max |Δ| {d}; decode dispatches per block: separate {plain_n:?}, fused {fused_n:?}");
    // The three first products (att.output, ffn.key, ffn.value) dispatch nothing.
    for (p, f) in plain_n.iter().zip(&fused_n) {
        assert_eq!(
            p - f,
            3,
            "per block: {plain_n:?} separate, {fused_n:?} fused"
        );
    }
}
