//! LoRA adapters on the GPU, applied at run time on a base kept in its file encoding:
//! `y = act(W x + Σ_i s_i · B_i (A_i x) + bias)` for each adapted matrix.
//!
//! Per adapter ([`GpuLora`]): each layer's `A` matrices `[r, K]` f16 in one buffer (at
//! aligned offsets, so that a decode step runs the first products of r, k and v in one
//! `matvec_group` dispatch) and every `B` `[N, r₃₂]` f16 (row-major, rank padded with zero
//! columns to a multiple of 32) in one buffer. f16 as the adapter files keep them (f32
//! files are rounded once: 2⁻¹¹ relative on a term that is itself a small correction);
//! half the bytes a decode step reads for them. For the active set ([`ActiveLoras`]) each
//! adapted (layer, matrix) gets `h` `[T, R₃₂]` columns per adapter and one `B` block
//! `[N, R₃₂]` (the adapters' columns side by side, `R = Σ r_i`): the graph runs
//! `h_i = s_i · A_i x` (the scale in the first product); a decode step's base product adds
//! `Σ_j B[n, j] h[t, j]` in its epilogue, before bias and activation (so the relu² of the
//! channel mix sees the adapted sum); on tensor cores larger passes run `B h` as R₃₂ / 32
//! extra k-steps of the base product's own tile loop (h and B in place of x and W), and
//! without them as a product of its own added before the activation
//! (`MatmulArgs::add_before_act`) or into the residual — no extra pass over the big
//! weights either way.
//!
//! Math: RWKV-PEFT / PEFT LoRA (`W' = W + s · B A`); llama.cpp applies GGUF adapters the
//! same way at run time (`llm_graph_context::build_lora_mm`).

use std::sync::Arc;

use crate::adapter::{LoraAdapter, LoraTarget};
use crate::config::Rwkv7Config;
use crate::error::{EngineError, Result};
use crate::gpu::{buffer, GpuContext};
use crate::ops::matmul::LoraArgs;
use crate::ops::GpuMatrix;

/// Ranks are padded to a multiple of this (the K of the prefill `B h` product).
const RANK_STEP: usize = 32;

/// One adapted matrix of an uploaded adapter.
pub struct GpuLoraMatrix {
    /// `A` `[rank, n_in]` f16.
    pub a: GpuMatrix,
    pub rank: usize,
    pub n_out: usize,
    /// `B` `[n_out, rank]` as read (kept to stack several adapters).
    pub b: Vec<f32>,
    /// Byte offset of its `B` block `[n_out, rank₃₂]` in [`GpuLora::b`].
    pub b_at: u64,
}

/// A LoRA adapter uploaded to the GPU.
pub struct GpuLora {
    pub name: String,
    pub rank: usize,
    /// `[layer][target]`.
    pub mats: Vec<[Option<GpuLoraMatrix>; 6]>,
    pub b: wgpu::Buffer,
    /// Bytes of GPU memory it holds.
    pub bytes: u64,
}

/// One `B` block to pack: `n_out`, width, and the `(B [n_out, rank], rank)` parts side by
/// side from column 0.
type BlockSpec<'a> = (usize, usize, Vec<(&'a [f32], usize)>);

/// `values` as f16, or an error naming `what` when one does not fit (|v| > 65504).
fn to_f16(values: &[f32], adapter: &str, what: &str) -> Result<Vec<half::f16>> {
    match values.iter().find(|v| v.abs() > f32::from(half::f16::MAX)) {
        Some(v) => Err(EngineError::Adapter {
            name: adapter.to_string(),
            what: format!(
                "{what}: value {v} is outside the f16 range the GPU keeps LoRA weights in"
            ),
        }),
        None => Ok(values.iter().map(|&v| half::f16::from_f32(v)).collect()),
    }
}

