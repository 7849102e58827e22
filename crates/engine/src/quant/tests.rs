//! Decoders against gguf-py (`shared/fixtures/quant`), encoders by round trip and against
//! llama-quantize's own Q8_0 bytes.

use std::path::PathBuf;

use anyhow::{ensure, Context};
use rand::{Rng, SeedableRng};

use super::*;
use crate::format::DType;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

fn block_size<B: Block>() -> (usize, usize) {
    (std::mem::size_of::<B>(), B::DTYPE.block_bytes())
}

#[test]
fn block_sizes_match_dtype_table() {
    for (got, want) in [
        block_size::<BlockQ4_0>(),
        block_size::<BlockQ4_1>(),
        block_size::<BlockQ5_0>(),
        block_size::<BlockQ5_1>(),
        block_size::<BlockQ8_0>(),
        block_size::<BlockQ2K>(),
        block_size::<BlockQ3K>(),
        block_size::<BlockQ4K>(),
        block_size::<BlockQ5K>(),
        block_size::<BlockQ6K>(),
        block_size::<BlockIQ4NL>(),
    ] {
        assert_eq!(got, want);
    }
}

/// Every tensor in `fixtures/quant/index.json`: our decode of the GGUF bytes must equal
/// gguf-py's `dequantize` exactly (max |Δ| == 0). `-0.0` and `0.0` count as equal (the
/// comparison is `==` on f32): ggml and NumPy may produce either sign of zero for
/// `d * 0 - 0` depending on operation order, and the two are the same weight.
#[test]
fn decoders_match_gguf_py_bit_exact() -> anyhow::Result<()> {
    let dir = fixtures().join("quant");
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("index.json"))?)?;
    let tensors = index["tensors"]
        .as_array()
        .context("index.json: no tensors")?;
    let mut seen = Vec::new();
    for t in tensors {
        let ty = t["ggml_type"].as_str().context("ggml_type")?;
        let id = t["ggml_type_id"].as_u64().context("ggml_type_id")?;
        let dtype =
            DType::from_ggml_id(u32::try_from(id)?).with_context(|| format!("type id {id}"))?;
        ensure!(
            dtype.name() == ty,
            "index says {ty} for id {id}, we call it {dtype}"
        );
        let raw = std::fs::read(dir.join(t["raw_file"].as_str().context("raw_file")?))?;
        let (shape, want) =
            crate::npy::read_f32(dir.join(t["dequant_file"].as_str().context("dequant_file")?))?;
        let n = t["n_elements"].as_u64().context("n_elements")? as usize;
        ensure!(
            want.len() == n,
            "{ty}: npy {shape:?} has {} values, index says {n}",
            want.len()
        );
        let mut got = vec![f32::NAN; n];
        dequantize(dtype, &raw, &mut got)?;
        let mut max_abs = 0.0f32;
        let mut mismatches = 0usize;
        let mut signed_zero = 0usize;
        for (&g, &w) in got.iter().zip(&want) {
            if g != w {
                mismatches += 1;
                max_abs = max_abs.max((g - w).abs());
            } else if g.to_bits() != w.to_bits() {
                signed_zero += 1;
            }
        }
        ensure!(
            mismatches == 0,
            "{ty}: {mismatches} of {n} values differ from gguf-py, max |Δ| {max_abs}"
        );
        // The tensor is not trivially zero (else equality would prove nothing).
        ensure!(got.iter().any(|&v| v != 0.0), "{ty}: all zero");
        eprintln!(
            "{ty}: {n} values bit-equal to gguf-py ({signed_zero} differ only in the sign of zero)"
        );
        seen.push(dtype);
    }
    seen.sort();
    seen.dedup();
    ensure!(
        seen.len() == 12,
        "expected 12 encodings in the fixtures, found {seen:?}"
    );
    Ok(())
}

#[test]
fn dequantize_checks_lengths() {
    let mut out = vec![0.0f32; 256];
    // One Q4_K block is 144 bytes for 256 elements.
    assert!(dequantize(DType::Q4_K, &[0u8; 143], &mut out).is_err());
    assert!(dequantize(DType::Q4_K, &[0u8; 144], &mut out).is_ok());
    // 100 elements is not a whole number of 32-element blocks.
    let mut odd = vec![0.0f32; 100];
    let err = dequantize(DType::Q8_0, &[0u8; 34 * 3], &mut odd);
    assert!(matches!(
        err,
        Err(EngineError::Op {
            op: "dequantize",
            ..
        })
    ));
    let msg = err.map_err(|e| e.to_string()).err().unwrap_or_default();
    assert!(msg.contains("Q8_0") && msg.contains("102"), "{msg}");
    assert!(dequantize(DType::F16, &[0u8; 511], &mut out).is_err());
    assert!(dequantize(DType::F32, &[0u8; 1024], &mut out).is_ok());
}

