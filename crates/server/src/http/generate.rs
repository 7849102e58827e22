//! `POST /v1/chat/completions` and `POST /v1/completions`: the request checked and
//! rendered to tokens ([`crate::request`]), queued, and answered whole or as a stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rwkv_engine::{Constraint, ConstraintCompiler};
use tokio::sync::mpsc;

use super::stream::{sse, Kind, StreamCtx};
use super::{now_s, read_body, AppState};
use crate::error::ApiError;
use crate::openai::response::{
    AssistantMessage, ChatChoice, ChatCompletion, ChoiceLogprobs, Completion, CompletionChoice,
    FunctionCall, LegacyLogprobs, PromptDetails, TokenLogprob, ToolCall, Usage,
};
use crate::options::GenParams;
use crate::request::{chat_request, completion_request};
use crate::scheduler::{Done, Event, Finish, GenJob};
use crate::structured::parse_call;
use crate::template::fold;

pub(crate) async fn chat(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = chat_inner(&st, body).await;
    respond(&st, "/v1/chat/completions", r)
}

pub(crate) async fn completions(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = completions_inner(&st, body).await;
    respond(&st, "/v1/completions", r)
}

fn respond(st: &AppState, endpoint: &str, r: Result<Response, ApiError>) -> Response {
    match r {
        Ok(resp) => {
            st.metrics.request(endpoint, resp.status().as_u16());
            resp
        }
        Err(e) => {
            st.metrics.request(endpoint, e.status.as_u16());
            e.into_response()
        }
    }
}

async fn chat_inner(
    st: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, st.cfg.max_body_bytes)?;
    let (prompt, params) = {
        let mem = st
            .memory
            .lock()
            .map_err(|_| ApiError::server("reply memory poisoned"))?;
        chat_request(&bytes, &st.cfg, &st.tok, &mem)?
    };
    run(st, Kind::Chat, prompt, params, None).await
}

async fn completions_inner(
    st: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, st.cfg.max_body_bytes)?;
    let (prompt, params, echo) = completion_request(&bytes, &st.cfg, &st.tok)?;
    run(st, Kind::Completion, prompt, params, echo).await
}

/// Queues the generation (its prompt checked by [`crate::request`]) and answers whole or
/// streamed.
async fn run(
    st: &AppState,
    kind: Kind,
    prompt: Vec<u32>,
    params: GenParams,
    echo: Option<String>,
) -> Result<Response, ApiError> {
    let constraint = compile(st, &params).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let stream = params.stream;
    let tool_calls = params.tool_calls;
    let ctx = StreamCtx::new(st, kind, &params);
    st.sched.generate(GenJob {
        prompt,
        params,
        constraint,
        events: tx,
        arrived: Instant::now(),
    })?;
    if stream {
        return Ok(sse(rx, ctx).into_response());
    }
    let got = collect(rx).await?;
    st.metrics.ttft_seconds.observe(got.done.ttft_s);
    let usage = usage(&got.done);
    let created = now_s();
    Ok(match kind {
        Kind::Chat => {
            let content = got.text.trim_start().to_string();
            remember(st, &content, &got.done);
            // A tool call only when the reply completed (a cut one is text, `length`).
            let call = (tool_calls && got.done.finish == Finish::Stop)
                .then(|| tool_call(&content, None))
                .flatten();
            let finish = match call {
                Some(_) => "tool_calls",
                None => got.done.finish.as_str(),
            };
            Json(ChatCompletion {
                id: ctx.id.clone(),
                object: "chat.completion",
                created,
                model: st.cfg.model_id.clone(),
                system_fingerprint: st.fingerprint.clone(),
                choices: vec![ChatChoice {
                    index: 0,
                    message: AssistantMessage {
                        role: "assistant",
                        content: call.is_none().then_some(content),
                        refusal: None,
                        tool_calls: call.map(|c| vec![c]),
                    },
                    logprobs: ctx.logprobs.then_some(ChoiceLogprobs {
                        content: got.logprobs,
                    }),
                    finish_reason: finish,
                }],
                usage,
            })
            .into_response()
        }
        Kind::Completion => Json(Completion {
            id: ctx.id.clone(),
            object: "text_completion",
            created,
            model: st.cfg.model_id.clone(),
            system_fingerprint: st.fingerprint.clone(),
            choices: vec![CompletionChoice {
                index: 0,
                text: format!("{}{}", echo.unwrap_or_default(), got.text),
                logprobs: ctx.logprobs.then(|| legacy(&got.logprobs, &got.pieces)),
                finish_reason: Some(got.done.finish.as_str()),
            }],
            usage: Some(usage),
        })
        .into_response(),
    })
}

