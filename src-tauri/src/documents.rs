//! Documents (a text prefilled once into a named state, kept as an engine state file; a
//! state file imported as one; the user's text files they come from) and field analysis (the engine's `analyze_fields`: many short texts embedded against a
//! document's state in one batched pass, norms and cosine similarities).

use std::path::Path;
use std::time::Instant;

use rwkv_engine::{Field, FieldAnalysis, FieldOptions};
use serde::{Deserialize, Serialize};

use crate::chat::{fresh_state, model_file_name, start_state};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::library;
use crate::store::{self, now_ms, AdapterSet, Document, Store};
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
    if let Some(dir) = state_path.parent() {
        store::private_dir(dir).map_err(|e| AppError::io(dir, e))?;
    }
    let job_text = text.clone();
    // The Model view's current adapters: the state is prefilled with them, and chats about
    // the document use them too.
    let adapters = library::load(store)?.current();
    let set = adapters.clone();
    let (tokens, ms, model) = h
        .run(move |w| {
            let (eng, init) = w.prepare(&set)?;
            let t0 = Instant::now();
            let ids = eng.tokenizer().encode(&job_text);
            let n = ids.len();
            let st = fresh_state(eng, init.as_deref(), &ids)?;
            // Saving reads the state back, which waits for the GPU: time-to-ready.
            let saved = eng.save_state(st, n as u64, &state_path);
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let _ = eng.free_state(st);
            saved?;
            Ok((n, ms, model_file_name(eng)))
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
        adapters,
    };
    store.save_document(&doc, &text)?;
    Ok(doc)
}

/// Imports the state file `src` (shown to people as `shown`) as a document: its text is
/// unknown, the state is the document. The engine checks the file (header, fingerprint,
/// layout, checksum) and that it belongs to the loaded model, before it is copied into the
/// store.
///
/// Errors: `no_model`; the engine's (`state`, `io`, …: a foreign or damaged file, named);
/// `io` copying it.
pub async fn import(
    h: &EngineHandle,
    store: &Store,
    src: &Path,
    shown: &str,
) -> AppResult<Document> {
    let id = store::new_id();
    let dest = store.doc_state_path(&id)?;
    if let Some(dir) = dest.parent() {
        store::private_dir(dir).map_err(|e| AppError::io(dir, e))?;
    }
    let src2 = src.to_path_buf();
    let (tokens, model) = h
        .run(move |w| {
            let eng = w.engine()?;
            // Loading checks header, fingerprint, layout and checksum: a foreign or
            // damaged file fails here, with the engine's message.
            let (st, header) = eng.load_state_with_header(&src2)?;
            let _ = eng.free_state(st);
            Ok((header.tokens as usize, model_file_name(eng)))
        })
        .await?;
    std::fs::copy(src, &dest).map_err(|e| AppError::io(&dest, e))?;
    let doc = Document {
        id,
        name: src
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "imported".into()),
        chars: 0,
        tokens,
        prefill_ms: 0.0,
        tok_s: 0.0,
        model,
        created_ms: now_ms(),
        preview: format!("(state imported from {shown})"),
        // Unknown: the file holds the state only.
        adapters: Default::default(),
    };
    store.save_document(&doc, "")?;
    Ok(doc)
}

