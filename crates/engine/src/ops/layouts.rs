//! The uniform structs of every kernel variant, reflected from its WGSL with naga, against
//! their `#[repr(C)]` Rust mirrors: the same size, and every named member at the same
//! offset with the same size (padding members, `_…`, only through the total size). A
//! struct a uniform reaches without a mirror here fails the test.

use std::collections::BTreeMap;

use crate::ops::matmul::{MatvecLora, MAX_GROUP};
use crate::ops::variants::{every_variant, Variant};

/// A struct's size and named members: (name, offset, size), bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    size: usize,
    fields: BTreeMap<String, (usize, usize)>,
}

/// The [`Layout`] of the `#[repr(C)]` struct `$t` from its named fields.
macro_rules! layout {
    ($t:ty { $($f:ident),* $(,)? }) => {{
        let z: $t = bytemuck::Zeroable::zeroed();
        Layout {
            size: std::mem::size_of::<$t>(),
            fields: [$((
                stringify!($f).to_string(),
                (std::mem::offset_of!($t, $f), std::mem::size_of_val(&z.$f)),
            )),*]
            .into_iter()
            .collect(),
        }
    }};
}

fn dims() -> Layout {
    layout!(crate::ops::Dims {
        n_tokens,
        n_seqs,
        n_rows,
        t_cap,
        off_tok_seq,
        off_tok_pos,
        off_seqs,
        off_rows,
        max_len,
    })
}

/// `ops::matmul::Params` (shaders/product/params.wgsl).
fn product() -> Layout {
    layout!(crate::ops::matmul::Params {
        k,
        n,
        row0,
        row_bytes,
        x_off,
        x_stride,
        y_off,
        y_stride,
        act,
        accumulate,
        bias_off,
        rows_sel,
        scale,
        lora_rank,
        lora_h,
        lora_stride,
        lora_b,
        ksplit,
        part_off,
        w_off,
    })
}

/// `ops::matmul::hprod::HParams`: the product's Params (its `base`, at offset 0) and the
/// fields of its first product, flat as shaders/matvec/params_hprod.wgsl adds them.
fn product_hprod() -> Layout {
    use crate::ops::matmul::HParams;
    assert_eq!(std::mem::offset_of!(HParams, base), 0);
    extended(layout!(HParams {
        hp_wgs,
        hp_rows,
        hp_set,
        hp_reset,
        hp_scale,
        hp_spin,
    }))
}

/// `ops::matmul::ln_fuse::LnParams`: the product's Params (its `base`, at offset 0) and the
/// LayerNorm's fields, flat as shaders/matvec/params_ln.wgsl adds them.
fn product_ln() -> Layout {
    use crate::ops::matmul::LnParams;
    assert_eq!(std::mem::offset_of!(LnParams, base), 0);
    extended(layout!(LnParams {
        ln_w,
        ln_b,
        ln_mix,
        ln_state,
        ln_slot_len,
        ln_eps,
        ln_stats,
        ln_done,
        nx_ln_w,
        nx_ln_b,
        nx_mix,
        nx_state,
        nx_slot_len,
        nx_out,
        nx_out_stride,
        nx_wgs,
        nx_tail,
        x8,
        nx_mixes,
    }))
}

/// The product's Params followed by `own`'s fields (a struct whose `base` is the
/// product's Params), its size `own`'s.
fn extended(own: Layout) -> Layout {
    let mut l = product();
    l.size = own.size;
    l.fields.extend(own.fields);
    l
}

/// The table of one product (shaders/product/one.wgsl): the host binds the product's
/// `params` itself, as entry 0.
fn one(params: &Layout) -> Layout {
    Layout {
        size: params.size,
        fields: [("seg".to_string(), (0, params.size))]
            .into_iter()
            .collect(),
    }
}