/// Compiles the request's constraint (off the async threads: milliseconds, and the
/// vocabulary's trie on the first request).
///
/// Errors: 400 naming `tools` or `response_format` for a schema the engine cannot use.
async fn compile(st: &AppState, p: &GenParams) -> Result<Option<Box<Constraint>>, ApiError> {
    let Some(spec) = p.constraint.clone() else {
        return Ok(None);
    };
    let (tok, vocab) = (st.tok.clone(), st.vocab);
    let param = if p.tool_calls {
        "tools"
    } else {
        "response_format"
    };
    let r = tokio::task::spawn_blocking(move || {
        let comp = ConstraintCompiler::shared(&tok, vocab)?;
        Constraint::compile(&comp, &spec)
    })
    .await
    .map_err(|e| ApiError::server(format!("constraint compile: {e}")))?;
    match r {
        Ok(c) => Ok(Some(Box::new(c))),
        Err(e @ rwkv_engine::EngineError::Constraint { .. }) => {
            Err(ApiError::invalid(Some(param), e.to_string()))
        }
        Err(e) => Err(ApiError::server(e.to_string())),
    }
}

/// The reply as an OpenAI tool call, when it is one (see [`crate::structured`]).
pub(crate) fn tool_call(reply: &str, index: Option<u32>) -> Option<ToolCall> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let (name, arguments) = parse_call(reply)?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Some(ToolCall {
        index,
        id: format!("call_{:x}{n:06x}", now_s()),
        kind: "function",
        function: FunctionCall { name, arguments },
    })
}

/// Remembers a chat reply's tokens under the text a client will send back.
pub(crate) fn remember(st: &AppState, content: &str, done: &Done) {
    if let Ok(mut m) = st.memory.lock() {
        m.put(fold(content), done.tokens.clone());
    }
}

pub(crate) fn usage(d: &Done) -> Usage {
    Usage {
        prompt_tokens: d.prompt_tokens,
        completion_tokens: d.completion_tokens,
        total_tokens: d.prompt_tokens + d.completion_tokens,
        prompt_tokens_details: PromptDetails {
            cached_tokens: d.cached_tokens,
        },
    }
}

struct Collected {
    text: String,
    /// The text of each token (for legacy `text_offset`).
    pieces: Vec<String>,
    logprobs: Vec<TokenLogprob>,
    done: Done,
}

async fn collect(mut rx: mpsc::UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut pieces = Vec::new();
    let mut logprobs = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Started { .. } => {}
            Event::Token {
                text: t, logprob, ..
            } => {
                text.push_str(&t);
                pieces.push(t);
                logprobs.extend(logprob);
            }
            Event::Done(done) => {
                text.push_str(&done.tail);
                return Ok(Collected {
                    text,
                    pieces,
                    logprobs,
                    done,
                });
            }
            Event::Error(e) => return Err(e),
        }
    }
    Err(ApiError::server(
        "the scheduler stopped before the reply ended",
    ))
}

fn legacy(lps: &[TokenLogprob], pieces: &[String]) -> LegacyLogprobs {
    let mut out = LegacyLogprobs::default();
    let mut at = 0;
    for (lp, piece) in lps.iter().zip(pieces) {
        out.tokens.push(lp.token.clone());
        out.token_logprobs.push(lp.logprob);
        out.top_logprobs.push(
            lp.top_logprobs
                .iter()
                .map(|t| (t.token.clone(), t.logprob))
                .collect(),
        );
        out.text_offset.push(at);
        at += piece.len();
    }
    out
}
