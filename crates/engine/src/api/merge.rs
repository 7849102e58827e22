//! Merging LoRA adapters into a base model: a standalone SafeTensors model with BlinkDL
//! names (`emb.weight`, `blocks.N.att.*`, …, the names and shapes of RWKV-LM's `.pth`
//! files, which the `rwkv` package and this engine load).
//!
//! Every adapted matrix is written as F32 `W + Σ_k s_k · B_k A_k` (`W` decoded from its
//! file encoding: F16, BF16, F32 or any block type the engine reads; `A_k` `[r, in]`,
//! `B_k` `[out, r]`, the math of RWKV-PEFT's `merge/merge.py` and llama.cpp's
//! `llama-export-lora`). Every other tensor is written as the base holds it when that is
//! F32, F16 or BF16 (bytes copied, transposed where the BlinkDL layout differs, e.g. GGUF's
//! `[D, C]` low-rank `w1` → BlinkDL `[C, D]`), and decoded to F32 when block-quantized.
//! GGUF's fused `time_mix_lerp_fused` is split into `att.x_r … x_g` `[1, 1, C]`, its flat
//! `r_k` `[C]` reshaped to `[H, N]`. Layer 0's unused `v0/v1/v2` are not written.
//!
//! The file is written tensor by tensor (one decoded matrix in memory at a time) to
//! `OUT.partial`, then renamed to `OUT`: nothing half-written is left under `OUT`.

use std::io::Write;
use std::path::Path;

use crate::adapter::{LoraAdapter, LoraMatrix, LoraTarget};
use crate::config::Rwkv7Config;
use crate::error::{EngineError, Result};
use crate::format::{DType, ModelFile};
use crate::model::weights::{Block, Matrix, MatrixLayout, Rwkv7Weights, Vector};

/// What [`merge_to_safetensors`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeSummary {
    /// Tensors written.
    pub tensors: usize,
    /// Matrices with at least one LoRA delta added.
    pub adapted: usize,
    /// Size of the output file in bytes.
    pub bytes: u64,
}

/// Where one output tensor's values come from.
enum Src<'w> {
    Vector(Vector<'w>),
    /// A matrix written in `to` layout, with `deltas` (adapter matrix, scale) added.
    Matrix {
        m: Matrix<'w>,
        to: MatrixLayout,
        deltas: Vec<(&'w LoraMatrix, f32)>,
    },
}

struct Planned<'w> {
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    src: Src<'w>,
}

fn st_dtype(d: DType) -> &'static str {
    match d {
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        _ => "F32",
    }
}

/// Writes `base` with every `(adapter, scale)` of `loras` merged in to `out` (SafeTensors,
/// BlinkDL names; see the module docs). Each adapter is checked against the base first
/// ([`LoraAdapter::check`]); nothing is written when one does not fit.
///
/// Errors: the base's own ([`crate::EngineError::NotRwkv7`], `Shape`, …), an adapter's
/// [`EngineError::Adapter`], [`EngineError::InvalidInput`] for a non-finite scale or `out`
/// equal to the base's path, [`EngineError::Io`] naming `out` when writing fails.
pub fn merge_to_safetensors(
    base: &ModelFile,
    loras: &[(&LoraAdapter, f32)],
    out: &Path,
) -> Result<MergeSummary> {
    if out == base.path() {
        return Err(EngineError::InvalidInput {
            what: format!("merge output {} is the base model itself", out.display()),
        });
    }
    let w = Rwkv7Weights::from_file(base)?;
    for (a, s) in loras {
        if !s.is_finite() {
            return Err(EngineError::InvalidInput {
                what: format!("scale {s} for adapter {} is not finite", a.name),
            });
        }
        a.check(&w.config)?;
    }
    let plan = plan_tensors(&w, loras);
    let hbytes = header_bytes(base, loras, &plan)?;
    write_atomically(out, &hbytes, &plan)?;
    let io = |e: std::io::Error| EngineError::io(out, e);
    let bytes = std::fs::metadata(out).map_err(io)?.len();
    let adapted = plan
        .iter()
        .filter(|p| matches!(&p.src, Src::Matrix { deltas, .. } if !deltas.is_empty()))
        .count();
    Ok(MergeSummary {
        tensors: plan.len(),
        adapted,
        bytes,
    })
}

