//! The sampler against its definition: seeded draws, the filters, penalties, options.

use super::*;
use rand::Rng;

fn opts(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> SamplerOptions {
    SamplerOptions {
        temperature,
        top_p,
        top_k,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        seed: Some(seed),
        ..Default::default()
    }
}

/// Seeded pseudo-random logits over a World-sized vocabulary, spread like a model's
/// (a few standard deviations wide).
fn random_logits(vocab: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..vocab).map(|_| rng.gen_range(-8.0f32..8.0)).collect()
}

#[test]
fn greedy_picks_argmax() -> Result<()> {
    let mut logits = random_logits(65536, 1);
    logits[12345] = 20.0;
    let mut s = Sampler::new(SamplerOptions::greedy(), 65536)?;
    assert_eq!(s.sample(&mut logits.clone()), 12345);
    // Ties go to the lowest id.
    logits[777] = 20.0;
    assert_eq!(s.sample(&mut logits), 777);
    Ok(())
}

/// A greedy sampler with bans and presence / frequency penalties draws what the argmax
/// of the logits after its adjustments picks (`ops::argmax::reference`, NaN and ties
/// included); a temperature or a repetition penalty gives no adjustments.
#[test]
fn greedy_draws_are_the_argmax_after_the_adjustments() -> Result<()> {
    let pen = SamplerOptions {
        presence_penalty: 0.5,
        frequency_penalty: 0.5,
        penalty_decay: 0.996,
        banned_tokens: vec![5, 5, 70_000],
        ..SamplerOptions::greedy()
    };
    for opts in [SamplerOptions::greedy(), pen] {
        let mut s = Sampler::new(opts, 65536)?;
        for seed in 0..12u64 {
            let mut logits = random_logits(65536, 40 + seed);
            logits[3] = f32::NAN;
            logits[5] = 50.0;
            logits[900 + (seed % 3) as usize] = 30.0;
            logits[60_000] = 30.0;
            let adj = s.greedy_adjustments().expect("a greedy sampler");
            let mut adjusted = logits.clone();
            for &(t, d) in &adj {
                adjusted[t as usize] -= d;
            }
            let want = crate::ops::argmax::reference(&adjusted).0;
            let got = s.sample(&mut logits);
            assert_eq!(got, want, "draw {seed}");
            s.accept(got);
        }
    }
    let not = [
        SamplerOptions {
            temperature: 1.0,
            ..SamplerOptions::greedy()
        },
        SamplerOptions {
            repetition_penalty: 1.1,
            ..SamplerOptions::greedy()
        },
    ];
    for o in not {
        assert!(
            Sampler::new(o.clone(), 65536)?
                .greedy_adjustments()
                .is_none(),
            "{o:?}"
        );
    }
    let top1 = SamplerOptions {
        temperature: 1.0,
        top_k: 1,
        ..SamplerOptions::greedy()
    };
    assert_eq!(
        Sampler::new(top1, 65536)?.greedy_adjustments(),
        Some(vec![])
    );
    Ok(())
}

#[test]
fn same_seed_same_sequence_other_seed_differs() -> Result<()> {
    let run = |seed| -> Result<Vec<u32>> {
        let mut s = Sampler::new(opts(1.0, 0.9, 0, seed), 65536)?;
        let mut out = Vec::new();
        for step in 0..32 {
            // A flat-ish distribution so that draws genuinely vary.
            let mut l = random_logits(65536, 100 + step);
            for v in l.iter_mut() {
                *v *= 0.1;
            }
            let t = s.sample(&mut l);
            s.accept(t);
            out.push(t);
        }
        Ok(out)
    };
    let a = run(7)?;
    assert_eq!(a, run(7)?);
    assert_ne!(a, run(8)?);
    Ok(())
}

#[test]
fn top_k_1_and_tiny_top_p_are_greedy() -> Result<()> {
    for seed in 0..20 {
        let logits = random_logits(65536, seed);
        let (want, _) = argmax(&logits);
        let mut k1 = Sampler::new(opts(1.5, 1.0, 1, seed), 65536)?;
        assert_eq!(k1.sample(&mut logits.clone()), want);
        let mut p = Sampler::new(opts(1.5, 1e-6, 0, seed), 65536)?;
        assert_eq!(p.sample(&mut logits.clone()), want);
    }
    Ok(())
}

