//! Per-token preparation of the WKV inputs (`shaders/wkv_prep.wgsl`): normalized `kk`,
//! the `k_a` key mix, the value residual and the decay transform (RWKV_x070).

use crate::config::{DECAY_SCALE, HEAD_SIZE};
use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{op_err, Count, Ctx, Grid, Node, COMMON};

/// The `wkv_prep` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WkvPrepSpec;

impl KernelSpec for WkvPrepSpec {
    fn label(&self) -> String {
        "wkv_prep".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .u32("HEAD_SIZE", HEAD_SIZE as u32)
            .f32("DECAY_SCALE", DECAY_SCALE)
            .file(COMMON)
            .file(shader!("wkv_prep.wgsl"))
            .build())
    }
}

/// The kernel's parameters, mirrored by `Params` of `shaders/wkv_prep.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct WkvPrepArgs {
    pub c: u32,
    pub n_head: u32,
    /// 1 in layer 0 (writes v_first), else 0.
    pub layer0: u32,
    pub k_off: u32,
    pub v_off: u32,
    pub a_off: u32,
    pub w_off: u32,
    pub vmix_off: u32,
    pub vfirst_off: u32,
    pub kk_off: u32,
    /// `vecs` offsets of `k_k` and `k_a` `[C]`.
    pub kk_w_off: u32,
    pub ka_off: u32,
}

/// In place on `act`: `kk = normalize(k*k_k)`, `k *= 1 + (a-1)*k_a`, value residual,
/// `w = exp(-DECAY_SCALE*sigmoid(w))` ([`DECAY_SCALE`] = e^-0.5). Heads of [`HEAD_SIZE`].
pub fn wkv_prep(
    cx: &Ctx,
    layer: Option<usize>,
    a: &WkvPrepArgs,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    if a.c != a.n_head * HEAD_SIZE as u32 {
        return Err(op_err(
            "wkv_prep",
            format!("C = {} is not {HEAD_SIZE} × {} heads", a.c, a.n_head),
        ));
    }
    cx.node(
        "wkv_prep",
        layer,
        &WkvPrepSpec,
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
        let (t, c, nh) = (3usize, 128usize, 2u32);
        let h = Harness::new(Dims {
            n_tokens: t as u32,
            ..Default::default()
        });
        let n = t * c;
        // regions: k v a w vmix vfirst kk
        let k = rand_vec(31, n, 1.0);
        let v = rand_vec(32, n, 1.0);
        let a: Vec<f32> = rand_vec(33, n, 1.0).iter().map(|x| 0.5 + 0.5 * x).collect();
        let w = rand_vec(34, n, 3.0);
        let vmix: Vec<f32> = rand_vec(35, n, 1.0).iter().map(|x| 0.5 + 0.5 * x).collect();
        let vfirst = rand_vec(36, n, 1.0);
        let vecs = rand_vec(37, 2 * c, 1.0);
        for layer0 in [1u32, 0] {
            let mut act = [
                k.clone(),
                v.clone(),
                a.clone(),
                w.clone(),
                vmix.clone(),
                vfirst.clone(),
            ]
            .concat();
            act.extend(vec![0.0; n]);
            let act_buf = h.f32_buf(&act);
            let args = WkvPrepArgs {
                c: c as u32,
                n_head: nh,
                layer0,
                k_off: 0,
                v_off: n as u32,
                a_off: 2 * n as u32,
                w_off: 3 * n as u32,
                vmix_off: 4 * n as u32,
                vfirst_off: 5 * n as u32,
                kk_off: 6 * n as u32,
                kk_w_off: 0,
                ka_off: c as u32,
            };
            let node = wkv_prep(&h.ctx(), None, &args, &h.f32_buf(&vecs), &act_buf).unwrap();
            h.run(&[node]);
            let got = h.read(&act_buf, 0, 7 * n);
            for ti in 0..t {
                for hd in 0..nh as usize {
                    let ch = |i: usize| ti * c + hd * 64 + i;
                    let kkv: Vec<f32> = (0..64).map(|i| k[ch(i)] * vecs[hd * 64 + i]).collect();
                    let norm = kkv.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    for i in 0..64 {
                        let j = ch(i);
                        let want_kk = kkv[i] / norm;
                        let want_k = k[j] * (1.0 + (a[j] - 1.0) * vecs[c + hd * 64 + i]);
                        let want_v = if layer0 == 1 {
                            v[j]
                        } else {
                            v[j] + (vfirst[j] - v[j]) * vmix[j]
                        };
                        // e^-0.5 as RWKV_x070 writes it: an independent check of DECAY_SCALE.
                        let want_w = (-0.606531f32 * (1.0 / (1.0 + (-w[j]).exp()))).exp();
                        assert!((got[6 * n + j] - want_kk).abs() < 1e-5);
                        assert!((got[j] - want_k).abs() < 1e-5);
                        assert!((got[n + j] - want_v).abs() < 1e-5);
                        assert!((got[3 * n + j] - want_w).abs() < 1e-5);
                        if layer0 == 1 {
                            assert_eq!(got[5 * n + j], v[j], "layer 0 stores v_first");
                        }
                    }
                }
            }
        }
    }
}
