//! Matrix × vector for passes of few tokens (`shaders/matvec.wgsl`, decode): LANES lanes a
//! row, each taking steps of a few words of weights (`shaders/matvec/<encoding>.wgsl`),
//! summed by `row_sum`; up to 4 tokens a workgroup, or exactly one (NT1). Also the
//! choices `matvec_group` shares: lanes per row and how a row's lanes are summed.

use super::{head_lanes, matvec_step, mv_unroll, numbered, MatmulArgs, Operands, Params, SMALL_T};
use crate::error::Result;
use crate::format::DType;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::decode::with_decode;
use crate::ops::{op_err, Ctx, GpuMatrix, Grid, Node, Small, COMMON};

use super::q8::{q8_pays, q8_rows, wide_q8_lanes, wide_q8_pays};

/// The step snippet of a `matvec` / `matvec_group` kernel and its prologue: with 8-bit x
/// (`q8k` ≠ 0) Q4_K's 16-value or, with `q8_pair`, 64-value 8-bit step, or Q6_K's
/// (`shaders/matvec/q6_k_q8.wgsl`), and the prologue that quantizes x ([`prologue_file`]
/// for row sums `row_sum` of `lanes` lanes); else the encoding's own step ([`step_file`])
/// and no prologue.
pub(crate) fn step_files(
    dtype: DType,
    q8k: u32,
    q8_pair: bool,
    row_sum: RowSum,
    lanes: u32,
) -> (&'static str, String) {
    if q8k == 0 {
        return (
            step_file(dtype),
            shader!("matvec/prologue_none.wgsl").into(),
        );
    }
    let step = match (dtype, q8_pair) {
        (DType::Q6_K, _) => shader!("matvec/q6_k_q8.wgsl"),
        (_, false) => concat!(
            shader!("matvec/q4_k_pair.wgsl"),
            shader!("matvec/q4_k_q8.wgsl")
        ),
        (_, true) => shader!("matvec/q4_k_q8_pair.wgsl"),
    };
    (step, prologue_file(row_sum, lanes))
}

/// The prologue that quantizes x to 8 bits: with subgroup shuffles, a vec4 of x a
/// thread (`shaders/matvec/q4_k_q8_x_sg.wgsl`), where the kernel's row sums already use
/// subgroups of at least `lanes` ≥ 8 invocations (so the 8 threads of a run of 32 share
/// one); else a run a thread through workgroup memory (`q4_k_q8_x.wgsl`). Both give the
/// same bits.
pub(crate) fn prologue_file(row_sum: RowSum, lanes: u32) -> String {
    if shuffle_prologue(row_sum, lanes) {
        format!(
            "{}{}",
            shader!("matvec/q8_put_sg.wgsl"),
            shader!("matvec/q4_k_q8_x_sg.wgsl")
        )
    } else {
        shader!("matvec/q4_k_q8_x.wgsl").into()
    }
}

/// Whether the 8-bit x prologue of a kernel with row sums `row_sum` of `lanes` lanes is
/// made with subgroup shuffles ([`prologue_file`]); the LayerNorm prologue
/// (`shaders/matvec/q8_x_ln.wgsl`) needs them too.
pub(crate) fn shuffle_prologue(row_sum: RowSum, lanes: u32) -> bool {
    row_sum != RowSum::Tree && lanes >= 8
}

/// Which end of a LayerNorm + token shift fused into two one-token products a `matvec`
/// kernel is (`ops::matmul::ln_fuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LnEnd {
    /// Neither.
    None,
    /// Its x is the token shift of the LayerNorm of the residual, made by its prologue
    /// (8-bit x: `shaders/matvec/q8_x_ln.wgsl`).
    In,
    /// It adds to the residual and saves the LayerNorm of the residual before the add as
    /// the new shift state (`shaders/matvec/ln_save.wgsl`).
    Out,
    /// As `Out`, and its last workgroups then run the next block's time-mix LayerNorm +
    /// token shift of the new residual (`shaders/matvec/ln_next.wgsl`; bindings 12–14).
    Next,
    /// A residual add whose last workgroups run a LayerNorm + token shift of the new
    /// residual, with no shift state of its own to save: the next block's time mix's
    /// after a channel-mix value whose LayerNorm keeps its `ln_shift` dispatch (keys without
    /// 8-bit x, such as F16 ones), or the same block's channel mix's after the time mix's
    /// output (where the key does not make its own x).
    NextOnly,
}

