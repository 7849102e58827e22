//! Every `RWKV_*` environment knob of the engine in one place: [`Tuning`], read once when a
//! device opens ([`crate::gpu::GpuContext::new`]) and held by the context
//! ([`crate::gpu::GpuContext::tuning`]), from where the op builders, the loader and the
//! pipeline cache read it. Nothing else in the engine reads the environment (a test
//! greps for it). Each field below names its variable, values and default; the table for
//! users is `docs/tuning.md` (a test checks it lists every variable read here).
//!
//! A value outside its range is ignored with a warning in the log (the default applies),
//! as the knobs are for tuning runs and A/B comparisons; the shape knobs are also checked
//! against the device where they are used (a forced tile that does not fit, threads a row
//! that subgroups do not hold, more k slices than steps: the default applies).

use std::ffi::OsString;

/// The engine's environment knobs, parsed (`docs/tuning.md` tabulates them). `Default`
/// is the engine with no knob set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// `RWKV_ADAPTER`: an adapter index or a case-insensitive name substring, used in
    /// place of `AdapterChoice::Auto`.
    pub adapter: Option<String>,
    /// `RWKV_SUBGROUPS=1|0` (`Some(true)` / `Some(false)`) or `RWKV_NO_SUBGROUPS`
    /// (`Some(false)`, whatever `RWKV_SUBGROUPS` says); `None`: on wherever the adapter
    /// offers subgroups except llvmpipe (`gpu::context::subgroups_wanted`).
    pub subgroups: Option<bool>,
    /// `RWKV_NO_COOPMAT`: no tensor-core tiles even where the adapter has them.
    pub no_coopmat: bool,
    /// `RWKV_CHECKED_SHADERS`: shaders keep wgpu's runtime bounds checks on Vulkan too.
    pub checked_shaders: bool,
    /// `RWKV_MV_LANES`: lanes per row of the matrix × vector kernel (4–32, a power of
    /// two); `None`: by the row's length (`ops::matmul::mv_lanes`), except on Mesa's
    /// llvmpipe, where the context sets 4 (`gpu::context::LLVMPIPE_MV_LANES`).
    pub mv_lanes: Option<u32>,
    /// `RWKV_MV_UNROLL`: steps a matrix × vector lane issues together (1–8); `None`: 2
    /// for float weights, 1 for block-quantized ones.
    pub mv_unroll: Option<u32>,
    /// `RWKV_MV_WIDE=0` makes it false: passes of 2–8 tokens on Q4_K weights take the
    /// 4-token `matvec` kernel instead of the 8-token, two-rows-a-lane one (A/B runs).
    pub mv_wide: bool,
    /// `RWKV_MV_WIDE_Q8=1` makes it true: passes of 2–8 tokens on Q4_K weights with 8-bit x
    /// (`RWKV_MV_Q8` not `0`) take the 8-token kernel with 8-bit x for every Q4_K product
    /// without a LoRA term (`shaders/matvec/q4_k_q8_wide_step.wgsl`: a batched decode step of
    /// 8 on a 2.9B model 11.3 → 8.3–8.8 ms on an H100) instead of f32 x. Off by default: a
    /// prompt's piece of 2–8 tokens must get the numbers the tiles give a longer one (f16 x:
    /// a chat resumed with a short message, python/tests/test_generate.py), and a server the
    /// numbers a sequence gets alone (f32 x); 8-bit x moves a value a whole level on an ulp.
    pub mv_wide_q8: bool,
    /// `RWKV_MV_WIDE_LANES`: lanes a row of the 8-token Q4_K kernels with f32 x (4–256, a
    /// power of two; rows wider than a subgroup are summed through workgroup memory);
    /// `None`: `RWKV_MV_LANES` where set, else by the product's shape
    /// (`ops::matmul::wide_lanes`).
    pub mv_wide_lanes: Option<u32>,
    /// `RWKV_MV_X8_LANES`: lanes a row of the one-token Q4_K products that read 8-bit x
    /// handed over by the product before them (the channel-mix value: `Q8Handoff::Reads`;
    /// 4–256, a power of two; rows wider than a subgroup are summed by shuffles then
    /// workgroup memory); `None`: `RWKV_MV_LANES` where set, else the lanes of the
    /// product's one-token kernel (`ops::matmul::ln_fuse::x8_reads_lanes`; an H200 sweep
    /// found none better, benchmarks.md).
    pub mv_x8_lanes: Option<u32>,
    /// `RWKV_HEAD_LANES`: lanes a row of the one-token head (the logits product; 4–256, a
    /// power of two); `None`: 4 steps a lane at least (`ops::matmul::head_lanes`).
    pub head_lanes: Option<u32>,
    /// `RWKV_LN_SHIFT_SCALAR=0|1`: whether `ln_shift` writes one channel a thread
    /// (`shaders/ln_shift/out_scalar.wgsl`) or 4 (`out_vec4.wgsl`); `None`: one on Mesa's
    /// llvmpipe, whose JIT code kept ≈ 1.4 KB an invocation of the 4-channel writes, else 4.
    pub ln_shift_scalar: Option<bool>,
    /// `RWKV_MV_Q8=0|1`: whether one-token Q4_K products quantize x to 8 bits
    /// (`ops::matmul::q8_pays`) or read it as f32; `None`: they do, except where the
    /// caller decides otherwise (a server's batched steps keep f32 x so that a sequence's
    /// logits do not depend on how many others share its step: `rwkv_server::serving_tuning`).
    pub mv_q8: Option<bool>,
    /// `RWKV_MV_ROWS`: rows a lane group computes in one-token Q4_K products with 8-bit x
    /// (1, 2, 4 or 8); `None`: by the product's rows (`ops::matmul::q8_rows`).
    pub mv_rows: Option<u32>,
    /// `RWKV_MV_Q8_PAIR=0|1`: whether one-token Q4_K products and groups with 8-bit x take a
    /// whole sub-block pair (64 values, one read of the block header) a lane step
    /// (`shaders/matvec/q4_k_q8_pair.wgsl`, the default) or 16 values (`q4_k_q8.wgsl`;
    /// A/B runs).
    pub mv_q8_pair: bool,
    /// `RWKV_LN_FUSE=0|1`: whether a one-token pass runs the channel mix's LayerNorm +
    /// token shift inside the key's and the value's products (`ops::matmul::ln_fuse`, the
    /// default where they take 8-bit x) or as its own `ln_shift` dispatch (A/B runs).
    pub ln_fuse: bool,
    /// `RWKV_LN_NEXT=0|1`: whether a one-token pass's channel-mix value (without
    /// adapters) has its last workgroups run the next block's time-mix LayerNorm + token
    /// shift (`shaders/matvec/ln_next.wgsl`, the default) or that block keeps its
    /// `ln_shift` dispatch (A/B runs).
    pub ln_next: bool,
    /// `RWKV_Q8_HANDOFF=0|1`: whether a one-token pass's fused channel-mix key hands its
    /// ReLU² to a Q4_K value as 8-bit x through the activations
    /// (`shaders/matvec/x8_out.wgsl`, `x8_in.wgsl`: the default) or the value's every
    /// workgroup quantizes it itself (A/B runs).
    pub q8_handoff: bool,
    /// `RWKV_STATE_PARTS`: the states' layers split over at least this many buffers (1–8;
    /// `None`: as few as the binding limit allows, `model::graph::StateParts`).
    pub state_parts: Option<usize>,
    /// `RWKV_COOP_TILE=BMxBN`: the tensor-core tile (tokens × rows) of products of at
    /// least 1024 rows, where it is one of `ops::matmul::COOP_TILES` and fits.
    pub coop_tile: Option<(u32, u32)>,
    /// `RWKV_COOP_PF2=0|1`: tensor-core tiles load two steps ahead; `None`: for F16
    /// weights in 128-token tiles.
    pub coop_pf2: Option<bool>,
    /// `RWKV_COOP_BT=0|1|2`: where a tensor-core tile keeps its W tile transposed in
    /// workgroup memory (`BT` of shaders/matmul_coop.wgsl): 0 nowhere, 1 single products
    /// of more than 4096 rows or depth, 2 every tile; `None`: the default of
    /// `ops::matmul::coop_bt`.
    pub coop_bt: Option<u32>,
    /// `RWKV_COOP_ROTATE=0|1`: tensor-core row tiles start their k steps at rotated
    /// steps (`ROT` of shaders/matmul_coop.wgsl); `None`: the default of
    /// `ops::matmul::coop_rotate`.
    pub coop_rotate: Option<bool>,
    /// `RWKV_KSPLIT_C`: k slices (1–32) of the C-row tensor-core products.
    pub ksplit_c: Option<u32>,
    /// `RWKV_KSPLIT_WIDE`: k slices (1–32) of the tensor-core products of more than 4096 rows.
    pub ksplit_wide: Option<u32>,
    /// `RWKV_WAVES=0` makes it false: wide products are not split into whole-depth head
    /// tiles and a k-split tail (`ops::matmul::coop_waves`).
    pub waves: bool,
    /// `RWKV_MEDIUM=0` makes it false: passes of 9–64 tokens run the large passes'
    /// tensor-core products instead of their medium variants (`ops::matmul::medium_plan`).
    pub medium: bool,
    /// `RWKV_GPU_ARGMAX=0` makes it false: `Engine::forward_greedy` reads back the logits
    /// of every sequence, as `Engine::forward` does (A/B runs of a server's greedy steps),
    /// and the built-in sampler's decode steps read back the logits and draw on the host
    /// instead of among the GPU's candidates (`Engine::generate_sampled`).
    pub gpu_argmax: bool,
    /// `RWKV_WKV_ROWS`: rows of S per workgroup of the WKV scan (8, 16, 32 or 64).
    pub wkv_rows: Option<u32>,
    /// `RWKV_WKV_TPR`: threads per row of S (1, 2, 4, 8 or 16) of the WKV scan and the
    /// fused decode kernel, where subgroups hold them.
    pub wkv_tpr: Option<u32>,
    /// `RWKV_WKV_FUSED_LEN` (0–64, default 8): the fused decode WKV (`wkv_fused`) runs for
    /// passes whose every sequence has at most this many tokens; 0: for passes of at most
    /// 8 tokens in all.
    pub wkv_fused_len: u32,
    /// `RWKV_WKV_STAGED=0` makes it false: the fused decode WKV computes each token's
    /// per-channel values in every row's threads (`shaders/wkv_fused.wgsl`) instead of once
    /// a workgroup (`shaders/wkv_fused_staged.wgsl`; H200, 2.9B Q4_K: 31 % less WKV time
    /// in a step of 128, the step 7.5 % shorter).
    pub wkv_staged: bool,
    /// `RWKV_LORA_HPROD=0` makes it false: no one-token product makes its LoRA term's
    /// first product itself.
    pub lora_hprod: bool,
    /// `RWKV_HPROD_SPIN`: polls of an unpublished LoRA h value before a lane computes it
    /// itself (0: at once).
    pub hprod_spin: u32,
    /// `RWKV_SPIN_WAIT_US` (0–1,000,000): how long a read-back wait polls the device
    /// without blocking before it blocks (`GpuContext::wait_for`): the host sees the GPU's
    /// finish without a thread wake-up, at the cost of a busy CPU core while it waits;
    /// `None`: set by the context, 0 on a CPU adapter, else
    /// [`crate::gpu::context::DEFAULT_SPIN_WAIT_US`].
    pub spin_wait_us: Option<u32>,
    /// `RWKV_PACE=0` makes it false: a decode loop polls for each step's result from its
    /// submission on instead of sleeping through most of it first (`gpu::pacing`).
    pub pace: bool,
    /// `RWKV_SPLIT_SUBMIT` (0–64, default [`DEFAULT_SPLIT_SUBMIT`]): a decode step's first
    /// this many graph nodes go in a submission of their own, ahead of the rest (the GPU
    /// starts on them while the host submits the rest); 0: one submission a step.
    pub split_submit: u32,
    /// `RWKV_COMPILE_THREADS`: pipeline-compile worker threads (≥ 1); `None`: the CPU
    /// count, at most 16.
    pub compile_threads: Option<usize>,
    /// `RWKV_UPLOAD_THREADS`: weight-upload worker threads (1–64) where the load options
    /// leave them to the engine; `None`: the CPU count, at most 8.
    pub upload_threads: Option<usize>,
    /// `WGPU_BACKEND` (read by wgpu itself): kept so that devices opened for different
    /// backends are told apart (`GpuContext::shared`).
    pub wgpu_backend: Option<String>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            adapter: None,
            subgroups: None,
            no_coopmat: false,
            checked_shaders: false,
            mv_lanes: None,
            mv_unroll: None,
            mv_wide: true,
            mv_wide_q8: false,
            mv_wide_lanes: None,
            mv_x8_lanes: None,
            head_lanes: None,
            ln_shift_scalar: None,
            mv_q8: None,
            mv_rows: None,
            mv_q8_pair: true,
            ln_fuse: true,
            ln_next: true,
            q8_handoff: true,
            state_parts: None,
            coop_tile: None,
            coop_pf2: None,
            coop_bt: None,
            coop_rotate: None,
            ksplit_c: None,
            ksplit_wide: None,
            waves: true,
            medium: true,
            gpu_argmax: true,
            wkv_rows: None,
            wkv_tpr: None,
            wkv_fused_len: DEFAULT_WKV_FUSED_LEN,
            wkv_staged: true,
            lora_hprod: true,
            hprod_spin: DEFAULT_HPROD_SPIN,
            spin_wait_us: None,
            pace: true,
            split_submit: DEFAULT_SPLIT_SUBMIT,
            compile_threads: None,
            upload_threads: None,
            wgpu_backend: None,
        }
    }
}

