//! Documents (a text prefilled once into a named state) and field analysis (many short
//! texts embedded against a document's state in one batched pass).
//!
//! Both run on what the engine has today: `forward` over states, `fork_state`,
//! `read_state` / `write_state`. When the engine's `analysis` module lands on main (state
//! file format, field analysis with similarities), these jobs call it instead.

use std::time::Instant;

use rwkv_engine::{Rows, SeqInput, StateId, Want};
use serde::{Deserialize, Serialize};

use crate::chat::start_state;
use crate::error::{AppError, AppResult};
use crate::snapshot::{self, ModelFingerprint, SnapshotHeader};
use crate::store::{self, now_ms, Document, Store};
use crate::worker::EngineHandle;

/// Most characters of a document (16 MiB of text is ~4M tokens, far beyond any use here).
pub const MAX_DOC_CHARS: usize = 16 << 20;

/// Prefills `text` into a new state and stores it as document `name`.
pub async fn create(
    h: &EngineHandle,
    store: &Store,
    name: &str,
    text: String,
) -> AppResult<Document> {
    let name = name.trim();
    if name.is_empty() {
        return Err(AppError::bad_request("give the document a name"));
    }
    if text.trim().is_empty() {
        return Err(AppError::bad_request("the document is empty"));
    }
    if text.len() > MAX_DOC_CHARS {
        return Err(AppError::bad_request(format!(
            "the document has {} bytes; at most {MAX_DOC_CHARS}",
            text.len()
        )));
    }
    let id = store::new_id();
    let state_path = store.doc_state_path(&id)?;
    let label = name.to_string();
    let job_text = text.clone();
    let (tokens, ms, model) = h
        .run(move |w| {
            let eng = w.engine()?;
            let fp = ModelFingerprint::of(eng);
            let t0 = Instant::now();
            let tokens = eng.tokenizer().encode(&job_text).len();
            let (st, _) = start_state(eng, None, &job_text)?;
            let mut buf = vec![0f32; eng.state_len()];
            // Reading the state back waits for the GPU: the time is time-to-ready.
            let r = eng.read_state(st, &mut buf);
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let _ = eng.free_state(st);
            r?;
            let header = SnapshotHeader {
                model: fp.clone(),
                tokens,
                label,
            };
            snapshot::write(&state_path, &header, &buf)?;
            Ok((tokens, ms, fp.file_name))
        })
        .await?;
    let doc = Document {
        id,
        name: name.to_string(),
        chars: text.chars().count(),
        tokens,
        prefill_ms: ms,
        tok_s: tokens as f64 / (ms / 1e3).max(1e-9),
        model,
        created_ms: now_ms(),
        preview: text.chars().take(200).collect(),
    };
    store.save_document(&doc, &text)?;
    Ok(doc)
}

/// A field to embed: a label for people, a text for the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldInput {
    pub label: String,
    pub text: String,
}

/// What a field analysis returns besides the vectors (`FieldsMeta` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldsMeta {
    pub labels: Vec<String>,
    /// Tokens per field.
    pub tokens: Vec<usize>,
    /// Width of each vector (the model's C).
    pub dim: usize,
    pub document: Option<String>,
    /// Loading (or prefilling) the document state and forking it per field, ms.
    pub setup_ms: f64,
    /// The one batched forward pass, embeddings read back, ms.
    pub embed_ms: f64,
    /// Whether the document's stored state was used (`false`: prefilled again).
    pub resumed: bool,
    pub model: String,
}

