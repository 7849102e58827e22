//! A synthetic LoRA adapter for a model shape: RWKV-PEFT keys
//! (`blocks.N.{att.receptance,att.key,att.value,att.output,ffn.key,ffn.value}.lora_A`
//! `[r, in]` / `.lora_B` `[out, r]`), f16, `lora_alpha` in the SafeTensors metadata — for
//! benchmarks of the run-time LoRA on models of any size.

use std::collections::HashMap;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rwkv_engine::{EngineError, LoraTarget, Result, Rwkv7Config};

/// Writes a seeded rank-`rank` adapter on every attention and channel-mix matrix of a model
/// of `cfg`'s shape; `A` uniform in ±1/√in, `B` uniform in ±0.02 (deltas small beside the
/// base, so the text stays the model's), alpha = `rank` (default scale 1).
///
/// Errors: [`EngineError::InvalidInput`] for rank 0; [`EngineError::Io`] when the file
/// cannot be written.
pub fn write_lora(
    cfg: &Rwkv7Config,
    rank: usize,
    seed: u64,
    path: impl AsRef<Path>,
) -> Result<u64> {
    if rank == 0 {
        return Err(EngineError::invalid("a LoRA rank of 0"));
    }
    let path = path.as_ref();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for l in 0..cfg.n_layer {
        for t in LoraTarget::ALL {
            let (n_out, n_in) = t.shape(cfg);
            let a_lim = 1.0 / (n_in as f32).sqrt();
            let mut f16s = |n: usize, lim: f32| -> Vec<u8> {
                (0..n)
                    .flat_map(|_| half::f16::from_f32(rng.gen_range(-lim..lim)).to_le_bytes())
                    .collect()
            };
            let a = f16s(rank * n_in, a_lim);
            let b = f16s(n_out * rank, 0.02);
            let key = format!("blocks.{l}.{}", t.name());
            tensors.push((format!("{key}.lora_A"), vec![rank, n_in], a));
            tensors.push((format!("{key}.lora_B"), vec![n_out, rank], b));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F16, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| EngineError::invalid(format!("{n}: {e}")))
        })
        .collect::<Result<_>>()?;
    let meta: HashMap<String, String> = [("lora_alpha".to_string(), rank.to_string())].into();
    safetensors::serialize_to_file(views, Some(meta), path)
        .map_err(|e| EngineError::io(path, std::io::Error::other(e.to_string())))?;
    Ok(std::fs::metadata(path)
        .map_err(|e| EngineError::io(path, e))?
        .len())
}
