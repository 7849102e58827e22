//! The WKV-7 recurrence (`shaders/wkv.wgsl`), sequential over each sequence's tokens,
//! one workgroup per (head, sequence), state in f32.

use crate::config::HEAD_SIZE;
use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{op_err, Ctx, Grid, Node, COMMON};

/// The `wkv` scan: `tpr` threads per row of S (1, or a power of two up to 16 that
/// subgroups hold), `rows` rows of S per workgroup (8, 16, 32 or 64; at most 256 / `tpr`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WkvSpec {
    pub tpr: u32,
    pub rows: u32,
}

impl KernelSpec for WkvSpec {
    fn label(&self) -> String {
        "wkv".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .u32("HEAD_SIZE", HEAD_SIZE as u32)
            .u32("TPR", self.tpr)
            .u32("RB", self.rows)
            .file(COMMON)
            .file(shader!("seq_meta.wgsl"))
            .file(tpr_sum(self.tpr))
            .file(shader!("wkv.wgsl"))
            .build())
    }
}

/// The sum over the `tpr` threads of a row of S (`wkv`, `wkv_fused`): subgroup shuffles,
/// or the value itself for one thread a row.
pub(crate) fn tpr_sum(tpr: u32) -> &'static str {
    match tpr {
        1 => shader!("wkv/tpr_sum_one.wgsl"),
        _ => shader!("wkv/tpr_sum_sg.wgsl"),
    }
}

/// The kernel's parameters, mirrored by `Params` of `shaders/wkv.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct WkvArgs {
    pub c: u32,
    pub r_off: u32,
    pub w_off: u32,
    pub k_off: u32,
    pub v_off: u32,
    pub kk_off: u32,
    pub a_off: u32,
    pub y_off: u32,
    /// Offset of this layer's `S [H, 64, 64]` inside a state slot; slot length (f32).
    pub state_off: u32,
    pub slot_len: u32,
    pub _p: [u32; 2],
}

impl WkvArgs {
    /// r, w, k, v, kk, a and y as seven consecutive `[T, C]` regions of `n = T × C` f32
    /// from offset 0 (tests, the kernel microbenchmark); S at `state_off` of slots of
    /// `slot_len` f32.
    pub fn consecutive(c: usize, n: usize, state_off: usize, slot_len: usize) -> Self {
        WkvArgs {
            c: c as u32,
            r_off: 0,
            w_off: n as u32,
            k_off: 2 * n as u32,
            v_off: 3 * n as u32,
            kk_off: 4 * n as u32,
            a_off: 5 * n as u32,
            y_off: 6 * n as u32,
            state_off: state_off as u32,
            slot_len: slot_len as u32,
            _p: [0; 2],
        }
    }
}

/// Threads per row of S: `want` where subgroups hold that many (the per-token step is
/// issue-bound in few warps: fewer columns a thread, more threads), else 4, else one.
/// The prefill scan takes 16 (H100, 2.9B at 512 tokens, 16 rows a workgroup, with the
/// chunk prefetch: 8.2 ms for 32 layers with 4, 8.7 with 8, 6.2 with 16); the fused
/// decode kernel 4 (one workgroup a head). `RWKV_WKV_TPR` (1, 2, 4, 8 or 16; more than 1
/// only where subgroups hold them; [`crate::gpu::Tuning::wkv_tpr`]) overrides both
/// (tuning runs).
pub fn threads_per_row(cx: &Ctx, want: u32) -> u32 {
    let f = &cx.gpu.features;
    let fits = |t: u32| t == 1 || (f.subgroup && f.subgroup_min_size >= t);
    let forced = cx.gpu.tuning.wkv_tpr.filter(|t| fits(*t));
    forced.unwrap_or(if fits(want) {
        want
    } else if fits(4) {
        4
    } else {
        1
    })
}

