//! 1,000 malformed and hostile requests leave the server serving (issue 28, item 6): a real
//! [`Server`] on the demo model (GPU: lavapipe on CI) with an API key, sent over raw TCP
//! (so that bodies can be invalid UTF-8, headers wrong, lengths lie): truncated JSON,
//! garbage, wrong types, huge numbers, NaN-like values, unknown roles, deep nesting, bodies
//! over the limit, wrong keys, unknown models, wrong methods and paths, out-of-range
//! values. Each must get its 4xx with OpenAI's error JSON (`{"error": {message, type,
//! param, code}}`), except the few that are not HTTP (a bad request line or
//! `Content-Length`), which hyper answers 400 before any handler. Then a valid chat request
//! still gets a reply and `/health` is ok.
//!
//! None of these requests reaches the GPU; every socket has a 30 s timeout, so a server
//! that stops answering fails the test rather than hanging it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;

use std::path::PathBuf;

use rwkv_engine::{Engine, LoadOptions};
use rwkv_server::{Server, ServerConfig};
use serde_json::{json, Value};
use support::{case, check, http, post, send, Case, CHAT, COMPLETIONS, EMBEDDINGS, KEY};

/// Small limits, so that requests can cross them cheaply.
const MAX_BODY: usize = 64 << 10;
const MAX_PROMPT: usize = 512;
const MAX_TOKENS_CAP: usize = 256;
const REQUESTS: usize = 1000;

fn demo_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/models/rwkv7-demo-6x256-Q4_K_M.gguf")
}

fn start() -> Server {
    let eng = Engine::load(demo_model(), &LoadOptions::default()).unwrap_or_else(|e| {
        panic!(
            "cannot load the demo model: {e}. GPU tests need an adapter: install Mesa's \
             lavapipe (`apt-get install mesa-vulkan-drivers`) and set WGPU_BACKEND=vulkan"
        )
    });
    let cfg = ServerConfig {
        port: 0,
        api_key: Some(KEY.into()),
        parallel: 2,
        max_body_bytes: MAX_BODY,
        max_prompt_tokens: MAX_PROMPT,
        max_tokens_cap: MAX_TOKENS_CAP,
        default_max_tokens: 16,
        ..ServerConfig::default()
    };
    Server::start(eng, cfg).expect("server starts")
}

