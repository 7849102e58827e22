//! The fused LayerNorm + token shift against the CPU: the key's prologue and the value's
//! save of the shift state, one token of a sequence in state slot 2 of 3.

use super::*;
use crate::ops::matmul::Act;
use crate::ops::testing::*;
use crate::ops::Dims;
use crate::DType;

const C: usize = 256;
const F: usize = 1024;
const SLOT: usize = 2;
const SLOTS: usize = 3;
const SLOT_LEN: usize = C + 8;
const STATE_OFF: usize = 4;

/// `bytes` of `[n, k]` `dtype` values from `w`, and the values the GPU sees.
fn encode(dtype: DType, w: &[f32], n: usize, k: usize, h: &Harness) -> (GpuMatrix, Vec<f32>) {
    let bytes: Vec<u8> = match dtype {
        DType::Q4_K => bytemuck::cast_slice(&crate::quant::quantize_q4_k(w)).to_vec(),
        _ => bytemuck::cast_slice(&crate::quant::quantize_f16(w)).to_vec(),
    };
    let wd = crate::quant::dequantize_to_vec(dtype, &bytes, n * k).unwrap();
    let m = GpuMatrix::upload(&h.gpu, format!("{dtype}"), dtype, &bytes, n, k).unwrap();
    (m, wd)
}

/// `y[r] = Σ_i w[r, i] x[i]`.
fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

/// The key reads `xn + (prev − xn) · mix` of the residual (8-bit), never writes the
/// shift state, and leaves the row's (mean, rstd); the value adds `Wv h` to the residual
/// and saves xn in the token's slot only. A prologue that read another slot, another
/// mix or no LayerNorm, or a save that missed the slot or used the added residual, fails
/// by far more than the 8-bit tolerance.
#[test]
fn key_makes_its_lerp_and_value_saves_the_shift_state() {
    let h = Harness::new(Dims {
        n_tokens: 1,
        n_seqs: 1,
        off_tok_seq: 1,
        off_tok_pos: 2,
        off_seqs: 4,
        ..Default::default()
    });
    if !h.gpu.features.subgroup {
        eprintln!("skipped: the fused LayerNorm needs subgroups");
        return;
    }
    for value_dtype in [DType::Q4_K, DType::F16] {
        run(&h, value_dtype);
    }
}

