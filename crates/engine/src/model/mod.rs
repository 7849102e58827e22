//! RWKV-7: config, typed weights, the GPU graph and per-sequence state.
pub mod config;
pub mod weights;
