//! The HTTP side of the server tests: requests written as raw bytes (so that a body can
//! be invalid UTF-8, a header wrong, a length a lie), sent on a fresh TCP connection, the
//! answer read to the end; and the check that an answer is the expected status with
//! OpenAI's error JSON.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// The API key the test servers are started with.
pub const KEY: &str = "sk-test-7f3a";

/// An answer: status, header lines (lower-cased), body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
}

/// Sends `raw` on a fresh connection and reads the answer to the end (every request says
/// `Connection: close`).
pub fn send(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    // A server may answer (413) and close before it has read all of a long body: the rest
    // of the write, and the read after the answer, may then meet a reset.
    let reset =
        |e: &std::io::Error| matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset);
    if let Err(e) = s.write_all(raw) {
        assert!(reset(&e), "send the request: {e}");
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if reset(&e) && !buf.is_empty() => break,
            Err(e) => panic!("read the answer: {e}"),
        }
    }
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let mut body = buf[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers: head,
        body,
    }
}

pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").expect("chunk size");
        let size = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16)
            .expect("chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

/// A request with the right key unless `auth` gives another `Authorization` line (empty:
/// none).
pub fn http(method: &str, path: &[u8], auth: Option<&[u8]>, body: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(method.as_bytes());
    r.push(b' ');
    r.extend_from_slice(path);
    r.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    match auth {
        None => r.extend_from_slice(format!("Authorization: Bearer {KEY}\r\n").as_bytes()),
        Some(b"") => {}
        Some(line) => {
            r.extend_from_slice(b"Authorization: ");
            r.extend_from_slice(line);
            r.extend_from_slice(b"\r\n");
        }
    }
    if !body.is_empty() || method == "POST" {
        r.extend_from_slice(b"Content-Type: application/json\r\n");
        r.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(body);
    r
}

pub fn post(path: &str, body: &[u8]) -> Vec<u8> {
    http("POST", path.as_bytes(), None, body)
}

pub const CHAT: &str = "/v1/chat/completions";
pub const COMPLETIONS: &str = "/v1/completions";
pub const EMBEDDINGS: &str = "/v1/embeddings";

/// What a request must get.
pub struct Case {
    pub what: String,
    pub raw: Vec<u8>,
    pub status: u16,
    /// `Some(p)`: the error's `param` must be `p`.
    pub param: Option<&'static str>,
    /// `Some(c)`: the error's `code` must be `c`.
    pub code: Option<&'static str>,
    /// `false` for the requests that are not HTTP, which hyper answers with no body.
    pub openai: bool,
}

pub fn case(what: impl Into<String>, raw: Vec<u8>, status: u16) -> Case {
    Case {
        what: what.into(),
        raw,
        status,
        param: None,
        code: None,
        openai: true,
    }
}

impl Case {
    pub fn param(mut self, p: &'static str) -> Self {
        self.param = Some(p);
        self
    }
    pub fn code(mut self, c: &'static str) -> Self {
        self.code = Some(c);
        self
    }
}

/// Checks `r` against `c`: the status, and OpenAI's error object. `Err`: what is wrong.
pub fn check(c: &Case, r: &Reply) -> Result<(), String> {
    let text = String::from_utf8_lossy(&r.body);
    let fail = |why: String| Err(format!("{}: {why}; got {} {text}", c.what, r.status));
    if r.status != c.status {
        return fail(format!("status, want {}", c.status));
    }
    if !c.openai {
        return Ok(());
    }
    if !r.headers.contains("content-type: application/json") {
        return fail(format!("not JSON: {}", r.headers));
    }
    let Ok(v) = serde_json::from_slice::<Value>(&r.body) else {
        return fail("the body is not JSON".into());
    };
    let Some(err) = v.get("error").and_then(Value::as_object) else {
        return fail("no `error` object".into());
    };
    let message = err.get("message").and_then(Value::as_str).unwrap_or("");
    if message.trim().is_empty() {
        return fail("no message".into());
    }
    if !err.get("type").is_some_and(Value::is_string) {
        return fail("no type".into());
    }
    for key in ["param", "code"] {
        if !err.get(key).is_some_and(|x| x.is_null() || x.is_string()) {
            return fail(format!("no `{key}` (null or a string)"));
        }
    }
    if let Some(p) = c.param {
        if err["param"].as_str() != Some(p) {
            return fail(format!("param, want {p:?}"));
        }
    }
    if let Some(code) = c.code {
        if err["code"].as_str() != Some(code) {
            return fail(format!("code, want {code:?}"));
        }
    }
    Ok(())
}
