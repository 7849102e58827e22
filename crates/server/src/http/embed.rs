//! `POST /v1/embeddings`: the engine's embedding without the head (the last token's
//! hidden state after `ln_out`, `[C]` f32 per input), as floats or base64.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use tokio::sync::oneshot;

use super::generate::check_ids;
use super::{check_model, parse_body, AppState};
use crate::error::ApiError;
use crate::openai::request::{EmbeddingRequest, Input};
use crate::openai::response::{Embedding, EmbeddingData, EmbeddingList, EmbeddingUsage};
use crate::scheduler::EmbedJob;

/// Most inputs one embeddings request may hold (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

pub(crate) async fn embeddings(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match inner(&st, body).await {
        Ok(r) => {
            st.metrics.request("/v1/embeddings", 200);
            r
        }
        Err(e) => {
            st.metrics.request("/v1/embeddings", e.status.as_u16());
            e.into_response()
        }
    }
}

async fn inner(st: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = parse_body(body, st.cfg.max_body_bytes)?;
    check_model(st, req.model.as_deref())?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                Some("encoding_format"),
                format!("`encoding_format` `{other}`; expected `float` or `base64`"),
            ))
        }
    };
    let inputs: Vec<Vec<u32>> = match &req.input {
        Input::Text(s) => vec![st.tok.encode(s)],
        Input::Texts(v) => v.iter().map(|s| st.tok.encode(s)).collect(),
        Input::Tokens(v) => vec![v.clone()],
        Input::TokenLists(v) => v.clone(),
    };
    if inputs.is_empty() || inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            Some("input"),
            format!("{} inputs; send 1 to {MAX_INPUTS}", inputs.len()),
        ));
    }
    if let Some(d) = req.dimensions {
        if d as usize != st.dim {
            return Err(ApiError::invalid(
                Some("dimensions"),
                format!(
                    "`dimensions` is {d}; this model's embeddings have {}",
                    st.dim
                ),
            ));
        }
    }
    let mut total = 0;
    for (i, ids) in inputs.iter().enumerate() {
        check_ids(st, ids, &format!("input[{i}]"))?;
        if ids.len() > st.cfg.max_prompt_tokens {
            return Err(ApiError::too_long(ids.len(), st.cfg.max_prompt_tokens));
        }
        total += ids.len();
    }
    let (tx, rx) = oneshot::channel();
    st.sched.embed(EmbedJob { inputs, reply: tx })?;
    let emb = rx
        .await
        .map_err(|_| ApiError::server("the scheduler stopped before embedding"))??;
    let data = emb
        .rows()
        .enumerate()
        .map(|(index, row)| Embedding {
            object: "embedding",
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                EmbeddingData::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                EmbeddingData::Float(row.to_vec())
            },
        })
        .collect();
    Ok(Json(EmbeddingList {
        object: "list",
        data,
        model: st.cfg.model_id.clone(),
        usage: EmbeddingUsage {
            prompt_tokens: total,
            total_tokens: total,
        },
    })
    .into_response())
}