/// Whether a one-token product with 8-bit x hands it over through the activations instead
/// of each consumer workgroup quantizing its own (`ops::matmul::ln_fuse`: the channel-mix
/// key's ReLU² for the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Q8Handoff {
    /// Neither.
    None,
    /// Its epilogue writes its output as 8-bit x, runs of 32 whole in each workgroup
    /// (`shaders/matvec/x8_out.wgsl`; the LayerNorm prologue's key).
    Writes,
    /// Its 64-value Q4_K step reads x as 8-bit x from the activations, with no prologue
    /// (`shaders/matvec/x8_in.wgsl`).
    Reads,
}

/// How the matrix × vector kernels sum a row's LANES lanes (`shaders/matvec/row_sum_*.wgsl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowSum {
    /// A tree in workgroup memory (no subgroups).
    Tree,
    /// Subgroup shuffles: a subgroup holds whole rows.
    Subgroup,
    /// Shuffles within 32 lanes, then workgroup memory: rows wider than 32 lanes on
    /// subgroups of at least 32.
    Subgroup32,
}

impl RowSum {
    /// The snippet that defines `row_sum`.
    pub(crate) fn file(self) -> &'static str {
        match self {
            RowSum::Tree => shader!("matvec/row_sum_wg.wgsl"),
            RowSum::Subgroup => shader!("matvec/row_sum_sg.wgsl"),
            RowSum::Subgroup32 => shader!("matvec/row_sum_sg32.wgsl"),
        }
    }

    /// The row sums of the 8-token kernels (`wide_sum`, four vec4s a lane): rows wider
    /// than a subgroup all four under one barrier (`shaders/matvec/wide_sum_sg32.wgsl`),
    /// else this mode's `row_sum` four times (`wide_sum_rows.wgsl`).
    pub(crate) fn wide_file(self) -> String {
        match self {
            RowSum::Subgroup32 => shader!("matvec/wide_sum_sg32.wgsl").to_string(),
            m => format!("{}{}", m.file(), shader!("matvec/wide_sum_rows.wgsl")),
        }
    }
}

/// The LoRA term of a `matvec` product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatvecLora {
    None,
    /// `B h` with `h` from an earlier dispatch (`shaders/matvec/lora.wgsl`).
    Term,
    /// `B h` with `h = s · A x` made by the dispatch's first workgroups (one token, one
    /// adapter: `hprod.rs`, `shaders/matvec/lora_hprod.wgsl`).
    MakesH,
}