#[test]
fn top_k_restricts_to_the_k_best() -> Result<()> {
    let logits = random_logits(4096, 3);
    let mut order: Vec<u32> = (0..4096).collect();
    order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    let best5 = &order[..5];
    // Temperature 5 flattens the distribution: without top-k, draws would spread widely.
    let mut s = Sampler::new(opts(5.0, 1.0, 5, 11), 4096)?;
    let mut hit = [false; 5];
    for _ in 0..500 {
        let t = s.sample(&mut logits.clone());
        let pos = best5.iter().position(|&b| b == t);
        assert!(pos.is_some(), "token {t} outside the top 5");
        if let Some(p) = pos {
            hit[p] = true;
        }
    }
    assert!(
        hit.iter().all(|&h| h),
        "each of the 5 is drawn at least once: {hit:?}"
    );
    Ok(())
}

#[test]
fn top_p_keeps_the_nucleus() -> Result<()> {
    // p ∝ [8, 4, 2, 1, 1] / 16: top_p 0.7 needs {0, 1} (0.5 + 0.25 = 0.75 ≥ 0.7).
    let base: Vec<f32> = [8.0f32, 4.0, 2.0, 1.0, 1.0]
        .iter()
        .map(|p| p.ln())
        .collect();
    let mut s = Sampler::new(opts(1.0, 0.7, 0, 5), 5)?;
    let mut counts = [0usize; 5];
    for _ in 0..3000 {
        counts[s.sample(&mut base.clone()) as usize] += 1;
    }
    assert_eq!(counts[2] + counts[3] + counts[4], 0, "{counts:?}");
    // Renormalised nucleus: 2/3 vs 1/3; 3000 draws → σ ≈ 26, allow 5σ.
    assert!((counts[0] as i64 - 2000).abs() < 130, "{counts:?}");
    Ok(())
}

#[test]
fn min_p_drops_unlikely_tokens() -> Result<()> {
    let base: Vec<f32> = [1.0f32, 0.5, 0.09, 0.05].iter().map(|p| p.ln()).collect();
    let mut o = opts(1.0, 1.0, 0, 9);
    o.min_p = 0.1; // floor 0.1 × p_max: drops ids 2 and 3
    let mut s = Sampler::new(o, 4)?;
    for _ in 0..1000 {
        assert!(s.sample(&mut base.clone()) < 2);
    }
    Ok(())
}

