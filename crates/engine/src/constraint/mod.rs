//! Constrained decoding: before each sampled token, the logits of every token that would
//! break a JSON Schema, a regular expression or a grammar are set to −∞.
//!
//! The grammar engine is [llguidance](https://github.com/guidance-ai/llguidance) (the one
//! behind llama.cpp's and vLLM's structured output); this module feeds it our World
//! vocabulary ([`ConstraintCompiler`], built once per vocabulary) and turns its errors into
//! [`EngineError::Constraint`] naming the construct.
//!
//! Per sequence, a [`Constraint`] walks the output:
//! 1. [`Constraint::prepare`] computes the allowed-token set for the next position (CPU,
//!    ≈ 10–500 µs; run it while the GPU computes the logits — [`crate::Engine::generate`]
//!    and the server do);
//! 2. [`Constraint::apply`] sets the disallowed logits to −∞ (before penalties, top-p and
//!    temperature: the sampler then only ever sees allowed tokens);
//! 3. [`Constraint::commit`] advances the matcher by the sampled token.
//!
//! A constraint is *complete* when its matcher accepts what was generated and nothing but
//! end-of-text (token 0) may follow; a generation cut by `max_tokens` before that is not
//! complete, and callers say so (`finish_reason: "length"`), never claiming validity.
//!
//! Grammar inputs: JSON Schema (draft 2020-12 subset: see docs/structured-output.md),
//! Rust-`regex` syntax regular expressions, llguidance's Lark dialect, and llama.cpp GBNF
//! (translated to Lark by [`gbnf_to_lark`]). Inputs are bounded by [`MAX_SPEC_BYTES`].

mod gbnf;
#[cfg(test)]
mod tests;
mod vocab;

use std::time::{Duration, Instant};

use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;
use serde::{Deserialize, Serialize};
use toktrie::SimpleVob;

pub use gbnf::gbnf_to_lark;
pub use vocab::ConstraintCompiler;

use crate::error::{EngineError, Result};
use crate::tokenizer::END_OF_TEXT;

/// Largest schema / regex / grammar text accepted, bytes (1 MiB).
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// What the output must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum ConstraintSpec {
    /// A JSON Schema (an object, or `true`); the output is one JSON value.
    /// Unless the schema sets llguidance's `x-guidance` options, the output is compact
    /// JSON with `", "` and `": "` separators (no free whitespace: a model cannot wander
    /// off into blank lines).
    JsonSchema(serde_json::Value),
    /// Any JSON object (OpenAI's `{"type": "json_object"}`).
    JsonObject,
    /// A regular expression (Rust `regex` syntax) the whole output must match.
    Regex(String),
    /// A grammar in llguidance's Lark dialect (`start:` is the top rule).
    Lark(String),
    /// A grammar in llama.cpp's GBNF (`root ::=` is the top rule).
    Gbnf(String),
}

impl ConstraintSpec {
    /// The construct's name in messages: `json_schema`, `regex`, `lark`, `gbnf`.
    pub fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonSchema(_) | ConstraintSpec::JsonObject => "json_schema",
            ConstraintSpec::Regex(_) => "regex",
            ConstraintSpec::Lark(_) => "lark",
            ConstraintSpec::Gbnf(_) => "gbnf",
        }
    }

    /// The constraint after one leading space: how an RWKV chat reply starts after
    /// `Assistant:`. JSON kinds become the Lark grammar `start: " " data` with `data:
    /// %json {schema}` (compact, as [`ConstraintSpec::JsonSchema`]); regexes and grammars
    /// are returned unchanged (they say themselves what comes first).
    pub fn after_space(self) -> ConstraintSpec {
        let schema = match self {
            ConstraintSpec::JsonSchema(v) => with_compact(&v),
            ConstraintSpec::JsonObject => with_compact(&serde_json::json!({"type": "object"})),
            other => return other,
        };
        ConstraintSpec::Lark(format!(
            "start: \" \" data\ndata: %json {}\n",
            serde_json::to_string(&schema).unwrap_or_default()
        ))
    }

    fn size(&self) -> usize {
        match self {
            ConstraintSpec::JsonSchema(v) => serde_json::to_string(v).map_or(0, |s| s.len()),
            ConstraintSpec::JsonObject => 0,
            ConstraintSpec::Regex(s) | ConstraintSpec::Lark(s) | ConstraintSpec::Gbnf(s) => s.len(),
        }
    }

    /// The llguidance grammar for this spec.
    fn to_grammar(&self) -> Result<TopLevelGrammar> {
        Ok(match self {
            ConstraintSpec::JsonSchema(v) => TopLevelGrammar::from_json_schema(with_compact(v)),
            ConstraintSpec::JsonObject => TopLevelGrammar::from_json_schema(with_compact(
                &serde_json::json!({"type": "object"}),
            )),
            ConstraintSpec::Regex(r) => TopLevelGrammar::from_regex(r),
            ConstraintSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            ConstraintSpec::Gbnf(g) => TopLevelGrammar::from_lark(gbnf_to_lark(g)?),
        })
    }
}

/// The llguidance options that make JSON output compact (see [`ConstraintSpec::JsonSchema`]).
pub fn compact_json_options() -> serde_json::Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

fn with_compact(schema: &serde_json::Value) -> serde_json::Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.entry("x-guidance").or_insert_with(compact_json_options);
    }
    s
}

