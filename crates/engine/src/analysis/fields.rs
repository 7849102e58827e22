//! Field analysis: short labelled texts (title, summary, keywords…) embedded in one
//! batched pass — optionally each *after* a document (a fork of its state), so a
//! field's vector means "this field in the context of this document" — compared by
//! cosine similarity.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::analysis::cache::EmbeddingCache;
use crate::analysis::embed::{cosine, norm, EmbedInput, Pooling};
use crate::api::{Engine, StateId};
use crate::error::{EngineError, Result};
use crate::format::state_file::ModelFingerprint;

/// Most fields per analysis: the similarity matrix grows as the square (1024 fields:
/// 1 M entries, ≈ 4 MiB as f32, ≈ 10 MB as JSON). More is an error, not a slow answer.
pub const MAX_FIELDS: usize = 1024;
/// Most tokens per field: fields are short texts; a long text belongs in the document.
pub const MAX_FIELD_TOKENS: usize = 4096;

/// A labelled text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    pub label: String,
    pub text: String,
}

impl Field {
    pub fn new(label: impl Into<String>, text: impl Into<String>) -> Self {
        Field {
            label: label.into(),
            text: text.into(),
        }
    }

    /// Parses `"Label=text"` (split at the first `=`).
    ///
    /// Errors: [`EngineError::InvalidInput`] when there is no `=`.
    pub fn parse(spec: &str) -> Result<Self> {
        match spec.split_once('=') {
            Some((l, t)) => Ok(Field::new(l.trim(), t)),
            None => Err(EngineError::invalid(format!(
                "field `{spec}` is not of the form Label=text"
            ))),
        }
    }
}

/// Options of [`Engine::analyze_fields`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FieldOptions {
    pub pooling: Pooling,
}

/// One field's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldResult {
    pub label: String,
    /// Tokens of the field's text.
    pub tokens: usize,
    /// Euclidean norm of the embedding.
    pub norm: f32,
    /// `[C]` embedding.
    pub embedding: Vec<f32>,
    /// Whether the embedding came from the cache.
    pub cached: bool,
    /// This field's share of the forward time: its tokens / all computed fields' tokens
    /// (passes are batched, so per-field GPU time is apportioned, not measured); 0 when
    /// cached.
    pub time_share: f64,
    /// `time_share × forward_ms`, ms.
    pub time_ms: f64,
}

/// Where the time went, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FieldTiming {
    /// Whole call.
    pub total_ms: f64,
    pub tokenize_ms: f64,
    /// Embedding (cache lookups, the document state's identity, the batched forward).
    pub forward_ms: f64,
    /// Norms and the similarity matrix.
    pub similarity_ms: f64,
}

/// Result of [`Engine::analyze_fields`] (what `rwkv fields --json` prints and the app
/// shows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldAnalysis {
    pub model: ModelFingerprint,
    pub pooling: Pooling,
    /// Whether each field was embedded after a document's state.
    pub with_document: bool,
    /// C.
    pub dim: usize,
    pub fields: Vec<FieldResult>,
    /// `[F, F]` cosine similarities, `similarity[i][j]` between fields `i` and `j`.
    pub similarity: Vec<Vec<f32>>,
    pub timing: FieldTiming,
}

fn elapsed_ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

