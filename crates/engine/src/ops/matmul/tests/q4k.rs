//! The Q4_K / Q6_K decode kernels of their own: the 8-token kernel of 2–8-token passes and the
//! one-token kernel with 8-bit x, through the checks of the parent module.

use super::*;

/// The 8-token Q4_K kernels at every T of 2–8 on the shapes that take them (300 rows of
/// depth 8,192: a last workgroup holding rows past the matrix, and for the 8-bit kernel
/// several depth chunks on lavapipe's workgroup memory; 8,200 rows of depth 256), with and
/// without the residual add: with f32 x (`shaders/matvec/q4_k_wide.wgsl`, `RWKV_MV_WIDE_Q8=0`;
/// lanes by shape) and with 8-bit x (`q4_k_q8_wide_step.wgsl`, `RWKV_MV_WIDE_Q8=1`;
/// against W times x rounded to 8 bits), their row sums through subgroup shuffles (8 lanes a row,
/// which a subgroup of lavapipe holds; 32 on a GPU of 32-wide subgroups) and through the
/// workgroup-memory tree (32 lanes, subgroups off), with f32 x also 64–256 lanes a row
/// (`RWKV_MV_WIDE_LANES`: shuffles then workgroup memory on 32-wide subgroups, the tree
/// here), and the 4-token kernel they replace
/// (`RWKV_MV_WIDE=0`) on the same data.
#[test]
fn q4k_wide_matvec_every_small_t() {
    let (n, k) = (300, 8192);
    let w = rand_vec(47, n * k, 0.05);
    let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
    let mut wd = vec![0f32; n * k];
    crate::quant::dequantize(DType::Q4_K, &q4, &mut wd).unwrap();
    let mut variants = Vec::new();
    for (lanes, wide, wide_q8, subgroup) in [
        (Some(8), true, false, true),
        (Some(32), true, false, true),
        (Some(32), true, false, false),
        (None, true, true, true),
        (Some(8), true, true, true),
        (Some(32), true, true, false),
        (Some(32), false, true, true),
        // Rows wider than a subgroup (f32 x): shuffles then workgroup memory on 32-wide
        // subgroups (`wide_sum_sg32.wgsl`), the tree on lavapipe's and without subgroups.
        (Some(64), true, false, true),
        (Some(128), true, false, false),
        (Some(256), true, false, true),
    ] {
        let mut g = (*gpu()).clone();
        g.tuning.mv_lanes = lanes.filter(|&l| l <= 32);
        g.tuning.mv_wide_lanes = lanes.filter(|&l| l > 32);
        g.tuning.mv_wide = wide;
        g.tuning.mv_wide_q8 = wide_q8;
        g.features.subgroup &= subgroup;
        variants.push(std::sync::Arc::new(g));
    }
    for g in &variants {
        for t in 2..=8 {
            check_on(
                g.clone(),
                DType::Q4_K,
                &q4,
                &wd,
                n,
                k,
                t,
                Act::None,
                t % 2 == 1,
            );
        }
    }
    // Many rows of a short depth (the channel-mix key's side).
    let (n, k) = (8200, 256);
    let w = rand_vec(48, n * k, 0.05);
    let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
    let mut wd = vec![0f32; n * k];
    crate::quant::dequantize(DType::Q4_K, &q4, &mut wd).unwrap();
    for g in variants[..6].iter().chain(&variants[7..]) {
        for t in [2, 5, 8] {
            check_on(
                g.clone(),
                DType::Q4_K,
                &q4,
                &wd,
                n,
                k,
                t,
                Act::ReluSq,
                t == 5,
            );
        }
    }
}

/// One-token Q4_K products with 8-bit x (`shaders/matvec/q4_k_q8.wgsl`) at the depths of
/// a 2.9B model (2,560 and 10,240; 300 rows: a ragged last workgroup), with the residual
/// add and the ReLU² epilogue, a run of 32 zeros in x (d = 0), row sums through subgroup
/// shuffles and through the workgroup-memory tree, 1, 2, 4 and 8 rows a lane group
/// (`RWKV_MV_ROWS`), 16- and 64-value steps (`RWKV_MV_Q8_PAIR`); against the f64 reference of W times x
/// rounded to 8 bits (`q8_rounded`), and against the f32-x kernel (`RWKV_MV_Q8=0`) on the
/// same data, which must differ (the 8-bit kernel really ran).
#[test]
fn q4k_matvec_8_bit_x() {
    for k in [2560usize, 10240] {
        let n = 300;
        let w = rand_vec(51, n * k, 0.05);
        let q4: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
        let mut wd = vec![0f32; n * k];
        crate::quant::dequantize(DType::Q4_K, &q4, &mut wd).unwrap();
        let mut outs = Vec::new();
        for (lanes, subgroup, q8, rows, pair) in [
            (Some(32), true, true, None, false),
            (Some(32), false, true, Some(4), false),
            (Some(8), true, true, Some(8), false),
            (Some(32), true, true, Some(2), false),
            (Some(32), true, false, None, false),
            (None, true, true, None, true),
            (Some(8), false, true, Some(2), true),
            (Some(32), true, true, Some(1), true),
        ] {
            let mut g = (*gpu()).clone();
            g.tuning.mv_lanes = lanes;
            g.tuning.mv_q8 = Some(q8);
            g.tuning.mv_rows = rows;
            g.tuning.mv_q8_pair = pair;
            g.features.subgroup &= subgroup;
            let g = std::sync::Arc::new(g);
            check_on(g.clone(), DType::Q4_K, &q4, &wd, n, k, 1, Act::ReluSq, true);
            check_on(g.clone(), DType::Q4_K, &q4, &wd, n, k, 1, Act::None, false);
            outs.push(one_token_output(g, &q4, &wd, n, k));
        }
        let (q8, f32x) = (&outs[0], &outs[4]);
        assert!(
            max_abs(q8, f32x) > 0.0,
            "k={k}: the 8-bit kernel gave the f32 kernel's bits"
        );
        assert_eq!(outs[0].len(), n);
    }
}