/// Frequencies over many seeded draws match softmax(logits / T). Tolerances: 5 binomial
/// standard deviations (σ = √(N p (1−p)) ≈ 40–65 draws here), which a correct sampler
/// exceeds with probability < 1e-6 — and the seed is fixed, so never flaky.
#[test]
fn temperature_statistics() -> Result<()> {
    let base: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|p| p.ln()).collect();
    let n = 30000usize;
    for (t, want) in [
        (1.0f32, [1.0f64 / 6.0, 2.0 / 6.0, 3.0 / 6.0]),
        // p^(1/0.5) = p²: 1, 4, 9 over 14.
        (0.5, [1.0 / 14.0, 4.0 / 14.0, 9.0 / 14.0]),
        // p^(1/2) = √p.
        (2.0, {
            let s = 1.0 + 2f64.sqrt() + 3f64.sqrt();
            [1.0 / s, 2f64.sqrt() / s, 3f64.sqrt() / s]
        }),
    ] {
        let mut s = Sampler::new(opts(t, 1.0, 0, 1234), 3)?;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[s.sample(&mut base.clone()) as usize] += 1;
        }
        for (c, p) in counts.iter().zip(want) {
            let expected = p * n as f64;
            let sigma = (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (*c as f64 - expected).abs() < 5.0 * sigma,
                "T={t}: counts {counts:?}, expected {want:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn penalties_lower_repeated_tokens_and_decay() -> Result<()> {
    let mut o = SamplerOptions::greedy();
    o.presence_penalty = 0.5;
    o.frequency_penalty = 0.5;
    o.penalty_decay = 0.5;
    let mut s = Sampler::new(o, 8)?;
    s.accept(3);
    s.accept(3);
    // Counts: after first accept 1; second decays to 0.5 then +1 = 1.5.
    assert_eq!(s.occurrence(3), 1.5);
    let mut l = vec![0.0f32; 8];
    l[3] = 1.0; // would be the arg-max without penalties
    let t = s.sample(&mut l);
    // 1.0 - (0.5 + 1.5 × 0.5) = -0.25 < 0: token 3 loses to token 0.
    assert_eq!(l[3], -0.25);
    assert_eq!(t, 0);
    // Untouched tokens keep their logits.
    assert_eq!(l[5], 0.0);
    s.accept(0);
    assert_eq!(s.occurrence(3), 0.75);
    // Weight 0 (ChatRWKV's spaces and digits): presence penalty only.
    s.accept_weighted(5, 0.0);
    let mut l3 = vec![0.0f32; 8];
    s.sample(&mut l3);
    assert_eq!(l3[5], -0.5);
    s.reset();
    assert_eq!(s.occurrence(3), 0.0);
    let mut l2 = vec![0.0f32; 8];
    l2[3] = 1.0;
    assert_eq!(s.sample(&mut l2), 3);
    Ok(())
}

#[test]
fn repetition_penalty_and_bans() -> Result<()> {
    let mut o = SamplerOptions::greedy();
    o.repetition_penalty = 2.0;
    o.banned_tokens = vec![1];
    let mut s = Sampler::new(o, 4)?;
    s.accept(0);
    s.accept(2);
    let mut l = vec![3.0f32, 9.0, -1.0, 2.0];
    let t = s.sample(&mut l);
    assert_eq!(l, vec![1.5, f32::NEG_INFINITY, -2.0, 2.0]);
    assert_eq!(t, 3);
    Ok(())
}

#[test]
fn nan_and_infinite_logits_are_defined() -> Result<()> {
    let mut s = Sampler::new(opts(1.0, 0.9, 0, 3), 4)?;
    // NaN never drawn.
    for _ in 0..200 {
        let t = s.sample(&mut [f32::NAN, 0.0, f32::NAN, 0.0]);
        assert!(t == 1 || t == 3);
    }
    // +inf wins.
    assert_eq!(s.sample(&mut [0.0, f32::INFINITY, 5.0, f32::NAN]), 1);
    // Nothing drawable: error from try_sample, first stop token (0) from sample.
    assert!(s.try_sample(&mut [f32::NAN; 4]).is_err());
    assert!(s.try_sample(&mut [f32::NEG_INFINITY; 4]).is_err());
    assert_eq!(s.sample(&mut [f32::NAN; 4]), 0);
    // Wrong length.
    assert!(s.try_sample(&mut [0.0; 3]).is_err());
    Ok(())
}

#[test]
fn bad_options_are_rejected() {
    let bad = [
        SamplerOptions {
            temperature: -1.0,
            ..Default::default()
        },
        SamplerOptions {
            top_p: 0.0,
            ..Default::default()
        },
        SamplerOptions {
            top_p: f32::NAN,
            ..Default::default()
        },
        SamplerOptions {
            penalty_decay: 1.5,
            ..Default::default()
        },
        SamplerOptions {
            repetition_penalty: 0.5,
            ..Default::default()
        },
    ];
    for o in bad {
        assert!(Sampler::new(o, 10).is_err());
    }
    assert!(Sampler::new(SamplerOptions::default(), 0).is_err());
    assert!(Sampler::new(SamplerOptions::default(), 65536).is_ok());
}

#[test]
fn options_serde_defaults() -> anyhow::Result<()> {
    // Missing fields take the defaults (the app sends partial options).
    let o: SamplerOptions = serde_json::from_str(r#"{"temperature": 0.7}"#)?;
    assert_eq!(o.temperature, 0.7);
    assert_eq!(o.top_p, SamplerOptions::default().top_p);
    let back: SamplerOptions = serde_json::from_str(&serde_json::to_string(&o)?)?;
    assert_eq!(back, o);
    Ok(())
}

/// What a draw chooses from — the candidates and their weights after min-p, top-k, top-p
/// and temperature — against the filters' definition computed the plain way: every
/// probability in f64, the whole vocabulary sorted (descending, ties by id).
#[test]
fn draw_keeps_the_candidates_of_a_full_sort() -> Result<()> {
    let vocab = 65536;
    let mut checked = 0;
    for seed in 0..4u64 {
        let mut logits = random_logits(vocab, 90 + seed);
        // A few tokens far above the rest, as a model's next-token logits have; seed 3
        // near-uniform instead (a random model's: the nuclei hold thousands of tokens).
        for (i, t) in [17usize, 4099, 65535].iter().enumerate() {
            logits[*t] += 6.0 + 2.0 * i as f32 + seed as f32;
        }
        if seed == 3 {
            logits.iter_mut().for_each(|l| *l *= 0.05);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for &(t, top_p, top_k, min_p) in &[
            (1.0f32, 0.3f32, 0usize, 0.0f32),
            (1.0, 0.95, 0, 0.0),
            (0.7, 0.999, 0, 0.0),
            (1.5, 1.0, 40, 0.0),
            (1.0, 0.5, 200, 0.0),
            (0.8, 1.0, 0, 0.0),
            (1.0, 1.0, 0, 0.01),
            (1.3, 0.9, 1000, 0.001),
            (1.0, 1.0, 70_000, 0.0),
        ] {
            let o = SamplerOptions {
                top_p,
                top_k,
                min_p,
                ..opts(t, 1.0, 0, seed)
            };
            // The definition: f64 probabilities, a full sort, the filters in order.
            let p: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
            let mut order: Vec<u32> = (0..vocab as u32)
                .filter(|&i| p[i as usize] >= f64::from(min_p))
                .collect();
            order.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
            if top_k > 0 && top_k < order.len() {
                order.truncate(top_k);
            }
            let filtered = top_k > 0 && top_k < vocab || top_p < 1.0;
            if top_p < 1.0 {
                let target = f64::from(top_p) * order.iter().map(|&i| p[i as usize]).sum::<f64>();
                let mut acc = 0.0;
                let n = order
                    .iter()
                    .position(|&i| {
                        acc += p[i as usize];
                        acc >= target
                    })
                    .map_or(order.len(), |n| n + 1);
                order.truncate(n);
            }
            let weight = |i: u32| (f64::from(logits[i as usize] - max) / f64::from(t)).exp();
            let mut s = Sampler::new(o, vocab)?;
            s.draw(&logits, max);
            let got: Vec<(u32, f64)> = if filtered {
                s.cand.iter().map(|&(w, i)| (i, f64::from(w))).collect()
            } else {
                (0..vocab as u32)
                    .zip(s.prob.iter())
                    .filter(|&(_, &w)| w > 0.0)
                    .map(|(i, &w)| (i, f64::from(w)))
                    .collect()
            };
            let mut ids: Vec<u32> = got.iter().map(|g| g.0).collect();
            let mut want = order.clone();
            ids.sort_unstable();
            want.sort_unstable();
            assert_eq!(
                ids.len(),
                want.len(),
                "T={t} top_p={top_p} top_k={top_k} min_p={min_p}: candidate count"
            );
            assert_eq!(ids, want, "T={t} top_p={top_p} top_k={top_k} min_p={min_p}");
            for &(i, w) in &got {
                // exp_le0 is within 3e-7 of exp, and (l − max) / T adds one f32 rounding.
                let rel = (w - weight(i)).abs() / weight(i);
                assert!(rel < 1e-6, "token {i}: weight {w} against {}", weight(i));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 36);
    Ok(())
}

/// The arg-max's lanes: the largest value in the tail past the last full lane group, and
/// NaN in every position, never win over a smaller number.
#[test]
fn argmax_takes_the_first_largest_in_any_position() {
    for n in 1..40usize {
        for at in 0..n {
            let mut l: Vec<f32> = (0..n).map(|i| -(i as f32)).collect();
            l[at] = 5.0;
            if at + 1 < n {
                l[at + 1] = f32::NAN;
            }
            assert_eq!(argmax(&l), (at as u32, 5.0), "n={n} at={at}");
            l[n - 1] = 5.0;
            assert_eq!(argmax(&l).0, at.min(n - 1) as u32, "tie, n={n} at={at}");
        }
    }
    assert_eq!(
        argmax(&[f32::NAN, f32::NEG_INFINITY]),
        (0, f32::NEG_INFINITY)
    );
}
