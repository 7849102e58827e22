//! Every kernel variant the engine can ask for (each spec type with each encoding and
//! specialisation), and the tests over all of them: each parses and validates, the
//! bindings the cache derives are the ones the shader uses, and specs are complete and
//! exact pipeline keys.

use crate::format::DType;
use crate::gpu::pipeline::{KernelSpec, SpecKey};
use crate::ops::argmax::{AdjustSpec, ArgmaxSpec};
use crate::ops::candidates::CandidatesSpec;
use crate::ops::embed::EmbedSpec;
use crate::ops::gather_rows::GatherRowsSpec;
use crate::ops::layer_norm::LayerNormSpec;
use crate::ops::ln_shift::LnShiftSpec;
use crate::ops::matmul::{
    mv_unroll, CoopSpec, LnEnd, MatmulSpec, MatvecLora, MatvecSpec, Q8Handoff, ReduceSpec, RowSum,
    COOP_TILES,
};
use crate::ops::matvec_group::MatvecGroupSpec;
use crate::ops::wkv::WkvSpec;
use crate::ops::wkv_fused::WkvFusedSpec;
use crate::ops::wkv_out::WkvOutSpec;
use crate::ops::wkv_prep::WkvPrepSpec;

/// A spec of any kernel family.
#[derive(Debug, Clone)]
pub(crate) enum Variant {
    Embed(EmbedSpec),
    Matmul(MatmulSpec),
    Coop(CoopSpec),
    Reduce(ReduceSpec),
    Matvec(MatvecSpec),
    Group(MatvecGroupSpec),
    Wkv(WkvSpec),
    WkvFused(WkvFusedSpec),
    LayerNorm(LayerNormSpec),
    WkvPrep(WkvPrepSpec),
    WkvOut(WkvOutSpec),
    GatherRows(GatherRowsSpec),
    Argmax(ArgmaxSpec),
    Adjust(AdjustSpec),
    Candidates(CandidatesSpec),
    LnShift(LnShiftSpec),
}

/// Calls `$f` with the spec inside a [`Variant`].
macro_rules! with_spec {
    ($v:expr, $s:ident => $e:expr) => {
        match $v {
            Variant::Embed($s) => $e,
            Variant::Matmul($s) => $e,
            Variant::Coop($s) => $e,
            Variant::Reduce($s) => $e,
            Variant::Matvec($s) => $e,
            Variant::Group($s) => $e,
            Variant::Wkv($s) => $e,
            Variant::WkvFused($s) => $e,
            Variant::LayerNorm($s) => $e,
            Variant::WkvPrep($s) => $e,
            Variant::WkvOut($s) => $e,
            Variant::GatherRows($s) => $e,
            Variant::Argmax($s) => $e,
            Variant::Adjust($s) => $e,
            Variant::Candidates($s) => $e,
            Variant::LnShift($s) => $e,
        }
    };
}

impl Variant {
    pub fn source(&self) -> crate::error::Result<String> {
        with_spec!(self, s => s.source())
    }

    pub fn key(&self) -> SpecKey {
        with_spec!(self, s => SpecKey::new(s))
    }
}

/// Every encoding the kernels read.
const DTYPES: [DType; 7] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

/// (lanes, row sum) pairs that cover every row-sum snippet with narrow and wide rows.
const LANES: [(u32, RowSum); 6] = [
    (4, RowSum::Subgroup),
    (32, RowSum::Subgroup),
    (32, RowSum::Tree),
    (256, RowSum::Tree),
    (128, RowSum::Subgroup32),
    (256, RowSum::Subgroup32),
];

