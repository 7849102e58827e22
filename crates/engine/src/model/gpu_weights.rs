//! RWKV-7 weights on the GPU, in their file encoding.
//!
//! Big matrices go from the file mapping into mapped GPU buffers (one copy, no
//! intermediate `Vec`); Q4_K stays Q4_K, Q8_0 stays Q8_0, F16 stays F16. Encodings the
//! kernels do not read (Q4_0, Q5_0, Q2_K, …) are decoded to F16 at load, and BlinkDL's
//! `[in, out]` low-rank matrices (tiny) are transposed to `[out, in]` f32. Per-layer
//! vectors are packed into one f32 buffer per layer ([`LayerVecs`] offsets).

use crate::error::{EngineError, Result};
use crate::format::DType;
use crate::gpu::pipeline::gpu_native;
use crate::gpu::{buffer, GpuContext};
use crate::model::config::Rwkv7Config;
use crate::model::weights::{Matrix, MatrixLayout, Rwkv7Weights, Vector};
use crate::ops::GpuMatrix;

/// Offsets (in units of C) of the vectors packed into a layer's `vecs` buffer.
pub struct LayerVecs;

impl LayerVecs {
    /// The six time-mix lerps r, w, k, v, a, g.
    pub const MIX: usize = 0;
    pub const W0: usize = 6;
    pub const A0: usize = 7;
    pub const V0: usize = 8;
    pub const K_K: usize = 9;
    pub const K_A: usize = 10;
    pub const R_K: usize = 11;
    /// ln1 weight, bias.
    pub const LN1: usize = 12;
    pub const LN2: usize = 14;
    pub const LN_X: usize = 16;
    pub const FFN_X_K: usize = 18;
    pub const LEN: usize = 19;
}

/// Offsets (units of C) in the global vectors buffer: ln0 weight/bias, ln_out weight/bias.
pub struct GlobalVecs;

impl GlobalVecs {
    pub const LN0: usize = 0;
    pub const LN_OUT: usize = 2;
    pub const LEN: usize = 4;
}

/// One block's matrices and vectors.
pub struct GpuLayer {
    pub vecs: wgpu::Buffer,
    pub receptance: GpuMatrix,
    pub key: GpuMatrix,
    pub value: GpuMatrix,
    pub output: GpuMatrix,
    pub w1: GpuMatrix,
    pub w2: GpuMatrix,
    pub a1: GpuMatrix,
    pub a2: GpuMatrix,
    pub v1: Option<GpuMatrix>,
    pub v2: Option<GpuMatrix>,
    pub g1: GpuMatrix,
    pub g2: GpuMatrix,
    pub ffn_key: GpuMatrix,
    pub ffn_value: GpuMatrix,
}

/// The whole model on the GPU.
pub struct GpuWeights {
    pub config: Rwkv7Config,
    /// Embedding rows in chunks that each fit one binding.
    pub emb: Vec<GpuMatrix>,
    pub head: Vec<GpuMatrix>,
    pub globals: wgpu::Buffer,
    pub layers: Vec<GpuLayer>,
    /// Bytes of GPU memory held by the weights.
    pub bytes: u64,
    /// Encodings as uploaded, with tensor counts.
    pub types: Vec<(DType, usize)>,
}

struct Uploader<'a> {
    gpu: &'a GpuContext,
    /// Drops uploaded tensors' pages from host memory (see `ModelFile::release`).
    release: &'a dyn Fn(&[u8]),
    /// Budget for the weights, bytes.
    limit: u64,
    bytes: u64,
    /// Bytes written since the GPU last took its uploads (staging memory still held).
    in_flight: u64,
    types: Vec<(DType, usize)>,
}

