//! A request's sampling fields → the engine's [`SamplerOptions`] and the generation
//! limits, each value checked and a bad one named (400 with `param`).

use rwkv_engine::sampler::SamplerOptions;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::openai::request::Sampling;

/// Most stop strings a request may give (OpenAI's limit).
pub const MAX_STOPS: usize = 4;
/// Longest stop string, bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Most `top_logprobs` alternatives (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// What one generation request asks for, checked.
#[derive(Debug, Clone)]
pub struct GenParams {
    pub sampler: SamplerOptions,
    pub max_tokens: usize,
    /// `Some(k)`: report each token's log-probability with its `k` most likely
    /// alternatives.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    /// What the reply must match (chat `response_format` / `tools`); `None`: free text.
    pub constraint: Option<rwkv_engine::ConstraintSpec>,
    /// The reply may be a tool call (chat with `tools`): read back into `tool_calls`.
    pub tool_calls: bool,
}

/// Checks `s` against the server's limits and merges it over the server's sampling
/// defaults. `max_tokens` is the request's (chat: `max_completion_tokens` wins);
/// `default_max`: when it is absent; `extra_stops`: the template's own stops.
///
/// Errors: 400 naming the field: a value out of range, `n` ≠ 1, more than
/// [`MAX_STOPS`] stops, `max_tokens` 0 or above the server's cap.
pub fn gen_params(
    cfg: &ServerConfig,
    s: &Sampling,
    max_tokens: Option<u64>,
    default_max: usize,
    logprobs: Option<usize>,
    extra_stops: &[&str],
) -> Result<GenParams, ApiError> {
    let mut o = cfg.sampling.clone();
    let field = |name: &str, v: f32, lo: f32, hi: f32| -> Result<f32, ApiError> {
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(ApiError::invalid(
                Some(name),
                format!("`{name}` is {v}; expected {lo} to {hi}"),
            ))
        }
    };
    if let Some(n) = s.n {
        if n != 1 {
            return Err(ApiError::invalid(
                Some("n"),
                format!("`n` is {n}; this server returns one choice per request (n = 1)"),
            ));
        }
    }
    if let Some(t) = s.temperature {
        o.temperature = field("temperature", t, 0.0, 2.0)?;
    }
    if let Some(p) = s.top_p {
        o.top_p = field("top_p", p, 0.0, 1.0)?;
        if o.top_p == 0.0 {
            // OpenAI accepts 0: the single most likely token.
            o.top_p = 1.0;
            o.top_k = 1;
        }
    }
    if let Some(p) = s.presence_penalty {
        o.presence_penalty = field("presence_penalty", p, -2.0, 2.0)?;
    }
    if let Some(p) = s.frequency_penalty {
        o.frequency_penalty = field("frequency_penalty", p, -2.0, 2.0)?;
    }
    if let Some(k) = s.top_k {
        o.top_k = k as usize;
    }
    if let Some(m) = s.min_p {
        o.min_p = field("min_p", m, 0.0, 1.0)?;
    }
    if let Some(d) = s.penalty_decay {
        o.penalty_decay = field("penalty_decay", d, 0.0, 1.0)?;
    }
    if let Some(r) = s.repetition_penalty {
        o.repetition_penalty = field("repetition_penalty", r, 1.0, 10.0)?;
    }
    o.seed = s.seed.map(|x| x as u64).or(o.seed);
    if s.ignore_eos == Some(true) {
        o.stop_tokens.clear();
    }
    let mut stops: Vec<String> = extra_stops.iter().map(|s| s.to_string()).collect();
    if let Some(st) = s.stop.clone() {
        let v = st.into_vec();
        if v.len() > MAX_STOPS {
            return Err(ApiError::invalid(
                Some("stop"),
                format!("{} stop sequences; at most {MAX_STOPS}", v.len()),
            ));
        }
        if let Some(long) = v.iter().find(|x| x.len() > MAX_STOP_BYTES) {
            return Err(ApiError::invalid(
                Some("stop"),
                format!(
                    "a stop sequence of {} bytes; at most {MAX_STOP_BYTES}",
                    long.len()
                ),
            ));
        }
        stops.extend(v.into_iter().filter(|x| !x.is_empty()));
    }
    o.stop_strings = stops;
    o.validate()
        .map_err(|e| ApiError::invalid(None, e.to_string()))?;
    let max_tokens = match max_tokens {
        None => default_max,
        Some(0) => {
            return Err(ApiError::invalid(
                Some("max_tokens"),
                "`max_tokens` is 0; ask for at least 1",
            ))
        }
        Some(m) if m > cfg.max_tokens_cap as u64 => {
            return Err(ApiError::invalid(
                Some("max_tokens"),
                format!(
                    "`max_tokens` is {m}, above this server's limit of {}",
                    cfg.max_tokens_cap
                ),
            ))
        }
        Some(m) => m as usize,
    };
    Ok(GenParams {
        sampler: o,
        max_tokens,
        logprobs,
        stream: s.stream.unwrap_or(false),
        include_usage: s.stream_options.as_ref().is_some_and(|o| o.include_usage),
        constraint: None,
        tool_calls: false,
    })
}

