//! [`ServerConfig`]: what `rwkv serve` and the app's Local server panel set, with the
//! limits that keep a server safe by default.

use std::net::{IpAddr, SocketAddr};

use std::sync::Arc;

use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::InitState;

/// The conversation cache's budget (GPU and host memory together) unless set: 2 GiB.
pub const CACHE_DEFAULT_BYTES: u64 = 2 << 30;
/// The cache's GPU share unless set: 512 MiB (23 states of a 2.9B model), or more — see
/// [`ServerConfig::cache_budgets`].
pub const CACHE_GPU_DEFAULT_BYTES: u64 = 512 << 20;

/// How a server listens, what it accepts and how it batches.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; loopback by default. A non-loopback address needs `api_key` (or
    /// `insecure_no_key`).
    pub host: IpAddr,
    /// TCP port; 0 picks a free one (the handle reports it).
    pub port: u16,
    /// Clients must send `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Serve a non-loopback address without a key (explicit opt-in).
    pub insecure_no_key: bool,
    /// The model id `/v1/models` lists and requests must name (an empty or absent
    /// `model` field is accepted too).
    pub model_id: String,
    /// Most sequences in flight (the running batch).
    pub parallel: usize,
    /// Most requests waiting for a place in the batch; more get 429.
    pub max_queue: usize,
    /// Budget of the conversation state cache (GPU and host memory together), bytes;
    /// `None`: [`CACHE_DEFAULT_BYTES`], or twice the GPU share when that is larger
    /// ([`ServerConfig::cache_budgets`]).
    pub ctx_cache_bytes: Option<u64>,
    /// Of that, how much may stay in GPU state slots (the rest spills to host memory);
    /// `None`: [`CACHE_GPU_DEFAULT_BYTES`], or one state a running sequence when that is
    /// more.
    pub ctx_cache_gpu_bytes: Option<u64>,
    /// Tokens of prompt prefill a step may add beside the running sequences' decode
    /// tokens (a new request's prefill is chunked by it, so running streams keep flowing).
    pub prefill_chunk: usize,
    /// Largest request body, bytes (413 above).
    pub max_body_bytes: usize,
    /// Longest prompt, tokens (400 `context_length_exceeded` above).
    pub max_prompt_tokens: usize,
    /// Largest `max_tokens` a request may ask (400 above); also the default for chat.
    pub max_tokens_cap: usize,
    /// Completion tokens when a chat request gives no `max_tokens`.
    pub default_max_tokens: usize,
    /// `Access-Control-Allow-Origin` for this origin (`*` for any); CORS off when `None`.
    pub cors_origin: Option<String>,
    /// Sampling when a request leaves a field out (RWKV's usual chat setting by default).
    pub sampling: SamplerOptions,
    /// A state-tuned initial state every sequence (and embedding) starts from, instead
    /// of zeros.
    pub init_state: Option<Arc<InitState>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let mut sampling = SamplerOptions::default();
        sampling.stop_strings.clear();
        ServerConfig {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8080,
            api_key: None,
            insecure_no_key: false,
            model_id: "rwkv".into(),
            parallel: 16,
            max_queue: 256,
            ctx_cache_bytes: None,
            ctx_cache_gpu_bytes: None,
            prefill_chunk: 256,
            max_body_bytes: 8 << 20,
            max_prompt_tokens: 65_536,
            max_tokens_cap: 16_384,
            default_max_tokens: 2_048,
            cors_origin: None,
            sampling,
            init_state: None,
        }
    }
}

impl ServerConfig {
    /// The conversation cache's `(budget, GPU share)` in bytes for entries of
    /// `entry_bytes` (a state and its logits). Where they are not set: the GPU share holds
    /// at least one state per running sequence (`parallel`; a server of 128 streams
    /// finishes 128 prompts at once, and each entry past the share is a read-back of the
    /// whole state — 21.6 MB for a 2.9B model — before the next step), else 512 MiB; the
    /// budget is twice that share, at least 2 GiB. The share never exceeds the budget.
    pub fn cache_budgets(&self, entry_bytes: u64) -> (u64, u64) {
        let gpu = self.ctx_cache_gpu_bytes.unwrap_or_else(|| {
            CACHE_GPU_DEFAULT_BYTES.max(entry_bytes.saturating_mul(self.parallel as u64))
        });
        let total = self
            .ctx_cache_bytes
            .unwrap_or_else(|| CACHE_DEFAULT_BYTES.max(gpu.saturating_mul(2)));
        (total, gpu.min(total))
    }

    /// The address to bind.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// Refuses settings that are unsafe or cannot work: a non-loopback host without a
    /// key (unless `insecure_no_key`), an empty key, zero parallel / queue / chunk /
    /// limits, a GPU cache share above the cache.
    pub fn validate(&self) -> Result<(), String> {
        if !self.host.is_loopback() && self.api_key.is_none() && !self.insecure_no_key {
            return Err(format!(
                "refusing to serve {} (reachable from other machines) without --api-key; \
                 set a key, or pass --insecure-no-key to serve it open",
                self.host
            ));
        }
        if self.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err("--api-key is empty".into());
        }
        for (name, v) in [
            ("--parallel", self.parallel),
            ("--max-queue", self.max_queue),
            ("--prefill-chunk", self.prefill_chunk),
            ("--max-body-bytes", self.max_body_bytes),
            ("--max-prompt-tokens", self.max_prompt_tokens),
            ("--max-tokens-cap", self.max_tokens_cap),
            ("--default-max-tokens", self.default_max_tokens),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.parallel > 1024 {
            return Err(format!("--parallel {} is above 1024", self.parallel));
        }
        if self.default_max_tokens > self.max_tokens_cap {
            return Err(format!(
                "--default-max-tokens {} is above --max-tokens-cap {}",
                self.default_max_tokens, self.max_tokens_cap
            ));
        }
        if self.model_id.trim().is_empty() {
            return Err("the model id is empty".into());
        }
        self.sampling.validate().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_budgets_grow_with_the_batch_unless_set() {
        let state = 22 << 20; // a 2.9B model's state and logits, about
        let mut c = ServerConfig::default();
        // 16 sequences: 352 MiB of states, under the 512 MiB share.
        assert_eq!(c.cache_budgets(state), (2 << 30, 512 << 20));
        c.parallel = 128;
        assert_eq!(c.cache_budgets(state), (2 * 128 * state, 128 * state));
        c.ctx_cache_gpu_bytes = Some(2 << 20);
        assert_eq!(c.cache_budgets(state), (2 << 30, 2 << 20));
        c.ctx_cache_bytes = Some(1 << 20);
        assert_eq!(
            c.cache_budgets(state),
            (1 << 20, 1 << 20),
            "the share fits the budget"
        );
        c.ctx_cache_gpu_bytes = None;
        assert_eq!(c.cache_budgets(state), (1 << 20, 1 << 20));
    }
}
