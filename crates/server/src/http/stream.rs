//! Streamed replies: scheduler events → OpenAI's SSE chunks (`data: {…}` lines, then
//! `data: [DONE]`), through axum's SSE response.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Serialize;
use tokio::sync::mpsc;

use super::generate::{remember, tool_call, usage};
use super::{now_s, AppState};
use crate::openai::response::{ChatChunk, ChoiceLogprobs, ChunkChoice, Delta, TokenLogprob};
use crate::options::GenParams;
use crate::scheduler::{Event, Finish};
use crate::structured::CALL_OPEN;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Completion,
}

/// What a reply's chunks share.
pub(crate) struct StreamCtx {
    pub id: String,
    pub kind: Kind,
    pub logprobs: bool,
    include_usage: bool,
    created: u64,
    st: AppState,
    /// Chat: leading whitespace of the reply is not content.
    leading: bool,
    content: String,
    /// Chat with tools: text is held back while the reply may still be a tool call
    /// (it is a prefix of, or starts with, `<tool_call>`); `held` is what is held.
    holding: bool,
    held: String,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl StreamCtx {
    pub fn new(st: &AppState, kind: Kind, p: &GenParams) -> Self {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        };
        StreamCtx {
            id: format!("{prefix}-{:x}{n:06x}", now_s()),
            kind,
            logprobs: p.logprobs.is_some(),
            include_usage: p.include_usage,
            created: now_s(),
            st: st.clone(),
            leading: kind == Kind::Chat,
            content: String::new(),
            holding: kind == Kind::Chat && p.tool_calls,
            held: String::new(),
        }
    }

    fn chat_chunk(
        &self,
        delta: Delta,
        lp: Option<Vec<TokenLogprob>>,
        finish: Option<&'static str>,
    ) -> String {
        json(&ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.st.cfg.model_id.clone(),
            system_fingerprint: self.st.fingerprint.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                logprobs: lp.map(|content| ChoiceLogprobs { content }),
                finish_reason: finish,
            }],
            usage: None,
        })
    }

    fn text_chunk(&self, text: &str, finish: Option<&'static str>) -> String {
        json(&serde_json::json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.st.cfg.model_id,
            "system_fingerprint": self.st.fingerprint,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
        }))
    }

    /// The chunks an event makes (possibly none).
    fn chunks(&mut self, ev: Event, out: &mut VecDeque<String>) -> bool {
        match ev {
            Event::Started { .. } => {
                if self.kind == Kind::Chat {
                    let d = Delta {
                        role: Some("assistant"),
                        content: Some(String::new()),
                        tool_calls: None,
                    };
                    out.push_back(self.chat_chunk(d, None, None));
                }
                false
            }
            Event::Token { text, logprob, .. } => {
                let text = self.visible(text);
                let lp = if self.logprobs {
                    logprob.map(|l| vec![l])
                } else {
                    None
                };
                if !text.is_empty() || lp.is_some() {
                    out.push_back(self.piece(text, lp));
                }
                false
            }
            Event::Done(done) => {
                let tail = self.visible(done.tail.clone());
                if !tail.is_empty() {
                    out.push_back(self.piece(tail, None));
                }
                let mut finish = Some(done.finish.as_str());
                if self.holding {
                    // Held to the end: a tool call (when complete), else text after all.
                    let call = (done.finish == Finish::Stop)
                        .then(|| tool_call(&self.held, Some(0)))
                        .flatten();
                    match call {
                        Some(c) => {
                            let d = Delta {
                                tool_calls: Some(vec![c]),
                                ..Delta::default()
                            };
                            out.push_back(self.chat_chunk(d, None, None));
                            finish = Some("tool_calls");
                        }
                        None => {
                            let held = std::mem::take(&mut self.held);
                            out.push_back(self.piece(held, None));
                        }
                    }
                }
                out.push_back(match self.kind {
                    Kind::Chat => self.chat_chunk(Delta::default(), None, finish),
                    Kind::Completion => self.text_chunk("", finish),
                });
                self.st.metrics.ttft_seconds.observe(done.ttft_s);
                if self.kind == Kind::Chat {
                    remember(&self.st, &self.content, &done);
                }
                if self.include_usage {
                    out.push_back(json(&serde_json::json!({
                        "id": self.id,
                        "object": match self.kind {
                            Kind::Chat => "chat.completion.chunk",
                            Kind::Completion => "text_completion",
                        },
                        "created": self.created,
                        "model": self.st.cfg.model_id,
                        "system_fingerprint": self.st.fingerprint,
                        "choices": [],
                        "usage": usage(&done),
                    })));
                }
                out.push_back("[DONE]".into());
                true
            }
            Event::Error(e) => {
                out.push_back(e.to_json());
                out.push_back("[DONE]".into());
                true
            }
        }
    }

    /// Text as the client sees it (a chat reply's leading whitespace dropped).
    fn visible(&mut self, text: String) -> String {
        let t = if self.leading {
            let t = text.trim_start().to_string();
            if !t.is_empty() {
                self.leading = false;
            }
            t
        } else {
            text
        };
        self.content.push_str(&t);
        if self.holding {
            self.held.push_str(&t);
            let c = self.held.as_str();
            if CALL_OPEN.starts_with(c) || c.starts_with(CALL_OPEN) {
                return String::new();
            }
            // Not a tool call: what was held goes out now, and the rest as it comes.
            self.holding = false;
            return std::mem::take(&mut self.held);
        }
        t
    }

    fn piece(&self, text: String, lp: Option<Vec<TokenLogprob>>) -> String {
        match self.kind {
            Kind::Chat => self.chat_chunk(
                Delta {
                    role: None,
                    content: Some(text),
                    tool_calls: None,
                },
                lp,
                None,
            ),
            Kind::Completion => self.text_chunk(&text, None),
        }
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "{}".into())
}

/// The SSE response of a streamed reply. Dropping it (the client went away) drops the
/// receiver, which the scheduler sees before its next step and frees the sequence.
pub(crate) fn sse(
    rx: mpsc::UnboundedReceiver<Event>,
    ctx: StreamCtx,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let init = (rx, ctx, VecDeque::<String>::new(), false);
    let s = stream::unfold(
        init,
        |(mut rx, mut ctx, mut pending, mut ended)| async move {
            loop {
                if let Some(data) = pending.pop_front() {
                    let ev = SseEvent::default().data(data);
                    return Some((Ok(ev), (rx, ctx, pending, ended)));
                }
                if ended {
                    return None;
                }
                match rx.recv().await {
                    Some(ev) => ended = ctx.chunks(ev, &mut pending),
                    None => {
                        let e = crate::error::ApiError::server(
                            "the scheduler stopped before the reply ended",
                        );
                        ended = ctx.chunks(Event::Error(e), &mut pending);
                    }
                }
            }
        },
    );
    Sse::new(s).keep_alive(KeepAlive::default())
}
