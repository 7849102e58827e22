//! `rwkv perplexity`: perplexity and KL divergence over a text, as `llama-perplexity`
//! measures them (`rwkv_bench::perplexity`), so quantizations and kernel changes are
//! compared on figures both programs print.

use std::path::PathBuf;

use clap::Args;
use rwkv_bench::perplexity::{self, PerplexityReport};

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A UTF-8 text file to score (one trailing newline is dropped, as llama-perplexity
    /// `-f` does).
    #[arg(long, conflicts_with_all = ["tokens", "kl_divergence"])]
    pub text: Option<PathBuf>,
    /// A JSON file holding an array of token ids (or an object with a `tokens` array).
    #[arg(long, conflicts_with = "kl_divergence")]
    pub tokens: Option<PathBuf>,
    /// Tokens per chunk: each chunk starts from a fresh state and scores its second half
    /// (llama-perplexity `-c`).
    #[arg(long, default_value_t = 512)]
    pub ctx: usize,
    /// Score at most this many chunks (llama-perplexity `--chunks`).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Also write every scored row's log-probabilities here, as the base of a later
    /// `--kl-divergence` run (llama.cpp's `--kl-divergence-base` file, readable by both).
    #[arg(long, value_name = "FILE", conflicts_with = "kl_divergence")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Score against a base file (written by `--kl-divergence-base` here or by
    /// llama-perplexity): its tokens and chunk length are used; prints the KL divergence,
    /// top-1 agreement and Δp against the base.
    #[arg(long, value_name = "BASE_LOGITS")]
    pub kl_divergence: Option<PathBuf>,
    /// Score through the one-token (decode) path, a forward pass per scored position, to
    /// measure the decode kernels (the default runs each chunk's second half as prefill).
    #[arg(long)]
    pub decode: bool,
    /// Write the figures as JSON here (`{"perplexity": …, "kl": {…}}`).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Token ids from `--tokens` (an array, or an object with a `tokens` array).
pub fn read_token_file(p: &std::path::Path) -> anyhow::Result<Vec<u32>> {
    let text = std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let arr = v.get("tokens").unwrap_or(&v);
    arr.as_array()
        .ok_or_else(|| anyhow::anyhow!("{}: expected a JSON array of token ids", p.display()))?
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| anyhow::anyhow!("{}: {x} is not a token id", p.display()))
        })
        .collect()
}

pub fn run(a: PerplexityArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(true)?;
    let model = a.model.clone();
    let mut start = move |e: &mut rwkv_engine::Engine| {
        model
            .start_state(e)
            .map_err(|err| rwkv_engine::EngineError::invalid(err.to_string()))
    };
    let how = perplexity::Scoring {
        limit: a.chunks,
        decode: a.decode,
    };
    let report = match &a.kl_divergence {
        Some(base) => perplexity::kl_divergence(&mut eng, base, how, &mut start)?,
        None => {
            let tokens = match (&a.text, &a.tokens) {
                (Some(p), None) => {
                    let mut t = std::fs::read_to_string(p)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
                    if t.ends_with('\n') {
                        t.pop();
                    }
                    eng.tokenizer().encode(&t)
                }
                (None, Some(p)) => read_token_file(p)?,
                _ => anyhow::bail!("give --text FILE, --tokens FILE.json or --kl-divergence BASE"),
            };
            perplexity::perplexity(
                &mut eng,
                &tokens,
                a.ctx,
                how,
                &mut start,
                a.kl_divergence_base.as_deref(),
            )?
        }
    };
    print_report(&report);
    if let Some(p) = &a.json {
        let mut v = serde_json::to_value(&report)?;
        v["model"] = a.model.model.display().to_string().into();
        std::fs::write(p, serde_json::to_string_pretty(&v)? + "\n")
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    }
    Ok(())
}

fn print_report(r: &PerplexityReport) {
    println!(
        "{} chunks of {} tokens ({} scored of {} in the input{}); engine {:.2} s, {:.0} tok/s",
        r.chunks,
        r.ctx,
        r.scored,
        r.input_tokens,
        if r.decode { ", one-token passes" } else { "" },
        r.eval_seconds,
        r.eval_tokens_per_s
    );
    println!(
        "Final estimate: PPL = {:.4} +/- {:.5}",
        r.perplexity, r.perplexity_uncertainty
    );
    let Some(k) = &r.kl else { return };
    let pct = |m: &std::collections::BTreeMap<String, f64>, key: &str| {
        m.get(key).copied().unwrap_or(f64::NAN)
    };
    println!(
        "Mean PPL(base)                : {:10.6} ± {:10.6}",
        k.perplexity_base.value, k.perplexity_base.uncertainty
    );
    println!(
        "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
        100.0 * k.cor_ln_ppl
    );
    println!(
        "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
        k.ln_ppl_ratio.value, k.ln_ppl_ratio.uncertainty
    );
    println!(
        "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
        k.ppl_ratio.value, k.ppl_ratio.uncertainty
    );
    println!(
        "Mean    KLD: {:10.6} ± {:10.6}   median {:.6}, 99 % {:.6}, max {:.6}",
        k.kld.value,
        k.kld.uncertainty,
        pct(&k.kld_percentiles, "median"),
        pct(&k.kld_percentiles, "99"),
        pct(&k.kld_percentiles, "max")
    );
    println!(
        "Mean    Δp: {:6.3} ± {:5.3} %   RMS Δp: {:6.3} ± {:5.3} %",
        100.0 * k.delta_p.value,
        100.0 * k.delta_p.uncertainty,
        100.0 * k.delta_p_rms.value,
        100.0 * k.delta_p_rms.uncertainty
    );
    println!(
        "Same top p: {:6.3} ± {:5.3} %",
        100.0 * k.same_top_p.value,
        100.0 * k.same_top_p.uncertainty
    );
}
