//! GPU plumbing: adapter choice and device ([`context`]), buffers ([`buffer`]), the
//! pipeline cache keyed by every specialisation ([`pipeline`]) and the profiler.

pub mod buffer;
pub mod context;
pub mod pipeline;
pub mod pipeline_cache;

pub use context::{AdapterChoice, GpuContext, GpuFeatures};
