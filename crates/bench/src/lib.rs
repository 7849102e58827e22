//! `rwkv-bench`: the project's measuring instrument, shared by `rwkv bench`, `rwkv
//! profile` and the app's dashboard.
//!
//! - [`run`]: load time, time to first token, prefill tok/s per prompt length, decode
//!   tok/s, document-state and field-analysis time, tokenizer µs, GPU memory, with the
//!   median and min–max over repeats after a warm-up;
//! - [`quality`]: the engine's logits on a fixed prompt against a stored reference (the
//!   plain CPU forward of the same weights, computed once per model file) and a hash of
//!   64 greedy tokens — a speed change that alters outputs shows as FAIL;
//! - [`report`]: `benchmarks.md` sections grouped by title, one JSON per run;
//! - [`charts`]: SVG charts (history, per-op profile, prefill vs length);
//! - [`perplexity`]: perplexity and KL divergence over a text, as `llama-perplexity`.

pub mod charts;
pub mod perplexity;
pub mod quality;
pub mod report;
pub mod run;

pub use quality::{Quality, QualityReference};
pub use report::{BenchReport, Figure};
pub use run::{run, BenchOptions, BenchProgress};
