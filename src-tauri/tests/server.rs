//! The Local server panel's commands (`server_start`, `server_status`, `server_stop`)
//! through Tauri's IPC (mock runtime) on the real engine and the bundled model, with real
//! HTTP requests to the server (plain `TcpStream`, HTTP/1.1): one model on the GPU that
//! the server holds and the app's chat borrows; a taken port, bad settings and a missing
//! model as readable errors; unloading, loading and app exit stopping it (the port freed).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};
use support::{model, test_app, TestApp};

const MODEL_ID: &str = "rwkv7-demo-6x256-Q4_K_M";

/// An HTTP/1.1 request to 127.0.0.1:`port`; returns the status and the JSON body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         {auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8(raw).expect("UTF-8 answer");
    let (head, rest) = text.split_once("\r\n\r\n").expect("headers end");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let json = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, json)
}

/// A chunked body's data.
fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

fn chat_completion(port: u16, max_tokens: usize, key: Option<&str>) -> (u16, Value) {
    let body = json!({
        "messages": [{ "role": "user", "content": "Hello" }],
        "max_tokens": max_tokens,
        "temperature": 0,
    });
    http(port, "POST", "/v1/chat/completions", Some(&body), key)
}

/// Asserts an OpenAI chat completion of the bundled model.
fn assert_completion(v: &Value) {
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["model"], MODEL_ID, "{v}");
    let choice = &v["choices"][0];
    assert!(
        choice["message"]["content"].is_string(),
        "a reply text: {v}"
    );
    let finish = choice["finish_reason"].as_str().unwrap_or("");
    assert!(["stop", "length"].contains(&finish), "{v}");
}

/// Nothing listens on `port` any more.
fn assert_refused(port: u16) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let e = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .expect_err("the port is free after the server stopped");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

fn start(t: &TestApp, port: u16, key: Option<&str>, parallel: u32) -> Result<Value, Value> {
    t.call(
        "server_start",
        json!({ "port": port, "apiKey": key, "parallel": parallel }),
    )
}

