//! Mapping of GGUF and BlinkDL names to typed RWKV-7 weights: configs against the fixture
//! manifests, the same weights from SafeTensors (f16) and the llama.cpp Q8_0 GGUF, and
//! every mapping error (wrong shape, missing tensor, not RWKV-7, bad metadata, bad types).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;

use rwkv_engine::format::MetaValue;
use rwkv_engine::model::names::{naming, Naming};
use rwkv_engine::model::weights::{Matrix, MatrixLayout, Vector};
use rwkv_engine::{DType, EngineError, LoraRanks, ModelFile, Rwkv7Config, Rwkv7Weights};
use serde_json::Value as Json;
use support::*;

/// The config `make_model.py` recorded for a fixture (`rwkv7-{tiny,small}.json`).
fn manifest_config(name: &str) -> Rwkv7Config {
    let m: Json =
        serde_json::from_slice(&std::fs::read(fixtures().join(format!("{name}.json"))).unwrap())
            .unwrap();
    let u = |k: &str| m[k].as_u64().unwrap() as usize;
    let l = |k: &str| m["lora_dims"][k].as_u64().unwrap() as usize;
    Rwkv7Config {
        n_layer: u("n_layer"),
        n_embd: u("n_embd"),
        head_size: u("head_size"),
        n_head: u("n_head"),
        ffn_dim: u("ffn_dim"),
        vocab_size: u("vocab_size"),
        lora: LoraRanks {
            decay_w: l("decay_w"),
            iclr_a: l("iclr_a"),
            value_v: l("value_residual_v"),
            gate_g: l("gate_g"),
        },
    }
}

fn open(name: &str) -> ModelFile {
    ModelFile::open(fixtures().join(name)).unwrap()
}

#[test]
fn tiny_safetensors_maps_with_blinkdl_layouts() {
    let file = open("rwkv7-tiny.safetensors");
    assert_eq!(naming(&file), Some(Naming::BlinkDl));
    let w = Rwkv7Weights::from_file(&file).unwrap();
    assert_eq!(w.config, manifest_config("rwkv7-tiny"));
    assert_eq!(w.blocks.len(), 2);
    assert_eq!(
        (w.emb.name, w.emb.n_out, w.emb.n_in, w.emb.layout),
        ("emb.weight", 65536, 128, MatrixLayout::OutIn)
    );
    assert_eq!(w.ln0.weight.name, "blocks.0.ln0.weight");
    let a = &w.blocks[0].att;
    assert!(
        a.v0.is_none() && a.v1.is_none() && a.v2.is_none(),
        "layer 0 has no value residual"
    );
    let a1 = &w.blocks[1].att;
    let v1 = a1.v1.as_ref().unwrap();
    assert_eq!(
        (v1.name, v1.n_out, v1.n_in, v1.layout),
        ("blocks.1.att.v1", 32, 128, MatrixLayout::InOut)
    );
    assert_eq!(
        (a.w2.n_out, a.w2.n_in, a.w2.layout),
        (128, 32, MatrixLayout::InOut)
    );
    assert_eq!((a.r_k.name.as_str(), a.r_k.len), ("blocks.0.att.r_k", 128));
    assert_eq!(a.x_g.name, "blocks.0.att.x_g");
    assert_eq!(
        (w.blocks[1].ffn.value.n_out, w.blocks[1].ffn.value.n_in),
        (128, 512)
    );
    assert_eq!(w.head.name, "head.weight");
    assert!(a.key.dtype == DType::F16 && a.x_r.dtype == DType::F16);
}

#[test]
fn tiny_q8_0_gguf_maps_with_llama_cpp_layouts() {
    let file = open("rwkv7-tiny-Q8_0.gguf");
    assert_eq!(naming(&file), Some(Naming::Gguf));
    let w = Rwkv7Weights::from_file(&file).unwrap();
    assert_eq!(w.config, manifest_config("rwkv7-tiny"));
    let a = &w.blocks[0].att;
    assert!(
        a.v0.is_none() && a.v1.is_none() && a.v2.is_none(),
        "layer 0's v0/v1/v2 are converter dummies"
    );
    let v1 = w.blocks[1].att.v1.as_ref().unwrap();
    assert_eq!(
        (v1.name, v1.n_out, v1.n_in, v1.layout),
        ("blk.1.time_mix_v1.weight", 32, 128, MatrixLayout::OutIn)
    );
    assert_eq!((a.w1.dtype, a.w1.n_out, a.w1.n_in), (DType::F32, 32, 128));
    assert_eq!(a.x_r.name, "blk.0.time_mix_lerp_fused.weight[0]");
    assert_eq!(a.x_g.name, "blk.0.time_mix_lerp_fused.weight[5]");
    assert_eq!(a.receptance.dtype, DType::Q8_0);
    assert_eq!(w.ln0.bias.name, "token_embd_norm.bias");
    assert_eq!((w.head.name, w.head.dtype), ("output.weight", DType::Q8_0));
}

