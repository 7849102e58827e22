//! The `server_request` fuzz target's seeds and minimized corpus (`fuzz/seeds/server_request/`,
//! `fuzz/corpus-min/server_request/`) replayed as an ordinary test, with the target's checks
//! (`fuzz/fuzz_targets/server_request.rs`): every input goes through the chat, completions
//! and embeddings checks, and each gives work the engine can take or a 4xx with a message
//! and OpenAI's error JSON. The seeds are requests written by hand (fuzz/make_seeds.py), so
//! each must also get the answer it was written for: accepted, or refused naming its field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;

use rwkv_engine::Tokenizer;
use rwkv_server::request::{chat_request, completion_request, embedding_request, MAX_INPUTS};
use rwkv_server::template::ReplyMemory;
use rwkv_server::{ApiError, ServerConfig};

/// The demo model's embedding width (the target's `DIM`).
const DIM: usize = 256;

/// The target's configuration: the default one with limits a fuzzed input can cross.
fn config() -> ServerConfig {
    ServerConfig {
        max_body_bytes: 32 << 10,
        max_prompt_tokens: 2048,
        max_tokens_cap: 1024,
        default_max_tokens: 256,
        ..ServerConfig::default()
    }
}

/// `name → bytes` of the committed seeds and of the minimized corpus.
fn inputs(dir: &str) -> BTreeMap<String, Vec<u8>> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(dir)
        .join("server_request");
    let Ok(rd) = std::fs::read_dir(&d) else {
        return BTreeMap::new();
    };
    rd.map(|e| {
        let p = e.expect("dir entry").path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        (name, std::fs::read(&p).expect("corpus file"))
    })
    .collect()
}

fn check_error(name: &str, e: &ApiError) {
    assert!(e.status.is_client_error(), "{name}: {e:?}");
    assert!(!e.message.trim().is_empty(), "{name}: {e:?}");
    let v: serde_json::Value = serde_json::from_str(&e.to_json()).expect("error JSON");
    let err = &v["error"];
    assert_eq!(err["message"].as_str(), Some(e.message.as_str()), "{name}");
    assert_eq!(err["type"].as_str(), Some(e.kind), "{name}");
    assert_eq!(err["param"].as_str(), e.param.as_deref(), "{name}");
    assert_eq!(err["code"].as_str(), e.code, "{name}");
    assert!(
        err.get("param").is_some() && err.get("code").is_some(),
        "{name}: {v}"
    );
}

fn check_ids(name: &str, cfg: &ServerConfig, tok: &Tokenizer, ids: &[u32]) {
    assert!(!ids.is_empty(), "{name}");
    assert!(ids.len() <= cfg.max_prompt_tokens, "{name}");
    assert!(
        ids.iter().all(|&t| (t as usize) < tok.vocab_size()),
        "{name}"
    );
}

/// What each endpoint answered: `Ok` or the refusal's (status, param).
type Verdict = Result<(), (u16, Option<String>)>;

/// Runs `input` through the three checks with the target's assertions.
fn replay(
    name: &str,
    input: &[u8],
    cfg: &ServerConfig,
    tok: &Tokenizer,
    mem: &ReplyMemory,
) -> [Verdict; 3] {
    let verdict = |e: ApiError| {
        check_error(name, &e);
        Err((e.status.as_u16(), e.param))
    };
    let chat = match chat_request(input, cfg, tok, mem) {
        Ok((prompt, params)) => {
            check_ids(name, cfg, tok, &prompt);
            assert!(
                (1..=cfg.max_tokens_cap).contains(&params.max_tokens),
                "{name}"
            );
            assert_eq!(
                params.sampler.stop_strings.first().map(String::as_str),
                Some("\n\n"),
                "{name}"
            );
            params.sampler.validate().expect("accepted sampling");
            Ok(())
        }
        Err(e) => verdict(e),
    };
    let completion = match completion_request(input, cfg, tok) {
        Ok((prompt, params, _)) => {
            check_ids(name, cfg, tok, &prompt);
            assert!(
                (1..=cfg.max_tokens_cap).contains(&params.max_tokens),
                "{name}"
            );
            assert!(params.logprobs.is_none_or(|k| k <= 5), "{name}");
            params.sampler.validate().expect("accepted sampling");
            Ok(())
        }
        Err(e) => verdict(e),
    };
    let embedding = match embedding_request(input, cfg, tok, DIM) {
        Ok((inputs, _)) => {
            assert!((1..=MAX_INPUTS).contains(&inputs.len()), "{name}");
            for ids in &inputs {
                check_ids(name, cfg, tok, ids);
            }
            Ok(())
        }
        Err(e) => verdict(e),
    };
    [chat, completion, embedding]
}