#[test]
fn unaligned_input_decodes_the_same() -> anyhow::Result<()> {
    let raw = std::fs::read(fixtures().join("quant/Q6_K.blk.0.time_mix_key.weight.bin"))?;
    let mut shifted = vec![0u8; raw.len() + 1];
    shifted[1..].copy_from_slice(&raw);
    let n = raw.len() / 210 * 256;
    let a = dequantize_to_vec(DType::Q6_K, &raw, n)?;
    let b = dequantize_to_vec(DType::Q6_K, &shifted[1..], n)?;
    assert_eq!(a, b);
    Ok(())
}

fn gaussian(n: usize, seed: u64, std: f32) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Box–Muller: enough for test data, no extra dependency.
    (0..n)
        .map(|_| {
            let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
            let u2: f32 = rng.gen();
            std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
        })
        .collect()
}

fn rel_rms(a: &[f32], b: &[f32]) -> f32 {
    let num: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f32 = a.iter().map(|x| x * x).sum();
    (num / den).sqrt()
}

/// Round trip on N(0, 0.02²) weights (the scale of `make_model.py`'s matrices). A uniform
/// quantizer's RMS error is step/√12, with step = range / levels of the group:
/// Q8_0 2·absmax(32)/254 ≈ 4.4σ/254 → 0.5 % (llama-quantize's own Q8_0 of the tiny
/// fixture: 0.54 %); Q6_K 2·absmax(16)/64 ≈ 4σ/64 → 1.8 %; Q5_0 4.4σ/32 → 4 %; Q4_K
/// range(32)/15 ≈ 4.4σ/15 → 8 % before its min/scale search (fixture manifests: 7–9 %).
/// Each bound is ≈1.5× that, so a wrong bit layout (errors ≥ 50 %) fails while the
/// seeded data cannot make it flaky.
#[test]
fn quantizers_round_trip_within_step_size() -> anyhow::Result<()> {
    let x = gaussian(256 * 64, 42, 0.02);
    let q8 = quantize_q8_0(&x);
    let mut y = vec![0.0; x.len()];
    dequantize_row(&q8, &mut y)?;
    let e8 = rel_rms(&x, &y);
    let q5 = quantize_q5_0(&x);
    dequantize_row(&q5, &mut y)?;
    let e5 = rel_rms(&x, &y);
    let q4 = quantize_q4_k(&x);
    dequantize_row(&q4, &mut y)?;
    let e4 = rel_rms(&x, &y);
    let q6 = quantize_q6_k(&x);
    dequantize_row(&q6, &mut y)?;
    let e6 = rel_rms(&x, &y);
    let f = quantize_f16(&x);
    let ef = rel_rms(&x, &f.iter().map(|v| v.to_f32()).collect::<Vec<_>>());
    eprintln!("rel RMS: Q8_0 {e8:.5} Q6_K {e6:.5} Q5_0 {e5:.5} Q4_K {e4:.5} F16 {ef:.2e}");
    ensure!(e8 < 0.008, "Q8_0 {e8}");
    ensure!(e6 < 0.027, "Q6_K {e6}");
    ensure!(e5 < 0.06, "Q5_0 {e5}");
    ensure!(e4 < 0.12, "Q4_K {e4}");
    // f16 has an 11-bit significand: relative error ≤ 2^-11 per value.
    ensure!(ef < 4.9e-4, "F16 {ef}");
    // The round-to-nearest variants (no scale search) are a little worse, never much:
    // Q4_K's search buys ~10 % of RMS error on Gaussian data, Q6_K's ~5 %.
    dequantize_row(&quantize_q4_k_rtn(&x), &mut y)?;
    let e4r = rel_rms(&x, &y);
    dequantize_row(&quantize_q6_k_rtn(&x), &mut y)?;
    let e6r = rel_rms(&x, &y);
    eprintln!("rel RMS round-to-nearest: Q6_K {e6r:.5} Q4_K {e4r:.5}");
    ensure!(e4r >= e4 && e4r < 1.3 * e4, "Q4_K rtn {e4r} vs {e4}");
    ensure!(e6r >= e6 && e6r < 1.3 * e6, "Q6_K rtn {e6r} vs {e6}");
    // Ordering sanity: more bits, less error.
    ensure!(e8 < e6 && e6 < e5 && e5 < e4);
    // Per element, Q8_0 is off by at most half a step (d/2 = absmax/254) plus f16 rounding of d.
    let y8 = {
        let mut v = vec![0.0; x.len()];
        dequantize_row(&q8, &mut v)?;
        v
    };
    for (xb, yb) in x.chunks(32).zip(y8.chunks(32)) {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        for (a, b) in xb.iter().zip(yb) {
            // half a step, plus 127 × the f16 rounding of d (≤ 2^-11 relative).
            ensure!(
                (a - b).abs() <= amax / 254.0 + amax / 2048.0 * 1.01,
                "{a} vs {b}"
            );
        }
    }
    Ok(())
}

