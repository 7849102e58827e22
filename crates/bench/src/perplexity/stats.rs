//! The figures of `llama-perplexity`, computed as llama.cpp 0c1e570 computes them
//! (`tools/perplexity/perplexity.cpp`): per scored position the negative log-likelihood
//! of the next token, and against a base model's stored log-probabilities the KL
//! divergence KL(base ‖ model), whether both models' most likely token agree, and
//! Δp = p(next token) − p_base(next token); then means with their standard errors and
//! percentiles.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::logits_file::row_scale;

/// The largest of `logits` and Σ exp(l − max), the sum in f64 of f32 terms (llama.cpp's
/// `log_softmax`): ln Σ exp(l) = max + ln(sum).
pub fn max_and_sum_exp(logits: &[f32]) -> (f32, f64) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum_exp = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    (max, sum_exp)
}

/// −ln p(`target`) under `logits` (`[n_vocab]` f32), nats: `max + ln Σ exp(l − max) −
/// l[target]`.
pub fn nll_row(logits: &[f32], target: usize) -> f64 {
    let (max, sum_exp) = max_and_sum_exp(logits);
    f64::from(max) + sum_exp.ln() - f64::from(logits[target])
}

/// One scored position against a base row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KlRow {
    /// −ln p(next token) under the model, nats.
    pub nll: f64,
    /// −ln p(next token) under the base, nats (from its stored row).
    pub nll_base: f64,
    /// KL(base ‖ model) over the tokens whose base log-probability is above −16, nats.
    pub kld: f64,
    /// p(next token) − p_base(next token).
    pub p_diff: f64,
    /// The model's most likely token is the base's.
    pub same_top: bool,
}

/// Scores `logits` (`[n_vocab]` f32, the model's row) against the stored `base` row
/// (`[row_len(n_vocab)]` u16) with `target` the next token.
pub fn kl_row(logits: &[f32], base: &[u16], target: usize) -> KlRow {
    let (mut max, mut imax) = (logits[0], 0usize);
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max {
            (max, imax) = (l, i);
        }
    }
    let sum_exp: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let (scale, min) = row_scale(base);
    let q = &base[4..4 + logits.len()];
    let nll = max + log_sum_exp - logits[target];
    let nll_base = -(scale * f32::from(q[target]) + min);
    let log_norm = max + log_sum_exp;
    let (mut kld, mut imax_base, mut best) = (0f64, 0usize, f32::NEG_INFINITY);
    for (i, (&qi, &l)) in q.iter().zip(logits).enumerate() {
        let lp_base = scale * f32::from(qi) + min;
        if i == 0 || lp_base > best {
            (best, imax_base) = (lp_base, i);
        }
        if lp_base > -16.0 {
            kld += f64::from(lp_base.exp() * (lp_base - l + log_norm));
        }
    }
    KlRow {
        nll: f64::from(nll),
        nll_base: f64::from(nll_base),
        kld,
        p_diff: f64::from((-nll).exp() - (-nll_base).exp()),
        same_top: imax == imax_base,
    }
}

/// Mean and its standard error (`sqrt(var / (n − 1))`; 0 for fewer than 11 values, as
/// llama.cpp reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub uncertainty: f64,
}

/// Running sums from which [`Estimate`]s follow.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sums {
    pub n: usize,
    pub sum: f64,
    pub sum2: f64,
}

impl Sums {
    pub fn add(&mut self, v: f64) {
        self.n += 1;
        self.sum += v;
        self.sum2 += v * v;
    }