/// `B` blocks `[n_out, width]` f16 in one buffer at aligned offsets: the block offsets
/// (bytes) and the bytes. The values were checked for the f16 range at upload.
fn pack_b(align: usize, blocks: &[BlockSpec]) -> (Vec<u64>, Vec<u8>) {
    let mut out: Vec<u8> = Vec::new();
    let mut offs = Vec::new();
    for (n_out, width, parts) in blocks {
        let at = out.len().next_multiple_of(align);
        out.resize(at, 0);
        let mut block = vec![half::f16::ZERO; n_out * width];
        let mut j0 = 0;
        for (b, rank) in parts {
            for n in 0..*n_out {
                for (d, &v) in block[n * width + j0..n * width + j0 + rank]
                    .iter_mut()
                    .zip(&b[n * rank..(n + 1) * rank])
                {
                    *d = half::f16::from_f32(v);
                }
            }
            j0 += rank;
        }
        out.extend_from_slice(bytemuck::cast_slice(&block));
        offs.push(at as u64);
    }
    out.resize(out.len().next_multiple_of(16).max(16), 0);
    (offs, out)
}

fn align(gpu: &GpuContext) -> usize {
    u64::from(gpu.limits.min_storage_buffer_offset_alignment).max(256) as usize
}

impl GpuLora {
    /// Uploads `adapter` (checked against `cfg` first: nothing is uploaded when a matrix
    /// does not fit the model).
    ///
    /// Errors: [`EngineError::Adapter`] from the check or for a value outside the f16
    /// range; [`EngineError::TooLarge`] when its `B` blocks exceed one binding.
    pub fn upload(gpu: &GpuContext, cfg: &Rwkv7Config, adapter: &LoraAdapter) -> Result<Self> {
        adapter.check(cfg)?;
        let align = align(gpu);
        let mut mats: Vec<[Option<GpuLoraMatrix>; 6]> =
            (0..cfg.n_layer).map(|_| Default::default()).collect();
        let mut blocks = Vec::new();
        let mut bytes = 0u64;
        for (layer, row) in mats.iter_mut().enumerate() {
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
                let tensor = |ab: &str| format!("block {layer} {} lora_{ab}", m.target.name());
                to_f16(&m.b, &adapter.name, &tensor("B"))?;
                let a16 = to_f16(&m.a, &adapter.name, &tensor("A"))?;
                let off = a_bytes.len().next_multiple_of(align);
                a_bytes.resize(off, 0u8);
                a_bytes.extend_from_slice(bytemuck::cast_slice(&a16));
                offs.push(off);
            }
            a_bytes.resize(a_bytes.len().next_multiple_of(16), 0);
            let label = format!("{} A@{layer}", adapter.name);
            let a_buf = buffer::storage_init(gpu, &label, &a_bytes)?;
            bytes += a_buf.size();
            for (m, off) in ms.iter().zip(offs) {
                blocks.push((layer, m.target));
                row[m.target.index()] = Some(GpuLoraMatrix {
                    a: GpuMatrix {
                        name: format!("{}.{}.lora_A", adapter.name, m.target.name()),
                        buffer: a_buf.clone(),
                        offset: off as u64,
                        dtype: crate::DType::F16,
                        row0: 0,
                        n_out: m.rank,
                        n_in: m.n_in,
                        row_bytes: m.n_in * 2,
                    },
                    rank: m.rank,
                    n_out: m.n_out,
                    b: m.b.clone(),
                    b_at: 0,
                });
            }
        }
        let specs: Vec<_> = blocks
            .iter()
            .filter_map(|&(l, t)| mats[l][t.index()].as_ref())
            .map(|m| {
                (
                    m.n_out,
                    m.rank.next_multiple_of(RANK_STEP),
                    vec![(m.b.as_slice(), m.rank)],
                )
            })
            .collect();
        let (offs, packed) = pack_b(align, &specs);
        if packed.len() as u64 > gpu.max_binding() {
            return Err(EngineError::TooLarge {
                what: format!(
                    "adapter {}: its B matrices need {} bytes in one binding; the device allows {}",
                    adapter.name,
                    packed.len(),
                    gpu.max_binding()
                ),
            });
        }
        for (&(l, t), off) in blocks.iter().zip(offs) {
            if let Some(m) = mats[l][t.index()].as_mut() {
                m.b_at = off;
            }
        }
        let b = buffer::storage_init(gpu, &format!("{} B", adapter.name), &packed)?;
        bytes += b.size();
        Ok(GpuLora {
            name: adapter.name.clone(),
            rank: adapter.rank(),
            mats,
            b,
            bytes,
        })
    }
}

