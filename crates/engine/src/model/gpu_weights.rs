//! RWKV-7 weights on the GPU, in their file encoding.
//!
//! One copy of the weights: bytes go from the file mapping into GPU memory with no
//! intermediate `Vec`; Q4_K stays Q4_K, Q8_0 stays Q8_0, F16 stays F16. Encodings the
//! kernels do not read (Q4_0, Q5_0, Q2_K, …) are decoded to F16 at load, and BlinkDL's
//! `[in, out]` low-rank matrices (tiny) are transposed to `[out, in]` f32. Per-layer
//! vectors are packed into one f32 buffer per layer ([`LayerVecs`] offsets).
//!
//! [`GpuWeights::plan`] walks the tensors, checks the limits and creates every
//! destination buffer; [`PendingUpload::stream`] (`model::upload`) then fills them.

use std::sync::Arc;
use std::time::Instant;

use crate::config::Rwkv7Config;
use crate::error::{EngineError, Result};
use crate::format::DType;
use crate::gpu::{buffer, GpuContext};
use crate::model::weights::{Matrix, MatrixLayout, Rwkv7Weights, Vector};
use crate::ops::decode::gpu_native;
use crate::ops::gpu_layout::{gpu_row_bytes, relaid};
use crate::ops::GpuMatrix;

use super::host_embedding::HostEmbedding;
use super::upload::{HostJob, Job, Source};
pub use super::upload::{PendingUpload, UploadOptions, UploadProgress};

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
    /// The embedding, kept in host memory: each pass uploads its tokens' rows.
    pub emb: Arc<HostEmbedding>,
    pub head: Vec<GpuMatrix>,
    pub globals: wgpu::Buffer,
    pub layers: Vec<GpuLayer>,
    /// Bytes of GPU memory held by the weights.
    pub bytes: u64,
    /// Encodings as uploaded, with tensor counts.
    pub types: Vec<(DType, usize)>,
}

/// Walks the model once: checks limits, creates the destination buffers, lists the jobs.
struct Planner<'a, 'g> {
    gpu: &'g GpuContext,
    /// Budget for the weights, bytes.
    limit: u64,
    bytes: u64,
    types: Vec<(DType, usize)>,
    jobs: Vec<Job<'a>>,
    host: Vec<HostJob<'a>>,
}