/// The `matvec` kernel: weights in `dtype`, writing the activations or the logits,
/// `lanes` lanes a row summed by `row_sum`, for passes of up to 4 tokens a workgroup or
/// of exactly one (`one_token`), with its LoRA term, `unroll` steps a lane issues together;
/// or with `wide` (Q4_K, no LoRA term, the activations) the 8-token kernel with two rows
/// a lane group (`shaders/matvec/q4_k_wide.wgsl`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatvecSpec {
    pub dtype: DType,
    /// Writes the separate logits buffer (binding 6) instead of the activations.
    pub logits: bool,
    pub lanes: u32,
    pub row_sum: RowSum,
    pub one_token: bool,
    pub lora: MatvecLora,
    pub unroll: u32,
    pub wide: bool,
    /// Not 0: a one-token Q4_K product of this depth (a multiple of 256) whose workgroups
    /// first quantize x to 8 bits in workgroup memory and take 4 × int8 dot products
    /// (`shaders/matvec/q4_k_q8.wgsl`); 0: x read as f32.
    pub q8k: u32,
    /// Rows a lane group computes one after another (`MVR`: 1, or more with 8-bit x so
    /// that a workgroup's prologue serves more rows; [`q8_rows`]).
    pub rows: u32,
    /// With 8-bit x: a lane's step is a whole sub-block pair, 64 values under one read of
    /// the block header (`shaders/matvec/q4_k_q8_pair.wgsl`), instead of 16
    /// (`Tuning::mv_q8_pair`).
    pub q8_pair: bool,
    /// Not 0 (with `wide`): the 8-token kernel takes 8-bit x, quantized a chunk of this
    /// many values at a time into workgroup memory (`shaders/matvec/q4_k_q8_wide_step.wgsl`).
    pub wide_q8: u32,
    /// A one-token kernel at an end of a fused LayerNorm + token shift (its params then
    /// `shaders/matvec/params_ln.wgsl`; the token metadata and the state at bindings 9, 10;
    /// with `Next` / `NextOnly` the next block's vectors, state part and the activations as
    /// counters at 12–14; `NextOnly` binds no state at 10).
    pub ln: LnEnd,
    /// 8-bit x handed over through the activations (binding 15, `act` as u32): written
    /// by this product's epilogue (with `LnEnd::In`) or read by its step (with `q8_pair`).
    pub x8: Q8Handoff,
}

impl KernelSpec for MatvecSpec {
    fn label(&self) -> String {
        format!("matvec[{}]", self.dtype)
    }

    fn source(&self) -> Result<String> {
        if self.wide {
            let (w, step) = wide_body(self.wide_q8);
            let w = w.u32("LANES", self.lanes).file(COMMON);
            return Ok(with_decode(w, self.dtype, "matvec")?
                .file(shader!("product/out_act_vec4.wgsl"))
                .file(&self.row_sum.wide_file())
                .file(shader!("product/params.wgsl"))
                .file(shader!("product/one.wgsl"))
                .file(shader!("product/finish.wgsl"))
                .file(step)
                .file(shader!("matvec/q4_k_wide.wgsl"))
                .build());
        }
        let mut w = Wgsl::new()
            .u32("LANES", self.lanes)
            .flag("NT1", self.one_token)
            .flag("HPROD", self.lora == MatvecLora::MakesH)
            .u32("UNR", self.unroll)
            .u32("MVR", self.rows);
        if self.q8k != 0 {
            w = w.u32("Q8K", self.q8k);
        }
        let w = w.file(COMMON);
        let (lora, params) = match self.lora {
            MatvecLora::None if self.ln != LnEnd::None => (
                shader!("matvec/lora_off.wgsl"),
                params_with(shader!("matvec/params_ln.wgsl")),
            ),
            MatvecLora::None => (shader!("matvec/lora_off.wgsl"), params_with("")),
            MatvecLora::Term => (shader!("matvec/lora.wgsl"), params_with("")),
            MatvecLora::MakesH => (
                shader!("matvec/lora_hprod.wgsl"),
                params_with(shader!("matvec/params_hprod.wgsl")),
            ),
        };
        let (step, prologue) =
            step_files(self.dtype, self.q8k, self.q8_pair, self.row_sum, self.lanes);
        let prologue = match self.x8 {
            Q8Handoff::Reads => shader!("matvec/x8_in.wgsl").to_string(),
            _ => prologue,
        };
        // The ends of a fused LayerNorm: the prologue that makes x (with the shuffle
        // quantizer), or the shift state's save after the usual prologue; after the rows,
        // the next block's LayerNorm (`Next`, `NextOnly`) or nothing.
        let none = shader!("matvec/epilogue_none.wgsl");
        let (prologue, ln) = match self.ln {
            LnEnd::None => (
                prologue,
                format!("{}{none}", shader!("matvec/ln_none.wgsl")),
            ),
            LnEnd::NextOnly => (
                prologue,
                format!(
                    "{}{}{}{}{}",
                    shader!("matvec/ln_none.wgsl"),
                    shader!("matvec/ln_meta.wgsl"),
                    shader!("seq_meta.wgsl"),
                    shader!("matvec/ln_row_stats.wgsl"),
                    shader!("matvec/ln_next.wgsl")
                ),
            ),
            LnEnd::In => (
                shader!("matvec/q8_put_sg.wgsl").to_string(),
                format!(
                    "{}{}{}{}",
                    shader!("seq_meta.wgsl"),
                    shader!("matvec/ln_row_stats.wgsl"),
                    shader!("matvec/q8_x_ln.wgsl"),
                    match self.x8 {
                        Q8Handoff::Writes => shader!("matvec/x8_out.wgsl"),
                        _ => none,
                    }
                ),
            ),
            LnEnd::Out | LnEnd::Next => (
                prologue,
                format!(
                    "{}{}{}",
                    shader!("seq_meta.wgsl"),
                    shader!("matvec/ln_save.wgsl"),
                    match self.ln {
                        LnEnd::Next => concat!(
                            shader!("matvec/ln_row_stats.wgsl"),
                            shader!("matvec/ln_next.wgsl")
                        ),
                        _ => none,
                    }
                ),
            ),
        };
        Ok(with_decode(w, self.dtype, "matvec")?
            .file(match self.logits {
                true => shader!("product/out_logits6.wgsl"),
                false => shader!("product/out_act_vec4.wgsl"),
            })
            .file(self.row_sum.file())
            .file(step)
            .file(&prologue)
            .file(&ln)
            .file(shader!("matvec/row.wgsl"))
            .file(lora)
            .file(&params)
            .file(shader!("product/one.wgsl"))
            .file(shader!("product/finish.wgsl"))
            .file(shader!("matvec.wgsl"))
            .build())
    }
}