/// Polls of an unpublished h value before a lane computes it itself. A poll is an L2
/// round trip on a GPU (≈ 0.5 µs; the first workgroups publish h within a few µs of the
/// dispatch's start), so 4,096 bounds a wait at a few ms. Mesa's lavapipe, which does not
/// start workgroups in order, cuts loops of more than ≈ 32k iterations short (outputs
/// then go missing): keep it well below that.
pub const DEFAULT_HPROD_SPIN: u32 = 4096;

/// [`Tuning::split_submit`] with no knob set: the embedding and the first block's first
/// three dispatches. A submission's validation in wgpu checks every bind group it holds
/// (≈ 0.25 µs a dispatch on the H200's host), with the GPU idle until it ends; the rest
/// of the step is submitted while the GPU runs these (H200, 2.9B Q4_K: the step's
/// submission 50–75 → 24–28 µs, decode +2.9 %; benchmarks.md).
pub const DEFAULT_SPLIT_SUBMIT: u32 = 4;

/// [`Tuning::wkv_fused_len`] with no knob set.
pub const DEFAULT_WKV_FUSED_LEN: u32 = 8;

impl Tuning {
    /// The knobs of this process's environment (warnings in the log for values out of
    /// range, which are ignored).
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// The knobs from `var` (the environment, or a table in tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let text = |name: &str| -> Option<String> {
            let v = var(name)?;
            match v.into_string() {
                Ok(s) => Some(s),
                Err(v) => {
                    log::warn!("{name}={v:?} is not UTF-8: ignored");
                    None
                }
            }
        };
        // A number in `ok`, else a warning and `None`.
        let num = |name: &str, what: &str, ok: &dyn Fn(u64) -> bool| -> Option<u64> {
            let v = text(name)?;
            match v.parse::<u64>() {
                Ok(n) if ok(n) => Some(n),
                _ => {
                    log::warn!("{name}={v}: expected {what}; ignored");
                    None
                }
            }
        };
        let flag = |name: &str| -> Option<bool> {
            let v = text(name)?;
            match v.as_str() {
                "1" => Some(true),
                "0" => Some(false),
                _ => {
                    log::warn!("{name}={v}: expected 0 or 1; ignored");
                    None
                }
            }
        };
        let u32_in = |name: &str, what: &str, ok: &dyn Fn(u64) -> bool| {
            num(name, what, ok).map(|n| n as u32)
        };
        let one_to_8 = |n: u64| (1..=8).contains(&n);
        let one_to_32 = |n: u64| (1..=32).contains(&n);
        let subgroups = if var("RWKV_NO_SUBGROUPS").is_some() {
            Some(false)
        } else {
            flag("RWKV_SUBGROUPS")
        };
        Tuning {
            adapter: text("RWKV_ADAPTER").filter(|v| !v.is_empty()),
            subgroups,
            no_coopmat: var("RWKV_NO_COOPMAT").is_some(),
            checked_shaders: var("RWKV_CHECKED_SHADERS").is_some(),
            mv_lanes: u32_in("RWKV_MV_LANES", "4, 8, 16 or 32", &|n| {
                n.is_power_of_two() && (4..=32).contains(&n)
            }),
            mv_unroll: u32_in("RWKV_MV_UNROLL", "1 to 8", &one_to_8),
            mv_wide: flag("RWKV_MV_WIDE") != Some(false),
            mv_wide_q8: flag("RWKV_MV_WIDE_Q8") == Some(true),
            mv_wide_lanes: u32_in("RWKV_MV_WIDE_LANES", "4 to 256, a power of two", &|n| {
                n.is_power_of_two() && (4..=256).contains(&n)
            }),
            mv_x8_lanes: u32_in("RWKV_MV_X8_LANES", "4 to 256, a power of two", &|n| {
                n.is_power_of_two() && (4..=256).contains(&n)
            }),
            head_lanes: u32_in("RWKV_HEAD_LANES", "4 to 256, a power of two", &|n| {
                n.is_power_of_two() && (4..=256).contains(&n)
            }),
            ln_shift_scalar: flag("RWKV_LN_SHIFT_SCALAR"),
            mv_q8: flag("RWKV_MV_Q8"),
            mv_q8_pair: flag("RWKV_MV_Q8_PAIR") != Some(false),
            ln_fuse: flag("RWKV_LN_FUSE") != Some(false),
            ln_next: flag("RWKV_LN_NEXT") != Some(false),
            q8_handoff: flag("RWKV_Q8_HANDOFF") != Some(false),
            state_parts: u32_in("RWKV_STATE_PARTS", "1 to 8", &one_to_8).map(|n| n as usize),
            mv_rows: u32_in("RWKV_MV_ROWS", "1, 2, 4 or 8", &|n| {
                n.is_power_of_two() && (1..=8).contains(&n)
            }),
            coop_tile: text("RWKV_COOP_TILE").and_then(|v| {
                let tile = v
                    .split_once('x')
                    .and_then(|(m, n)| Some((m.parse().ok()?, n.parse().ok()?)));
                if tile.is_none() {
                    log::warn!("RWKV_COOP_TILE={v}: expected BMxBN (e.g. 64x128); ignored");
                }
                tile
            }),
            coop_pf2: flag("RWKV_COOP_PF2"),
            coop_bt: u32_in("RWKV_COOP_BT", "0, 1 or 2", &|n| n <= 2),
            coop_rotate: flag("RWKV_COOP_ROTATE"),
            ksplit_c: u32_in("RWKV_KSPLIT_C", "1 to 32", &one_to_32),
            ksplit_wide: u32_in("RWKV_KSPLIT_WIDE", "1 to 32", &one_to_32),
            waves: flag("RWKV_WAVES") != Some(false),
            medium: flag("RWKV_MEDIUM") != Some(false),
            gpu_argmax: flag("RWKV_GPU_ARGMAX") != Some(false),
            wkv_rows: u32_in("RWKV_WKV_ROWS", "8, 16, 32 or 64", &|n| {
                [8, 16, 32, 64].contains(&n)
            }),
            wkv_tpr: u32_in("RWKV_WKV_TPR", "1, 2, 4, 8 or 16", &|n| {
                [1, 2, 4, 8, 16].contains(&n)
            }),
            wkv_fused_len: u32_in("RWKV_WKV_FUSED_LEN", "0 to 64", &|n| n <= 64)
                .unwrap_or(DEFAULT_WKV_FUSED_LEN),
            wkv_staged: flag("RWKV_WKV_STAGED") != Some(false),
            lora_hprod: flag("RWKV_LORA_HPROD") != Some(false),
            hprod_spin: u32_in("RWKV_HPROD_SPIN", "a number of polls", &|n| {
                n <= u64::from(u32::MAX)
            })
            .unwrap_or(DEFAULT_HPROD_SPIN),
            spin_wait_us: u32_in("RWKV_SPIN_WAIT_US", "0 to 1000000", &|n| n <= 1_000_000),
            pace: flag("RWKV_PACE") != Some(false),
            split_submit: u32_in("RWKV_SPLIT_SUBMIT", "0 to 64", &|n| n <= 64)
                .unwrap_or(DEFAULT_SPLIT_SUBMIT),
            compile_threads: num("RWKV_COMPILE_THREADS", "at least 1", &|n| n >= 1)
                .map(|n| n as usize),
            upload_threads: num("RWKV_UPLOAD_THREADS", "1 to 64", &|n| (1..=64).contains(&n))
                .map(|n| n as usize),
            wgpu_backend: text("WGPU_BACKEND"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Tuning {
        Tuning::from_vars(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    /// No variable: the defaults; each knob parsed into its field; values out of range
    /// ignored.
    #[test]
    fn parses_each_knob_and_ignores_bad_values() {
        assert_eq!(from(&[]), Tuning::default());
        let t = from(&[
            ("RWKV_ADAPTER", "nvidia"),
            ("RWKV_SUBGROUPS", "1"),
            ("RWKV_NO_COOPMAT", ""),
            ("RWKV_CHECKED_SHADERS", "1"),
            ("RWKV_MV_LANES", "16"),
            ("RWKV_MV_UNROLL", "3"),
            ("RWKV_MV_WIDE", "0"),
            ("RWKV_MV_WIDE_Q8", "1"),
            ("RWKV_MV_WIDE_LANES", "128"),
            ("RWKV_MV_X8_LANES", "64"),
            ("RWKV_HEAD_LANES", "8"),
            ("RWKV_LN_SHIFT_SCALAR", "1"),
            ("RWKV_STATE_PARTS", "3"),
            ("RWKV_MV_Q8", "0"),
            ("RWKV_MV_ROWS", "2"),
            ("RWKV_MV_Q8_PAIR", "0"),
            ("RWKV_LN_FUSE", "0"),
            ("RWKV_LN_NEXT", "0"),
            ("RWKV_Q8_HANDOFF", "0"),
            ("RWKV_COOP_TILE", "64x128"),
            ("RWKV_COOP_PF2", "0"),
            ("RWKV_COOP_BT", "2"),
            ("RWKV_COOP_ROTATE", "1"),
            ("RWKV_KSPLIT_C", "3"),
            ("RWKV_KSPLIT_WIDE", "2"),
            ("RWKV_WAVES", "0"),
            ("RWKV_MEDIUM", "0"),
            ("RWKV_GPU_ARGMAX", "0"),
            ("RWKV_WKV_ROWS", "32"),
            ("RWKV_WKV_TPR", "4"),
            ("RWKV_WKV_FUSED_LEN", "0"),
            ("RWKV_WKV_STAGED", "0"),
            ("RWKV_LORA_HPROD", "0"),
            ("RWKV_HPROD_SPIN", "0"),
            ("RWKV_SPIN_WAIT_US", "200"),
            ("RWKV_PACE", "0"),
            ("RWKV_SPLIT_SUBMIT", "6"),
            ("RWKV_COMPILE_THREADS", "2"),
            ("RWKV_UPLOAD_THREADS", "5"),
            ("WGPU_BACKEND", "vulkan"),
        ]);
        let want = Tuning {
            adapter: Some("nvidia".into()),
            subgroups: Some(true),
            no_coopmat: true,
            checked_shaders: true,
            mv_lanes: Some(16),
            mv_unroll: Some(3),
            mv_wide: false,
            mv_wide_q8: true,
            mv_wide_lanes: Some(128),
            mv_x8_lanes: Some(64),
            head_lanes: Some(8),
            ln_shift_scalar: Some(true),
            mv_q8: Some(false),
            mv_rows: Some(2),
            mv_q8_pair: false,
            ln_fuse: false,
            ln_next: false,
            q8_handoff: false,
            state_parts: Some(3),
            coop_tile: Some((64, 128)),
            coop_pf2: Some(false),
            coop_bt: Some(2),
            coop_rotate: Some(true),
            ksplit_c: Some(3),
            ksplit_wide: Some(2),
            waves: false,
            medium: false,
            gpu_argmax: false,
            wkv_rows: Some(32),
            wkv_tpr: Some(4),
            wkv_fused_len: 0,
            wkv_staged: false,
            lora_hprod: false,
            hprod_spin: 0,
            spin_wait_us: Some(200),
            pace: false,
            split_submit: 6,
            compile_threads: Some(2),
            upload_threads: Some(5),
            wgpu_backend: Some("vulkan".into()),
        };
        assert_eq!(t, want);
        let bad = from(&[
            ("RWKV_MV_LANES", "12"),
            ("RWKV_MV_WIDE_LANES", "512"),
            ("RWKV_MV_UNROLL", "9"),
            ("RWKV_COOP_TILE", "64"),
            ("RWKV_COOP_PF2", "yes"),
            ("RWKV_KSPLIT_C", "0"),
            ("RWKV_WKV_ROWS", "48"),
            ("RWKV_WKV_TPR", "3"),
            ("RWKV_HPROD_SPIN", "-1"),
            ("RWKV_SPIN_WAIT_US", "1000001"),
            ("RWKV_SPLIT_SUBMIT", "65"),
            ("RWKV_COMPILE_THREADS", "0"),
            ("RWKV_UPLOAD_THREADS", "65"),
            ("RWKV_ADAPTER", ""),
        ]);
        assert_eq!(bad, Tuning::default());
    }

    /// `RWKV_NO_SUBGROUPS` (any value) wins over `RWKV_SUBGROUPS=1`.
    #[test]
    fn no_subgroups_wins() {
        let t = from(&[("RWKV_NO_SUBGROUPS", ""), ("RWKV_SUBGROUPS", "1")]);
        assert_eq!(t.subgroups, Some(false));
        assert_eq!(from(&[("RWKV_SUBGROUPS", "0")]).subgroups, Some(false));
    }

    /// docs/tuning.md lists every variable this module reads.
    #[test]
    fn docs_list_every_knob() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let docs = std::fs::read_to_string(root.join("../../docs/tuning.md")).unwrap();
        let src = std::fs::read_to_string(root.join("src/gpu/tuning.rs")).unwrap();
        let code = &src[..src.find("#[cfg(test)]").unwrap()];
        // Every string literal that is a variable name: `"RWKV_…"` up to the next quote.
        let names: Vec<&str> = code
            .match_indices('"')
            .filter_map(|(i, _)| {
                let rest = &code[i + 1..];
                let name = &rest[..rest.find('"')?];
                let upper = name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                (upper && (name.starts_with("RWKV_") || name == "WGPU_BACKEND")).then_some(name)
            })
            .collect();
        assert!(names.len() >= 19, "{names:?}");
        for n in names {
            assert!(
                docs.contains(&format!("| `{n}` |")),
                "docs/tuning.md lacks {n}"
            );
        }
    }

    /// Nothing in the engine but this module reads the environment: every knob goes
    /// through [`Tuning`].
    #[test]
    fn no_other_environment_reads_in_the_engine() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src];
        let mut found = Vec::new();
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("gpu/tuning.rs")
                {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for (i, line) in text.lines().enumerate() {
                        if line.contains("env::var") || line.contains("env::set_var") {
                            found.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                        }
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "environment read outside Tuning:\n{}",
            found.join("\n")
        );
    }
}