impl<'a> Planner<'a, '_> {
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

    /// A destination buffer of `len` bytes (padded to 16) to be filled from `source`.
    fn buffer(&mut self, name: &str, len: usize, source: Source<'a>) -> wgpu::Buffer {
        let buffer = buffer::storage(self.gpu, name, len as u64);
        self.jobs.push(Job {
            name: name.to_string(),
            buffer: buffer.clone(),
            dst_off: 0,
            len: len as u64,
            span: buffer.size(),
            source,
        });
        buffer
    }

    /// Several matrices in one buffer, each at a multiple of the storage offset
    /// alignment, so that one dispatch can read them all (the decode kernel of the
    /// low-rank products, `matvec_group`); each is still bound on its own elsewhere.
    /// Matrices whose encoding on the GPU differs from the one most of them have (other
    /// than F16 beside F32) get their own buffers.
    ///
    /// In a group of F16 and F32 matrices (llama.cpp writes RWKV-7's decay LoRA in F32
    /// beside F16 others) the F32 ones go to the GPU as F16 where every value fits: one
    /// encoding lets a prefill pass run them as one grouped tensor-core product (whose
    /// tiles round the weights to f16 anyway), and halves their bytes.
    fn group(&mut self, ms: &[&Matrix<'a>]) -> Result<Vec<GpuMatrix>> {
        let mut planned = Vec::with_capacity(ms.len());
        for m in ms {
            planned.push(self.matrix_source(m, 0, m.n_out)?);
        }
        if planned.iter().any(|p| p.1 == DType::F16) {
            for (p, m) in planned.iter_mut().zip(ms) {
                if p.1 == DType::F32 {
                    if let Some(half) = f32_as_f16(&p.3, m.n_in) {
                        *p = (std::mem::take(&mut p.0), DType::F16, p.2 / 2, half);
                    }
                }
            }
        }
        let align = u64::from(self.gpu.limits.min_storage_buffer_offset_alignment).max(256);
        // The encoding most of them share (decay LoRA is often F32 beside F16 others);
        // F16 and F32 may share a buffer (the group kernel reads both).
        let dtype0 = planned
            .iter()
            .map(|p| p.1)
            .max_by_key(|d| planned.iter().filter(|p| p.1 == *d).count());
        let floats = |d: DType| matches!(d, DType::F16 | DType::F32);
        let joins = |d: DType| Some(d) == dtype0 || (floats(d) && dtype0.is_some_and(floats));
        let mut total = 0u64;
        for (_, dtype, len, _) in &planned {
            if joins(*dtype) {
                total = total.next_multiple_of(align) + (*len as u64).next_multiple_of(16);
            }
        }
        let label = ms
            .iter()
            .map(|m| m.name.to_string())
            .collect::<Vec<_>>()
            .join("+");
        let shared = buffer::storage(self.gpu, &label, total);
        let mut at = 0u64;
        let mut out = Vec::with_capacity(ms.len());
        for ((name, dtype, len, source), m) in planned.into_iter().zip(ms) {
            if !joins(dtype) {
                out.push(self.put(&name, dtype, source, 0, m.n_out, m.n_in)?);
                continue;
            }
            self.check_binding(&name, len)?;
            self.count(dtype, len);
            at = at.next_multiple_of(align);
            let span = (len as u64).next_multiple_of(16);
            self.jobs.push(Job {
                name: name.clone(),
                buffer: shared.clone(),
                dst_off: at,
                len: len as u64,
                span,
                source,
            });
            out.push(GpuMatrix {
                name,
                buffer: shared.clone(),
                offset: at,
                dtype,
                row0: 0,
                n_out: m.n_out,
                n_in: m.n_in,
                row_bytes: len / m.n_out.max(1),
            });
            at += span;
        }
        Ok(out)
    }

    /// Rows `[row0, row0 + n)` of `m` as one GPU matrix.
    fn rows(&mut self, m: &Matrix<'a>, row0: usize, n: usize) -> Result<GpuMatrix> {
        let (name, dtype, _, source) = self.matrix_source(m, row0, n)?;
        self.put(&name, dtype, source, row0, n, m.n_in)
    }

    /// Name, encoding on the GPU, byte length and source of rows `[row0, row0 + n)`.
    fn matrix_source(
        &self,
        m: &Matrix<'a>,
        row0: usize,
        n: usize,
    ) -> Result<(String, DType, usize, Source<'a>)> {
        let name = format!("{}[{row0}..{}]", m.name, row0 + n);
        if m.layout == MatrixLayout::InOut {
            if row0 != 0 || n != m.n_out {
                return Err(EngineError::Op {
                    op: "upload",
                    what: format!("`{}`: [in, out] matrices are not split", m.name),
                });
            }
            let t = m.to_f32_out_in()?;
            let bytes: Vec<u8> = bytemuck::cast_slice(&t).to_vec();
            let len = bytes.len();
            return Ok((name, DType::F32, len, Source::Owned(bytes)));
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
        if gpu_native(m.dtype) && relaid(m.dtype) {
            let source = Source::Spread {
                dtype: m.dtype,
                src,
                n_in: m.n_in,
            };
            Ok((name, m.dtype, source.gpu_len(n, m.n_in), source))
        } else if gpu_native(m.dtype) {
            Ok((name, m.dtype, src.len(), Source::File(src)))
        } else {
            let source = Source::Decode {
                dtype: m.dtype,
                src,
                n_in: m.n_in,
            };
            // F16 out: 2 bytes a value.
            Ok((name, DType::F16, n * m.n_in * 2, source))
        }
    }

    fn put(
        &mut self,
        name: &str,
        dtype: DType,
        source: Source<'a>,
        row0: usize,
        n: usize,
        n_in: usize,
    ) -> Result<GpuMatrix> {
        let len = source.gpu_len(n, n_in);
        self.check_binding(name, len)?;
        let buffer = self.buffer(name, len, source);
        self.count(dtype, len);
        Ok(GpuMatrix {
            name: name.to_string(),
            buffer,
            offset: 0,
            dtype,
            row0,
            n_out: n,
            n_in,
            row_bytes: len / n.max(1),
        })
    }

    fn matrix(&mut self, m: &Matrix<'a>) -> Result<GpuMatrix> {
        self.rows(m, 0, m.n_out)
    }

    /// A matrix kept in host memory, laid out as the GPU would hold it (the embedding).
    fn host(&mut self, m: &Matrix<'a>) -> Result<Arc<HostEmbedding>> {
        let (_, dtype, len, source) = self.matrix_source(m, 0, m.n_out)?;
        let gpu_row = len / m.n_out.max(1);
        let target = Arc::new(HostEmbedding::new(m.name, dtype, m.n_in, m.n_out, gpu_row));
        self.host.push(HostJob {
            target: target.clone(),
            source,
        });
        Ok(target)
    }

    /// A `[vocab, C]` matrix in row chunks that each fit one binding.
    fn chunked(&mut self, m: &Matrix<'a>) -> Result<Vec<GpuMatrix>> {
        let out_dtype = if gpu_native(m.dtype) {
            m.dtype
        } else {
            DType::F16
        };
        let row_bytes = gpu_row_bytes(out_dtype, m.n_in)
            .unwrap_or(m.n_in * 4)
            .max(1);
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
    /// Uploads every tensor of `w`: [`GpuWeights::plan`], then [`PendingUpload::stream`].
    ///
    /// Errors: those of both.
    pub fn upload(
        gpu: &GpuContext,
        w: &Rwkv7Weights,
        limit: Option<u64>,
        opts: &UploadOptions,
        bytes: &(dyn crate::format::FileBytes + Sync),
        progress: &mut dyn FnMut(UploadProgress),
    ) -> Result<Self> {
        let (weights, pending) = Self::plan(gpu, w, limit)?;
        pending.stream(gpu, opts, bytes, progress)?;
        Ok(weights)
    }

    /// Checks limits and creates every weight buffer, unfilled; what fills them is
    /// returned for [`PendingUpload::stream`]. The buffers may be bound (a graph built)
    /// before they are filled, as long as no GPU work using them is submitted first.
    /// Converts only what cannot be streamed (packed vectors, `[in, out]` matrices).
    ///
    /// Errors: [`EngineError::TooLarge`] naming the tensor when the weights exceed
    /// `limit` bytes or a tensor the device's binding limit (nothing is copied yet);
    /// [`EngineError::Op`] for a tensor whose bytes do not match its shape.
    pub fn plan<'a>(
        gpu: &GpuContext,
        w: &Rwkv7Weights<'a>,
        limit: Option<u64>,
    ) -> Result<(Self, PendingUpload<'a>)> {
        let t0 = Instant::now();
        let cfg = w.config;
        let c = cfg.n_embd;
        let mut up = Planner {
            gpu,
            limit: limit.unwrap_or(u64::MAX),
            bytes: 0,
            types: Vec::new(),
            jobs: Vec::new(),
            host: Vec::new(),
        };
        let emb = up.host(&w.emb)?;
        let head = up.chunked(&w.head)?;
        let mut g = vec![0f32; GlobalVecs::LEN * c];
        put_vec(&mut g, c, GlobalVecs::LN0, &w.ln0.weight)?;
        put_vec(&mut g, c, GlobalVecs::LN0 + 1, &w.ln0.bias)?;
        put_vec(&mut g, c, GlobalVecs::LN_OUT, &w.ln_out.weight)?;
        put_vec(&mut g, c, GlobalVecs::LN_OUT + 1, &w.ln_out.bias)?;
        let g: Vec<u8> = bytemuck::cast_slice(&g).to_vec();
        let globals = up.buffer("globals", g.len(), Source::Owned(g));
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
            let v: Vec<u8> = bytemuck::cast_slice(&v).to_vec();
            up.bytes += v.len() as u64;
            let vecs = up.buffer(&format!("blk.{l}.vecs"), v.len(), Source::Owned(v));
            // The low-rank chains' first and second products, each set in one buffer.
            let mut firsts = vec![&a.w1, &a.a1, &a.g1];
            let mut seconds = vec![&a.w2, &a.a2, &a.g2];
            if let (Some(v1), Some(v2)) = (&a.v1, &a.v2) {
                firsts.push(v1);
                seconds.push(v2);
            }
            let mut firsts = up.group(&firsts)?.into_iter();
            let mut seconds = up.group(&seconds)?.into_iter();
            let missing = || EngineError::Op {
                op: "upload",
                what: format!("block {l}: a matrix went missing while grouping"),
            };
            // r, k, v read by one decode dispatch: one buffer.
            let mut rkv = up.group(&[&a.receptance, &a.key, &a.value])?.into_iter();
            let layer = GpuLayer {
                vecs,
                receptance: rkv.next().ok_or_else(missing)?,
                key: rkv.next().ok_or_else(missing)?,
                value: rkv.next().ok_or_else(missing)?,
                output: up.matrix(&a.output)?,
                w1: firsts.next().ok_or_else(missing)?,
                a1: firsts.next().ok_or_else(missing)?,
                g1: firsts.next().ok_or_else(missing)?,
                v1: firsts.next(),
                w2: seconds.next().ok_or_else(missing)?,
                a2: seconds.next().ok_or_else(missing)?,
                g2: seconds.next().ok_or_else(missing)?,
                v2: seconds.next(),
                ffn_key: up.matrix(&b.ffn.key)?,
                ffn_value: up.matrix(&b.ffn.value)?,
            };
            layers.push(layer);
        }
        log::debug!(
            "upload: plan {:.1} ms ({} buffers)",
            t0.elapsed().as_secs_f64() * 1e3,
            up.jobs.len()
        );
        let weights = GpuWeights {
            config: cfg,
            emb,
            head,
            globals,
            layers,
            bytes: up.bytes,
            types: up.types,
        };
        let pending = PendingUpload {
            jobs: up.jobs,
            host: up.host,
        };
        Ok((weights, pending))
    }
}

