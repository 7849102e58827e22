//! Compute pipelines, compiled once per complete key (op + every specialisation).
//!
//! Shader sources live in `shaders/<op>.wgsl`; shared snippets (byte access, the decode
//! of each weight encoding) are prepended by [`shader_source`].

use crate::error::{EngineError, Result};
use crate::format::DType;
use crate::gpu::GpuContext;

/// Everything that makes two pipelines different.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    /// Op name == shader file stem == profile label.
    pub op: &'static str,
    /// Weight encoding decoded by the shader, if any.
    pub dtype: Option<DType>,
    /// Further specialisation (workgroup size, tile shape, …) as `name=value` pairs.
    pub spec: Vec<(&'static str, u32)>,
}

const COMMON: &str = include_str!("../../../../shaders/common.wgsl");
/// Params and epilogue of the matrix-product kernels.
const MATMUL_PARAMS: &str = include_str!("../../../../shaders/matmul_params.wgsl");
const BYTES: &str = include_str!("../../../../shaders/decode/bytes.wgsl");
/// The packed 6-bit scales and mins of Q4_K and Q5_K blocks.
const KSCALES: &str = include_str!("../../../../shaders/decode/kscales.wgsl");
/// `layer_norm` / `wkv_out`: the workgroup sum of one f32 per invocation.
const WG_SUM1: &str = include_str!("../../../../shaders/wg_sum.wgsl");
/// `matvec` / `matvec_group`: x rows and one lane's steps over a row.
const MV_ROW: &str = include_str!("../../../../shaders/matvec/row.wgsl");
/// The LoRA term of the matrix × vector kernels (`LORA = 1`), with `h` from an earlier
/// dispatch…
const LORA_ON: &str = include_str!("../../../../shaders/matvec/lora.wgsl");
/// …or made by the kernel's first workgroups (`HPROD = 1`, one-token `matvec` only)…
const LORA_HPROD: &str = include_str!("../../../../shaders/matvec/lora_hprod.wgsl");
/// …or none.
const LORA_OFF: &str = include_str!("../../../../shaders/matvec/lora_off.wgsl");
/// The fields `HPROD = 1` adds to the product's Params (mirrored by `HParams` in
/// `ops/matmul/hprod.rs`).
const HP_FIELDS: &str = "hp_wgs: u32,
    hp_rows: u32,
    hp_set: u32,
    hp_reset: u32,
    hp_scale: f32,
    hp_spin: u32,
    _hp0: u32,
    _hp1: u32,";

/// Matrix products write into the activations…
const OUT_ACT: &str = "
fn y_load(i: u32) -> f32 { return act[i]; }
fn y_store(i: u32, v: f32) { act[i] = v; }
";

/// …or into a separate output buffer (logits).
const OUT_SEP: &str = "
@group(0) @binding(5) var<storage, read_write> out: array<f32>; // [R, vocab] logits
fn y_load(i: u32) -> f32 { return out[i]; }
fn y_store(i: u32, v: f32) { out[i] = v; }
";

/// `matmul_coop` with a LoRA term (`LORA = 1`): `B h` as extra k-steps of the tile loop,
/// the f16 `B` blocks read 8 halves at a time.
const COOP_LORA_ON: &str = "
@group(0) @binding(7) var<storage, read> lora4: array<vec4<u32>>; // B blocks, f16
const COOP_LORA: bool = true;
fn lora_w8(i: u32) -> vec4<u32> { return lora4[i]; }
";

const COOP_LORA_OFF: &str = "
const COOP_LORA: bool = false;
fn lora_w8(i: u32) -> vec4<u32> { return vec4<u32>(0u); }
";

/// `matvec` sees the activations as vec4s: scalar access to the outputs.
const MV_OUT_ACT: &str = "
fn y_load(i: u32) -> f32 { return act[i >> 2u][i & 3u]; }
fn y_store(i: u32, v: f32) { act[i >> 2u][i & 3u] = v; }
";

const MV_OUT_SEP: &str = "
@group(0) @binding(6) var<storage, read_write> out: array<f32>; // [R, vocab] logits
fn y_load(i: u32) -> f32 { return out[i]; }
fn y_store(i: u32, v: f32) { out[i] = v; }
";