/// Reads a text file the user chose to open (`shown`: its path as the user gave it): a
/// regular file of at most [`MAX_DOC_CHARS`] bytes, judged by its size before a byte is
/// read (a huge file, a device such as `/dev/zero` or a FIFO is refused at once, not read
/// into memory).
///
/// Errors: `bad_request` (too large, not a regular file; `details.bytes`: its size);
/// `not_text`; `io`.
pub fn read_user_text(p: &Path, shown: &str) -> AppResult<String> {
    // The user's own file may be a link they chose: followed (unlike the store's files),
    // but what it names must be a regular file.
    let meta = std::fs::metadata(p).map_err(|e| AppError::io(p, e))?;
    let max = MAX_DOC_CHARS as u64;
    if !meta.is_file() {
        return Err(AppError::bad_request(format!(
            "{shown}: not a regular file"
        )));
    }
    if meta.len() > max {
        return Err(AppError::bad_request(format!(
            "{shown}: {} bytes, larger than the 16 MiB a document may have",
            meta.len()
        ))
        .with_details(serde_json::json!({ "bytes": meta.len() })));
    }
    let f = std::fs::File::open(p).map_err(|e| AppError::io(p, e))?;
    let mut bytes = Vec::new();
    // A file that grew since: still never more than the limit in memory.
    std::io::Read::read_to_end(&mut std::io::Read::take(f, max + 1), &mut bytes)
        .map_err(|e| AppError::io(p, e))?;
    if bytes.len() as u64 > max {
        return Err(AppError::bad_request(format!(
            "{shown}: larger than the 16 MiB a document may have"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| AppError::new(ErrorCode::NotText, format!("{shown}: not UTF-8 text")))
}

/// A field to embed: a label for people, a text for the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldInput {
    pub label: String,
    pub text: String,
}

/// What a field analysis returns besides the vectors (`FieldsMeta` in `src/lib/api.ts`):
/// the engine's `FieldAnalysis` with its embeddings moved to the bytes that follow.
#[derive(Debug, Clone, Serialize)]
pub struct FieldsMeta {
    #[serde(flatten)]
    pub analysis: FieldAnalysis,
    pub document: Option<String>,
    /// The adapters the analysis ran with (the document's, else the Model view's).
    pub adapters: AdapterSet,
    /// Loading (or prefilling again) the document's state, ms.
    pub setup_ms: f64,
    /// Whether the document's stored state was used (`false`: prefilled again).
    pub resumed: bool,
}

/// Runs the engine's field analysis from the document's state (with the document's
/// adapters), or else from the Model view's current initial state (or the zero state) with
/// its current LoRAs.
/// Returns the meta and the vectors, `[fields, dim]` f32 row-major.
pub async fn run_fields(
    h: &EngineHandle,
    store: &Store,
    document: Option<String>,
    fields: Vec<FieldInput>,
) -> AppResult<(FieldsMeta, Vec<f32>)> {
    let doc = match &document {
        Some(id) => Some((
            store.load_document(id)?,
            store.doc_state_path(id)?,
            store.document_text(id)?,
        )),
        None => None,
    };
    let adapters = match &doc {
        Some((d, _, _)) => d.adapters.clone(),
        None => library::load(store)?.current(),
    };
    let fields: Vec<Field> = fields
        .into_iter()
        .map(|f| Field::new(f.label, f.text))
        .collect();
    h.run(move |w| {
        let (eng, init) = w.prepare(&adapters)?;
        let t0 = Instant::now();
        let base = match (&doc, &init) {
            (Some((_, path, text)), _) => {
                Some(start_state(eng, Some(path), text, init.as_deref())?)
            }
            (None, Some(i)) => Some((eng.new_state_from(i)?, true)),
            (None, None) => None,
        };
        let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
        let analysis =
            eng.analyze_fields(&fields, base.map(|b| b.0), &FieldOptions::default(), None);
        if let Some((st, _)) = base {
            let _ = eng.free_state(st);
        }
        let mut analysis = analysis?;
        let mut flat = Vec::with_capacity(analysis.fields.len() * analysis.dim);
        for f in &mut analysis.fields {
            flat.append(&mut f.embedding);
        }
        let meta = FieldsMeta {
            analysis,
            document: doc.as_ref().map(|d| d.0.name.clone()),
            adapters,
            setup_ms,
            resumed: base.is_none_or(|b| b.1),
        };
        Ok((meta, flat))
    })
    .await
}

/// Packs a JSON header and f32 data for `tauri::ipc::Response`: `u32` header length
/// (little-endian), the JSON, zero padding to a multiple of 4, then the f32 values
/// (little-endian). `src/lib/api.ts` (`unpackFloats`) reads it back.
pub fn pack_floats<T: Serialize>(meta: &T, data: &[f32]) -> AppResult<Vec<u8>> {
    let json = serde_json::to_vec(meta).map_err(|e| AppError::internal(e.to_string()))?;
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
