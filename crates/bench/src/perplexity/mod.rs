//! Perplexity and KL divergence over a text, measured as `llama-perplexity` measures them,
//! so the two programs' figures compare on the same file and text.
//!
//! The tokens are cut into chunks of `ctx`; each chunk runs from a fresh state and
//! scores its second half: the logits at positions `ctx/2 … ctx−2` against the tokens
//! that follow them (`ctx − 1 − ctx/2` positions a chunk). Perplexity is
//! `exp(mean −ln p(next token))` over every scored position. With a base file
//! ([`logits_file`], llama.cpp's format, written by [`perplexity`] or by
//! `llama-perplexity --kl-divergence-base`) the same positions are scored against the
//! base model's log-probabilities ([`stats::kl_row`]).
//!
//! Source of the method: llama.cpp 0c1e570 `tools/perplexity/perplexity.cpp`
//! (`perplexity`, `kl_divergence`), itself after
//! <https://huggingface.co/docs/transformers/perplexity>.

pub mod logits_file;
pub mod stats;

use std::path::Path;
use std::time::Instant;

use rwkv_engine::{Engine, EngineError, Result, Rows, SeqInput, StateId, Want};
use serde::{Deserialize, Serialize};

use logits_file::{encode_row, row_len, scored_rows, Header, Reader, Writer};
use stats::{kl_row, perplexity_of, Estimate, KlRow, KlSummary, Sums};

/// Logits held on the host at once: chunks run together in one forward call while
/// their scored rows fit this many bytes.
const GROUP_BYTES: usize = 512 << 20;

/// How the chunks run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scoring {
    /// Score at most this many chunks.
    pub limit: Option<usize>,
    /// Score through the one-token (decode) path: each scored position is its own
    /// forward pass of one token, as generated tokens are, instead of a prefill pass
    /// over the chunk's second half. Slower; it measures the decode kernels (8-bit
    /// activations included) where the default measures the prefill kernels.
    pub decode: bool,
}

/// What [`perplexity`] and [`kl_divergence`] report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PerplexityReport {
    /// `exp(mean nll)` over the scored positions.
    pub perplexity: f64,
    /// Its standard error (llama.cpp's `±`).
    pub perplexity_uncertainty: f64,
    /// Mean negative log-likelihood, nats per token (= ln perplexity).
    pub nll_mean: f64,
    /// Tokens a chunk holds.
    pub ctx: usize,
    /// Chunks scored.
    pub chunks: usize,
    /// Positions scored: `chunks · (ctx − 1 − ctx/2)`.
    pub scored: usize,
    /// Scored through the one-token path ([`Scoring::decode`]).
    pub decode: bool,
    /// Tokens of the whole input (the text's or the base file's).
    pub input_tokens: usize,
    /// Seconds the engine ran (the chunks' forward passes), and the tokens it read per
    /// second.
    pub eval_seconds: f64,
    pub eval_tokens_per_s: f64,
    /// Wall seconds of the whole measurement (scoring on the CPU included).
    pub seconds: f64,
    /// Against a base file: the KL-divergence figures.
    pub kl: Option<KlSummary>,
}

/// What [`for_each_chunk`] hands each chunk to: its scored logits
/// (`[scored_rows(ctx) · vocab]` f32) and the tokens they predict.
type ChunkVisitor<'a> = dyn FnMut(&[f32], &[u32]) -> Result<()> + 'a;

/// Chunks `n_tokens` tokens give at `ctx`, at most `limit`.
///
/// Errors: [`EngineError::InvalidInput`] when `ctx < 3` (no scored position) or the
/// input holds fewer than `2 · ctx` tokens (llama.cpp's rule).
pub fn chunk_count(n_tokens: usize, ctx: usize, limit: Option<usize>) -> Result<usize> {
    if ctx < 3 {
        return Err(EngineError::invalid(format!(
            "ctx {ctx}: a chunk needs at least 3 tokens to score one"
        )));
    }
    if n_tokens < 2 * ctx {
        return Err(EngineError::invalid(format!(
            "the input tokenizes to {n_tokens} tokens; a context of {ctx} needs at least {} \
             (two chunks)",
            2 * ctx
        )));
    }
    let n = n_tokens / ctx;
    Ok(limit.map_or(n, |l| n.min(l.max(1))))
}

