//! The fused LayerNorm + token shift against the CPU: the key's prologue and the value's
//! save of the shift state, one token of a sequence in state slot 2 of 3.

use super::*;
use crate::ops::matmul::Act;
use crate::ops::testing::*;
use crate::ops::Dims;
use crate::DType;

pub(super) const C: usize = 256;
pub(super) const F: usize = 1024;
pub(super) const SLOT: usize = 2;
pub(super) const SLOTS: usize = 3;
pub(super) const SLOT_LEN: usize = C + 8;
pub(super) const STATE_OFF: usize = 4;

/// `bytes` of `[n, k]` `dtype` values from `w`, and the values the GPU sees.
pub(super) fn encode(
    dtype: DType,
    w: &[f32],
    n: usize,
    k: usize,
    h: &Harness,
) -> (GpuMatrix, Vec<f32>) {
    let bytes: Vec<u8> = match dtype {
        DType::Q4_K => bytemuck::cast_slice(&crate::quant::quantize_q4_k(w)).to_vec(),
        _ => bytemuck::cast_slice(&crate::quant::quantize_f16(w)).to_vec(),
    };
    let wd = crate::quant::dequantize_to_vec(dtype, &bytes, n * k).unwrap();
    let m = GpuMatrix::upload(&h.gpu, format!("{dtype}"), dtype, &bytes, n, k).unwrap();
    (m, wd)
}

/// The fused LayerNorm of a row of `c` channels (its weight at 0 of `vecs`, bias at `c`,
/// the mix at `mix`), the token's shift state in slot [`SLOT`] of `state` (slots of
/// `c + 8` values from [`STATE_OFF`]), (mean, rstd) at `stats`, 8-bit x handed over at `x8`.
pub(super) fn slot_ln<'a>(
    meta: &'a wgpu::Buffer,
    state: &'a wgpu::Buffer,
    c: usize,
    mix: usize,
    stats: usize,
    x8: Option<usize>,
) -> LnFuse<'a> {
    LnFuse {
        meta,
        state,
        state_off: STATE_OFF,
        slot_len: c + 8,
        ln_w: 0,
        ln_b: c,
        mix,
        eps: 1e-5,
        stats,
        x8,
    }
}

/// LayerNorm of `x` in f64 (eps 1e-5) with weight `w` and bias `b`, and (mean, rstd).
fn layer_norm(x: &[f32], w: &[f32], b: &[f32]) -> (Vec<f32>, f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    let rstd = 1.0 / (var + 1e-5).sqrt();
    let xn = (0..x.len())
        .map(|i| ((f64::from(x[i]) - mean) * rstd) as f32 * w[i] + b[i])
        .collect();
    (xn, mean, rstd)
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
    let h = Harness::new(Dims::one_token(SLOT as u32).0);
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
    let meta = h.u32_buf(&Dims::one_token(SLOT as u32).1);
    let ln = slot_ln(&meta, &state, C, 2 * C, stats, None);
    let ka = MatmulArgs::dense(0, C, C, F, Act::ReluSq, false, None);
    let va = MatmulArgs::dense(C, F, 0, C, Act::None, true, None);
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
        None,
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
        None,
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
        LnEnd::Out,
        None
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
        LnEnd::In,
        None
    )
    .is_err());

    // The CPU: LayerNorm in f64, the lerp with slot 2's shift state.
    let (xn, mean, rstd) = layer_norm(&x, &ln_w, &ln_b);
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

