//! The values of a synthetic model: BlinkDL tensors generated row by row, each row from
//! its own SplitMix64 stream keyed by (seed, BlinkDL name, row), rounded to f16, and
//! encoded in parallel row chunks.

use half::f16;
use half::slice::HalfFloatSliceExt;
use rwkv_engine::{quant, DType, EngineError, Result, Rwkv7Config};

use crate::{SynthOptions, HEAD_SIZE};

/// SplitMix64 (Steele, Lea & Flood 2014): one 64-bit state, fast, good enough for weights.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn sym(&mut self) -> f32 {
        ((self.next() >> 40) as f32) * (2.0 / 16_777_216.0) - 1.0
    }

    /// Approximately N(0, 1): Irwin–Hall sum of four 16-bit uniforms, centred and scaled to
    /// unit variance (bounded by ±3.46, so no outlier overflows f16).
    fn gauss(&mut self) -> f32 {
        let x = self.next();
        let s: u32 = (0..4).map(|i| ((x >> (16 * i)) & 0xffff) as u32).sum();
        (s as f32 / 65536.0 - 2.0) * 3f32.sqrt()
    }
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Generates BlinkDL tensors row by row.
pub(crate) struct Init {
    pub(crate) cfg: Rwkv7Config,
    pub(crate) seed: u64,
}

/// A BlinkDL tensor: name and row-major shape.
#[derive(Debug, Clone)]
pub(crate) struct Blink {
    pub(crate) name: String,
    pub(crate) shape: Vec<usize>,
}

impl Blink {
    pub(crate) fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        Blink {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }
    pub(crate) fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
    pub(crate) fn rows(&self) -> usize {
        self.shape.iter().rev().skip(1).product()
    }
}

impl Init {
    /// The generator of `opts`' model.
    ///
    /// Errors: as [`SynthOptions::config`].
    pub(crate) fn new(opts: &SynthOptions) -> Result<Self> {
        Ok(Init {
            cfg: opts.config()?,
            seed: opts.seed,
        })
    }

    fn rng(&self, name: &str, row: usize) -> SplitMix64 {
        let mut s = SplitMix64(
            self.seed
                ^ fnv1a(name).rotate_left(17)
                ^ (row as u64).wrapping_mul(0xd6e8_feb8_6659_fd93),
        );
        s.next();
        SplitMix64(s.next())
    }

