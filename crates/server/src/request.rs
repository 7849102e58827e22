//! A request body → the work it asks for, checked: what the chat, completions and
//! embeddings handlers do before they queue anything. Pure (no HTTP, no engine, no GPU), so
//! the fuzz target (`fuzz/fuzz_targets/server_request.rs`) and the tests call it directly.
//!
//! Every refusal is an [`ApiError`] with a 4xx status: 413 for a body over
//! [`ServerConfig::max_body_bytes`], 404 for another model, 400 naming the field otherwise.

use rwkv_engine::Tokenizer;
use serde::de::DeserializeOwned;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::openai::request::{ChatRequest, CompletionRequest, EmbeddingRequest, Input, Sampling};
use crate::options::{chat_logprobs, gen_params, GenParams};
use crate::structured::structured;
use crate::template::{render_chat, ReplyMemory, CHAT_STOP};

/// Most alternatives legacy completions list per token.
pub const MAX_LEGACY_LOGPROBS: u32 = 5;
/// OpenAI's default `max_tokens` for completions.
pub const COMPLETIONS_DEFAULT_MAX: usize = 16;
/// Most inputs one embeddings request may hold (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// `POST /v1/chat/completions`: the prompt's tokens (the chat template rendered, replies
/// this server generated reused from `memory`) and the generation's parameters.
///
/// Errors: 413 for a body over the limit; 404 for another model; 400 for a body that is
/// not a chat request (naming the field), a bad `response_format`, `tools` or
/// `tool_choice` ([`structured`]; the constraint is compiled by the handler), bad
/// sampling values ([`gen_params`]), bad messages ([`render_chat`]) or a prompt over
/// [`ServerConfig::max_prompt_tokens`] (`context_length_exceeded`).
pub fn chat_request(
    body: &[u8],
    cfg: &ServerConfig,
    tok: &Tokenizer,
    memory: &ReplyMemory,
) -> Result<(Vec<u32>, GenParams), ApiError> {
    let req: ChatRequest = parse_flat(body, cfg)?;
    check_model(cfg, req.model.as_deref())?;
    let structured = structured(&req)?;
    let logprobs = chat_logprobs(req.logprobs, req.top_logprobs)?;
    let max = req.max_completion_tokens.or(req.sampling.max_tokens);
    let params = gen_params(
        cfg,
        &req.sampling,
        max,
        cfg.default_max_tokens,
        logprobs,
        &[CHAT_STOP],
    )?;
    let mut params = params;
    params.constraint = structured.spec;
    params.tool_calls = structured.tool_calls;
    let prompt = render_chat(tok, structured.preamble.as_deref(), &req.messages, memory)?;
    check_length(cfg, &prompt)?;
    Ok((prompt, params))
}

/// `POST /v1/completions`: the prompt's tokens, the generation's parameters, and the
/// prompt's text when `echo` asks for it.
///
/// Errors: 413 for a body over the limit; 404 for another model; 400 for a body that is
/// not a completions request, a `suffix`, `logprobs` above [`MAX_LEGACY_LOGPROBS`], bad
/// sampling values, several prompts, an empty prompt, a token id not below the
/// vocabulary, or a prompt over the limit.
pub fn completion_request(
    body: &[u8],
    cfg: &ServerConfig,
    tok: &Tokenizer,
) -> Result<(Vec<u32>, GenParams, Option<String>), ApiError> {
    let req: CompletionRequest = parse_flat(body, cfg)?;
    check_model(cfg, req.model.as_deref())?;
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid(
            Some("suffix"),
            "`suffix` is not supported",
        ));
    }
    let logprobs = match req.logprobs {
        Some(k) if k > MAX_LEGACY_LOGPROBS => {
            return Err(ApiError::invalid(
                Some("logprobs"),
                format!("`logprobs` is {k}; at most {MAX_LEGACY_LOGPROBS}"),
            ))
        }
        k => k.map(|k| k as usize),
    };
    let params = gen_params(
        cfg,
        &req.sampling,
        req.sampling.max_tokens,
        COMPLETIONS_DEFAULT_MAX.min(cfg.max_tokens_cap),
        logprobs,
        &[],
    )?;
    let prompt = prompt_tokens(tok, &req.prompt, "prompt")?;
    check_length(cfg, &prompt)?;
    let echo = req
        .echo
        .unwrap_or(false)
        .then(|| String::from_utf8_lossy(&tok.decode(&prompt).unwrap_or_default()).into_owned());
    Ok((prompt, params, echo))
}