/// `Params` of `shaders/product/params.wgsl` with the fields `extra` (a file of field
/// lines: `shaders/matvec/params_hprod.wgsl`, `params_ln.wgsl`) added inside its braces,
/// so that an extended product's `Params` repeats none of the base's.
pub(crate) fn params_with(extra: &str) -> String {
    let base = shader!("product/params.wgsl");
    let (head, tail) = base.rsplit_once('}').unwrap_or((base, ""));
    format!("{head}{extra}}}{tail}")
}

/// The `matvec` step for an encoding (`mv_step`, `MV_STEP`: `shaders/matvec/`), generic
/// on top of `dec8` for the encodings without one of their own.
pub(crate) fn step_file(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => shader!("matvec/f16.wgsl"),
        DType::F32 => shader!("matvec/f32.wgsl"),
        DType::Q4_K => concat!(
            shader!("matvec/q4_k_pair.wgsl"),
            shader!("matvec/q4_k.wgsl")
        ),
        DType::Q6_K => shader!("matvec/q6_k.wgsl"),
        _ => shader!("matvec/generic.wgsl"),
    }
}

/// How the matrix × vector kernels sum a row's `lanes` lanes on this device: subgroup
/// shuffles where a subgroup holds whole rows, shuffles within 32 lanes then workgroup
/// memory for rows wider than 32 lanes on subgroups of at least 32, else a tree in
/// workgroup memory.
pub(crate) fn row_sum_mode(cx: &Ctx, lanes: u32) -> RowSum {
    let f = &cx.gpu.features;
    if !f.subgroup {
        RowSum::Tree
    } else if f.subgroup_min_size >= lanes {
        RowSum::Subgroup
    } else if f.subgroup_min_size >= 32 && lanes % 32 == 0 {
        RowSum::Subgroup32
    } else {
        RowSum::Tree
    }
}

