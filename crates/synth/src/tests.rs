//! Synthetic models against llama.cpp's own files (`shared/fixtures/*.gguf.json`, the
//! fixture GGUF's header bytes) and against their own SafeTensors twin.

use std::path::PathBuf;

use anyhow::{ensure, Context};

use rwkv_engine::format::MetaValue;
use rwkv_engine::DType;

use super::*;
use crate::gguf::{gguf_entries, gguf_metadata, size_label};
use crate::gguf_write::{encode_header, GgufTensorSpec};
use crate::init::Init;
use half::f16;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

fn tmp(name: &str) -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("rwkv-synth-test-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d.join(name))
}

fn opts(l: usize, c: usize, ty: SynthType, name: &str) -> SynthOptions {
    SynthOptions {
        dtype: ty,
        name: Some(name.to_string()),
        seed: 5,
        ..SynthOptions::new(l, c)
    }
}

#[test]
fn lora_ranks_follow_rwkv_lm() {
    // The table in make_model.py's docstring (RWKV-LM / llama.cpp converter defaults).
    for (c, want) in [
        (128, [32, 32, 32, 32]),
        (256, [32, 32, 32, 64]),
        (768, [64, 64, 32, 128]),
        (2048, [96, 96, 64, 256]),
        (2560, [96, 96, 64, 320]),
    ] {
        let r = lora_ranks(c);
        assert_eq!([r.decay_w, r.iclr_a, r.value_v, r.gate_g], want, "C = {c}");
    }
}

#[test]
fn size_labels_like_gguf_py() {
    assert_eq!(size_label(17_200_000), "17M");
    assert_eq!(size_label(2_947_000_000), "2.9B");
    assert_eq!(size_label(191_000_000), "191M");
    assert_eq!(size_label(1_500_000), "1.5M");
}

fn meta_type(v: &MetaValue) -> Vec<&'static str> {
    fn one(v: &MetaValue) -> &'static str {
        match v {
            MetaValue::U8(_) => "UINT8",
            MetaValue::I8(_) => "INT8",
            MetaValue::U16(_) => "UINT16",
            MetaValue::I16(_) => "INT16",
            MetaValue::U32(_) => "UINT32",
            MetaValue::I32(_) => "INT32",
            MetaValue::F32(_) => "FLOAT32",
            MetaValue::Bool(_) => "BOOL",
            MetaValue::String(_) => "STRING",
            MetaValue::Array(_) => "ARRAY",
            MetaValue::U64(_) => "UINT64",
            MetaValue::I64(_) => "INT64",
            MetaValue::F64(_) => "FLOAT64",
        }
    }
    match v {
        MetaValue::Array(items) => vec!["ARRAY", items.get(0).as_ref().map(one).unwrap_or("UINT8")],
        _ => vec![one(v)],
    }
}

fn meta_json(v: &MetaValue) -> serde_json::Value {
    match v {
        MetaValue::U32(x) => (*x).into(),
        MetaValue::I32(x) => (*x).into(),
        MetaValue::F32(x) => f64::from(*x).into(),
        MetaValue::String(s) => s.clone().into(),
        _ => serde_json::Value::Null,
    }
}