fn run(h: &Harness, value_dtype: DType) {
    let cx = h.ctx();
    let (key, wk) = encode(DType::Q4_K, &rand_vec(1, F * C, 0.3), F, C, h);
    let (value, wv) = encode(value_dtype, &rand_vec(2, C * F, 0.3), C, F, h);
    assert!(ln_fuse_fits(&cx, &key, &value));
    // The residual (off-centre, as LayerNorm inputs are), the LayerNorm, the mix.
    let x: Vec<f32> = rand_vec(3, C, 1.0).iter().map(|v| v + 3.0).collect();
    let ln_w: Vec<f32> = rand_vec(4, C, 0.5).iter().map(|v| v + 1.0).collect();
    let ln_b = rand_vec(5, C, 0.2);
    let mix: Vec<f32> = rand_vec(6, C, 0.5).iter().map(|v| v + 0.5).collect();
    let state0 = rand_vec(7, SLOTS * SLOT_LEN, 1.0);
    let vecs: Vec<f32> = [ln_w.clone(), ln_b.clone(), mix.clone()].concat();
    let stats = C + F;
    let mut act = x.clone();
    act.resize(stats + 4, 0.0);
    let (act_buf, vec_buf) = (h.f32_buf(&act), h.f32_buf(&vecs));
    let state = h.f32_buf(&state0);
    let meta = h.u32_buf(&[7, 0, 0, 0, 0, 1, SLOT as u32, 0]);
    let ln = LnFuse {
        meta: &meta,
        state: &state,
        state_off: STATE_OFF,
        slot_len: SLOT_LEN,
        ln_w: 0,
        ln_b: C,
        mix: 2 * C,
        eps: 1e-5,
        stats,
    };
    let args = |x_off, k, y_off, n, act, accumulate| MatmulArgs {
        x_off,
        x_stride: k,
        y_off,
        y_stride: n,
        act,
        accumulate,
        add_before_act: false,
        bias_off: None,
        rows: Count::Tokens,
        scale: 1.0,
        lora: None,
    };
    let ka = args(0, C, C, F, Act::ReluSq, false);
    let va = args(C, F, 0, C, Act::None, true);
    let kn = matvec_ln(
        &cx,
        "ffn.key",
        None,
        &key,
        &vec_buf,
        &act_buf,
        &ka,
        &ln,
        LnEnd::In,
    );
    let vn = matvec_ln(
        &cx,
        "ffn.value",
        None,
        &value,
        &vec_buf,
        &act_buf,
        &va,
        &ln,
        LnEnd::Out,
    );
    // The ends are not interchangeable.
    assert!(matvec_ln(
        &cx,
        "k",
        None,
        &key,
        &vec_buf,
        &act_buf,
        &ka,
        &ln,
        LnEnd::Out
    )
    .is_err());
    assert!(matvec_ln(
        &cx,
        "v",
        None,
        &value,
        &vec_buf,
        &act_buf,
        &va,
        &ln,
        LnEnd::In
    )
    .is_err());

    // The CPU: LayerNorm in f64, the lerp with slot 2's shift state.
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / C as f64;
    let var = x
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / C as f64;
    let rstd = 1.0 / (var + 1e-5).sqrt();
    let xn: Vec<f32> = (0..C)
        .map(|i| ((f64::from(x[i]) - mean) * rstd) as f32 * ln_w[i] + ln_b[i])
        .collect();
    let prev = &state0[SLOT * SLOT_LEN + STATE_OFF..][..C];
    let lerp: Vec<f32> = (0..C).map(|i| xn[i] + (prev[i] - xn[i]) * mix[i]).collect();

    h.run(&[kn.unwrap()]);
    assert_eq!(
        h.read(&state, 0, state0.len()),
        state0,
        "the key wrote the state"
    );
    let got_st = h.read(&act_buf, stats, 2);
    assert!(
        (f64::from(got_st[0]) - mean).abs() < 1e-5 * mean.abs(),
        "{got_st:?}"
    );
    assert!(
        (f64::from(got_st[1]) - rstd).abs() < 1e-4 * rstd,
        "{got_st:?}"
    );
    let hk = h.read(&act_buf, C, F);
    let want: Vec<f32> = matvec(&wk, &q8_rounded(&lerp))
        .iter()
        .map(|&v| v.max(0.0).powi(2))
        .collect();
    for (i, (g, w)) in hk.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 0.02 * (1.0 + w.abs()),
            "key row {i}: {g} vs {w}"
        );
    }

    h.run(&[vn.unwrap()]);
    let h_in = match value_dtype {
        DType::Q4_K => q8_rounded(&hk),
        _ => hk.clone(),
    };
    let xw: Vec<f32> = matvec(&wv, &h_in)
        .iter()
        .zip(&x)
        .map(|(a, b)| a + b)
        .collect();
    let got_x = h.read(&act_buf, 0, C);
    for (i, (g, w)) in got_x.iter().zip(&xw).enumerate() {
        assert!(
            (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
            "{value_dtype} x[{i}]: {g} vs {w}"
        );
    }
    let got = h.read(&state, 0, state0.len());
    for (i, (g, s0)) in got.iter().zip(&state0).enumerate() {
        let (slot, at) = (i / SLOT_LEN, i % SLOT_LEN);
        if slot == SLOT && (STATE_OFF..STATE_OFF + C).contains(&at) {
            let want = xn[at - STATE_OFF];
            assert!(
                (g - want).abs() <= 1e-4,
                "shift state [{at}]: {g} vs {want}"
            );
        } else {
            assert_eq!(g, s0, "state [{slot}, {at}] changed");
        }
    }
}
