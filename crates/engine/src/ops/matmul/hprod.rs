//! One-token matrix × vector products that make their LoRA term's first product
//! themselves (`HPROD = 1`, `shaders/matvec/lora_hprod.wgsl`): `y = act(W x + B h + bias)`
//! with `h = s · A x` computed by the dispatch's first workgroups and read by the others'
//! epilogues, instead of by a dispatch of its own before (the decode step of an adapted
//! output, channel-mix key or value: the input is ready, and `W x` does not need h).

use crate::error::Result;
use crate::gpu::buffer;
use crate::ops::{op_err, Count, Ctx, GpuMatrix, Grid, Node};
use crate::DType;

use super::{matvec_lanes, mv_unroll, row_sum_mode, MatmulArgs, MatvecLora, MatvecSpec, Params};

/// The value of an h slot that holds nothing yet (as the shader's `H_EMPTY`).
const H_EMPTY: u32 = u32::MAX;

/// The first product a one-token product makes itself, and where its h lives.
pub struct HProd<'a> {
    /// The adapter's `A` `[r, K]` f16, K the product's input width (one adapter).
    pub a: &'a GpuMatrix,
    /// The adapter's scale `s`.
    pub scale: f32,
    /// The h sets ([`h_sets`]): u32 slots, `H_EMPTY` where nothing is published.
    pub sync: &'a wgpu::Buffer,
    /// This product's set (u32 offset; as many slots as the term's rank R₃₂).
    pub set: usize,
    /// The set this product empties for the next such product of the pass (u32 offset).
    pub reset: usize,
    /// Polls of an h value before a lane computes it itself (`RWKV_HPROD_SPIN`:
    /// [`crate::gpu::Tuning::hprod_spin`], default
    /// [`crate::gpu::tuning::DEFAULT_HPROD_SPIN`]; 0: every lane that finds nothing
    /// computes its values).
    pub spin: u32,
}

/// A buffer of `slots` h slots, all empty.
///
/// Errors: as [`buffer::storage_init`].
pub fn h_sets(gpu: &crate::gpu::GpuContext, slots: usize) -> Result<wgpu::Buffer> {
    let empty = vec![H_EMPTY; slots.max(4)];
    buffer::storage_init(gpu, "LoRA h sets", bytemuck::cast_slice(&empty))
}

/// Params of the kernel: the product's, then the first product's (mirrored by `Params`
/// of `shaders/matvec/params_hprod.wgsl`).
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct HParams {
    pub(crate) base: Params,
    pub(crate) hp_wgs: u32,
    pub(crate) hp_rows: u32,
    pub(crate) hp_set: u32,
    pub(crate) hp_reset: u32,
    pub(crate) hp_scale: f32,
    pub(crate) hp_spin: u32,
    pub(crate) _p: [u32; 2],
}