/// Our header for `opts` against a llama.cpp manifest: metadata keys in order with their
/// types and values (scalars exactly; arrays by length, first and last items), tensor
/// names / order / types / ne / offsets, data offset and file size. With the fixture's
/// `general.name`, every value must match: nothing differs but the weights.
fn check_layout(o: &SynthOptions, manifest: &str) -> anyhow::Result<()> {
    let raw = std::fs::read_to_string(fixtures().join(manifest))?;
    let m: serde_json::Value = serde_json::from_str(&raw)?;
    let cfg = o.config()?;
    let entries = gguf_entries(&cfg, o.dtype);
    let params = entries.iter().map(|e| e.spec.numel()).sum();
    let meta = gguf_metadata(&cfg, o, params)?;
    let refm = m["metadata"].as_object().context("metadata")?;
    // serde_json's map sorts keys: take the file order from the raw text instead.
    ensure!(
        meta.len() == refm.len(),
        "{manifest}: {} keys vs {}",
        meta.len(),
        refm.len()
    );
    let pos: Vec<Option<usize>> = meta
        .iter()
        .map(|(k, _)| raw.find(&format!("\"{k}\": {{")))
        .collect();
    ensure!(
        pos.iter().all(|p| p.is_some()) && pos.windows(2).all(|w| w[0] < w[1]),
        "{manifest}: key order differs: {:?}",
        meta.iter()
            .map(|(k, _)| k.as_str())
            .zip(&pos)
            .collect::<Vec<_>>()
    );
    for (k, v) in &meta {
        let r = &refm[k];
        let rt: Vec<&str> = r["type"]
            .as_array()
            .context("type")?
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        ensure!(
            meta_type(v) == rt,
            "{manifest}: {k}: type {:?} vs {rt:?}",
            meta_type(v)
        );
        match v {
            MetaValue::Array(items) => {
                ensure!(Some(items.len() as u64) == r["len"].as_u64(), "{k}: length");
                let first = r["first"].as_array().context("first")?;
                let last = r["last"].as_array().context("last")?;
                for (a, b) in items.iter().zip(first) {
                    ensure!(meta_json(&a) == *b, "{k}: first items {:?} vs {b}", a);
                }
                let tail = items.len().saturating_sub(last.len());
                for (a, b) in items.iter().skip(tail).zip(last) {
                    ensure!(meta_json(&a) == *b, "{k}: last items {:?} vs {b}", a);
                }
            }
            // The manifest holds the f32 widened to f64: compare as f64.
            _ => ensure!(
                meta_json(v) == r["value"],
                "{manifest}: {k}: {:?} vs {}",
                v,
                r["value"]
            ),
        }
    }
    let specs: Vec<GgufTensorSpec> = entries.iter().map(|e| e.spec.clone()).collect();
    let (header, offsets) = encode_header(&meta, &specs)?;
    ensure!(
        header.len() as u64 == m["data_offset"].as_u64().context("data_offset")?,
        "{manifest}: data offset {}",
        header.len()
    );
    let rt = m["tensors"].as_array().context("tensors")?;
    ensure!(
        rt.len() == specs.len(),
        "{manifest}: {} tensors vs {}",
        specs.len(),
        rt.len()
    );
    for ((s, off), r) in specs.iter().zip(&offsets).zip(rt) {
        let ne: Vec<u64> = r["ne"]
            .as_array()
            .context("ne")?
            .iter()
            .filter_map(|x| x.as_u64())
            .collect();
        ensure!(
            r["name"] == s.name.as_str()
                && r["type"] == s.dtype.name()
                && ne == s.ne
                && r["offset"].as_u64() == Some((header.len() + off) as u64),
            "{manifest}: ours {} {} {:?} @{} vs {r}",
            s.name,
            s.dtype,
            s.ne,
            header.len() + off
        );
    }
    let last = specs.last().context("no tensors")?;
    let end = header.len() + offsets.last().copied().unwrap_or(0) + last.n_bytes().unwrap_or(0);
    let end = end.next_multiple_of(32);
    ensure!(
        Some(end as u64) == m["size"].as_u64(),
        "{manifest}: size {end} vs {}",
        m["size"]
    );
    Ok(())
}

#[test]
fn layout_matches_llama_cpp_manifests() -> anyhow::Result<()> {
    for (l, c, ty, name, manifest) in [
        (
            2,
            128,
            SynthType::Q8_0,
            "rwkv7-tiny",
            "rwkv7-tiny-Q8_0.gguf.json",
        ),
        (
            2,
            128,
            SynthType::F16,
            "rwkv7-tiny",
            "rwkv7-tiny-F16.gguf.json",
        ),
        // Rows of 128: llama-quantize's Q4_K → Q5_0 and Q6_K → Q8_0 fallbacks.
        (
            2,
            128,
            SynthType::Q4KM,
            "rwkv7-tiny",
            "rwkv7-tiny-Q4_K_M.gguf.json",
        ),
        (
            4,
            256,
            SynthType::Q4KM,
            "rwkv7-small",
            "rwkv7-small-Q4_K_M.gguf.json",
        ),
        (
            4,
            256,
            SynthType::Q8_0,
            "rwkv7-small",
            "rwkv7-small-Q8_0.gguf.json",
        ),
        (
            4,
            256,
            SynthType::F16,
            "rwkv7-small",
            "rwkv7-small-F16.gguf.json",
        ),
    ] {
        check_layout(&opts(l, c, ty, name), manifest)?;
    }
    Ok(())
}

