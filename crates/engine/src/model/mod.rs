//! RWKV-7: config, typed weights (built from a file's tensors by `names`), the weights on
//! the GPU and the forward graph. `model/` reads `format/`; `format/` knows nothing of it.
pub mod config;
pub mod cpu_ref;
pub mod gpu_weights;
pub mod graph;
mod graph_group;
mod graph_layer;
mod graph_lora;
mod graph_pass;
pub mod lora;
pub mod names;
pub mod regions;
pub mod upload;
pub mod weights;