/// The value that opens the next block (`LnEnd::Next`), run twice: each run adds `Wv h`
/// to the residual, saves this block's shift state, and its last workgroups write the
/// next block's six lerps of the new residual's LayerNorm with that block's shift state
/// (a second state buffer, slot 2 of 3) and saves it there; the second run's lerps use
/// the first run's save, so a counter not back to 0 (no tail, or a tail before every
/// row was written), another slot, a mix or an output stride mixed up fails. Once more as
/// `LnEnd::NextOnly`, which must leave this block's shift state alone, and as the time
/// mix's output opening its channel mix (`NextOnly` with one lerp: the other five outputs
/// must stay untouched).
#[test]
fn value_opens_the_next_blocks_lerps() {
    let h = Harness::new(Dims::one_token(SLOT as u32).0);
    if !h.gpu.features.subgroup || h.gpu.features.subgroup_min_size < 8 {
        eprintln!("skipped: the fused LayerNorm needs subgroups of at least 8");
        return;
    }
    for value_dtype in [DType::Q4_K, DType::F16] {
        run_next(&h, value_dtype, C, LnEnd::Next, 6);
    }
    // Without this block's save (its LayerNorm keeps its own dispatch: F16 keys).
    run_next(&h, DType::F16, C, LnEnd::NextOnly, 6);
    // One lerp: a time-mix output that runs its channel mix's LayerNorm + token shift.
    run_next(&h, DType::F16, C, LnEnd::NextOnly, 1);
    // A row of 2,048 channels: a tail of two workgroups, the first waiting for the last
    // (not on llvmpipe, whose tail is one workgroup: there `Next` is refused for it).
    let cx = h.ctx();
    let (wide, _) = encode(DType::F16, &rand_vec(11, 2048 * F, 0.3), 2048, F, &h);
    if ln_next_fits(&cx, &wide) {
        run_next(&h, DType::Q4_K, 2048, LnEnd::Next, 6);
    } else {
        eprintln!("a tail of one workgroup here: C = 2048 skipped");
    }
}

