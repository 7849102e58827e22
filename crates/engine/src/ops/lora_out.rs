//! The active adapters' first products `h = s · A x` computed by the kernel that produces
//! x, for decode passes (`shaders/lora_out/`), in place of a dispatch of their own
//! (≈ 5 µs a token per block on an H100, most of it the dispatch): the channel-mix
//! `ln_shift` (K: extra workgroups each write whole rows of h as f32), `wkv_fused` (O) and
//! the channel-mix key's `matvec` (V), whose workgroups each hold a partial of every row
//! and add it in fixed point — two i32 atomics per value, so the sums are the same bits
//! whatever order the workgroups run in. The consumer (`matvec` with `LORA = 2`,
//! `shaders/lora_fixed.wgsl`) reads h back as f32. Range: |h| < 2²³, exact to 2⁻²⁵ per
//! partial (f32 rounding of the sum: exact below 2¹⁶).

use crate::error::Result;
use crate::gpu::{buffer, GpuContext};
use crate::ops::{op_err, GpuMatrix};

/// Adapters one fused kernel takes (more: the graph keeps the first product's dispatch).
pub const MAX_ADAPTERS: usize = 4;

/// Rows of h per `ln_shift` LoRA workgroup (one `vec4` workgroup sum).
pub const K_ROWS: usize = 4;

/// Mirrors `struct LoraOut` of `shaders/lora_out/common.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct LoraOutParams {
    h_off: u32,
    h_stride: u32,
    n_in: u32,
    count: u32,
    rank: [u32; 4],
    j0: [u32; 4],
    wg0: [u32; 4],
    scale: [f32; 4],
}

/// The first products a kernel adds and where their h goes.
pub struct LoraOut<'a> {
    /// Per adapter (as [`crate::model::lora::ActiveLoras::firsts`]): `A` `[rank, n_in]`
    /// f16, its scale s and the first column j0 of its h (ascending, the ranks stacked).
    pub firsts: Vec<(&'a GpuMatrix, f32, usize)>,
    /// `act` offset of h and its stride per token (f32 elements): h f32 `[T, h_stride]`
    /// (K), or fixed-point pairs `[T, h_stride / 2, 2]` i32 (O, V; zeroed before the
    /// producer runs).
    pub h_off: usize,
    pub h_stride: usize,
}

impl LoraOut<'_> {
    /// The params for a producer whose x has `n_in` features.
    ///
    /// Errors: no adapter or more than [`MAX_ADAPTERS`], an `A` of another width or not
    /// F16, odd offsets (pairs of halves and of i32 words are read whole).
    pub(crate) fn params(&self, op: &'static str, n_in: usize) -> Result<LoraOutParams> {
        let n = self.firsts.len();
        if n == 0 || n > MAX_ADAPTERS {
            return Err(op_err(
                op,
                format!("{n} adapters; 1 to {MAX_ADAPTERS} fuse"),
            ));
        }
        let mut p = LoraOutParams {
            h_off: self.h_off as u32,
            h_stride: self.h_stride as u32,
            n_in: n_in as u32,
            count: n as u32,
            ..Default::default()
        };
        let mut wg = 0;
        for (i, &(a, s, j0)) in self.firsts.iter().enumerate() {
            if a.n_in != n_in || a.dtype != crate::DType::F16 || n_in % 2 != 0 {
                return Err(op_err(op, format!("{}: not an F16 [r, {n_in}] A", a.name)));
            }
            p.rank[i] = a.n_out as u32;
            p.j0[i] = j0 as u32;
            p.wg0[i] = wg;
            p.scale[i] = s;
            wg += a.n_out.div_ceil(K_ROWS) as u32;
        }
        if self.h_off % 4 != 0 || self.h_stride % 4 != 0 {
            return Err(op_err(op, "LoRA h offset / stride not multiples of 4"));
        }
        Ok(p)
    }

    /// Workgroups of [`K_ROWS`] rows over every adapter (K).
    pub fn row_wgs(&self) -> u32 {
        self.firsts
            .iter()
            .map(|(a, _, _)| a.n_out.div_ceil(K_ROWS) as u32)
            .sum()
    }

    /// The pipeline's specialisation: the params' binding `first`, the adapters, and
    /// whether the activations follow as i32 atomics (fixed point).
    pub(crate) fn spec(&self, first: u32, acc: bool) -> [(&'static str, u32); 3] {
        [
            ("LO", first),
            ("NA", self.firsts.len() as u32),
            ("LACC", u32::from(acc)),
        ]
    }

    /// The params uniform at binding `first`, each adapter's `A` after it and (`acc`) the
    /// activations `act` as the atomics' binding after those.
    pub(crate) fn bind<'b>(
        &'b self,
        gpu: &GpuContext,
        p: &LoraOutParams,
        act: &'b wgpu::Buffer,
        first: u32,
        acc: bool,
    ) -> (wgpu::Buffer, Vec<(u32, wgpu::BindingResource<'b>)>) {
        let u = buffer::uniform(gpu, "lora_out", p);
        let mut res = Vec::new();
        for (i, (a, _, _)) in self.firsts.iter().enumerate() {
            res.push((first + 1 + i as u32, a.binding()));
        }
        if acc {
            res.push((
                first + 1 + self.firsts.len() as u32,
                act.as_entire_binding(),
            ));
        }
        (u, res)
    }
}

