//! GPU plumbing: adapter choice and device ([`context`]), buffers ([`buffer`]), the
//! kernel specs and the pipeline cache keyed by them ([`pipeline`]), one open device per adapter
//! for the process ([`shared`]), the environment's knobs read once ([`tuning`]), how the host
//! waits for a repeated step ([`pacing`]) and the profiler.

pub mod buffer;
pub mod context;
pub mod pacing;
pub mod pipeline;
pub mod shared;
pub mod tuning;

pub use context::{AdapterChoice, GpuContext, GpuFeatures};
pub use tuning::Tuning;
