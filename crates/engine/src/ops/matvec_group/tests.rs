//! `matvec_group` against separate products and the CPU reference.

#![cfg(test)]

use super::*;
use crate::gpu::buffer;
use crate::ops::matmul::{reference, Act};
use crate::ops::testing::*;
use crate::ops::Dims;
use crate::DType;

/// Three matrices (F16, F32, F16 — or F32, F16, F16: the group's first encoding F32)
/// of different shapes at aligned offsets of one buffer and two F16 matrices in a
/// second buffer (an adapter's `A`), with their own inputs, outputs, biases and
/// epilogues, for 1 and 3 tokens; with subgroup sums and without.
#[test]
fn matches_separate_products() {
    let mut plain = (*gpu()).clone();
    plain.features.subgroup = false;
    for g in [gpu(), std::sync::Arc::new(plain)] {
        for t in [1, 3] {
            for f32_at in [1, 0] {
                check(g.clone(), t, f32_at);
            }
        }
    }
}

/// The group above with matrix `f32_at` of the first buffer in F32.
fn check(gpu: std::sync::Arc<crate::gpu::GpuContext>, t: usize, f32_at: usize) {
    let h = Harness::with_gpu(
        Dims {
            n_tokens: t as u32,
            ..Default::default()
        },
        gpu,
    );
    // (rows, K, activation, buffer)
    let shapes = [
        (96usize, 256usize, Act::Tanh, 0),
        (40, 64, Act::Sigmoid, 0),
        (320, 256, Act::None, 0),
        (64, 256, Act::None, 1),
        (32, 128, Act::None, 1),
    ];
    let mut bytes = [Vec::new(), Vec::new()];
    let mut mats = Vec::new();
    let mut ws = Vec::new();
    // One matrix in F32 beside F16 ones (llama.cpp keeps the decay LoRA F32).
    for (i, &(n, k, _, bi)) in shapes.iter().enumerate() {
        let w = rand_vec(90 + i as u64, n * k, 0.2);
        let b = &mut bytes[bi];
        // The second buffer's matrices start past offset 0, as in an adapter's buffer.
        b.resize(b.len().next_multiple_of(256) + 256 * bi, 0);
        if i == f32_at {
            mats.push((b.len() as u64, n, k, DType::F32, bi));
            b.extend_from_slice(bytemuck::cast_slice(&w));
            ws.push(w);
        } else {
            let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            ws.push(w16.iter().map(|v| v.to_f32()).collect::<Vec<f32>>());
            mats.push((b.len() as u64, n, k, DType::F16, bi));
            b.extend_from_slice(bytemuck::cast_slice(&w16));
        }
    }
    let bufs = [0, 1].map(|i| buffer::storage_init(&h.gpu, "group", &bytes[i]).unwrap());
    let gm: Vec<GpuMatrix> = mats
        .iter()
        .map(|&(offset, n, k, dtype, bi)| GpuMatrix {
            name: format!("m{offset}"),
            buffer: bufs[bi].clone(),
            offset,
            dtype,
            row0: 0,
            n_out: n,
            n_in: k,
            row_bytes: if dtype == DType::F32 { 4 * k } else { 2 * k },
        })
        .collect();
    // act: x_i [t, k_i] then y_i [t, n_i]
    let mut act = Vec::new();
    let mut xs = Vec::new();
    let mut args = Vec::new();
    let bias = rand_vec(99, 512, 0.5);
    for (i, &(n, k, a, _)) in shapes.iter().enumerate() {
        let x = rand_vec(95 + i as u64, t * k, 1.0);
        let x_off = act.len();
        act.extend(&x);
        xs.push(x);
        args.push((x_off, n, k, a));
    }
    let mut margs = Vec::new();
    for (i, &(x_off, n, k, a)) in args.iter().enumerate() {
        let y_off = act.len();
        act.extend(vec![0.0; t * n]);
        margs.push(MatmulArgs {
            x_off,
            x_stride: k,
            y_off,
            y_stride: n,
            act: a,
            accumulate: false,
            add_before_act: false,
            bias_off: (i == 1).then_some(0),
            rows: Count::Tokens,
            scale: if i == 3 { 0.5 } else { 1.0 },
            lora: None,
        });
    }
    let act_buf = h.f32_buf(&act);
    let segs: Vec<(&GpuMatrix, MatmulArgs)> = gm.iter().zip(margs.iter().copied()).collect();
    let node = matvec_group(&h.ctx(), "group", None, &segs, &h.f32_buf(&bias), &act_buf).unwrap();
    h.run(&[node]);
    for (i, &(n, k, a, _)) in shapes.iter().enumerate() {
        let got = h.read(&act_buf, margs[i].y_off, t * n);
        let b = (i == 1).then(|| &bias[..n]);
        let mut want = reference(&ws[i], n, k, &xs[i], b, a);
        if i == 3 {
            want.iter_mut().for_each(|v| *v *= 0.5);
        }
        let err = max_abs(&got, &want);
        assert!(
            err < 2e-3,
            "segment {i} T={t} F32 at {f32_at}: max |Δ| {err}"
        );
    }
}