/// Runs chunk after chunk of `tokens` (several in one forward call when their logits fit
/// [`GROUP_BYTES`]; one at a time, a token a pass, with `decode`) and gives each chunk's
/// scored logits (`[scored_rows(ctx) · vocab]` f32) with the tokens they predict to
/// `visit`, in order. `start` makes each chunk's fresh state (a zero state, or the
/// model's initial state); states are freed whatever happens. Returns the seconds the
/// forward calls took.
fn for_each_chunk(
    engine: &mut Engine,
    tokens: &[u32],
    ctx: usize,
    chunks: usize,
    decode: bool,
    start: &mut dyn FnMut(&mut Engine) -> Result<StateId>,
    visit: &mut ChunkVisitor,
) -> Result<f64> {
    let first = ctx / 2;
    let rows = scored_rows(ctx);
    let vocab = engine.config().vocab_size;
    let group = if decode {
        1
    } else {
        (GROUP_BYTES / (rows * vocab * 4).max(1)).clamp(1, 16)
    };
    let mut eval = 0f64;
    let mut c0 = 0;
    while c0 < chunks {
        let ids: Vec<usize> = (c0..chunks.min(c0 + group)).collect();
        let mut states = Vec::with_capacity(ids.len());
        let t0 = Instant::now();
        let run = (|| {
            for _ in &ids {
                states.push(start(engine)?);
            }
            let prefix: Vec<SeqInput> = ids
                .iter()
                .zip(&states)
                .map(|(&c, &state)| SeqInput {
                    state,
                    tokens: &tokens[c * ctx..c * ctx + first],
                    rows: Rows::None,
                })
                .collect();
            let none = Want {
                logits: false,
                embeddings: false,
            };
            engine.forward(&prefix, none, None)?;
            if decode {
                return one_token_passes(
                    engine,
                    states[0],
                    &tokens[ids[0] * ctx + first..ids[0] * ctx + ctx - 1],
                );
            }
            let scored: Vec<SeqInput> = ids
                .iter()
                .zip(&states)
                .map(|(&c, &state)| SeqInput {
                    state,
                    tokens: &tokens[c * ctx + first..c * ctx + ctx - 1],
                    rows: Rows::All,
                })
                .collect();
            let logits = Want {
                logits: true,
                embeddings: false,
            };
            Ok(engine.forward(&scored, logits, None)?.logits)
        })();
        for s in states {
            engine.free_state(s)?;
        }
        let out = run?;
        eval += t0.elapsed().as_secs_f64();
        for (k, &c) in ids.iter().enumerate() {
            visit(&out[k], &tokens[c * ctx + first + 1..(c + 1) * ctx])?;
        }
        c0 += ids.len();
    }
    Ok(eval)
}

/// Feeds `tokens` to `state` one forward pass each and returns the logits after each
/// (`[1][tokens.len() · vocab]`, the shape of a one-sequence forward output).
fn one_token_passes(engine: &mut Engine, state: StateId, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
    let want = Want {
        logits: true,
        embeddings: false,
    };
    let mut all = Vec::with_capacity(tokens.len() * engine.config().vocab_size);
    for t in tokens {
        let seq = SeqInput {
            state,
            tokens: std::slice::from_ref(t),
            rows: Rows::Last,
        };
        let out = engine.forward(&[seq], want, None)?;
        all.extend(out.logits.into_iter().flatten());
    }
    Ok(vec![all])
}

