//! RWKV-7: typed weights (built from a file's tensors by `names`), the weights on the GPU
//! (`gpu_weights`, streamed by `upload`), the active LoRA adapters on the GPU (`lora`),
//! the forward graph (`graph/`) and a CPU reference of the forward pass (`cpu_ref`).
//! `model/` reads `format/`, `adapter/` and `ops/`; none of them knows it.
pub mod cpu_ref;
pub mod gpu_weights;
pub mod graph;
pub mod host_embedding;
pub mod lora;
pub mod names;
pub mod upload;
pub mod weights;