/// `matmul_coop`'s prefetch pair for encodings without one of their own (Q4_K has its own
/// in shaders/decode/q4_k.wgsl): nothing is loaded ahead, `cvt8` decodes as `dec8`.
const COOP_RAW_GENERIC: &str = "
struct R8 { rb: u32, k: u32 }
fn raw8(rb: u32, k: u32) -> R8 { return R8(rb, k); }
fn cvt8(r: R8, k: u32) -> W8 { return dec8(r.rb, r.k); }
";

/// `matmul_coop` also sees the activations as vec4s; its logits binding is 6.
const COOP_OUT_SEP: &str = "
@group(0) @binding(6) var<storage, read_write> out: array<f32>; // [R, vocab] logits
fn y_load(i: u32) -> f32 { return out[i]; }
fn y_store(i: u32, v: f32) { out[i] = v; }
";

/// A single product (`matmul_coop`, `matmul_reduce`): `p` is the params uniform, the k
/// slices the KSPLIT specialisation, W and the slices at offset 0 of their bindings.
const GROUP_OFF: &str = "
fn enter(x: u32) -> u32 { return x; }
fn enter_elems(i: u32, t_count: u32) -> u32 { return i; }
fn slices() -> u32 { return KSPLIT; }
fn part_base() -> u32 { return 0u; }
fn w_base() -> u32 { return 0u; }
";

/// The products of a `matmul_group` (GROUP = 1): binding 1 holds their table, and `enter`
/// (a workgroup's x) or `enter_elems` (a reduce element) sets `gs` to the one it serves;
/// every `p.field` of the kernel reads `g.seg[gs].field` ([`group_params`]). (A private
/// copy of the product's Params held all of it in registers: the grouped r, k, v tiles ran
/// at one workgroup per SM, H100.)
const GROUP_ON: &str = "
struct Group {
    nseg: u32,
    _g0: u32,
    _g1: u32,
    _g2: u32,
    wg0: array<vec4<u32>, 2>, // first workgroup x of each product
    seg: array<Params, 8>,
}
@group(0) @binding(1) var<uniform> g: Group;
var<private> gs: u32;
fn enter(x: u32) -> u32 {
    var s = 0u;
    for (var i = 1u; i < g.nseg; i++) {
        if (x >= g.wg0[i >> 2u][i & 3u]) {
            s = i;
        }
    }
    gs = s;
    return x - g.wg0[s >> 2u][s & 3u];
}
fn enter_elems(i: u32, t_count: u32) -> u32 {
    var r = i;
    for (var s = 0u; s < g.nseg; s++) {
        let e = t_count * g.seg[s].n;
        if (r < e) {
            gs = s;
            return r;
        }
        r -= e;
    }
    return 0xffffffffu; // past every product
}
fn slices() -> u32 { return p.ksplit; }
fn part_base() -> u32 { return p.part_off; }
fn w_base() -> u32 { return p.w_off; }
";

/// Sum over the LANES lanes of a row (consecutive invocations) for `matvec`: subgroup
/// shuffles when a subgroup is known to hold whole rows (SG = 1)…
const ROW_SUM_SG: &str = "
fn row_sum(v: vec4<f32>, li: u32, nt: u32) -> vec4<f32> {
    var s = v;
    if (nt == 1u) {
        // One token (decode): a quarter of the shuffles.
        for (var o = LANES / 2u; o > 0u; o >>= 1u) {
            s.x += subgroupShuffleXor(s.x, o);
        }
        return s;
    }
    for (var o = LANES / 2u; o > 0u; o >>= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}
";

/// …or, for rows wider than a subgroup (LANES = 64–256, SG = 2, subgroups of ≥ 32):
/// shuffles within each 32 lanes, then the row's LANES / 32 partial sums through
/// workgroup memory (one barrier instead of a tree's log2(LANES))…
const ROW_SUM_SG_WG: &str = "
var<workgroup> red: array<vec4<f32>, 8>;
fn row_sum(v: vec4<f32>, li: u32, nt: u32) -> vec4<f32> {
    var s = v;
    if (nt == 1u) {
        for (var o = 16u; o > 0u; o >>= 1u) {
            s.x += subgroupShuffleXor(s.x, o);
        }
    } else {
        for (var o = 16u; o > 0u; o >>= 1u) {
            s += subgroupShuffleXor(s, o);
        }
    }
    if (li % 32u == 0u) {
        red[li / 32u] = s;
    }
    workgroupBarrier();
    var t = vec4<f32>(0.0);
    let first = (li / LANES) * (LANES / 32u);
    for (var i = 0u; i < LANES / 32u; i++) {
        t += red[first + i];
    }
    return t;
}
";

/// …or a tree in workgroup memory.
const ROW_SUM_WG: &str = "
var<workgroup> red: array<vec4<f32>, 256>;
fn row_sum(v: vec4<f32>, li: u32, nt: u32) -> vec4<f32> {
    red[li] = v;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if ((li % LANES) < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
    return red[li];
}
";

/// Sum over a workgroup of WG invocations (`ln_shift`): subgroup sums, then the
/// subgroups' partial sums through workgroup memory…
const WG_SUM_SG: &str = "
var<workgroup> part: array<vec4<f32>, 256>;
fn wg_sum(v: vec4<f32>, li: u32, sgid: u32, sgs: u32) -> vec4<f32> {
    let s = subgroupAdd(v);
    if (sgid == 0u) {
        part[li / sgs] = s;
    }
    workgroupBarrier();
    var t = vec4<f32>(0.0);
    for (var i = 0u; i < WG / sgs; i++) {
        t += part[i];
    }
    workgroupBarrier();
    return t;
}
";

/// …or a tree in workgroup memory.
const WG_SUM_TREE: &str = "
var<workgroup> part: array<vec4<f32>, 256>;
fn wg_sum(v: vec4<f32>, li: u32) -> vec4<f32> {
    part[li] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            part[li] += part[li + s];
        }
        workgroupBarrier();
    }
    let t = part[0];
    workgroupBarrier();
    return t;
}
";

