//! `rwkv bench-constraint`: what constrained decoding costs on one model file.
//!
//! Figures (all medians unless named otherwise):
//! - `compiler_build_ms`: the vocabulary's token trie and llguidance factory (once per
//!   model, not per request);
//! - per constraint (a 15-property nested JSON Schema, llama.cpp's JSON GBNF, llguidance's
//!   own any-object JSON for comparison): `compile_ms`
//!   (the first-token delay a request pays), and `mask_us` — the CPU time of one
//!   allowed-token mask, walking a fixed valid document token by token (mean, p50, p99);
//! - decode: tok/s without a constraint and with the schema on the same prompt and
//!   sampler, the schema's mask time during that decode (µs/token: it runs while the GPU
//!   computes, so it costs tok/s only where it is longer than a step), and the first-token
//!   delay the schema adds (compile + first mask).

use std::time::Instant;

use clap::Args;
use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{
    CancelToken, Constraint, ConstraintCompiler, ConstraintSpec, Engine, GenerateOptions,
};
use serde::Serialize;

use crate::common::ModelArgs;

const MEDIUM_SCHEMA: &str = include_str!("../../engine/assets/constraint/medium_schema.json");
const JSON_GBNF: &str = include_str!("../../engine/assets/constraint/json.gbnf");
/// A document valid under both: the token walk of the `mask_us` figures.
const EXAMPLE: &str = r#"{"title": "Lease of the north barn and its yard", "kind": "lease", "signed": true, "date": "2024-03-01", "amount": 1200.5, "currency": "EUR", "term_months": 24, "parties": [{"name": "Anne Martin", "role": "lender", "address": {"city": "Lyon", "country": "FR"}}, {"name": "Farm Co", "role": "borrower"}], "governing_law": "French law", "renewal": null, "penalties": ["late payment 2%", "damage at cost"], "confidential": false, "risk": {"level": "low", "score": 12}}"#;
const PROMPT: &str = "User: Summarise the lease of the north barn as a JSON object.\n\nAssistant:";

#[derive(Args, Debug)]
pub struct BenchConstraintArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Tokens per decode run.
    #[arg(long, default_value_t = 256)]
    pub gen: usize,
    /// Timed runs of each figure (after one warm-up).
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Print the report as JSON on stdout (the text goes to stderr either way).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct MaskFigures {
    name: &'static str,
    compile_ms: f64,
    /// The first mask (after the compile, before the first token: not overlapped).
    first_mask_us: f64,
    mask_us_mean: f64,
    mask_us_p50: f64,
    mask_us_p99: f64,
    tokens_walked: usize,
}