/// Embeds every field (the last token's hidden state after `ln_out`, as llama.cpp's
/// `t_embd`) from the document's state, or from the zero state, in one batched pass.
/// Returns the meta and the vectors, `[fields, dim]` f32 row-major.
pub async fn run_fields(
    h: &EngineHandle,
    store: &Store,
    document: Option<String>,
    fields: Vec<FieldInput>,
) -> AppResult<(FieldsMeta, Vec<f32>)> {
    if fields.is_empty() {
        return Err(AppError::bad_request("add at least one field"));
    }
    if fields.len() > 256 {
        return Err(AppError::bad_request("at most 256 fields per analysis"));
    }
    if let Some(i) = fields.iter().position(|f| f.text.trim().is_empty()) {
        return Err(AppError::bad_request(format!(
            "field {} ({}) has no text",
            i + 1,
            fields[i].label
        )));
    }
    let doc = match &document {
        Some(id) => Some((
            store.load_document(id)?,
            store.doc_state_path(id)?,
            store.document_text(id)?,
        )),
        None => None,
    };
    h.run(move |w| {
        let eng = w.engine()?;
        let fp = ModelFingerprint::of(eng);
        let t0 = Instant::now();
        let base: Option<(StateId, bool)> = match &doc {
            Some((_, path, text)) => {
                let snap = store::load_matching_snapshot(path, &fp);
                Some(start_state(eng, snap, text)?)
            }
            None => None,
        };
        let ids: Vec<Vec<u32>> = fields
            .iter()
            .map(|f| eng.tokenizer().encode(&f.text))
            .collect();
        let mut states = Vec::with_capacity(fields.len());
        let mut fork_all = || -> AppResult<()> {
            for _ in &fields {
                states.push(match base {
                    Some((b, _)) => eng.fork_state(b)?,
                    None => eng.new_state()?,
                });
            }
            Ok(())
        };
        let forked = fork_all();
        let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let out = forked.and_then(|_| {
            let seqs: Vec<SeqInput> = states
                .iter()
                .zip(&ids)
                .map(|(&state, toks)| SeqInput {
                    state,
                    tokens: toks,
                    rows: Rows::Last,
                })
                .collect();
            let want = Want {
                logits: false,
                embeddings: true,
            };
            eng.forward(&seqs, want, None).map_err(AppError::from)
        });
        let embed_ms = t1.elapsed().as_secs_f64() * 1e3;
        for s in states.into_iter().chain(base.map(|b| b.0)) {
            let _ = eng.free_state(s);
        }
        let out = out?;
        let dim = eng.config().n_embd;
        let mut flat = Vec::with_capacity(fields.len() * dim);
        for (i, e) in out.embeddings.iter().enumerate() {
            if e.len() != dim {
                return Err(AppError::new(
                    "op",
                    format!(
                        "field {}: embedding of {} values, expected {dim}",
                        i + 1,
                        e.len()
                    ),
                ));
            }
            flat.extend_from_slice(e);
        }
        let meta = FieldsMeta {
            labels: fields.iter().map(|f| f.label.clone()).collect(),
            tokens: ids.iter().map(Vec::len).collect(),
            dim,
            document: doc.as_ref().map(|d| d.0.name.clone()),
            setup_ms,
            embed_ms,
            resumed: base.is_none_or(|b| b.1),
            model: fp.file_name,
        };
        Ok((meta, flat))
    })
    .await
}

/// Packs a JSON header and f32 data for `tauri::ipc::Response`: `u32` header length
/// (little-endian), the JSON, zero padding to a multiple of 4, then the f32 values
/// (little-endian). `src/lib/api.ts` (`unpackFloats`) reads it back.
pub fn pack_floats<T: Serialize>(meta: &T, data: &[f32]) -> AppResult<Vec<u8>> {
    let json = serde_json::to_vec(meta).map_err(|e| AppError::new("internal", e.to_string()))?;
    let pad = (4 - (4 + json.len()) % 4) % 4;
    let mut buf = Vec::with_capacity(4 + json.len() + pad + data.len() * 4);
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    buf.resize(buf.len() + pad, 0);
    for v in data {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_floats_are_aligned_and_complete() {
        for label in ["a", "ab", "abc", "abcd"] {
            let meta = serde_json::json!({ "l": label });
            let data = [1.5f32, -2.0, 3.25];
            let buf = pack_floats(&meta, &data).unwrap();
            let h = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
            let parsed: serde_json::Value = serde_json::from_slice(&buf[4..4 + h]).unwrap();
            assert_eq!(parsed, meta);
            let start = (4 + h).div_ceil(4) * 4;
            assert_eq!(buf.len(), start + 12);
            let back: Vec<f32> = buf[start..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(back, data);
        }
    }
}