/// Sum over the TPR threads of a row of S for `wkv` (subgroup shuffles; TPR = 1: none).
const TPR_SUM_SG: &str = "
fn tpr_sum(v: f32) -> f32 {
    var s = v;
    for (var o = TPR / 2u; o > 0u; o >>= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}
";

const TPR_SUM_ONE: &str = "
fn tpr_sum(v: f32) -> f32 {
    return v;
}
";

/// The `matvec` step for an encoding (shaders/matvec/), generic on top of `dec8`.
fn matvec_step(dtype: Option<DType>) -> &'static str {
    match dtype {
        Some(DType::F16) => include_str!("../../../../shaders/matvec/f16.wgsl"),
        Some(DType::F32) => include_str!("../../../../shaders/matvec/f32.wgsl"),
        Some(DType::Q4_K) => include_str!("../../../../shaders/matvec/q4_k.wgsl"),
        Some(DType::Q6_K) => include_str!("../../../../shaders/matvec/q6_k.wgsl"),
        _ => include_str!("../../../../shaders/matvec/generic.wgsl"),
    }
}

fn spec(key: &PipelineKey, name: &str) -> Option<u32> {
    key.spec.iter().find(|&&(n, _)| n == name).map(|&(_, v)| v)
}

/// WGSL source for an op's shader, with the decode snippet of `dtype` and the `spec`
/// values as `const`s prepended.
pub fn shader_source(key: &PipelineKey) -> Result<String> {
    let body = match key.op {
        "embed" => include_str!("../../../../shaders/embed.wgsl"),
        "layer_norm" => include_str!("../../../../shaders/layer_norm.wgsl"),
        "ln_shift" => include_str!("../../../../shaders/ln_shift.wgsl"),
        "matmul" => include_str!("../../../../shaders/matmul.wgsl"),
        "matmul_coop" => include_str!("../../../../shaders/matmul_coop.wgsl"),
        "matmul_reduce" => include_str!("../../../../shaders/matmul_reduce.wgsl"),
        "matvec" => include_str!("../../../../shaders/matvec.wgsl"),
        "matvec_group" => include_str!("../../../../shaders/matvec_group.wgsl"),
        "wkv_prep" => include_str!("../../../../shaders/wkv_prep.wgsl"),
        "wkv" => include_str!("../../../../shaders/wkv.wgsl"),
        "wkv_fused" => include_str!("../../../../shaders/wkv_fused.wgsl"),
        "wkv_out" => include_str!("../../../../shaders/wkv_out.wgsl"),
        "gather_rows" => include_str!("../../../../shaders/gather_rows.wgsl"),
        other => {
            return Err(EngineError::Op {
                op: "pipeline",
                what: format!("no shader for op `{other}`"),
            })
        }
    };
    let decode = match key.dtype {
        None => "",
        Some(DType::F32) => include_str!("../../../../shaders/decode/f32.wgsl"),
        Some(DType::F16) => include_str!("../../../../shaders/decode/f16.wgsl"),
        Some(DType::BF16) => include_str!("../../../../shaders/decode/bf16.wgsl"),
        Some(DType::Q8_0) => include_str!("../../../../shaders/decode/q8_0.wgsl"),
        Some(DType::Q4_K) => include_str!("../../../../shaders/decode/q4_k.wgsl"),
        Some(DType::Q5_K) => include_str!("../../../../shaders/decode/q5_k.wgsl"),
        Some(DType::Q6_K) => include_str!("../../../../shaders/decode/q6_k.wgsl"),
        Some(other) => {
            return Err(EngineError::Op {
                op: key.op,
                what: format!("no GPU decode for {other} (it is converted to F16 at load)"),
            })
        }
    };
    let mut src = String::with_capacity(COMMON.len() + decode.len() + body.len() + 256);
    if key.op == "matmul_coop" {
        // Directives come before every declaration.
        src.push_str("enable f16;\nenable wgpu_cooperative_matrix;\n");
    }
    for (name, value) in &key.spec {
        src.push_str(&format!("const {name}: u32 = {value}u;\n"));
    }
    src.push_str(COMMON);
    if key.dtype.is_some() {
        src.push_str(BYTES);
    }
    if matches!(key.dtype, Some(DType::Q4_K | DType::Q5_K)) {
        src.push_str(KSCALES);
    }
    src.push_str(decode);
    let sep = spec(key, "OUT_SEP") == Some(1);
    if key.op == "matmul" {
        src.push_str(if sep { OUT_SEP } else { OUT_ACT });
    }
    if key.op == "matmul_coop" {
        if key.dtype != Some(DType::Q4_K) {
            src.push_str(COOP_RAW_GENERIC);
        }
        src.push_str(if sep { COOP_OUT_SEP } else { MV_OUT_ACT });
        src.push_str(if spec(key, "LORA") == Some(1) {
            COOP_LORA_ON
        } else {
            COOP_LORA_OFF
        });
        src.push_str(if spec(key, "KSPLIT").unwrap_or(1) > 1 {
            "@group(0) @binding(6) var<storage, read_write> part: array<f32>; // [KSPLIT][T][N]
fn y_part(i: u32, v: f32) { part[i] = v; }
"
        } else {
            "fn y_part(i: u32, v: f32) {}\n"
        });
    }
    let mut body = body.to_string();
    if key.op == "ln_shift" {
        let sg = spec(key, "SG") == Some(1);
        src.push_str(if sg { WG_SUM_SG } else { WG_SUM_TREE });
        body = if sg {
            body.replace(
                "/*SG_ARGS*/",
                ",\n        @builtin(subgroup_invocation_id) sgid: u32, @builtin(subgroup_size) sgs: u32",
            )
            .replace(" SG_PASS", ", sgid, sgs")
        } else {
            body.replace(" SG_PASS", "")
        };
    }
    if matches!(key.op, "layer_norm" | "wkv_out") {
        src.push_str(WG_SUM1);
    }
    if matches!(key.op, "wkv" | "wkv_fused") {
        src.push_str(if spec(key, "TPR").unwrap_or(1) > 1 {
            TPR_SUM_SG
        } else {
            TPR_SUM_ONE
        });
    }
    if matches!(key.op, "matvec" | "matvec_group") && spec(key, "NT1").is_none() {
        src.push_str("const NT1: u32 = 0u;\n");
    }
    if matches!(key.op, "matvec" | "matvec_group") && spec(key, "HPROD").is_none() {
        src.push_str("const HPROD: u32 = 0u;\n");
    }
    if matches!(key.op, "matvec" | "matvec_group") {
        src.push_str(if sep { MV_OUT_SEP } else { MV_OUT_ACT });
        src.push_str(match spec(key, "SG") {
            Some(1) => ROW_SUM_SG,
            Some(2) => ROW_SUM_SG_WG,
            _ => ROW_SUM_WG,
        });
        src.push_str(matvec_step(key.dtype));
        src.push_str(MV_ROW);
        // A group's second encoding (F32 beside F16, or F16 beside F32), its step
        // renamed (the F32 step has no helpers of its own, so nothing else collides).
        if key.op == "matvec_group" {
            let text = if spec(key, "DT2") == Some(1) {
                let second = if key.dtype == Some(DType::F16) {
                    DType::F32
                } else {
                    DType::F16
                };
                matvec_step(Some(second))
                    .replace("mv_step", "mv_step2")
                    .replace("MV_STEP", "MV_STEP2")
            } else {
                // Never called; keeps the kernel's call site valid.
                "const MV_STEP2: u32 = 32u;\nfn mv_step2(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> { return vec4<f32>(0.0); }\n".to_string()
            };
            src.push_str(&text);
            // `mv_row2` over `mv_step2` (the x-row helper is not repeated).
            let row = &MV_ROW[MV_ROW.find("fn mv_row(").unwrap_or(0)..];
            src.push_str(
                &row.replace("mv_row", "mv_row2")
                    .replace("mv_step", "mv_step2")
                    .replace("MV_STEP", "MV_STEP2"),
            );
            // Source 2: F16 matrices in a second buffer (binding 8), `mv_row3`.
            if spec(key, "SRC2") == Some(1) {
                src.push_str("@group(0) @binding(8) var<storage, read> wb4: array<vec4<u32>>;\n");
                src.push_str(
                    &matvec_step(Some(DType::F16))
                        .replace("mv_step", "mv_step3")
                        .replace("MV_STEP", "MV_STEP3")
                        .replace("h4(", "h4_3(")
                        .replace("w4[", "wb4["),
                );
            } else {
                src.push_str("const MV_STEP3: u32 = 32u;\nfn mv_step3(rb: u32, g: u32, xb: vec4<u32>, nt: u32) -> vec4<f32> { return vec4<f32>(0.0); }\n");
            }
            src.push_str(
                &row.replace("mv_row", "mv_row3")
                    .replace("mv_step", "mv_step3")
                    .replace("MV_STEP", "MV_STEP3"),
            );
        }
    }
    if matches!(key.op, "matvec" | "matvec_group") {
        src.push_str(match (spec(key, "LORA"), spec(key, "HPROD")) {
            (Some(1), Some(1)) => LORA_HPROD,
            (Some(1), _) => LORA_ON,
            _ => LORA_OFF,
        });
    }
    if matches!(
        key.op,
        "matmul" | "matvec" | "matmul_coop" | "matmul_reduce"
    ) {
        let fields = if spec(key, "HPROD") == Some(1) {
            HP_FIELDS
        } else {
            ""
        };
        src.push_str(&MATMUL_PARAMS.replace("/*HP_FIELDS*/", fields));
    }
    let group = matches!(key.op, "matmul_coop" | "matmul_reduce") && spec(key, "GROUP") == Some(1);
    if matches!(key.op, "matmul_coop" | "matmul_reduce") {
        if group {
            src.push_str(GROUP_ON);
            body = body.replace("@group(0) @binding(1) var<uniform> p: Params;", "");
        } else {
            src.push_str(GROUP_OFF);
        }
    }
    src.push_str(&body);
    if group {
        src = group_params(&src);
    }
    Ok(src)
}