#[test]
fn small_q4_k_m_and_demo_model_map() {
    let w_file = open("rwkv7-small-Q4_K_M.gguf");
    let w = Rwkv7Weights::from_file(&w_file).unwrap();
    assert_eq!(w.config, manifest_config("rwkv7-small"));
    assert_eq!(w.blocks[0].att.key.dtype, DType::Q4_K);

    // The demo model, both forms: 6 x 256, ranks 32/32/32/64 (models/README.md).
    let want = Rwkv7Config {
        n_layer: 6,
        n_embd: 256,
        head_size: 64,
        n_head: 4,
        ffn_dim: 1024,
        vocab_size: 65536,
        lora: LoraRanks {
            decay_w: 32,
            iclr_a: 32,
            value_v: 32,
            gate_g: 64,
        },
    };
    for name in [
        "rwkv7-demo-6x256-Q4_K_M.gguf",
        "rwkv7-demo-6x256.safetensors",
    ] {
        let f = ModelFile::open(models().join(name)).unwrap();
        let w = Rwkv7Weights::from_file(&f).unwrap();
        assert_eq!(w.config, want, "{name}");
    }
}

fn vf(v: &Vector) -> Vec<f32> {
    v.to_f32().unwrap()
}

fn mf(m: &Matrix) -> Vec<f32> {
    m.to_f32_out_in().unwrap()
}

/// Every plain-float tensor of the Q8_0 GGUF (vectors, norms, the fused mixes, w1/w2 in
/// F32, a1/a2/g1/g2/v1/v2 in F16) equals the SafeTensors value exactly: make_model.py
/// rounds every value to one exactly representable in f16 and bf16, and llama.cpp's
/// converter only re-lays them out (transposes, flattens, stacks). Q8_0 matrices are
/// within Q8_0's rounding error of the f16 values (see `assert_q8_0_close`).
#[test]
fn safetensors_and_q8_0_gguf_give_the_same_weights() {
    let sf = open("rwkv7-tiny.safetensors");
    let gf = open("rwkv7-tiny-Q8_0.gguf");
    let s = Rwkv7Weights::from_file(&sf).unwrap();
    let g = Rwkv7Weights::from_file(&gf).unwrap();
    assert_eq!(s.config, g.config);

    let mut exact = 0;
    let mut quantized = 0;
    let mut cmp_m = |a: &Matrix, b: &Matrix| {
        assert_eq!(
            (a.n_out, a.n_in),
            (b.n_out, b.n_in),
            "{} vs {}",
            a.name,
            b.name
        );
        let (x, y) = (mf(a), mf(b));
        if b.dtype == DType::Q8_0 {
            assert_q8_0_close(&x, &y, b.n_in, b.name);
            quantized += 1;
        } else {
            assert_eq!(x, y, "{} vs {}", a.name, b.name);
            exact += 1;
        }
    };
    let cmp_v = |a: &Vector, b: &Vector| assert_eq!(vf(a), vf(b), "{} vs {}", a.name, b.name);

    cmp_m(&s.emb, &g.emb);
    cmp_m(&s.head, &g.head);
    for (a, b) in [(&s.ln0, &g.ln0), (&s.ln_out, &g.ln_out)] {
        cmp_v(&a.weight, &b.weight);
        cmp_v(&a.bias, &b.bias);
    }
    for (sb, gb) in s.blocks.iter().zip(&g.blocks) {
        for (a, b) in [
            (&sb.ln1, &gb.ln1),
            (&sb.ln2, &gb.ln2),
            (&sb.att.ln_x, &gb.att.ln_x),
        ] {
            cmp_v(&a.weight, &b.weight);
            cmp_v(&a.bias, &b.bias);
        }
        let (x, y) = (&sb.att, &gb.att);
        for (a, b) in [
            (&x.x_r, &y.x_r),
            (&x.x_w, &y.x_w),
            (&x.x_k, &y.x_k),
            (&x.x_v, &y.x_v),
            (&x.x_a, &y.x_a),
            (&x.x_g, &y.x_g),
            (&x.w0, &y.w0),
            (&x.a0, &y.a0),
            (&x.k_k, &y.k_k),
            (&x.k_a, &y.k_a),
            (&x.r_k, &y.r_k),
            (&sb.ffn.x_k, &gb.ffn.x_k),
        ] {
            cmp_v(a, b);
        }
        match (&x.v0, &y.v0) {
            (Some(a), Some(b)) => cmp_v(a, b),
            (None, None) => {}
            _ => panic!("v0 presence differs"),
        }
        for (a, b) in [(&x.v1, &y.v1), (&x.v2, &y.v2)] {
            match (a, b) {
                (Some(a), Some(b)) => cmp_m(a, b),
                (None, None) => {}
                _ => panic!("v1/v2 presence differs"),
            }
        }
        for (a, b) in [
            (&x.w1, &y.w1),
            (&x.w2, &y.w2),
            (&x.a1, &y.a1),
            (&x.a2, &y.a2),
            (&x.g1, &y.g1),
            (&x.g2, &y.g2),
            (&x.receptance, &y.receptance),
            (&x.key, &y.key),
            (&x.value, &y.value),
            (&x.output, &y.output),
            (&sb.ffn.key, &gb.ffn.key),
            (&sb.ffn.value, &gb.ffn.value),
        ] {
            cmp_m(a, b);
        }
    }
    // What the manifest says: 4 Q8_0 matrices per layer (r, k, v, o) + 2 FFN + emb + head.
    assert_eq!(quantized, 2 * 6 + 2);
    // Plain-float matrices: w1/w2/a1/a2/g1/g2 in both layers, v1/v2 in layer 1.
    assert_eq!(exact, 2 * 6 + 2);
}