/// One sequence's constraint: the matcher, its allowed-token set for the next position,
/// and its CPU time.
pub struct Constraint {
    matcher: Matcher,
    kind: &'static str,
    vocab: usize,
    /// The allowed set for the next position, once [`Self::prepare`] ran.
    mask: Option<SimpleVob>,
    mask_time: Duration,
    masks: usize,
    compile_time: Duration,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("kind", &self.kind)
            .field("masks", &self.masks)
            .finish()
    }
}

impl Constraint {
    /// Compiles `spec` against `compiler`'s vocabulary. Nothing is generated yet.
    ///
    /// Errors: [`EngineError::Constraint`] naming the kind (`json_schema`, `regex`,
    /// `lark`, `gbnf`) and llguidance's message (the unsupported keyword, the bad rule,
    /// the regex syntax error…); a spec over [`MAX_SPEC_BYTES`].
    pub fn compile(compiler: &ConstraintCompiler, spec: &ConstraintSpec) -> Result<Constraint> {
        let t0 = Instant::now();
        let kind = spec.kind();
        let size = spec.size();
        if size > MAX_SPEC_BYTES {
            return Err(EngineError::constraint(
                kind,
                format!("{size} bytes, at most {MAX_SPEC_BYTES}"),
            ));
        }
        let grammar = spec.to_grammar()?;
        // llguidance reports errors as values; a panic inside it on hostile input would be
        // its bug, and is still turned into an error here (library code never panics).
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compiler.factory.create_parser(grammar)
        }))
        .map_err(|_| EngineError::constraint(kind, "the grammar engine panicked on this input"))?
        .map_err(|e| EngineError::constraint(kind, clean(&e.to_string())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(EngineError::constraint(kind, clean(&e)));
        }
        Ok(Constraint {
            matcher,
            kind,
            vocab: compiler.vocab,
            mask: None,
            mask_time: Duration::ZERO,
            masks: 0,
            compile_time: t0.elapsed(),
        })
    }

    /// Computes the allowed-token set for the next position if not yet done (the CPU
    /// work; call it while the GPU runs the forward pass).
    ///
    /// Errors: [`EngineError::Constraint`] when the matcher is in an error state.
    pub fn prepare(&mut self) -> Result<()> {
        if self.mask.is_some() {
            return Ok(());
        }
        let t0 = Instant::now();
        let m = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| EngineError::constraint(self.kind, clean(&e.to_string())))?;
        self.mask_time += t0.elapsed();
        self.masks += 1;
        self.mask = Some(m);
        Ok(())
    }

    /// Sets the logit of every token the constraint does not allow next to −∞
    /// (`logits`: `[vocab]`, f32). Prepares the mask first when needed.
    ///
    /// Errors: [`EngineError::InvalidInput`] when `logits.len()` is not the compiler's
    /// vocabulary; as [`Self::prepare`].
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<()> {
        if logits.len() != self.vocab {
            return Err(EngineError::invalid(format!(
                "constraint: {} logits for a vocabulary of {}",
                logits.len(),
                self.vocab
            )));
        }
        self.prepare()?;
        let Some(mask) = self.mask.as_ref() else {
            return Ok(());
        };
        // 32 tokens per mask word; whole zero words (most of them) in one fill.
        let words = mask.as_slice();
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == 0 {
                chunk.fill(f32::NEG_INFINITY);
            } else if bits != u32::MAX {
                for (j, l) in chunk.iter_mut().enumerate() {
                    if bits & (1 << j) == 0 {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
        Ok(())
    }

    /// The one token allowed next when the constraint allows exactly one (then sampling
    /// is pointless: end-of-text once the structure is complete).
    pub fn forced(&mut self) -> Result<Option<u32>> {
        self.prepare()?;
        Ok(self.mask.as_ref().and_then(|m| {
            if m.num_set() == 1 {
                m.first_bit_set().map(|t| t as u32)
            } else {
                None
            }
        }))
    }

    /// Advances the matcher by the sampled `token`. End-of-text (token 0) is accepted
    /// only where the output is complete.
    ///
    /// Errors: [`EngineError::Constraint`] when `token` was not allowed (the caller did
    /// not apply the mask) or the matcher fails.
    pub fn commit(&mut self, token: u32) -> Result<()> {
        self.mask = None;
        if token == END_OF_TEXT && self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| EngineError::constraint(self.kind, clean(&e.to_string())))
    }

    /// Whether what was committed is a complete match (end-of-text would be allowed).
    pub fn is_complete(&mut self) -> bool {
        self.matcher.is_stopped() || self.matcher.is_accepting().unwrap_or(false)
    }

    /// Whether the matcher has stopped (nothing can follow; cheap, unlike
    /// [`Self::is_finished`], which may compute a mask).
    pub fn is_stopped(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether nothing but end-of-text may follow (the structure is closed).
    pub fn is_finished(&mut self) -> bool {
        if self.matcher.is_stopped() {
            return true;
        }
        matches!(self.forced(), Ok(Some(END_OF_TEXT)))
    }

    /// CPU time spent computing masks, and how many were computed.
    pub fn mask_stats(&self) -> (Duration, usize) {
        (self.mask_time, self.masks)
    }

    /// Time [`Self::compile`] took.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }
}

/// llguidance messages can be long and multi-line; keep the first lines, trimmed.
fn clean(msg: &str) -> String {
    let mut out: String = msg.lines().take(6).collect::<Vec<_>>().join("; ");
    if out.len() > 600 {
        let mut cut = 600;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}