/// The body of an 8-token Q4_K kernel (single product or group) and its constant: with
/// f32 x (`wide_q8` = 0) `shaders/matvec/q4_k_wide_step.wgsl`, with 8-bit x a chunk of
/// `wide_q8` values at a time `q4_k_q8_wide_step.wgsl` (KC).
pub(crate) fn wide_body(wide_q8: u32) -> (Wgsl, &'static str) {
    match wide_q8 {
        0 => (
            Wgsl::new(),
            concat!(
                shader!("matvec/q4_k_pair.wgsl"),
                shader!("matvec/q4_k_wide_step.wgsl")
            ),
        ),
        kc => (
            Wgsl::new().u32("KC", kc),
            shader!("matvec/q4_k_q8_wide_step.wgsl"),
        ),
    }
}

/// Lanes a row of the 8-token kernel with f32 x for a product (or group) of `rows` rows
/// of `steps` 16-value steps: `RWKV_MV_WIDE_LANES` ([`crate::gpu::Tuning::mv_wide_lanes`])
/// or `RWKV_MV_LANES` where set; else enough for about 640 workgroups of 2 · 256 / lanes
/// rows, but at least two steps a lane (4–256 lanes). H200, `rwkv kernels` at T = 8, µs
/// with 32 / 64 / 128 / 256 lanes: 2560 × 2560 26.1 / **21.3** / 23.2 / 34.8; 10240 × 2560
/// **53.3** / 55.7 / 63.6 / 126.9; 2560 × 10240 76.9 / 61.6 / **56.2** / 73.2; the r/k/v
/// group (7,680 rows of depth 2,560), µs a layer with 32 / 64 / 128: 64.6 / **57.4** / 58.8
/// (benchmarks.md, "lanes by shape for the 8-token kernels").
pub(crate) fn wide_lanes(tuning: &crate::gpu::Tuning, steps: u32, rows: usize) -> u32 {
    let fill = (327_680 / rows.max(1)).max(1) as u32;
    let most = (steps / 2).max(1);
    let most = 1 << (31 - most.leading_zeros()); // the largest power of two ≤ steps / 2
    tuning
        .mv_wide_lanes
        .or(tuning.mv_lanes)
        .unwrap_or_else(|| fill.next_power_of_two().min(most).clamp(4, 256))
}

/// Lanes per row of `m`'s matrix × vector kernel ([`mv_lanes`]); `RWKV_MV_LANES` (4–32,
/// a power of two; [`crate::gpu::Tuning::mv_lanes`]) overrides it for tuning runs.
pub(crate) fn matvec_lanes(tuning: &crate::gpu::Tuning, m: &GpuMatrix) -> u32 {
    let steps = (m.n_in / matvec_step(m.dtype)) as u32;
    tuning.mv_lanes.unwrap_or_else(|| mv_lanes(steps, m.n_out))
}

/// Lanes per row of the matrix × vector kernels: enough to cover a row in a few steps,
/// up to a subgroup (32) — and up to the whole workgroup (256, the rows summed in
/// workgroup memory) for matrices of at most 128 rows (the low-rank first products), whose
/// few rows would otherwise leave most SMs idle.
pub(crate) fn mv_lanes(steps: u32, n_out: usize) -> u32 {
    let most = if n_out <= 128 { 256 } else { 32 };
    steps.next_power_of_two().clamp(4, most)
}