/// `y = W x` of one token through the node's one-token kernel, x with a run of 32 zeros,
/// checked against the reference (`compare`).
fn one_token_output(
    gpu: std::sync::Arc<crate::gpu::GpuContext>,
    q4: &[u8],
    wd: &[f32],
    n: usize,
    k: usize,
) -> Vec<f32> {
    one_token_output_of(gpu, DType::Q4_K, q4, wd, n, k)
}

/// [`one_token_output`] for weights `bytes` of `dtype`.
fn one_token_output_of(
    gpu: std::sync::Arc<crate::gpu::GpuContext>,
    dtype: DType,
    bytes: &[u8],
    wd: &[f32],
    n: usize,
    k: usize,
) -> Vec<f32> {
    let h = Harness::with_gpu(
        Dims {
            n_tokens: 1,
            ..Default::default()
        },
        gpu,
    );
    let mut x = rand_vec(52, k, 1.0);
    x[64..96].fill(0.0);
    let mut host = x.clone();
    host.extend(vec![0f32; n]);
    let act_buf = h.f32_buf(&host);
    let m = test_matrix(&h, dtype, bytes, n, k);
    let bias_buf = h.f32_buf(&vec![0f32; n]);
    let args = test_args(n, k, 1, Act::None, false);
    let node = matmul(
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
    h.run(&[node]);
    let got = h.read(&act_buf, k, n);
    let x_ref = match h.gpu.tuning.mv_q8 != Some(false) {
        true => q8_rounded(&x),
        false => x.clone(),
    };
    let want = reference(wd, n, k, &x_ref, None, Act::None);
    compare(&h, dtype, wd, &x, &got, &want, n, k, 1, Act::None, false);
    got
}

/// One-token Q6_K products with 8-bit x (`shaders/matvec/q6_k_q8.wgsl`) at the depths of a
/// 2.9B model (300 rows: a ragged last workgroup), with the residual add and the ReLU²
/// epilogue, row sums through subgroup shuffles and the workgroup-memory tree, 1 and 2 rows
/// a lane group; against the f64 reference of W times x rounded to 8 bits, and against the
/// f32-x kernel (`RWKV_MV_Q8=0`), which must differ (the 8-bit kernel really ran).
#[test]
fn q6k_matvec_8_bit_x() {
    for k in [2560usize, 10240] {
        let n = 300;
        let w = rand_vec(53, n * k, 0.05);
        let q6: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q6_k_rtn(&w)).to_vec();
        let mut wd = vec![0f32; n * k];
        crate::quant::dequantize(DType::Q6_K, &q6, &mut wd).unwrap();
        let mut outs = Vec::new();
        for (lanes, subgroup, q8, rows) in [
            (None, true, true, None),
            (Some(32), false, true, Some(2)),
            (Some(8), true, true, Some(1)),
            (None, true, false, None),
        ] {
            let mut g = (*gpu()).clone();
            g.tuning.mv_lanes = lanes;
            g.tuning.mv_q8 = Some(q8);
            g.tuning.mv_rows = rows;
            g.features.subgroup &= subgroup;
            let g = std::sync::Arc::new(g);
            check_on(g.clone(), DType::Q6_K, &q6, &wd, n, k, 1, Act::ReluSq, true);
            check_on(g.clone(), DType::Q6_K, &q6, &wd, n, k, 1, Act::None, false);
            outs.push(one_token_output_of(g, DType::Q6_K, &q6, &wd, n, k));
        }
        assert!(
            max_abs(&outs[0], &outs[3]) > 0.0,
            "k={k}: the 8-bit kernel gave the f32 kernel's bits"
        );
    }
}

/// Lanes a row of the 8-token kernel with f32 x by shape: the choices measured best on an
/// H200 at T = 8 (2560 × 2560 → 64, 10240 × 2560 → 32, 2560 × 10240 → 128, the r/k/v group's
/// 7,680 rows of depth 2,560 → 64), at least two steps a lane on short rows, and the knobs
/// over it (`RWKV_MV_WIDE_LANES` first, then `RWKV_MV_LANES`).
#[test]
fn wide_lanes_follow_the_shape() {
    use super::super::matvec::wide_lanes;
    let t = crate::gpu::Tuning::default();
    assert_eq!(wide_lanes(&t, 160, 2560), 64);
    assert_eq!(wide_lanes(&t, 160, 10240), 32);
    assert_eq!(wide_lanes(&t, 640, 2560), 128);
    assert_eq!(wide_lanes(&t, 160, 7680), 64);
    assert_eq!(wide_lanes(&t, 48, 768), 16);
    assert_eq!(wide_lanes(&t, 2, 40), 4);
    assert_eq!(wide_lanes(&t, 4096, 64), 256);
    let t = crate::gpu::Tuning {
        mv_lanes: Some(8),
        ..Default::default()
    };
    assert_eq!(wide_lanes(&t, 160, 2560), 8);
    let t = crate::gpu::Tuning {
        mv_wide_lanes: Some(128),
        ..t
    };
    assert_eq!(wide_lanes(&t, 160, 2560), 128);
}
