//! The key's ReLU² handed to the value as 8-bit x (`LnFuse::x8`, `Q8Handoff`): the same
//! bits as the value quantizing it itself.

use super::tests::{encode, slot_ln, C, F, SLOT, SLOTS, SLOT_LEN};
use super::*;
use crate::ops::matmul::Act;
use crate::ops::testing::*;
use crate::ops::Dims;
use crate::DType;

/// The key writes its output's 8-bit x (each run's int8 words, d and d · Σ q, as the
/// CPU's quantizer makes them from the key's f32 output), and the value that reads it
/// ends with the residual and shift state bit for bit those of the value that quantizes
/// its x itself — with its f32 x overwritten by NaN first, so a value that read it, or
/// a handoff at the wrong offset, run or word, fails.
#[test]
fn key_hands_its_relu_squared_to_the_value_as_8_bit_x() {
    let (dims, meta_words) = Dims::one_token(SLOT as u32);
    let h = Harness::new(dims);
    if !h.gpu.features.subgroup || h.gpu.features.subgroup_min_size < 8 {
        eprintln!("skipped: the fused LayerNorm needs subgroups of at least 8");
        return;
    }
    let cx = h.ctx();
    let (key, _) = encode(DType::Q4_K, &rand_vec(31, F * C, 0.3), F, C, &h);
    let (value, _) = encode(DType::Q4_K, &rand_vec(32, C * F, 0.3), C, F, &h);
    assert!(ln_fuse_fits(&cx, &key, &value));
    assert!(q8_handoff_fits(&cx, &key, &value));
    let x: Vec<f32> = rand_vec(33, C, 1.0).iter().map(|v| v + 3.0).collect();
    let ln_w: Vec<f32> = rand_vec(34, C, 0.5).iter().map(|v| v + 1.0).collect();
    let ln_b = rand_vec(35, C, 0.2);
    let mix: Vec<f32> = rand_vec(36, C, 0.5).iter().map(|v| v + 0.5).collect();
    let vecs: Vec<f32> = [ln_w, ln_b, mix].concat();
    let state0 = rand_vec(37, SLOTS * SLOT_LEN, 1.0);
    let (stats, x8) = (C + F, C + F + 4);
    let words = F / 4;

    // Residual and shift state after key + value, with and without the handoff.
    let run = |handoff: bool| {
        let mut act = x.clone();
        act.resize(x8 + words + F / 16, 0.0);
        let (act_buf, vec_buf) = (h.f32_buf(&act), h.f32_buf(&vecs));
        let state = h.f32_buf(&state0);
        let meta = h.u32_buf(&meta_words);
        let ln = slot_ln(&meta, &state, C, 2 * C, stats, handoff.then_some(x8));
        let ka = MatmulArgs::dense(0, C, C, F, Act::ReluSq, false, None);
        let va = MatmulArgs::dense(C, F, 0, C, Act::None, true, None);
        let node = |m, a, end| matvec_ln(&cx, "p", None, m, &vec_buf, &act_buf, a, &ln, end, None);
        h.run(&[node(&key, &ka, LnEnd::In).unwrap()]);
        if handoff {
            // What the key wrote: each run of its f32 output quantized as the value's
            // own prologue quantizes it.
            let hk = h.read(&act_buf, C, F);
            let got = h.read(&act_buf, x8, words + F / 16);
            for (run, (d, q)) in q8_form(&hk).into_iter().enumerate() {
                for (j, four) in q.chunks(4).enumerate() {
                    let word = got[8 * run + j].to_bits().to_le_bytes();
                    // pack4x8snorm may round a half the other way: one level at most.
                    for (b, (&g, &w)) in word.iter().zip(four).enumerate() {
                        let g = g as i8;
                        assert!(
                            (i32::from(g) - i32::from(w)).abs() <= 1,
                            "run {run} word {j} byte {b}: {g} vs {w}"
                        );
                    }
                }
                let (gd, gsq) = (got[words + 2 * run], got[words + 2 * run + 1]);
                // (GPU division: within 2.5 ulp.)
                assert!((gd - d).abs() <= d * 1e-6, "run {run}: d {gd} vs {d}");
                let sq: i32 = q.iter().map(|&v| i32::from(v)).sum();
                assert!(
                    (gsq - d * sq as f32).abs() <= d * 4.0,
                    "run {run}: d · Σ q {gsq} vs {}",
                    d * sq as f32
                );
            }
            assert!(hk.iter().any(|&v| v > 0.0), "a key with some positive rows");
            // The value must not read its f32 x.
            let nan = vec![f32::NAN; F];
            h.gpu
                .queue
                .write_buffer(&act_buf, (C * 4) as u64, bytemuck::cast_slice(&nan));
        }
        h.run(&[node(&value, &va, LnEnd::Out).unwrap()]);
        let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
        (
            bits(h.read(&act_buf, 0, C)),
            bits(h.read(&state, 0, state0.len())),
        )
    };
    let (x_own, state_own) = run(false);
    let (x_handed, state_handed) = run(true);
    assert_eq!(x_handed, x_own, "the residual");
    assert_eq!(state_handed, state_own, "the shift state");
}

/// A handoff the products cannot take is refused, not run: a value without the 64-value
/// Q4_K step (F16), and no fit where the knob is off.
#[test]
fn no_handoff_where_the_value_cannot_read_it() {
    let h = Harness::new(Dims::default());
    if !h.gpu.features.subgroup || h.gpu.features.subgroup_min_size < 8 {
        eprintln!("skipped: the fused LayerNorm needs subgroups of at least 8");
        return;
    }
    let cx = h.ctx();
    let (key, _) = encode(DType::Q4_K, &rand_vec(41, F * C, 0.3), F, C, &h);
    let (f16, _) = encode(DType::F16, &rand_vec(42, C * F, 0.3), C, F, &h);
    assert!(!q8_handoff_fits(&cx, &key, &f16));
    let (act_buf, vec_buf) = (h.f32_buf(&vec![0.0; 2 * F]), h.f32_buf(&vec![0.0; 3 * C]));
    let meta = h.u32_buf(&[0; 8]);
    let state = h.f32_buf(&vec![0.0; SLOTS * SLOT_LEN]);
    let ln = slot_ln(&meta, &state, C, 2 * C, C + F, Some(C + F + 4));
    let va = MatmulArgs::dense(C, F, 0, C, Act::None, true, None);
    let n = matvec_ln(
        &cx,
        "v",
        None,
        &f16,
        &vec_buf,
        &act_buf,
        &va,
        &ln,
        LnEnd::Out,
        None,
    );
    assert!(n.is_err(), "an F16 value reading 8-bit x");
    let mut off = (*gpu()).clone();
    off.tuning.q8_handoff = false;
    let h2 = Harness::with_gpu(Dims::default(), std::sync::Arc::new(off));
    let (key2, _) = encode(DType::Q4_K, &rand_vec(41, F * C, 0.3), F, C, &h2);
    let (value2, _) = encode(DType::Q4_K, &rand_vec(43, C * F, 0.3), C, F, &h2);
    assert!(!q8_handoff_fits(&h2.ctx(), &key2, &value2));
}
