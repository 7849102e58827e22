//! Matrix products with weights in their file encoding: tiles for T > [`SMALL_T`] — on
//! tensor cores where the adapter has them (`coop.rs`, `shaders/matmul_coop.wgsl`, with
//! the reduce step of its k slices), portable ones elsewhere (`tiled.rs`,
//! `shaders/matmul.wgsl`) — and matrix × vector for T ≤ [`SMALL_T`], decode (`matvec.rs`,
//! `shaders/matvec.wgsl`). One node holds both variants; the pass picks by its token
//! count. Each kernel's spec (its pipeline key and WGSL) sits in its file; tile shapes and
//! k slices: `tiles.rs`.

mod coop;
mod group;
mod hprod;
mod ln_fuse;
mod matvec;
mod q8;
mod tiled;
mod tiles;
mod waves;

pub use coop::{CoopSpec, ReduceSpec};
pub use group::{matmul_group, tile_groupable, GroupItem, MAX_GROUP};
pub use hprod::{h_sets, matvec_hprod, HProd};
pub use ln_fuse::{ln_fuse_fits, ln_next_fits, matvec_ln, q8_handoff_fits, LnFuse, LnNext};
pub(crate) use matvec::{matvec_lanes, mv_lanes, row_sum_mode, step_files, wide_body, wide_lanes};
pub use matvec::{LnEnd, MatvecLora, MatvecSpec, Q8Handoff, RowSum};
pub(crate) use q8::{q8_depth_fits, wide_q8_chunk, wide_q8_lanes};
pub use tiled::MatmulSpec;
pub use waves::{matmul_waves, waves_plan};
#[cfg(test)]
pub(crate) use {group::Group, hprod::HParams, ln_fuse::LnParams};

use tiles::coop_tile;
pub(crate) use tiles::{coop_bt, coop_pf2, coop_rotate, head_lanes, matvec_step, mv_unroll};
pub use tiles::{coop_ksplit, coop_tile_bytes, coop_waves, medium_plan, COOP_TILES, MEDIUM_T};

use crate::error::Result;
use crate::ops::decode::gpu_native;
use crate::ops::{op_err, Count, Ctx, GpuMatrix, Node, Small};

/// Passes with at most this many rows use the matrix × vector kernel.
pub const SMALL_T: u32 = 8;

/// Matrices of at most this many rows and bytes use the matrix × vector kernel for
/// every T.
pub const MATVEC_ALWAYS_ROWS: usize = 128;
pub const MATVEC_ALWAYS_BYTES: usize = 2 << 20;

/// Epilogue applied after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    None = 0,
    Tanh = 1,
    Sigmoid = 2,
    /// `max(y, 0)²` (channel mix).
    ReluSq = 3,
}

/// The parameters of one product, mirrored by `Params` in `shaders/product/params.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) k: u32,
    pub(crate) n: u32,
    pub(crate) row0: u32,
    pub(crate) row_bytes: u32,
    pub(crate) x_off: u32,
    pub(crate) x_stride: u32,
    pub(crate) y_off: u32,
    pub(crate) y_stride: u32,
    pub(crate) act: u32,
    pub(crate) accumulate: u32,
    pub(crate) bias_off: u32,
    pub(crate) rows_sel: u32,
    pub(crate) scale: f32,
    pub(crate) lora_rank: u32,
    pub(crate) lora_h: u32,
    pub(crate) lora_stride: u32,
    pub(crate) lora_b: u32,
    /// k slices, the scratch offset of this product's slices and W's byte offset in its
    /// binding: read by the grouped kernels only (`group.rs`).
    pub(crate) ksplit: u32,
    pub(crate) part_off: u32,
    pub(crate) w_off: u32,
}