/// `POST /v1/embeddings`: each input's tokens, and whether the answer is base64
/// (little-endian f32) rather than floats. `dim` is the model's embedding width (C), which
/// `dimensions` must equal when given.
///
/// Errors: 413 for a body over the limit; 404 for another model; 400 for a body that is
/// not an embeddings request, an unknown `encoding_format`, no inputs or more than
/// [`MAX_INPUTS`], `dimensions` ≠ `dim`, an empty input, a token id not below the
/// vocabulary, or an input over the prompt limit.
pub fn embedding_request(
    body: &[u8],
    cfg: &ServerConfig,
    tok: &Tokenizer,
    dim: usize,
) -> Result<(Vec<Vec<u32>>, bool), ApiError> {
    let req: EmbeddingRequest = parse_json(body, cfg)?;
    check_model(cfg, req.model.as_deref())?;
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
    let inputs: Vec<Vec<u32>> = match req.input {
        Input::Text(s) => vec![tok.encode(&s)],
        Input::Texts(v) => v.iter().map(|s| tok.encode(s)).collect(),
        Input::Tokens(v) => vec![v],
        Input::TokenLists(v) => v,
    };
    if inputs.is_empty() || inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            Some("input"),
            format!("{} inputs; send 1 to {MAX_INPUTS}", inputs.len()),
        ));
    }
    if let Some(d) = req.dimensions {
        if d as usize != dim {
            return Err(ApiError::invalid(
                Some("dimensions"),
                format!("`dimensions` is {d}; this model's embeddings have {dim}"),
            ));
        }
    }
    for (i, ids) in inputs.iter().enumerate() {
        check_ids(tok, ids, &format!("input[{i}]"))?;
        check_length(cfg, ids)?;
    }
    Ok((inputs, base64))
}

/// A JSON body parsed into `T`, every failure a 400 naming the field (`param`: the path
/// to it, as `messages[0].role`); a body over the limit: 413.
pub fn parse_json<T: DeserializeOwned>(body: &[u8], cfg: &ServerConfig) -> Result<T, ApiError> {
    if body.len() > cfg.max_body_bytes {
        return Err(ApiError::body_too_large(cfg.max_body_bytes));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let param = (path != ".").then_some(path);
        let what = if inner.is_syntax() || inner.is_eof() {
            format!("the body is not valid JSON: {inner}")
        } else {
            match &param {
                Some(p) => format!("bad value of `{p}`: {inner}"),
                None => format!("bad request body: {inner}"),
            }
        };
        ApiError::invalid(param.as_deref(), what)
    })
}

/// [`parse_json`] for a request with the [`Sampling`] fields flattened into it (chat and
/// completions). serde's `flatten` loses the path of an error inside those fields (`param`
/// would be null for `"temperature": "hot"`), so a refusal without a field is looked for
/// again in the sampling fields alone, and named when it is there.
fn parse_flat<T: DeserializeOwned>(body: &[u8], cfg: &ServerConfig) -> Result<T, ApiError> {
    parse_json(body, cfg).map_err(|e| {
        if e.param.is_some() || e.status.as_u16() != 400 {
            return e;
        }
        match parse_json::<Sampling>(body, cfg) {
            Err(named) if named.param.is_some() => named,
            _ => e,
        }
    })
}

/// Checks the request's `model` against the one served (absent or empty: accepted).
///
/// Errors: 404 `model_not_found`.
pub fn check_model(cfg: &ServerConfig, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        None | Some("") => Ok(()),
        Some(m) if m == cfg.model_id => Ok(()),
        Some(m) => Err(ApiError::model_not_found(m, &cfg.model_id)),
    }
}

/// One prompt's tokens from a completions `prompt` (`field` names it in errors).
///
/// Errors: 400 for several prompts, an empty one, or a token id not below the vocabulary.
pub fn prompt_tokens(tok: &Tokenizer, input: &Input, field: &str) -> Result<Vec<u32>, ApiError> {
    let ids = match input {
        Input::Text(s) => tok.encode(s),
        Input::Texts(v) if v.len() == 1 => tok.encode(&v[0]),
        Input::TokenLists(v) if v.len() == 1 => v[0].clone(),
        Input::Tokens(v) => v.clone(),
        _ => {
            return Err(ApiError::invalid(
                Some(field),
                format!("`{field}` holds several prompts; send one per request"),
            ))
        }
    };
    check_ids(tok, &ids, field)?;
    Ok(ids)
}

/// Token ids are below the vocabulary and there is at least one.
///
/// Errors: 400 naming `field`.
pub fn check_ids(tok: &Tokenizer, ids: &[u32], field: &str) -> Result<(), ApiError> {
    if ids.is_empty() {
        return Err(ApiError::invalid(
            Some(field),
            format!("`{field}` is empty"),
        ));
    }
    let vocab = tok.vocab_size();
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::invalid(
            Some(field),
            format!("token id {bad} is not below the vocabulary size {vocab}"),
        ));
    }
    Ok(())
}

/// A prompt (or embedding input) is at most [`ServerConfig::max_prompt_tokens`] long.
///
/// Errors: 400 `context_length_exceeded`.
fn check_length(cfg: &ServerConfig, ids: &[u32]) -> Result<(), ApiError> {
    if ids.len() > cfg.max_prompt_tokens {
        return Err(ApiError::too_long(ids.len(), cfg.max_prompt_tokens));
    }
    Ok(())
}