/// Applies `f` to each row of `logits` (`[targets.len() · vocab]`) on every core,
/// keeping the results in row order.
fn map_rows<T: Send>(
    logits: &[f32],
    vocab: usize,
    targets: &[u32],
    f: &(dyn Fn(usize, &[f32], usize) -> T + Sync),
) -> Result<Vec<T>> {
    let n = targets.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, n.max(1));
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .step_by(per.max(1))
            .map(|r0| {
                let r1 = (r0 + per).min(n);
                s.spawn(move || {
                    (r0..r1)
                        .map(|r| f(r, &logits[r * vocab..(r + 1) * vocab], targets[r] as usize))
                        .collect::<Vec<T>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for h in handles {
            out.extend(h.join().map_err(|_| EngineError::Op {
                op: "perplexity",
                what: "a scoring thread panicked".into(),
            })?);
        }
        Ok(out)
    })
}

/// Perplexity of `tokens` at chunk length `ctx` (chunks run as `how` says), and, with
/// `save_base`, every scored row written as a base file for [`kl_divergence`] (and for
/// `llama-perplexity --kl-divergence`).
///
/// Errors: those of [`chunk_count`], of the forward passes and of writing the file.
pub fn perplexity(
    engine: &mut Engine,
    tokens: &[u32],
    ctx: usize,
    how: Scoring,
    start: &mut dyn FnMut(&mut Engine) -> Result<StateId>,
    save_base: Option<&Path>,
) -> Result<PerplexityReport> {
    let t0 = Instant::now();
    let chunks = chunk_count(tokens.len(), ctx, how.limit)?;
    let vocab = engine.config().vocab_size;
    let nv = row_len(vocab);
    let mut writer = match save_base {
        Some(p) => Some(Writer::create(
            p,
            &Header {
                n_ctx: ctx,
                n_vocab: vocab,
                n_chunk: chunks,
                tokens: tokens[..chunks * ctx].to_vec(),
            },
        )?),
        None => None,
    };
    let save = writer.is_some();
    let mut nll = Sums::default();
    let mut rows = Vec::new();
    let eval = for_each_chunk(
        engine,
        tokens,
        ctx,
        chunks,
        how.decode,
        start,
        &mut |logits, next| {
            let per_row = map_rows(logits, vocab, next, &|_, row, target| {
                if save {
                    let mut q = vec![0u16; nv];
                    (encode_row(row, target, &mut q), q)
                } else {
                    (stats::nll_row(row, target), Vec::new())
                }
            })?;
            rows.clear();
            for (v, q) in per_row {
                nll.add(v);
                rows.extend_from_slice(&q);
            }
            match writer.as_mut() {
                Some(w) => w.chunk(&rows),
                None => Ok(()),
            }
        },
    )?;
    if let Some(w) = writer {
        w.finish()?;
    }
    let run = Run {
        ctx,
        chunks,
        input_tokens: tokens.len(),
        decode: how.decode,
    };
    Ok(report(&nll, run, eval, t0, None))
}

/// Scores the model against a base file (`llama-perplexity --kl-divergence` semantics):
/// its tokens, chunk length and chunk count come from the file (at most `how.limit`
/// chunks).
///
/// Errors: [`EngineError::Malformed`] / [`EngineError::Io`] for the file,
/// [`EngineError::InvalidInput`] when its vocabulary size is not the model's, and those
/// of the forward passes.
pub fn kl_divergence(
    engine: &mut Engine,
    base: &Path,
    how: Scoring,
    start: &mut dyn FnMut(&mut Engine) -> Result<StateId>,
) -> Result<PerplexityReport> {
    let t0 = Instant::now();
    let mut reader = Reader::open(base)?;
    let h = reader.header.clone();
    let vocab = engine.config().vocab_size;
    if h.n_vocab != vocab {
        return Err(EngineError::invalid(format!(
            "{}: the base has a vocabulary of {} tokens, the model {vocab}",
            base.display(),
            h.n_vocab
        )));
    }
    let chunks = how.limit.map_or(h.n_chunk, |l| h.n_chunk.min(l.max(1)));
    let nv = row_len(vocab);
    let mut all: Vec<KlRow> = Vec::with_capacity(chunks * scored_rows(h.n_ctx));
    let mut base_rows = Vec::new();
    let eval = for_each_chunk(
        engine,
        &h.tokens,
        h.n_ctx,
        chunks,
        how.decode,
        start,
        &mut |logits, next| {
            reader.chunk(&mut base_rows)?;
            let b = &base_rows;
            all.extend(map_rows(logits, vocab, next, &|r, row, target| {
                kl_row(row, &b[r * nv..(r + 1) * nv], target)
            })?);
            Ok(())
        },
    )?;
    let mut nll = Sums::default();
    for r in &all {
        nll.add(r.nll);
    }
    let kl = stats::summarize(&all);
    let run = Run {
        ctx: h.n_ctx,
        chunks,
        input_tokens: h.tokens.len(),
        decode: how.decode,
    };
    Ok(report(&nll, run, eval, t0, kl))
}

/// What a measurement ran over.
struct Run {
    ctx: usize,
    chunks: usize,
    input_tokens: usize,
    decode: bool,
}

fn report(nll: &Sums, run: Run, eval: f64, t0: Instant, kl: Option<KlSummary>) -> PerplexityReport {
    let Run {
        ctx,
        chunks,
        input_tokens,
        decode,
    } = run;
    let Estimate { value, uncertainty } = perplexity_of(nll);
    PerplexityReport {
        perplexity: value,
        perplexity_uncertainty: uncertainty,
        nll_mean: nll.mean().value,
        ctx,
        chunks,
        scored: nll.n,
        decode,
        input_tokens,
        eval_seconds: eval,
        eval_tokens_per_s: (chunks * (ctx - 1)) as f64 / eval.max(1e-9),
        seconds: t0.elapsed().as_secs_f64(),
        kl,
    }
}