impl Params {
    /// The product of `m` with the arguments `a`, its scale and LoRA fields (from
    /// [`MatmulArgs::lora_fields`]) and `ksplit` slices; its slices and W at offset 0 of
    /// their bindings (a group sets `part_off` and `w_off`).
    fn of(m: &GpuMatrix, a: &MatmulArgs, scale: f32, lf: [u32; 4], ksplit: u32) -> Self {
        Params {
            k: m.n_in as u32,
            n: m.n_out as u32,
            row0: m.row0 as u32,
            row_bytes: m.row_bytes as u32,
            x_off: a.x_off as u32,
            x_stride: a.x_stride as u32,
            y_off: a.y_off as u32,
            y_stride: a.y_stride as u32,
            act: a.act as u32,
            accumulate: if a.add_before_act {
                2
            } else {
                u32::from(a.accumulate)
            },
            bias_off: a.bias_off.map_or(u32::MAX, |o| o as u32),
            rows_sel: u32::from(a.rows == Count::Rows),
            scale,
            lora_rank: lf[0],
            lora_h: lf[1],
            lora_stride: lf[2],
            lora_b: lf[3],
            ksplit,
            part_off: 0,
            w_off: 0,
        }
    }
}

/// Where a product reads and writes (offsets in f32 elements).
#[derive(Debug, Clone, Copy)]
pub struct MatmulArgs {
    /// x `[rows, K]` in `act` at `x_off`, row stride `x_stride`.
    pub x_off: usize,
    pub x_stride: usize,
    /// y `[rows, *]` at `y_off` (in `act`, or in `out` when given), row stride `y_stride`;
    /// W's row r lands in column `row0 + r`.
    pub y_off: usize,
    pub y_stride: usize,
    pub act: Act,
    /// `y += result` (residual add) instead of `y = result`.
    pub accumulate: bool,
    /// `y = act(y + raw sum)`: adds to y before the activation (the LoRA second product
    /// `B h` of a pass, added before the base product's activation); overrides
    /// `accumulate`. Needs scale 1 and no bias to mean exactly that.
    pub add_before_act: bool,
    /// Bias `[N]` in `vecs` at this offset.
    pub bias_off: Option<usize>,
    /// Tokens (T) or gathered rows (R).
    pub rows: Count,
    /// Multiplies the raw sum, before the LoRA term, bias and activation (1 for the
    /// model's own products; the adapter's scale for a LoRA first product `h = s · A x`).
    pub scale: f32,
    /// The LoRA term added to the raw sum, `y = act(W x + B h + bias)`: by the matrix ×
    /// vector variant (decode) in its epilogue, by the tensor-core variant as extra
    /// k-steps (see [`lora_in_tiles`]). The portable tiled variant ignores it: without
    /// tensor cores the graph runs `B h` as a product of its own for the passes it serves.
    pub lora: Option<LoraArgs>,
}

/// Where the LoRA term of a product reads: `h` `[rows, rank]` f32 in `act` at `h_off`
/// (f32 elements, row stride `h_stride`), `B` `[N, rank]` f16 (row-major) in the graph's
/// LoRA buffer ([`Ctx::lora`]) at `b_off` halves. `rank` is even; the tensor-core
/// variant needs it a multiple of 32, `h_off` and `h_stride` of 4 and `b_off` of 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraArgs {
    pub h_off: usize,
    pub h_stride: usize,
    pub rank: usize,
    pub b_off: usize,
}

impl MatmulArgs {
    /// `y (+)= act(W x + bias)` over the pass's tokens: x `[T, k]` at f32 offset `x_off`
    /// and y `[T, n]` at `y_off` of the activations (row strides k and n), `accumulate`
    /// for a residual add, the bias `[n]` at `bias` of `vecs`; scale 1, no LoRA term.
    pub fn dense(
        x_off: usize,
        k: usize,
        y_off: usize,
        n: usize,
        act: Act,
        accumulate: bool,
        bias: Option<usize>,
    ) -> MatmulArgs {
        MatmulArgs {
            x_off,
            x_stride: k,
            y_off,
            y_stride: n,
            act,
            accumulate,
            add_before_act: false,
            bias_off: bias,
            rows: Count::Tokens,
            scale: 1.0,
            lora: None,
        }
    }

    /// The Params fields of the scale and the LoRA term, and the extra binding.
    pub(crate) fn lora_fields<'c>(
        &self,
        cx: &Ctx<'c>,
        op: &'static str,
        m: &GpuMatrix,
    ) -> Result<(f32, [u32; 4], Option<&'c wgpu::Buffer>)> {
        let Some(l) = self.lora else {
            return Ok((self.scale, [0; 4], None));
        };
        let Some(buf) = cx.lora else {
            return Err(op_err(
                op,
                format!("{}: a LoRA term without LoRA weights", m.name),
            ));
        };
        if m.row0 != 0 || l.rank == 0 {
            return Err(op_err(op, format!("{}: unsupported LoRA term", m.name)));
        }
        let fields = [l.rank, l.h_off, l.h_stride, l.b_off].map(|v| v as u32);
        Ok((self.scale, fields, Some(buf)))
    }
}

