//! The HTTP layer (axum on tokio): routes, the API key check, body limits, CORS, and
//! OpenAI-shaped errors for every refusal.

mod embed;
mod generate;
mod stream;

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rwkv_engine::Tokenizer;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::openai::response::{ModelCard, ModelList};
use crate::scheduler::SchedulerHandle;
use crate::template::ReplyMemory;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub cfg: Arc<ServerConfig>,
    pub sched: SchedulerHandle,
    pub tok: Tokenizer,
    pub dim: usize,
    /// The model's vocabulary (logits per token): what constraints are compiled for.
    pub vocab: usize,
    pub metrics: Metrics,
    pub memory: Arc<Mutex<ReplyMemory>>,
    pub created: u64,
    pub fingerprint: String,
}

/// Replies remembered for exact conversation-cache hits.
const REPLY_MEMORY: usize = 4096;

/// What [`router`] is built from.
pub(crate) struct Shared {
    pub cfg: Arc<ServerConfig>,
    pub sched: SchedulerHandle,
    pub tok: Tokenizer,
    /// The model's embedding width (C).
    pub dim: usize,
    /// The model's vocabulary size.
    pub vocab: usize,
    pub metrics: Metrics,
    /// `system_fingerprint`: the model's, so a client sees when the weights changed.
    pub fingerprint: String,
}

pub(crate) fn router(sh: Shared) -> Router {
    let cfg = sh.cfg.clone();
    let state = AppState {
        cfg: sh.cfg,
        sched: sh.sched,
        tok: sh.tok,
        dim: sh.dim,
        vocab: sh.vocab,
        metrics: sh.metrics,
        memory: Arc::new(Mutex::new(ReplyMemory::new(REPLY_MEMORY))),
        created: now_s(),
        fingerprint: sh.fingerprint,
    };
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completions))
        .route("/v1/embeddings", post(embed::embeddings))
        .route("/metrics", get(metrics_text))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    let mut app = Router::new()
        .merge(api)
        .route("/health", get(health))
        // After every route: axum's own 405 has no body.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(cfg.max_body_bytes))
        .with_state(state);
    if let Some(origin) = &cfg.cors_origin {
        let allow = if origin == "*" {
            AllowOrigin::any()
        } else {
            match HeaderValue::from_str(origin) {
                Ok(v) => AllowOrigin::exact(v),
                Err(_) => AllowOrigin::list([]),
            }
        };
        app = app.layer(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        );
    }
    app
}

pub(crate) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `Authorization: Bearer <key>` when the server has a key (compared without stopping at the first differing byte).
async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.cfg.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same(given.trim().as_bytes(), key.as_bytes()) {
            st.metrics.request(&endpoint(req.uri().path()), 401);
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The metrics label of a path (fixed set: paths of unknown routes are not labels).
fn endpoint(path: &str) -> String {
    match path {
        "/v1/chat/completions"
        | "/v1/completions"
        | "/v1/embeddings"
        | "/v1/models"
        | "/metrics"
        | "/health" => path.to_string(),
        p if p.starts_with("/v1/models/") => "/v1/models/{id}".into(),
        _ => "other".into(),
    }
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn metrics_text(State(st): State<AppState>) -> Response {
    st.metrics.request("/metrics", 200);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}

fn card(st: &AppState) -> ModelCard {
    ModelCard {
        id: st.cfg.model_id.clone(),
        object: "model",
        created: st.created,
        owned_by: "rwkv-studio",
    }
}

async fn models(State(st): State<AppState>) -> Json<ModelList> {
    st.metrics.request("/v1/models", 200);
    Json(ModelList {
        object: "list",
        data: vec![card(&st)],
    })
}

async fn model(
    State(st): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    if id != st.cfg.model_id {
        st.metrics.request("/v1/models/{id}", 404);
        return Err(ApiError::model_not_found(&id, &st.cfg.model_id));
    }
    st.metrics.request("/v1/models/{id}", 200);
    Ok(Json(card(&st)))
}

/// A known path with a method it does not take: 405 in OpenAI's error shape.
async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::method_not_allowed(req.method().as_str(), req.uri().path())
}

async fn fallback(req: Request) -> ApiError {
    if req.method() != axum::http::Method::GET && req.method() != axum::http::Method::POST {
        return ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            ..ApiError::no_route(req.uri().path())
        };
    }
    ApiError::no_route(req.uri().path())
}

/// The request body's bytes (a body over the limit: 413; one that cannot be read: 400).
/// [`crate::request`] parses and checks them.
pub(crate) fn read_body(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::body_too_large(limit)
        } else {
            ApiError::invalid(None, format!("cannot read the request body: {r}"))
        }
    })
}