/// `top_logprobs` (chat) with `logprobs`: `Some(k)` when log-probabilities are wanted.
///
/// Errors: 400 for `top_logprobs` above [`MAX_TOP_LOGPROBS`] or without `logprobs`.
pub fn chat_logprobs(logprobs: Option<bool>, top: Option<u32>) -> Result<Option<usize>, ApiError> {
    match (logprobs.unwrap_or(false), top) {
        (_, Some(k)) if k > MAX_TOP_LOGPROBS => Err(ApiError::invalid(
            Some("top_logprobs"),
            format!("`top_logprobs` is {k}; at most {MAX_TOP_LOGPROBS}"),
        )),
        (false, Some(k)) if k > 0 => Err(ApiError::invalid(
            Some("top_logprobs"),
            "`top_logprobs` needs `logprobs: true`",
        )),
        (true, k) => Ok(Some(k.unwrap_or(0) as usize)),
        (false, _) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Sampling {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn request_values_override_the_defaults_and_bad_ones_are_named() {
        let cfg = ServerConfig::default();
        let p = gen_params(
            &cfg,
            &parse(r#"{"temperature":0,"top_p":0.5,"stop":"END","seed":7,"max_tokens":9}"#),
            Some(9),
            100,
            None,
            &["\n\n"],
        )
        .unwrap();
        assert_eq!(p.sampler.temperature, 0.0);
        assert_eq!(p.sampler.top_p, 0.5);
        assert_eq!(p.sampler.seed, Some(7));
        assert_eq!(
            p.sampler.stop_strings,
            vec!["\n\n".to_string(), "END".into()]
        );
        assert_eq!(p.max_tokens, 9);
        for (json, param) in [
            (r#"{"temperature":3}"#, "temperature"),
            (r#"{"top_p":1.5}"#, "top_p"),
            (r#"{"presence_penalty":-9}"#, "presence_penalty"),
            (r#"{"n":2}"#, "n"),
            (r#"{"stop":["a","b","c","d","e"]}"#, "stop"),
        ] {
            let e = gen_params(&cfg, &parse(json), None, 10, None, &[]).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{json}");
            assert_eq!(e.status.as_u16(), 400);
        }
        let e = gen_params(&cfg, &parse("{}"), Some(1 << 40), 10, None, &[]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = gen_params(&cfg, &parse("{}"), Some(0), 10, None, &[]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert_eq!(chat_logprobs(Some(true), Some(3)).unwrap(), Some(3));
        assert_eq!(chat_logprobs(None, None).unwrap(), None);
        assert!(chat_logprobs(Some(true), Some(21)).is_err());
        assert!(chat_logprobs(Some(false), Some(2)).is_err());
    }
}