/// `y[t, row0 + r] (+)= act(Σ_k W[r, k] x[t, k] + bias)` for every row of `m`.
///
/// Errors: `K` not a multiple of 32, an encoding the kernels do not read.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    out: Option<&wgpu::Buffer>,
    a: &MatmulArgs,
) -> Result<Node> {
    Ok(build(cx, op, layer, m, vecs, act, out, a, None)?.0)
}

/// [`matmul`] with k split into `ksplit` slices on the tensor-core kernel (more
/// workgroups for products with few output tiles and a long k): the slices' raw sums go
/// to `scratch` (at least `ksplit × T × N` f32) and a second node (`matmul_reduce`, to
/// run right after) adds them and applies the epilogue. Without cooperative matrices, or
/// with `ksplit` ≤ 1, the second node dispatches nothing.
///
/// Errors: as [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_split(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    a: &MatmulArgs,
    scratch: &wgpu::Buffer,
    ksplit: u32,
) -> Result<(Node, Node)> {
    let (node, reduce) = build(
        cx,
        op,
        layer,
        m,
        vecs,
        act,
        None,
        a,
        Some((scratch, ksplit)),
    )?;
    let reduce = match reduce {
        Some(r) => r,
        None => node.skip(),
    };
    Ok((node, reduce))
}

/// The buffers a product binds: W (its range of a possibly shared buffer), the bias
/// vectors, the activations, the logits (`out`) and the LoRA `B` blocks.
#[derive(Clone, Copy)]
pub(crate) struct Operands<'a> {
    pub m: &'a GpuMatrix,
    pub vecs: &'a wgpu::Buffer,
    pub act: &'a wgpu::Buffer,
    pub out: Option<&'a wgpu::Buffer>,
    pub lora: Option<&'a wgpu::Buffer>,
}

/// `resources` at bindings 2, 3, ….
pub(crate) fn numbered(
    resources: Vec<wgpu::BindingResource<'_>>,
) -> Vec<(u32, wgpu::BindingResource<'_>)> {
    resources
        .into_iter()
        .enumerate()
        .map(|(i, r)| (2 + i as u32, r))
        .collect()
}