/// Three Q4_K matrices in one buffer (r, k and v of a decode step: 300, 200 and 40
/// rows, the last workgroups part-filled) at every T of 1–8 — the 8-token kernel
/// (`shaders/matvec_group/wide.wgsl`) with 8-bit x (`q4_k_q8_wide_step.wgsl`, against W
/// times x rounded to 8 bits) with subgroup sums and the workgroup-memory tree, with f32 x
/// (`RWKV_MV_WIDE_Q8=0`, also with 64 and 128 lanes a row), and the 4-token kernel
/// (`RWKV_MV_WIDE=0`); at T = 1 the one-token kernel
/// with 8-bit x (against W times x rounded to 8 bits: `q8_rounded`) and with f32 x
/// (`RWKV_MV_Q8=0`) — with a bias and an epilogue.
#[test]
fn q4k_group_every_small_t() {
    let mut gpus = Vec::new();
    for (wide, subgroup, q8, wide_q8, wide_lanes, lanes) in [
        (true, true, true, true, None, None),
        (true, false, true, true, None, None),
        (true, true, true, false, None, None),
        (false, true, false, false, None, None),
        // Rows wider than a subgroup (f32 x; `wide_sum_sg32.wgsl` on 32-wide subgroups).
        (true, true, false, false, Some(128), None),
        (true, false, false, false, Some(64), None),
        // 8 lanes a row: one-token 8-bit x from the subgroup prologue
        // (`q4_k_q8_x_sg.wgsl`) on subgroups of 8 (lavapipe) as on 32.
        (true, true, true, true, None, Some(8)),
    ] {
        let mut g = (*gpu()).clone();
        g.tuning.mv_lanes = lanes;
        g.tuning.mv_wide_lanes = wide_lanes;
        g.tuning.mv_wide = wide;
        g.tuning.mv_q8 = Some(q8);
        g.tuning.mv_wide_q8 = wide_q8;
        g.features.subgroup &= subgroup;
        gpus.push(std::sync::Arc::new(g));
    }
    let shapes = [(300usize, Act::None), (200, Act::Tanh), (40, Act::Sigmoid)];
    let k = 512;
    let mut bytes = Vec::new();
    let mut ws = Vec::new();
    let mut offsets = Vec::new();
    for (i, &(n, _)) in shapes.iter().enumerate() {
        let w = rand_vec(70 + i as u64, n * k, 0.2);
        let q: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
        let mut wd = vec![0f32; n * k];
        crate::quant::dequantize(DType::Q4_K, &q, &mut wd).unwrap();
        bytes.resize(bytes.len().next_multiple_of(256), 0);
        offsets.push(bytes.len() as u64);
        bytes.extend_from_slice(&q);
        ws.push(wd);
    }
    for g in gpus {
        for t in 1..=8 {
            let h = Harness::with_gpu(
                Dims {
                    n_tokens: t as u32,
                    ..Default::default()
                },
                g.clone(),
            );
            let buf = buffer::storage_init(&h.gpu, "group", &bytes).unwrap();
            let x = rand_vec(80 + t as u64, t * k, 1.0);
            let mut act = x.clone();
            // One token with 8-bit x, or 2–8 on the 8-token kernel with 8-bit x: W times x
            // rounded to 8 bits.
            let tn = &g.tuning;
            let q8 = tn.mv_q8 != Some(false) && (t == 1 || (tn.mv_wide && tn.mv_wide_q8));
            let x_ref = match q8 {
                true => q8_rounded(&x),
                false => x.clone(),
            };
            let bias = rand_vec(81, 300, 0.5);
            let mut gm = Vec::new();
            let mut margs = Vec::new();
            for (i, &(n, a)) in shapes.iter().enumerate() {
                gm.push(GpuMatrix {
                    name: format!("q{i}"),
                    buffer: buf.clone(),
                    offset: offsets[i],
                    dtype: DType::Q4_K,
                    row0: 0,
                    n_out: n,
                    n_in: k,
                    row_bytes: k / 256 * 144,
                });
                margs.push(MatmulArgs {
                    x_off: 0,
                    x_stride: k,
                    y_off: act.len(),
                    y_stride: n,
                    act: a,
                    accumulate: false,
                    add_before_act: false,
                    bias_off: (i == 1).then_some(0),
                    rows: Count::Tokens,
                    scale: 1.0,
                    lora: None,
                });
                act.extend(vec![0.0; t * n]);
            }
            let act_buf = h.f32_buf(&act);
            let segs: Vec<(&GpuMatrix, MatmulArgs)> =
                gm.iter().zip(margs.iter().copied()).collect();
            let node =
                matvec_group(&h.ctx(), "group", None, &segs, &h.f32_buf(&bias), &act_buf).unwrap();
            h.run(&[node]);
            for (i, &(n, a)) in shapes.iter().enumerate() {
                let got = h.read(&act_buf, margs[i].y_off, t * n);
                let b = (i == 1).then(|| &bias[..n]);
                let want = reference(&ws[i], n, k, &x_ref, b, a);
                let err = max_abs(&got, &want);
                assert!(err < 2e-3, "segment {i} T={t}: max |Δ| {err}");
            }
        }
    }
}

