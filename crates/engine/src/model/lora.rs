//! LoRA adapters on the GPU, applied at run time on a base kept in its file encoding:
//! `y = act(W x + Σ_i s_i · B_i (A_i x) + bias)` for each adapted matrix.
//!
//! Per adapter ([`GpuLora`]): each layer's `A` matrices `[r, K]` f32 in one buffer (at
//! aligned offsets, so that a decode step runs the first products of r, k and v as one
//! `matvec_group` dispatch) and every `Bᵀ` `[r, N]` f32 in one buffer. For the active set
//! ([`ActiveLoras`]) each adapted (layer, matrix) gets a column range of an `h` region per
//! adapter and one `Bᵀ` block `[R, N]` (the adapters' blocks stacked, `R = Σ r_i`): the
//! graph runs `h_i = s_i · A_i x` (the scale in the first product) and the base product
//! adds `Σ_j Bᵀ[j, n] h[t, j]` to its raw sum in its epilogue, before bias and activation
//! (so the relu² of the channel mix sees the adapted sum), in every kernel: decode and
//! prefill alike, no extra pass over the big weights.
//!
//! Math: RWKV-PEFT / PEFT LoRA (`W' = W + s · B A`); llama.cpp applies GGUF adapters the
//! same way at run time (`llm_graph_context::build_lora_mm`).

use std::sync::Arc;

use crate::adapter::{LoraAdapter, LoraTarget};
use crate::error::{EngineError, Result};
use crate::gpu::{buffer, GpuContext};
use crate::model::config::Rwkv7Config;
use crate::ops::matmul::LoraArgs;
use crate::ops::GpuMatrix;

/// One adapted matrix of an uploaded adapter.
pub struct GpuLoraMatrix {
    /// `A` `[rank, n_in]` f32.
    pub a: GpuMatrix,
    pub rank: usize,
    pub n_out: usize,
    /// Offset (f32 elements) of `Bᵀ` `[rank, n_out]` in [`GpuLora::bt`].
    pub bt_off: usize,
}

/// A LoRA adapter uploaded to the GPU.
pub struct GpuLora {
    pub name: String,
    pub rank: usize,
    /// `[layer][target]`.
    pub mats: Vec<[Option<GpuLoraMatrix>; 6]>,
    pub bt: wgpu::Buffer,
    /// Bytes of GPU memory it holds.
    pub bytes: u64,
}

impl GpuLora {
    /// Uploads `adapter` (checked against `cfg` first: nothing is uploaded when a matrix
    /// does not fit the model).
    ///
    /// Errors: [`EngineError::Adapter`] from the check; [`EngineError::TooLarge`] when its
    /// `Bᵀ` blocks exceed one binding.
    pub fn upload(gpu: &GpuContext, cfg: &Rwkv7Config, adapter: &LoraAdapter) -> Result<Self> {
        adapter.check(cfg)?;
        let max = gpu.max_binding();
        let bt_len: usize = adapter.matrices.iter().map(|m| m.rank * m.n_out).sum();
        if bt_len as u64 * 4 > max {
            return Err(EngineError::TooLarge {
                what: format!(
                    "adapter {}: its B matrices need {} bytes in one binding; the device allows {max}",
                    adapter.name,
                    bt_len * 4
                ),
            });
        }
        let mut bt = vec![0f32; bt_len.max(4)];
        let mut mats: Vec<[Option<GpuLoraMatrix>; 6]> =
            (0..cfg.n_layer).map(|_| Default::default()).collect();
        let align = u64::from(gpu.limits.min_storage_buffer_offset_alignment).max(256) as usize;
        let mut bytes = 0u64;
        let mut at = 0usize;
        for (layer, row) in mats.iter_mut().enumerate() {
            // In target order: with one adapter active, its Bᵀ blocks are the stacked ones
            // of `ActiveLoras` (same order, same offsets).
            let ms: Vec<_> = LoraTarget::ALL
                .iter()
                .filter_map(|&t| {
                    adapter
                        .matrices
                        .iter()
                        .find(|m| m.layer == layer && m.target == t)
                })
                .collect();
            if ms.is_empty() {
                continue;
            }
            // This layer's A matrices, one after the other at aligned offsets.
            let mut a_bytes = Vec::new();
            let mut offs = Vec::new();
            for m in &ms {
                let off = a_bytes.len().next_multiple_of(align);
                a_bytes.resize(off, 0u8);
                a_bytes.extend_from_slice(bytemuck::cast_slice(&m.a));
                offs.push(off);
            }
            a_bytes.resize(a_bytes.len().next_multiple_of(16), 0);
            let label = format!("{} A@{layer}", adapter.name);
            let a_buf = buffer::storage_init(gpu, &label, &a_bytes)?;
            bytes += a_buf.size();
            for (m, off) in ms.iter().zip(offs) {
                // Bᵀ[j][n] = B[n][j].
                for n in 0..m.n_out {
                    for j in 0..m.rank {
                        bt[at + j * m.n_out + n] = m.b[n * m.rank + j];
                    }
                }
                row[m.target.index()] = Some(GpuLoraMatrix {
                    a: GpuMatrix {
                        name: format!("{}.{}.lora_A", adapter.name, m.target.name()),
                        buffer: a_buf.clone(),
                        offset: off as u64,
                        dtype: crate::DType::F32,
                        row0: 0,
                        n_out: m.rank,
                        n_in: m.n_in,
                        row_bytes: m.n_in * 4,
                    },
                    rank: m.rank,
                    n_out: m.n_out,
                    bt_off: at,
                });
                at += m.rank * m.n_out;
            }
        }
        let bt = buffer::storage_init(
            gpu,
            &format!("{} Bᵀ", adapter.name),
            bytemuck::cast_slice(&bt),
        )?;
        bytes += bt.size();
        Ok(GpuLora {
            name: adapter.name.clone(),
            rank: adapter.rank(),
            mats,
            bt,
            bytes,
        })
    }
}