/// Lanes a row for a one-token product with f32 x of `n_out` rows of `steps` steps, from
/// the `lanes` of [`mv_lanes`]: 64 instead of 32 where 32 would leave fewer than 640
/// workgroups and each of 64 lanes still takes at least 8 steps — the channel-mix value of
/// the larger models (2.9B: 2,560 rows of 10,240, 320 workgroups at 32 lanes). H200,
/// `rwkv kernels` F16 T = 1, µs at 16 / 32 / 64 / 128 lanes: 2560 × 10240 34.9 / 24.5 /
/// **17.4** / 18.7; 2560 × 2560 7.2 / **5.7** / 5.5 / 6.5 (5 steps a lane at 64: kept);
/// 10240 × 2560 17.2 / 18.2 / 17.7 / 19.3; 65536 × 2560 84.0 / **79.7** / 86.5 / 96.2;
/// Q4_K with f32 x 2560 × 10240 16.2 / 23.6 / 18.8 / 25.6 (one matrix for every
/// dispatch: the figures before `rwkv kernels` read weights cold). In the model, 2.9B
/// decode: Q8_0 +6.2 %, F16 +1.2 % (benchmarks.md, "a one-token product's lanes by its
/// workgroups").
pub(crate) fn one_token_lanes(lanes: u32, steps: u32, n_out: usize) -> u32 {
    let wgs_at_32 = (n_out as u32).div_ceil(256 / 32);
    if lanes == 32 && wgs_at_32 < 640 && steps >= 64 * 8 {
        64
    } else {
        lanes
    }
}

/// The matrix × vector node of the product `o` with arguments `a` (params `p`) for passes
/// of up to `max_t` tokens, with its one-token variant as its small node.
///
/// Errors: x offset or stride not multiples of 4; as [`Ctx::node_at`].
pub(super) fn product(
    cx: &Ctx,
    op: &'static str,
    layer: Option<usize>,
    o: &Operands,
    a: &MatmulArgs,
    p: &Params,
    max_t: u32,
) -> Result<Node> {
    let m = o.m;
    if a.x_off % 4 != 0 || a.x_stride % 4 != 0 {
        return Err(op_err(
            op,
            format!("{}: x offset/stride not multiples of 4", m.name),
        ));
    }
    let mut spec = base_spec(cx, m, o.out.is_some());
    let lanes = spec.lanes;
    // Bindings 2.. : W, vecs, act, W as vec4s, [logits]; the LoRA weights at 7.
    let mut res = vec![
        m.binding(),
        o.vecs.as_entire_binding(),
        o.act.as_entire_binding(),
        m.binding(),
    ];
    if let Some(out) = o.out {
        res.push(out.as_entire_binding());
    }
    let mut res = numbered(res);
    if let Some(b) = o.lora {
        spec.lora = MatvecLora::Term;
        res.push((7, b.as_entire_binding()));
    }
    let grid = Grid::Tiles {
        x: (m.n_out as u32).div_ceil(256 / lanes),
        count: a.rows,
        per_y: 4,
    };
    // Passes of 2–8 tokens on Q4_K (a server's batched decode steps): the 8-token kernel,
    // with 8-bit x where `wide_q8_pays`, else with f32 x and lanes by `wide_lanes`.
    let few = max_t == SMALL_T && spec.lora == MatvecLora::None;
    let wide_q8 = few
        .then(|| wide_q8_pays(cx, m, false, o.out.is_some()))
        .flatten();
    let wide = few && m.dtype == DType::Q4_K && o.out.is_none() && cx.gpu.tuning.mv_wide;
    // The variant for 2–8 tokens compiles late where only such passes take it.
    // Both 8-token kernels: two rows a lane group, 8 tokens a workgroup; with 8-bit x the
    // lanes follow the rows (`wide_q8_lanes`).
    let wide_spec = match wide_q8 {
        Some(kc) => {
            let lanes = cx
                .gpu
                .tuning
                .mv_lanes
                .unwrap_or_else(|| wide_q8_lanes(kc, m.n_out));
            Some(MatvecSpec {
                wide: true,
                wide_q8: kc,
                lanes,
                row_sum: row_sum_mode(cx, lanes),
                ..spec.clone()
            })
        }
        None => wide.then(|| {
            let lanes = wide_lanes(
                &cx.gpu.tuning,
                (m.n_in / matvec_step(m.dtype)) as u32,
                m.n_out,
            );
            MatvecSpec {
                wide: true,
                lanes,
                row_sum: row_sum_mode(cx, lanes),
                ..spec.clone()
            }
        }),
    };
    let mut node = if let Some(ws) = wide_spec {
        let grid = Grid::Tiles {
            x: (m.n_out as u32).div_ceil(2 * 256 / ws.lanes),
            count: a.rows,
            per_y: 8,
        };
        cx.node_at_late(op, layer, &ws, p, res.clone(), grid)?
    } else if max_t == SMALL_T {
        cx.node_at_late(op, layer, &spec, p, res.clone(), grid)?
    } else {
        cx.node_at(op, layer, &spec, p, res.clone(), grid)?
    };
    // A pass of one token (a single chat's decode step): the kernel compiled for exactly
    // one, without the registers of the other three.
    let (spec, x) = one_token_kernel(cx, m, spec);
    let grid = Grid::Tiles {
        x,
        count: a.rows,
        per_y: 4,
    };
    let one = cx.node_at(op, layer, &spec, p, res, grid)?;
    node.small = Some(Small {
        count: a.rows,
        max: 1,
        node: Box::new(one),
    });
    Ok(node)
}

