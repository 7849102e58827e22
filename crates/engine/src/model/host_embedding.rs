//! The embedding matrix stays in host memory, as llama.cpp keeps `token_embd` on the CPU:
//! a pass needs only its tokens' rows, so each pass copies those rows (encoded, a few KB
//! each) into its metadata buffer and the `embed` kernel decodes them on the GPU
//! (`ops::embed`). The `[vocab, C]` matrix — 27 MiB of a 0.1B Q4_K_M model's 126, 320 MiB
//! of a 2.9B F16 one — takes no GPU memory.

use std::sync::OnceLock;

use crate::error::{EngineError, Result};
use crate::format::DType;

/// The embedding's rows, laid out as the GPU kernels read that encoding
/// ([`crate::ops::gpu_layout`]; encodings without a GPU decoder decoded to F16 at load),
/// each row padded to a multiple of 4 bytes.
#[derive(Debug)]
pub struct HostEmbedding {
    /// The tensor's name in the file.
    pub name: String,
    /// The encoding of [`HostEmbedding::row`]'s bytes.
    pub dtype: DType,
    /// Values a row (C).
    pub n_in: usize,
    /// Rows (the vocabulary).
    pub n_rows: usize,
    /// Bytes from one row to the next, a multiple of 4 (the GPU-layout row, padded).
    pub row_bytes: usize,
    /// Filled by the load ([`crate::model::upload::PendingUpload::stream`]), beside the
    /// weights' copy to the GPU.
    rows: OnceLock<Vec<u8>>,
}

impl HostEmbedding {
    /// An embedding of `n_rows` rows of `n_in` values in `dtype`, rows of `gpu_row` bytes
    /// as the GPU layout has them; not yet filled.
    pub(crate) fn new(
        name: &str,
        dtype: DType,
        n_in: usize,
        n_rows: usize,
        gpu_row: usize,
    ) -> Self {
        HostEmbedding {
            name: name.to_string(),
            dtype,
            n_in,
            n_rows,
            row_bytes: gpu_row.next_multiple_of(4),
            rows: OnceLock::new(),
        }
    }

    /// Stores the rows: `bytes` holds `n_rows` rows of the GPU layout's `gpu_row` bytes
    /// each, back to back (padded here to [`HostEmbedding::row_bytes`]).
    ///
    /// Errors: [`EngineError::Op`] when `bytes` is not that long or the rows were set.
    pub(crate) fn set(&self, bytes: Vec<u8>, gpu_row: usize) -> Result<()> {
        let err = |what: String| EngineError::Op { op: "upload", what };
        if bytes.len() != self.n_rows * gpu_row {
            return Err(err(format!(
                "`{}`: {} bytes for {} rows of {gpu_row}",
                self.name,
                bytes.len(),
                self.n_rows
            )));
        }
        let rows = if gpu_row == self.row_bytes {
            bytes
        } else {
            let mut padded = vec![0u8; self.n_rows * self.row_bytes];
            for (dst, src) in padded
                .chunks_exact_mut(self.row_bytes)
                .zip(bytes.chunks_exact(gpu_row.max(1)))
            {
                dst[..gpu_row].copy_from_slice(src);
            }
            padded
        };
        self.rows
            .set(rows)
            .map_err(|_| err(format!("`{}`: rows set twice", self.name)))
    }

    /// Row `token`'s bytes ([`HostEmbedding::row_bytes`] of them).
    ///
    /// Errors: [`EngineError::Op`] for a token past the vocabulary, or before the load
    /// filled the rows.
    pub fn row(&self, token: u32) -> Result<&[u8]> {
        let rows = self.rows.get().ok_or_else(|| EngineError::Op {
            op: "embed",
            what: format!("`{}`: the rows are not loaded yet", self.name),
        })?;
        let at = token as usize * self.row_bytes;
        rows.get(at..at + self.row_bytes)
            .ok_or_else(|| EngineError::Op {
                op: "embed",
                what: format!(
                    "token {token} is past the vocabulary of {} rows",
                    self.n_rows
                ),
            })
    }

    /// Host bytes it holds (0 before the load fills it).
    pub fn bytes(&self) -> u64 {
        self.rows.get().map_or(0, |r| r.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_padded_to_words_and_bounded() {
        // Rows of 6 bytes (say, a 3-value F16 row) padded to 8.
        let e = HostEmbedding::new("emb", DType::F16, 3, 2, 6);
        assert_eq!(e.row_bytes, 8);
        assert!(e.row(0).is_err(), "before the load: an error, not a panic");
        assert!(e.set(vec![1; 5], 6).is_err(), "a short fill is refused");
        e.set(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 6)
            .unwrap();
        assert_eq!(e.row(0).unwrap(), &[1, 2, 3, 4, 5, 6, 0, 0]);
        assert_eq!(e.row(1).unwrap(), &[7, 8, 9, 10, 11, 12, 0, 0]);
        assert!(e.row(2).is_err(), "a token past the vocabulary");
        assert_eq!(e.bytes(), 16);
        assert!(e.set(vec![0; 12], 6).is_err(), "set once");
    }
}
