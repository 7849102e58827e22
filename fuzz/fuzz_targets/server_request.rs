//! The server's request checks (`rwkv_server::request`: what the chat, completions and
//! embeddings handlers run on a body before anything is queued) on arbitrary bytes, each
//! input through all three: never a panic; every refusal a 4xx with a message and OpenAI's
//! error JSON; what is accepted is work the engine can take (token ids below the
//! vocabulary, a prompt within the limit, `max_tokens` within the cap).
//!
//! The configuration is the default one with smaller limits (so that a fuzzed input can
//! cross them); the tokenizer is the World one the demo model uses; one reply is
//! remembered, so that an assistant message can take the reply-memory path.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rwkv_engine::Tokenizer;
use rwkv_server::request::{chat_request, completion_request, embedding_request, MAX_INPUTS};
use rwkv_server::template::ReplyMemory;
use rwkv_server::{ApiError, ServerConfig};

/// The demo model's embedding width.
const DIM: usize = 256;

struct Fixture {
    cfg: ServerConfig,
    tok: Tokenizer,
    memory: ReplyMemory,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let cfg = ServerConfig {
            max_body_bytes: 32 << 10,
            max_prompt_tokens: 2048,
            max_tokens_cap: 1024,
            default_max_tokens: 256,
            ..ServerConfig::default()
        };
        let tok = Tokenizer::world().expect("the World tokenizer");
        let mut memory = ReplyMemory::new(4);
        memory.put("Hello!".into(), tok.encode(" Hello!\n\n"));
        Fixture { cfg, tok, memory }
    })
}

/// A refusal is a 4xx with a message, and its JSON is OpenAI's error object.
fn check_error(e: &ApiError) {
    assert!(e.status.is_client_error(), "{e:?}");
    assert!(!e.message.trim().is_empty(), "{e:?}");
    let v: serde_json::Value = serde_json::from_str(&e.to_json()).expect("error JSON");
    let err = &v["error"];
    assert_eq!(err["message"].as_str(), Some(e.message.as_str()));
    assert_eq!(err["type"].as_str(), Some(e.kind));
    assert_eq!(err["param"].as_str(), e.param.as_deref());
    assert_eq!(err["code"].as_str(), e.code);
    assert!(
        err.get("param").is_some() && err.get("code").is_some(),
        "{v}"
    );
}

/// Accepted tokens: at least one, each below the vocabulary, within the prompt limit.
fn check_ids(f: &Fixture, ids: &[u32]) {
    assert!(!ids.is_empty());
    assert!(ids.len() <= f.cfg.max_prompt_tokens);
    let vocab = f.tok.vocab_size();
    assert!(ids.iter().all(|&t| (t as usize) < vocab));
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    match chat_request(data, &f.cfg, &f.tok, &f.memory) {
        Ok((prompt, params)) => {
            check_ids(f, &prompt);
            assert!((1..=f.cfg.max_tokens_cap).contains(&params.max_tokens));
            // The template's own stop is always there.
            assert_eq!(
                params.sampler.stop_strings.first().map(String::as_str),
                Some("\n\n")
            );
            params
                .sampler
                .validate()
                .expect("accepted sampling is valid");
        }
        Err(e) => check_error(&e),
    }
    match completion_request(data, &f.cfg, &f.tok) {
        Ok((prompt, params, _echo)) => {
            check_ids(f, &prompt);
            assert!((1..=f.cfg.max_tokens_cap).contains(&params.max_tokens));
            assert!(params.logprobs.is_none_or(|k| k <= 5));
            params
                .sampler
                .validate()
                .expect("accepted sampling is valid");
        }
        Err(e) => check_error(&e),
    }
    match embedding_request(data, &f.cfg, &f.tok, DIM) {
        Ok((inputs, _base64)) => {
            assert!((1..=MAX_INPUTS).contains(&inputs.len()));
            for ids in &inputs {
                check_ids(f, ids);
            }
        }
        Err(e) => check_error(&e),
    }
});
