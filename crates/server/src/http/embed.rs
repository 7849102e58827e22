//! `POST /v1/embeddings`: the engine's embedding without the head (the last token's
//! hidden state after `ln_out`, `[C]` f32 per input), as floats or base64.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use tokio::sync::oneshot;

use super::{read_body, AppState};
use crate::error::ApiError;
use crate::openai::response::{Embedding, EmbeddingData, EmbeddingList, EmbeddingUsage};
use crate::request::embedding_request;
use crate::scheduler::EmbedJob;

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
    let bytes = read_body(body, st.cfg.max_body_bytes)?;
    let (inputs, base64) = embedding_request(&bytes, &st.cfg, &st.tok, st.dim)?;
    let total = inputs.iter().map(Vec::len).sum();
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