/// Rows of S per workgroup: a head's 64 rows split over 64 / RB workgroups so that a
/// pass of one sequence still spreads over many SMs. H100, 512 tokens (`rwkv kernels`):
/// 16 rows beat 8 and 64 for both 12 and 40 heads (12 heads: 190 µs against 223 and
/// 395; 40 heads: 279 against 605 and 404; 4 threads a row). `RWKV_WKV_ROWS` (8, 16, 32
/// or 64, at most 256 / threads a row; [`crate::gpu::Tuning::wkv_rows`]) overrides it for
/// tuning runs.
pub fn rows_per_workgroup(tuning: &crate::gpu::Tuning) -> u32 {
    tuning.wkv_rows.unwrap_or(16)
}

/// `S = S diag(w) + (S(-kk))(kk·a)^T + v k^T; y = S r` per head, over each sequence's
/// tokens in order; S read from and written back to the sequence's state slot.
pub fn wkv(
    cx: &Ctx,
    layer: Option<usize>,
    a: &WkvArgs,
    meta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    let tpr = threads_per_row(cx, 16);
    // One thread a row (no subgroups): a head's rows in one workgroup, so each thread
    // prefetches 4 elements of a chunk, not 16 (registers).
    let rb = if tpr == 1 {
        HEAD_SIZE as u32
    } else {
        rows_per_workgroup(&cx.gpu.tuning)
    };
    wkv_rows(cx, layer, a, meta, state, act, rb, tpr)
}

/// [`wkv`] with `rb` rows of S per workgroup (8, 16, 32 or 64; at most 256 / `tpr`) and
/// `tpr` threads per row (1, or a power of two up to 16 that subgroups hold).
#[allow(clippy::too_many_arguments)]
fn wkv_rows(
    cx: &Ctx,
    layer: Option<usize>,
    a: &WkvArgs,
    meta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    act: &wgpu::Buffer,
    rb: u32,
    tpr: u32,
) -> Result<Node> {
    let n = HEAD_SIZE as u32;
    if a.c % n != 0 {
        return Err(op_err(
            "wkv",
            format!("C = {} is not a multiple of the head size {n}", a.c),
        ));
    }
    // At most 256 threads a workgroup (the chunk copy gives each at least one element).
    let rb = rb.min(256 / tpr.max(1));
    let offsets = [
        a.r_off,
        a.w_off,
        a.k_off,
        a.v_off,
        a.kk_off,
        a.a_off,
        a.y_off,
        a.state_off,
        a.slot_len,
    ];
    if offsets.iter().any(|o| o % 4 != 0) {
        return Err(op_err(
            "wkv",
            "offsets must be multiples of 4 (vec4 access)",
        ));
    }
    let spec = WkvSpec { tpr, rows: rb };
    cx.node(
        "wkv",
        layer,
        &spec,
        a,
        &[meta, state, act],
        Grid::Tiles {
            x: a.c / n * (n / rb),
            count: crate::ops::Count::Seqs,
            per_y: 1,
        },
    )
}