/// The product kernels of one encoding, writing the activations or (`logits`) the
/// logits buffer, as the graph asks for them (no LoRA term yet).
fn products(d: DType, logits: bool, out: &mut Vec<Variant>) {
    let unroll = mv_unroll(&crate::gpu::Tuning::default(), d);
    out.push(Variant::Matmul(MatmulSpec { dtype: d, logits }));
    let coop = |(bm, bn, wm): (u32, u32, u32), ksplit, bt, rotate| {
        Variant::Coop(CoopSpec {
            dtype: d,
            logits,
            bm,
            bn,
            wm,
            ksplit,
            pf2: d == DType::F16 && bm == 128,
            lora: false,
            group: false,
            bt,
            rotate,
        })
    };
    for tile in COOP_TILES {
        for ksplit in [1, 4] {
            if logits && ksplit > 1 {
                continue;
            }
            out.push(coop(tile, ksplit, false, false));
        }
    }
    // The transposed W tile and the rotated steps, on the large tile and the small one.
    if !logits {
        for tile in [COOP_TILES[0], COOP_TILES[2]] {
            for (bt, rotate) in [(true, false), (false, true), (true, true)] {
                out.push(coop(tile, 4, bt, rotate));
            }
        }
    }
    for (lanes, row_sum) in LANES {
        for one_token in [false, true] {
            out.push(Variant::Matvec(MatvecSpec {
                dtype: d,
                logits,
                lanes,
                row_sum,
                one_token,
                lora: MatvecLora::None,
                unroll,
                wide: false,
                q8k: 0,
                rows: 1,
                q8_pair: false,
                wide_q8: 0,
                ln: LnEnd::None,
                x8: Q8Handoff::None,
            }));
        }
        if matches!(d, DType::Q4_K | DType::Q6_K) && !logits {
            // 8-bit x, at the two depths of a 2.9B model's products, with 16- and
            // 64-value steps (Q4_K; Q6_K has one step).
            let pairs: &[bool] = match d {
                DType::Q4_K => &[false, true],
                _ => &[false],
            };
            for q8k in [2560, 10240] {
                for &q8_pair in pairs {
                    out.push(Variant::Matvec(MatvecSpec {
                        dtype: d,
                        logits,
                        lanes,
                        row_sum,
                        one_token: true,
                        lora: MatvecLora::None,
                        unroll,
                        wide: false,
                        q8k,
                        rows: if q8k == 2560 { 1 } else { 2 },
                        q8_pair,
                        wide_q8: 0,
                        ln: LnEnd::None,
                        x8: Q8Handoff::None,
                    }));
                }
            }
            // The ends of a fused LayerNorm + token shift: the key's prologue (shuffles:
            // kernels on subgroups), the value's save of the shift state, and the value
            // that opens the next block (its tail's sums: shuffles), with or without a save.
            for ln in [LnEnd::In, LnEnd::Out, LnEnd::Next, LnEnd::NextOnly] {
                if ln != LnEnd::Out && row_sum == RowSum::Tree {
                    continue;
                }
                let q8k = if ln == LnEnd::In { 2560 } else { 10240 };
                out.push(Variant::Matvec(MatvecSpec {
                    dtype: d,
                    logits,
                    lanes,
                    row_sum,
                    one_token: true,
                    lora: MatvecLora::None,
                    unroll,
                    wide: false,
                    q8k,
                    rows: 2,
                    q8_pair: d == DType::Q4_K,
                    wide_q8: 0,
                    ln,
                    x8: Q8Handoff::None,
                }));
            }
            // The key that hands its ReLU² on as 8-bit x (8 lanes, 32 rows a workgroup)
            // and the value that reads it, with or without the next block's tail.
            let handoff = [
                (LnEnd::In, Q8Handoff::Writes),
                (LnEnd::Out, Q8Handoff::Reads),
                (LnEnd::Next, Q8Handoff::Reads),
            ];
            for (ln, x8) in handoff {
                let writes = x8 == Q8Handoff::Writes;
                // (The key's lanes are its own: once, beside the subgroup row sums.)
                let once = !writes || (lanes, row_sum) == (32, RowSum::Subgroup);
                if d != DType::Q4_K || row_sum == RowSum::Tree || !once {
                    continue;
                }
                out.push(Variant::Matvec(MatvecSpec {
                    dtype: d,
                    logits,
                    lanes: if writes { 8 } else { lanes },
                    row_sum,
                    one_token: true,
                    lora: MatvecLora::None,
                    unroll,
                    wide: false,
                    q8k: if writes { 2560 } else { 10240 },
                    rows: 1,
                    q8_pair: true,
                    wide_q8: 0,
                    ln,
                    x8,
                }));
            }
        }
        if logits {
            continue;
        }
        if d == DType::Q4_K {
            out.push(Variant::Matvec(MatvecSpec {
                dtype: d,
                logits,
                lanes,
                row_sum,
                one_token: false,
                lora: MatvecLora::None,
                unroll,
                wide: true,
                q8k: 0,
                rows: 1,
                q8_pair: false,
                wide_q8: 0,
                ln: LnEnd::None,
                x8: Q8Handoff::None,
            }));
            // With 8-bit x, a chunk of 2,560 (both depths of a 2.9B model) and of 256.
            for wide_q8 in [2560, 256] {
                out.push(Variant::Matvec(MatvecSpec {
                    dtype: d,
                    logits,
                    lanes,
                    row_sum,
                    one_token: false,
                    lora: MatvecLora::None,
                    unroll,
                    wide: true,
                    q8k: 0,
                    rows: 1,
                    q8_pair: false,
                    wide_q8,
                    ln: LnEnd::None,
                    x8: Q8Handoff::None,
                }));
            }
        }
        for second in [false, true] {
            if second && !matches!(d, DType::F16 | DType::F32) {
                continue;
            }
            for (second_buffer, one_token) in [(false, false), (true, false), (true, true)] {
                out.push(Variant::Group(MatvecGroupSpec {
                    dtype: d,
                    lanes,
                    row_sum,
                    second,
                    second_buffer,
                    lora: false,
                    one_token,
                    unroll,
                    wide: false,
                    q8k: 0,
                    q8_pair: false,
                    wide_q8: 0,
                }));
            }
        }
        if d == DType::Q4_K {
            let wide = MatvecGroupSpec {
                dtype: d,
                lanes,
                row_sum,
                second: false,
                second_buffer: false,
                lora: false,
                one_token: false,
                unroll,
                wide: true,
                q8k: 0,
                q8_pair: false,
                wide_q8: 0,
            };
            // And with 8-bit x a chunk of 2,560 (r, k and v of a 2.9B model).
            out.push(Variant::Group(MatvecGroupSpec {
                wide_q8: 2560,
                ..wide.clone()
            }));
            // And one token with 8-bit x (r, k and v of a 2.9B model), 16- and 64-value steps.
            for q8_pair in [false, true] {
                out.push(Variant::Group(MatvecGroupSpec {
                    one_token: true,
                    wide: false,
                    q8k: 2560,
                    q8_pair,
                    ..wide.clone()
                }));
            }
            out.push(Variant::Group(wide));
        }
    }
}