/// Q8_0 stores each block of 32 consecutive inputs as `d = amax / 127` (rounded to f16)
/// and `q = round(x / d)`, so `|x − q·d| ≤ d/2` plus the f16 rounding of `d` (relative
/// 2^-11, times |q| ≤ 127, i.e. ≤ 0.062·d): per element, |Δ| ≤ 0.57·amax/127 of its block.
/// Checked per block against the f16 reference, with 1e-7 for f32 arithmetic.
#[track_caller]
fn assert_q8_0_close(reference: &[f32], got: &[f32], n_in: usize, name: &str) {
    assert_eq!(reference.len(), got.len());
    assert_eq!(n_in % 32, 0);
    let mut worst = 0f32;
    for (rb, gb) in reference.chunks_exact(32).zip(got.chunks_exact(32)) {
        let amax = rb.iter().fold(0f32, |m, x| m.max(x.abs()));
        let tol = 0.57 * amax / 127.0 + 1e-7;
        for (r, g) in rb.iter().zip(gb) {
            let d = (r - g).abs();
            worst = worst.max(d / tol);
            assert!(
                d <= tol,
                "{name}: |{r} - {g}| = {d} > {tol} (block amax {amax})"
            );
        }
    }
    assert!(
        worst > 0.0,
        "{name}: Q8_0 equal to f16 everywhere is suspicious"
    );
}

// ---------------------------------------------------------------- mapping errors

fn map_err(bytes: &[u8], name: &str) -> EngineError {
    let f = ModelFile::from_bytes(name, bytes).expect("the file itself parses");
    let e = Rwkv7Weights::from_file(&f).expect_err("mapping must fail");
    assert_eq!(err_path(&e), Some(Path::new(name)), "{e}");
    e
}

/// The (tensor, expected, got) of a [`EngineError::Shape`].
#[track_caller]
fn shape_err(e: &EngineError) -> (&str, Vec<usize>, Vec<usize>) {
    match e {
        EngineError::Shape {
            tensor,
            expected,
            got,
            ..
        } => (tensor.as_str(), expected.clone(), got.clone()),
        e => panic!("expected a shape error, got {e:?}"),
    }
}

fn gguf_fixture() -> Vec<u8> {
    std::fs::read(fixtures().join("rwkv7-tiny-Q8_0.gguf")).unwrap()
}