/// The strongest layout check: the whole header of our tiny Q8_0 file (metadata incl. the
/// 65536 escaped World tokens and the chat template, tensor table, padding) is byte for
/// byte the header llama-quantize wrote for `rwkv7-tiny-Q8_0.gguf`.
#[test]
fn tiny_q8_0_header_is_byte_identical_to_llama_cpp() -> anyhow::Result<()> {
    let path = tmp("tiny-q8.gguf")?;
    let o = opts(2, 128, SynthType::Q8_0, "rwkv7-tiny");
    let rep = write_gguf(&o, &path)?;
    let ours = std::fs::read(&path)?;
    let theirs = std::fs::read(fixtures().join("rwkv7-tiny-Q8_0.gguf"))?;
    ensure!(
        ours.len() == theirs.len(),
        "size {} vs {}",
        ours.len(),
        theirs.len()
    );
    let data_offset = 1_370_528; // from rwkv7-tiny-Q8_0.gguf.json
    if let Some(i) = (0..data_offset).find(|&i| ours[i] != theirs[i]) {
        anyhow::bail!("header differs at byte {i}");
    }
    // And the weights are ours, not a copy.
    ensure!(ours[data_offset..] != theirs[data_offset..]);
    ensure!(rep.bytes == ours.len() as u64 && rep.tensors == 62);
    std::fs::remove_file(&path)?;
    Ok(())
}

/// Reads tensor `name` of a GGUF we wrote, through the layout table (`gguf_entries`,
/// checked against llama.cpp above) — until the engine's GGUF reader lands.
fn read_gguf_tensor(
    file: &[u8],
    o: &SynthOptions,
    name: &str,
) -> anyhow::Result<(DType, Vec<usize>, Vec<f32>)> {
    let cfg = o.config()?;
    let entries = gguf_entries(&cfg, o.dtype);
    let params = entries.iter().map(|e| e.spec.numel()).sum();
    let specs: Vec<GgufTensorSpec> = entries.iter().map(|e| e.spec.clone()).collect();
    let (header, offsets) = encode_header(&gguf_metadata(&cfg, o, params)?, &specs)?;
    let i = specs
        .iter()
        .position(|s| s.name == name)
        .context("no such tensor")?;
    let s = &specs[i];
    let n = s.n_bytes().context("size")?;
    let off = header.len() + offsets[i];
    let bytes = file.get(off..off + n).context("past the end")?;
    let numel = s.numel() as usize;
    let shape: Vec<usize> = s.ne.iter().rev().map(|&d| d as usize).collect();
    Ok((
        s.dtype,
        shape,
        rwkv_engine::quant::dequantize_to_vec(s.dtype, bytes, numel)?,
    ))
}

fn st_tensor(
    st: &::safetensors::SafeTensors<'_>,
    name: &str,
) -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
    let t = st.tensor(name)?;
    ensure!(t.dtype() == ::safetensors::Dtype::F16);
    let v = t
        .data()
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    Ok((t.shape().to_vec(), v))
}

