//! LayerNorm over rows of C (`shaders/layer_norm.wgsl`): ln0, ln1, ln2, ln_out; eps 1e-5
//! as torch's default (RWKV_x070).

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{Count, Ctx, Grid, Node, COMMON};

/// The `layer_norm` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayerNormSpec;

impl KernelSpec for LayerNormSpec {
    fn label(&self) -> String {
        "layer_norm".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .file(COMMON)
            .file(shader!("wg_sum.wgsl"))
            .file(shader!("layer_norm.wgsl"))
            .build())
    }
}

/// Mirrors `Params` of `shaders/layer_norm.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) c: u32,
    pub(crate) x_off: u32,
    pub(crate) y_off: u32,
    pub(crate) w_off: u32,
    pub(crate) rows_sel: u32,
    pub(crate) eps: f32,
    pub(crate) _p: [u32; 2],
}

/// `act[y_off..] = LayerNorm(act[x_off..])` over `rows` rows of `c`, weight at
/// `vecs[w_off..+c]`, bias at `vecs[w_off+c..+c]`. `rows` is [`Count::Tokens`] or
/// [`Count::Rows`]. May run in place.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    cx: &Ctx,
    layer: Option<usize>,
    c: usize,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    x_off: usize,
    y_off: usize,
    w_off: usize,
    rows: Count,
    eps: f32,
) -> Result<Node> {
    let p = Params {
        c: c as u32,
        x_off: x_off as u32,
        y_off: y_off as u32,
        w_off: w_off as u32,
        rows_sel: u32::from(rows == Count::Rows),
        eps,
        _p: [0; 2],
    };
    cx.node(
        "layer_norm",
        layer,
        &LayerNormSpec,
        &p,
        &[vecs, act],
        Grid::Linear {
            count: rows,
            per: 1,
            wg_size: 1,
        },
    )
}

/// CPU reference (f64 accumulation).
pub fn reference(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let c = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(c) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        for i in 0..c {
            out.push(((row[i] as f64 - mean) * rstd * w[i] as f64 + b[i] as f64) as f32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    #[test]
    fn matches_cpu_reference() {
        let (t, c) = (5, 320);
        let h = Harness::new(Dims {
            n_tokens: t as u32,
            ..Default::default()
        });
        let x: Vec<f32> = rand_vec(1, t * c, 3.0).iter().map(|v| v + 0.7).collect();
        let wb = rand_vec(2, 2 * c, 1.0);
        let mut act = x.clone();
        act.extend(vec![0.0; t * c]);
        let act_buf = h.f32_buf(&act);
        let vecs = h.f32_buf(&wb);
        let node = layer_norm(
            &h.ctx(),
            None,
            c,
            &vecs,
            &act_buf,
            0,
            t * c,
            0,
            Count::Tokens,
            crate::config::LN_EPS,
        )
        .unwrap();
        h.run(&[node]);
        let got = h.read(&act_buf, t * c, t * c);
        let want = reference(&x, &wb[..c], &wb[c..], crate::config::LN_EPS);
        // f32 sums over 320 values vs f64: a few ulps of values of magnitude ~5.
        assert!(
            max_abs(&got, &want) < 1e-4,
            "max |Δ| {}",
            max_abs(&got, &want)
        );
    }
}
