//! Counters of a running server: Prometheus text for `GET /metrics` (prometheus-client)
//! and the [`ServerStats`] snapshot the app's Local server panel shows.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde::Serialize;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: String,
    pub status: u16,
}

/// Every counter the server keeps; cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub requests: Family<RequestLabels, Counter>,
    requests_total: Counter,
    pub prompt_tokens: Counter,
    pub prefilled_tokens: Counter,
    pub cached_tokens: Counter,
    pub generated_tokens: Counter,
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    pub cancelled: Counter,
    pub queued: Gauge,
    pub active: Gauge,
    pub cache_entries: Gauge,
    pub cache_host_entries: Gauge,
    pub cache_spills: Gauge,
    pub batch_size: Histogram,
    pub ttft_seconds: Histogram,
    /// From a request's arrival to its place in the batch (the part of TTFT spent queued).
    pub queue_seconds: Histogram,
    pub step_seconds: Histogram,
    /// The forward pass of a step alone (the engine's call: encode, GPU, logits read back).
    pub forward_seconds: Histogram,
    /// The sampling of a step's next tokens (and their events to the clients).
    pub sample_seconds: Histogram,
    /// Seconds the engine thread spent keeping and resuming conversation states (GPU
    /// copies, spills to host memory and uploads back), in all.
    pub cache_seconds: Counter<f64, AtomicU64>,
    /// Seconds the engine thread was busy (everything but waiting for a request), in all:
    /// less the steps and the cache, what its bookkeeping costs.
    pub busy_seconds: Counter<f64, AtomicU64>,
    rate: Arc<Mutex<Rate>>,
    started: Instant,
}

/// Generated tokens per second over the last few seconds.
struct Rate {
    window: std::collections::VecDeque<(Instant, u64)>,
}

/// What the app's panel shows.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ServerStats {
    pub requests: u64,
    pub active: i64,
    pub queued: i64,
    pub generated_tokens: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_entries: i64,
    /// Generated tokens per second over the last 5 s.
    pub tok_s: f64,
    pub uptime_s: f64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("rwkv");
        let requests = Family::<RequestLabels, Counter>::default();
        r.register(
            "requests",
            "HTTP requests answered, by endpoint and status",
            requests.clone(),
        );
        let c = |r: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            r.register(name, help, c.clone());
            c
        };
        let prompt_tokens = c(
            &mut r,
            "prompt_tokens",
            "Prompt tokens of generation requests",
        );
        let prefilled_tokens = c(
            &mut r,
            "prefilled_tokens",
            "Prompt tokens fed through the model",
        );
        let cached_tokens = c(
            &mut r,
            "cached_tokens",
            "Prompt tokens resumed from the state cache",
        );
        let generated_tokens = c(&mut r, "generated_tokens", "Tokens generated");
        let cache_hits = c(
            &mut r,
            "cache_hits",
            "Requests that resumed from a cached state",
        );
        let cache_misses = c(&mut r, "cache_misses", "Requests prefilled from the start");
        let cancelled = c(
            &mut r,
            "cancelled",
            "Generations cancelled by a client disconnect",
        );
        let g = |r: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            r.register(name, help, g.clone());
            g
        };
        let queued = g(
            &mut r,
            "queue_depth",
            "Requests waiting for a place in the batch",
        );
        let active = g(&mut r, "active_sequences", "Sequences in the running batch");
        let cache_entries = g(
            &mut r,
            "cache_entries",
            "States held by the conversation cache",
        );
        let cache_host_entries = g(
            &mut r,
            "cache_host_entries",
            "Cached states spilled to host memory, now",
        );
        let cache_spills = g(
            &mut r,
            "cache_spills",
            "Cached states moved from GPU slots to host memory, in all",
        );
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        r.register(
            "batch_size",
            "Sequences per forward step",
            batch_size.clone(),
        );
        let ttft_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        r.register("ttft_seconds", "Time to first token", ttft_seconds.clone());
        let queue_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 18));
        r.register(
            "queue_seconds",
            "Time from a request's arrival to its place in the batch",
            queue_seconds.clone(),
        );
        let step_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        r.register(
            "step_seconds",
            "Duration of one batched step",
            step_seconds.clone(),
        );
        let forward_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        r.register(
            "forward_seconds",
            "Duration of the forward pass of one batched step (the rest of the step: sampling, bookkeeping)",
            forward_seconds.clone(),
        );
        let sample_seconds = Histogram::new(exponential_buckets(0.00005, 2.0, 16));
        r.register(
            "sample_seconds",
            "Duration of the sampling of one batched step's next tokens",
            sample_seconds.clone(),
        );
        let f = |r: &mut Registry, name: &str, help: &str| {
            let c = Counter::<f64, AtomicU64>::default();
            r.register(name, help, c.clone());
            c
        };
        let cache_seconds = f(
            &mut r,
            "cache_seconds",
            "Seconds spent keeping and resuming conversation states (GPU copies, spills to host memory, uploads)",
        );
        let busy_seconds = f(
            &mut r,
            "busy_seconds",
            "Seconds the engine thread was busy (all but waiting for requests)",
        );
        Metrics {
            registry: Arc::new(r),
            requests,
            requests_total: Counter::default(),
            prompt_tokens,
            prefilled_tokens,
            cached_tokens,
            generated_tokens,
            cache_hits,
            cache_misses,
            cancelled,
            queued,
            active,
            cache_entries,
            cache_host_entries,
            cache_spills,
            batch_size,
            ttft_seconds,
            queue_seconds,
            step_seconds,
            forward_seconds,
            sample_seconds,
            cache_seconds,
            busy_seconds,
            rate: Arc::new(Mutex::new(Rate {
                window: Default::default(),
            })),
            started: Instant::now(),
        }
    }

    /// Counts a request answered with `status`.
    pub fn request(&self, endpoint: &str, status: u16) {
        self.requests_total.inc();
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.to_string(),
                status,
            })
            .inc();
    }

    /// Counts `n` generated tokens (for the counter and the recent rate).
    pub fn generated(&self, n: u64) {
        self.generated_tokens.inc_by(n);
        let now = Instant::now();
        let total = self.generated_tokens.get();
        if let Ok(mut r) = self.rate.lock() {
            r.window.push_back((now, total));
            while r
                .window
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t).as_secs_f64() > 5.0)
            {
                r.window.pop_front();
            }
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = encode(&mut s, &self.registry);
        s
    }

    pub fn stats(&self) -> ServerStats {
        let tok_s = self
            .rate
            .lock()
            .ok()
            .and_then(|r| {
                let (t0, n0) = *r.window.front()?;
                let dt = Instant::now().duration_since(t0).as_secs_f64();
                let n = self.generated_tokens.get() - n0;
                (dt > 0.2).then(|| n as f64 / dt.max(1.0))
            })
            .unwrap_or(0.0);
        ServerStats {
            requests: self.requests_total.get(),
            active: self.active.get(),
            queued: self.queued.get(),
            generated_tokens: self.generated_tokens.get(),
            prompt_tokens: self.prompt_tokens.get(),
            cached_tokens: self.cached_tokens.get(),
            cache_hits: self.cache_hits.get(),
            cache_misses: self.cache_misses.get(),
            cache_entries: self.cache_entries.get(),
            tok_s,
            uptime_s: self.started.elapsed().as_secs_f64(),
        }
    }
}
