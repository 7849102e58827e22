//! Kernel microbenchmark: each matrix kernel's distance to its limit, one command away
//! (`rwkv kernels`).
//!
//! For every encoding (F16, Q8_0, Q4_K, Q6_K) × shape (rows × K: the 2.9B model's
//! 2560×2560 attention products, 10240×2560 channel-mix key, 2560×10240 channel-mix value
//! and the 65536×2560 head) it times
//! - **decode**: the matrix × vector kernel at T = 1 and at T = 8 (a server's batched step),
//!   as effective bandwidth (encoded weight bytes / time, GB/s) against the device's
//!   memory bandwidth;
//! - **prefill**: the tiled kernel (tensor cores where the adapter has them) at T = 512, as
//!   TFLOP/s (2·rows·K·T / time);
//! - **decode with 8-bit x handed over** (`matvec/x8`, Q4_K): the one-token kernel as a
//!   decode step runs the channel-mix value — x already 8-bit in the activations (the key
//!   quantized it: `ops::matmul::ln_fuse`), no prologue, a residual add saving the shift
//!   state — the kernel's own distance to the bandwidth;
//!
//! plus the per-dispatch floor (a chain of dispatches of a 32 × 32 product) and the WKV
//! scan at T = 512 for 12 and 40 heads. Each figure is the median of `repeats` compute
//! passes of `chain` back-to-back dispatches (each writing what the next reads, so the
//! driver orders them as in a forward pass), timed with GPU timestamps at the pass
//! boundaries, after `warm_ms` of untimed passes (the GPU's clock up again after the
//! figure's uploads). The decode figures read their weights cold, as a forward pass does (each
//! matrix once a token): the dispatches cycle through copies of the matrix that together
//! outgrow the GPU's L2 cache (`cold_bytes`), where one matrix read by every dispatch
//! would be served from an L2 of 50 MB (an H100's, an H200's) for all but the head's
//! shape; `matvec/hot` keeps that figure at T = 1 beside it. Weights are seeded random
//! values quantized by this crate's reference quantizers (`quant`), never zeros.

mod chain;

use chain::time_chain;

use crate::config::HEAD_SIZE;
use crate::error::{EngineError, Result};
use crate::format::DType;
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{buffer, GpuContext};
use crate::ops::matmul::{matmul, matvec_ln, Act, LnEnd, LnFuse, MatmulArgs};
use crate::ops::wkv::{wkv, WkvArgs};
use crate::ops::{Ctx, Dims, GpuMatrix};

/// What to measure.
#[derive(Debug, Clone)]
pub struct KernelBenchOptions {
    /// Encodings of the matrix kernels.
    pub dtypes: Vec<DType>,
    /// Shapes as (rows N, K).
    pub shapes: Vec<(usize, usize)>,
    /// Tokens of the prefill figure.
    pub prefill_tokens: usize,
    /// Dispatches per timed pass.
    pub chain: usize,
    /// Timed passes (the median is reported), after one warm-up pass.
    pub repeats: usize,
    /// Lanes per row of the decode kernel to try besides the engine's choice (tuning:
    /// each is timed as `matvec/L<lanes>` through `Tuning::mv_lanes`, as `RWKV_MV_LANES`
    /// would set it).
    pub mv_lanes: Vec<u32>,
    /// Bytes of copies of a decode figure's matrix its dispatches cycle through, a
    /// different copy each dispatch ([`cold_copies`]: at most 64); 0: one matrix for
    /// every dispatch.
    pub cold_bytes: usize,
    /// Milliseconds of back-to-back warm-up passes before each figure's timed ones (at
    /// least one, which also touches every copy): a GPU that idled while the bench
    /// uploaded the figure's matrices runs its first passes at a lowered clock.
    pub warm_ms: u64,
}

