//! The matrix kernels (tiled / tensor-core, matrix × vector, k-split) against the CPU
//! reference.

use super::*;
use crate::gpu::buffer;
use crate::ops::testing::*;
use crate::ops::Dims;
use crate::DType;

mod q4k;

/// `bytes` (an `[n, k]` matrix of `dtype`) in a buffer of its own.
fn test_matrix(h: &Harness, dtype: DType, bytes: &[u8], n: usize, k: usize) -> GpuMatrix {
    GpuMatrix::upload(&h.gpu, format!("{dtype}"), dtype, bytes, n, k).unwrap()
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
        add_before_act: false,
        bias_off: Some(0),
        rows: Count::Tokens,
        scale: 1.0,
        lora: None,
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
    // A one-token Q4_K product with 8-bit x (`q8_pays`), or one of 2–8 tokens on the
    // 8-token kernel with 8-bit x (`wide_q8_pays`), is W times x rounded to 8 bits.
    let x_ref = match takes_8_bit_x(&h, &m, t) {
        true => q8_rounded(&x),
        false => x.clone(),
    };
    let mut want = reference(w, n, k, &x_ref, Some(&bias), act);
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

/// Whether the node of a product of `m` (no LoRA term, writing the activations) rounds x
/// to 8 bits for a pass of `t` tokens.
fn takes_8_bit_x(h: &Harness, m: &GpuMatrix, t: usize) -> bool {
    let (n, k) = (m.n_out, m.n_in);
    let q8_dtype = matches!(m.dtype, DType::Q4_K | DType::Q6_K);
    let one = q8_dtype && t == 1 && h.gpu.tuning.mv_q8 != Some(false) && k % 256 == 0;
    let always_matvec = n <= MATVEC_ALWAYS_ROWS && m.row_bytes * n <= MATVEC_ALWAYS_BYTES;
    let few = (2..=SMALL_T as usize).contains(&t)
        && !always_matvec
        && super::q8::wide_q8_pays(&h.ctx(), m, false, false).is_some();
    one || few
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

/// A one-token product with f32 x of few long rows takes 64 lanes a row
/// (`one_token_lanes`: 200 rows of 4,096 F16 weights, 512 steps), summed across two
/// subgroups of 32 or in workgroup memory, and matches the reference (and so do two
/// tokens, on the 32 lanes of `mv_lanes`).
#[test]
fn one_token_products_of_few_long_rows_take_64_lanes() {
    assert_eq!(matvec::one_token_lanes(32, 512, 200), 64);
    assert_eq!(matvec::one_token_lanes(32, 1280, 2560), 64); // 2.9B channel-mix value
    assert_eq!(matvec::one_token_lanes(32, 320, 2560), 32); // 2.9B time-mix output: 5 steps at 64
    assert_eq!(matvec::one_token_lanes(32, 320, 10240), 32); // 1,280 workgroups already
    assert_eq!(matvec::one_token_lanes(256, 2560, 64), 256); // low-rank first products
    let h = Harness::new(Dims::default());
    let m = test_matrix(&h, DType::F16, &vec![0u8; 200 * 4096 * 2], 200, 4096);
    let (spec, _) = matvec::one_token_kernel(&h.ctx(), &m, matvec::base_spec(&h.ctx(), &m, false));
    if h.gpu.tuning.mv_lanes.is_none() {
        assert_eq!(spec.lanes, 64);
    }
    long_rows(200, 4096, &[1, 2]);
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
/// reference, with bias, ReLU² and a residual add, 3 and 130 tokens: 200 rows (the small
/// tiles) and 1100 rows (the 128 × 128 tiles, full and ragged), in 4 even slices of k and
/// in 3 uneven ones.
#[test]
fn k_split_matches_reference() {
    for n in [200, 1100] {
        for ks in [3, 4] {
            k_split_case(n, ks);
        }
    }
}

fn k_split_case(n: usize, ks: u32) {
    for t in [3usize, 130] {
        split_case(n, 512, t, ks, 4 * t * n, 51, |_, _, _| {});
    }
}

/// Passes of 9–64 tokens on a product of ≥ 1024 rows and depth: on tensor cores its
/// medium variant (64-token tiles in their own k slices, with their own reduce step, also
/// where the large variant has no slices and so no reduce step of its own), against the
/// reference, with bias, ReLU² and a residual add; 40 and 64 tokens (medium) and 65 (large),
/// the large variant in 1 and in 4 slices. Elsewhere the same products through the
/// portable tiles.
#[test]
fn medium_passes_match_reference() {
    let n = 1100;
    for ks in [1u32, 4] {
        for t in [40usize, 64, 65] {
            split_case(n, 1024, t, ks, 16 * 65 * n, 61, |h, node, reduce| {
                let picked = node.pick(&h.dims);
                let medium = !std::ptr::eq(picked, node);
                if h.gpu.features.coopmat {
                    // The medium variant is the one above the matrix × vector variant.
                    let below = picked.small.as_ref().map(|s| s.max);
                    assert_eq!(medium, t as u32 <= MEDIUM_T, "T={t}");
                    assert!(!medium || below == Some(SMALL_T), "T={t}: {below:?}");
                    let r = reduce.pick(&h.dims).grid.size(&h.dims);
                    assert!(!medium || r.is_some(), "T={t}: the medium reduce step runs");
                } else {
                    assert!(!medium, "no tensor cores: the portable tiles for T={t}");
                }
            });
        }
    }
}

/// A Q4_K `[n, k]` product through [`matmul_split`] in `ks` slices at `t` tokens (a scratch
/// of `scratch_f32` values; random data from `seed`), with bias, ReLU² and a residual add,
/// against the reference; `inspect` sees its two nodes before they run.
fn split_case(
    n: usize,
    k: usize,
    t: usize,
    ks: u32,
    scratch_f32: usize,
    seed: u64,
    inspect: impl FnOnce(&Harness, &Node, &Node),
) {
    let w = rand_vec(seed, n * k, 0.3);
    let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
    let mut wd = vec![0f32; n * k];
    crate::quant::dequantize(DType::Q4_K, &q4, &mut wd).unwrap();
    let h = Harness::new(Dims {
        n_tokens: t as u32,
        ..Default::default()
    });
    let x = rand_vec(seed + 1, t * k, 1.0);
    let y0 = rand_vec(seed + 2, t * n, 1.0);
    let bias = rand_vec(seed + 3, n, 0.5);
    let act_buf = h.f32_buf(&[x.clone(), y0.clone()].concat());
    let m = test_matrix(&h, DType::Q4_K, &q4, n, k);
    let args = test_args(n, k, t, Act::ReluSq, true);
    let scratch = buffer::storage(&h.gpu, "scratch", (scratch_f32 * 4) as u64);
    let (node, reduce) = matmul_split(
        &h.ctx(),
        "split",
        None,
        &m,
        &h.f32_buf(&bias),
        &act_buf,
        &args,
        &scratch,
        ks,
    )
    .unwrap();
    inspect(&h, &node, &reduce);
    h.run(&[node, reduce]);
    let got = h.read(&act_buf, t * k, t * n);
    let x_ref = match takes_8_bit_x(&h, &m, t) {
        true => q8_rounded(&x),
        false => x.clone(),
    };
    let mut want = reference(&wd, n, k, &x_ref, Some(&bias), Act::ReluSq);
    want.iter_mut().zip(&y0).for_each(|(a, b)| *a += b);
    let tiled = t as u32 > SMALL_T;
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

/// The LoRA term `Σ_j B[n, j] h[t, j]` (f16 `B`) of the matrix × vector kernel (T = 1, 3,
/// 8) and — on tensor cores — of the tiles as extra k-steps (T = 70, with and without k
/// slices), the scale of the raw sum, and the add-before-activation mode
/// (`y = act(y + raw)`, the portable path's `B h` product) in every kernel — matrix ×
/// vector, tiled or tensor-core (T = 70), k-split with its reduce step — against
/// `act(s · (W x + B h [+ y0]) + bias) [+ y0]`, with ReLU² (the channel-mix key, whose
/// activation must see the adapted sum) and a residual add; `h` with a row stride wider
/// than its rank and `B` at an offset, as the graph lays them out.
#[test]
fn lora_term_scale_and_add_before_act() {
    let (n, k, r, hs) = (200, 256, 32, 36);
    let w = rand_vec(61, n * k, 0.3);
    let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
    let wd: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
    // (T, activation, residual add, add before act, k slices, LoRA term)
    let cases = [
        (1usize, Act::ReluSq, false, false, 1u32, true),
        (3, Act::None, true, false, 1, true),
        (8, Act::Tanh, true, false, 4, true),
        (3, Act::ReluSq, false, true, 1, false),
        (70, Act::ReluSq, false, true, 1, false),
        (70, Act::None, false, true, 4, false),
        (70, Act::Sigmoid, true, false, 4, false),
        (70, Act::ReluSq, false, false, 1, true),
        (70, Act::None, true, false, 4, true),
    ];
    for (t, act_fn, acc, before, ks, with_term) in cases {
        let h = Harness::new(Dims {
            n_tokens: t as u32,
            ..Default::default()
        });
        if with_term && t > SMALL_T as usize && !lora_in_tiles(&h.gpu) {
            continue; // the graph runs `B h` as a product of its own there
        }
        let x = rand_vec(62, t * k, 1.0);
        let y0 = rand_vec(63, t * n, 1.0);
        let hid = rand_vec(64, t * hs, 1.0);
        let b16: Vec<half::f16> = rand_vec(65, n * r, 0.5)
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect();
        let b: Vec<f32> = b16.iter().map(|v| v.to_f32()).collect();
        let bias = rand_vec(66, n, 0.5);
        let act_buf = h.f32_buf(&[x.clone(), y0.clone(), hid.clone()].concat());
        let lora_halves = [vec![half::f16::ZERO; 8], b16].concat();
        let lora_buf =
            buffer::storage_init(&h.gpu, "lora", bytemuck::cast_slice(&lora_halves)).unwrap();
        let cx = Ctx {
            lora: Some(&lora_buf),
            ..h.ctx()
        };
        let m = test_matrix(&h, DType::F16, bytemuck::cast_slice(&w16), n, k);
        let mut args = test_args(n, k, t, act_fn, acc);
        args.scale = 0.5;
        args.add_before_act = before;
        args.lora = with_term.then_some(LoraArgs {
            h_off: t * k + t * n,
            h_stride: hs,
            rank: r,
            b_off: 8,
        });
        let bias_buf = h.f32_buf(&bias);
        let scratch = buffer::storage(&h.gpu, "scratch", (4 * t * n * 4) as u64);
        let (node, reduce) = matmul_split(
            &cx, "lora", None, &m, &bias_buf, &act_buf, &args, &scratch, ks,
        )
        .unwrap();
        let tiled = std::ptr::eq(node.pick(&h.dims), &node);
        assert_eq!(tiled, t > SMALL_T as usize, "T={t}: the kernel picked");
        h.run(&[node, reduce]);
        let got = h.read(&act_buf, t * k, t * n);
        let mut want = vec![0f32; t * n];
        for ti in 0..t {
            for o in 0..n {
                let wx: f64 = (0..k)
                    .map(|i| wd[o * k + i] as f64 * x[ti * k + i] as f64)
                    .sum();
                let bh: f64 = if with_term {
                    (0..r)
                        .map(|j| b[o * r + j] as f64 * hid[ti * hs + j] as f64)
                        .sum()
                } else {
                    0.0
                };
                let old = y0[ti * n + o] as f64;
                let raw = wx + bh + if before { old } else { 0.0 };
                let v = (raw * 0.5) as f32 + bias[o];
                let v = match act_fn {
                    Act::None => v,
                    Act::Tanh => v.tanh(),
                    Act::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                    Act::ReluSq => v.max(0.0).powi(2),
                };
                want[ti * n + o] = v + if acc && !before { old as f32 } else { 0.0 };
            }
        }
        compare(&h, DType::F16, &wd, &x, &got, &want, n, k, t, act_fn, tiled);
    }
}