#[test]
fn wrong_shape_names_tensor_expected_and_got() {
    // blk.0.time_mix_w0.weight: ne [128] → [64] (the data still fits the file).
    let mut b = gguf_fixture();
    let at = gguf_tensor_info_at(&b, "blk.0.time_mix_w0.weight") + 4;
    b[at..at + 8].copy_from_slice(&64u64.to_le_bytes());
    assert_eq!(
        shape_err(&map_err(&b, "shape.gguf")),
        ("blk.0.time_mix_w0.weight", vec![128], vec![64])
    );
    // SafeTensors: blocks.1.att.a1 [128,32] stored as [64,64] (same size; [32,128] would
    // be web-rwkv's transposed layout, which is accepted).
    let mut b = std::fs::read(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    patch(
        &mut b,
        br#""blocks.1.att.a1":{"dtype":"F16","shape":[128,32]"#,
        br#""blocks.1.att.a1":{"dtype":"F16","shape":[64, 64]"#,
    );
    assert_eq!(
        shape_err(&map_err(&b, "shape.safetensors")),
        ("blocks.1.att.a1", vec![128, 32], vec![64, 64])
    );
    // The fused mixes with 5 instead of 6 rows.
    let mut b = gguf_fixture();
    let at = gguf_tensor_info_at(&b, "blk.1.time_mix_lerp_fused.weight") + 4 + 3 * 8;
    b[at..at + 8].copy_from_slice(&5u64.to_le_bytes());
    assert_eq!(
        shape_err(&map_err(&b, "lerp.gguf")),
        (
            "blk.1.time_mix_lerp_fused.weight",
            vec![6, 1, 1, 128],
            vec![5, 1, 1, 128]
        )
    );
}

#[test]
fn metadata_disagreeing_with_shapes_is_a_shape_error() {
    let mut b = gguf_fixture();
    let key = b"rwkv7.embedding_length";
    let at = find(&b, key).unwrap() + key.len() + 4; // past the key and its u32 type
    b[at..at + 4].copy_from_slice(&256u32.to_le_bytes());
    assert_eq!(
        shape_err(&map_err(&b, "meta.gguf")),
        ("token_embd.weight", vec![65536, 256], vec![65536, 128])
    );
    // block_count 3 with only two blocks: the third block's first tensor is missing.
    let mut b = gguf_fixture();
    let key = b"rwkv7.block_count";
    let at = find(&b, key).unwrap() + key.len() + 4;
    b[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
    match map_err(&b, "count.gguf") {
        EngineError::MissingTensor { tensor, .. } => assert_eq!(tensor, "blk.2.attn_norm.weight"),
        e => panic!("{e:?}"),
    }
    // block_count 1 while the file has blk.1: refused.
    let mut b = gguf_fixture();
    let at = find(&b, key).unwrap() + key.len() + 4;
    b[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        map_err(&b, "count1.gguf"),
        EngineError::NotRwkv7 { .. }
    ));
}

#[test]
fn head_size_other_than_64_maps_and_is_refused_at_load() {
    // rwkv7.wkv.head_size 64 → 32: GGUF's `r_k` is flat [C], so the file maps (4 heads of
    // 32 over C = 128) and the name mapping stays general; the WKV kernels are not, and the
    // load says so, naming the file and the head size, before anything reaches the GPU.
    let mut b = gguf_fixture();
    let key = b"rwkv7.wkv.head_size";
    let at = find(&b, key).unwrap() + key.len() + 4;
    assert_eq!(
        b[at..at + 4],
        64u32.to_le_bytes(),
        "the fixture's head size"
    );
    b[at..at + 4].copy_from_slice(&32u32.to_le_bytes());
    let f = ModelFile::from_bytes("head32.gguf", &b).unwrap();
    let w = Rwkv7Weights::from_file(&f).unwrap();
    assert_eq!((w.config.head_size, w.config.n_head), (32, 4));
    let opts = rwkv_engine::LoadOptions::default();
    let t0 = std::time::Instant::now();
    let e = match rwkv_engine::Engine::from_weights(gpu(), &f, &w, &opts, &mut |_| {}, t0) {
        Ok(_) => panic!("head size 32 must be refused"),
        Err(e) => e,
    };
    assert!(matches!(e, EngineError::Unsupported { .. }), "{e:?}");
    assert_eq!(e.code(), "unsupported_model");
    let msg = e.to_string();
    assert!(
        msg.contains("head32.gguf") && msg.contains("unsupported head size 32"),
        "{msg}"
    );
    assert_eq!(rwkv_engine::HEAD_SIZE, 64);
}

#[test]
fn missing_tensor_is_named() {
    let mut b = gguf_fixture();
    patch(
        &mut b,
        b"blk.1.time_mix_k_k.weight",
        b"blk.1.time_mix_k_X.weight",
    );
    match map_err(&b, "missing.gguf") {
        EngineError::MissingTensor { tensor, .. } => {
            assert_eq!(tensor, "blk.1.time_mix_k_k.weight")
        }
        e => panic!("{e:?}"),
    }
    let mut b = std::fs::read(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    patch(&mut b, br#""head.weight""#, br#""head.weighX""#);
    match map_err(&b, "missing.safetensors") {
        EngineError::MissingTensor { tensor, .. } => assert_eq!(tensor, "head.weight"),
        e => panic!("{e:?}"),
    }
}

/// A tiny GGUF with llama's architecture and tensor names.
#[test]
fn llama_gguf_is_not_rwkv7() {
    let g = Gguf::new()
        .kv("general.architecture", MetaValue::String("llama".into()))
        .kv("llama.embedding_length", MetaValue::U32(8))
        .kv("llama.block_count", MetaValue::U32(1))
        .tensor(GgufTensor::f32("token_embd.weight", &[8, 16]))
        .tensor(GgufTensor::f32("blk.0.attn_q.weight", &[8, 8]))
        .tensor(GgufTensor::f32("blk.0.attn_norm.weight", &[8]))
        .tensor(GgufTensor::f32("output.weight", &[8, 16]));
    match map_err(&g.bytes(), "llama.gguf") {
        EngineError::NotRwkv7 { what, .. } => assert!(what.contains("\"llama\""), "{what}"),
        e => panic!("{e:?}"),
    }
    // The same with no architecture at all.
    let mut g2 = g.clone();
    g2.kv.remove(0);
    assert!(matches!(
        map_err(&g2.bytes(), "noarch.gguf"),
        EngineError::NotRwkv7 { .. }
    ));
    // The real fixture relabelled as llama.
    let mut b = gguf_fixture();
    patch(
        &mut b,
        b"\x05\x00\x00\x00\x00\x00\x00\x00rwkv7",
        b"\x05\x00\x00\x00\x00\x00\x00\x00llama",
    );
    assert!(matches!(
        map_err(&b, "relabelled.gguf"),
        EngineError::NotRwkv7 { .. }
    ));
    // A SafeTensors with RWKV-6 names.
    let mut b = std::fs::read(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    patch(&mut b, br#""blocks.0.att.k_k""#, br#""blocks.0.att.k_q""#);
    match map_err(&b, "v6.safetensors") {
        EngineError::NotRwkv7 { what, .. } => assert!(what.contains("k_k"), "{what}"),
        e => panic!("{e:?}"),
    }
}

#[test]
fn quantized_vector_is_unsupported() {
    // blk.0.time_mix_w0.weight: F32 → Q8_0 (128 elements = 4 blocks = 136 bytes, fits).
    let mut b = gguf_fixture();
    let at = gguf_tensor_info_at(&b, "blk.0.time_mix_w0.weight") + 4 + 8;
    b[at..at + 4].copy_from_slice(&8u32.to_le_bytes());
    match map_err(&b, "qvec.gguf") {
        EngineError::UnsupportedType { tensor, dtype, .. } => {
            assert_eq!(tensor, "blk.0.time_mix_w0.weight");
            assert!(dtype.contains("Q8_0"), "{dtype}");
        }
        e => panic!("{e:?}"),
    }
}

/// web-rwkv's converter keeps BlinkDL names but stores low-rank matrices `[out, in]`:
/// accepted as `OutIn` (the rank is the axis that is not C).
#[test]
fn web_rwkv_transposed_low_rank_is_out_in() {
    let mut b = std::fs::read(fixtures().join("rwkv7-tiny.safetensors")).unwrap();
    patch(
        &mut b,
        br#""blocks.1.att.a1":{"dtype":"F16","shape":[128,32]"#,
        br#""blocks.1.att.a1":{"dtype":"F16","shape":[32,128]"#,
    );
    let f = ModelFile::from_bytes("web-rwkv.safetensors", &b).unwrap();
    let w = Rwkv7Weights::from_file(&f).unwrap();
    let a1 = &w.blocks[1].att.a1;
    assert_eq!(
        (a1.n_out, a1.n_in, a1.layout),
        (32, 128, MatrixLayout::OutIn)
    );
    assert_eq!(w.blocks[0].att.a1.layout, MatrixLayout::InOut);
    assert_eq!(w.config, manifest_config("rwkv7-tiny"));
}