/// One adapter's part of an adapted matrix in the active set.
pub struct LoraPart {
    /// Index into [`ActiveLoras::adapters`].
    pub adapter: usize,
    /// First column of its `h` and of its `B` in the site's block.
    pub j0: usize,
}

/// The active adapters of one adapted (layer, matrix).
pub struct LoraSite {
    /// `R₃₂`: the columns of `h` and of the `B` block (`Σ r_i` padded with zeros).
    pub width: usize,
    pub n_out: usize,
    /// Byte offset of the `B` block `[N, R₃₂]` (f16) in [`ActiveLoras::b`].
    pub b_at: u64,
    pub parts: Vec<LoraPart>,
}

/// The adapters the forward graph applies, with their scales.
pub struct ActiveLoras {
    pub adapters: Vec<(Arc<GpuLora>, f32)>,
    /// `[layer][target]`.
    pub sites: Vec<[Option<LoraSite>; 6]>,
    /// The `B` blocks (an adapter's own buffer when only one is active).
    pub b: wgpu::Buffer,
    /// Largest `R₃₂` of a site (sizes the `h` regions).
    pub max_rank: usize,
}

impl ActiveLoras {
    /// Plans the `B` blocks of `adapters` (in order): with one adapter, its own; with
    /// several, their columns side by side in a new buffer.
    ///
    /// Errors: [`EngineError::TooLarge`] when the blocks exceed one binding;
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
        let mut specs = Vec::new();
        let mut max_rank = 0;
        for (layer, row) in sites.iter_mut().enumerate() {
            for t in LoraTarget::ALL {
                let mut parts = Vec::new();
                let mut bs = Vec::new();
                let mut rank = 0;
                let mut n_out = 0;
                let mut own_at = 0;
                for (i, (l, _)) in adapters.iter().enumerate() {
                    if let Some(m) = l.mats.get(layer).and_then(|r| r[t.index()].as_ref()) {
                        parts.push(LoraPart {
                            adapter: i,
                            j0: rank,
                        });
                        bs.push((m.b.as_slice(), m.rank));
                        rank += m.rank;
                        n_out = m.n_out;
                        own_at = m.b_at;
                    }
                }
                if parts.is_empty() {
                    continue;
                }
                let width = rank.next_multiple_of(RANK_STEP);
                max_rank = max_rank.max(width);
                specs.push((n_out, width, bs));
                row[t.index()] = Some(LoraSite {
                    width,
                    n_out,
                    b_at: own_at,
                    parts,
                });
            }
        }
        let b = match adapters.as_slice() {
            // One adapter: its own blocks, at their offsets.
            [(one, _)] => one.b.clone(),
            _ => {
                let (offs, packed) = pack_b(align(gpu), &specs);
                if packed.len() as u64 > gpu.max_binding() {
                    return Err(EngineError::TooLarge {
                        what: format!(
                            "the active adapters' B matrices need {} bytes in one binding; the device allows {}",
                            packed.len(),
                            gpu.max_binding()
                        ),
                    });
                }
                let mut offs = offs.into_iter();
                for site in sites.iter_mut().flat_map(|r| r.iter_mut()).flatten() {
                    site.b_at = offs.next().unwrap_or(0);
                }
                buffer::storage_init(gpu, "active LoRA B", &packed)?
            }
        };
        Ok(ActiveLoras {
            adapters,
            sites,
            b,
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
            h_stride: s.width,
            rank: s.width,
            b_off: (s.b_at / 2) as usize,
        })
    }

    /// The `B` block of (layer, target) as a matrix `[N, R₃₂]` (the prefill product `B h`).
    pub fn b_matrix(&self, layer: usize, t: LoraTarget) -> Option<GpuMatrix> {
        self.site(layer, t).map(|s| GpuMatrix {
            name: format!("LoRA B {}@{layer}", t.name()),
            buffer: self.b.clone(),
            offset: s.b_at,
            dtype: crate::DType::F16,
            row0: 0,
            n_out: s.n_out,
            n_in: s.width,
            row_bytes: s.width * 2,
        })
    }
}
