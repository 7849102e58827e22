//! `wkv_prep` → `wkv` → `wkv_out` in one dispatch (`shaders/wkv_fused_staged.wgsl`, or
//! `shaders/wkv_fused.wgsl` with `RWKV_WKV_STAGED=0`), for passes whose sequences have few
//! tokens (decode steps of any batch), where the time mix is bound by dispatches and the
//! state's traffic, not arithmetic.

use crate::config::{DECAY_SCALE, HEAD_SIZE};
use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::wkv::tpr_sum;
use crate::ops::{op_err, Ctx, Grid, Node, COMMON};

/// The `wkv_fused` kernel: `tpr` threads per row of S (as `wkv`'s); `staged`: each token's
/// per-channel values computed once a workgroup into workgroup memory
/// (`shaders/wkv_fused_staged.wgsl`) instead of by every row's threads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WkvFusedSpec {
    pub tpr: u32,
    pub staged: bool,
}

impl KernelSpec for WkvFusedSpec {
    fn label(&self) -> String {
        "wkv_fused".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .u32("HEAD_SIZE", HEAD_SIZE as u32)
            .f32("DECAY_SCALE", DECAY_SCALE)
            .u32("TPR", self.tpr)
            .file(COMMON)
            .file(shader!("seq_meta.wgsl"))
            .file(tpr_sum(self.tpr))
            .file(shader!("wkv_fused/params.wgsl"))
            .file(if self.staged {
                shader!("wkv_fused_staged.wgsl")
            } else {
                shader!("wkv_fused.wgsl")
            })
            .build())
    }
}

/// The kernel's parameters, mirrored by `Params` of `shaders/wkv_fused/params.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct WkvFusedArgs {
    pub c: u32,
    /// 1 in layer 0 (writes v_first), else 0 (mixes v with v_first).
    pub layer0: u32,
    /// `act` offsets `[T, C]`: r; raw w, k, v (as the matrix products leave them);
    /// σ(a), g, σ(v mix); v_first; the output o.
    pub r_off: u32,
    pub w_off: u32,
    pub k_off: u32,
    pub v_off: u32,
    pub a_off: u32,
    pub g_off: u32,
    pub vmix_off: u32,
    pub vfirst_off: u32,
    pub o_off: u32,
    /// `vecs` offsets of k_k, k_a, r_k `[C]` and the ln_x weight (bias at + C).
    pub kkw_off: u32,
    pub ka_off: u32,
    pub rk_off: u32,
    pub lnx_off: u32,
    /// Offset of this layer's `S [H, 64, 64]` inside a state slot; slot length (f32).
    pub state_off: u32,
    pub slot_len: u32,
    /// GroupNorm eps (64e-5, RWKV_x070 `ln_x`).
    pub eps: f32,
    pub _p: [u32; 2],
}