fn fixture() -> (ServerConfig, Tokenizer, ReplyMemory) {
    let tok = Tokenizer::world().expect("the World tokenizer");
    let mut mem = ReplyMemory::new(4);
    mem.put("Hello!".into(), tok.encode(" Hello!\n\n"));
    (config(), tok, mem)
}

#[test]
fn server_request_seeds_get_the_answers_they_were_written_for() {
    let (cfg, tok, mem) = fixture();
    let seeds = inputs("seeds");
    assert!(
        seeds.len() >= 30,
        "fuzz/seeds/server_request/ is missing: run fuzz/make_seeds.py"
    );
    let ok = Ok(());
    let bad = |param: &str| Err((400, Some(param.to_string())));
    // (seed, endpoint: 0 chat, 1 completions, 2 embeddings, expected answer)
    let want: &[(&str, usize, Verdict)] = &[
        ("chat-full", 0, ok.clone()),
        ("chat-min", 0, ok.clone()),
        ("all-three", 0, ok.clone()),
        ("all-three", 1, ok.clone()),
        ("all-three", 2, ok.clone()),
        ("completion-text", 1, ok.clone()),
        ("completion-tokens", 1, ok.clone()),
        ("completion-token-lists", 1, ok.clone()),
        ("completion-texts", 1, ok.clone()),
        ("embedding-text", 2, ok.clone()),
        ("embedding-texts-base64", 2, ok.clone()),
        ("embedding-tokens", 2, ok.clone()),
        ("chat-parts-image", 0, bad("messages[0].content[1].type")),
        // Issue 30: tools and JSON response formats are served (constrained decoding).
        ("chat-tools", 0, ok.clone()),
        ("chat-json-format", 0, ok.clone()),
        ("chat-top-logprobs-alone", 0, bad("top_logprobs")),
        ("chat-top-logprobs-21", 0, bad("top_logprobs")),
        ("chat-max-tokens-0", 0, bad("max_tokens")),
        ("chat-max-tokens-huge", 0, bad("max_tokens")),
        ("chat-stops-5", 0, bad("stop")),
        ("chat-stop-long", 0, bad("stop")),
        ("chat-unknown-role", 0, bad("messages[0].role")),
        ("chat-other-model", 0, Err((404, Some("model".into())))),
        ("chat-empty", 0, bad("messages")),
        ("chat-n-2", 0, bad("n")),
        ("chat-temperature-3", 0, bad("temperature")),
        ("completion-several", 1, bad("prompt")),
        ("completion-big-token", 1, bad("prompt")),
        ("completion-empty", 1, bad("prompt")),
        ("completion-suffix", 1, bad("suffix")),
        ("completion-logprobs-6", 1, bad("logprobs")),
        ("embedding-token-lists", 2, bad("input[2]")),
        ("embedding-empty", 2, bad("input")),
        ("embedding-empty-input", 2, bad("input[1]")),
        ("embedding-bad-format", 2, bad("encoding_format")),
        ("embedding-dimensions-7", 2, bad("dimensions")),
        ("not-json", 0, Err((400, None))),
    ];
    for (name, endpoint, expected) in want {
        let input = seeds
            .get(*name)
            .unwrap_or_else(|| panic!("seed {name} missing: run fuzz/make_seeds.py"));
        let got = &replay(name, input, &cfg, &tok, &mem)[*endpoint];
        assert_eq!(got, expected, "{name} at endpoint {endpoint}");
    }
    // The truncated one is refused everywhere as JSON that ends early.
    let got = replay("truncated", &seeds["truncated"], &cfg, &tok, &mem);
    assert!(got.iter().all(|v| matches!(v, Err((400, _)))), "{got:?}");
}

#[test]
fn server_request_corpus_replays() {
    let (cfg, tok, mem) = fixture();
    let mut n = 0;
    let mut accepted = [0usize; 3];
    for dir in ["seeds", "corpus-min"] {
        for (name, input) in inputs(dir) {
            let got = replay(&name, &input, &cfg, &tok, &mem);
            for (a, v) in accepted.iter_mut().zip(&got) {
                *a += usize::from(v.is_ok());
            }
            n += 1;
        }
    }
    assert!(n >= 30, "{n} inputs");
    // The seeds alone hold accepted requests of each endpoint.
    assert!(accepted.iter().all(|&a| a >= 3), "{accepted:?}");
}

#[test]
fn a_body_over_the_limit_is_413_before_it_is_parsed() {
    let (cfg, tok, mem) = fixture();
    // Valid JSON, one byte over the limit.
    let mut body = br#"{"messages":[{"role":"user","content":"hi"}]}"#.to_vec();
    body.resize(cfg.max_body_bytes + 1, b' ');
    let e = chat_request(&body, &cfg, &tok, &mem).unwrap_err();
    assert_eq!(e.status.as_u16(), 413);
    body.truncate(cfg.max_body_bytes);
    assert!(chat_request(&body, &cfg, &tok, &mem).is_ok());
}