/// The `matvec` kernel of `m` for passes of up to 4 tokens a workgroup, writing the
/// activations or (`logits`) the logits, without a LoRA term: lanes by shape
/// ([`matvec_lanes`]), row sums by device.
pub(crate) fn base_spec(cx: &Ctx, m: &GpuMatrix, logits: bool) -> MatvecSpec {
    let lanes = matvec_lanes(&cx.gpu.tuning, m);
    MatvecSpec {
        dtype: m.dtype,
        logits,
        lanes,
        row_sum: row_sum_mode(cx, lanes),
        one_token: false,
        lora: MatvecLora::None,
        unroll: mv_unroll(&cx.gpu.tuning, m.dtype),
        wide: false,
        q8k: 0,
        rows: 1,
        q8_pair: false,
        wide_q8: 0,
        ln: LnEnd::None,
        x8: Q8Handoff::None,
    }
}

/// `spec` (of `m`'s product) made the kernel for passes of exactly one token — with 8-bit
/// x where [`q8_pays`] (rows a lane group by [`q8_rows`]; 64-value steps and lanes for
/// those with `Tuning::mv_q8_pair` on Q4_K) — and its workgroups a token.
pub(crate) fn one_token_kernel(cx: &Ctx, m: &GpuMatrix, mut spec: MatvecSpec) -> (MatvecSpec, u32) {
    spec.one_token = true;
    if q8_pays(cx, m, spec.lora != MatvecLora::None, spec.logits) {
        spec.q8k = m.n_in as u32;
        spec.rows = q8_rows(&cx.gpu.tuning, m.n_out);
        if cx.gpu.tuning.mv_q8_pair && m.dtype == DType::Q4_K {
            // A quarter of the steps: lanes for those.
            spec.q8_pair = true;
            spec.lanes = cx
                .gpu
                .tuning
                .mv_lanes
                .unwrap_or_else(|| mv_lanes((m.n_in / 64) as u32, m.n_out));
            spec.row_sum = row_sum_mode(cx, spec.lanes);
        }
    } else if cx.gpu.tuning.mv_lanes.is_none() {
        // f32 x: lanes that fill the GPU with workgroups ([`one_token_lanes`]).
        let steps = (m.n_in / matvec_step(m.dtype)) as u32;
        spec.lanes = one_token_lanes(spec.lanes, steps, m.n_out);
        spec.row_sum = row_sum_mode(cx, spec.lanes);
    }
    if spec.logits {
        let steps = (m.n_in / matvec_step(m.dtype)) as u32;
        if let Some(lanes) = head_lanes(&cx.gpu.tuning, steps) {
            spec.lanes = lanes;
            spec.row_sum = row_sum_mode(cx, lanes);
        }
    }
    let x = (m.n_out as u32).div_ceil(spec.rows * 256 / spec.lanes);
    (spec, x)
}