fn port_of(st: &Value) -> u16 {
    st["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("a port")
}

/// A chat of short greedy replies; returns its id.
fn new_chat(t: &TestApp) -> String {
    let chat = t.ok("chat_create", json!({}));
    let id = chat["id"].as_str().expect("id").to_string();
    t.set_max_tokens(&id, 8);
    id
}

#[test]
fn serves_the_loaded_model_while_the_app_borrows_it() {
    let t = test_app("server-serve");
    let e = start(&t, 0, None, 2).expect_err("no model yet");
    assert_eq!(e["code"], "no_model", "{e}");

    t.load_default();
    let st = start(&t, 0, None, 2).expect("the server starts");
    assert_eq!(st["running"], true);
    let port = port_of(&st);
    assert_ne!(port, 0, "port 0 picks a free port and reports it");
    assert_eq!(st["base_url"], format!("http://127.0.0.1:{port}/v1"));
    assert_eq!(st["model_id"], MODEL_ID);
    assert_eq!(st["parallel"], 2);
    assert_eq!(st["api_key"], false);
    // The model is the server's now, and still the app's loaded model.
    let info = t.ok("model_info", json!({}));
    assert!(info["path"].as_str().is_some_and(|p| p.ends_with(".gguf")));
    let again = start(&t, 0, None, 2).expect_err("one server at a time");
    assert_eq!(again["code"], "server", "{again}");
    assert!(again["message"]
        .as_str()
        .is_some_and(|m| m.contains("already running")));

    let (code, v) = chat_completion(port, 8, None);
    assert_eq!(code, 200, "{v}");
    assert_completion(&v);
    let (code, models) = http(port, "GET", "/v1/models", None, None);
    assert_eq!(code, 200);
    assert_eq!(models["data"][0]["id"], MODEL_ID);

    // A stream in flight while the app chats: the chat borrows the engine (serving
    // pauses), and both finish.
    let streaming = std::thread::spawn(move || chat_completion(port, 48, None));
    let chat = new_chat(&t);
    let reply = t
        .send(&chat, "Where is the ship?")
        .expect("a chat reply while serving");
    assert!(reply["stats"]["generated_tokens"]
        .as_u64()
        .is_some_and(|n| n > 0));
    let (code, v) = streaming.join().expect("the request thread");
    assert_eq!(code, 200, "{v}");
    assert_completion(&v);
    // The engine went back to the server after the chat.
    let (code, v) = chat_completion(port, 8, None);
    assert_eq!(code, 200, "{v}");

    let st = t.ok("server_status", json!({}));
    assert_eq!(st["running"], true);
    assert!(
        st["stats"]["requests"].as_u64().is_some_and(|n| n >= 3),
        "{st}"
    );
    assert!(st["stats"]["generated_tokens"]
        .as_u64()
        .is_some_and(|n| n > 0));

    let st = t.ok("server_stop", json!({}));
    assert_eq!(st["running"], false);
    assert_eq!(
        st["stopped"],
        Value::Null,
        "switched off by the user: no note"
    );
    assert_refused(port);
    // The engine is the app's again.
    t.send(&chat, "And then?")
        .expect("a chat reply after the server stopped");
    assert_eq!(t.ok("server_stop", json!({}))["running"], false);
}

#[test]
fn a_taken_port_bad_settings_and_keys_are_refused() {
    let t = test_app("server-refuse");
    t.load_default();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let port = taken.local_addr().expect("addr").port();
    let e = start(&t, port, None, 4).expect_err("the port is taken");
    assert_eq!(e["code"], "server", "{e}");
    assert_eq!(e["details"]["port"], port);
    assert!(e["message"]
        .as_str()
        .is_some_and(|m| m.contains("already in use") && m.contains(&port.to_string())));
    // The model stayed with the app.
    assert_ne!(t.ok("model_info", json!({})), Value::Null);
    let chat = new_chat(&t);
    t.send(&chat, "Hello").expect("a chat reply");
    drop(taken);

    for args in [
        json!({ "port": 70_000, "apiKey": null, "parallel": 4 }),
        json!({ "port": 0, "apiKey": null, "parallel": 0 }),
        json!({ "port": 0, "apiKey": "two words", "parallel": 4 }),
    ] {
        let e = t.err("server_start", args.clone());
        assert_eq!(e["code"], "bad_request", "{args}: {e}");
    }
    assert_eq!(t.ok("server_status", json!({}))["running"], false);

    let st = start(&t, 0, Some("sk-local"), 1).expect("starts with a key");
    assert_eq!(st["api_key"], true);
    let port = port_of(&st);
    assert_eq!(chat_completion(port, 4, None).0, 401);
    assert_eq!(chat_completion(port, 4, Some("sk-other")).0, 401);
    let (code, v) = chat_completion(port, 4, Some("sk-local"));
    assert_eq!(code, 200, "{v}");
    assert_completion(&v);
    t.ok("server_stop", json!({}));
    assert_refused(port);
}

#[test]
fn unloading_loading_and_exit_stop_the_server() {
    let t = test_app("server-stops");
    t.load_default();
    let port = port_of(&start(&t, 0, None, 2).expect("starts"));
    t.ok("model_unload", json!({}));
    let st = t.ok("server_status", json!({}));
    assert_eq!(st["running"], false);
    assert!(st["stopped"]
        .as_str()
        .is_some_and(|m| m.contains("unloaded or replaced")));
    assert_refused(port);
    assert_eq!(t.ok("model_info", json!({})), Value::Null);

    // A file that does not parse leaves the model loaded and served.
    t.load_default();
    let port = port_of(&start(&t, 0, None, 2).expect("starts"));
    std::fs::create_dir_all(t.dir()).expect("dir");
    let broken = t.dir().join("broken.gguf");
    let bytes = std::fs::read(model()).expect("model");
    std::fs::write(&broken, &bytes[..1_000_000]).expect("write");
    t.allow(&broken);
    let e = t
        .load(Some(&broken))
        .expect_err("a truncated file does not load");
    assert_eq!(e["code"], "malformed_file", "{e}");
    assert_eq!(t.ok("server_status", json!({}))["running"], true);
    assert_eq!(chat_completion(port, 4, None).0, 200);
    // Loading a model stops it.
    t.load_default();
    assert_eq!(t.ok("server_status", json!({}))["running"], false);
    assert_refused(port);

    // App exit: the engine thread stops it.
    let st = start(&t, 0, None, 2).expect("starts");
    assert!(t.engine().shutdown(Duration::from_secs(60)));
    assert_refused(port_of(&st));
    assert_eq!(t.ok("server_status", json!({}))["running"], false);
}