/// One adapter's part of an adapted matrix in the active set.
pub struct LoraPart {
    /// Index into [`ActiveLoras::adapters`].
    pub adapter: usize,
    /// First column of its `h` (and row of its `Bᵀ` block).
    pub j0: usize,
}

/// The active adapters of one adapted (layer, matrix).
pub struct LoraSite {
    /// `R`: the columns of `h`, the rows of the stacked `Bᵀ`.
    pub rank: usize,
    /// Offset (f32 elements) of the stacked `Bᵀ` `[R, N]` in [`ActiveLoras::bt`].
    pub bt_off: usize,
    pub parts: Vec<LoraPart>,
}

/// The adapters the forward graph applies, with their scales.
pub struct ActiveLoras {
    pub adapters: Vec<(Arc<GpuLora>, f32)>,
    /// `[layer][target]`.
    pub sites: Vec<[Option<LoraSite>; 6]>,
    /// The stacked `Bᵀ` blocks (an adapter's own buffer when only one is active).
    pub bt: wgpu::Buffer,
    /// Largest `R` of a site (sizes the `h` regions).
    pub max_rank: usize,
}

impl ActiveLoras {
    /// Plans the stacked `Bᵀ` blocks of `adapters` (in order) and fills them on the GPU.
    ///
    /// Errors: [`EngineError::TooLarge`] when the stacked blocks exceed one binding;
    /// [`EngineError::InvalidInput`] for a non-finite scale.
    pub fn new(
        gpu: &GpuContext,
        n_layer: usize,
        adapters: Vec<(Arc<GpuLora>, f32)>,
    ) -> Result<Self> {
        if let Some((l, s)) = adapters.iter().find(|(_, s)| !s.is_finite()) {
            return Err(EngineError::invalid(format!(
                "LoRA scale {s} of adapter {} is not finite",
                l.name
            )));
        }
        let mut sites: Vec<[Option<LoraSite>; 6]> =
            (0..n_layer).map(|_| Default::default()).collect();
        let mut at = 0usize;
        let mut max_rank = 0;
        for (layer, row) in sites.iter_mut().enumerate() {
            for t in LoraTarget::ALL {
                let mut parts = Vec::new();
                let mut rank = 0;
                let mut n_out = 0;
                for (i, (l, _)) in adapters.iter().enumerate() {
                    if let Some(m) = l.mats.get(layer).and_then(|r| r[t.index()].as_ref()) {
                        parts.push(LoraPart {
                            adapter: i,
                            j0: rank,
                        });
                        rank += m.rank;
                        n_out = m.n_out;
                    }
                }
                if parts.is_empty() {
                    continue;
                }
                max_rank = max_rank.max(rank);
                row[t.index()] = Some(LoraSite {
                    rank,
                    bt_off: at,
                    parts,
                });
                at += rank * n_out;
            }
        }
        let bt = if adapters.len() == 1 {
            // One adapter: its own blocks are already the stacked ones.
            adapters[0].0.bt.clone()
        } else {
            let bytes = (at.max(4) * 4) as u64;
            if bytes > gpu.max_binding() {
                return Err(EngineError::TooLarge {
                    what: format!(
                        "the active adapters' B matrices need {bytes} bytes in one binding; the device allows {}",
                        gpu.max_binding()
                    ),
                });
            }
            let stacked = buffer::storage(gpu, "active LoRA Bᵀ", bytes);
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            for (layer, row) in sites.iter().enumerate() {
                for t in LoraTarget::ALL {
                    let Some(site) = &row[t.index()] else {
                        continue;
                    };
                    for part in &site.parts {
                        let l = &adapters[part.adapter].0;
                        let Some(m) = l.mats[layer][t.index()].as_ref() else {
                            continue;
                        };
                        enc.copy_buffer_to_buffer(
                            &l.bt,
                            (m.bt_off * 4) as u64,
                            &stacked,
                            ((site.bt_off + part.j0 * m.n_out) * 4) as u64,
                            (m.rank * m.n_out * 4) as u64,
                        );
                    }
                }
            }
            gpu.queue.submit([enc.finish()]);
            stacked
        };
        Ok(ActiveLoras {
            adapters,
            sites,
            bt,
            max_rank,
        })
    }

    /// The site of (layer, target), if any adapter adapts it.
    pub fn site(&self, layer: usize, t: LoraTarget) -> Option<&LoraSite> {
        self.sites.get(layer).and_then(|r| r[t.index()].as_ref())
    }

    /// The first products of a site: `(A_i, scale_i, column j0)` per adapter.
    pub fn firsts(&self, layer: usize, t: LoraTarget) -> Vec<(&GpuMatrix, f32, usize)> {
        let Some(site) = self.site(layer, t) else {
            return Vec::new();
        };
        site.parts
            .iter()
            .filter_map(|p| {
                let (l, s) = &self.adapters[p.adapter];
                let m = l.mats[layer][t.index()].as_ref()?;
                Some((&m.a, *s, p.j0))
            })
            .collect()
    }

    /// The LoRA term of the base product at (layer, target) reading `h` at `h_off`.
    pub fn term(&self, layer: usize, t: LoraTarget, h_off: usize) -> Option<LoraArgs> {
        self.site(layer, t).map(|s| LoraArgs {
            h_off,
            h_stride: s.rank,
            rank: s.rank,
            bt_off: s.bt_off,
        })
    }
}
