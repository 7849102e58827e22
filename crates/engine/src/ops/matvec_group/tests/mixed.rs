//! A one-token group of Q4_K matrices (the group's buffer) and F16 ones (a second
//! buffer): the Q4_K segments take 8-bit x (W times x rounded to 8 bits), the F16 ones
//! f32 x, each its own input, output and epilogue.

use super::*;

#[test]
fn q4k_beside_f16_of_a_second_buffer_one_token() {
    // (rows, K, activation, buffer)
    let shapes = [
        (300usize, 512usize, Act::None, 0),
        (200, 512, Act::Tanh, 0),
        (96, 512, Act::Tanh, 1),
        (40, 256, Act::Sigmoid, 1),
    ];
    let mut bytes = [Vec::new(), Vec::new()];
    let mut ws = Vec::new();
    let mut mats = Vec::new();
    for (i, &(n, k, _, bi)) in shapes.iter().enumerate() {
        let w = rand_vec(120 + i as u64, n * k, 0.2);
        let b = &mut bytes[bi];
        b.resize(b.len().next_multiple_of(256) + 256 * bi, 0);
        let off = b.len() as u64;
        if bi == 0 {
            let q: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
            let mut wd = vec![0f32; n * k];
            crate::quant::dequantize(DType::Q4_K, &q, &mut wd).unwrap();
            b.extend_from_slice(&q);
            ws.push(wd);
            mats.push((off, n, k, DType::Q4_K, bi, k / 256 * 144));
        } else {
            let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            b.extend_from_slice(bytemuck::cast_slice(&w16));
            ws.push(w16.iter().map(|v| v.to_f32()).collect());
            mats.push((off, n, k, DType::F16, bi, 2 * k));
        }
    }
    // Subgroup sums with 8 lanes a row (the subgroup prologue) and by default, the tree,
    // and f32 x throughout (`RWKV_MV_Q8=0`); the Q4_K steps a sub-block pair (64 values)
    // or 16 values (`RWKV_MV_Q8_PAIR=0`).
    for (subgroup, lanes, q8, pair) in [
        (true, Some(8), true, true),
        (true, None, true, true),
        (false, None, true, true),
        (true, None, true, false),
        (true, None, false, true),
    ] {
        let mut g = (*gpu()).clone();
        g.features.subgroup &= subgroup;
        g.tuning.mv_lanes = lanes;
        g.tuning.mv_q8 = Some(q8);
        g.tuning.mv_q8_pair = pair;
        let h = Harness::with_gpu(
            Dims {
                n_tokens: 1,
                ..Default::default()
            },
            std::sync::Arc::new(g),
        );
        let bufs = [0, 1].map(|i| buffer::storage_init(&h.gpu, "mixed", &bytes[i]).unwrap());
        let gm: Vec<GpuMatrix> = mats
            .iter()
            .map(|&(offset, n, k, dtype, bi, row_bytes)| GpuMatrix {
                name: format!("m{bi}.{offset}"),
                buffer: bufs[bi].clone(),
                offset,
                dtype,
                row0: 0,
                n_out: n,
                n_in: k,
                row_bytes,
            })
            .collect();
        let mut act = Vec::new();
        let mut xs = Vec::new();
        let mut margs = Vec::new();
        for (i, &(n, k, a, _)) in shapes.iter().enumerate() {
            let x = rand_vec(130 + i as u64, k, 1.0);
            let x_off = act.len();
            act.extend(&x);
            act.extend(vec![0.0; n.next_multiple_of(4)]);
            xs.push(x);
            margs.push(MatmulArgs {
                x_off,
                x_stride: k,
                y_off: x_off + k,
                y_stride: n,
                act: a,
                accumulate: false,
                add_before_act: false,
                bias_off: (i == 1).then_some(0),
                rows: Count::Tokens,
                scale: 1.0,
                lora: None,
            });
        }
        let bias = rand_vec(131, 512, 0.5);
        let act_buf = h.f32_buf(&act);
        let segs: Vec<(&GpuMatrix, MatmulArgs)> = gm.iter().zip(margs.iter().copied()).collect();
        let node =
            matvec_group_one_token(&h.ctx(), "mixed", None, &segs, &h.f32_buf(&bias), &act_buf)
                .unwrap();
        h.run(&[node]);
        for (i, &(n, k, a, bi)) in shapes.iter().enumerate() {
            let got = h.read(&act_buf, margs[i].y_off, n);
            let x = match bi == 0 && q8 {
                true => q8_rounded(&xs[i]),
                false => xs[i].clone(),
            };
            let b = (i == 1).then(|| &bias[..n]);
            let want = reference(&ws[i], n, k, &x, b, a);
            let err = max_abs(&got, &want);
            assert!(
                err < 2e-3,
                "segment {i} (subgroups {subgroup}, lanes {lanes:?}, 8-bit x {q8}, pair {pair}): max |Δ| {err}"
            );
        }
    }
}