/// Same seed, two formats: the SafeTensors (BlinkDL names) and each GGUF type hold the same
/// model. Exact for F32/F16 tensors (values are f16-exact by construction); quantized
/// matrices within their quantizer's error: relative RMS below 1 % for Q8_0 and 12 % for
/// Q4_K/Q5_0 (bounds of `quant::tests::quantizers_round_trip_within_step_size`).
#[test]
fn gguf_and_safetensors_hold_the_same_model() -> anyhow::Result<()> {
    let st_path = tmp("tiny.safetensors")?;
    let base = opts(2, 128, SynthType::F16, "t");
    write_safetensors(&base, &st_path)?;
    let st_bytes = std::fs::read(&st_path)?;
    let st = ::safetensors::SafeTensors::deserialize(&st_bytes)?;
    // Names and shapes are make_model.py's (the fixture manifest of the same shape).
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("rwkv7-tiny.json"))?)?;
    let want = manifest["tensors"].as_object().context("tensors")?;
    ensure!(
        st.len() == want.len(),
        "{} tensors vs {}",
        st.len(),
        want.len()
    );
    for (name, shape) in want {
        let t = st.tensor(name)?;
        let shape: Vec<usize> = shape
            .as_array()
            .context("shape")?
            .iter()
            .filter_map(|d| d.as_u64())
            .map(|d| d as usize)
            .collect();
        ensure!(
            t.shape() == shape.as_slice(),
            "{name}: {:?} vs {shape:?}",
            t.shape()
        );
    }
    ensure!(st_bytes.len() > 2 * manifest["n_params"].as_u64().context("n_params")? as usize);
    for ty in [SynthType::F16, SynthType::Q8_0, SynthType::Q4KM] {
        let o = SynthOptions {
            dtype: ty,
            ..base.clone()
        };
        let path = tmp(&format!("tiny-{ty:?}.gguf"))?;
        write_gguf(&o, &path)?;
        let file = std::fs::read(&path)?;
        // Plain copies.
        for (g, b) in [
            ("blk.1.time_mix_w0.weight", "blocks.1.att.w0"),
            ("blk.0.time_mix_r_k.weight", "blocks.0.att.r_k"),
            ("token_embd_norm.weight", "blocks.0.ln0.weight"),
            ("blk.1.attn_norm_2.bias", "blocks.1.ln2.bias"),
            ("blk.1.time_mix_v0.weight", "blocks.1.att.v0"),
            // Layer 0's dummy v0 is a copy of a0.
            ("blk.0.time_mix_v0.weight", "blocks.0.att.a0"),
        ] {
            let (_, _, gv) = read_gguf_tensor(&file, &o, g)?;
            let (_, bv) = st_tensor(&st, b)?;
            ensure!(gv == bv, "{ty:?}: {g} != {b}");
        }
        // Transposed LoRA matrices: GGUF [D, C] row-major = BlinkDL [C, D] transposed.
        for (g, b) in [
            ("blk.0.time_mix_w1.weight", "blocks.0.att.w1"),
            ("blk.1.time_mix_g2.weight", "blocks.1.att.g2"),
            ("blk.0.time_mix_v1.weight", "blocks.0.att.a1"),
        ] {
            let (_, gs, gv) = read_gguf_tensor(&file, &o, g)?;
            let (bs, bv) = st_tensor(&st, b)?;
            ensure!(gs == vec![bs[1], bs[0]], "{g}: {gs:?} vs {bs:?}");
            for i in 0..bs[0] {
                for j in 0..bs[1] {
                    ensure!(gv[j * bs[0] + i] == bv[i * bs[1] + j], "{g}[{j},{i}]");
                }
            }
        }
        // Stacked token-shift mixes, order r, w, k, v, a, g.
        let (_, _, lerp) = read_gguf_tensor(&file, &o, "blk.1.time_mix_lerp_fused.weight")?;
        for (k, n) in ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"]
            .iter()
            .enumerate()
        {
            let (_, bv) = st_tensor(&st, &format!("blocks.1.att.{n}"))?;
            ensure!(
                lerp[k * 128..(k + 1) * 128] == bv[..],
                "lerp_fused[{k}] != {n}"
            );
        }
        // Big matrices, possibly quantized.
        for (g, b) in [
            ("token_embd.weight", "emb.weight"),
            ("output.weight", "head.weight"),
            ("blk.1.time_mix_key.weight", "blocks.1.att.key.weight"),
            (
                "blk.0.channel_mix_value.weight",
                "blocks.0.ffn.value.weight",
            ),
        ] {
            let (dt, gs, gv) = read_gguf_tensor(&file, &o, g)?;
            let (bs, bv) = st_tensor(&st, b)?;
            ensure!(gs == bs, "{g}: {gs:?} vs {bs:?}");
            let num: f64 = gv
                .iter()
                .zip(&bv)
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum();
            let den: f64 = bv.iter().map(|b| f64::from(*b).powi(2)).sum();
            let rel = (num / den).sqrt();
            let bound = match dt {
                DType::F16 => 0.0,
                DType::Q8_0 => 0.01,
                _ => 0.12,
            };
            ensure!(rel <= bound, "{ty:?} {g} ({dt}): rel RMS {rel} > {bound}");
        }
        std::fs::remove_file(&path)?;
    }
    std::fs::remove_file(&st_path)?;
    Ok(())
}