impl Default for KernelBenchOptions {
    fn default() -> Self {
        KernelBenchOptions {
            dtypes: vec![DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K],
            shapes: vec![(2560, 2560), (10240, 2560), (2560, 10240), (65536, 2560)],
            prefill_tokens: 512,
            chain: 20,
            repeats: 5,
            mv_lanes: Vec::new(),
            cold_bytes: 512 << 20,
            warm_ms: 300,
        }
    }
}

/// Copies of a matrix of `bytes` bytes that fill `cold_bytes` (1–64; 1 where
/// `cold_bytes` is 0 or the matrix alone fills it).
pub fn cold_copies(bytes: usize, cold_bytes: usize) -> usize {
    cold_bytes.div_ceil(bytes.max(1)).clamp(1, 64)
}

/// One measured kernel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelFigure {
    /// `matvec`, `matmul_coop` / `matmul` (whichever the pass picks), `floor`, `wkv`.
    pub kernel: String,
    pub dtype: Option<String>,
    /// Rows × K of the product, or heads for `wkv`.
    pub shape: String,
    /// Tokens in the pass.
    pub tokens: usize,
    /// Median GPU time of one dispatch, µs.
    pub us: f64,
    /// Encoded weight bytes over time (decode figures), GB/s.
    pub gb_s: Option<f64>,
    /// 2·N·K·T over time (prefill figures), TFLOP/s.
    pub tflop_s: Option<f64>,
}

/// Runs the microbenchmark on `gpu`, calling `progress` with a line per figure.
///
/// Errors: [`EngineError::Gpu`] when the adapter has no timestamp queries; GPU errors.
pub fn run(
    gpu: &GpuContext,
    opts: &KernelBenchOptions,
    progress: &mut dyn FnMut(&KernelFigure),
) -> Result<Vec<KernelFigure>> {
    if !gpu.features.timestamp {
        return Err(EngineError::gpu(format!(
            "{} has no timestamp queries: no kernel timings",
            gpu.summary.name
        )));
    }
    let pipelines = PipelineCache::default();
    let mut out = Vec::new();
    let mut push = |f: KernelFigure, out: &mut Vec<KernelFigure>| {
        progress(&f);
        out.push(f);
    };
    // The per-dispatch floor: a tiny product, so the time is the launch and the barrier.
    let f = time_product(gpu, &pipelines, DType::F16, 32, 32, 1, 0, opts)?;
    push(
        KernelFigure {
            kernel: "floor".into(),
            gb_s: None,
            tflop_s: None,
            ..f
        },
        &mut out,
    );
    for &dtype in &opts.dtypes {
        for &(n, k) in &opts.shapes {
            // One token (decode), a server's step of 8 (`SMALL_T`), a prefill chunk.
            let small = crate::ops::matmul::SMALL_T as usize;
            for t in [1, small, opts.prefill_tokens] {
                let cold = if t <= small { opts.cold_bytes } else { 0 };
                match time_product(gpu, &pipelines, dtype, n, k, t, cold, opts) {
                    Ok(f) => push(f, &mut out),
                    Err(e) => log::warn!("kernel bench {dtype} {n}x{k} T={t}: {e}"),
                }
            }
            // One token with one matrix for every dispatch (its weights in the L2 where
            // they fit), the figure before `cold_bytes`.
            match time_product(gpu, &pipelines, dtype, n, k, 1, 0, opts) {
                Ok(f) => push(
                    KernelFigure {
                        kernel: "matvec/hot".into(),
                        ..f
                    },
                    &mut out,
                ),
                Err(e) => log::warn!("kernel bench {dtype} {n}x{k} hot: {e}"),
            }
            if dtype == DType::Q4_K {
                match time_value_x8(gpu, &pipelines, n, k, opts) {
                    Ok(f) => push(f, &mut out),
                    Err(e) => log::warn!("kernel bench {dtype} {n}x{k} x8: {e}"),
                }
            }
            for &lanes in &opts.mv_lanes {
                let tuned = with_tuning(gpu, |t| t.mv_lanes = Some(lanes));
                let cold = opts.cold_bytes;
                match time_product(&tuned, &pipelines, dtype, n, k, 1, cold, opts) {
                    Ok(f) => push(
                        KernelFigure {
                            kernel: format!("matvec/L{lanes}"),
                            ..f
                        },
                        &mut out,
                    ),
                    Err(e) => log::warn!("kernel bench {dtype} {n}x{k} lanes {lanes}: {e}"),
                }
            }
        }
    }
    for heads in [12usize, 40] {
        push(time_wkv(gpu, &pipelines, heads, opts)?, &mut out);
        // Tuning variants: threads per row of S × rows per workgroup (as `RWKV_WKV_TPR`
        // and `RWKV_WKV_ROWS` would set them).
        for (tpr, rb) in [(1, 8), (1, 16), (1, 32), (4, 8), (4, 16), (4, 64)] {
            let tuned = with_tuning(gpu, |t| {
                t.wkv_tpr = Some(tpr);
                t.wkv_rows = Some(rb);
            });
            let f = time_wkv(&tuned, &pipelines, heads, opts)?;
            push(
                KernelFigure {
                    kernel: format!("wkv/T{tpr}R{rb}"),
                    ..f
                },
                &mut out,
            );
        }
    }
    Ok(out)
}