impl Uploader<'_> {
    fn count(&mut self, dtype: DType, bytes: usize) {
        self.bytes += bytes as u64;
        match self.types.iter_mut().find(|(d, _)| *d == dtype) {
            Some((_, n)) => *n += 1,
            None => self.types.push((dtype, 1)),
        }
    }

    fn check_binding(&self, name: &str, bytes: usize) -> Result<()> {
        if self.bytes + bytes as u64 > self.limit {
            return Err(EngineError::TooLarge {
                what: format!(
                    "the weights need more than {} bytes of GPU memory at tensor `{name}` ({bytes} bytes); \
                     the limit is {}",
                    self.bytes + bytes as u64,
                    self.limit
                ),
            });
        }
        if bytes as u64 > self.gpu.max_binding() {
            return Err(EngineError::TooLarge {
                what: format!(
                    "tensor `{name}` needs {bytes} bytes in one binding; the device allows {}",
                    self.gpu.max_binding()
                ),
            });
        }
        Ok(())
    }

    /// Rows `[row0, row0 + n)` of `m` as one GPU matrix.
    fn rows(&mut self, m: &Matrix, row0: usize, n: usize) -> Result<GpuMatrix> {
        let name = format!("{}[{row0}..{}]", m.name, row0 + n);
        if m.layout == MatrixLayout::InOut {
            if row0 != 0 || n != m.n_out {
                return Err(EngineError::Op {
                    op: "upload",
                    what: format!("`{}`: [in, out] matrices are not split", m.name),
                });
            }
            let t = m.to_f32_out_in()?;
            return self.put(&name, DType::F32, bytemuck::cast_slice(&t), row0, n, m.n_in);
        }
        let row_bytes = m.dtype.bytes_for(m.n_in).ok_or_else(|| EngineError::Op {
            op: "upload",
            what: format!(
                "`{}`: rows of {} are not whole {} blocks",
                m.name, m.n_in, m.dtype
            ),
        })?;
        let src = m
            .bytes
            .get(row0 * row_bytes..(row0 + n) * row_bytes)
            .ok_or_else(|| EngineError::Op {
                op: "upload",
                what: format!("`{}`: rows past the tensor's end", m.name),
            })?;
        let out = if gpu_native(m.dtype) {
            self.put(&name, m.dtype, src, row0, n, m.n_in)
        } else {
            let mut f = vec![0f32; n * m.n_in];
            crate::quant::dequantize(m.dtype, src, &mut f)?;
            let h: Vec<half::f16> = f.iter().map(|&v| half::f16::from_f32(v)).collect();
            self.put(&name, DType::F16, bytemuck::cast_slice(&h), row0, n, m.n_in)
        };
        (self.release)(src);
        out
    }

    fn put(
        &mut self,
        name: &str,
        dtype: DType,
        bytes: &[u8],
        row0: usize,
        n: usize,
        n_in: usize,
    ) -> Result<GpuMatrix> {
        self.check_binding(name, bytes.len())?;
        let buffer = buffer::storage_init(self.gpu, name, bytes)?;
        self.count(dtype, bytes.len());
        // Buffers made mapped at creation are copied to the GPU at the next submission and
        // their host-side staging freed after it: flush every 256 MiB so host memory never
        // holds more than that of the model.
        self.in_flight += bytes.len() as u64;
        if self.in_flight >= 256 << 20 {
            self.gpu.queue.submit([]);
            self.gpu.wait()?;
            self.in_flight = 0;
        }
        Ok(GpuMatrix {
            name: name.to_string(),
            buffer,
            dtype,
            row0,
            n_out: n,
            n_in,
            row_bytes: bytes.len() / n.max(1),
        })
    }

    fn matrix(&mut self, m: &Matrix) -> Result<GpuMatrix> {
        self.rows(m, 0, m.n_out)
    }

    /// A `[vocab, C]` matrix in row chunks that each fit one binding.
    fn chunked(&mut self, m: &Matrix) -> Result<Vec<GpuMatrix>> {
        let out_dtype = if gpu_native(m.dtype) {
            m.dtype
        } else {
            DType::F16
        };
        let row_bytes = out_dtype.bytes_for(m.n_in).unwrap_or(m.n_in * 4).max(1);
        let per = ((self.gpu.max_binding() as usize) / row_bytes).clamp(1, m.n_out.max(1));
        let mut out = Vec::new();
        let mut r = 0;
        while r < m.n_out {
            let n = per.min(m.n_out - r);
            out.push(self.rows(m, r, n)?);
            r += n;
        }
        Ok(out)
    }
}

fn put_vec(dst: &mut [f32], c: usize, slot: usize, v: &Vector) -> Result<()> {
    let f = v.to_f32()?;
    let d = dst
        .get_mut(slot * c..slot * c + f.len())
        .ok_or_else(|| EngineError::Op {
            op: "upload",
            what: format!(
                "vector `{}` of {} values does not fit its slot",
                v.name,
                f.len()
            ),
        })?;
    d.copy_from_slice(&f);
    Ok(())
}

