//! Matrix products with weights in their file encoding: `shaders/matmul.wgsl` (tiled,
//! T > [`SMALL_T`]) and `shaders/matvec.wgsl` (T ≤ [`SMALL_T`], decode). One node holds both
//! variants; the pass picks by its token count.

use crate::error::Result;
use crate::gpu::pipeline::{gpu_native, PipelineKey};
use crate::ops::{op_err, Count, Ctx, GpuMatrix, Grid, Node, Small};

/// Passes with at most this many rows use the matrix × vector kernel.
pub const SMALL_T: u32 = 8;

/// Matrices of at most this many rows and bytes use the matrix × vector kernel for
/// every T.
pub const MATVEC_ALWAYS_ROWS: usize = 128;
pub const MATVEC_ALWAYS_BYTES: usize = 2 << 20;

/// Epilogue applied after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    None = 0,
    Tanh = 1,
    Sigmoid = 2,
    /// `max(y, 0)²` (channel mix).
    ReluSq = 3,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    k: u32,
    n: u32,
    row0: u32,
    row_bytes: u32,
    x_off: u32,
    x_stride: u32,
    y_off: u32,
    y_stride: u32,
    act: u32,
    accumulate: u32,
    bias_off: u32,
    rows_sel: u32,
}

/// Where a product reads and writes (offsets in f32 elements).
#[derive(Debug, Clone, Copy)]
pub struct MatmulArgs {
    /// x `[rows, K]` in `act` at `x_off`, row stride `x_stride`.
    pub x_off: usize,
    pub x_stride: usize,
    /// y `[rows, *]` at `y_off` (in `act`, or in `out` when given), row stride `y_stride`;
    /// W's row r lands in column `row0 + r`.
    pub y_off: usize,
    pub y_stride: usize,
    pub act: Act,
    /// `y += result` (residual add) instead of `y = result`.
    pub accumulate: bool,
    /// Bias `[N]` in `vecs` at this offset.
    pub bias_off: Option<usize>,
    /// Tokens (T) or gathered rows (R).
    pub rows: Count,
}

/// `y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k] + bias)` for every row of `m`.
///
/// Errors: `K` not a multiple of 32, an encoding the kernels do not read.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    out: Option<&wgpu::Buffer>,
    a: &MatmulArgs,
) -> Result<Node> {
    Ok(build(cx, op, layer, m, vecs, act, out, a, None)?.0)
}

/// [`matmul`] with k split into `ksplit` slices on the tensor-core kernel (more
/// workgroups for products with few output tiles and a long k): the slices' raw sums go
/// to `scratch` (at least `ksplit × T × N` f32) and a second node (`matmul_reduce`, to
/// run right after) adds them and applies the epilogue. Without cooperative matrices, or
/// with `ksplit` ≤ 1, the second node dispatches nothing.
///
/// Errors: as [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_split(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    a: &MatmulArgs,
    scratch: &wgpu::Buffer,
    ksplit: u32,
) -> Result<(Node, Node)> {
    let (node, reduce) = build(
        cx,
        op,
        layer,
        m,
        vecs,
        act,
        None,
        a,
        Some((scratch, ksplit)),
    )?;
    let reduce = match reduce {
        Some(r) => r,
        None => node.skip(),
    };
    Ok((node, reduce))
}

