//! One op, one file, one shader: each op builds a [`Node`] (pipeline + bind group +
//! grid) after checking its shapes, and tests itself against a CPU reference.
//!
//! Every node binds the per-pass [`Dims`] uniform (binding 0) and its own static params
//! uniform (binding 1); activations live in one f32 buffer (`act`) at static offsets, so
//! bind groups are built once per graph and a pass only rewrites `Dims` and the token
//! metadata.
//!
//! Each kernel family has a spec type beside its builder (`EmbedSpec`, `MatvecSpec`, …:
//! a [`KernelSpec`]) that is its pipeline key and puts its WGSL together from the files
//! of `shaders/` (the `shader!` macro).

/// The text of a file of the repository's `shaders/` folder (`shader!("matvec/row.wgsl")`).
macro_rules! shader {
    ($path:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shaders/",
            $path
        ))
    };
}

pub mod argmax;
pub mod candidates;
pub mod decode;
pub mod embed;
pub mod gather_rows;
pub mod gpu_layout;
pub mod layer_norm;
pub mod ln_shift;
pub mod matmul;
pub mod matvec_group;
pub mod wkv;
pub mod wkv_fused;
pub mod wkv_out;
pub mod wkv_prep;

#[cfg(test)]
mod layouts;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
pub(crate) mod variants;

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, PipelineCache};
use crate::gpu::{buffer, GpuContext};

/// `shaders/common.wgsl`: `Dims` and the math every kernel shares.
pub(crate) const COMMON: &str = shader!("common.wgsl");

/// Per-pass dimensions, mirrored by `struct Dims` in `shaders/common.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Dims {
    /// T: tokens in this pass (all sequences concatenated).
    pub n_tokens: u32,
    /// B: sequences in this pass.
    pub n_seqs: u32,
    /// R: rows gathered for the head / embeddings.
    pub n_rows: u32,
    /// Token capacity of every activation region.
    pub t_cap: u32,
    /// `meta` offsets (u32 elements): token → sequence, token → position, sequences
    /// (start, len, slot, 0), gathered rows. Token ids sit at offset 0.
    pub off_tok_seq: u32,
    pub off_tok_pos: u32,
    pub off_seqs: u32,
    pub off_rows: u32,
    /// L: tokens of the pass's longest sequence (the fused decode WKV runs where it is
    /// small, [`Count::Longest`]).
    pub max_len: u32,
    pub _p: [u32; 3],
}

impl Dims {
    /// A pass of one token of one sequence, for kernels tested or timed alone, and the
    /// `meta` words its offsets point into: the token id (7) at 0, the token's sequence (0)
    /// at 1 and position (0) at 2, the sequence's (start 0, length 1, state slot `slot`, 0)
    /// at 4.
    pub fn one_token(slot: u32) -> (Dims, [u32; 8]) {
        let dims = Dims {
            n_tokens: 1,
            n_seqs: 1,
            off_tok_seq: 1,
            off_tok_pos: 2,
            off_seqs: 4,
            ..Default::default()
        };
        (dims, [7, 0, 0, 0, 0, 1, slot, 0])
    }
}

/// What a node's grid scales with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Tokens,
    Rows,
    Seqs,
    /// The longest sequence's tokens ([`Dims::max_len`]): only for [`Small`] variants.
    Longest,
}

impl Count {
    /// This count in a pass of `dims`.
    pub fn of(self, dims: &Dims) -> u32 {
        match self {
            Count::Tokens => dims.n_tokens,
            Count::Rows => dims.n_rows,
            Count::Seqs => dims.n_seqs,
            Count::Longest => dims.max_len,
        }
    }
}

/// How many workgroups a node dispatches for a pass of T tokens, B sequences, R rows.
#[derive(Debug, Clone, Copy)]
pub enum Grid {
    /// `ceil(count × per / wg_size)` workgroups, laid out 2D (x ≤ 65535).
    Linear {
        count: Count,
        per: u32,
        wg_size: u32,
    },
    /// `x` workgroups by `ceil(count / per_y)`.
    Tiles { x: u32, count: Count, per_y: u32 },
}

impl Grid {
    /// Workgroup counts for a pass, or `None` when there is nothing to do.
    pub fn size(&self, dims: &Dims) -> Option<(u32, u32, u32)> {
        let n = |c: Count| c.of(dims);
        match *self {
            Grid::Linear {
                count,
                per,
                wg_size,
            } => {
                let total = (n(count) as u64 * per as u64).div_ceil(wg_size as u64);
                if total == 0 {
                    return None;
                }
                let x = total.min(65535);
                let y = total.div_ceil(x);
                Some((x as u32, y as u32, 1))
            }
            Grid::Tiles { x, count, per_y } => {
                let y = n(count).div_ceil(per_y);
                (x > 0 && y > 0).then_some((x, y, 1))
            }
        }
    }
}

