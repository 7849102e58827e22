//! Embedding gather from the encoded rows (`shaders/embed.wgsl`): Q8_0 / Q4_K / F16 rows
//! are decoded on the GPU, one chunk of rows per binding.

use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::{op_err, Count, Ctx, GpuMatrix, Grid, Node, COMMON};

/// The `embed` kernel for rows in one encoding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmbedSpec {
    pub dtype: DType,
}

impl KernelSpec for EmbedSpec {
    fn label(&self) -> String {
        format!("embed[{}]", self.dtype)
    }

    fn source(&self) -> Result<String> {
        let w = with_decode(Wgsl::new().file(COMMON), self.dtype, "embed")?;
        Ok(w.file(shader!("embed.wgsl")).build())
    }
}

/// Mirrors `Params` of `shaders/embed.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) c: u32,
    pub(crate) row0: u32,
    pub(crate) n_rows: u32,
    pub(crate) row_bytes: u32,
    pub(crate) y_off: u32,
    pub(crate) _p: [u32; 3],
}

/// `act[y_off + t*C ..] = emb[tokens[t]]` for tokens within `chunk`'s rows (token ids at
/// `meta[0..T]`). One node per chunk of the embedding.
pub fn embed(
    cx: &Ctx,
    chunk: &GpuMatrix,
    meta: &wgpu::Buffer,
    act: &wgpu::Buffer,
    y_off: usize,
) -> Result<Node> {
    if chunk.n_in % 32 != 0 {
        return Err(op_err(
            "embed",
            format!("row length {} is not a multiple of 32", chunk.n_in),
        ));
    }
    let p = Params {
        c: chunk.n_in as u32,
        row0: chunk.row0 as u32,
        n_rows: chunk.n_out as u32,
        row_bytes: chunk.row_bytes as u32,
        y_off: y_off as u32,
        _p: [0; 3],
    };
    let spec = EmbedSpec { dtype: chunk.dtype };
    cx.node(
        "embed",
        None,
        &spec,
        &p,
        &[&chunk.buffer, meta, act],
        Grid::Linear {
            count: Count::Tokens,
            per: (chunk.n_in / 32) as u32,
            wg_size: 64,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::testing::*;
    use crate::ops::Dims;
    use crate::DType;

    /// Rows of the Q4_K / Q8_0 / Q6_K fixture tensors (256 × 256), gathered and decoded
    /// on the GPU, equal gguf-py's decode up to f32 rounding order.
    #[test]
    fn gathers_and_decodes_rows() {
        for (ty, dtype) in [
            ("Q4_K", DType::Q4_K),
            ("Q8_0", DType::Q8_0),
            ("Q6_K", DType::Q6_K),
        ] {
            let bin = std::fs::read(fixture(&format!(
                "quant/{ty}.blk.0.time_mix_key.weight.bin"
            )))
            .unwrap();
            let want = npy_f32(&fixture(&format!(
                "quant/{ty}.blk.0.time_mix_key.weight.f32.npy"
            )));
            let c = 256;
            let tokens = [7u32, 200, 3, 255];
            let h = Harness::new(Dims {
                n_tokens: tokens.len() as u32,
                ..Default::default()
            });
            // Chunk holding rows [128, 256) only: rows 7 and 3 must be left untouched.
            let bin = crate::ops::gpu_layout::to_gpu_layout(dtype, 256, &bin);
            let row_bytes = bin.len() / 256;
            let chunk = GpuMatrix {
                offset: 0,
                name: ty.into(),
                buffer: buffer::storage_init(&h.gpu, ty, &bin[128 * row_bytes..]).unwrap(),
                dtype,
                row0: 128,
                n_out: 128,
                n_in: c,
                row_bytes,
            };
            let act = h.f32_buf(&vec![-1.0; tokens.len() * c]);
            let n = embed(&h.ctx(), &chunk, &h.u32_buf(&tokens), &act, 0).unwrap();
            h.run(&[n]);
            let got = h.read(&act, 0, tokens.len() * c);
            for (i, &tok) in tokens.iter().enumerate() {
                let g = &got[i * c..(i + 1) * c];
                if tok < 128 {
                    assert!(
                        g.iter().all(|&v| v == -1.0),
                        "{ty}: row {tok} is outside the chunk"
                    );
                } else {
                    let w = &want[tok as usize * c..(tok as usize + 1) * c];
                    // d*sc*q - dmin*m in f32 as ggml; GPU may fuse into an FMA: 1e-6 relative.
                    assert!(max_abs(g, w) < 1e-5, "{ty} row {tok}: {}", max_abs(g, w));
                }
            }
        }
    }
}