/// `src` with every field access `p.name` (not part of a longer identifier) read from
/// the group's table: `g.seg[gs].name`.
fn group_params(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len() + 4096);
    let mut last = 0;
    for i in 0..b.len().saturating_sub(2) {
        let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        let starts = i == 0 || !ident(b[i - 1]);
        if starts && b[i] == b'p' && b[i + 1] == b'.' && b[i + 2].is_ascii_alphabetic() {
            out.push_str(&src[last..i]);
            out.push_str("g.seg[gs].");
            last = i + 2;
        }
    }
    out.push_str(&src[last..]);
    out
}

/// Encodings the GPU kernels read directly; others are converted to F16 at load.
pub fn gpu_native(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::Q8_0
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
    )
}

/// Whether shaders may be built without wgpu's runtime bounds checks: on Vulkan (where
/// robust buffer access stands behind them) unless `RWKV_CHECKED_SHADERS` is set
/// ([`crate::gpu::Tuning::checked_shaders`]).
pub(crate) fn unchecked_ok(ctx: &GpuContext) -> bool {
    ctx.adapter.get_info().backend == wgpu::Backend::Vulkan && !ctx.tuning.checked_shaders
}

pub use crate::gpu::pipeline_cache::{Pipeline, PipelineCache};

#[cfg(test)]
mod tests;
