//! RWKV-7: config, typed weights, the weights on the GPU and the forward graph.
pub mod config;
pub mod cpu_ref;
pub mod gpu_weights;
pub mod graph;
pub mod upload;
pub mod weights;