#[allow(clippy::too_many_arguments)]
fn build(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    out: Option<&wgpu::Buffer>,
    a: &MatmulArgs,
    split: Option<(&wgpu::Buffer, u32)>,
) -> Result<(Node, Option<Node>)> {
    if m.n_in % 32 != 0 {
        return Err(op_err(
            op,
            format!("{}: K = {} is not a multiple of 32", m.name, m.n_in),
        ));
    }
    if !gpu_native(m.dtype) {
        return Err(op_err(
            op,
            format!("{}: {} is not read by the GPU kernels", m.name, m.dtype),
        ));
    }
    let p = Params {
        k: m.n_in as u32,
        n: m.n_out as u32,
        row0: m.row0 as u32,
        row_bytes: m.row_bytes as u32,
        x_off: a.x_off as u32,
        x_stride: a.x_stride as u32,
        y_off: a.y_off as u32,
        y_stride: a.y_stride as u32,
        act: a.act as u32,
        accumulate: u32::from(a.accumulate),
        bias_off: a.bias_off.map_or(u32::MAX, |o| o as u32),
        rows_sel: u32::from(a.rows == Count::Rows),
    };
    let sep = u32::from(out.is_some());
    // Bindings 2.. : W (its range of a possibly shared buffer), vecs, act, [logits].
    let bind = |with_w4: bool| {
        let mut r = vec![
            m.binding(),
            vecs.as_entire_binding(),
            act.as_entire_binding(),
        ];
        if with_w4 {
            r.push(m.binding());
        }
        if let Some(o) = out {
            r.push(o.as_entire_binding());
        }
        r
    };
    let key = |op| PipelineKey {
        op,
        dtype: Some(m.dtype),
        spec: vec![("OUT_SEP", sep)],
    };
    let n_out = m.n_out as u32;
    let split = split.filter(|&(_, ks)| ks > 1 && cx.gpu.features.coopmat && out.is_none());
    let mut reduce = None;
    let mut node = if cx.gpu.features.coopmat {
        // Tensor cores where the adapter has them; tiles of BM tokens × BN rows.
        let (bm, bn, wm) = coop_tile(n_out, cx.gpu.limits.max_compute_workgroup_storage_size);
        let ks = split.map_or(1, |s| s.1);
        let mut k = key("matmul_coop");
        let w16 = u32::from(m.dtype == crate::DType::F16);
        k.spec.extend([
            ("BM", bm),
            ("BN", bn),
            ("WM", wm),
            ("KSPLIT", ks),
            ("W16", w16),
        ]);
        // Bindings 2.. : W, vecs, act, W as vec4s, then the logits or the k-split scratch.
        let mut res = vec![
            m.binding(),
            vecs.as_entire_binding(),
            act.as_entire_binding(),
            m.binding(),
        ];
        if let Some(o) = out {
            res.push(o.as_entire_binding());
        }
        if let Some((scratch, ks)) = split {
            res.push(scratch.as_entire_binding());
            reduce = Some(cx.node(
                "matmul_reduce",
                layer,
                &PipelineKey {
                    op: "matmul_reduce",
                    dtype: None,
                    spec: vec![("KSPLIT", ks)],
                },
                &p,
                &[scratch, vecs, act],
                Grid::Linear {
                    count: a.rows,
                    per: n_out,
                    wg_size: 256,
                },
            )?);
        }
        cx.node_bound(
            op,
            layer,
            &k,
            &p,
            res,
            Grid::Tiles {
                x: n_out.div_ceil(bn) * ks,
                count: a.rows,
                per_y: bm,
            },
        )?
    } else {
        cx.node_bound(
            op,
            layer,
            &key("matmul"),
            &p,
            bind(false),
            Grid::Tiles {
                x: n_out.div_ceil(64),
                count: a.rows,
                per_y: 64,
            },
        )?
    };
    // matvec: LANES lanes per row, each taking steps of `matvec_step(dtype)` weights.
    if a.x_off % 4 != 0 || a.x_stride % 4 != 0 {
        return Err(op_err(
            op,
            format!("{}: x offset/stride not multiples of 4", m.name),
        ));
    }
    let steps = (m.n_in / matvec_step(m.dtype)) as u32;
    // Lanes per row: enough to cover K in a few steps each; `RWKV_MV_LANES` (4–32,
    // a power of two) overrides it for tuning runs.
    let lanes = std::env::var("RWKV_MV_LANES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|l| l.is_power_of_two() && (4..=32).contains(l))
        .unwrap_or_else(|| steps.next_power_of_two().clamp(4, 32));
    let sg = cx.gpu.features.subgroup && cx.gpu.features.subgroup_min_size >= lanes;
    let small = cx.node_bound(
        op,
        layer,
        &PipelineKey {
            op: "matvec",
            dtype: Some(m.dtype),
            spec: {
                let mut s = vec![("OUT_SEP", sep), ("LANES", lanes), ("SG", u32::from(sg))];
                if m.dtype == crate::DType::Q4_K && q4k_words() {
                    s.push(("Q4V", 1));
                }
                s
            },
        },
        &p,
        bind(true),
        Grid::Tiles {
            x: n_out.div_ceil(256 / lanes),
            count: a.rows,
            per_y: 4,
        },
    )?;
    // The matrix × vector kernel reads W once per 4 tokens: for the first products of
    // the low-rank chains (few rows, in cache) that beats the tiles at every T (H100:
    // ranks 64 and 96 faster; rank 320 and the C-row second products slower).
    let max_t = if split.is_none()
        && m.n_out <= MATVEC_ALWAYS_ROWS
        && m.row_bytes * m.n_out <= MATVEC_ALWAYS_BYTES
    {
        u32::MAX
    } else {
        SMALL_T
    };
    node.small = Some(Small {
        count: a.rows,
        max: max_t,
        node: Box::new(small),
    });
    // The reduce step has nothing to do whenever the matrix × vector variant runs.
    if let Some(r) = reduce.as_mut() {
        r.small = Some(Small {
            count: a.rows,
            max: max_t,
            node: Box::new(r.skip()),
        });
    }
    Ok((node, reduce))
}

/// Whether the Q4_K decode kernel reads its nibbles as words of `w`
/// (`shaders/matvec/q4_k_words.wgsl`) instead of 16-byte loads: `RWKV_Q4K_MV=1` (tuning).
fn q4k_words() -> bool {
    std::env::var("RWKV_Q4K_MV").is_ok_and(|v| v == "1")
}

/// Tile shapes of `matmul_coop`: (BM tokens, BN rows, WM tokens per subgroup).
pub const COOP_TILES: [(u32, u32, u32); 3] = [(128, 128, 64), (64, 128, 32), (32, 64, 32)];

/// Workgroup memory of a `matmul_coop` tile in bytes: two f16 x and W tiles of stride 40
/// halves, and one 16 × 16 f32 tile per subgroup.
pub fn coop_tile_bytes((bm, bn, wm): (u32, u32, u32)) -> u32 {
    2 * (bm + bn) * 40 * 2 + (bm / wm) * (bn / 32) * 1024
}

/// The `matmul_coop` tile for `n` output rows on a device with `wg_bytes` of workgroup
/// memory. The weights are decoded once per BM tokens and each subgroup's products per
/// tile load grow with its block, so the largest tile that fits wins for the N = C and
/// N = 4C products (the 128 × 128 block with 64 × 32 per subgroup is what reached
/// 118–144 TFLOP/s on an H100 in ../shared/anchor/wgpu-coopmat-probe); 32 × 64 for the
/// low-rank products. `RWKV_COOP_TILE=BMxBN` (one of `COOP_TILES`) overrides it for
/// tuning runs.
fn coop_tile(n: u32, wg_bytes: u32) -> (u32, u32, u32) {
    let fits = |t: &&(u32, u32, u32)| coop_tile_bytes(**t) <= wg_bytes;
    let forced = std::env::var("RWKV_COOP_TILE").ok().and_then(|v| {
        let (m, n) = v.split_once('x')?;
        let (m, n): (u32, u32) = (m.parse().ok()?, n.parse().ok()?);
        COOP_TILES
            .iter()
            .filter(fits)
            .find(|t| t.0 == m && t.1 == n)
            .copied()
    });
    let small = COOP_TILES[2];
    match forced {
        Some(t) if n >= 1024 => t,
        _ if n >= 1024 => COOP_TILES[..2].iter().find(fits).copied().unwrap_or(small),
        _ => small,
    }
}

/// Slices of k for a tensor-core product of `n` rows and depth `k` (see
/// [`matmul_split`]): products with at most C ≤ 4096 rows leave an H100's SMs half idle
/// at 512 tokens; split their k so that each slice keeps ≥ 32 steps of 32 (≥ 16 for
/// the few-row low-rank products).
pub fn coop_ksplit(n: usize, k: usize) -> u32 {
    if n > 4096 {
        return 1;
    }
    // Few rows (the low-rank products): a handful of tiles, so slices of ≥ 16 steps.
    let per = if n < 1024 { 512 } else { 1024 };
    (k / per).clamp(1, 4) as u32
}

/// Weights per lane step of the `matvec` kernel for an encoding (`MV_STEP` in
/// shaders/matvec/).
pub(crate) fn matvec_step(dtype: crate::DType) -> usize {
    match dtype {
        crate::DType::Q4_K | crate::DType::Q6_K => 64,
        _ => 32,
    }
}

/// CPU reference: `y[t, r] = act(Σ_k W[r, k] x[t, k] + bias[r])` with `W` decoded to f32
/// `[N, K]`, f64 accumulation.
pub fn reference(
    w: &[f32],
    n: usize,
    k: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    act: Act,
) -> Vec<f32> {
    let t = x.len() / k;
    let mut y = vec![0f32; t * n];
    for ti in 0..t {
        for r in 0..n {
            let mut s = 0f64;
            for i in 0..k {
                s += w[r * k + i] as f64 * x[ti * k + i] as f64;
            }
            let mut v = s as f32 + bias.map_or(0.0, |b| b[r]);
            v = match act {
                Act::None => v,
                Act::Tanh => v.tanh(),
                Act::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                Act::ReluSq => v.max(0.0).powi(2),
            };
            y[ti * n + r] = v;
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::testing::*;
    use crate::ops::Dims;
    use crate::DType;

    /// `bytes` (an `[n, k]` matrix of `dtype`) in a buffer of its own.
    fn test_matrix(h: &Harness, dtype: DType, bytes: &[u8], n: usize, k: usize) -> GpuMatrix {
        GpuMatrix {
            name: format!("{dtype}"),
            buffer: buffer::storage_init(&h.gpu, "w", bytes).unwrap(),
            offset: 0,
            dtype,
            row0: 0,
            n_out: n,
            n_in: k,
            row_bytes: bytes.len() / n,
        }
    }

    /// x `[t, k]` at 0, y `[t, n]` right after it, bias at 0 of the vectors.
    fn test_args(n: usize, k: usize, t: usize, act: Act, accumulate: bool) -> MatmulArgs {
        MatmulArgs {
            x_off: 0,
            x_stride: k,
            y_off: t * k,
            y_stride: n,
            act,
            accumulate,
            bias_off: Some(0),
            rows: Count::Tokens,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        dtype: DType,
        bytes: &[u8],
        w: &[f32],
        n: usize,
        k: usize,
        t: usize,
        act: Act,
        accumulate: bool,
    ) {
        check_on(gpu(), dtype, bytes, w, n, k, t, act, accumulate);
    }

    #[allow(clippy::too_many_arguments)]
    fn check_on(
        gpu: std::sync::Arc<crate::gpu::GpuContext>,
        dtype: DType,
        bytes: &[u8],
        w: &[f32],
        n: usize,
        k: usize,
        t: usize,
        act: Act,
        accumulate: bool,
    ) {
        let h = Harness::with_gpu(
            Dims {
                n_tokens: t as u32,
                ..Default::default()
            },
            gpu,
        );
        let x = rand_vec(11 + t as u64, t * k, 1.0);
        let y0 = rand_vec(12, t * n, 1.0);
        let bias = rand_vec(13, n, 0.5);
        let mut act_host = x.clone();
        act_host.extend(&y0);
        let act_buf = h.f32_buf(&act_host);
        let m = test_matrix(&h, dtype, bytes, n, k);
        let args = test_args(n, k, t, act, accumulate);
        let bias_buf = h.f32_buf(&bias);
        let mut want = reference(w, n, k, &x, Some(&bias), act);
        if accumulate {
            want.iter_mut().zip(&y0).for_each(|(a, b)| *a += b);
        }
        // The kernel the node picks for this T, then the tiled kernel whenever T > SMALL_T
        // (small matrices take the matrix × vector kernel at every T).
        for force_tiled in [false, true] {
            let mut node = matmul(
                &h.ctx(),
                "matmul",
                None,
                &m,
                &bias_buf,
                &act_buf,
                None,
                &args,
            )
            .unwrap();
            if force_tiled {
                if let Some(small) = node.small.as_mut() {
                    small.max = SMALL_T;
                }
            }
            let tiled = std::ptr::eq(node.pick(&h.dims), &node);
            h.run(&[node]);
            let got = h.read(&act_buf, t * k, t * n);
            // Restore y for the next run (accumulate reads it).
            h.gpu
                .queue
                .write_buffer(&act_buf, (t * k * 4) as u64, bytemuck::cast_slice(&y0));
            compare(&h, dtype, w, &x, &got, &want, n, k, t, act, tiled);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn compare(
        h: &Harness,
        dtype: DType,
        w: &[f32],
        x: &[f32],
        got: &[f32],
        want: &[f32],
        n: usize,
        k: usize,
        t: usize,
        act: Act,
        tiled: bool,
    ) {
        if h.gpu.features.coopmat && tiled {
            // Tensor-core path: x and W rounded to f16 (relative 2^-11 each), f32 sums;
            // bound each output by that rounding of Σ|w·x| (the epilogues are 1-Lipschitz
            // near these values but ReLU² doubles the relative error of its input).
            for ti in 0..t {
                for r in 0..n {
                    let mag: f32 = (0..k).map(|i| (w[r * k + i] * x[ti * k + i]).abs()).sum();
                    let y = want[ti * n + r];
                    let bound = 1e-4 + 2e-3 * mag * (1.0 + 2.0 * y.abs().sqrt());
                    let e = (got[ti * n + r] - y).abs();
                    assert!(
                        e <= bound,
                        "{dtype} T={t} {act:?} [{ti},{r}]: |Δ| {e} > {bound}"
                    );
                }
            }
            return;
        }
        // Sums of 256 products of magnitude ≤ ~1 in f32 vs f64: well under 1e-3.
        let err = max_abs(got, want);
        assert!(
            err < 2e-3,
            "{dtype} T={t} {act:?} (tiled {tiled}): max |Δ| {err}"
        );
    }

    /// Every encoding the kernels read, on the fixture tensors (256 × 256, decoded by
    /// gguf-py), through both kernels (T = 1, 3: matvec; T = 70: tiled, ragged tiles).
    #[test]
    fn quantized_weights_match_cpu_reference() {
        for ty in ["Q8_0", "Q4_K", "Q5_K", "Q6_K", "BF16"] {
            let bin = std::fs::read(fixture(&format!(
                "quant/{ty}.blk.0.time_mix_key.weight.bin"
            )))
            .unwrap();
            let w = npy_f32(&fixture(&format!(
                "quant/{ty}.blk.0.time_mix_key.weight.f32.npy"
            )));
            let dtype = DType::ALL.into_iter().find(|d| d.name() == ty).unwrap();
            for t in [1, 3, 5, 8, 70] {
                check(dtype, &bin, &w, 256, 256, t, Act::None, false);
            }
        }
    }

    #[test]
    fn float_weights_epilogues_and_accumulate() {
        let (n, k) = (96, 64);
        let w = rand_vec(21, n * k, 0.3);
        let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
        let w16f: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
        for t in [1, 9] {
            check(
                DType::F32,
                bytemuck::cast_slice(&w),
                &w,
                n,
                k,
                t,
                Act::Tanh,
                false,
            );
            check(
                DType::F16,
                bytemuck::cast_slice(&w16),
                &w16f,
                n,
                k,
                t,
                Act::Sigmoid,
                false,
            );
            check(
                DType::F32,
                bytemuck::cast_slice(&w),
                &w,
                n,
                k,
                t,
                Act::ReluSq,
                true,
            );
        }
    }

    /// The matrix × vector kernel with a long K (32 lanes per row, several steps each),
    /// rows not filling the last workgroup, 1–8 tokens, with subgroup sums and without.
    #[test]
    fn matvec_long_rows_with_and_without_subgroups() {
        // K = 10240 with 2+ tokens per workgroup exceeds the staged-x capacity.
        for (n, k, ts) in [(40, 2560, &[1, 2, 4, 5, 8][..]), (24, 10240, &[1, 2][..])] {
            long_rows(n, k, ts);
        }
    }

    fn long_rows(n: usize, k: usize, ts: &[usize]) {
        let w = rand_vec(31, n * k, 0.05);
        let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
        let w16f: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
        let mut plain = (*gpu()).clone();
        plain.features.subgroup = false;
        let plain = std::sync::Arc::new(plain);
        for g in [gpu(), plain] {
            for &t in ts {
                check_on(
                    g.clone(),
                    DType::F16,
                    bytemuck::cast_slice(&w16),
                    &w16f,
                    n,
                    k,
                    t,
                    Act::None,
                    t % 2 == 0,
                );
            }
        }
    }

    /// Quantized rows of 512 (two Q4_K / Q6_K blocks), 200 rows (a ragged last tile),
    /// through matvec (T = 1, 7) and the tiled kernel (T = 130: tensor cores where the
    /// adapter has them), with the channel-mix epilogue and a residual add.
    #[test]
    fn quantized_rows_of_several_blocks() {
        let (n, k) = (200, 512);
        let w = rand_vec(41, n * k, 0.3);
        let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
        let q6: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q6_k_rtn(&w)).to_vec();
        for (dtype, bytes) in [(DType::Q4_K, q4), (DType::Q6_K, q6)] {
            let mut wd = vec![0f32; n * k];
            crate::quant::dequantize(dtype, &bytes, &mut wd).unwrap();
            for t in [1, 7, 130] {
                check(dtype, &bytes, &wd, n, k, t, Act::ReluSq, true);
                check(dtype, &bytes, &wd, n, k, t, Act::None, false);
            }
        }
    }

    /// More rows than the largest tensor-core tile (1,100: a ragged 128-row tile) and
    /// 130 / 200 tokens (ragged 128-token tiles), F16 and Q4_K, with and without the
    /// residual add: every tile shape's edges (on adapters without cooperative matrices,
    /// the plain tiled kernel's).
    #[test]
    fn large_tiles_with_ragged_edges() {
        let (n, k) = (1100, 256);
        let w = rand_vec(45, n * k, 0.3);
        let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
        let w16f: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
        let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
        let mut q4f = vec![0f32; n * k];
        crate::quant::dequantize(DType::Q4_K, &q4, &mut q4f).unwrap();
        for t in [130, 200] {
            check(
                DType::F16,
                bytemuck::cast_slice(&w16),
                &w16f,
                n,
                k,
                t,
                Act::None,
                true,
            );
            check(DType::Q4_K, &q4, &q4f, n, k, t, Act::ReluSq, false);
        }
    }

    /// The k-split tensor-core product and its reduce step (both nodes; on adapters
    /// without cooperative matrices the plain kernel and an empty reduce) against the
    /// reference, with bias, ReLU² and a residual add, 3 and 130 tokens.
    #[test]
    fn k_split_matches_reference() {
        let (n, k) = (200, 512);
        let w = rand_vec(51, n * k, 0.3);
        let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
        let mut wd = vec![0f32; n * k];
        crate::quant::dequantize(DType::Q4_K, &q4, &mut wd).unwrap();
        for t in [3usize, 130] {
            let h = Harness::new(Dims {
                n_tokens: t as u32,
                ..Default::default()
            });
            let x = rand_vec(52, t * k, 1.0);
            let y0 = rand_vec(53, t * n, 1.0);
            let bias = rand_vec(54, n, 0.5);
            let act_buf = h.f32_buf(&[x.clone(), y0.clone()].concat());
            let m = test_matrix(&h, DType::Q4_K, &q4, n, k);
            let args = test_args(n, k, t, Act::ReluSq, true);
            let scratch = buffer::storage(&h.gpu, "scratch", (4 * t * n * 4) as u64);
            let (node, reduce) = matmul_split(
                &h.ctx(),
                "split",
                None,
                &m,
                &h.f32_buf(&bias),
                &act_buf,
                &args,
                &scratch,
                4,
            )
            .unwrap();
            let tiled = std::ptr::eq(node.pick(&h.dims), &node);
            h.run(&[node, reduce]);
            let got = h.read(&act_buf, t * k, t * n);
            let mut want = reference(&wd, n, k, &x, Some(&bias), Act::ReluSq);
            want.iter_mut().zip(&y0).for_each(|(a, b)| *a += b);
            compare(
                &h,
                DType::Q4_K,
                &wd,
                &x,
                &got,
                &want,
                n,
                k,
                t,
                Act::ReluSq,
                tiled,
            );
        }
    }
}