/// An F32 matrix source (`n_in` values a row) as the same values in F16, when every one is
/// finite and within the F16 range (`None` otherwise, or for another source).
fn f32_as_f16<'a>(source: &Source<'a>, n_in: usize) -> Option<Source<'a>> {
    let fits = |b: &[u8]| {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .all(|v| v.is_finite() && v.abs() <= 65504.0)
    };
    match source {
        Source::File(b) if fits(b) => Some(Source::Decode {
            dtype: DType::F32,
            src: b,
            n_in,
        }),
        Source::Owned(b) if fits(b) => {
            let h: Vec<u8> = b
                .chunks_exact(4)
                .flat_map(|c| {
                    let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    half::f16::from_f32(v).to_le_bytes()
                })
                .collect();
            Some(Source::Owned(h))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// F32 rows within the F16 range become F16 (decoded from the file, or converted
    /// when built while planning); a value past the range or not finite keeps them F32.
    #[test]
    fn f32_matrices_in_range_go_to_f16() {
        let ok = bytes(&[0.5, -1.25, 65504.0, 1e-3]);
        match f32_as_f16(&Source::File(&ok), 4) {
            Some(Source::Decode { dtype, src, n_in }) => {
                assert_eq!((dtype, src.len(), n_in), (DType::F32, 16, 4));
            }
            _ => panic!("an F32 file matrix in range is decoded to F16"),
        }
        match f32_as_f16(&Source::Owned(ok.clone()), 4) {
            Some(Source::Owned(h)) => {
                let got: Vec<f32> = h
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect();
                assert_eq!(&got[..3], &[0.5, -1.25, 65504.0]);
                assert!((got[3] - 1e-3).abs() < 1e-6);
            }
            _ => panic!("an owned F32 matrix in range is converted"),
        }
        for bad in [70000.0, f32::NAN, f32::INFINITY] {
            let b = bytes(&[1.0, bad]);
            assert!(f32_as_f16(&Source::File(&b), 2).is_none(), "{bad}");
            assert!(f32_as_f16(&Source::Owned(b.clone()), 2).is_none(), "{bad}");
        }
    }
}