/// Matrices of a third buffer, or a second buffer that is not F16, or Q4_K blocks off a
/// 16-byte boundary, are refused.
#[test]
fn refuses_what_it_cannot_group() {
    let h = Harness::new(Dims::default());
    let m = |dtype: DType, tag: &str| GpuMatrix {
        name: tag.to_string(),
        buffer: buffer::storage(&h.gpu, tag, 4096),
        offset: 0,
        dtype,
        row0: 0,
        n_out: 4,
        n_in: 256,
        row_bytes: if dtype == DType::F32 { 1024 } else { 512 },
    };
    let (a, b, c, d) = (
        m(DType::F16, "a"),
        m(DType::F16, "b"),
        m(DType::F16, "c"),
        m(DType::F32, "d"),
    );
    assert!(groupable(&[&a, &b], u64::MAX));
    assert!(!groupable(&[&a, &b, &c], u64::MAX));
    assert!(!groupable(&[&a, &d], u64::MAX));
    assert!(!groupable(&[&a; MAX_SEGS + 1], u64::MAX));
    assert!(groupable(&[&a; MAX_SEGS], u64::MAX));
    // Q4_K matrices (rows of 144 bytes) in one buffer: the second on a 16-byte boundary,
    // or 8 bytes past one (a file whose tensors are only 8-byte aligned). Every one-token
    // Q4_K step reads a block as vec4s (shaders/matvec/q4_k_pair.wgsl).
    let qbuf = buffer::storage(&h.gpu, "q", 4096);
    let q = |offset: u64| GpuMatrix {
        name: format!("q{offset}"),
        buffer: qbuf.clone(),
        offset,
        dtype: DType::Q4_K,
        row0: 0,
        n_out: 4,
        n_in: 256,
        row_bytes: 144,
    };
    assert!(groupable(&[&q(0), &q(1024)], u64::MAX));
    assert!(!groupable(&[&q(0), &q(1032)], u64::MAX));
}

/// Q4_K matrices with F16 ones of a second buffer in one group (the one-token
/// `att.lora1+rkv` dispatch: r, k, v beside the low-rank chains' first products).
mod mixed;