#[test]
fn same_seed_same_bytes_other_seed_differs() -> anyhow::Result<()> {
    let o = SynthOptions {
        vocab: 65536,
        threads: 2,
        ..opts(1, 64, SynthType::Q8_0, "d")
    };
    let p = tmp("d.gguf")?;
    write_gguf(&o, &p)?;
    let a = std::fs::read(&p)?;
    // A different thread count must not change a byte.
    write_gguf(
        &SynthOptions {
            threads: 1,
            ..o.clone()
        },
        &p,
    )?;
    ensure!(a == std::fs::read(&p)?, "thread count changed the output");
    write_gguf(&SynthOptions { seed: 6, ..o }, &p)?;
    ensure!(a != std::fs::read(&p)?, "seed had no effect");
    std::fs::remove_file(&p)?;
    Ok(())
}

/// The init keeps the model in its working ranges (what make_model.py's init gives):
/// mixes in [0, 1], decay logits w0 within −6.5 ± noise … 1, k_a around 1, norms around 1,
/// matrices within ±1/√in; everything finite.
#[test]
fn init_values_in_range() -> anyhow::Result<()> {
    let cfg = SynthOptions::new(4, 256).config()?;
    let init = Init { cfg, seed: 1 };
    for t in init.blink_tensors() {
        if t.name == "emb.weight" || t.name == "head.weight" {
            continue;
        }
        let v = init.full(&t);
        ensure!(v.iter().all(|x| x.is_finite()), "{}", t.name);
        let (lo, hi) = v
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let n = &t.name;
        if n.contains(".x_") {
            ensure!(lo >= 0.0 && hi <= 1.0, "{n}: [{lo}, {hi}]");
        } else if n.ends_with("att.w0") {
            // −6 … 0 ramp + 0.5 + 2.5·zz + N(0, 0.5) (±3.46σ bounded noise).
            ensure!(
                lo > -6.0 - 2.5 - 1.8 && hi < 0.5 + 2.5 + 1.8,
                "{n}: [{lo}, {hi}]"
            );
            ensure!(mean < -1.0, "{n}: mean {mean}");
        } else if n.ends_with("k_a") || n.ends_with("ln1.weight") || n.ends_with("ln_out.weight") {
            ensure!((mean - 1.0).abs() < 0.05, "{n}: mean {mean}");
        } else if n.ends_with("key.weight") || n.ends_with("receptance.weight") {
            let b = 1.0 / (t.cols() as f32).sqrt();
            ensure!(
                lo >= -b * 1.001 && hi <= b * 1.001 && hi > 0.9 * b,
                "{n}: [{lo}, {hi}] vs ±{b}"
            );
        }
    }
    Ok(())
}

#[test]
fn bad_shapes_are_rejected() {
    assert!(SynthOptions::new(0, 128).config().is_err());
    assert!(SynthOptions::new(2, 100).config().is_err());
    let o = SynthOptions {
        ffn: Some(500),
        ..SynthOptions::new(2, 128)
    };
    assert!(o.config().is_err());
    assert!(write(&SynthOptions::new(1, 64), "model.bin").is_err());
}
