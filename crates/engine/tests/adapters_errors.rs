#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! Bad adapter and initial-state files → errors that name the file and the tensor (the
//! bad files are made here: small SafeTensors / GGUF files built byte by byte, and the
//! committed test adapters truncated or patched).

mod support;

use std::path::PathBuf;

use rwkv_engine::format::MetaValue;
use rwkv_engine::{EngineError, InitState, LoraAdapter, ModelFile, Rwkv7Weights};
use support::*;

fn adapters_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/adapters"
    ))
}

/// A SafeTensors file of F32 tensors `(name, shape, values)` with `__metadata__` `meta`.
fn safetensors(tensors: &[(&str, Vec<usize>, Vec<f32>)], meta: &[(&str, &str)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !meta.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = meta
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        header.insert("__metadata__".into(), m.into());
    }
    let mut data = Vec::new();
    for (name, shape, vals) in tensors {
        let begin = data.len();
        data.extend(vals.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    out
}

/// A LoRA pair for `blocks.0.att.key` of a `c`-wide model, rank `r`.
fn pair(c: usize, r: usize) -> Vec<(&'static str, Vec<usize>, Vec<f32>)> {
    vec![
        ("blocks.0.att.key.lora_A", vec![r, c], vec![0.5; r * c]),
        ("blocks.0.att.key.lora_B", vec![c, r], vec![0.25; c * r]),
    ]
}

/// Asserts `e` is `EngineError::Adapter` for file `name` whose message holds every needle.
#[track_caller]
fn assert_adapter(e: &EngineError, name: &str, needles: &[&str]) {
    match e {
        EngineError::Adapter { name: n, what } => {
            assert_eq!(n, name, "error names the wrong file: {e}");
            for needle in needles {
                assert!(
                    what.contains(needle),
                    "{what:?} does not mention {needle:?}"
                );
            }
        }
        other => panic!("expected Adapter error for {name}, got {other:?}"),
    }
}

fn tiny_cfg() -> rwkv_engine::Rwkv7Config {
    let f = ModelFile::open(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    Rwkv7Weights::from_file(&f).unwrap().config
}

#[test]
fn a_good_small_file_reads_and_alpha_sets_the_default_scale() {
    let bytes = safetensors(&pair(128, 8), &[("lora_alpha", "32")]);
    let a = LoraAdapter::from_bytes("ok.safetensors", &bytes).unwrap();
    assert_eq!((a.alpha, a.rank()), (Some(32.0), 8));
    assert_eq!(a.default_scale(), 4.0); // alpha / r
    a.check(&tiny_cfg()).unwrap();
    let m = &a.matrices[0];
    assert_eq!((m.n_out, m.n_in, m.rank), (128, 128, 8));
    assert!(m.a.iter().all(|&v| v == 0.5) && m.b.iter().all(|&v| v == 0.25));
}

#[test]
fn wrong_base_shape_names_the_tensor() {
    // The tiny model's adapter (C = 128) against the small model (C = 256).
    let a = LoraAdapter::open(adapters_dir().join("rwkv7-tiny.lora.safetensors")).unwrap();
    let small = ModelFile::open(fixtures().join("rwkv7-small-Q4_K_M.gguf")).unwrap();
    let cfg = Rwkv7Weights::from_file(&small).unwrap().config;
    let e = a.check(&cfg).unwrap_err();
    assert_adapter(
        &e,
        "rwkv7-tiny.lora.safetensors",
        &["blocks.0.att.receptance", "128×128", "256×256"],
    );
    // … and merging it is refused before anything is written.
    let out = scratch("adapters-err-merge").join("m.safetensors");
    let e = rwkv_engine::api::merge_to_safetensors(&small, &[(&a, 1.0)], &out).unwrap_err();
    assert_adapter(&e, "rwkv7-tiny.lora.safetensors", &["256×256"]);
    assert!(!out.exists());
    // A layer the model lacks.
    let mut t = pair(128, 4);
    t[0].0 = "blocks.7.att.key.lora_A";
    t[1].0 = "blocks.7.att.key.lora_B";
    let a = LoraAdapter::from_bytes("deep.safetensors", &safetensors(&t, &[])).unwrap();
    let e = a.check(&tiny_cfg()).unwrap_err();
    assert_adapter(&e, "deep.safetensors", &["blocks.7.att.key", "2 layers"]);
}

#[test]
fn rank_mismatch_names_both_factors() {
    let mut t = pair(128, 8);
    t[1] = ("blocks.0.att.key.lora_B", vec![128, 4], vec![0.0; 512]);
    let e = LoraAdapter::from_bytes("ranks.safetensors", &safetensors(&t, &[])).unwrap_err();
    assert_adapter(
        &e,
        "ranks.safetensors",
        &[
            "rank mismatch",
            "blocks.0.att.key.lora_A",
            "blocks.0.att.key.lora_B",
            "rank 8",
            "rank 4",
        ],
    );
}

#[test]
fn missing_pair_and_non_matrix_factors() {
    let t = pair(128, 8);
    let e = LoraAdapter::from_bytes("half.safetensors", &safetensors(&t[..1], &[])).unwrap_err();
    assert_adapter(
        &e,
        "half.safetensors",
        &["blocks.0.att.key.lora_A", "no matching B"],
    );
    let t = vec![
        ("blocks.0.att.key.lora_A", vec![8, 128, 1], vec![0.0; 1024]),
        ("blocks.0.att.key.lora_B", vec![128, 8], vec![0.0; 1024]),
    ];
    let e = LoraAdapter::from_bytes("cube.safetensors", &safetensors(&t, &[])).unwrap_err();
    assert_adapter(&e, "cube.safetensors", &["[8, 128, 1]", "matrices"]);
}

#[test]
fn unknown_names_are_named() {
    let mut t = pair(128, 8);
    t.push(("blocks.0.att.gate.lora_A", vec![8, 128], vec![0.0; 1024]));
    let e = LoraAdapter::from_bytes("gate.safetensors", &safetensors(&t, &[])).unwrap_err();
    assert_adapter(
        &e,
        "gate.safetensors",
        &["blocks.0.att.gate.lora_A", "not a LoRA factor"],
    );
    // RWKV-PEFT's --train_parts ln saves full tensors beside the factors: said so.
    let mut t = pair(128, 8);
    t.push(("blocks.0.ln1.weight", vec![128], vec![1.0; 128]));
    let e = LoraAdapter::from_bytes("ln.safetensors", &safetensors(&t, &[])).unwrap_err();
    assert_adapter(
        &e,
        "ln.safetensors",
        &["blocks.0.ln1.weight", "--train_parts"],
    );
    let e = LoraAdapter::from_bytes("empty.safetensors", &safetensors(&[], &[])).unwrap_err();
    assert_adapter(&e, "empty.safetensors", &["no LoRA tensors"]);
}

#[test]
fn non_finite_values_are_named() {
    let mut t = pair(128, 8);
    t[1].2[17] = f32::NAN;
    let e = LoraAdapter::from_bytes("nan.safetensors", &safetensors(&t, &[])).unwrap_err();
    assert_adapter(
        &e,
        "nan.safetensors",
        &["blocks.0.att.key.lora_B", "non-finite", "element 17"],
    );
    let e = LoraAdapter::from_bytes(
        "alpha.safetensors",
        &safetensors(&pair(128, 8), &[("lora_alpha", "sixteen")]),
    )
    .unwrap_err();
    assert_adapter(&e, "alpha.safetensors", &["lora_alpha", "sixteen"]);
}

#[test]
fn truncated_files_name_the_file() {
    for ext in ["pth", "safetensors", "gguf"] {
        let name = format!("rwkv7-tiny.lora.{ext}");
        let bytes = std::fs::read(adapters_dir().join(&name)).unwrap();
        for cut in [bytes.len() / 2, bytes.len() - 7, 5] {
            let e = LoraAdapter::from_bytes(&name, &bytes[..cut]).unwrap_err();
            match &e {
                EngineError::Malformed { path, .. } => assert_eq!(path, &PathBuf::from(&name)),
                other => panic!("{name} cut at {cut}: expected Malformed, got {other:?}"),
            }
        }
    }
    let name = "rwkv7-tiny.state.pth";
    let bytes = std::fs::read(adapters_dir().join(name)).unwrap();
    let e = InitState::from_bytes(name, &bytes[..bytes.len() / 2]).unwrap_err();
    assert!(
        matches!(&e, EngineError::Malformed { path, .. } if path == &PathBuf::from(name)),
        "{e:?}"
    );
}

#[test]
fn a_base_model_is_not_an_adapter() {
    let e = LoraAdapter::open(fixtures().join("rwkv7-tiny.safetensors")).unwrap_err();
    assert_adapter(&e, "rwkv7-tiny.safetensors", &["base model"]);
    let e = LoraAdapter::open(fixtures().join("rwkv7-small-Q4_K_M.gguf")).unwrap_err();
    assert_adapter(
        &e,
        "rwkv7-small-Q4_K_M.gguf",
        &["general.type", "base model"],
    );
    let e = InitState::open(fixtures().join("rwkv7-tiny.safetensors")).unwrap_err();
    assert_adapter(
        &e,
        "rwkv7-tiny.safetensors",
        &["model, not an initial state"],
    );
}

#[test]
fn lora_and_state_files_are_told_apart() {
    let dir = adapters_dir();
    for ext in ["pth", "safetensors"] {
        let name = format!("rwkv7-tiny.state.{ext}");
        let e = LoraAdapter::open(dir.join(&name)).unwrap_err();
        assert_adapter(&e, &name, &["blocks.0.att.time_state", "initial state"]);
        let name = format!("rwkv7-tiny.lora.{ext}");
        let e = InitState::open(dir.join(&name)).unwrap_err();
        assert_adapter(&e, &name, &["lora_", "LoRA adapter, not an initial state"]);
    }
    let e = InitState::open(dir.join("rwkv7-tiny.lora.gguf")).unwrap_err();
    assert_adapter(
        &e,
        "rwkv7-tiny.lora.gguf",
        &["GGUF LoRA adapter, not an initial state"],
    );
}

#[test]
fn gguf_header_keys_are_checked() {
    let lora = |name: &str, ne: &[u64]| GgufTensor::f32(name, ne);
    let good = Gguf::new()
        .kv("general.architecture", MetaValue::String("rwkv7".into()))
        .kv("general.type", MetaValue::String("adapter".into()))
        .kv("adapter.type", MetaValue::String("lora".into()))
        .kv("adapter.lora.alpha", MetaValue::F32(16.0))
        .tensor(lora("blk.1.channel_mix_value.weight.lora_a", &[512, 4]))
        .tensor(lora("blk.1.channel_mix_value.weight.lora_b", &[4, 128]));
    let a = LoraAdapter::from_bytes("ok.gguf", &good.bytes()).unwrap();
    assert_eq!((a.alpha, a.default_scale()), (Some(16.0), 4.0));
    let m = &a.matrices[0];
    assert_eq!((m.layer, m.n_out, m.n_in, m.rank), (1, 128, 512, 4));
    // ne [512, 4] → row-major [4, 512]: element (k, i) is k·512 + i (GgufTensor::f32 counts up).
    assert_eq!((m.a[512], m.a[513]), (512.0, 513.0));
    a.check(&tiny_cfg()).unwrap();

    let mut bytes = good.bytes();
    patch(
        &mut bytes,
        b"\x04\0\0\0\0\0\0\0lora",
        b"\x04\0\0\0\0\0\0\0cvec",
    ); // adapter.type's value
    let e = LoraAdapter::from_bytes("cvec.gguf", &bytes).unwrap_err();
    assert_adapter(&e, "cvec.gguf", &["adapter.type", "\"cvec\""]);

    let mut bytes = good.bytes();
    patch(&mut bytes, b"rwkv7", b"llama");
    let e = LoraAdapter::from_bytes("llama.gguf", &bytes).unwrap_err();
    assert_adapter(&e, "llama.gguf", &["\"llama\""]);

    let mut g = good.clone();
    g.tensors[1] = lora("blk.1.channel_mix_value.weight.lora_b", &[2, 128]);
    let e = LoraAdapter::from_bytes("rank.gguf", &g.bytes()).unwrap_err();
    assert_adapter(
        &e,
        "rank.gguf",
        &["rank mismatch", "blk.1.channel_mix_value.weight.lora_b"],
    );

    let mut g = good.clone();
    g.tensors
        .push(lora("blk.0.attn_q.weight.lora_a", &[128, 4]));
    let e = LoraAdapter::from_bytes("q.gguf", &g.bytes()).unwrap_err();
    assert_adapter(&e, "q.gguf", &["blk.0.attn_q.weight.lora_a"]);
}

#[test]
fn bad_state_files_are_named() {
    let cfg = tiny_cfg();
    let st = |t: &[(&str, Vec<usize>, Vec<f32>)]| safetensors(t, &[]);
    let z = |n: usize| vec![0.0f32; n];
    let ok = st(&[
        ("blocks.0.att.time_state", vec![2, 64, 64], z(8192)),
        ("blocks.1.att.time_state", vec![2, 64, 64], z(8192)),
    ]);
    InitState::from_bytes("ok.safetensors", &ok)
        .unwrap()
        .check(&cfg)
        .unwrap();
    let gap = st(&[
        ("blocks.0.att.time_state", vec![2, 64, 64], z(8192)),
        ("blocks.2.att.time_state", vec![2, 64, 64], z(8192)),
    ]);
    let e = InitState::from_bytes("gap.safetensors", &gap).unwrap_err();
    assert_adapter(
        &e,
        "gap.safetensors",
        &["blocks.2.att.time_state", "without gaps"],
    );
    let shape = st(&[
        ("blocks.0.att.time_state", vec![2, 64, 64], z(8192)),
        ("blocks.1.att.time_state", vec![4, 64, 32], z(8192)),
    ]);
    let e = InitState::from_bytes("shape.safetensors", &shape).unwrap_err();
    assert_adapter(
        &e,
        "shape.safetensors",
        &["blocks.1.att.time_state", "[4, 64, 32]"],
    );
    let mut v = z(8192);
    v[100] = f32::INFINITY;
    let inf = st(&[("blocks.0.att.time_state", vec![2, 64, 64], v)]);
    let e = InitState::from_bytes("inf.safetensors", &inf).unwrap_err();
    assert_adapter(
        &e,
        "inf.safetensors",
        &["blocks.0.att.time_state", "non-finite"],
    );
    // One layer for a two-layer model.
    let one = st(&[("blocks.0.att.time_state", vec![2, 64, 64], z(8192))]);
    let e = InitState::from_bytes("one.safetensors", &one)
        .unwrap()
        .check(&cfg)
        .unwrap_err();
    assert_adapter(&e, "one.safetensors", &["1 layers", "the model has 2"]);
}
