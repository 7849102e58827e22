//! The tensor-core tiles (`shaders/matmul_coop.wgsl`, cooperative matrices: BM tokens ×
//! BN rows a workgroup) and the reduce step of their k slices
//! (`shaders/matmul_reduce.wgsl`), for a single product or a group (`group.rs`).

use super::{coop_bt, coop_pf2, coop_rotate, coop_tile, numbered, MatmulArgs, Operands, Params};
use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::{op_err, Ctx, Grid, Node, COMMON};

/// The `matmul_coop` kernel: weights in `dtype`, tiles of `bm` tokens × `bn` rows with
/// `wm` tokens a subgroup (one of `COOP_TILES`), `ksplit` slices of k (more than 1: raw
/// slices into the scratch for [`ReduceSpec`]), loading two steps ahead (`pf2`), with a
/// LoRA term as extra k-steps (`lora`), for one product or a group of them (`group`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CoopSpec {
    pub dtype: DType,
    /// Writes the separate logits buffer (binding 6) instead of the activations.
    pub logits: bool,
    pub bm: u32,
    pub bn: u32,
    pub wm: u32,
    /// KSPLIT: the k slices of a single product; for a group, more than 1 where its
    /// products are split (each its own number of slices, from its Params).
    pub ksplit: u32,
    pub pf2: bool,
    pub lora: bool,
    pub group: bool,
    /// The W tile transposed in workgroup memory (`BT`, [`super::coop_bt`]).
    pub bt: bool,
    /// The row tiles' k steps from rotated starts (`ROT`, [`super::coop_rotate`]).
    pub rotate: bool,
}

impl KernelSpec for CoopSpec {
    fn label(&self) -> String {
        format!("matmul_coop[{}]", self.dtype)
    }

    fn source(&self) -> Result<String> {
        let w = Wgsl::new()
            .directives(shader!("matmul_coop/enable.wgsl"))
            .u32("BM", self.bm)
            .u32("BN", self.bn)
            .u32("WM", self.wm)
            .u32("KSPLIT", self.ksplit)
            // F16 weights load 16 bytes at a time through `w4`.
            .flag("W16", self.dtype == DType::F16)
            .flag("PF2", self.pf2)
            .flag("BT", self.bt)
            .flag("ROT", self.rotate)
            .file(COMMON);
        let mut w = with_decode(w, self.dtype, "matmul_coop")?;
        if self.dtype != DType::Q4_K {
            // Q4_K brings its own prefetch pair (shaders/decode/q4_k.wgsl).
            w = w.file(shader!("matmul_coop/raw_generic.wgsl"));
        }
        let w = w
            .file(match self.logits {
                true => shader!("product/out_logits6.wgsl"),
                false => shader!("product/out_act_vec4.wgsl"),
            })
            .file(match self.lora {
                true => shader!("matmul_coop/lora_on.wgsl"),
                false => shader!("matmul_coop/lora_off.wgsl"),
            })
            .file(match self.ksplit > 1 {
                true => shader!("matmul_coop/part.wgsl"),
                false => shader!("matmul_coop/part_none.wgsl"),
            });
        Ok(with_products(w, self.group)
            .file(shader!("matmul_coop.wgsl"))
            .build())
    }
}

/// The `matmul_reduce` kernel: adds the `ksplit` slices of a single product (or, with
/// `group`, each product's own number of slices) and applies the epilogue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReduceSpec {
    pub ksplit: u32,
    pub group: bool,
}

impl KernelSpec for ReduceSpec {
    fn label(&self) -> String {
        "matmul_reduce".into()
    }

    fn source(&self) -> Result<String> {
        let w = Wgsl::new().u32("KSPLIT", self.ksplit).file(COMMON);
        Ok(with_products(w, self.group)
            .file(shader!("matmul_reduce.wgsl"))
            .build())
    }
}

/// `w` with the product's `Params`, the table of products at binding 1 (one, or a
/// group's) and the epilogue.
fn with_products(w: Wgsl, group: bool) -> Wgsl {
    let w = w.file(shader!("product/params.wgsl"));
    let w = match group {
        true => w.file(shader!("product/group.wgsl")),
        false => w
            .file(shader!("product/one.wgsl"))
            .file(shader!("product/single.wgsl")),
    };
    w.file(shader!("product/finish.wgsl"))
}

/// The tensor-core node of the product `o` with arguments `a` (params `p`) in `tile`
/// (`None`: [`coop_tile`]'s), and with `split` (the scratch, k slices > 1) the reduce node
/// that runs right after it.
///
/// Errors: a LoRA term not aligned for the tiles; as [`Ctx::node_at`].
#[allow(clippy::too_many_arguments)]
pub(super) fn product<'a>(
    cx: &Ctx<'a>,
    op: &'static str,
    layer: Option<usize>,
    o: &Operands<'a>,
    a: &MatmulArgs,
    p: &Params,
    split: Option<(&'a wgpu::Buffer, u32)>,
    tile: Option<(u32, u32, u32)>,
) -> Result<(Node, Option<Node>)> {
    let (m, n_out) = (o.m, o.m.n_out as u32);
    let tuning = &cx.gpu.tuning;
    let wg_bytes = cx.gpu.limits.max_compute_workgroup_storage_size;
    let (bm, bn, wm) = tile.unwrap_or_else(|| coop_tile(tuning, n_out, wg_bytes));
    let ks = split.map_or(1, |s| s.1);
    let mut spec = CoopSpec {
        dtype: m.dtype,
        logits: o.out.is_some(),
        bm,
        bn,
        wm,
        ksplit: ks,
        pf2: coop_pf2(tuning, m.dtype, bm),
        lora: false,
        group: false,
        bt: coop_bt(tuning, false, n_out as usize, m.n_in),
        rotate: coop_rotate(tuning, m.dtype),
    };
    // Bindings 2.. : W, vecs, act, W as vec4s, then the logits or the k-split scratch.
    let mut res = vec![
        m.binding(),
        o.vecs.as_entire_binding(),
        o.act.as_entire_binding(),
        m.binding(),
    ];
    if let Some(out) = o.out {
        res.push(out.as_entire_binding());
    }
    let mut lora_res = None;
    if let (Some(b), Some(l)) = (o.lora, a.lora) {
        // `B h` as extra k-steps: h rows and B blocks in whole 16-byte loads.
        if l.rank % 32 != 0 || l.h_off % 4 != 0 || l.h_stride % 4 != 0 || l.b_off % 8 != 0 {
            return Err(op_err(
                op,
                format!(
                    "{}: LoRA term not aligned for the tensor-core tiles",
                    m.name
                ),
            ));
        }
        spec.lora = true;
        lora_res = Some((7, b.as_entire_binding()));
    }
    let mut reduce = None;
    if let Some((scratch, ks)) = split {
        res.push(scratch.as_entire_binding());
        reduce = Some(cx.node_at(
            "matmul_reduce",
            layer,
            &ReduceSpec {
                ksplit: ks,
                group: false,
            },
            p,
            numbered(vec![
                scratch.as_entire_binding(),
                o.vecs.as_entire_binding(),
                o.act.as_entire_binding(),
            ]),
            Grid::Linear {
                count: a.rows,
                per: n_out,
                wg_size: 256,
            },
        )?);
    }
    let mut res = numbered(res);
    res.extend(lora_res);
    let node = cx.node_at(
        op,
        layer,
        &spec,
        p,
        res,
        Grid::Tiles {
            x: n_out.div_ceil(bn) * ks,
            count: a.rows,
            per_y: bm,
        },
    )?;
    Ok((node, reduce))
}
