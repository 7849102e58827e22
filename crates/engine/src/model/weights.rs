//! One typed description of RWKV-7 weights that GGUF, SafeTensors and `.pth` all map to.
//!
//! Every tensor stays a view into the file mapping. Names, shapes and the math they feed
//! follow BlinkDL's `RWKV_x070` (rwkv pip package) and llama.cpp's `rwkv7.cpp`.

use crate::config::Rwkv7Config;
use crate::error::Result;
use crate::format::DType;

/// How a matrix's elements are ordered in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixLayout {
    /// Row-major `[out, in]`: one row per output, `y = W x` (nn.Linear, GGUF, every big
    /// matrix; quantization blocks run along `in`).
    OutIn,
    /// Row-major `[in, out]`: `y = x W` (BlinkDL's low-rank `w1, w2, a1, …` in
    /// SafeTensors / `.pth`; GGUF stores these transposed, i.e. [`MatrixLayout::OutIn`]).
    InOut,
}

/// A weight matrix as stored in the file.
#[derive(Clone, Copy)]
pub struct Matrix<'a> {
    /// Name as stored in the file.
    pub name: &'a str,
    pub dtype: DType,
    /// Output size (rows of `W` in `y = W x`).
    pub n_out: usize,
    /// Input size (length of `x`).
    pub n_in: usize,
    pub layout: MatrixLayout,
    /// Raw bytes in the file encoding.
    pub bytes: &'a [u8],
}

/// A weight vector (mixes, biases, norms, `w0`, …), possibly a slice of a stacked tensor
/// such as GGUF's `time_mix_lerp_fused`.
#[derive(Clone)]
pub struct Vector<'a> {
    /// Name as stored in the file, with `[i]` appended for a slice of a stacked tensor.
    pub name: String,
    pub dtype: DType,
    pub len: usize,
    pub bytes: &'a [u8],
}

// Debug without the bytes: a model's Debug output must not be its weights.
impl std::fmt::Debug for Matrix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matrix")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("n_out", &self.n_out)
            .field("n_in", &self.n_in)
            .field("layout", &self.layout)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl std::fmt::Debug for Vector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vector")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("len", &self.len)
            .finish()
    }
}

impl Vector<'_> {
    /// Decodes to f32 (vectors are tiny; this is the only copy the engine makes of them).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0.0f32; self.len];
        crate::quant::dequantize(self.dtype, self.bytes, &mut out)?;
        Ok(out)
    }
}

impl Matrix<'_> {
    /// Decodes to f32 in the file's layout (`[n_out, n_in]` for `OutIn`, `[n_in, n_out]`
    /// for `InOut`). For tests and small fix-ups only: big matrices stay encoded.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0.0f32; self.n_out * self.n_in];
        crate::quant::dequantize(self.dtype, self.bytes, &mut out)?;
        Ok(out)
    }

    /// Decodes to f32 in `[n_out, n_in]` order, transposing `InOut` matrices.
    pub fn to_f32_out_in(&self) -> Result<Vec<f32>> {
        let raw = self.to_f32()?;
        Ok(match self.layout {
            MatrixLayout::OutIn => raw,
            MatrixLayout::InOut => {
                let mut t = vec![0.0f32; raw.len()];
                for i in 0..self.n_in {
                    for o in 0..self.n_out {
                        t[o * self.n_in + i] = raw[i * self.n_out + o];
                    }
                }
                t
            }
        })
    }
}

/// LayerNorm / GroupNorm affine parameters, each `[C]`.
#[derive(Debug, Clone)]
pub struct Norm<'a> {
    pub weight: Vector<'a>,
    pub bias: Vector<'a>,
}

/// Time mix (attention) of one block. Shapes: vectors `[C]`; `r_k` `[H×N]` flattened;
/// `w1 [C→Dw]`, `w2 [Dw→C]`, likewise `a*`, `v*`, `g*`; `receptance/key/value/output` `[C, C]`.
#[derive(Debug, Clone)]
pub struct TimeMix<'a> {
    pub x_r: Vector<'a>,
    pub x_w: Vector<'a>,
    pub x_k: Vector<'a>,
    pub x_v: Vector<'a>,
    pub x_a: Vector<'a>,
    pub x_g: Vector<'a>,
    pub w0: Vector<'a>,
    pub w1: Matrix<'a>,
    pub w2: Matrix<'a>,
    pub a0: Vector<'a>,
    pub a1: Matrix<'a>,
    pub a2: Matrix<'a>,
    /// Value-residual mix; `None` in layer 0, which produces `v_first` instead (the files'
    /// layer-0 `v0/v1/v2` are unused dummies).
    pub v0: Option<Vector<'a>>,
    pub v1: Option<Matrix<'a>>,
    pub v2: Option<Matrix<'a>>,
    pub g1: Matrix<'a>,
    pub g2: Matrix<'a>,
    pub k_k: Vector<'a>,
    pub k_a: Vector<'a>,
    pub r_k: Vector<'a>,
    pub receptance: Matrix<'a>,
    pub key: Matrix<'a>,
    pub value: Matrix<'a>,
    pub output: Matrix<'a>,
    /// GroupNorm over H groups, eps 64e-5.
    pub ln_x: Norm<'a>,
}

/// Channel mix (FFN) of one block: `key [F, C]`, `value [C, F]`.
#[derive(Debug, Clone)]
pub struct ChannelMix<'a> {
    pub x_k: Vector<'a>,
    pub key: Matrix<'a>,
    pub value: Matrix<'a>,
}

/// One block (layer).
#[derive(Debug, Clone)]
pub struct Block<'a> {
    pub ln1: Norm<'a>,
    pub ln2: Norm<'a>,
    pub att: TimeMix<'a>,
    pub ffn: ChannelMix<'a>,
}

/// A whole RWKV-7 model as views into its file.
#[derive(Debug, Clone)]
pub struct Rwkv7Weights<'a> {
    pub config: Rwkv7Config,
    /// Token embedding `[vocab, C]` (one row per token: `OutIn` with `n_out = vocab`).
    pub emb: Matrix<'a>,
    /// `blocks.0.ln0` / GGUF `token_embd_norm`, applied to the embedding.
    pub ln0: Norm<'a>,
    pub blocks: Vec<Block<'a>>,
    pub ln_out: Norm<'a>,
    /// Head `[vocab, C]`.
    pub head: Matrix<'a>,
}