impl GpuWeights {
    /// Uploads every tensor of `w`. `progress(done, total)` counts tensors.
    ///
    /// Errors: [`EngineError::TooLarge`] when a tensor exceeds the device's binding
    /// limit, [`EngineError::Gpu`] when an allocation fails.
    pub fn upload(
        gpu: &GpuContext,
        w: &Rwkv7Weights,
        limit: Option<u64>,
        release: &dyn Fn(&[u8]),
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let cfg = w.config;
        let c = cfg.n_embd;
        let mut up = Uploader {
            gpu,
            release,
            limit: limit.unwrap_or(u64::MAX),
            bytes: 0,
            in_flight: 0,
            types: Vec::new(),
        };
        let total = 4 + cfg.n_layer * 15;
        let mut done = 0;
        let mut tick = |n: usize| {
            done += n;
            progress(done, total);
        };
        let emb = up.chunked(&w.emb)?;
        let head = up.chunked(&w.head)?;
        let mut g = vec![0f32; GlobalVecs::LEN * c];
        put_vec(&mut g, c, GlobalVecs::LN0, &w.ln0.weight)?;
        put_vec(&mut g, c, GlobalVecs::LN0 + 1, &w.ln0.bias)?;
        put_vec(&mut g, c, GlobalVecs::LN_OUT, &w.ln_out.weight)?;
        put_vec(&mut g, c, GlobalVecs::LN_OUT + 1, &w.ln_out.bias)?;
        let globals = buffer::storage_init(gpu, "globals", bytemuck::cast_slice(&g))?;
        tick(4);
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for (l, b) in w.blocks.iter().enumerate() {
            let a = &b.att;
            let mut v = vec![0f32; LayerVecs::LEN * c];
            for (i, m) in [&a.x_r, &a.x_w, &a.x_k, &a.x_v, &a.x_a, &a.x_g]
                .into_iter()
                .enumerate()
            {
                put_vec(&mut v, c, LayerVecs::MIX + i, m)?;
            }
            put_vec(&mut v, c, LayerVecs::W0, &a.w0)?;
            put_vec(&mut v, c, LayerVecs::A0, &a.a0)?;
            if let Some(v0) = &a.v0 {
                put_vec(&mut v, c, LayerVecs::V0, v0)?;
            }
            put_vec(&mut v, c, LayerVecs::K_K, &a.k_k)?;
            put_vec(&mut v, c, LayerVecs::K_A, &a.k_a)?;
            put_vec(&mut v, c, LayerVecs::R_K, &a.r_k)?;
            put_vec(&mut v, c, LayerVecs::LN1, &b.ln1.weight)?;
            put_vec(&mut v, c, LayerVecs::LN1 + 1, &b.ln1.bias)?;
            put_vec(&mut v, c, LayerVecs::LN2, &b.ln2.weight)?;
            put_vec(&mut v, c, LayerVecs::LN2 + 1, &b.ln2.bias)?;
            put_vec(&mut v, c, LayerVecs::LN_X, &a.ln_x.weight)?;
            put_vec(&mut v, c, LayerVecs::LN_X + 1, &a.ln_x.bias)?;
            put_vec(&mut v, c, LayerVecs::FFN_X_K, &b.ffn.x_k)?;
            let vecs =
                buffer::storage_init(gpu, &format!("blk.{l}.vecs"), bytemuck::cast_slice(&v))?;
            up.bytes += (v.len() * 4) as u64;
            let layer = GpuLayer {
                vecs,
                receptance: up.matrix(&a.receptance)?,
                key: up.matrix(&a.key)?,
                value: up.matrix(&a.value)?,
                output: up.matrix(&a.output)?,
                w1: up.matrix(&a.w1)?,
                w2: up.matrix(&a.w2)?,
                a1: up.matrix(&a.a1)?,
                a2: up.matrix(&a.a2)?,
                v1: a.v1.as_ref().map(|m| up.matrix(m)).transpose()?,
                v2: a.v2.as_ref().map(|m| up.matrix(m)).transpose()?,
                g1: up.matrix(&a.g1)?,
                g2: up.matrix(&a.g2)?,
                ffn_key: up.matrix(&b.ffn.key)?,
                ffn_value: up.matrix(&b.ffn.value)?,
            };
            layers.push(layer);
            tick(15);
        }
        gpu.check_lost()?;
        Ok(GpuWeights {
            config: cfg,
            emb,
            head,
            globals,
            layers,
            bytes: up.bytes,
            types: up.types,
        })
    }
}