/// `gpu` with its knobs changed by `tune` (the same device and queue).
fn with_tuning(gpu: &GpuContext, tune: impl FnOnce(&mut crate::gpu::Tuning)) -> GpuContext {
    let mut g = gpu.clone();
    tune(&mut g.tuning);
    g
}

/// Seeded uniform values in [-scale, scale).
fn rand_vec(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

/// A seeded random `[n, k]` matrix in `dtype`: 64 quantized rows repeated (the timing
/// depends on the bytes moved, not on their values).
fn matrix_bytes(dtype: DType, n: usize, k: usize) -> Result<Vec<u8>> {
    let base_rows = n.min(64);
    let w = rand_vec(7, base_rows * k, 0.5);
    let base: Vec<u8> = match dtype {
        DType::F16 => bytemuck::cast_slice(&crate::quant::quantize_f16(&w)).to_vec(),
        DType::Q8_0 => bytemuck::cast_slice(&crate::quant::quantize_q8_0(&w)).to_vec(),
        DType::Q4_K => bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec(),
        DType::Q6_K => bytemuck::cast_slice(&crate::quant::quantize_q6_k_rtn(&w)).to_vec(),
        other => {
            return Err(EngineError::invalid(format!(
                "kernel bench: no encoder for {other}"
            )))
        }
    };
    let row = base.len() / base_rows;
    let mut bytes = Vec::with_capacity(row * n);
    while bytes.len() < row * n {
        let take = (row * n - bytes.len()).min(base.len());
        bytes.extend_from_slice(&base[..take]);
    }
    Ok(bytes)
}

/// The `[n, k]` `dtype` matrix of the product figures on the GPU, as many copies as
/// [`cold_copies`] gives for `cold_bytes`, and its encoded size in bytes.
///
/// Errors: a matrix over one binding; as [`matrix_bytes`], [`GpuMatrix::upload`].
fn bench_matrices(
    gpu: &GpuContext,
    dtype: DType,
    (n, k): (usize, usize),
    label: &str,
    cold_bytes: usize,
) -> Result<(Vec<GpuMatrix>, usize)> {
    let bytes = matrix_bytes(dtype, n, k)?;
    if bytes.len() as u64 > gpu.max_binding() {
        return Err(EngineError::invalid(format!(
            "{} bytes exceed one binding ({})",
            bytes.len(),
            gpu.max_binding()
        )));
    }
    let copies = cold_copies(bytes.len(), cold_bytes);
    let ms = (0..copies)
        .map(|i| {
            let name = format!("bench {dtype} {n}x{k}{label} #{i}");
            GpuMatrix::upload(gpu, name, dtype, &bytes, n, k)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((ms, bytes.len()))
}

/// A context for the nodes of one figure, its dimensions in `dims_buf`.
fn bench_ctx<'a>(
    gpu: &'a GpuContext,
    pipelines: &'a PipelineCache,
    dims_buf: &'a wgpu::Buffer,
) -> Ctx<'a> {
    Ctx {
        gpu,
        pipelines,
        dims: dims_buf,
        lora: None,
    }
}

/// Times `y = W x` for `t` tokens (x `[t, k]`, y `[t, n]` in one activation buffer), the
/// dispatches cycling through the copies of W that fill `cold_bytes`.
#[allow(clippy::too_many_arguments)]
fn time_product(
    gpu: &GpuContext,
    pipelines: &PipelineCache,
    dtype: DType,
    n: usize,
    k: usize,
    t: usize,
    cold_bytes: usize,
    opts: &KernelBenchOptions,
) -> Result<KernelFigure> {
    let (ms, bytes) = bench_matrices(gpu, dtype, (n, k), "", cold_bytes)?;
    let dims = Dims {
        n_tokens: t as u32,
        n_seqs: 1,
        ..Default::default()
    };
    let dims_buf = buffer::uniform(gpu, "dims", &dims);
    let cx = bench_ctx(gpu, pipelines, &dims_buf);
    let x = rand_vec(8, t * k, 1.0);
    let mut host = x;
    host.resize(t * k + t * n, 0.0);
    let act = buffer::storage_init(gpu, "bench.act", bytemuck::cast_slice(&host))?;
    let vecs = buffer::storage_init(gpu, "bench.vecs", &[0u8; 16])?;
    // y += W x: every dispatch reads what the previous one wrote.
    let args = MatmulArgs::dense(0, k, t * k, n, Act::None, true, None);
    let nodes = ms
        .iter()
        .map(|m| matmul(&cx, "bench", None, m, &vecs, &act, None, &args))
        .collect::<Result<Vec<_>>>()?;
    let us = time_chain(gpu, &nodes, &dims, opts)?;
    let s = us * 1e-6;
    let decode = t <= crate::ops::matmul::SMALL_T as usize;
    let kernel = if decode {
        "matvec"
    } else if gpu.features.coopmat {
        "matmul_coop"
    } else {
        "matmul"
    };
    Ok(KernelFigure {
        kernel: kernel.to_string(),
        dtype: Some(dtype.to_string()),
        shape: format!("{n}x{k}"),
        tokens: t,
        us,
        gb_s: decode.then(|| bytes as f64 / s / 1e9),
        tflop_s: (!decode).then(|| 2.0 * (n * k * t) as f64 / s / 1e12),
    })
}

/// Times the one-token Q4_K product `x += W x8` as a decode step runs the channel-mix
/// value with its x handed over as 8-bit x (`matvec/x8`: no prologue; the residual add
/// saves the shift state of state slot 0).
///
/// Errors: a product that cannot read 8-bit x (depth not whole Q4_K blocks, `RWKV_MV_Q8=0`
/// or 16-value steps); GPU errors.
fn time_value_x8(
    gpu: &GpuContext,
    pipelines: &PipelineCache,
    n: usize,
    k: usize,
    opts: &KernelBenchOptions,
) -> Result<KernelFigure> {
    let (ms, bytes) = bench_matrices(gpu, DType::Q4_K, (n, k), " x8", opts.cold_bytes)?;
    // One token of sequence 0 in state slot 0.
    let (dims, meta_words) = Dims::one_token(0);
    let dims_buf = buffer::uniform(gpu, "dims", &dims);
    let cx = bench_ctx(gpu, pipelines, &dims_buf);
    // act: the residual y [n], (mean, rstd) [4], x as 8-bit x (k / 4 words, k / 16 pairs:
    // random words, d 1 / 127, so the sums stay finite).
    let (stats, x8) = (n.next_multiple_of(4), n.next_multiple_of(4) + 4);
    let mut host = rand_vec(9, n, 1.0);
    host.resize(x8, 0.0);
    host.extend(
        rand_vec(10, k / 4, 1.0)
            .iter()
            .map(|v| f32::from_bits(v.to_bits() & 0x7f7f_7f7f)),
    );
    host.extend((0..k / 32).flat_map(|_| [1.0 / 127.0, 0.0]));
    let act = buffer::storage_init(gpu, "bench.act", bytemuck::cast_slice(&host))?;
    let vecs = buffer::storage_init(
        gpu,
        "bench.vecs",
        bytemuck::cast_slice(&vec![1.0f32; 2 * n]),
    )?;
    let meta = buffer::storage_init(gpu, "bench.meta", bytemuck::cast_slice(&meta_words))?;
    let state = buffer::storage_init(gpu, "bench.state", bytemuck::cast_slice(&vec![0f32; n]))?;
    let ln = LnFuse {
        meta: &meta,
        state: &state,
        state_off: 0,
        slot_len: n,
        ln_w: 0,
        ln_b: n,
        mix: 0,
        eps: 1e-5,
        stats,
        x8: Some(x8),
    };
    let args = MatmulArgs::dense(x8, k, 0, n, Act::None, true, None);
    let nodes = ms
        .iter()
        .map(|m| {
            let end = LnEnd::Out;
            matvec_ln(&cx, "bench", None, m, &vecs, &act, &args, &ln, end, None)
        })
        .collect::<Result<Vec<_>>>()?;
    let us = time_chain(gpu, &nodes, &dims, opts)?;
    Ok(KernelFigure {
        kernel: "matvec/x8".into(),
        dtype: Some(DType::Q4_K.to_string()),
        shape: format!("{n}x{k}"),
        tokens: 1,
        us,
        gb_s: Some(bytes as f64 / (us * 1e-6) / 1e9),
        tflop_s: None,
    })
}

/// Times the WKV scan over `prefill_tokens` tokens of one sequence with `heads` heads.
fn time_wkv(
    gpu: &GpuContext,
    pipelines: &PipelineCache,
    heads: usize,
    opts: &KernelBenchOptions,
) -> Result<KernelFigure> {
    let (c, t) = (heads * HEAD_SIZE, opts.prefill_tokens);
    let dims = Dims {
        n_tokens: t as u32,
        n_seqs: 1,
        off_seqs: 0,
        ..Default::default()
    };
    let dims_buf = buffer::uniform(gpu, "dims", &dims);
    let cx = bench_ctx(gpu, pipelines, &dims_buf);
    let n = t * c;
    let mut host = rand_vec(9, 7 * n, 0.5);
    // Decays in (0, 1) so the state stays bounded over repeats.
    host[n..2 * n].iter_mut().for_each(|w| *w = 0.75 + 0.2 * *w);
    let act = buffer::storage_init(gpu, "bench.act", bytemuck::cast_slice(&host))?;
    let slot_len = heads * HEAD_SIZE * HEAD_SIZE;
    let state = buffer::storage(gpu, "bench.state", (slot_len * 4) as u64);
    let meta = buffer::storage_init(
        gpu,
        "bench.meta",
        bytemuck::cast_slice(&[0u32, t as u32, 0, 0]),
    )?;
    let a = WkvArgs::consecutive(c, n, 0, slot_len);
    let node = wkv(&cx, None, &a, &meta, &state, &act)?;
    let us = time_chain(gpu, std::slice::from_ref(&node), &dims, opts)?;
    Ok(KernelFigure {
        kernel: "wkv".into(),
        dtype: None,
        shape: format!("{heads} heads"),
        tokens: t,
        us,
        gb_s: None,
        tflop_s: None,
    })
}

#[cfg(test)]
mod tests;
