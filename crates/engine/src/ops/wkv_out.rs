//! GroupNorm (ln_x) + `r_k` bonus + gate after the recurrence (`shaders/wkv_out.wgsl`).

use crate::config::HEAD_SIZE;
use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{op_err, Count, Ctx, Grid, Node, COMMON};

/// The `wkv_out` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WkvOutSpec;

impl KernelSpec for WkvOutSpec {
    fn label(&self) -> String {
        "wkv_out".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .u32("HEAD_SIZE", HEAD_SIZE as u32)
            .file(COMMON)
            .file(shader!("wg_sum.wgsl"))
            .file(shader!("wkv_out.wgsl"))
            .build())
    }
}

/// The kernel's parameters, mirrored by `Params` of `shaders/wkv_out.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct WkvOutArgs {
    pub c: u32,
    pub n_head: u32,
    pub y_off: u32,
    pub r_off: u32,
    pub k_off: u32,
    pub v_off: u32,
    pub g_off: u32,
    pub o_off: u32,
    /// `vecs` offsets of `r_k [H*N]` and of ln_x weight (bias at + C).
    pub rk_off: u32,
    pub lnx_off: u32,
    /// GroupNorm eps: 64e-5 (RWKV_x070 `ln_x`).
    pub eps: f32,
    pub _p: u32,
}

/// `o = (GroupNorm_H(y) + (Σ r k r_k) v) * g` per token and head (N = 64).
pub fn wkv_out(
    cx: &Ctx,
    layer: Option<usize>,
    a: &WkvOutArgs,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    if a.c != a.n_head * HEAD_SIZE as u32 {
        return Err(op_err(
            "wkv_out",
            format!("C = {} is not {HEAD_SIZE} × {} heads", a.c, a.n_head),
        ));
    }
    cx.node(
        "wkv_out",
        layer,
        &WkvOutSpec,
        a,
        &[vecs, act],
        Grid::Linear {
            count: Count::Tokens,
            per: a.n_head,
            wg_size: 1,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    #[test]
    fn matches_cpu_reference() {
        let (t, c, nh) = (2usize, 128usize, 2usize);
        let n = t * c;
        let h = Harness::new(Dims {
            n_tokens: t as u32,
            ..Default::default()
        });
        let regions: Vec<Vec<f32>> = (0..5).map(|i| rand_vec(40 + i, n, 1.0)).collect(); // y r k v g
        let vecs = rand_vec(50, 3 * c, 1.0); // r_k, lnx w, lnx b
        let mut act = regions.concat();
        act.extend(vec![0.0; n]);
        let act_buf = h.f32_buf(&act);
        let args = WkvOutArgs {
            c: c as u32,
            n_head: nh as u32,
            y_off: 0,
            r_off: n as u32,
            k_off: 2 * n as u32,
            v_off: 3 * n as u32,
            g_off: 4 * n as u32,
            o_off: 5 * n as u32,
            rk_off: 0,
            lnx_off: c as u32,
            eps: crate::config::GN_EPS,
            _p: 0,
        };
        let node = wkv_out(&h.ctx(), None, &args, &h.f32_buf(&vecs), &act_buf).unwrap();
        h.run(&[node]);
        let got = h.read(&act_buf, 5 * n, n);
        let [y, r, k, v, g] = [
            &regions[0],
            &regions[1],
            &regions[2],
            &regions[3],
            &regions[4],
        ];
        for ti in 0..t {
            for hd in 0..nh {
                let b = ti * c + hd * 64;
                let mean = (0..64).map(|i| y[b + i] as f64).sum::<f64>() / 64.0;
                let var = (0..64)
                    .map(|i| (y[b + i] as f64 - mean).powi(2))
                    .sum::<f64>()
                    / 64.0;
                let bonus: f64 = (0..64)
                    .map(|i| (r[b + i] * k[b + i] * vecs[hd * 64 + i]) as f64)
                    .sum();
                for i in 0..64 {
                    let ch = hd * 64 + i;
                    let gn = (y[b + i] as f64 - mean) / (var + crate::config::GN_EPS as f64).sqrt()
                        * vecs[c + ch] as f64
                        + vecs[2 * c + ch] as f64;
                    let want = ((gn + bonus * v[b + i] as f64) * g[b + i] as f64) as f32;
                    assert!(
                        (got[b + i] - want).abs() < 1e-4,
                        "t{ti} h{hd} i{i}: {} vs {want}",
                        got[b + i]
                    );
                }
            }
        }
    }
}