    /// BlinkDL tensor list in `make_model.py`'s (RWKV-LM's) order.
    pub(crate) fn blink_tensors(&self) -> Vec<Blink> {
        let c = &self.cfg;
        let (cc, v, f, l) = (c.n_embd, c.vocab_size, c.ffn_dim, &c.lora);
        let vec3 = [1, 1, cc];
        let mut t = vec![Blink::new("emb.weight", &[v, cc])];
        for i in 0..c.n_layer {
            let p = format!("blocks.{i}.");
            for n in ["ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"] {
                t.push(Blink::new(format!("{p}{n}"), &[cc]));
            }
            if i == 0 {
                t.push(Blink::new(format!("{p}ln0.weight"), &[cc]));
                t.push(Blink::new(format!("{p}ln0.bias"), &[cc]));
            }
            let a = format!("{p}att.");
            for n in ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"] {
                t.push(Blink::new(format!("{a}{n}"), &vec3));
            }
            t.push(Blink::new(format!("{a}w1"), &[cc, l.decay_w]));
            t.push(Blink::new(format!("{a}w2"), &[l.decay_w, cc]));
            t.push(Blink::new(format!("{a}w0"), &vec3));
            t.push(Blink::new(format!("{a}a1"), &[cc, l.iclr_a]));
            t.push(Blink::new(format!("{a}a2"), &[l.iclr_a, cc]));
            t.push(Blink::new(format!("{a}a0"), &vec3));
            t.push(Blink::new(format!("{a}v1"), &[cc, l.value_v]));
            t.push(Blink::new(format!("{a}v2"), &[l.value_v, cc]));
            t.push(Blink::new(format!("{a}v0"), &vec3));
            t.push(Blink::new(format!("{a}g1"), &[cc, l.gate_g]));
            t.push(Blink::new(format!("{a}g2"), &[l.gate_g, cc]));
            t.push(Blink::new(format!("{a}k_k"), &vec3));
            t.push(Blink::new(format!("{a}k_a"), &vec3));
            t.push(Blink::new(format!("{a}r_k"), &[c.n_head, c.head_size]));
            for n in ["receptance", "key", "value", "output"] {
                t.push(Blink::new(format!("{a}{n}.weight"), &[cc, cc]));
            }
            t.push(Blink::new(format!("{a}ln_x.weight"), &[cc]));
            t.push(Blink::new(format!("{a}ln_x.bias"), &[cc]));
            t.push(Blink::new(format!("{p}ffn.x_k"), &vec3));
            t.push(Blink::new(format!("{p}ffn.key.weight"), &[f, cc]));
            t.push(Blink::new(format!("{p}ffn.value.weight"), &[cc, f]));
        }
        t.push(Blink::new("ln_out.weight", &[cc]));
        t.push(Blink::new("ln_out.bias", &[cc]));
        t.push(Blink::new("head.weight", &[v, cc]));
        t
    }

    /// Fills `out` (one row, `cols` long) of BlinkDL tensor `name` (make_model.py's init),
    /// rounded to f16.
    pub(crate) fn fill_row(&self, name: &str, row: usize, out: &mut [f32]) {
        let c = &self.cfg;
        let cc = c.n_embd as f32;
        let l = c.n_layer;
        let mut rng = self.rng(name, row);
        let (layer, rest) = match name.strip_prefix("blocks.").and_then(|r| r.split_once('.')) {
            Some((i, rest)) => (i.parse::<usize>().unwrap_or(0), rest),
            None => (0, name),
        };
        let r01 = if l > 1 {
            layer as f32 / (l - 1) as f32
        } else {
            0.0
        };
        let r10 = 1.0 - layer as f32 / l as f32;
        // Per-channel ramps of make_model.py (k = channel index).
        let ddd = |k: usize| k as f32 / cc;
        let lin = |k: usize| k as f32 / (cc - 1.0).max(1.0) - 0.5;
        let zz = |k: usize| {
            let half = (HEAD_SIZE as f32 - 1.0) / 2.0;
            let z = ((k % HEAD_SIZE) as f32 - half) / half;
            z * z.abs()
        };
        let uni = |rng: &mut SplitMix64, out: &mut [f32], b: f32| {
            out.iter_mut().for_each(|o| *o = b * rng.sym())
        };
        let gau = |rng: &mut SplitMix64, out: &mut [f32], s: f32| {
            out.iter_mut().for_each(|o| *o = s * rng.gauss())
        };
        let lora_in = |k: usize| 1.0 / (k as f32).sqrt();
        match rest {
            "emb.weight" => gau(&mut rng, out, 1.0),
            "head.weight" => gau(&mut rng, out, 3.0 / cc.sqrt()),
            "ln1.weight" | "ln2.weight" | "ln0.weight" | "ln_out.weight" => {
                out.iter_mut().for_each(|o| *o = 1.0 + 0.1 * rng.gauss())
            }
            "ln1.bias" | "ln2.bias" | "ln0.bias" | "ln_out.bias" => gau(&mut rng, out, 0.1),
            "att.x_r" | "att.x_w" | "att.x_k" | "att.x_v" | "att.x_a" | "att.x_g" => {
                let e = match rest {
                    "att.x_r" | "att.x_g" => 0.2,
                    "att.x_w" | "att.x_a" => 0.9,
                    _ => 0.7,
                };
                for (k, o) in out.iter_mut().enumerate() {
                    *o = (1.0 - ddd(k).powf(e * r10) + 0.05 * rng.gauss()).clamp(0.0, 1.0);
                }
            }
            "att.w0" => {
                for (k, o) in out.iter_mut().enumerate() {
                    let www =
                        -6.0 + 6.0 * (k as f32 / (cc - 1.0).max(1.0)).powf(1.0 + r01.powf(0.3));
                    *o = www + 0.5 + zz(k) * 2.5 + 0.5 * rng.gauss();
                }
            }
            "att.a0" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = -0.19 + zz(k) * 0.3 + lin(k) * 0.4 + 0.3 * rng.gauss();
                }
            }
            "att.v0" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = 0.73 - lin(k) * 0.4 + 0.3 * rng.gauss();
                }
            }
            "att.k_k" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = 0.71 - lin(k) * 0.1 + 0.1 * rng.gauss();
                }
            }
            "att.k_a" => out.iter_mut().for_each(|o| *o = 1.02 + 0.1 * rng.gauss()),
            "att.r_k" => out.iter_mut().for_each(|o| *o = -0.04 + 0.3 * rng.gauss()),
            // LoRA: first matrices [C, D] (in = C), second [D, C] (in = D).
            "att.w1" | "att.a1" | "att.v1" | "att.g1" => uni(&mut rng, out, lora_in(c.n_embd)),
            "att.w2" | "att.a2" | "att.v2" => uni(&mut rng, out, lora_in(self.lora_rank(rest))),
            "att.g2" => uni(&mut rng, out, 2.0 / (c.lora.gate_g as f32).sqrt()),
            "att.receptance.weight" | "att.key.weight" | "att.value.weight" | "ffn.key.weight" => {
                uni(&mut rng, out, 1.0 / cc.sqrt())
            }
            "att.output.weight" => uni(&mut rng, out, 0.5 / cc.sqrt()),
            "ffn.value.weight" => uni(&mut rng, out, 0.5 / (c.ffn_dim as f32).sqrt()),
            "att.ln_x.weight" => {
                let s = ((1 + layer) as f32 / l as f32).powf(0.7);
                out.iter_mut()
                    .for_each(|o| *o = s * (1.0 + 0.1 * rng.gauss()))
            }
            "att.ln_x.bias" => gau(&mut rng, out, 0.05),
            "ffn.x_k" => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = (1.0 - ddd(k).powf(r10.powi(4)) + 0.05 * rng.gauss()).clamp(0.0, 1.0);
                }
            }
            _ => out.iter_mut().for_each(|o| *o = 0.0),
        }
        // Round to f16 in slices (half's vectorised F16C path where the CPU has it).
        let mut buf = [f16::ZERO; 256];
        for chunk in out.chunks_mut(256) {
            let b = &mut buf[..chunk.len()];
            b.convert_from_f32_slice(chunk);
            b.convert_to_f32_slice(chunk);
        }
    }

    fn lora_rank(&self, rest: &str) -> usize {
        let l = &self.cfg.lora;
        match rest {
            "att.w2" => l.decay_w,
            "att.a2" => l.iclr_a,
            _ => l.value_v,
        }
    }

    /// Rows `rows` of tensor `t`, concatenated.
    pub(crate) fn rows(&self, t: &Blink, rows: std::ops::Range<usize>) -> Vec<f32> {
        let cols = t.cols();
        let mut out = vec![0.0f32; rows.len() * cols];
        for (i, chunk) in out.chunks_exact_mut(cols).enumerate() {
            self.fill_row(&t.name, rows.start + i, chunk);
        }
        out
    }

    pub(crate) fn full(&self, t: &Blink) -> Vec<f32> {
        self.rows(t, 0..t.rows())
    }
}