fn chat_with(extra: Value) -> Vec<u8> {
    let mut v = json!({"messages": [{"role": "user", "content": "Hi"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    serde_json::to_vec(&v).unwrap()
}

/// Splices `raw` (not JSON: `NaN`, `1e999`, deep nesting…) in as the value of `field`.
fn chat_raw(field: &str, raw: &str) -> Vec<u8> {
    format!(r#"{{"messages":[{{"role":"user","content":"Hi"}}],"{field}":{raw}}}"#).into_bytes()
}

/// A tiny seeded generator (xorshift), so that the garbage is the same every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The `i`-th malformed request: kind `i % KINDS`, varied by `i / KINDS`.
fn malformed(i: usize) -> Case {
    const KINDS: usize = 24;
    let v = i / KINDS;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
    let full = serde_json::to_vec(&json!({
        "model": "rwkv", "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Hello there"}],
        "temperature": 0.5, "max_tokens": 8, "stop": ["END"], "stream": true
    }))
    .unwrap();
    match i % KINDS {
        0 => {
            let cut = (v * 7 + 1) % full.len();
            case(
                format!("chat JSON cut at {cut}"),
                post(CHAT, &full[..cut]),
                400,
            )
        }
        1 => {
            let n = 1 + (rng.next() % 300) as usize;
            let body: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            let path = [CHAT, COMPLETIONS, EMBEDDINGS][v % 3];
            case(
                format!("{n} random bytes to {path}"),
                post(path, &body),
                400,
            )
        }
        2 => {
            let (path, body, param): (_, &[u8], _) = [
                (CHAT, &br#"{"messages":"hi"}"#[..], "messages"),
                (
                    CHAT,
                    br#"{"messages":[{"role":"user","content":5}]}"#,
                    "messages[0].content",
                ),
                (CHAT, br#"{"messages":[{"role":7}]}"#, "messages[0].role"),
                (CHAT, br#"{"messages":[],"model":5}"#, "model"),
                (CHAT, br#"{"messages":[],"logprobs":"true"}"#, "logprobs"),
                (
                    CHAT,
                    br#"{"messages":[],"top_logprobs":-1}"#,
                    "top_logprobs",
                ),
                (CHAT, br#"{"messages":[],"tools":{}}"#, "tools"),
                (
                    CHAT,
                    br#"{"messages":[],"response_format":"json"}"#,
                    "response_format",
                ),
                (
                    CHAT,
                    br#"{"messages":[{"role":"user","content":[{"text":"a"}]}]}"#,
                    "messages[0].content",
                ),
                (COMPLETIONS, br#"{"prompt":{"a":1}}"#, "prompt"),
                (COMPLETIONS, br#"{"prompt":"a","echo":"yes"}"#, "echo"),
                (COMPLETIONS, br#"{"prompt":[1,-2]}"#, "prompt"),
                (EMBEDDINGS, br#"{"input":true}"#, "input"),
                (
                    EMBEDDINGS,
                    br#"{"input":"a","encoding_format":1}"#,
                    "encoding_format",
                ),
                (
                    EMBEDDINGS,
                    br#"{"input":"a","dimensions":"x"}"#,
                    "dimensions",
                ),
            ][v % 15];
            case(format!("wrong type of {param}"), post(path, body), 400).param(param)
        }
        3 => {
            // Sampling fields (flattened into the request) of the wrong type.
            let (field, raw) = [
                ("temperature", r#""hot""#),
                ("max_tokens", "-1"),
                ("max_tokens", "1.5"),
                ("stream", r#""yes""#),
                ("stop", "5"),
                ("n", r#""1""#),
                ("seed", "[]"),
                ("top_p", "{}"),
                ("stream_options", "true"),
            ][v % 9];
            case(
                format!("{field}: {raw}"),
                post(CHAT, &chat_raw(field, raw)),
                400,
            )
            .param(field)
        }
        4 => {
            let (field, raw) = [
                ("max_tokens", "1e30"),
                ("max_tokens", "18446744073709551616"),
                ("max_tokens", "99999999"),
                ("max_tokens", "4294967296"),
                ("temperature", "1e39"),
                ("seed", "1e300"),
                ("top_k", "4294967296"),
                ("top_logprobs", "99999999999"),
                ("presence_penalty", "-3.4e38"),
            ][v % 9];
            case(
                format!("{field}: {raw}"),
                post(CHAT, &chat_raw(field, raw)),
                400,
            )
            .param(field)
        }
        5 => {
            // Not JSON numbers at all: a syntax error (no field to name reliably).
            let (field, raw) = [
                ("temperature", "NaN"),
                ("temperature", "Infinity"),
                ("top_p", "-Infinity"),
                ("min_p", "nan"),
                ("max_tokens", "1e999"),
                ("frequency_penalty", "0x10"),
                ("max_tokens", "+5"),
                ("temperature", ".5"),
            ][v % 8];
            case(
                format!("{field}: {raw}"),
                post(CHAT, &chat_raw(field, raw)),
                400,
            )
        }
        6 => {
            let (field, raw) = [
                ("temperature", r#""NaN""#),
                ("temperature", "3"),
                ("top_p", "1.5"),
                ("presence_penalty", "-9"),
                ("repetition_penalty", "0.5"),
                ("min_p", "-0.1"),
                ("penalty_decay", "2"),
            ][v % 7];
            case(
                format!("{field} out of range: {raw}"),
                post(CHAT, &chat_raw(field, raw)),
                400,
            )
            .param(field)
        }
        7 => {
            let role = [
                "wizard",
                "USER",
                "",
                "function",
                "assistant ",
                "system\u{0}",
            ][v % 6];
            let body = serde_json::to_vec(&json!({"messages": [{"role": role, "content": "x"}]}));
            case(format!("role {role:?}"), post(CHAT, &body.unwrap()), 400)
                .param("messages[0].role")
        }
        8 => {
            let n = MAX_BODY + 1 + v * 997;
            let mut body = chat_with(json!({})).to_vec();
            body.resize(n, b' ');
            let path = [CHAT, COMPLETIONS, EMBEDDINGS][v % 3];
            case(format!("a {n}-byte body to {path}"), post(path, &body), 413)
        }
        9 => {
            let auth: &[u8] = [
                &b""[..],
                b"Bearer wrong",
                b"Bearer",
                b"bearer sk-test-7f3a",
                b"Basic c2stdGVzdC03ZjNh",
                b"Bearer sk-test-7f3",
                b"Bearer sk-test-7f3ab",
                b"Bearer sk-test-7f3\xff",
                b"Bearer \xff\xfe",
            ][v % 9];
            let (method, path) = [
                ("POST", CHAT),
                ("POST", COMPLETIONS),
                ("POST", EMBEDDINGS),
                ("GET", "/v1/models"),
                ("GET", "/v1/models/rwkv"),
                ("GET", "/metrics"),
            ][v % 6];
            let body = if method == "POST" {
                chat_with(json!({}))
            } else {
                Vec::new()
            };
            let what = format!(
                "{method} {path} with Authorization {:?}",
                String::from_utf8_lossy(auth)
            );
            case(what, http(method, path.as_bytes(), Some(auth), &body), 401)
                .code("invalid_api_key")
        }
        10 => {
            let model = ["gpt-4o", "RWKV", "rwkv ", "../rwkv", "\u{1F600}"][v % 5];
            let (path, body) = [
                (
                    CHAT,
                    json!({"model": model, "messages": [{"role": "user", "content": "Hi"}]}),
                ),
                (COMPLETIONS, json!({"model": model, "prompt": "Hi"})),
                (EMBEDDINGS, json!({"model": model, "input": "Hi"})),
            ][v % 3]
                .clone();
            case(
                format!("model {model:?} to {path}"),
                post(path, &serde_json::to_vec(&body).unwrap()),
                404,
            )
            .param("model")
            .code("model_not_found")
        }
        11 => {
            let path = ["/v1/models/gpt-4o", "/v1/models/rwkv2", "/v1/models/%00"][v % 3];
            case(
                format!("GET {path}"),
                http("GET", path.as_bytes(), None, b""),
                404,
            )
            .code("model_not_found")
        }
        12 => {
            let (method, path, status) = [
                ("GET", CHAT, 405),
                ("PUT", CHAT, 405),
                ("DELETE", COMPLETIONS, 405),
                ("PATCH", EMBEDDINGS, 405),
                ("GET", EMBEDDINGS, 405),
                ("POST", "/v1/models", 405),
                ("POST", "/v1/chat/completion", 404),
                ("GET", "/v2/chat/completions", 404),
                ("POST", "/", 404),
                ("GET", "/v1/models/rwkv/extra", 404),
                ("DELETE", "/nowhere", 405),
            ][v % 11];
            let body = if method == "GET" {
                Vec::new()
            } else {
                chat_with(json!({}))
            };
            case(
                format!("{method} {path}"),
                http(method, path.as_bytes(), None, &body),
                status,
            )
        }
        13 => {
            // Invalid UTF-8 inside a JSON string, in a key, and bare.
            let body: &[u8] = [
                &br#"{"messages":[{"role":"user","content":"caf\xc3"}]}"#[..],
                b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",
                b"{\"mess\xc0ges\":[]}",
                b"\xef\xbb\xbf{\"messages\":[]}",
                b"{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",
                b"{\"prompt\":\"\xed\xa0\x80\"}",
            ][v % 6];
            let path = if body.starts_with(b"{\"prompt") {
                COMPLETIONS
            } else {
                CHAT
            };
            case(format!("invalid UTF-8 #{}", v % 6), post(path, body), 400)
        }
        14 => {
            // Nesting far beyond serde_json's recursion limit, in each kind of place.
            // (Under the body limit: 5 bytes a level at most.)
            let depth = 129 + (v * 397) % 9000;
            let nest =
                |open: &str, close: &str| format!("{}1{}", open.repeat(depth), close.repeat(depth));
            let body = match v % 4 {
                0 => format!(r#"{{"messages":{}}}"#, nest("[", "]")),
                1 => String::from_utf8(chat_raw("tools", &nest("[", "]"))).unwrap(),
                2 => String::from_utf8(chat_raw("metadata", &nest(r#"{"a":"#, "}"))).unwrap(),
                _ => format!(r#"{{"input":{}}}"#, nest("[", "]")),
            };
            let path = if v % 4 == 3 { EMBEDDINGS } else { CHAT };
            case(
                format!("nested {depth} deep (#{})", v % 4),
                post(path, body.as_bytes()),
                400,
            )
        }
        15 => {
            let (field, n) = [
                ("max_tokens", 0u64),
                ("max_completion_tokens", 0),
                ("max_tokens", MAX_TOKENS_CAP as u64 + 1),
                ("max_completion_tokens", u64::MAX),
            ][v % 4];
            // `max_completion_tokens` is checked as `max_tokens`.
            case(
                format!("{field}: {n}"),
                post(CHAT, &chat_with(json!({ field: n }))),
                400,
            )
            .param("max_tokens")
        }
        16 => {
            let stop: Value = match v % 3 {
                0 => (0..20).map(|k| format!("stop{k}")).collect(),
                1 => json!(["ok", "x".repeat(257)]),
                _ => json!("y".repeat(1000)),
            };
            case(
                format!("stop #{}", v % 3),
                post(CHAT, &chat_with(json!({ "stop": stop }))),
                400,
            )
            .param("stop")
        }
        17 => {
            let (extra, param) = [
                (json!({"n": 2}), "n"),
                (json!({"top_logprobs": 3}), "top_logprobs"),
                (
                    json!({"logprobs": true, "top_logprobs": 21}),
                    "top_logprobs",
                ),
                (
                    json!({"response_format": {"type": "xml"}}),
                    "response_format",
                ),
                (json!({"tools": [{"type": "function"}]}), "tools"),
                (json!({"messages": []}), "messages"),
                (
                    json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                    "messages[0].content[0].type",
                ),
            ][v % 7]
                .clone();
            case(
                format!("chat refusal of {param}"),
                post(CHAT, &chat_with(extra)),
                400,
            )
            .param(param)
        }
        18 => {
            let (body, param) = [
                (json!({"prompt": ["a", "b"]}), "prompt"),
                (json!({"prompt": ""}), "prompt"),
                (json!({"prompt": []}), "prompt"),
                (json!({"prompt": [65536]}), "prompt"),
                (json!({"prompt": [[1], [2]]}), "prompt"),
                (json!({"prompt": "a", "suffix": "b"}), "suffix"),
                (json!({"prompt": "a", "logprobs": 6}), "logprobs"),
                (json!({"prompt": "a", "n": 3}), "n"),
            ][v % 8]
                .clone();
            case(
                format!("completions refusal of {param}"),
                post(COMPLETIONS, &serde_json::to_vec(&body).unwrap()),
                400,
            )
            .param(param)
        }
        19 => {
            let many: Vec<&str> = vec!["a"; 2049];
            let (body, param) = [
                (json!({"input": []}), "input"),
                (json!({"input": many}), "input"),
                (json!({"input": "a", "dimensions": 7}), "dimensions"),
                (
                    json!({"input": "a", "encoding_format": "int8"}),
                    "encoding_format",
                ),
                (json!({"input": [[1], []]}), "input[1]"),
                (json!({"input": [[1, 99999]]}), "input[0]"),
            ][v % 6]
                .clone();
            case(
                format!("embeddings refusal of {param}"),
                post(EMBEDDINGS, &serde_json::to_vec(&body).unwrap()),
                400,
            )
            .param(param)
        }
        20 => {
            // Over the prompt limit: token ids, a long message, a long input.
            let ids = vec![33u32; MAX_PROMPT + 1 + v];
            let text = "word ".repeat(MAX_PROMPT + 1 + v);
            let (path, body) = [
                (COMPLETIONS, json!({"prompt": ids})),
                (
                    CHAT,
                    json!({"messages": [{"role": "user", "content": text}]}),
                ),
                (EMBEDDINGS, json!({"input": [[1], ids]})),
            ][v % 3]
                .clone();
            case(
                format!("a prompt over {MAX_PROMPT} tokens to {path}"),
                post(path, &serde_json::to_vec(&body).unwrap()),
                400,
            )
            .code("context_length_exceeded")
        }
        21 => {
            let body: &[u8] = [
                &b""[..],
                b"[]",
                b"null",
                b"1",
                b"\"messages\"",
                b"{}",
                b"   ",
                b"{\"messages\":[]} x",
            ][v % 8];
            let path = [CHAT, COMPLETIONS, EMBEDDINGS][v % 3];
            case(
                format!("body {:?} to {path}", String::from_utf8_lossy(body)),
                post(path, body),
                400,
            )
        }
        22 => {
            // Lengths that lie (shorter than the body: the JSON ends early).
            let body = chat_with(json!({}));
            let mut raw = format!(
                "POST {CHAT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {}\r\n\r\n",
                body.len() / 2
            )
            .into_bytes();
            raw.extend_from_slice(&body[..body.len() / 2]);
            case("Content-Length half the body", raw, 400)
        }
        _ => {
            // Not HTTP: hyper answers 400 itself, before any route (no JSON body).
            let raw: &[u8] = [
                &b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}"[..],
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                b"GET /v1/mod\xffels HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                b"\x00\x01\x02 garbage\r\n\r\n",
            ][v % 6];
            Case {
                openai: false,
                ..case(format!("not HTTP #{}", v % 6), raw.to_vec(), 400)
            }
        }
    }
}

#[test]
fn a_thousand_malformed_requests_leave_the_server_serving() {
    let server = start();
    let addr = server.addr();
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    let mut wrong = Vec::new();
    for i in 0..REQUESTS {
        let c = malformed(i);
        let r = send(addr, &c.raw);
        if let Err(why) = check(&c, &r) {
            wrong.push(format!("#{i} {why}"));
        }
        *by_status.entry(r.status).or_default() += 1;
    }
    assert!(
        wrong.is_empty(),
        "{} of {REQUESTS} answered wrongly:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(by_status.values().sum::<usize>(), REQUESTS);
    eprintln!("answers by status: {by_status:?}");

    let health = send(addr, &http("GET", b"/health", Some(b""), b""));
    assert_eq!(health.status, 200);
    let v: Value = serde_json::from_slice(&health.body).unwrap();
    assert_eq!(v["status"], "ok");

    let body = serde_json::to_vec(&json!({
        "model": "rwkv", "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4, "temperature": 0
    }))
    .unwrap();
    let r = send(addr, &post(CHAT, &body));
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 200, "{text}");
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["choices"][0]["message"]["role"], "assistant", "{text}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{text}");
    let finish = v["choices"][0]["finish_reason"].as_str().unwrap_or("");
    assert!(["stop", "length"].contains(&finish), "{text}");
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    assert!((1..=4).contains(&completion), "{text}");
    assert!(server.stop().is_some(), "the engine comes back");
}