    pub fn mean(&self) -> Estimate {
        if self.n == 0 {
            return Estimate {
                value: 0.0,
                uncertainty: 0.0,
            };
        }
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = self.sum2 / n - mean * mean;
        let uncertainty = if var > 0.0 && self.n > 10 {
            (var / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Estimate {
            value: mean,
            uncertainty,
        }
    }
}

/// Perplexity `exp(mean nll)` and its uncertainty from the sums of nll.
pub fn perplexity_of(nll: &Sums) -> Estimate {
    let m = nll.mean();
    let ppl = m.value.exp();
    Estimate {
        value: ppl,
        uncertainty: ppl * m.uncertainty,
    }
}

/// The KL-divergence part of a report: every figure `llama-perplexity --kl-divergence`
/// prints, by the same formulas.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KlSummary {
    /// Perplexity of the base over the same positions (from its stored rows).
    pub perplexity_base: Estimate,
    /// Correlation of the two models' per-position ln-likelihoods.
    pub cor_ln_ppl: f64,
    /// mean ln(PPL / PPL_base).
    pub ln_ppl_ratio: Estimate,
    /// PPL / PPL_base.
    pub ppl_ratio: Estimate,
    /// PPL − PPL_base.
    pub ppl_diff: Estimate,
    /// Mean KL(base ‖ model), nats.
    pub kld: Estimate,
    /// KL percentiles: `max`, `99.9`, `99`, `95`, `90`, `median`, `10`, `5`, `1`, `0.1`, `min`.
    pub kld_percentiles: BTreeMap<String, f64>,
    /// Share of positions where both models' most likely token agree (0–1).
    pub same_top_p: Estimate,
    /// Mean Δp (probability of the next token, model − base; 0–1 scale).
    pub delta_p: Estimate,
    /// Root mean square of Δp.
    pub delta_p_rms: Estimate,
    /// Δp percentiles: `max`, `99.9`, `99`, `95`, `90`, `75`, `median`, `25`, `10`, `5`, `1`, `0.1`, `min`.
    pub delta_p_percentiles: BTreeMap<String, f64>,
}

/// Linear interpolation between sorted values, as llama.cpp's `percentile`.
fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[sorted.len() - 1];
    }
    let p = fraction * (sorted.len() - 1) as f64;
    let i = p as usize;
    let t = p - i as f64;
    (1.0 - t) * sorted[i] + t * sorted[(i + 1).min(sorted.len() - 1)]
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 0 {
        0.5 * (sorted[n / 2] + sorted[n / 2 - 1])
    } else {
        sorted[n / 2]
    }
}

fn percentiles(mut v: Vec<f64>, points: &[(&str, f64)]) -> BTreeMap<String, f64> {
    v.sort_by(f64::total_cmp);
    points
        .iter()
        .map(|&(name, f)| {
            let x = if name == "median" {
                median(&v)
            } else {
                percentile(&v, f)
            };
            (name.to_string(), x)
        })
        .collect()
}

/// Summarizes scored rows (in position order). `None` for no rows.
pub fn summarize(rows: &[KlRow]) -> Option<KlSummary> {
    if rows.is_empty() {
        return None;
    }
    let (mut nll, mut base, mut kld, mut dp, mut dp2) = Default::default();
    let mut cross = 0f64;
    let mut same = 0usize;
    for r in rows {
        Sums::add(&mut nll, r.nll);
        Sums::add(&mut base, r.nll_base);
        Sums::add(&mut kld, r.kld);
        Sums::add(&mut dp, r.p_diff);
        Sums::add(&mut dp2, r.p_diff * r.p_diff);
        cross += r.nll * r.nll_base;
        same += usize::from(r.same_top);
    }
    let n = rows.len() as f64;
    let (ln_ppl, ln_base): (Estimate, Estimate) = (nll.mean(), Sums::mean(&base));
    let cov = if rows.len() < 10 {
        0.0
    } else {
        (cross / n - (nll.sum / n) * (base.sum / n)) / (n - 1.0)
    };
    let ratio_unc = (ln_ppl.uncertainty.powi(2) + ln_base.uncertainty.powi(2) - 2.0 * cov)
        .max(0.0)
        .sqrt();
    let ln_ratio = Estimate {
        value: ln_ppl.value - ln_base.value,
        uncertainty: ratio_unc,
    };
    let ppl = perplexity_of(&nll);
    let ppl_base = perplexity_of(&base);
    let ppl_cov = ppl.value * ppl_base.value * cov;
    let mse: Estimate = Sums::mean(&dp2);
    let rms = mse.value.sqrt();
    let top = same as f64 / n;
    let kl_points = [
        ("max", 1.0),
        ("99.9", 0.999),
        ("99", 0.99),
        ("95", 0.95),
        ("90", 0.90),
        ("median", 0.5),
        ("10", 0.10),
        ("5", 0.05),
        ("1", 0.01),
        ("0.1", 0.001),
        ("min", 0.0),
    ];
    let dp_points = [
        ("max", 1.0),
        ("99.9", 0.999),
        ("99", 0.99),
        ("95", 0.95),
        ("90", 0.90),
        ("75", 0.75),
        ("median", 0.5),
        ("25", 0.25),
        ("10", 0.10),
        ("5", 0.05),
        ("1", 0.01),
        ("0.1", 0.001),
        ("min", 0.0),
    ];
    Some(KlSummary {
        perplexity_base: ppl_base,
        cor_ln_ppl: if ln_ppl.uncertainty > 0.0 && ln_base.uncertainty > 0.0 {
            cov / (ln_ppl.uncertainty * ln_base.uncertainty)
        } else {
            0.0
        },
        ppl_ratio: Estimate {
            value: ln_ratio.value.exp(),
            uncertainty: ln_ratio.value.exp() * ln_ratio.uncertainty,
        },
        ln_ppl_ratio: ln_ratio,
        ppl_diff: Estimate {
            value: ppl.value - ppl_base.value,
            uncertainty: (ppl.uncertainty.powi(2) + ppl_base.uncertainty.powi(2) - 2.0 * ppl_cov)
                .max(0.0)
                .sqrt(),
        },
        kld: Sums::mean(&kld),
        kld_percentiles: percentiles(rows.iter().map(|r| r.kld).collect(), &kl_points),
        same_top_p: Estimate {
            value: top,
            uncertainty: if rows.len() > 1 {
                (top * (1.0 - top) / (n - 1.0)).sqrt()
            } else {
                0.0
            },
        },
        delta_p: Sums::mean(&dp),
        delta_p_rms: Estimate {
            value: rms,
            uncertainty: if rms > 0.0 {
                0.5 / rms * mse.uncertainty
            } else {
                0.0
            },
        },
        delta_p_percentiles: percentiles(rows.iter().map(|r| r.p_diff).collect(), &dp_points),
    })
}