/// Every tensor of the merged file, in file order, with its BlinkDL name, shape and
/// source (the adapted matrices with their scaled deltas).
fn plan_tensors<'w>(w: &'w Rwkv7Weights, loras: &[(&'w LoraAdapter, f32)]) -> Vec<Planned<'w>> {
    let c = w.config.n_embd;
    let mut plan: Vec<Planned<'_>> = Vec::new();
    plan.push(mat(
        "emb.weight".into(),
        &w.emb,
        MatrixLayout::OutIn,
        vec![],
    ));
    plan.push(vec("blocks.0.ln0.weight".into(), &w.ln0.weight, vec![c]));
    plan.push(vec("blocks.0.ln0.bias".into(), &w.ln0.bias, vec![c]));
    for (i, b) in w.blocks.iter().enumerate() {
        plan_block(&mut plan, &w.config, i, b, loras);
    }
    plan.push(vec("ln_out.weight".into(), &w.ln_out.weight, vec![c]));
    plan.push(vec("ln_out.bias".into(), &w.ln_out.bias, vec![c]));
    plan.push(mat(
        "head.weight".into(),
        &w.head,
        MatrixLayout::OutIn,
        vec![],
    ));
    plan
}

/// The tensors of block `i` onto `plan`.
fn plan_block<'w>(
    plan: &mut Vec<Planned<'w>>,
    cfg: &Rwkv7Config,
    i: usize,
    b: &'w Block<'w>,
    loras: &[(&'w LoraAdapter, f32)],
) {
    use MatrixLayout::{InOut, OutIn};
    let c = cfg.n_embd;
    let deltas = |layer: usize, t: LoraTarget| -> Vec<(&'w LoraMatrix, f32)> {
        loras
            .iter()
            .flat_map(|(a, s)| {
                a.matrices
                    .iter()
                    .filter(move |m| m.layer == layer && m.target == t)
                    .map(move |m| (m, *s))
            })
            .collect()
    };
    let p = format!("blocks.{i}.");
    let mix = vec![1, 1, c];
    plan.push(vec(format!("{p}ln1.weight"), &b.ln1.weight, vec![c]));
    plan.push(vec(format!("{p}ln1.bias"), &b.ln1.bias, vec![c]));
    plan.push(vec(format!("{p}ln2.weight"), &b.ln2.weight, vec![c]));
    plan.push(vec(format!("{p}ln2.bias"), &b.ln2.bias, vec![c]));
    let a = &b.att;
    for (n, v) in [
        ("x_r", &a.x_r),
        ("x_w", &a.x_w),
        ("x_k", &a.x_k),
        ("x_v", &a.x_v),
        ("x_a", &a.x_a),
        ("x_g", &a.x_g),
        ("w0", &a.w0),
        ("a0", &a.a0),
        ("k_k", &a.k_k),
        ("k_a", &a.k_a),
    ] {
        plan.push(vec(format!("{p}att.{n}"), v, mix.clone()));
    }
    if let Some(v0) = &a.v0 {
        plan.push(vec(format!("{p}att.v0"), v0, mix.clone()));
    }
    plan.push(vec(
        format!("{p}att.r_k"),
        &a.r_k,
        vec![cfg.n_head, cfg.head_size],
    ));
    for (n, m) in [
        ("w1", Some(&a.w1)),
        ("w2", Some(&a.w2)),
        ("a1", Some(&a.a1)),
        ("a2", Some(&a.a2)),
        ("v1", a.v1.as_ref()),
        ("v2", a.v2.as_ref()),
        ("g1", Some(&a.g1)),
        ("g2", Some(&a.g2)),
    ] {
        if let Some(m) = m {
            plan.push(mat(format!("{p}att.{n}"), m, InOut, vec![]));
        }
    }
    for (t, m) in [
        (LoraTarget::Receptance, &a.receptance),
        (LoraTarget::Key, &a.key),
        (LoraTarget::Value, &a.value),
        (LoraTarget::Output, &a.output),
    ] {
        plan.push(mat(
            format!("{p}{}.weight", t.name()),
            m,
            OutIn,
            deltas(i, t),
        ));
    }
    plan.push(vec(format!("{p}att.ln_x.weight"), &a.ln_x.weight, vec![c]));
    plan.push(vec(format!("{p}att.ln_x.bias"), &a.ln_x.bias, vec![c]));
    plan.push(vec(format!("{p}ffn.x_k"), &b.ffn.x_k, mix.clone()));
    for (t, m) in [
        (LoraTarget::FfnKey, &b.ffn.key),
        (LoraTarget::FfnValue, &b.ffn.value),
    ] {
        plan.push(mat(
            format!("{p}{}.weight", t.name()),
            m,
            OutIn,
            deltas(i, t),
        ));
    }
}

/// The SafeTensors header of `plan` (offsets in plan order; `__metadata__` naming the
/// base and the adapters), padded with spaces to a multiple of 8 bytes.
fn header_bytes(
    base: &ModelFile,
    loras: &[(&LoraAdapter, f32)],
    plan: &[Planned],
) -> Result<Vec<u8>> {
    let mut header = serde_json::Map::new();
    let mut meta = serde_json::Map::new();
    meta.insert("format".into(), "pt".into());
    meta.insert(
        "merged_from".into(),
        crate::adapter::display_name(base.path()).into(),
    );
    let list: Vec<String> = loras
        .iter()
        .map(|(a, s)| format!("{}:{s}", a.name))
        .collect();
    meta.insert("loras".into(), list.join(",").into());
    header.insert("__metadata__".into(), meta.into());
    let mut off = 0usize;
    for p in plan {
        let n: usize = p.shape.iter().product();
        let len = n * p.dtype.block_bytes();
        header.insert(
            p.name.clone(),
            serde_json::json!({"dtype": st_dtype(p.dtype), "shape": p.shape, "data_offsets": [off, off + len]}),
        );
        off += len;
    }
    let mut hbytes = serde_json::to_vec(&serde_json::Value::Object(header)).map_err(|e| {
        EngineError::InvalidInput {
            what: format!("merge header: {e}"),
        }
    })?;
    while hbytes.len() % 8 != 0 {
        hbytes.push(b' ');
    }
    Ok(hbytes)
}

/// Writes the file to `OUT.partial` (created new, 0600), tensor by tensor, then renames
/// it to `out`; on an error the partial file is removed.
fn write_atomically(out: &Path, hbytes: &[u8], plan: &[Planned]) -> Result<()> {
    let mut partial = out.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let io = |e: std::io::Error| EngineError::io(out, e);
    // create_new, 0600: a link planted at the temporary's name is never written through.
    let f = crate::files::create_temporary(&partial).map_err(io)?;
    let mut wr = std::io::BufWriter::new(f);
    let result = (|| -> Result<()> {
        wr.write_all(&(hbytes.len() as u64).to_le_bytes())
            .map_err(io)?;
        wr.write_all(hbytes).map_err(io)?;
        for p in plan {
            let bytes = tensor_bytes(p)?;
            wr.write_all(&bytes).map_err(io)?;
        }
        wr.flush().map_err(io)?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    drop(wr);
    std::fs::rename(&partial, out).map_err(io)?;
    Ok(())
}

fn vec<'w>(name: String, v: &Vector<'w>, shape: Vec<usize>) -> Planned<'w> {
    Planned {
        name,
        shape,
        dtype: v.dtype,
        src: Src::Vector(v.clone()),
    }
}

fn mat<'w>(
    name: String,
    m: &Matrix<'w>,
    to: MatrixLayout,
    deltas: Vec<(&'w LoraMatrix, f32)>,
) -> Planned<'w> {
    let shape = match to {
        MatrixLayout::OutIn => vec![m.n_out, m.n_in],
        MatrixLayout::InOut => vec![m.n_in, m.n_out],
    };
    let dtype = if deltas.is_empty() && !m.dtype.is_quantized() {
        m.dtype
    } else {
        DType::F32
    };
    Planned {
        name,
        shape,
        dtype,
        src: Src::Matrix { m: *m, to, deltas },
    }
}

/// The bytes of one planned tensor (little-endian, `p.dtype`).
fn tensor_bytes(p: &Planned<'_>) -> Result<Vec<u8>> {
    match &p.src {
        Src::Vector(v) => Ok(v.bytes.to_vec()),
        Src::Matrix { m, to, deltas } => {
            if p.dtype != DType::F32 || (m.dtype == DType::F32 && deltas.is_empty()) {
                // Plain float kept as stored: copy, transposing elements when needed.
                return Ok(if m.layout == *to {
                    m.bytes.to_vec()
                } else {
                    transpose_bytes(m.bytes, m.dtype.block_bytes(), m.layout, m.n_out, m.n_in)
                });
            }
            let mut wv = m.to_f32_out_in()?;
            for (lm, s) in deltas {
                add_delta(&mut wv, lm, *s);
            }
            let wv = match to {
                MatrixLayout::OutIn => wv,
                MatrixLayout::InOut => transpose_f32(&wv, m.n_out, m.n_in),
            };
            Ok(wv.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
    }
}

/// `w [out, in] += s · B A` (`A` `[r, in]`, `B` `[out, r]`, f32).
pub fn add_delta(w: &mut [f32], m: &LoraMatrix, s: f32) {
    let (r, n_in) = (m.rank, m.n_in);
    for (o, row) in w.chunks_exact_mut(n_in).enumerate().take(m.n_out) {
        for k in 0..r {
            let coef = s * m.b[o * r + k];
            let a = &m.a[k * n_in..(k + 1) * n_in];
            for (x, &av) in row.iter_mut().zip(a) {
                *x += coef * av;
            }
        }
    }
}

/// `[rows, cols]` f32 → `[cols, rows]`.
fn transpose_f32(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; v.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = v[i * cols + j];
        }
    }
    t
}

/// Transposes a matrix of `es`-byte elements stored in `from` layout (`n_out × n_in`).
fn transpose_bytes(b: &[u8], es: usize, from: MatrixLayout, n_out: usize, n_in: usize) -> Vec<u8> {
    let (rows, cols) = match from {
        MatrixLayout::OutIn => (n_out, n_in),
        MatrixLayout::InOut => (n_in, n_out),
    };
    let mut t = vec![0u8; b.len()];
    for i in 0..rows {
        for j in 0..cols {
            let s = (i * cols + j) * es;
            let d = (j * rows + i) * es;
            t[d..d + es].copy_from_slice(&b[s..s + es]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_is_b_times_a() {
        // A [2, 3], B [2, 2] by hand: B A = [[1*1+2*4, 1*2+2*5, 1*3+2*6], [3*1+4*4, …]].
        let m = LoraMatrix {
            layer: 0,
            target: LoraTarget::Key,
            rank: 2,
            n_in: 3,
            n_out: 2,
            a: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            b: vec![1.0, 2.0, 3.0, 4.0],
        };
        let mut w = vec![0.5; 6];
        add_delta(&mut w, &m, 2.0);
        assert_eq!(w, vec![18.5, 24.5, 30.5, 38.5, 52.5, 66.5]);
    }

    #[test]
    fn transposes_agree() {
        let v: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let t = transpose_f32(&v, 2, 3);
        assert_eq!(t, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let tb = transpose_bytes(&b, 4, MatrixLayout::OutIn, 2, 3);
        let back: Vec<f32> = tb
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(back, t);
    }
}