/// One dispatch of the forward pass, named by op and layer for profiles.
pub struct Node {
    pub op: &'static str,
    pub layer: Option<usize>,
    pub pipeline: Arc<crate::gpu::pipeline::Pipeline>,
    pub bind_group: wgpu::BindGroup,
    pub grid: Grid,
    /// Keeps the params uniform alive as long as the bind group.
    _params: wgpu::Buffer,
    /// A variant for small passes (matrix × vector, fused decode kernels).
    pub small: Option<Small>,
}

/// The variant of a node that runs instead of it when a pass's `count` is at most `max`.
pub struct Small {
    pub count: Count,
    pub max: u32,
    pub node: Box<Node>,
}

impl Node {
    /// [`Node::pick`], or with `large_only` this node itself (its large-pass variant)
    /// whatever the pass size: the batch-invariant choice.
    pub fn pick_as(&self, dims: &Dims, large_only: bool) -> &Node {
        if large_only {
            self
        } else {
            self.pick(dims)
        }
    }

    /// A label such as `matmul.att.key@3`.
    pub fn label(&self) -> String {
        match self.layer {
            Some(l) => format!("{}@{l}", self.op),
            None => self.op.to_string(),
        }
    }
}

/// What every op builder needs: device, pipelines and the shared buffers of a graph.
pub struct Ctx<'a> {
    pub gpu: &'a GpuContext,
    pub pipelines: &'a PipelineCache,
    pub dims: &'a wgpu::Buffer,
    /// The `Bᵀ` blocks of the active LoRA adapters (`model::lora`), bound at binding 7
    /// of the products with a LoRA term; `None` when no adapter is active.
    pub lora: Option<&'a wgpu::Buffer>,
}

impl Ctx<'_> {
    /// Builds a node: compiles (or reuses) the pipeline for `spec`, uploads `params`, and
    /// binds `dims`, params and `buffers` at bindings 0, 1, 2, ….
    pub fn node<P: bytemuck::Pod, S: KernelSpec>(
        &self,
        op: &'static str,
        layer: Option<usize>,
        spec: &S,
        params: &P,
        buffers: &[&wgpu::Buffer],
        grid: Grid,
    ) -> Result<Node> {
        let resources: Vec<wgpu::BindingResource> =
            buffers.iter().map(|b| b.as_entire_binding()).collect();
        self.node_bound(op, layer, spec, params, resources, grid)
    }

    /// [`Ctx::node`] with bindings 2, 3, … given as resources (buffer ranges).
    pub fn node_bound<P: bytemuck::Pod, S: KernelSpec>(
        &self,
        op: &'static str,
        layer: Option<usize>,
        spec: &S,
        params: &P,
        resources: Vec<wgpu::BindingResource<'_>>,
        grid: Grid,
    ) -> Result<Node> {
        let numbered = resources
            .into_iter()
            .enumerate()
            .map(|(i, r)| (2 + i as u32, r))
            .collect();
        self.node_at(op, layer, spec, params, numbered, grid)
    }

    /// [`Ctx::node_bound`] with each resource's binding number given.
    pub fn node_at<P: bytemuck::Pod, S: KernelSpec>(
        &self,
        op: &'static str,
        layer: Option<usize>,
        spec: &S,
        params: &P,
        resources: Vec<(u32, wgpu::BindingResource<'_>)>,
        grid: Grid,
    ) -> Result<Node> {
        let pipeline = self.pipelines.get(self.gpu, spec)?;
        self.node_with(op, layer, pipeline, params, resources, grid)
    }

    /// [`Ctx::node_at`] for a variant only some passes take: its pipeline compiles late
    /// ([`PipelineCache::get_late`]), and the first pass that takes it waits for it.
    pub fn node_at_late<P: bytemuck::Pod, S: KernelSpec>(
        &self,
        op: &'static str,
        layer: Option<usize>,
        spec: &S,
        params: &P,
        resources: Vec<(u32, wgpu::BindingResource<'_>)>,
        grid: Grid,
    ) -> Result<Node> {
        let pipeline = self.pipelines.get_late(self.gpu, spec)?;
        self.node_with(op, layer, pipeline, params, resources, grid)
    }

    fn node_with<P: bytemuck::Pod>(
        &self,
        op: &'static str,
        layer: Option<usize>,
        pipeline: Arc<crate::gpu::pipeline::Pipeline>,
        params: &P,
        resources: Vec<(u32, wgpu::BindingResource<'_>)>,
        grid: Grid,
    ) -> Result<Node> {
        let pbuf = buffer::uniform(self.gpu, op, params);
        let mut entries = vec![
            wgpu::BindGroupEntry {
                binding: 0,
                resource: self.dims.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: pbuf.as_entire_binding(),
            },
        ];
        for (binding, resource) in resources {
            entries.push(wgpu::BindGroupEntry { binding, resource });
        }
        let layout = pipeline.bind_group_layout();
        let bind_group = self
            .gpu
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(op),
                layout,
                entries: &entries,
            });
        Ok(Node {
            op,
            layer,
            pipeline,
            bind_group,
            grid,
            _params: pbuf,
            small: None,
        })
    }
}