#[cfg(test)]
mod tests {
    use super::super::logits_file::{encode_row, row_len};
    use super::*;

    fn row_of(logits: &[f32]) -> Vec<u16> {
        let mut row = vec![0u16; row_len(logits.len())];
        encode_row(logits, 0, &mut row);
        row
    }

    #[test]
    fn a_model_against_its_own_base_has_no_divergence() {
        let logits: Vec<f32> = (0..257).map(|i| ((i * 7919) % 101) as f32 * 0.05).collect();
        let r = kl_row(&logits, &row_of(&logits), 5);
        assert!(r.kld.abs() < 1e-3, "{}", r.kld);
        assert!((r.nll - r.nll_base).abs() < 1e-3);
        assert!(r.p_diff.abs() < 1e-4);
        assert!(r.same_top);
    }

    #[test]
    fn divergence_matches_the_closed_form() {
        // Base: uniform over 4 tokens; model: p = (0.7, 0.1, 0.1, 0.1).
        let base = row_of(&[0.0; 4]);
        let model: Vec<f32> = [0.7f32, 0.1, 0.1, 0.1].iter().map(|p| p.ln()).collect();
        let r = kl_row(&model, &base, 1);
        let want: f64 = [0.7f64, 0.1, 0.1, 0.1]
            .iter()
            .map(|q| 0.25 * (0.25 / q).ln())
            .sum();
        assert!((r.kld - want).abs() < 1e-5, "{} vs {want}", r.kld);
        assert!((r.nll - 0.1f64.ln().abs()).abs() < 1e-5);
        assert!((r.p_diff - (0.1 - 0.25)).abs() < 1e-5);
        assert!(r.same_top, "ties resolve to the first index in both");
        let r = kl_row(&[0.0, 3.0, 0.0, 0.0], &base, 1);
        assert!(!r.same_top);
    }

    #[test]
    fn summary_follows_llama_cpp_formulas() {
        let rows: Vec<KlRow> = (0..100)
            .map(|i| KlRow {
                nll: 1.0 + (i % 10) as f64 * 0.1,
                nll_base: 1.0 + (i % 10) as f64 * 0.1 - 0.01,
                kld: i as f64 * 1e-3,
                p_diff: if i % 2 == 0 { 0.01 } else { -0.01 },
                same_top: i % 4 != 0,
            })
            .collect();
        let s = summarize(&rows).unwrap();
        assert!((s.ln_ppl_ratio.value - 0.01).abs() < 1e-12);
        assert!(s.ln_ppl_ratio.uncertainty < 1e-6, "perfectly correlated");
        assert!((s.cor_ln_ppl - 1.0).abs() < 1e-6);
        assert!((s.kld.value - 0.0495).abs() < 1e-12);
        assert_eq!(s.kld_percentiles["max"], 0.099);
        assert_eq!(s.kld_percentiles["min"], 0.0);
        assert!((s.kld_percentiles["median"] - 0.0495).abs() < 1e-12);
        assert!((s.same_top_p.value - 0.75).abs() < 1e-12);
        assert!(s.delta_p.value.abs() < 1e-12);
        assert!((s.delta_p_rms.value - 0.01).abs() < 1e-12);
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn perplexity_is_the_exponential_of_the_mean() {
        let mut s = Sums::default();
        for v in [1.0, 2.0, 3.0] {
            s.add(v);
        }
        let p = perplexity_of(&s);
        assert!((p.value - 2f64.exp()).abs() < 1e-12);
        assert_eq!(p.uncertainty, 0.0, "too few values for an uncertainty");
    }
}
