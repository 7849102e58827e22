//! The portable tiled product (`shaders/matmul.wgsl`): 64 rows × 64 tokens a workgroup,
//! the weights decoded into workgroup memory; the prefill product where the adapter has
//! no tensor cores. (It leaves a LoRA term to a product of its own.)

use super::{numbered, MatmulArgs, Operands, Params};
use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::{Ctx, Grid, Node, COMMON};

/// The `matmul` kernel for weights in `dtype`, writing the activations or the logits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatmulSpec {
    pub dtype: DType,
    /// Writes the separate logits buffer (binding 5) instead of the activations.
    pub logits: bool,
}

impl KernelSpec for MatmulSpec {
    fn label(&self) -> String {
        format!("matmul[{}]", self.dtype)
    }

    fn source(&self) -> Result<String> {
        let out = match self.logits {
            true => shader!("product/out_logits5.wgsl"),
            false => shader!("product/out_act.wgsl"),
        };
        Ok(with_decode(Wgsl::new().file(COMMON), self.dtype, "matmul")?
            .file(out)
            .file(shader!("product/params.wgsl"))
            .file(shader!("product/one.wgsl"))
            .file(shader!("product/finish.wgsl"))
            .file(shader!("matmul.wgsl"))
            .build())
    }
}

/// The portable tiled node of the product `o` with arguments `a` (params `p`).
///
/// Errors: as [`Ctx::node_at`].
pub(super) fn product(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    o: &Operands,
    a: &MatmulArgs,
    p: &Params,
) -> Result<Node> {
    let spec = MatmulSpec {
        dtype: o.m.dtype,
        logits: o.out.is_some(),
    };
    // Bindings 2.. : W, vecs, act, [logits].
    let mut res = vec![
        o.m.binding(),
        o.vecs.as_entire_binding(),
        o.act.as_entire_binding(),
    ];
    if let Some(out) = o.out {
        res.push(out.as_entire_binding());
    }
    cx.node_at(
        op,
        layer,
        &spec,
        p,
        numbered(res),
        Grid::Tiles {
            x: (o.m.n_out as u32).div_ceil(64),
            count: a.rows,
            per_y: 64,
        },
    )
}
