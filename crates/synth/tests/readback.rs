#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! `rwkv synth` output read back through the engine's own readers (`ModelFile::open` +
//! `Rwkv7Weights::from_file`): the config is the one asked for, and the GGUF of every type
//! holds the same model as the SafeTensors of the same seed (decoded through the typed
//! weights, i.e. the reader's name mapping, transposes and lerp split — not the writer's).

use std::path::PathBuf;

use anyhow::{ensure, Context};
use rwkv_engine::model::weights::{Matrix, Vector};
use rwkv_engine::{DType, FileFormat, ModelFile, Rwkv7Weights};
use rwkv_synth::{self as synth, SynthOptions, SynthType};

fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("rwkv-synth-readback-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d.join(name))
}

fn vec_eq(a: &Vector<'_>, b: &Vector<'_>) -> anyhow::Result<()> {
    ensure!(a.to_f32()? == b.to_f32()?, "{} != {}", a.name, b.name);
    Ok(())
}

/// Relative RMS difference of two matrices in `[out, in]` order.
fn mat_rel(a: &Matrix<'_>, b: &Matrix<'_>) -> anyhow::Result<f64> {
    ensure!(
        (a.n_out, a.n_in) == (b.n_out, b.n_in),
        "{} vs {}: shapes",
        a.name,
        b.name
    );
    let (x, y) = (a.to_f32_out_in()?, b.to_f32_out_in()?);
    let num: f64 = x
        .iter()
        .zip(&y)
        .map(|(p, q)| f64::from(p - q).powi(2))
        .sum();
    let den: f64 = y.iter().map(|q| f64::from(*q).powi(2)).sum();
    Ok((num / den).sqrt())
}

/// Quantization error allowed for `dtype` (relative RMS on uniform / Gaussian weights; see
/// `quant::tests::quantizers_round_trip_within_step_size`): F16/F32 are exact because every
/// synthetic value is f16-exact; Q8_0 ≈ 0.5 %; Q6_K ≈ 2 %; Q5_0 ≈ 4 %; Q4_K ≈ 8–9 %.
fn bound(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::F32 => 0.0,
        DType::Q8_0 => 0.01,
        DType::Q6_K => 0.03,
        _ => 0.12,
    }
}

fn same_model(g: &Rwkv7Weights<'_>, s: &Rwkv7Weights<'_>) -> anyhow::Result<usize> {
    let mut checked = 0;
    for (a, b) in [(&g.emb, &s.emb), (&g.head, &s.head)] {
        let r = mat_rel(a, b)?;
        ensure!(r <= bound(a.dtype), "{} ({}): rel RMS {r}", a.name, a.dtype);
        checked += 1;
    }
    for (a, b) in [(&g.ln0, &s.ln0), (&g.ln_out, &s.ln_out)] {
        vec_eq(&a.weight, &b.weight)?;
        vec_eq(&a.bias, &b.bias)?;
        checked += 2;
    }
    for (gb, sb) in g.blocks.iter().zip(&s.blocks) {
        let (ga, sa) = (&gb.att, &sb.att);
        let vectors = [
            (&ga.x_r, &sa.x_r),
            (&ga.x_w, &sa.x_w),
            (&ga.x_k, &sa.x_k),
            (&ga.x_v, &sa.x_v),
            (&ga.x_a, &sa.x_a),
            (&ga.x_g, &sa.x_g),
            (&ga.w0, &sa.w0),
            (&ga.a0, &sa.a0),
            (&ga.k_k, &sa.k_k),
            (&ga.k_a, &sa.k_a),
            (&ga.r_k, &sa.r_k),
            (&ga.ln_x.weight, &sa.ln_x.weight),
            (&ga.ln_x.bias, &sa.ln_x.bias),
            (&gb.ln1.weight, &sb.ln1.weight),
            (&gb.ln2.bias, &sb.ln2.bias),
            (&gb.ffn.x_k, &sb.ffn.x_k),
        ];
        for (a, b) in vectors {
            vec_eq(a, b)?;
            checked += 1;
        }
        if let (Some(a), Some(b)) = (&ga.v0, &sa.v0) {
            vec_eq(a, b)?;
            checked += 1;
        }
        let mut mats = vec![
            (&ga.w1, &sa.w1),
            (&ga.w2, &sa.w2),
            (&ga.a1, &sa.a1),
            (&ga.a2, &sa.a2),
            (&ga.g1, &sa.g1),
            (&ga.g2, &sa.g2),
            (&ga.receptance, &sa.receptance),
            (&ga.key, &sa.key),
            (&ga.value, &sa.value),
            (&ga.output, &sa.output),
            (&gb.ffn.key, &sb.ffn.key),
            (&gb.ffn.value, &sb.ffn.value),
        ];
        if let (Some(a), Some(b)) = (&ga.v1, &sa.v1) {
            mats.push((a, b));
        }
        for (a, b) in mats {
            let r = mat_rel(a, b)?;
            ensure!(r <= bound(a.dtype), "{} ({}): rel RMS {r}", a.name, a.dtype);
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn synthetic_files_read_back_with_their_config_and_weights() -> anyhow::Result<()> {
    for (l, c) in [(2usize, 128usize), (4, 256)] {
        let base = SynthOptions {
            seed: 9,
            ..SynthOptions::new(l, c)
        };
        let want = base.config()?;
        let st_path = scratch(&format!("m{l}x{c}.safetensors"))?;
        synth::write(&base, &st_path)?;
        let st_file = ModelFile::open(&st_path)?;
        ensure!(st_file.format() == FileFormat::SafeTensors);
        let st = Rwkv7Weights::from_file(&st_file)?;
        ensure!(
            st.config == want,
            "safetensors config {:?} vs {want:?}",
            st.config
        );
        let types: &[SynthType] = if c == 128 {
            &[SynthType::F16, SynthType::Q8_0, SynthType::Q4KM]
        } else {
            // Rows of 256: real Q4_K and a Q6_K head.
            &[SynthType::Q4KM]
        };
        for &ty in types {
            let o = SynthOptions {
                dtype: ty,
                ..base.clone()
            };
            let path = scratch(&format!("m{l}x{c}-{ty:?}.gguf"))?;
            synth::write(&o, &path)?;
            let file = ModelFile::open(&path)?;
            ensure!(file.format() == FileFormat::Gguf);
            let w = Rwkv7Weights::from_file(&file)?;
            ensure!(
                w.config == want,
                "{ty:?}: config {:?} vs {want:?}",
                w.config
            );
            if ty == SynthType::Q4KM && c == 256 {
                ensure!(w.head.dtype == DType::Q6_K && w.blocks[0].att.key.dtype == DType::Q4_K);
            }
            let n = same_model(&w, &st).with_context(|| format!("{l}x{c} {ty:?}"))?;
            // emb, head, ln0 ×2, ln_out ×2, 16 vectors + 12 matrices per layer, v0/v1 from
            // layer 1 on.
            ensure!(n == 6 + 28 * l + 2 * (l - 1), "{n} tensors compared");
            std::fs::remove_file(&path)?;
        }
        std::fs::remove_file(&st_path)?;
    }
    Ok(())
}
