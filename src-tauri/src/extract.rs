//! "Extract fields as JSON": a document's state continued with a request for its fields,
//! the reply constrained to a JSON Schema (docs/structured-output.md). The document is
//! never prefilled again when its state file is usable.

use std::time::Instant;

use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{CancelToken, ConstraintSpec, GenerateOptions};
use serde::Serialize;

use crate::chat::start_state;
use crate::error::{AppError, AppResult};
use crate::store::Store;
use crate::worker::EngineHandle;

/// Most tokens of one extraction.
pub const MAX_EXTRACT_TOKENS: usize = 2048;

/// The turn that asks for the fields (after the document, as a chat's first turn).
pub const EXTRACT_PROMPT: &str =
    "\n\nUser: Extract the fields of this document as JSON.\n\nAssistant:";

/// What [`extract_json`] returns (mirrored by `Extracted` in `src/lib/api.ts`).
#[derive(Debug, Clone, Serialize)]
pub struct Extracted {
    /// The JSON text (valid against the schema when `complete`).
    pub json: String,
    /// `false`: `max_tokens` cut the JSON (it is then not valid).
    pub complete: bool,
    pub generated_tokens: usize,
    pub decode_tok_s: f64,
    /// Loading (or prefilling again) the document's state, ms.
    pub setup_ms: f64,
    /// Compiling the schema, ms.
    pub compile_ms: f64,
}

/// Fills `schema` from document `id`: greedy decoding (the most likely reading of the
/// document), at most `max_tokens` tokens.
///
/// Errors: `not_found` for an unknown document; `bad_request` for `max_tokens` outside
/// 1..=[`MAX_EXTRACT_TOKENS`]; `constraint` for a schema the engine cannot use (before
/// anything is generated); `no_model` and engine errors.
pub async fn extract_json(
    h: &EngineHandle,
    store: &Store,
    id: &str,
    schema: serde_json::Value,
    max_tokens: usize,
) -> AppResult<Extracted> {
    if max_tokens == 0 || max_tokens > MAX_EXTRACT_TOKENS {
        return Err(AppError::bad_request(format!(
            "max tokens must be 1..={MAX_EXTRACT_TOKENS}"
        )));
    }
    let doc = store.load_document(id)?;
    let path = store.doc_state_path(id)?;
    let text = store.document_text(id)?;
    let opts = GenerateOptions {
        max_tokens,
        sampler: SamplerOptions::greedy(),
        constraint: Some(ConstraintSpec::JsonSchema(schema).after_space()),
    };
    h.run(move |w| {
        let (eng, init) = w.prepare(&doc.adapters)?;
        let t0 = Instant::now();
        let (st, _) = start_state(eng, Some(&path), &text, init.as_deref())?;
        let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
        let out = eng.generate_text(st, EXTRACT_PROMPT, &opts, &CancelToken::new(), &mut |_| {
            true
        });
        let _ = eng.free_state(st);
        let out = out?;
        Ok(Extracted {
            json: out.text.trim_start().to_string(),
            complete: out.complete == Some(true),
            generated_tokens: out.stats.generated_tokens,
            decode_tok_s: out.stats.decode_tok_s,
            setup_ms,
            compile_ms: out.stats.constraint_compile_ms,
        })
    })
    .await
}