#[test]
fn quantizers_handle_zero_and_constant_blocks() -> anyhow::Result<()> {
    let zeros = vec![0.0f32; 256];
    let mut y = vec![1.0; 256];
    dequantize_row(&quantize_q4_k(&zeros), &mut y)?;
    ensure!(y.iter().all(|&v| v == 0.0));
    dequantize_row(&quantize_q6_k(&zeros), &mut y)?;
    ensure!(y.iter().all(|&v| v == 0.0));
    dequantize_row(&quantize_q8_0(&zeros), &mut y)?;
    ensure!(y.iter().all(|&v| v == 0.0));
    dequantize_row(&quantize_q5_0(&zeros), &mut y)?;
    ensure!(y.iter().all(|&v| v == 0.0));
    // A constant positive block: Q4_K stores it through the scale alone (min clamps to 0).
    let c = vec![0.5f32; 256];
    dequantize_row(&quantize_q4_k(&c), &mut y)?;
    // One 4-bit step of a 6-bit-scaled f16 d: within 1 % of 0.5.
    ensure!(y.iter().all(|&v| (v - 0.5).abs() < 0.005), "{:?}", &y[..4]);
    Ok(())
}

/// llama-quantize's own Q8_0: quantize the f16 weights of `blocks.0.att.key.weight` from
/// the tiny SafeTensors with our `quantize_q8_0` and compare with the bytes llama-quantize
/// wrote for `blk.0.time_mix_key.weight` in `rwkv7-tiny-Q8_0.gguf` (offset from the
/// fixture's manifest). Expect identical bytes: the reference quantizer is fully
/// specified (`roundf`, f32 `1/d`, f16 round-to-nearest-even).
#[test]
fn q8_0_matches_llama_quantize_bytes() -> anyhow::Result<()> {
    let dir = fixtures();
    let st_bytes = std::fs::read(dir.join("rwkv7-tiny.safetensors"))?;
    let st = safetensors::SafeTensors::deserialize(&st_bytes)?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("rwkv7-tiny-Q8_0.gguf.json"))?)?;
    let gguf = std::fs::read(dir.join("rwkv7-tiny-Q8_0.gguf"))?;
    let mut compared = 0;
    for t in manifest["tensors"].as_array().context("tensors")? {
        if t["type"] != "Q8_0" {
            continue;
        }
        let name = t["blinkdl"][0]["name"].as_str().context("blinkdl name")?;
        let src = st.tensor(name)?;
        ensure!(
            src.dtype() == safetensors::Dtype::F16,
            "{name}: {:?}",
            src.dtype()
        );
        let x: Vec<f32> = src
            .data()
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect();
        let off = t["offset"].as_u64().context("offset")? as usize;
        let len = t["n_bytes"].as_u64().context("n_bytes")? as usize;
        let want = gguf.get(off..off + len).context("offset past the end")?;
        let ours = quantize_q8_0(&x);
        let ours: &[u8] = bytemuck::cast_slice(&ours);
        let differing = ours.iter().zip(want).filter(|(a, b)| a != b).count();
        ensure!(
            ours.len() == want.len(),
            "{name}: {} vs {} bytes",
            ours.len(),
            want.len()
        );
        ensure!(
            differing == 0,
            "{name}: {differing} of {len} bytes differ from llama-quantize"
        );
        compared += 1;
    }
    // 2 layers × (r, k, v, o, ffn key, ffn value) + emb + head.
    ensure!(compared == 14, "compared {compared} tensors");
    Ok(())
}
