//! A plain f32 CPU forward pass of RWKV-7 (RWKV_x070, sequence mode, zero initial state):
//! the reference for models that have no peer reference (synthetic benchmark models),
//! and an independent check of the GPU path. Slow by design: clarity over speed; the
//! matrices are decoded one at a time and products use all CPU threads.

use crate::config::{Rwkv7Config, DECAY_SCALE, GN_EPS, LN_EPS};
use crate::error::Result;
use crate::model::weights::{Block, Matrix, Norm, Rwkv7Weights};

fn layer_norm(x: &mut [f32], n: &Norm, c: usize, eps: f32) -> Result<()> {
    let (w, b) = (n.weight.to_f32()?, n.bias.to_f32()?);
    for row in x.chunks_mut(c) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        for i in 0..c {
            row[i] = ((row[i] as f64 - mean) * rstd) as f32 * w[i] + b[i];
        }
    }
    Ok(())
}

/// `y[t] = W x[t]` for all rows of `x` (`[T, n_in]` → `[T, n_out]`), rows of W decoded to
/// f32 in blocks and shared out over threads.
fn matmul(m: &Matrix, x: &[f32]) -> Result<Vec<f32>> {
    let w = m.to_f32_out_in()?;
    let (n_in, n_out) = (m.n_in, m.n_out);
    let t = x.len() / n_in;
    let mut y = vec![0f32; t * n_out];
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16);
    let per = n_out.div_ceil(threads);
    // Each thread fills its own output columns; collect per-thread blocks then scatter.
    let blocks: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let w = &w;
                s.spawn(move || {
                    let r0 = (k * per).min(n_out);
                    let r1 = ((k + 1) * per).min(n_out);
                    let mut out = vec![0f32; t * (r1 - r0)];
                    for ti in 0..t {
                        let xr = &x[ti * n_in..(ti + 1) * n_in];
                        for r in r0..r1 {
                            let wr = &w[r * n_in..(r + 1) * n_in];
                            out[ti * (r1 - r0) + r - r0] =
                                wr.iter().zip(xr).map(|(a, b)| a * b).sum();
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    for (k, b) in blocks.iter().enumerate() {
        let r0 = (k * per).min(n_out);
        let r1 = ((k + 1) * per).min(n_out);
        let width = r1 - r0;
        if width == 0 || b.len() != t * width {
            continue;
        }
        for ti in 0..t {
            y[ti * n_out + r0..ti * n_out + r1].copy_from_slice(&b[ti * width..(ti + 1) * width]);
        }
    }
    Ok(y)
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Runs `tokens` from the zero state; returns `(logits [vocab] at the last position,
/// hidden state after ln_out [C] at the last position)`.
///
/// Errors: token id ≥ vocab, decode failures (naming the tensor).
pub fn forward(w: &Rwkv7Weights, tokens: &[u32]) -> Result<(Vec<f32>, Vec<f32>)> {
    let c = w.config.n_embd;
    let t = tokens.len();
    let mut x = embed(w, tokens)?;
    layer_norm(&mut x, &w.ln0, c, LN_EPS)?;
    let mut v_first = vec![0f32; t * c];
    for (l, b) in w.blocks.iter().enumerate() {
        time_mix(&w.config, l, b, &mut x, &mut v_first)?;
        channel_mix(&w.config, b, &mut x)?;
    }
    let mut last = x[(t.saturating_sub(1)) * c..].to_vec();
    layer_norm(&mut last, &w.ln_out, c, LN_EPS)?;
    let logits = head_logits(w, &last)?;
    Ok((logits, last))
}

/// The embedding rows of `tokens`, `[T, C]` f32.
fn embed(w: &Rwkv7Weights, tokens: &[u32]) -> Result<Vec<f32>> {
    let cfg = w.config;
    let c = cfg.n_embd;
    let t = tokens.len();
    let emb_row = cfg.n_embd;
    let row_bytes = w.emb.dtype.bytes_for(emb_row).unwrap_or(0);
    let mut x = vec![0f32; t * c];
    for (i, &tok) in tokens.iter().enumerate() {
        let tok = tok as usize;
        let src = w
            .emb
            .bytes
            .get(tok * row_bytes..(tok + 1) * row_bytes)
            .ok_or_else(|| crate::EngineError::InvalidInput {
                what: format!(
                    "token id {tok} is not below the vocabulary size {}",
                    cfg.vocab_size
                ),
            })?;
        crate::quant::dequantize(w.emb.dtype, src, &mut x[i * c..(i + 1) * c])?;
    }
    Ok(x)
}

/// The time mix of block `l` (steps 1–12) on `x` `[T, C]`, from the zero state; `v_first`
/// is layer 0's value (written by layer 0, read by the others).
fn time_mix(
    cfg: &Rwkv7Config,
    l: usize,
    b: &Block,
    x: &mut [f32],
    v_first: &mut [f32],
) -> Result<()> {
    let (c, h, n) = (cfg.n_embd, cfg.n_head, cfg.head_size);
    let t = x.len() / c;
    let a = &b.att;
    let mut xx = x.to_vec();
    layer_norm(&mut xx, &b.ln1, c, LN_EPS)?;
    let mixes: Vec<Vec<f32>> = [&a.x_r, &a.x_w, &a.x_k, &a.x_v, &a.x_a, &a.x_g]
        .iter()
        .map(|m| m.to_f32())
        .collect::<Result<_>>()?;
    let mut mixed: Vec<Vec<f32>> = vec![vec![0f32; t * c]; 6];
    for ti in 0..t {
        for i in 0..c {
            let cur = xx[ti * c + i];
            let prev = if ti == 0 { 0.0 } else { xx[(ti - 1) * c + i] };
            for m in 0..6 {
                mixed[m][ti * c + i] = cur + (prev - cur) * mixes[m][i];
            }
        }
    }
    let r = matmul(&a.receptance, &mixed[0])?;
    let mut k = matmul(&a.key, &mixed[2])?;
    let mut v = matmul(&a.value, &mixed[3])?;
    let w0 = a.w0.to_f32()?;
    let mut hw = matmul(&a.w1, &mixed[1])?;
    hw.iter_mut().for_each(|e| *e = e.tanh());
    let mut wd = matmul(&a.w2, &hw)?;
    for (i, e) in wd.iter_mut().enumerate() {
        *e = (-DECAY_SCALE * sigmoid(*e + w0[i % c])).exp();
    }
    let a0 = a.a0.to_f32()?;
    let mut aa = matmul(&a.a2, &matmul(&a.a1, &mixed[4])?)?;
    for (i, e) in aa.iter_mut().enumerate() {
        *e = sigmoid(*e + a0[i % c]);
    }
    let mut hg = matmul(&a.g1, &mixed[5])?;
    hg.iter_mut().for_each(|e| *e = sigmoid(*e));
    let g = matmul(&a.g2, &hg)?;
    let (k_k, k_a, r_k) = (a.k_k.to_f32()?, a.k_a.to_f32()?, a.r_k.to_f32()?);
    let mut kk = vec![0f32; t * c];
    for ti in 0..t {
        for hd in 0..h {
            let o = ti * c + hd * n;
            let norm = (0..n)
                .map(|j| (k[o + j] * k_k[hd * n + j]).powi(2))
                .sum::<f32>()
                .sqrt()
                .max(1e-12);
            for j in 0..n {
                kk[o + j] = k[o + j] * k_k[hd * n + j] / norm;
            }
        }
    }
    for i in 0..t * c {
        k[i] *= 1.0 + (aa[i] - 1.0) * k_a[i % c];
    }
    if l == 0 {
        v_first.copy_from_slice(&v);
    } else if let (Some(v0), Some(v1), Some(v2)) = (&a.v0, &a.v1, &a.v2) {
        let v0 = v0.to_f32()?;
        let vm = matmul(v2, &matmul(v1, &mixed[3])?)?;
        for i in 0..t * c {
            v[i] += (v_first[i] - v[i]) * sigmoid(vm[i] + v0[i % c]);
        }
    }
    let y = wkv(cfg, &r, &wd, &k, &v, &kk, &aa);
    let (lxw, lxb) = (a.ln_x.weight.to_f32()?, a.ln_x.bias.to_f32()?);
    let mut out = vec![0f32; t * c];
    for ti in 0..t {
        for hd in 0..h {
            let o = ti * c + hd * n;
            let mean = (0..n).map(|j| y[o + j]).sum::<f32>() / n as f32;
            let var = (0..n).map(|j| (y[o + j] - mean).powi(2)).sum::<f32>() / n as f32;
            let bonus: f32 = (0..n).map(|j| r[o + j] * k[o + j] * r_k[hd * n + j]).sum();
            for j in 0..n {
                let ch = hd * n + j;
                let gn = (y[o + j] - mean) / (var + GN_EPS).sqrt() * lxw[ch] + lxb[ch];
                out[o + j] = (gn + bonus * v[o + j]) * g[o + j];
            }
        }
    }
    let att = matmul(&a.output, &out)?;
    x.iter_mut().zip(&att).for_each(|(a, b)| *a += b);
    Ok(())
}

/// The WKV-7 recurrence from the zero state, per head: `S = S diag(w) + S (-kk)ᵀ(kk·a) + v kᵀ`,
/// `y = S r` (RWKV_x070). Inputs and output `[T, C]`.
fn wkv(
    cfg: &Rwkv7Config,
    r: &[f32],
    wd: &[f32],
    k: &[f32],
    v: &[f32],
    kk: &[f32],
    aa: &[f32],
) -> Vec<f32> {
    let (c, h, n) = (cfg.n_embd, cfg.n_head, cfg.head_size);
    let t = r.len() / c;
    let mut y = vec![0f32; t * c];
    for hd in 0..h {
        let mut s = vec![0f32; n * n];
        for ti in 0..t {
            let o = ti * c + hd * n;
            for i in 0..n {
                let sa: f32 = -(0..n).map(|j| s[i * n + j] * kk[o + j]).sum::<f32>();
                let mut acc = 0f32;
                for j in 0..n {
                    let e =
                        s[i * n + j] * wd[o + j] + sa * kk[o + j] * aa[o + j] + v[o + i] * k[o + j];
                    s[i * n + j] = e;
                    acc += e * r[o + j];
                }
                y[o + i] = acc;
            }
        }
    }
    y
}

/// The channel mix of block `b` (steps 13–17) on `x` `[T, C]`.
fn channel_mix(cfg: &Rwkv7Config, b: &Block, x: &mut [f32]) -> Result<()> {
    let c = cfg.n_embd;
    let t = x.len() / c;
    let mut xx = x.to_vec();
    layer_norm(&mut xx, &b.ln2, c, LN_EPS)?;
    let xk_mix = b.ffn.x_k.to_f32()?;
    let mut xk = vec![0f32; t * c];
    for ti in 0..t {
        for i in 0..c {
            let cur = xx[ti * c + i];
            let prev = if ti == 0 { 0.0 } else { xx[(ti - 1) * c + i] };
            xk[ti * c + i] = cur + (prev - cur) * xk_mix[i];
        }
    }
    let mut hk = matmul(&b.ffn.key, &xk)?;
    hk.iter_mut().for_each(|e| *e = e.max(0.0).powi(2));
    let ffn = matmul(&b.ffn.value, &hk)?;
    x.iter_mut().zip(&ffn).for_each(|(a, b)| *a += b);
    Ok(())
}

/// The head's logits of `last` `[C]`, in row chunks (a 65536 × C f32 head would be large).
fn head_logits(w: &Rwkv7Weights, last: &[f32]) -> Result<Vec<f32>> {
    let c = w.config.n_embd;
    let head = &w.head;
    let rb = head.dtype.bytes_for(c).unwrap_or(0);
    let chunk = 4096usize;
    let mut logits = Vec::with_capacity(head.n_out);
    let mut r0 = 0;
    while r0 < head.n_out {
        let rows = chunk.min(head.n_out - r0);
        let part = Matrix {
            name: head.name,
            dtype: head.dtype,
            n_out: rows,
            n_in: c,
            layout: head.layout,
            bytes: head
                .bytes
                .get(r0 * rb..(r0 + rows) * rb)
                .unwrap_or_default(),
        };
        logits.extend(matmul(&part, last)?);
        r0 += rows;
    }
    Ok(logits)
}