/// The time mix from the WKV inputs to `o` for every sequence of the pass, token by
/// token; S read from and written back to each sequence's slot.
///
/// Errors: C not a multiple of the head size ([`HEAD_SIZE`]), offsets not multiples of 4.
pub fn wkv_fused(
    cx: &Ctx,
    layer: Option<usize>,
    a: &WkvFusedArgs,
    meta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    act: &wgpu::Buffer,
    vecs: &wgpu::Buffer,
) -> Result<Node> {
    let n = HEAD_SIZE as u32;
    if a.c % n != 0 {
        return Err(op_err(
            "wkv_fused",
            format!("C = {} is not a multiple of the head size {n}", a.c),
        ));
    }
    let offsets = [
        a.r_off,
        a.w_off,
        a.k_off,
        a.v_off,
        a.a_off,
        a.g_off,
        a.vmix_off,
        a.vfirst_off,
        a.o_off,
        a.kkw_off,
        a.ka_off,
        a.rk_off,
        a.lnx_off,
        a.state_off,
        a.slot_len,
    ];
    if offsets.iter().any(|o| o % 4 != 0) {
        return Err(op_err(
            "wkv_fused",
            "offsets must be multiples of 4 (vec4 access)",
        ));
    }
    let spec = WkvFusedSpec {
        tpr: crate::ops::wkv::threads_per_row(cx, 4),
        staged: cx.gpu.tuning.wkv_staged,
    };
    cx.node(
        "wkv_fused",
        layer,
        &spec,
        a,
        &[meta, state, act, vecs],
        Grid::Tiles {
            x: a.c / n,
            count: crate::ops::Count::Seqs,
            per_y: 1,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::wkv::{wkv, WkvArgs};
    use crate::ops::wkv_out::{wkv_out, WkvOutArgs};
    use crate::ops::wkv_prep::{wkv_prep, WkvPrepArgs};
    use crate::ops::Dims;

    /// Same outputs, states and v_first as the three-op chain, in layer 0 and a later
    /// layer, for two sequences (2 and 1 tokens), with and without subgroups, staged and
    /// not.
    #[test]
    fn matches_prep_wkv_out_chain() {
        for staged in [false, true] {
            let mut sub = (*gpu()).clone();
            sub.tuning.wkv_staged = staged;
            let mut plain = sub.clone();
            plain.features.subgroup = false;
            for g in [std::sync::Arc::new(sub), std::sync::Arc::new(plain)] {
                for layer0 in [1, 0] {
                    check(g.clone(), layer0);
                }
            }
        }
    }

    fn check(gpu: std::sync::Arc<crate::gpu::GpuContext>, layer0: u32) {
        let (c, t) = (128usize, 3usize);
        let n = (t * c) as u32;
        // seqs: (start, len, slot, 0); per-token seq/pos for the per-token ops.
        let seqs = [0u32, 2, 1, 0, 2, 1, 0, 0];
        let h = Harness::with_gpu(
            Dims {
                n_tokens: t as u32,
                n_seqs: 2,
                off_seqs: 0,
                ..Default::default()
            },
            gpu,
        );
        // act regions: r w k v a g vmix vfirst | kk y o (chain) | o (fused)
        let mut act = Vec::new();
        for (i, scale) in [1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0].iter().enumerate() {
            act.extend(rand_vec(70 + i as u64, t * c, *scale));
        }
        let a_at = 4 * t * c;
        for v in &mut act[a_at..a_at + 2 * t * c] {
            *v = 0.5 + 0.5 * *v; // σ(a), g in (0, 1)
        }
        act.extend(vec![0.0; 4 * t * c]);
        let vecs = rand_vec(80, 6 * c, 1.0); // k_k k_a r_k lnx_w lnx_b (+ spare)
        let slot_len = 2 * 64 * 64 + 16;
        let state0 = rand_vec(81, 2 * slot_len, 0.3);
        let off = |i: u32| i * n;
        let vecs_buf = h.f32_buf(&vecs);
        let meta = h.u32_buf(&seqs);

        // The chain.
        let act_a = h.f32_buf(&act);
        let state_a = h.f32_buf(&state0);
        let prep = WkvPrepArgs {
            c: c as u32,
            n_head: 2,
            layer0,
            k_off: off(2),
            v_off: off(3),
            a_off: off(4),
            w_off: off(1),
            vmix_off: off(6),
            vfirst_off: off(7),
            kk_off: off(8),
            kk_w_off: 0,
            ka_off: c as u32,
        };
        let core = WkvArgs {
            c: c as u32,
            r_off: 0,
            w_off: off(1),
            k_off: off(2),
            v_off: off(3),
            kk_off: off(8),
            a_off: off(4),
            y_off: off(9),
            state_off: 16,
            slot_len: slot_len as u32,
            _p: [0; 2],
        };
        let out = WkvOutArgs {
            c: c as u32,
            n_head: 2,
            y_off: off(9),
            r_off: 0,
            k_off: off(2),
            v_off: off(3),
            g_off: off(5),
            o_off: off(10),
            rk_off: 2 * c as u32,
            lnx_off: 3 * c as u32,
            eps: crate::config::GN_EPS,
            _p: 0,
        };
        let cx = h.ctx();
        let nodes = [
            wkv_prep(&cx, None, &prep, &vecs_buf, &act_a).unwrap(),
            wkv(&cx, None, &core, &meta, &state_a, &act_a).unwrap(),
            wkv_out(&cx, None, &out, &vecs_buf, &act_a).unwrap(),
        ];
        h.run(&nodes);

        // Fused.
        let act_b = h.f32_buf(&act);
        let state_b = h.f32_buf(&state0);
        let fused = WkvFusedArgs {
            c: c as u32,
            layer0,
            r_off: 0,
            w_off: off(1),
            k_off: off(2),
            v_off: off(3),
            a_off: off(4),
            g_off: off(5),
            vmix_off: off(6),
            vfirst_off: off(7),
            o_off: off(11),
            kkw_off: 0,
            ka_off: c as u32,
            rk_off: 2 * c as u32,
            lnx_off: 3 * c as u32,
            state_off: 16,
            slot_len: slot_len as u32,
            eps: crate::config::GN_EPS,
            _p: [0; 2],
        };
        let node = wkv_fused(&cx, None, &fused, &meta, &state_b, &act_b, &vecs_buf).unwrap();
        h.run(&[node]);

        let n = n as usize;
        let o_a = h.read(&act_a, 10 * n, n);
        let o_b = h.read(&act_b, 11 * n, n);
        let err = max_abs(&o_a, &o_b);
        assert!(err < 1e-4, "layer0={layer0}: o differs by {err}");
        let vf_a = h.read(&act_a, 7 * n, n);
        let vf_b = h.read(&act_b, 7 * n, n);
        assert!(
            max_abs(&vf_a, &vf_b) < 1e-6,
            "layer0={layer0}: v_first differs"
        );
        let s_a = h.read(&state_a, 0, 2 * slot_len);
        let s_b = h.read(&state_b, 0, 2 * slot_len);
        let err = max_abs(&s_a, &s_b);
        assert!(err < 1e-4, "layer0={layer0}: state differs by {err}");
        assert!(o_a.iter().any(|v| *v != 0.0), "the chain wrote no output");
    }
}
