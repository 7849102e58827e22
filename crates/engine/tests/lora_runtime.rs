#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! LoRA at run time against the same adapters merged into the weights (`W + s · B A`,
//! written here as a new SafeTensors file with f32 matrices and loaded as a model): at every
//! position of the fixture sentence, through the prefill kernels (one pass of 45 tokens) and
//! the decode kernels (one token a pass), one adapter and two at once; the base comes back
//! exactly when the set is emptied, and an initial state equals writing that state.
//!
//! Tolerance: the GPU keeps adapters in f16 (as adapter files hold them), so the seeded
//! adapters here are f16 values and both sides see the same `A` and `B`; the merged model
//! rounds `W + s·B·A` once to f32 where the run-time path sums `W x` and `B (A x)`
//! separately, so the two differ by a few f32 roundings per product, amplified through 2
//! layers: 2e-3 on logits of magnitude ~10 (the peer tests' logit tolerance), with top-1
//! identical everywhere.

mod support;

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rwkv_engine::{
    AdapterFormat, Engine, InitState, LoadOptions, LoraAdapter, LoraMatrix, LoraTarget, Rows,
};
use safetensors::{Dtype, SafeTensors};
use support::*;

const TOL: f32 = 2e-3;

/// A seeded adapter of `rank` on every adapted matrix of every layer of the tiny model
/// (C 128, F 512, 2 layers), scaled so that the logits move by whole units; its values are
/// f16 values (what adapter files hold and the GPU keeps).
fn adapter(seed: u64, rank: usize) -> LoraAdapter {
    let (c, f, layers) = (128, 512, 2);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut rng = move || half::f16::from_f32(rng.gen_range(-0.3..0.3)).to_f32();
    let mut matrices = Vec::new();
    for layer in 0..layers {
        for t in LoraTarget::ALL {
            let (n_out, n_in) = match t {
                LoraTarget::FfnKey => (f, c),
                LoraTarget::FfnValue => (c, f),
                _ => (c, c),
            };
            let a = (0..rank * n_in).map(|_| rng()).collect();
            let b = (0..n_out * rank).map(|_| rng()).collect();
            matrices.push(LoraMatrix {
                layer,
                target: t,
                rank,
                n_in,
                n_out,
                a,
                b,
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

/// The tiny model with `Σ s · B A` added to its adapted matrices, as f32, in a new file.
fn merged(adapters: &[(&LoraAdapter, f32)], name: &str) -> std::path::PathBuf {
    let bytes = std::fs::read(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut out: HashMap<String, (Dtype, Vec<usize>, Vec<u8>)> = HashMap::new();
    for (tname, view) in st.tensors() {
        let mut entry = (view.dtype(), view.shape().to_vec(), view.data().to_vec());
        for (ad, s) in adapters {
            for m in &ad.matrices {
                if tname != format!("blocks.{}.{}.weight", m.layer, m.target.name()) {
                    continue;
                }
                let mut w: Vec<f32> = match entry.0 {
                    Dtype::F16 => entry
                        .2
                        .chunks(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                        .collect(),
                    Dtype::F32 => bytemuck::pod_collect_to_vec(&entry.2),
                    d => panic!("{tname}: {d:?}"),
                };
                assert_eq!(w.len(), m.n_out * m.n_in, "{tname}");
                for o in 0..m.n_out {
                    for i in 0..m.n_in {
                        let d: f64 = (0..m.rank)
                            .map(|j| m.b[o * m.rank + j] as f64 * m.a[j * m.n_in + i] as f64)
                            .sum();
                        w[o * m.n_in + i] += (*s as f64 * d) as f32;
                    }
                }
                entry = (
                    Dtype::F32,
                    entry.1.clone(),
                    bytemuck::cast_slice(&w).to_vec(),
                );
            }
        }
        out.insert(tname, entry);
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = out
        .iter()
        .map(|(n, (d, s, b))| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let path = scratch(name).join("merged.safetensors");
    safetensors::serialize_to_file(views, None, &path).unwrap();
    path
}

fn load(path: &std::path::Path) -> Engine {
    Engine::load_on(gpu(), path, &LoadOptions::default()).unwrap()
}

/// Logits at every position, one pass of all tokens (prefill kernels).
fn prefill(eng: &mut Engine, tokens: &[u32]) -> Vec<f32> {
    eng.logits_all(tokens, None).unwrap()
}

/// Logits at every position, one token a pass (decode kernels).
fn decode(eng: &mut Engine, tokens: &[u32]) -> Vec<f32> {
    let st = eng.new_state().unwrap();
    let mut all = Vec::new();
    for &t in tokens {
        all.extend(eng.logits_all(&[t], Some(st)).unwrap());
        // logits_all works on a fork: advance the state itself.
        let want = rwkv_engine::Want {
            logits: false,
            embeddings: false,
        };
        let seq = rwkv_engine::SeqInput {
            state: st,
            tokens: &[t],
            rows: Rows::Last,
        };
        eng.forward(&[seq], want, None).unwrap();
    }
    eng.free_state(st).unwrap();
    all
}

#[track_caller]
fn same(what: &str, got: &[f32], want: &[f32], vocab: usize) {
    let d = max_abs(got, want);
    assert!(d < TOL, "{what}: max |Δ| {d}");
    for (t, (g, w)) in got.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
        assert_eq!(top20_of(g)[0], top20_of(w)[0], "{what}: top-1 at {t}");
    }
}

#[test]
fn lora_at_run_time_equals_the_merged_weights() {
    let tokens = Reference::load("tiny").tokens;
    let a = adapter(1, 8);
    let b = adapter(2, 16);
    let mut base = engine("rwkv7-tiny.safetensors");
    let vocab = base.config().vocab_size;
    let plain = prefill(&mut base, &tokens);

    let ia = base.load_lora(&a).unwrap();
    let ib = base.load_lora(&b).unwrap();
    // Loaded but not active: still the base, bit for bit.
    assert_eq!(prefill(&mut base, &tokens), plain);

    base.set_active_loras(&[(ia, 0.7)]).unwrap();
    let one = prefill(&mut base, &tokens);
    let one_dec = decode(&mut base, &tokens);
    let mut m1 = load(&merged(&[(&a, 0.7)], "lora-merged-one"));
    let want = prefill(&mut m1, &tokens);
    let moved = max_abs(&want, &plain);
    assert!(moved > 0.5, "the adapter barely moves the logits ({moved})");
    same("one adapter, prefill", &one, &want, vocab);
    same("one adapter, decode", &one_dec, &want, vocab);

    base.set_active_loras(&[(ia, 0.7), (ib, -0.4)]).unwrap();
    let two = prefill(&mut base, &tokens);
    let two_dec = decode(&mut base, &tokens);
    let mut m2 = load(&merged(&[(&a, 0.7), (&b, -0.4)], "lora-merged-two"));
    let want2 = prefill(&mut m2, &tokens);
    same("two adapters, prefill", &two, &want2, vocab);
    same("two adapters, decode", &two_dec, &want2, vocab);

    // Back to one, then none: the same results as before, no reload.
    base.set_active_loras(&[(ia, 0.7)]).unwrap();
    assert_eq!(prefill(&mut base, &tokens), one);
    base.set_active_loras(&[]).unwrap();
    assert_eq!(prefill(&mut base, &tokens), plain);

    // Unloading an active adapter takes it out of the set.
    base.set_active_loras(&[(ib, 1.0)]).unwrap();
    base.unload_lora(ib).unwrap();
    assert!(base.active_loras().is_empty());
    assert_eq!(prefill(&mut base, &tokens), plain);
    assert!(base.set_active_loras(&[(ib, 1.0)]).is_err());
}

#[test]
fn a_state_is_kept_across_a_change_of_adapters() {
    let tokens = Reference::load("tiny").tokens;
    let a = adapter(3, 4);
    let mut eng = engine("rwkv7-tiny.safetensors");
    let ia = eng.load_lora(&a).unwrap();
    let st = eng.new_state().unwrap();
    let seq = rwkv_engine::SeqInput {
        state: st,
        tokens: &tokens[..20],
        rows: Rows::Last,
    };
    let want = rwkv_engine::Want {
        logits: false,
        embeddings: false,
    };
    eng.forward(&[seq], want, None).unwrap();
    let mut before = vec![0f32; eng.state_len()];
    eng.read_state(st, &mut before).unwrap();
    eng.set_active_loras(&[(ia, 1.0)]).unwrap();
    let mut after = vec![0f32; eng.state_len()];
    eng.read_state(st, &mut after).unwrap();
    assert_eq!(before, after);
}

#[test]
fn bad_adapters_and_sets_are_refused_whole() {
    let mut eng = engine("rwkv7-tiny.safetensors");
    // A matrix of another model's shape: refused, nothing loaded.
    let mut bad = adapter(4, 4);
    bad.matrices[3].n_in = 256;
    bad.matrices[3].a = vec![0.0; 4 * 256];
    let e = eng.load_lora(&bad).unwrap_err();
    assert!(
        matches!(&e, rwkv_engine::EngineError::Adapter { .. })
            && e.to_string().contains("att.output"),
        "{e}"
    );
    let ok = eng.load_lora(&adapter(5, 4)).unwrap();
    let e = eng.set_active_loras(&[(ok, 1.0), (ok, 2.0)]).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    let e = eng.set_active_loras(&[(ok, f32::NAN)]).unwrap_err();
    assert!(e.to_string().contains("not finite"), "{e}");
    assert!(eng.active_loras().is_empty());
}

#[test]
fn an_initial_state_is_the_state_it_holds() {
    let tokens = Reference::load("tiny").tokens;
    let mut eng = engine("rwkv7-tiny.safetensors");
    let cfg = *eng.config();
    let n = cfg.n_layer * cfg.n_head * cfg.head_size * cfg.head_size;
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let init = InitState {
        name: "seeded".into(),
        format: AdapterFormat::SafeTensors,
        n_layer: cfg.n_layer,
        n_head: cfg.n_head,
        head_size: cfg.head_size,
        wkv: (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect(),
    };
    let from_init = eng.new_state_from(&init).unwrap();
    let written = eng.new_state().unwrap();
    eng.write_state(written, &init.to_state(&cfg).unwrap())
        .unwrap();
    let a = eng.logits_all(&tokens, Some(from_init)).unwrap();
    let b = eng.logits_all(&tokens, Some(written)).unwrap();
    let zero = eng.logits_all(&tokens, None).unwrap();
    assert_eq!(a, b);
    assert!(
        max_abs(&a, &zero) > 0.1,
        "the initial state changes nothing"
    );
    let wrong = InitState {
        n_head: 3,
        ..init.clone()
    };
    assert!(matches!(
        eng.new_state_from(&wrong),
        Err(rwkv_engine::EngineError::Adapter { .. })
    ));
}

/// The GPU keeps adapters in f16: a value outside its range is refused, naming the
/// tensor, and nothing is uploaded (the engine still runs the base).
#[test]
fn a_value_beyond_f16_is_refused_naming_the_tensor() {
    let tokens = Reference::load("tiny").tokens;
    let mut eng = engine("rwkv7-tiny.safetensors");
    let plain = prefill(&mut eng, &tokens);
    let mut a = adapter(3, 8);
    let m = a
        .matrices
        .iter_mut()
        .find(|m| m.layer == 1 && m.target == LoraTarget::FfnValue)
        .unwrap();
    m.b[5] = 1e6;
    let e = eng.load_lora(&a).unwrap_err().to_string();
    assert!(
        e.contains("block 1") && e.contains("lora_B") && e.contains("f16"),
        "{e}"
    );
    assert_eq!(prefill(&mut eng, &tokens), plain);
}