/// Bytes `lo..hi` of `b` as a binding (several matrices of one buffer bound together).
pub(crate) fn buffer_range(b: &wgpu::Buffer, (lo, hi): (u64, u64)) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: b,
        offset: lo,
        size: std::num::NonZeroU64::new(hi - lo),
    })
}

/// Records `nodes` into one compute pass.
pub fn encode(pass: &mut wgpu::ComputePass<'_>, nodes: &[Node], dims: &Dims) {
    encode_as(pass, nodes, dims, false);
}

/// [`encode`], or with `large_only` every node's own (large-pass) variant whatever the
/// pass size: the batch-invariant form, in which a token's numbers do not depend on how
/// many tokens share its pass.
pub fn encode_as(pass: &mut wgpu::ComputePass<'_>, nodes: &[Node], dims: &Dims, large_only: bool) {
    encode_except(pass, nodes, dims, large_only, &[]);
}

/// [`encode_as`] leaving out the dispatches of the ops named in `skip` (a timing
/// instrument: [`crate::Engine::decode_wall_costs`]).
pub fn encode_except(
    pass: &mut wgpu::ComputePass<'_>,
    nodes: &[Node],
    dims: &Dims,
    large_only: bool,
    skip: &[String],
) {
    for n in nodes {
        let n = n.pick_as(dims, large_only);
        if skip.iter().any(|s| s == n.op) {
            continue;
        }
        if let Some((x, y, z)) = n.grid.size(dims) {
            let pipeline = match n.pipeline.wait() {
                Ok(p) => p,
                Err(e) => {
                    // Graph::new reports a failed compile as the load's error; a node built
                    // outside a graph (op tests, the kernel bench) says so here.
                    log::error!("{}: not dispatched: {e}", n.label());
                    continue;
                }
            };
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &n.bind_group, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}

impl Node {
    /// The variant that runs for a pass of `dims` (the small one when it applies).
    pub fn pick(&self, dims: &Dims) -> &Node {
        if let Some(s) = &self.small {
            if s.count.of(dims) <= s.max {
                return s.node.pick(dims);
            }
        }
        self
    }

    /// The entry of this node's chain of small variants for passes of at most `max` rows
    /// (`Small::max == max`), if it has one.
    pub fn variant_mut(&mut self, max: u32) -> Option<&mut Small> {
        let s = self.small.as_mut()?;
        if s.max == max {
            return Some(s);
        }
        s.node.variant_mut(max)
    }

    /// This node dispatching nothing: the small variant of an op whose work a fused
    /// node does for small passes.
    pub fn skip(&self) -> Node {
        Node {
            op: self.op,
            layer: self.layer,
            pipeline: self.pipeline.clone(),
            bind_group: self.bind_group.clone(),
            grid: Grid::Tiles {
                x: 0,
                count: Count::Tokens,
                per_y: 1,
            },
            _params: self._params.clone(),
            small: None,
        }
    }
}

/// A weight matrix on the GPU in its file encoding: rows `[row0, row0 + n_out)` of a
/// `[*, n_in]` matrix (big embeddings / heads are split into several of these so that no
/// binding exceeds the device limit).
pub struct GpuMatrix {
    pub name: String,
    pub buffer: wgpu::Buffer,
    /// Byte offset of row 0 in `buffer` (a multiple of the storage offset alignment;
    /// non-zero for matrices that share a buffer with others of their group).
    pub offset: u64,
    pub dtype: crate::DType,
    pub row0: usize,
    pub n_out: usize,
    pub n_in: usize,
    pub row_bytes: usize,
}

impl GpuMatrix {
    /// An `[n, k]` matrix of `dtype` from its encoded rows (`bytes`, `n` rows of equal
    /// length, as in a file) in a storage buffer of its own, its blocks laid out as the
    /// kernels read them ([`gpu_layout::to_gpu_layout`]) (tests, the kernel microbenchmark).
    ///
    /// Errors: [`crate::EngineError`] when the buffer cannot be made.
    pub fn upload(
        gpu: &crate::gpu::GpuContext,
        name: String,
        dtype: crate::DType,
        bytes: &[u8],
        n: usize,
        k: usize,
    ) -> Result<Self> {
        let bytes = gpu_layout::to_gpu_layout(dtype, k, bytes);
        Ok(GpuMatrix {
            name,
            buffer: crate::gpu::buffer::storage_init(gpu, "matrix", &bytes)?,
            offset: 0,
            dtype,
            row0: 0,
            n_out: n,
            n_in: k,
            row_bytes: bytes.len() / n.max(1),
        })
    }

    /// Bytes the kernels may read: the rows, padded to 16.
    pub fn span(&self) -> u64 {
        ((self.row_bytes * self.n_out) as u64)
            .next_multiple_of(16)
            .min(self.buffer.size() - self.offset)
    }

    /// The matrix's range of its buffer, for a bind group.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: std::num::NonZeroU64::new(self.span()),
        })
    }
}

pub(crate) fn op_err(op: &'static str, what: impl Into<String>) -> crate::EngineError {
    crate::EngineError::Op {
        op,
        what: what.into(),
    }
}