/// Whether a kernel with `own` storage bindings can also bind `n` adapters' `A` (and the
/// activations once more for the atomics with `acc`) within the device's limit.
pub fn fits(gpu: &GpuContext, own: u32, n: usize, acc: bool) -> bool {
    let need = own + n as u32 + u32::from(acc);
    (1..=MAX_ADAPTERS).contains(&n) && need <= gpu.limits.max_storage_buffers_per_shader_stage
}

/// The WGSL of `shaders/lora_out/` for a pipeline of `op` with `LO`, `NA`, `LACC`: the
/// params, bindings and helpers (common.wgsl) and the op's producer function; absent,
/// the params as a private zero struct and no-op helpers, so kernels compile their
/// gated code either way, with nothing of it in their pipelines.
pub(crate) fn wgsl(op: &str, lo: Option<u32>, na: Option<u32>, acc: Option<u32>) -> String {
    const SRC: &str = include_str!("../../../../shaders/lora_out/common.wgsl");
    let (common, fixed) = SRC.split_at(SRC.find("// -- fixed point --").unwrap_or(SRC.len()));
    let (first, na) = match (lo, na) {
        (Some(first), Some(na)) if first > 0 => (first, na),
        _ => {
            let mut s = String::from("const LO: u32 = 0u;\nvar<private> lo: LoraOut;\n");
            s.push_str("fn la_pair(a: u32, i: u32) -> vec2<f32> { return vec2<f32>(0.0); }\n");
            s.push_str("fn fx_add(i: u32, v: f32) {}\n");
            s.push_str(match op {
                "matvec" => {
                    "fn lo_rows(li: u32, lane: u32, yv: vec4<f32>, r0: u32, t0: u32, nt: u32) {}\n"
                }
                "wkv_fused" => "fn lo_head(li: u32, i: u32, q: u32, o: f32, h: u32, t: u32) {}\n",
                _ => "",
            });
            return s + common;
        }
    };
    let mut s = format!("@group(0) @binding({first}) var<uniform> lo: LoraOut;\n");
    let mut cases = String::new();
    for a in 0..na {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read> la{a}: array<u32>; // A [rank, n_in] f16\n",
            first + 1 + a
        ));
        cases.push_str(&format!(
            "        case {a}u: {{ return unpack2x16float(la{a}[i]); }}\n"
        ));
    }
    s.push_str(&format!(
        "fn la_pair(a: u32, i: u32) -> vec2<f32> {{\n    switch a {{\n{cases}        default: {{ return vec2<f32>(0.0); }}\n    }}\n}}\n"
    ));
    s.push_str(common);
    if acc == Some(1) {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read_write> lacc: array<atomic<i32>>; // act as i32\n",
            first + 1 + na
        ));
        s.push_str(fixed);
    } else {
        s.push_str("fn fx_add(i: u32, v: f32) {}\n");
    }
    s.push_str(match op {
        "matvec" => include_str!("../../../../shaders/lora_out/matvec.wgsl"),
        "wkv_fused" => include_str!("../../../../shaders/lora_out/wkv_fused.wgsl"),
        _ => "",
    });
    s
}