/// CPU reference for one head of N = [`HEAD_SIZE`]: updates `s [N*N]` (`S[i][j]` at
/// `i*N+j`) and returns y `[N]`.
pub fn reference_step(
    s: &mut [f32],
    r: &[f32],
    w: &[f32],
    k: &[f32],
    v: &[f32],
    kk: &[f32],
    a: &[f32],
) -> Vec<f32> {
    const N: usize = HEAD_SIZE;
    let mut y = vec![0f32; N];
    for i in 0..N {
        let sa: f32 = -(0..N).map(|j| s[i * N + j] * kk[j]).sum::<f32>();
        for j in 0..N {
            s[i * N + j] = s[i * N + j] * w[j] + sa * kk[j] * a[j] + v[i] * k[j];
            y[i] += s[i * N + j] * r[j];
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// Two sequences (lengths 19 and 2) in slots 1 and 0, two heads, random initial state;
    /// with subgroups (4, 8 and 16 threads per row of S, where the subgroups hold them)
    /// and without (1), a head's rows in one workgroup and split over four and eight.
    #[test]
    fn matches_cpu_reference() {
        let mut plain = (*gpu()).clone();
        plain.features.subgroup = false;
        let plain = std::sync::Arc::new(plain);
        let f = &gpu().features;
        for rb in [64, 16, 8] {
            for tpr in [4, 8, 16] {
                if f.subgroup && f.subgroup_min_size >= tpr {
                    check_on(gpu(), rb, tpr);
                }
            }
            check_on(plain.clone(), rb, 1);
        }
    }

    fn check_on(gpu: std::sync::Arc<crate::gpu::GpuContext>, rb: u32, tpr: u32) {
        // The first sequence spans two chunks of the kernel (CH = 16 tokens).
        let (l0, l1) = (19usize, 2usize);
        let (c, t) = (128usize, l0 + l1);
        let n = t * c;
        let meta = [0u32, l0 as u32, 1, 0, l0 as u32, l1 as u32, 0, 0];
        let h = Harness::with_gpu(
            Dims {
                n_tokens: t as u32,
                n_seqs: 2,
                off_seqs: 0,
                ..Default::default()
            },
            gpu,
        );
        let r = rand_vec(60, n, 1.0);
        let w: Vec<f32> = rand_vec(61, n, 1.0)
            .iter()
            .map(|x| 0.6 + 0.39 * x)
            .collect();
        let k = rand_vec(62, n, 0.5);
        let v = rand_vec(63, n, 1.0);
        let kk: Vec<f32> = {
            let raw = rand_vec(64, n, 1.0);
            raw.chunks(64)
                .flat_map(|h| {
                    let norm = h.iter().map(|x| x * x).sum::<f32>().sqrt();
                    h.iter().map(move |x| x / norm).collect::<Vec<_>>()
                })
                .collect()
        };
        let a: Vec<f32> = rand_vec(65, n, 1.0).iter().map(|x| 0.5 + 0.5 * x).collect();
        let mut act = [
            r.clone(),
            w.clone(),
            k.clone(),
            v.clone(),
            kk.clone(),
            a.clone(),
        ]
        .concat();
        act.extend(vec![0.0; n]);
        let act_buf = h.f32_buf(&act);
        let slot_len = 2 * 64 * 64 + 16;
        let state0 = rand_vec(66, 2 * slot_len, 0.3);
        let state_buf = h.f32_buf(&state0);
        let args = WkvArgs::consecutive(c, n, 16, slot_len);
        let node = wkv_rows(
            &h.ctx(),
            None,
            &args,
            &h.u32_buf(&meta),
            &state_buf,
            &act_buf,
            rb,
            tpr,
        )
        .unwrap();
        h.run(&[node]);
        let y = h.read(&act_buf, 6 * n, n);
        let st = h.read(&state_buf, 0, 2 * slot_len);
        let mut want_state = state0.clone();
        for (start, len, slot) in [(0usize, l0, 1usize), (l0, l1, 0)] {
            for hd in 0..2 {
                let sb = slot * slot_len + 16 + hd * 4096;
                let s = &mut want_state[sb..sb + 4096];
                for ti in start..start + len {
                    let o = ti * c + hd * 64;
                    let sl = |x: &[f32]| x[o..o + 64].to_vec();
                    let want_y =
                        reference_step(s, &sl(&r), &sl(&w), &sl(&k), &sl(&v), &sl(&kk), &sl(&a));
                    // Recurrence in f32 on both sides, differing summation order only.
                    assert!(
                        max_abs(&y[o..o + 64], &want_y) < 1e-4,
                        "token {ti} head {hd} rb {rb} tpr {tpr}"
                    );
                }
            }
        }
        assert!(max_abs(&st, &want_state) < 1e-4, "state, rb {rb} tpr {tpr}");
    }
}