/// `data` (whole rows) in `dtype`'s bytes; `reference`: the full llama.cpp search for
/// Q4_K / Q6_K (else round to nearest).
pub(crate) fn encode(dtype: DType, data: &[f32], reference: bool) -> Vec<u8> {
    match dtype {
        DType::F32 => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => {
            let mut out = vec![0u8; data.len() * 2];
            quant::encode_f16_bytes(data, &mut out);
            out
        }
        DType::Q8_0 => bytemuck::cast_slice(&quant::quantize_q8_0(data)).to_vec(),
        DType::Q5_0 => bytemuck::cast_slice(&quant::quantize_q5_0(data)).to_vec(),
        DType::Q4_K if reference => bytemuck::cast_slice(&quant::quantize_q4_k(data)).to_vec(),
        DType::Q4_K => bytemuck::cast_slice(&quant::quantize_q4_k_rtn(data)).to_vec(),
        DType::Q6_K if reference => bytemuck::cast_slice(&quant::quantize_q6_k(data)).to_vec(),
        DType::Q6_K => bytemuck::cast_slice(&quant::quantize_q6_k_rtn(data)).to_vec(),
        // Not produced by `gguf_entries`.
        _ => Vec::new(),
    }
}

/// Generates rows of `t` and encodes them as `dtype` in chunks of about 1 M elements,
/// `n_threads` chunks at a time, handing each encoded chunk to `sink` in row order.
pub(crate) fn stream_rows(
    init: &Init,
    t: &Blink,
    dtype: DType,
    n_threads: usize,
    reference: bool,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let rows = t.rows();
    let cols = t.cols().max(1);
    let chunk = ((1 << 20) / cols).max(1);
    let mut start = 0;
    while start < rows {
        let ranges: Vec<std::ops::Range<usize>> = (0..n_threads)
            .map(|i| {
                let a = (start + i * chunk).min(rows);
                a..(a + chunk).min(rows)
            })
            .filter(|r| !r.is_empty())
            .collect();
        let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = ranges
                .iter()
                .map(|r| s.spawn(move || encode(dtype, &init.rows(t, r.clone()), reference)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        for (p, r) in parts.iter().zip(&ranges) {
            // A panicked worker (a bug) would have returned no bytes: report, never write
            // a short tensor.
            let want = dtype.bytes_for(r.len() * cols).unwrap_or(usize::MAX);
            if p.len() != want {
                return Err(EngineError::Op {
                    op: "synth",
                    what: format!(
                        "`{}` rows {r:?}: encoded {} bytes, expected {want}",
                        t.name,
                        p.len()
                    ),
                });
            }
            sink(p)?;
        }
        start = ranges.last().map(|r| r.end).unwrap_or(rows);
    }
    Ok(())
}