/// The product node (tensor-core tiles where the adapter has them, the portable tiles
/// otherwise), its matrix × vector variants for passes of at most `SMALL_T` tokens (or of
/// any size, for small matrices), and with `split` the reduce step of its k slices.
#[allow(clippy::too_many_arguments)]
fn build<'a>(
    cx: &Ctx<'a>,
    op: &'static str,
    layer: Option<usize>,
    m: &'a GpuMatrix,
    vecs: &'a wgpu::Buffer,
    act: &'a wgpu::Buffer,
    out: Option<&'a wgpu::Buffer>,
    a: &MatmulArgs,
    split: Option<(&'a wgpu::Buffer, u32)>,
) -> Result<(Node, Option<Node>)> {
    if m.n_in % 32 != 0 {
        return Err(op_err(
            op,
            format!("{}: K = {} is not a multiple of 32", m.name, m.n_in),
        ));
    }
    if !gpu_native(m.dtype) {
        return Err(op_err(
            op,
            format!("{}: {} is not read by the GPU kernels", m.name, m.dtype),
        ));
    }
    let (scale, lf, lora) = a.lora_fields(cx, op, m)?;
    let p = Params::of(m, a, scale, lf, split.map_or(1, |s| s.1.max(1)));
    if lora.is_some() && out.is_some() {
        return Err(op_err(op, format!("{}: a LoRA term on the logits", m.name)));
    }
    let o = Operands {
        m,
        vecs,
        act,
        out,
        lora,
    };
    let scratch = split.map(|s| s.0);
    let split = split.filter(|&(_, ks)| ks > 1 && cx.gpu.features.coopmat && out.is_none());
    let (mut node, mut reduce) = if cx.gpu.features.coopmat {
        coop::product(cx, op, layer, &o, a, &p, split, None)?
    } else {
        (tiled::product(cx, op, layer, &o, a, &p)?, None)
    };
    // The matrix × vector kernel reads W once per 4 tokens: for the first products of
    // the low-rank chains (few rows, in cache) that beats the tiles at every T (H100:
    // ranks 64 and 96 faster; rank 320 and the C-row second products slower).
    let max_t = if split.is_none()
        && m.n_out <= MATVEC_ALWAYS_ROWS
        && m.row_bytes * m.n_out <= MATVEC_ALWAYS_BYTES
    {
        u32::MAX
    } else {
        SMALL_T
    };
    let small = matvec::product(cx, op, layer, &o, a, &p, max_t)?;
    let count = a.rows;
    let mut below = Small {
        count,
        max: max_t,
        node: Box::new(small),
    };
    // The reduce step has nothing to do whenever the matrix × vector variant runs.
    let mut reduce_below = reduce.as_ref().map(|r| Small {
        count,
        max: max_t,
        node: Box::new(r.skip()),
    });
    let wg_bytes = cx.gpu.limits.max_compute_workgroup_storage_size;
    let plan = medium_plan(&cx.gpu.tuning, m.n_out as u32, m.n_in as u32, wg_bytes);
    if let Some((tile, ks)) = plan.filter(|_| cx.gpu.features.coopmat && max_t == SMALL_T) {
        // Passes of SMALL_T < T ≤ MEDIUM_T: the medium tile, in as many of its k slices as
        // the scratch holds (none for the logits).
        let fits = scratch.map_or(0, |b| b.size() / (4 * (MEDIUM_T as u64) * m.n_out as u64));
        let ks = if out.is_some() {
            1
        } else {
            ks.min(fits as u32)
        };
        let msplit = scratch.filter(|_| ks > 1).map(|b| (b, ks));
        let pm = Params {
            ksplit: ks.max(1),
            ..p
        };
        let (mut mnode, mreduce) = coop::product(cx, op, layer, &o, a, &pm, msplit, Some(tile))?;
        mnode.small = Some(below);
        below = Small {
            count,
            max: MEDIUM_T,
            node: Box::new(mnode),
        };
        reduce_below = match mreduce {
            Some(mut mr) => {
                mr.small = Some(Small {
                    count,
                    max: max_t,
                    node: Box::new(mr.skip()),
                });
                // A large variant without slices still needs a node to carry the medium
                // one's reduce step: its own, dispatching nothing.
                reduce.get_or_insert_with(|| node.skip());
                Some(Small {
                    count,
                    max: MEDIUM_T,
                    node: Box::new(mr),
                })
            }
            None => reduce.as_ref().map(|r| Small {
                count,
                max: MEDIUM_T,
                node: Box::new(r.skip()),
            }),
        };
    }
    node.small = Some(below);
    if let (Some(r), Some(b)) = (reduce.as_mut(), reduce_below) {
        r.small = Some(b);
    }
    Ok((node, reduce))
}

/// Whether the products of passes larger than a decode step add a LoRA term themselves
/// (the tensor-core tiles, as extra k-steps) on `gpu`; otherwise the graph runs `B h` as a
/// product of its own.
pub fn lora_in_tiles(gpu: &crate::gpu::GpuContext) -> bool {
    gpu.features.coopmat
}

/// CPU reference: `y[t, r] = act(Σ_k W[r, k] x[t, k] + bias[r])` with `W` decoded to f32
/// `[N, K]`, f64 accumulation.
pub fn reference(
    w: &[f32],
    n: usize,
    k: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    act: Act,
) -> Vec<f32> {
    let t = x.len() / k;
    let mut y = vec![0f32; t * n];
    for ti in 0..t {
        for r in 0..n {
            let mut s = 0f64;
            for i in 0..k {
                s += w[r * k + i] as f64 * x[ti * k + i] as f64;
            }
            let mut v = s as f32 + bias.map_or(0.0, |b| b[r]);
            v = match act {
                Act::None => v,
                Act::Tanh => v.tanh(),
                Act::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                Act::ReluSq => v.max(0.0).powi(2),
            };
            y[ti * n + r] = v;
        }
    }
    y
}

#[cfg(test)]
mod tests;