/// Every variant the engine can ask for: each kernel with each encoding and
/// specialisation, the tensor-core tiles also grouped, every product kernel also with the
/// LoRA term, the one-token products also making their own h.
pub(crate) fn every_variant() -> Vec<Variant> {
    let mut all = Vec::new();
    for d in DTYPES {
        all.push(Variant::Embed(EmbedSpec { dtype: d }));
        for logits in [false, true] {
            products(d, logits, &mut all);
        }
    }
    for tpr in [1, 4] {
        for rows in [8, 16, 64] {
            all.push(Variant::Wkv(WkvSpec { tpr, rows }));
        }
        for staged in [false, true] {
            all.push(Variant::WkvFused(WkvFusedSpec { tpr, staged }));
        }
    }
    all.push(Variant::LayerNorm(LayerNormSpec));
    all.push(Variant::WkvPrep(WkvPrepSpec));
    all.push(Variant::WkvOut(WkvOutSpec));
    all.push(Variant::GatherRows(GatherRowsSpec));
    all.push(Variant::Argmax(ArgmaxSpec));
    all.push(Variant::Adjust(AdjustSpec));
    all.push(Variant::Candidates(CandidatesSpec));
    all.push(Variant::Reduce(ReduceSpec {
        ksplit: 4,
        group: false,
    }));
    // The grouped products (`matmul_group`): tile kernels, split or not, and the reduce.
    let grouped: Vec<Variant> = all
        .iter()
        .filter_map(|v| match v {
            Variant::Coop(c) if !c.logits => Some(Variant::Coop(CoopSpec {
                group: true,
                ..c.clone()
            })),
            _ => None,
        })
        .collect();
    all.extend(grouped);
    all.push(Variant::Reduce(ReduceSpec {
        ksplit: 2,
        group: true,
    }));
    for subgroups in [false, true] {
        for scalar_out in [false, true] {
            all.push(Variant::LnShift(LnShiftSpec {
                subgroups,
                scalar_out,
            }));
        }
    }
    // Every product kernel also with the LoRA term (never on the logits).
    let with_lora: Vec<Variant> = all
        .iter()
        .filter_map(|v| match v {
            Variant::Coop(c) if !c.logits => Some(Variant::Coop(CoopSpec {
                lora: true,
                ..c.clone()
            })),
            Variant::Matvec(m) if !m.logits && !m.wide && m.q8k == 0 => {
                Some(Variant::Matvec(MatvecSpec {
                    lora: MatvecLora::Term,
                    ..m.clone()
                }))
            }
            Variant::Group(g) if !g.wide && g.q8k == 0 => Some(Variant::Group(MatvecGroupSpec {
                lora: true,
                ..g.clone()
            })),
            _ => None,
        })
        .collect();
    assert!(with_lora.len() > 10);
    // One-token products that make their LoRA term's h themselves.
    let makes_h: Vec<Variant> = with_lora
        .iter()
        .filter_map(|v| match v {
            Variant::Matvec(m) if m.one_token => Some(Variant::Matvec(MatvecSpec {
                lora: MatvecLora::MakesH,
                ..m.clone()
            })),
            _ => None,
        })
        .collect();
    assert!(makes_h.len() > 5);
    all.extend(with_lora);
    all.extend(makes_h);
    all
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Every shader variant parses and validates (naga, with the capabilities its
    /// adapter would grant), including the cooperative-matrix kernel that lavapipe
    /// cannot run.
    #[test]
    fn every_variant_validates() -> Result<(), String> {
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        let caps = Capabilities::SHADER_FLOAT16
            | Capabilities::SHADER_FLOAT16_IN_FLOAT32
            | Capabilities::SUBGROUP
            | Capabilities::COOPERATIVE_MATRIX;
        for v in every_variant() {
            let src = v.source().map_err(|e| format!("{v:?}: {e}"))?;
            let module = naga::front::wgsl::parse_str(&src)
                .map_err(|e| format!("{v:?}: {}", e.emit_to_string(&src)))?;
            let info = Validator::new(ValidationFlags::all(), caps)
                .validate(&module)
                .map_err(|e| format!("{v:?}: {}", e.emit_to_string(&src)))?;
            // The layout the cache builds from the declarations is the one wgpu would
            // derive from the shader: every declared binding is used, with its access.
            let ep = info.get_entry_point(0);
            let mut used: Vec<(u32, Option<bool>)> = module
                .global_variables
                .iter()
                .filter(|(h, _)| !ep[*h].is_empty())
                .filter_map(|(_, g)| {
                    let b = g.binding.as_ref()?;
                    let access = match g.space {
                        naga::AddressSpace::Uniform => None,
                        naga::AddressSpace::Storage { access } => {
                            Some(!access.contains(naga::StorageAccess::STORE))
                        }
                        _ => return None,
                    };
                    Some((b.binding, access))
                })
                .collect();
            used.sort_by_key(|e| e.0);
            assert_eq!(
                crate::gpu::pipeline::cache::declared_bindings(&src),
                used,
                "{v:?}: declared bindings differ from the ones the shader uses"
            );
        }
        Ok(())
    }

    /// Specs are exact keys: distinct variants are distinct keys, and every field of a
    /// spec changes its shader (two distinct variants never have the same source, so no
    /// field keeps apart pipelines that would be the same).
    #[test]
    fn distinct_specs_are_distinct_keys_and_shaders() {
        let all = every_variant();
        let keys: HashSet<SpecKey> = all.iter().map(Variant::key).collect();
        assert_eq!(keys.len(), all.len(), "a variant listed twice");
        let sources: HashSet<String> = all
            .iter()
            .map(|v| v.source().unwrap_or_else(|e| panic!("{v:?}: {e}")))
            .collect();
        assert_eq!(sources.len(), all.len(), "two specs with one shader");
    }

    /// The cache holds one pipeline per spec: equal specs (of one family) share it, specs
    /// that differ in any field — or of two families — get one each.
    #[test]
    fn two_specs_two_pipelines_equal_specs_one() {
        use crate::ops::testing::Harness;
        let h = Harness::new(crate::ops::Dims::default());
        let (gpu, cache) = (&h.gpu, &h.pipelines);
        let a = WkvSpec { tpr: 1, rows: 64 };
        let p1 = cache.get(gpu, &a).unwrap();
        let p2 = cache.get(gpu, &a.clone()).unwrap();
        assert!(std::sync::Arc::ptr_eq(&p1, &p2));
        assert_eq!(cache.len(), 1);
        let p3 = cache.get(gpu, &WkvSpec { tpr: 1, rows: 16 }).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&p1, &p3));
        assert_eq!(cache.len(), 2);
        cache
            .get(
                gpu,
                &WkvFusedSpec {
                    tpr: 1,
                    staged: false,
                },
            )
            .unwrap();
        cache.get(gpu, &LayerNormSpec).unwrap();
        cache.get(gpu, &LayerNormSpec).unwrap();
        assert_eq!(cache.len(), 4);
        // A matrix × vector kernel that differs only in its unrolling (a tuning knob).
        let m = MatvecSpec {
            dtype: DType::F16,
            logits: false,
            lanes: 32,
            row_sum: RowSum::Tree,
            one_token: true,
            lora: MatvecLora::None,
            unroll: 2,
            wide: false,
            q8k: 0,
            rows: 1,
            q8_pair: false,
            wide_q8: 0,
            ln: LnEnd::None,
            x8: Q8Handoff::None,
        };
        cache.get(gpu, &m).unwrap();
        cache
            .get(
                gpu,
                &MatvecSpec {
                    unroll: 1,
                    ..m.clone()
                },
            )
            .unwrap();
        cache.get(gpu, &m).unwrap();
        assert_eq!(cache.len(), 6);
        cache.finish().unwrap();
    }
}