impl Engine {
    /// Embeds `fields` in one batched pass (each from the zero state, or from a fork of
    /// `document` — left untouched), then computes norms and the cosine-similarity
    /// matrix. With `cache`, fields already embedded in the same context are not
    /// computed again.
    ///
    /// Errors ([`EngineError::InvalidInput`]): no fields; more than [`MAX_FIELDS`]; an
    /// empty label or a text with no tokens (named); a text over [`MAX_FIELD_TOKENS`]
    /// tokens. [`EngineError::State`] for an unknown `document`; GPU errors.
    pub fn analyze_fields(
        &mut self,
        fields: &[Field],
        document: Option<StateId>,
        opts: &FieldOptions,
        cache: Option<&mut EmbeddingCache>,
    ) -> Result<FieldAnalysis> {
        let t0 = Instant::now();
        let ids = self.field_tokens(fields)?;
        let tokenize_ms = elapsed_ms(t0);
        let t1 = Instant::now();
        let inputs: Vec<EmbedInput> = ids
            .iter()
            .map(|t| EmbedInput {
                tokens: t,
                from: document,
            })
            .collect();
        let (emb, hits) = match cache {
            Some(c) => self.embed_cached(c, &inputs, opts.pooling)?,
            None => {
                let e = self.embed(&inputs, opts.pooling)?;
                (e, vec![false; inputs.len()])
            }
        };
        let forward_ms = elapsed_ms(t1);
        let t2 = Instant::now();
        let computed_tokens: usize = ids
            .iter()
            .zip(&hits)
            .filter(|(_, &h)| !h)
            .map(|(t, _)| t.len())
            .sum();
        let mut results = Vec::with_capacity(fields.len());
        for (i, f) in fields.iter().enumerate() {
            let v = emb.row(i).ok_or_else(|| EngineError::Op {
                op: "analyze_fields",
                what: format!("embedding {i} missing of {}", emb.len()),
            })?;
            let share = if hits[i] || computed_tokens == 0 {
                0.0
            } else {
                ids[i].len() as f64 / computed_tokens as f64
            };
            results.push(FieldResult {
                label: f.label.clone(),
                tokens: ids[i].len(),
                norm: norm(v),
                embedding: v.to_vec(),
                cached: hits[i],
                time_share: share,
                time_ms: share * forward_ms,
            });
        }
        let similarity = similarity_matrix(&results);
        let similarity_ms = elapsed_ms(t2);
        Ok(FieldAnalysis {
            model: self.fingerprint(),
            pooling: opts.pooling,
            with_document: document.is_some(),
            dim: emb.dim,
            fields: results,
            similarity,
            timing: FieldTiming {
                total_ms: elapsed_ms(t0),
                tokenize_ms,
                forward_ms,
                similarity_ms,
            },
        })
    }

    /// The token ids of `fields`, each checked: 1 to [`MAX_FIELDS`] fields, labels and
    /// texts not empty, 1 to [`MAX_FIELD_TOKENS`] tokens each, and the analysis's output
    /// within [`crate::output::MAX_OUTPUT_BYTES`] ([`EngineError::InvalidInput`] /
    /// [`EngineError::OutputTooLarge`] otherwise).
    fn field_tokens(&self, fields: &[Field]) -> Result<Vec<Vec<u32>>> {
        if fields.is_empty() {
            return Err(EngineError::invalid("no fields given: need at least one"));
        }
        if fields.len() > MAX_FIELDS {
            return Err(EngineError::invalid(format!(
                "{} fields given; at most {MAX_FIELDS} per analysis (the similarity \
                 matrix grows as the square): split them into several analyses",
                fields.len()
            )));
        }
        for (i, f) in fields.iter().enumerate() {
            if f.label.trim().is_empty() {
                return Err(EngineError::invalid(format!(
                    "field {i} has an empty label"
                )));
            }
            if f.text.trim().is_empty() {
                return Err(EngineError::invalid(format!(
                    "field {i} `{}` has an empty text",
                    f.label
                )));
            }
        }
        let ids: Vec<Vec<u32>> = fields
            .iter()
            .map(|f| self.tokenizer().encode(&f.text))
            .collect();
        for (f, t) in fields.iter().zip(&ids) {
            if t.is_empty() {
                return Err(EngineError::invalid(format!(
                    "field `{}` encodes to no tokens",
                    f.label
                )));
            }
            if t.len() > MAX_FIELD_TOKENS {
                return Err(EngineError::invalid(format!(
                    "field `{}` has {} tokens; at most {MAX_FIELD_TOKENS} (put long text \
                     in the document)",
                    f.label,
                    t.len()
                )));
            }
        }
        // What the analysis returns: F embeddings of C and the F × F matrix (bounded by
        // MAX_FIELDS already; checked like every output all the same).
        let (nf, c) = (fields.len() as u64, self.config().n_embd as u64);
        crate::output::check(
            || format!("a field analysis of {nf} fields × {c} and its {nf}×{nf} similarities"),
            nf.saturating_mul(c).saturating_add(nf.saturating_mul(nf)),
            4,
        )?;
        Ok(ids)
    }
}

/// Cosine similarities of every pair of the results' embeddings, `[F][F]`, symmetric.
fn similarity_matrix(results: &[FieldResult]) -> Vec<Vec<f32>> {
    let n = results.len();
    let mut similarity = vec![vec![0f32; n]; n];
    for i in 0..n {
        for j in i..n {
            let s = cosine(&results[i].embedding, &results[j].embedding);
            similarity[i][j] = s;
            similarity[j][i] = s;
        }
    }
    similarity
}