/// CPU mirror of the producers' fixed point: (hi, lo) words of a partial `p`.
pub fn to_fixed(p: f32) -> (i32, i32) {
    let hi = (p * 256.0).round_ties_even() as i32;
    let lo = ((p - hi as f32 / 256.0) * 16_777_216.0).round_ties_even() as i32;
    (hi, lo)
}

/// CPU mirror of the consumer: h from the summed words.
pub fn from_fixed(hi: i32, lo: i32) -> f32 {
    hi as f32 / 256.0 + lo as f32 / 16_777_216.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::{matmul, matmul_lora_out, Act, LoraArgs, MatmulArgs};
    use crate::ops::testing::*;
    use crate::ops::{Count, Ctx, Dims};
    use crate::DType;

    /// The CPU mirror: partials of both signs, tiny and near ±1e3, come back to within
    /// 2⁻²⁵ plus the f32 rounding of the result.
    #[test]
    fn fixed_point_round_trips() {
        for p in [0.0f32, 1e-9, -3.5e-4, 0.7, -1.0, 999.123, -1000.377, 4095.9] {
            let (hi, lo) = to_fixed(p);
            let back = from_fixed(hi, lo);
            let tol = 2f32.powi(-25) + p.abs() * f32::EPSILON;
            assert!((back - p).abs() <= tol, "{p}: {back} ({hi}, {lo})");
        }
    }

    /// f16 values of `rand_vec` and their bytes.
    fn f16s(seed: u64, n: usize, scale: f32) -> (Vec<f32>, Vec<u8>) {
        let h: Vec<half::f16> = rand_vec(seed, n, scale)
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect();
        (
            h.iter().map(|v| v.to_f32()).collect(),
            bytemuck::cast_slice(&h).to_vec(),
        )
    }

    /// V's path: a product's matrix × vector kernel adds the next product's first products
    /// `h = s · A y` on its outputs (two adapters of ranks 6 and 16 stacked, scales 60 and
    /// −45: h of both signs up to ~2e3) in fixed point, and the next product's kernel reads
    /// them back (`LoraArgs::fixed`) — against f64 on the CPU, for 1, 3 and 6 tokens (the
    /// one-token kernel, one and two rows of 4 tokens), with subgroup sums and without;
    /// the accumulator is the same bits on a second run.
    #[test]
    fn producer_and_consumer_match_the_cpu() {
        let mut plain = (*gpu()).clone();
        plain.features.subgroup = false;
        for g in [gpu(), std::sync::Arc::new(plain)] {
            for t in [1, 3, 6] {
                check(g.clone(), t);
            }
        }
    }

    fn check(gpu: std::sync::Arc<GpuContext>, t: usize) {
        let (n1, k1, n2, k2, r32) = (48, 64, 40, 32, 32);
        let ranks = [(6, 60.0f32, 0), (16, -45.0, 6)];
        let h = Harness::with_gpu(
            Dims {
                n_tokens: t as u32,
                ..Default::default()
            },
            gpu,
        );
        let (w1, w1b) = f16s(90, n1 * k1, 1.0);
        let (w2, w2b) = f16s(91, n2 * k2, 1.0);
        let (b, bb) = f16s(92, n2 * r32, 0.5);
        let x1 = rand_vec(93, t * k1, 1.0);
        let x2 = rand_vec(94, t * k2, 1.0);
        // act: x1 [t, k1] | y1 [t, n1] | x2 [t, k2] | y2 [t, n2] | h [t, r32, 2] i32
        let (y1_off, x2_off) = (t * k1, t * k1 + t * n1);
        let (y2_off, h_off) = (x2_off + t * k2, x2_off + t * k2 + t * n2);
        let mut act = x1.clone();
        act.resize(x2_off, 0.0);
        act.extend(&x2);
        act.resize(h_off + 2 * t * r32, 0.0);
        let upload = |bytes: &[u8], n: usize, k: usize| {
            GpuMatrix::upload(&h.gpu, "m".into(), DType::F16, bytes, n, k).unwrap()
        };
        let (m1, m2) = (upload(&w1b, n1, k1), upload(&w2b, n2, k2));
        let mut a_vals = Vec::new();
        let mut a_mats = Vec::new();
        for (i, &(r, _, _)) in ranks.iter().enumerate() {
            let (a, ab) = f16s(95 + i as u64, r * n1, 1.0);
            a_vals.push(a);
            a_mats.push(upload(&ab, r, n1));
        }
        let lo = LoraOut {
            firsts: ranks
                .iter()
                .zip(&a_mats)
                .map(|(&(_, s, j0), m)| (m, s, j0))
                .collect(),
            h_off,
            h_stride: 2 * r32,
        };
        let lora_buf = crate::gpu::buffer::storage_init(&h.gpu, "B", &bb).unwrap();
        let cx = Ctx {
            lora: Some(&lora_buf),
            ..h.ctx()
        };
        let args = |x_off, k, y_off, n| MatmulArgs {
            x_off,
            x_stride: k,
            y_off,
            y_stride: n,
            act: Act::None,
            accumulate: false,
            add_before_act: false,
            bias_off: None,
            rows: Count::Tokens,
            scale: 1.0,
            lora: None,
        };
        let vecs = h.f32_buf(&[0.0; 4]);
        let a1 = args(0, k1, y1_off, n1);
        let fixed = LoraArgs {
            h_off,
            h_stride: 2 * r32,
            rank: r32,
            b_off: 0,
            fixed: true,
        };
        let a2 = args(x2_off, k2, y2_off, n2).with(fixed);
        let mut words = Vec::new();
        for _ in 0..2 {
            let act_buf = h.f32_buf(&act);
            let p1 = matmul_lora_out(&cx, "v", None, &m1, &vecs, &act_buf, &a1, &lo).unwrap();
            let p2 = matmul(&cx, "o", None, &m2, &vecs, &act_buf, None, &a2).unwrap();
            h.run(&[p1, p2]);
            words.push(h.read(&act_buf, 0, act.len()));
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&words[0]), bits(&words[1]), "T={t}: not the same bits");
        let got = &words[0];
        let y1 = &got[y1_off..y1_off + t * n1];
        for (i, &g) in y1.iter().enumerate() {
            let (ti, o) = (i / n1, i % n1);
            let want: f64 = (0..k1)
                .map(|q| w1[o * k1 + q] as f64 * x1[ti * k1 + q] as f64)
                .sum();
            assert!(
                (g as f64 - want).abs() < 1e-4,
                "T={t}: y1[{i}] {g} vs {want}"
            );
        }
        // h from the GPU's y1 (f64), and the decoded accumulator.
        let mut big = 0f32;
        for ti in 0..t {
            for (&(r, s, j0), a) in ranks.iter().zip(&a_vals) {
                for i in 0..r {
                    let terms = (0..n1).map(|q| a[i * n1 + q] as f64 * y1[ti * n1 + q] as f64);
                    let abs: f64 = terms.clone().map(f64::abs).sum();
                    let want = s as f64 * terms.sum::<f64>();
                    let at = h_off + ti * 2 * r32 + 2 * (j0 + i);
                    let (hi, lo) = (got[at].to_bits() as i32, got[at + 1].to_bits() as i32);
                    let gh = from_fixed(hi, lo);
                    let tol = 1e-6 * s.abs() as f64 * abs + 1e-5;
                    assert!(
                        (gh as f64 - want).abs() < tol,
                        "T={t} token {ti} row {}: h {gh} vs {want}",
                        j0 + i
                    );
                    big = big.max(gh.abs());
                }
            }
        }
        assert!(big > 500.0, "T={t}: h only reaches {big}");
        // y2 = W2 x2 + B h with the CPU's h.
        for ti in 0..t {
            for o in 0..n2 {
                let mut want = (0..k2)
                    .map(|i| w2[o * k2 + i] as f64 * x2[ti * k2 + i] as f64)
                    .sum::<f64>();
                let mut abs = 0f64;
                for (&(r, s, j0), a) in ranks.iter().zip(&a_vals) {
                    for i in 0..r {
                        let hv = s as f64
                            * (0..n1)
                                .map(|q| a[i * n1 + q] as f64 * y1[ti * n1 + q] as f64)
                                .sum::<f64>();
                        want += b[o * r32 + j0 + i] as f64 * hv;
                        abs += (b[o * r32 + j0 + i] as f64 * hv).abs();
                    }
                }
                let g = got[y2_off + ti * n2 + o] as f64;
                assert!(
                    (g - want).abs() < 1e-5 * abs + 1e-3,
                    "T={t} token {ti} out {o}: {g} vs {want}"
                );
            }
        }
    }
}
