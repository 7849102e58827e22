//! The weight encodings the kernels read in their file encoding (`shaders/decode/`): which
//! ones, and the snippets a kernel that decodes one includes (how their blocks lie on the
//! GPU: [`super::gpu_layout`]).

use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::Wgsl;
use crate::ops::op_err;

/// Encodings the GPU kernels read directly; others are converted to F16 at load.
pub fn gpu_native(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::Q8_0
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
    )
}

/// `w` with the decode of `dtype` (`decode32` / `dec8` over `w: array<u32>`), for the
/// kernel `op`: byte access, the packed K-quant scales where the encoding has them, and
/// its own snippet.
///
/// Errors: [`crate::EngineError::Op`] for an encoding the kernels do not read.
pub(crate) fn with_decode(w: Wgsl, dtype: DType, op: &'static str) -> Result<Wgsl> {
    let decode = match dtype {
        DType::F32 => shader!("decode/f32.wgsl"),
        DType::F16 => shader!("decode/f16.wgsl"),
        DType::BF16 => shader!("decode/bf16.wgsl"),
        DType::Q8_0 => shader!("decode/q8_0.wgsl"),
        DType::Q4_K => shader!("decode/q4_k.wgsl"),
        DType::Q5_K => shader!("decode/q5_k.wgsl"),
        DType::Q6_K => shader!("decode/q6_k.wgsl"),
        other => {
            return Err(op_err(
                op,
                format!("no GPU decode for {other} (it is converted to F16 at load)"),
            ))
        }
    };
    let w = w.file(shader!("decode/bytes.wgsl"));
    let w = match dtype {
        DType::Q4_K | DType::Q5_K => w.file(shader!("decode/kscales.wgsl")),
        _ => w,
    };
    Ok(w.file(decode))
}