/// The one-token node of `m`'s product with arguments `a` (whose LoRA term `a.lora` reads
/// its B block; its h offset is unused) that makes the term's h with `hp`: `R₃₂`
/// workgroups (one h column each; columns past A's rows are 0), then `m`'s rows as
/// `matvec` computes them. Run it only for passes of one token.
///
/// Errors: no LoRA term; `A` not F16, not `[r ≤ R₃₂, K]`; sets outside `hp.sync`;
/// offsets of x not multiples of 4; as `matmul`'s matrix × vector variant otherwise.
#[allow(clippy::too_many_arguments)]
pub fn matvec_hprod(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    m: &GpuMatrix,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    a: &MatmulArgs,
    hp: &HProd,
) -> Result<Node> {
    let Some(term) = a.lora else {
        return Err(op_err(op, format!("{}: no LoRA term to make", m.name)));
    };
    let (scale, lf, lora_buf) = a.lora_fields(cx, op, m)?;
    let Some(lora_buf) = lora_buf else {
        return Err(op_err(op, format!("{}: no LoRA weights", m.name)));
    };
    let width = term.rank;
    let slots = (hp.sync.size() / 4) as usize;
    let fits = |at: usize| at + width <= slots;
    if hp.a.dtype != DType::F16
        || hp.a.n_in != m.n_in
        || hp.a.n_out > width
        || hp.a.row0 != 0
        || !fits(hp.set)
        || !fits(hp.reset)
        || hp.reset == hp.set
    {
        return Err(op_err(
            op,
            format!(
                "{}: first product {} ({} × {}, {}) does not fit a term of rank {width} \
                 with sets at {} / {} of {slots}",
                m.name, hp.a.name, hp.a.n_out, hp.a.n_in, hp.a.dtype, hp.set, hp.reset
            ),
        ));
    }
    if m.n_in % 32 != 0 || a.x_off % 4 != 0 || a.x_stride % 4 != 0 || a.rows != Count::Tokens {
        return Err(op_err(
            op,
            format!("{}: unsupported product for a one-token kernel", m.name),
        ));
    }
    let p = HParams {
        base: Params::of(m, a, scale, lf, 1),
        hp_wgs: width as u32,
        hp_rows: hp.a.n_out as u32,
        hp_set: hp.set as u32,
        hp_reset: hp.reset as u32,
        hp_scale: hp.scale,
        hp_spin: hp.spin,
        _p: [0; 2],
    };
    let lanes = matvec_lanes(&cx.gpu.tuning, m);
    let spec = MatvecSpec {
        dtype: m.dtype,
        logits: false,
        lanes,
        row_sum: row_sum_mode(cx, lanes),
        one_token: true,
        lora: MatvecLora::MakesH,
        unroll: mv_unroll(&cx.gpu.tuning, m.dtype),
        wide: false,
        q8k: 0,
        rows: 1,
        q8_pair: false,
        wide_q8: 0,
        ln: super::LnEnd::None,
        x8: super::Q8Handoff::None,
    };
    let res = vec![
        (2, m.binding()),
        (3, vecs.as_entire_binding()),
        (4, act.as_entire_binding()),
        (5, m.binding()),
        (7, lora_buf.as_entire_binding()),
        (8, hp.a.binding()),
        (9, hp.sync.as_entire_binding()),
    ];
    let grid = Grid::Tiles {
        x: width as u32 + (m.n_out as u32).div_ceil(256 / lanes),
        count: Count::Tokens,
        per_y: 4,
    };
    cx.node_at(op, layer, &spec, &p, res, grid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::{Act, LoraArgs};
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// Two such products in one pass, sharing a set buffer (each empties the other's
    /// set), for F16 and Q4_K weights, run for three passes with a new x each: every pass
    /// gives `act(scale · (W x + B (s A x)) + bias)` (+ y), A of rank 24 under a term of 32
    /// columns (B's columns past A's rows must see h = 0). A set left holding the pass
    /// before's h (no emptying) would give the old x's term; the sets are checked after
    /// each pass (product 0's empty, product 1's holding its h). Then with `spin = 0`
    /// (lanes that find nothing compute h themselves).
    #[test]
    fn makes_its_own_h_pass_after_pass() {
        for spin in [crate::gpu::tuning::DEFAULT_HPROD_SPIN, 0] {
            for dtype in [DType::F16, DType::Q4_K] {
                passes(dtype, spin);
            }
        }
    }

    fn passes(dtype: DType, spin: u32) {
        let (n, k, r, width) = (200, 256, 24, 32);
        let h = Harness::new(Dims {
            n_tokens: 1,
            ..Default::default()
        });
        let encode = |seed: u64| -> (Vec<u8>, Vec<f32>) {
            let w = rand_vec(seed, n * k, 0.3);
            let bytes: Vec<u8> = match dtype {
                DType::Q4_K => bytemuck::cast_slice(&crate::quant::quantize_q4_k(&w)).to_vec(),
                _ => bytemuck::cast_slice(&crate::quant::quantize_f16(&w)).to_vec(),
            };
            let wd = crate::quant::dequantize_to_vec(dtype, &bytes, n * k).unwrap();
            (bytes, wd)
        };
        let half_up = |v: &[f32]| -> (Vec<half::f16>, Vec<f32>) {
            let q: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
            let d = q.iter().map(|x| x.to_f32()).collect();
            (q, d)
        };
        // Two products: (W, A, B, scale s, activation, residual add).
        let mut prods = Vec::new();
        for (i, (act_fn, acc)) in [(Act::ReluSq, false), (Act::None, true)]
            .into_iter()
            .enumerate()
        {
            let seed = 100 + 10 * i as u64;
            let (wb, wd) = encode(seed);
            let (a16, a) = half_up(&rand_vec(seed + 1, r * k, 0.2));
            let (b16, b) = half_up(&rand_vec(seed + 2, n * width, 0.5));
            let s = 0.75 + i as f32;
            prods.push((wb, wd, a16, a, b16, b, s, act_fn, acc));
        }
        // act: x [k] at 0, then each product's y [n].
        let y_at = |i: usize| k + i * n;
        let y0 = rand_vec(7, 2 * n, 1.0);
        let act_buf = h.f32_buf(&[vec![0.0; k], y0.clone()].concat());
        let bias = rand_vec(8, n, 0.5);
        let bias_buf = h.f32_buf(&bias);
        // Both B blocks in one buffer: product i's at i · n · width halves.
        let b_all: Vec<half::f16> = prods.iter().flat_map(|p| p.4.clone()).collect();
        let lora_buf = buffer::storage_init(&h.gpu, "lora", bytemuck::cast_slice(&b_all)).unwrap();
        let cx = Ctx {
            lora: Some(&lora_buf),
            ..h.ctx()
        };
        let sync = h_sets(&h.gpu, 2 * width).unwrap();
        let mut nodes = Vec::new();
        let mut mats = Vec::new();
        for (i, p) in prods.iter().enumerate() {
            let m = GpuMatrix::upload(&h.gpu, format!("W{i}"), dtype, &p.0, n, k).unwrap();
            let a = GpuMatrix::upload(
                &h.gpu,
                format!("A{i}"),
                DType::F16,
                bytemuck::cast_slice(&p.2),
                r,
                k,
            )
            .unwrap();
            mats.push((m, a));
        }
        for (i, (p, (m, a))) in prods.iter().zip(&mats).enumerate() {
            let args = MatmulArgs {
                x_off: 0,
                x_stride: k,
                y_off: y_at(i),
                y_stride: n,
                act: p.7,
                accumulate: p.8,
                add_before_act: false,
                bias_off: Some(0),
                rows: Count::Tokens,
                scale: 0.5,
                lora: Some(LoraArgs {
                    h_off: 0,
                    h_stride: width,
                    rank: width,
                    b_off: i * n * width,
                }),
            };
            let hp = HProd {
                a,
                scale: p.6,
                sync: &sync,
                set: i * width,
                reset: (1 - i) * width,
                spin,
            };
            nodes.push(
                matvec_hprod(&cx, "hprod", None, m, &bias_buf, &act_buf, &args, &hp).unwrap(),
            );
        }
        let mut y = y0;
        for pass in 0..3u64 {
            let x = rand_vec(20 + pass, k, 1.0);
            h.gpu
                .queue
                .write_buffer(&act_buf, 0, bytemuck::cast_slice(&x));
            h.run(&nodes);
            // Product 1 emptied product 0's set and published its own h.
            let sets = h.read(&sync, 0, 2 * width);
            assert!(
                sets[..width].iter().all(|v| v.to_bits() == H_EMPTY),
                "{dtype} pass {pass}: product 0's set not emptied"
            );
            let p1 = &prods[1];
            for (j, v) in sets[width..].iter().enumerate() {
                let want = match j < r {
                    true => p1.6 * (0..k).map(|c| p1.3[j * k + c] * x[c]).sum::<f32>(),
                    false => 0.0,
                };
                assert!(
                    (v - want).abs() < 1e-3,
                    "{dtype} pass {pass}: h[{j}] {v} vs {want}"
                );
            }
            for (i, p) in prods.iter().enumerate() {
                let (wd, a, b, s) = (&p.1, &p.3, &p.5, p.6 as f64);
                let hv: Vec<f64> = (0..width)
                    .map(|j| match j < r {
                        true => {
                            s * (0..k)
                                .map(|c| a[j * k + c] as f64 * x[c] as f64)
                                .sum::<f64>()
                        }
                        false => 0.0,
                    })
                    .collect();
                let got = h.read(&act_buf, y_at(i), n);
                for o in 0..n {
                    let wx: f64 = (0..k).map(|c| wd[o * k + c] as f64 * x[c] as f64).sum();
                    let bh: f64 = (0..width).map(|j| b[o * width + j] as f64 * hv[j]).sum();
                    let v = ((wx + bh) * 0.5) as f32 + bias[o];
                    let v = match p.7 {
                        Act::ReluSq => v.max(0.0).powi(2),
                        _ => v,
                    };
                    let want = v + if p.8 { y[i * n + o] } else { 0.0 };
                    let err = (got[o] - want).abs();
                    assert!(
                        err < 2e-3 * (1.0 + want.abs()),
                        "{dtype} spin {spin} pass {pass} product {i} row {o}: {} vs {want}",
                        got[o]
                    );
                    y[i * n + o] = got[o];
                }
            }
        }
    }
}