fn run_next(h: &Harness, value_dtype: DType, c: usize, end: LnEnd, n_mix: usize) {
    let slot_len = c + 8;
    let cx = h.ctx();
    let (value, wv) = encode(value_dtype, &rand_vec(12, c * F, 0.3), c, F, h);
    let x: Vec<f32> = rand_vec(13, c, 1.0).iter().map(|v| v + 3.0).collect();
    let hk: Vec<f32> = rand_vec(14, F, 0.5).iter().map(|v| v * v).collect();
    // This block's LayerNorm (for its save; the key's (mean, rstd) given), the next one's
    // and its six mixes.
    let ln_w: Vec<f32> = rand_vec(15, c, 0.5).iter().map(|v| v + 1.0).collect();
    let ln_b = rand_vec(16, c, 0.2);
    let vecs: Vec<f32> = [ln_w.clone(), ln_b.clone()].concat();
    let nx_w: Vec<f32> = rand_vec(17, c, 0.5).iter().map(|v| v + 1.0).collect();
    let nx_b = rand_vec(18, c, 0.2);
    let mixes: Vec<f32> = rand_vec(19, 6 * c, 0.5).iter().map(|v| v + 0.5).collect();
    let nvecs: Vec<f32> = [nx_w.clone(), nx_b.clone(), mixes.clone()].concat();
    let (out, out_stride) = (c + F + 8, c + 4);
    let stats = out + 6 * out_stride;
    let done = stats + 4;
    let mut act = [x.clone(), hk.clone()].concat();
    act.resize(done + 4, 0.0);
    let (mean0, rstd0) = (2.5f32, 0.75f32);
    act[stats] = mean0;
    act[stats + 1] = rstd0;
    let (act_buf, vec_buf, nvec_buf) = (h.f32_buf(&act), h.f32_buf(&vecs), h.f32_buf(&nvecs));
    let state0 = rand_vec(20, SLOTS * slot_len, 1.0);
    let nstate0 = rand_vec(21, SLOTS * slot_len, 1.0);
    let (state, nstate) = (h.f32_buf(&state0), h.f32_buf(&nstate0));
    let meta = h.u32_buf(&Dims::one_token(SLOT as u32).1);
    let ln = slot_ln(&meta, &state, c, 0, stats, None);
    let nx = LnNext {
        vecs: &nvec_buf,
        ln_w: 0,
        ln_b: c,
        mix: 2 * c,
        mixes: n_mix,
        state: &nstate,
        state_off: STATE_OFF + 4,
        slot_len,
        out,
        out_stride,
        done,
    };
    let va = MatmulArgs::dense(c, F, 0, c, Act::None, true, None);
    let node = |end, next| {
        matvec_ln(
            &cx,
            "ffn.value",
            None,
            &value,
            &vec_buf,
            &act_buf,
            &va,
            &ln,
            end,
            next,
        )
    };
    assert!(
        node(LnEnd::Next, None).is_err(),
        "Next without the next block"
    );
    assert!(
        node(LnEnd::Out, Some(&nx)).is_err(),
        "Out with a next block"
    );
    let vn = node(end, Some(&nx)).unwrap();
    let h_in = match value_dtype {
        DType::Q4_K => q8_rounded(&hk),
        _ => hk.clone(),
    };
    let wh = matvec(&wv, &h_in);
    let (mut xr, mut prev) = (
        x.clone(),
        nstate0[SLOT * slot_len + STATE_OFF + 4..][..c].to_vec(),
    );
    for run in 0..2 {
        h.run(std::slice::from_ref(&vn));
        // This block's save: its LayerNorm of the residual before the add.
        let save: Vec<f32> = (0..c)
            .map(|i| (xr[i] - mean0) * rstd0 * ln_w[i] + ln_b[i])
            .collect();
        xr = xr.iter().zip(&wh).map(|(a, b)| a + b).collect();
        let got_x = h.read(&act_buf, 0, c);
        for (i, (g, w)) in got_x.iter().zip(&xr).enumerate() {
            assert!(
                (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                "{value_dtype} run {run} x[{i}]: {g} vs {w}"
            );
        }
        let got_save = h.read(&state, SLOT * slot_len + STATE_OFF, c);
        let save = match end {
            LnEnd::NextOnly => state0[SLOT * slot_len + STATE_OFF..][..c].to_vec(),
            _ => save,
        };
        for (i, (g, w)) in got_save.iter().zip(&save).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "run {run} save [{i}]: {g} vs {w}"
            );
        }
        let (xn, _, _) = layer_norm(&got_x, &nx_w, &nx_b);
        for m in 0..6 {
            let got = h.read(&act_buf, out + m * out_stride, c);
            if m >= n_mix {
                assert!(got.iter().all(|&v| v == 0.0), "lerp {m} of {n_mix} written");
                continue;
            }
            for i in 0..c {
                let want = xn[i] + (prev[i] - xn[i]) * mixes[m * c + i];
                assert!(
                    (got[i] - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{value_dtype} run {run} lerp {m} [{i}]: {} vs {want}",
                    got[i]
                );
            }
        }
        let got = h.read(&nstate, 0, nstate0.len());
        for (i, (g, s0)) in got.iter().zip(&nstate0).enumerate() {
            let (slot, at) = (i / slot_len, i % slot_len);
            if slot == SLOT && (STATE_OFF + 4..STATE_OFF + 4 + c).contains(&at) {
                let want = xn[at - STATE_OFF - 4];
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "next shift state [{at}]: {g} vs {want}"
                );
            } else {
                assert_eq!(g, s0, "next state [{slot}, {at}] changed");
            }
        }
        assert_eq!(
            h.read(&act_buf, done, 1)[0].to_bits(),
            0,
            "the counter left at 0"
        );
        prev = xn;
    }
}

/// Without subgroups (the tail's statistics are shuffles) no value opens the next block:
/// the graph keeps the next block's `ln_shift` rather than ask for a kernel it cannot make.
#[test]
fn no_next_block_without_subgroups() {
    let mut plain = (*gpu()).clone();
    plain.features.subgroup = false;
    let h = Harness::with_gpu(Dims::default(), std::sync::Arc::new(plain));
    let (value, _) = encode(DType::F16, &rand_vec(22, C * F, 0.3), C, F, &h);
    assert!(!ln_next_fits(&h.ctx(), &value));
}
