//! Embedding gather (`shaders/embed.wgsl`): the pass's tokens' rows, encoded (Q8_0 / Q4_K /
//! Q6_K / F16 …), which the host copied from the embedding it keeps
//! ([`crate::model::host_embedding`]) into the pass's metadata buffer, decoded on the GPU.

use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::{op_err, Count, Ctx, Grid, Node, COMMON};

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
    pub(crate) rows_off: u32,
    pub(crate) row_bytes: u32,
    pub(crate) y_off: u32,
}

/// Where a pass's embedding rows lie in its metadata buffer: `c` values a row in `dtype`,
/// token `t`'s row at byte `rows_off + t · row_bytes`.
#[derive(Debug, Clone, Copy)]
pub struct EmbedRows {
    pub dtype: DType,
    pub c: usize,
    pub rows_off: usize,
    pub row_bytes: usize,
}

/// `act[y_off + t·C ..] = decode(row t)` for each token `t` of the pass, the rows in
/// `meta` as `rows` places them.
///
/// Errors: [`crate::EngineError::Op`] for rows of a length not a multiple of 32 values, or
/// offsets not a multiple of 4 bytes.
pub fn embed(
    cx: &Ctx,
    rows: EmbedRows,
    meta: &wgpu::Buffer,
    act: &wgpu::Buffer,
    y_off: usize,
) -> Result<Node> {
    if rows.c % 32 != 0 {
        return Err(op_err(
            "embed",
            format!("row length {} is not a multiple of 32", rows.c),
        ));
    }
    if rows.rows_off % 4 != 0 || rows.row_bytes % 4 != 0 {
        return Err(op_err(
            "embed",
            format!(
                "rows at byte {} every {} bytes: not whole words",
                rows.rows_off, rows.row_bytes
            ),
        ));
    }
    let p = Params {
        c: rows.c as u32,
        rows_off: rows.rows_off as u32,
        row_bytes: rows.row_bytes as u32,
        y_off: y_off as u32,
    };
    let spec = EmbedSpec { dtype: rows.dtype };
    cx.node(
        "embed",
        None,
        &spec,
        &p,
        &[meta, act],
        Grid::Linear {
            count: Count::Tokens,
            per: (rows.c / 32) as u32,
            wg_size: 64,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::Dims;
    use crate::DType;

    /// Rows of the Q4_K / Q8_0 / Q6_K fixture tensors (256 × 256) in their GPU layout,
    /// placed as a pass places its tokens' rows (after other metadata, in another order),
    /// decoded on the GPU, equal gguf-py's decode up to f32 rounding order.
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
            let bin = crate::ops::gpu_layout::to_gpu_layout(dtype, 256, &bin);
            let row_bytes = bin.len() / 256;
            // 12 words of other metadata first, then the tokens' rows.
            let rows_off = 48;
            let mut meta = vec![0xffu8; rows_off];
            for &tok in &tokens {
                meta.extend_from_slice(&bin[tok as usize * row_bytes..][..row_bytes]);
            }
            let words: Vec<u32> = meta
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let act = h.f32_buf(&vec![-1.0; (tokens.len() + 1) * c]);
            let rows = EmbedRows {
                dtype,
                c,
                rows_off,
                row_bytes,
            };
            let n = embed(&h.ctx(), rows, &h.u32_buf(&words), &act, c).unwrap();
            h.run(&[n]);
            let got = h.read(&act, 0, (tokens.len() + 1) * c);
            assert!(
                got[..c].iter().all(|&v| v == -1.0),
                "{ty}: before y_off untouched"
            );
            for (i, &tok) in tokens.iter().enumerate() {
                let g = &got[(i + 1) * c..(i + 2) * c];
                let w = &want[tok as usize * c..(tok as usize + 1) * c];
                // d*sc*q - dmin*m in f32 as ggml; GPU may fuse into an FMA: 1e-6 relative.
                assert!(max_abs(g, w) < 1e-5, "{ty} row {tok}: {}", max_abs(g, w));
            }
        }
    }

    #[test]
    fn unaligned_rows_are_refused() {
        let h = Harness::new(Dims::default());
        let buf = h.u32_buf(&[0; 64]);
        let rows = |rows_off, row_bytes| EmbedRows {
            dtype: DType::F16,
            c: 32,
            rows_off,
            row_bytes,
        };
        assert!(embed(&h.ctx(), rows(2, 64), &buf, &buf, 0).is_err());
        assert!(embed(&h.ctx(), rows(0, 66), &buf, &buf, 0).is_err());
    }
}