#[derive(Debug, Serialize)]
struct DecodeFigures {
    tokens_per_run: usize,
    free_tok_s: f64,
    schema_tok_s: f64,
    /// `schema_tok_s / free_tok_s`.
    ratio: f64,
    /// Mean tokens a schema run generated (it stops where the JSON is complete).
    schema_tokens_mean: f64,
    schema_mask_us_per_token: f64,
    /// What the schema adds before the first token: its compile and first mask (both on
    /// the critical path), ms.
    schema_first_token_added_ms: f64,
    /// The same seen from outside: median (compile + time to first token) with the schema
    /// − median time to first token without, ms (noisy where the GPU's step time varies).
    schema_ttft_difference_ms: f64,
    schema_complete_runs: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    adapter: String,
    compiler_build_ms: f64,
    masks: Vec<MaskFigures>,
    decode: DecodeFigures,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Compile time and per-token mask time of `spec`, walking [`EXAMPLE`]'s tokens.
fn mask_figures(
    eng: &Engine,
    comp: &ConstraintCompiler,
    name: &'static str,
    spec: &ConstraintSpec,
    repeat: usize,
) -> anyhow::Result<MaskFigures> {
    let mut compile = Vec::new();
    let mut first = Vec::new();
    let mut per_token = Vec::new();
    let ids = eng.tokenizer().encode(EXAMPLE);
    for r in 0..=repeat {
        let t0 = Instant::now();
        let mut c = Constraint::compile(comp, spec)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        for (i, &t) in ids.iter().enumerate() {
            let t0 = Instant::now();
            c.prepare()?;
            let us = t0.elapsed().as_secs_f64() * 1e6;
            c.commit(t)?;
            if r > 0 {
                per_token.push(us);
                if i == 0 {
                    first.push(us);
                }
            }
        }
        anyhow::ensure!(
            c.is_complete(),
            "{name}: the example document is not a match"
        );
        if r > 0 {
            compile.push(ms);
        }
    }
    let mean = per_token.iter().sum::<f64>() / per_token.len().max(1) as f64;
    per_token.sort_by(f64::total_cmp);
    Ok(MaskFigures {
        name,
        compile_ms: median(&mut compile),
        first_mask_us: median(&mut first),
        mask_us_mean: mean,
        mask_us_p50: pct(&per_token, 0.5),
        mask_us_p99: pct(&per_token, 0.99),
        tokens_walked: ids.len(),
    })
}

/// One generation of [`PROMPT`] from a fresh state.
fn run_once(eng: &mut Engine, opts: &GenerateOptions) -> anyhow::Result<rwkv_engine::TextOutput> {
    let st = eng.new_state()?;
    let r = eng.generate_text(st, PROMPT, opts, &CancelToken::new(), &mut |_| true);
    eng.free_state(st)?;
    Ok(r?)
}

fn decode_figures(
    eng: &mut Engine,
    schema: &ConstraintSpec,
    added_ms: f64,
    a: &BenchConstraintArgs,
) -> anyhow::Result<DecodeFigures> {
    let sampler = SamplerOptions {
        seed: Some(7),
        stop_tokens: Vec::new(),
        stop_strings: Vec::new(),
        ..Default::default()
    };
    let free = GenerateOptions {
        max_tokens: a.gen,
        sampler: sampler.clone(),
        constraint: None,
    };
    let constrained = GenerateOptions {
        constraint: Some(schema.clone()),
        ..free.clone()
    };
    let (mut free_rate, mut schema_rate, mut free_ttft, mut schema_delay) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut tokens, mut mask_ms, mut masks, mut complete) = (0usize, 0.0, 0usize, 0usize);
    for r in 0..=a.repeat {
        let f = run_once(eng, &free)?;
        let s = run_once(eng, &constrained)?;
        if r == 0 {
            continue; // warm-up
        }
        free_rate.push(f.stats.decode_tok_s);
        free_ttft.push(f.stats.ttft_ms);
        schema_rate.push(s.stats.decode_tok_s);
        schema_delay.push(s.stats.constraint_compile_ms + s.stats.ttft_ms);
        tokens += s.stats.generated_tokens;
        mask_ms += s.stats.constraint_mask_ms;
        masks += s.stats.constraint_masks;
        complete += usize::from(s.complete == Some(true));
    }
    let free_tok_s = median(&mut free_rate);
    let schema_tok_s = median(&mut schema_rate);
    Ok(DecodeFigures {
        tokens_per_run: a.gen,
        free_tok_s,
        schema_tok_s,
        ratio: schema_tok_s / free_tok_s.max(1e-9),
        schema_tokens_mean: tokens as f64 / a.repeat.max(1) as f64,
        schema_mask_us_per_token: mask_ms * 1e3 / masks.max(1) as f64,
        schema_first_token_added_ms: added_ms,
        schema_ttft_difference_ms: median(&mut schema_delay) - median(&mut free_ttft),
        schema_complete_runs: complete,
    })
}

pub fn run(a: BenchConstraintArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(false)?;
    let t0 = Instant::now();
    let comp = ConstraintCompiler::new(eng.tokenizer(), eng.info().config.vocab_size)?;
    let compiler_build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let schema = ConstraintSpec::JsonSchema(serde_json::from_str(MEDIUM_SCHEMA)?);
    let gbnf = ConstraintSpec::Gbnf(JSON_GBNF.to_string());
    let masks = vec![
        mask_figures(&eng, &comp, "medium_schema", &schema, a.repeat)?,
        mask_figures(&eng, &comp, "json_gbnf", &gbnf, a.repeat)?,
        // The same language as the GBNF through llguidance's own JSON (strings are single
        // lexemes there, one character a grammar step in the GBNF).
        mask_figures(
            &eng,
            &comp,
            "json_object",
            &ConstraintSpec::JsonObject,
            a.repeat,
        )?,
    ];
    let added_ms = masks[0].compile_ms + masks[0].first_mask_us / 1e3;
    let decode = decode_figures(&mut eng, &schema, added_ms, &a)?;
    let report = Report {
        model: a.model.model.display().to_string(),
        adapter: eng.info().adapter.name.clone(),
        compiler_build_ms,
        masks,
        decode,
    };
    eprintln!(
        "{} on {}\nvocabulary trie + factory: {:.0} ms (once per model)",
        report.model, report.adapter, report.compiler_build_ms
    );
    for m in &report.masks {
        eprintln!(
            "{:<14} compile {:>7.2} ms, first mask {:>7.1} µs | mask µs/token mean {:>7.1}  p50 {:>7.1}  p99 {:>7.1} ({} tokens)",
            m.name, m.compile_ms, m.first_mask_us, m.mask_us_mean, m.mask_us_p50, m.mask_us_p99, m.tokens_walked
        );
    }
    let d = &report.decode;
    eprintln!(
        "decode ({} tokens max): free {:.1} tok/s | schema {:.1} tok/s = {:.2}× ({:.0} tokens/run, {}/{} complete) | mask in decode {:.1} µs/token | first token: schema adds {:.2} ms (compile + first mask; TTFT difference seen {:+.1} ms)",
        d.tokens_per_run, d.free_tok_s, d.schema_tok_s, d.ratio, d.schema_tokens_mean,
        d.schema_complete_runs, a.repeat, d.schema_mask_us_per_token, d.schema_first_token_added_ms,
        d.schema_ttft_difference_ms
    );
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}