/// The WGSL structs a variant's uniforms reach, each with its Rust mirror.
fn mirrors(v: &Variant) -> Vec<(&'static str, Layout)> {
    use crate::ops as o;
    let mut m = vec![("Dims", dims())];
    match v {
        Variant::Embed(_) => m.push((
            "Params",
            layout!(o::embed::Params {
                c,
                rows_off,
                row_bytes,
                y_off
            }),
        )),
        Variant::LayerNorm(_) => m.push((
            "Params",
            layout!(o::layer_norm::Params {
                c,
                x_off,
                y_off,
                w_off,
                rows_sel,
                eps
            }),
        )),
        Variant::GatherRows(_) => m.push((
            "Params",
            layout!(o::gather_rows::Params {
                c,
                src_off,
                dst_off
            }),
        )),
        Variant::Argmax(_) | Variant::Adjust(_) => {
            m.push(("Params", layout!(o::argmax::Params { vocab })))
        }
        Variant::Candidates(_) => m.push(("Params", layout!(o::candidates::Params { vocab, cap }))),
        Variant::LnShift(_) => m.push((
            "Params",
            layout!(o::ln_shift::Params {
                c,
                n_mix,
                mix_off,
                ln_off,
                x_off,
                out_off,
                out_stride,
                state_off,
                slot_len,
                eps,
                slices,
            }),
        )),
        Variant::Wkv(_) => m.push((
            "Params",
            layout!(o::wkv::WkvArgs {
                c,
                r_off,
                w_off,
                k_off,
                v_off,
                kk_off,
                a_off,
                y_off,
                state_off,
                slot_len,
            }),
        )),
        Variant::WkvFused(_) => m.push((
            "Params",
            layout!(o::wkv_fused::WkvFusedArgs {
                c,
                layer0,
                r_off,
                w_off,
                k_off,
                v_off,
                a_off,
                g_off,
                vmix_off,
                vfirst_off,
                o_off,
                kkw_off,
                ka_off,
                rk_off,
                lnx_off,
                state_off,
                slot_len,
                eps,
            }),
        )),
        Variant::WkvPrep(_) => m.push((
            "Params",
            layout!(o::wkv_prep::WkvPrepArgs {
                c,
                n_head,
                layer0,
                k_off,
                v_off,
                a_off,
                w_off,
                vmix_off,
                vfirst_off,
                kk_off,
                kk_w_off,
                ka_off,
            }),
        )),
        Variant::WkvOut(_) => m.push((
            "Params",
            layout!(o::wkv_out::WkvOutArgs {
                c,
                n_head,
                y_off,
                r_off,
                k_off,
                v_off,
                g_off,
                o_off,
                rk_off,
                lnx_off,
                eps,
            }),
        )),
        Variant::Group(_) => {
            m.push(("Params", layout!(o::matvec_group::Params { nseg, seg })));
            m.push((
                "Seg",
                layout!(o::matvec_group::Seg {
                    k,
                    n,
                    row_bytes,
                    w_off,
                    x_off,
                    x_stride,
                    y_off,
                    y_stride,
                    act,
                    bias_off,
                    wg0,
                    src,
                    scale,
                    lora_rank,
                    lora_h,
                    lora_stride,
                    lora_b,
                }),
            ));
        }
        Variant::Matvec(s) if s.lora == MatvecLora::MakesH => {
            m.push(("Params", product_hprod()));
            m.push(("One", one(&product_hprod())));
        }
        Variant::Matvec(s) if s.ln != crate::ops::matmul::LnEnd::None => {
            m.push(("Params", product_ln()));
            m.push(("One", one(&product_ln())));
        }
        Variant::Coop(s) if s.group => group(&mut m),
        Variant::Reduce(s) if s.group => group(&mut m),
        Variant::Matmul(_) | Variant::Coop(_) | Variant::Reduce(_) | Variant::Matvec(_) => {
            m.push(("Params", product()));
            m.push(("One", one(&product())));
        }
    }
    m
}

/// A `matmul_group`'s table (shaders/product/group.wgsl) and its products' Params.
fn group(m: &mut Vec<(&'static str, Layout)>) {
    let g = layout!(crate::ops::matmul::Group { nseg, wg0, seg });
    assert_eq!(g.fields["seg"].1, MAX_GROUP * product().size);
    m.push(("Group", g));
    m.push(("Params", product()));
}

/// The named structs the uniform globals of `module` reach (their own types, and the
/// structs inside them and inside their arrays), with their layouts.
fn reflect(module: &naga::Module) -> BTreeMap<String, Layout> {
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .unwrap_or_else(|e| panic!("layout: {e}"));
    let mut todo: Vec<naga::Handle<naga::Type>> = module
        .global_variables
        .iter()
        .filter(|(_, g)| g.space == naga::AddressSpace::Uniform)
        .map(|(_, g)| g.ty)
        .collect();
    let mut out = BTreeMap::new();
    while let Some(ty) = todo.pop() {
        let t = &module.types[ty];
        match &t.inner {
            naga::TypeInner::Struct { members, span } => {
                let name = t.name.clone().unwrap_or_default();
                let fields = members
                    .iter()
                    .filter_map(|m| {
                        let n = m.name.clone()?;
                        todo.push(m.ty);
                        let size = layouter[m.ty].size as usize;
                        (!n.starts_with('_')).then_some((n, (m.offset as usize, size)))
                    })
                    .collect();
                let l = Layout {
                    size: *span as usize,
                    fields,
                };
                out.insert(name, l);
            }
            naga::TypeInner::Array { base, .. } => todo.push(*base),
            _ => {}
        }
    }
    out
}

/// Every uniform struct of every kernel variant has the layout of its Rust mirror, and
/// every struct a uniform reaches has a mirror.
#[test]
fn uniform_structs_match_their_rust_mirrors() {
    let mut checked = 0;
    for v in every_variant() {
        let src = v.source().unwrap_or_else(|e| panic!("{v:?}: {e}"));
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{v:?}: {}", e.emit_to_string(&src)));
        let mirrors: BTreeMap<&str, Layout> = mirrors(&v).into_iter().collect();
        for (name, wgsl) in reflect(&module) {
            let Some(rust) = mirrors.get(name.as_str()) else {
                panic!("{v:?}: uniform struct `{name}` has no Rust mirror in ops/layouts.rs");
            };
            assert_eq!(
                &wgsl, rust,
                "{v:?}: WGSL `{name}` (left) and its Rust mirror (right) differ"
            );
            checked += 1;
        }
    }
    assert!(checked > 1000, "only {checked} structs checked");
}

/// The check can fail: the embed kernel's WGSL with a member added in the middle of its
/// `Params` no longer matches the Rust mirror (a later member moves, the size grows).
#[test]
fn a_moved_member_is_caught() {
    let v = every_variant()
        .into_iter()
        .find(|v| matches!(v, Variant::Embed(_)))
        .unwrap_or_else(|| panic!("no embed variant"));
    let src = v.source().unwrap_or_else(|e| panic!("{e}"));
    let changed = src.replacen(
        "    rows_off: u32,",
        "    rows_off: u32,\n    extra: u32,",
        1,
    );
    assert_ne!(changed, src);
    let rust: BTreeMap<&str, Layout> = mirrors(&v).into_iter().collect();
    let wgsl = |text: &str| {
        let module = naga::front::wgsl::parse_str(text).unwrap_or_else(|e| panic!("{e}"));
        reflect(&module)["Params"].clone()
    };
    assert_eq!(wgsl(&src), rust["Params"]);
    assert_ne!(wgsl(&changed), rust["Params"]);
}
