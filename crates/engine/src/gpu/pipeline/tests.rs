//! Every shader variant the engine can ask for parses and validates.

use super::*;

/// The keys of `keys` that `pick` takes, each with the specialisation `extra` added.
fn with_spec(
    keys: &[PipelineKey],
    extra: (&'static str, u32),
    pick: impl Fn(&PipelineKey) -> bool,
) -> Vec<PipelineKey> {
    keys.iter()
        .filter(|k| pick(k))
        .map(|k| {
            let mut k = k.clone();
            k.spec.push(extra);
            k
        })
        .collect()
}

/// Every pipeline key the engine can ask for: each op with each encoding and
/// specialisation, every product kernel also with the LoRA term.
fn every_key() -> Vec<PipelineKey> {
    let dtypes = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    let mut keys = Vec::new();
    for d in dtypes {
        let unr = crate::ops::matmul::mv_unroll(&crate::gpu::Tuning::default(), d);
        keys.push(PipelineKey {
            op: "embed",
            dtype: Some(d),
            spec: vec![],
        });
        for sep in [0, 1] {
            keys.push(PipelineKey {
                op: "matmul",
                dtype: Some(d),
                spec: vec![("OUT_SEP", sep)],
            });
            for (bm, bn, wm) in crate::ops::matmul::COOP_TILES {
                for ks in [1, 4] {
                    if sep == 1 && ks > 1 {
                        continue;
                    }
                    keys.push(PipelineKey {
                        op: "matmul_coop",
                        dtype: Some(d),
                        spec: vec![
                            ("OUT_SEP", sep),
                            ("BM", bm),
                            ("BN", bn),
                            ("WM", wm),
                            ("KSPLIT", ks),
                            ("W16", u32::from(d == DType::F16)),
                            ("PF2", u32::from(d == DType::F16 && bm == 128)),
                        ],
                    });
                }
            }
            for (lanes, sg) in [(4, 1), (32, 1), (32, 0), (256, 0), (128, 2), (256, 2)] {
                for nt1 in [0, 1] {
                    keys.push(PipelineKey {
                        op: "matvec",
                        dtype: Some(d),
                        spec: vec![
                            ("OUT_SEP", sep),
                            ("LANES", lanes),
                            ("SG", sg),
                            ("NT1", nt1),
                            ("UNR", unr),
                        ],
                    });
                }
                if sep == 0 {
                    for dt2 in [0, 1] {
                        if dt2 == 1 && !matches!(d, DType::F16 | DType::F32) {
                            continue;
                        }
                        for (src2, nt1) in [(0, 0), (1, 0), (1, 1)] {
                            keys.push(PipelineKey {
                                op: "matvec_group",
                                dtype: Some(d),
                                spec: vec![
                                    ("LANES", lanes),
                                    ("SG", sg),
                                    ("DT2", dt2),
                                    ("SRC2", src2),
                                    ("NT1", nt1),
                                    ("UNR", unr),
                                ],
                            });
                        }
                    }
                }
            }
        }
    }
    for tpr in [1, 4] {
        for rb in [8, 16, 64] {
            keys.push(PipelineKey {
                op: "wkv",
                dtype: None,
                spec: vec![("TPR", tpr), ("RB", rb)],
            });
        }
        keys.push(PipelineKey {
            op: "wkv_fused",
            dtype: None,
            spec: vec![("TPR", tpr)],
        });
    }
    for op in ["layer_norm", "wkv_prep", "wkv_out", "gather_rows"] {
        keys.push(PipelineKey {
            op,
            dtype: None,
            spec: vec![],
        });
    }
    keys.push(PipelineKey {
        op: "matmul_reduce",
        dtype: None,
        spec: vec![("KSPLIT", 4)],
    });
    // The grouped products (`matmul_group`): tile kernels, split or not, and the reduce.
    let grouped = with_spec(&keys, ("GROUP", 1), |k| {
        k.op == "matmul_coop" && spec(k, "OUT_SEP") == Some(0)
    });
    keys.extend(grouped);
    keys.push(PipelineKey {
        op: "matmul_reduce",
        dtype: None,
        spec: vec![("KSPLIT", 2), ("GROUP", 1)],
    });
    for sg in [0, 1] {
        keys.push(PipelineKey {
            op: "ln_shift",
            dtype: None,
            spec: vec![("SG", sg)],
        });
    }
    // Every product kernel also with the LoRA term (never on the logits).
    let with_lora = with_spec(&keys, ("LORA", 1), |k| {
        matches!(k.op, "matvec" | "matvec_group" | "matmul_coop") && spec(k, "OUT_SEP") != Some(1)
    });
    assert!(with_lora.len() > 10);
    // One-token products that make their LoRA term's h themselves.
    let hprod = with_spec(&with_lora, ("HPROD", 1), |k| {
        k.op == "matvec" && spec(k, "NT1") == Some(1)
    });
    assert!(hprod.len() > 5);
    keys.extend(with_lora);
    keys.extend(hprod);
    keys
}

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
    for key in every_key() {
        let src = shader_source(&key).map_err(|e| format!("{key:?}: {e}"))?;
        let module = naga::front::wgsl::parse_str(&src)
            .map_err(|e| format!("{key:?}: {}", e.emit_to_string(&src)))?;
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .map_err(|e| format!("{key:?}: {}", e.emit_to_string(&src)))?;
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
            crate::gpu::pipeline_cache::declared_bindings(&src),
            used,
            "{key:?}: declared bindings differ from the ones the shader uses"
        );
    }
    Ok(())
}
