//! The RWKV-7 forward pass as a list of named dispatches over B sequences × T tokens.
//!
//! Activations live in one f32 buffer at static offsets ([`Regions`], each `t_cap` rows),
//! so every bind group is built once; a pass writes the token metadata and [`Dims`] and
//! records the nodes into one compute pass. Per layer (RWKV_x070, numbered as below):
//!
//! 1. `xx = ln1(x)`; 2. six lerps with the previous token (state for the first);
//! 3. save the shift state (1–3: one `ln_shift` dispatch); 4. `r, k, v = W xr, W xk, W xv`;
//! 5. `w = w0 + tanh(xw W1) W2`; 6. `a = σ(a0 + xa A1 A2)`; 7. `g = σ(xg G1) G2`;
//! 8. (layer > 0) `v_mix = σ(v0 + xv V1 V2)`; 9. kk, k, v residual, decay;
//! 10. WKV recurrence; 11. GroupNorm + bonus + gate; 12. `x += Wo o`;
//! 13. `xx = ln2(x)`; 14. lerp; 15. save shift (13–15: `ln_shift`); 16. `h = relu(Wk xk)²`; 17. `x += Wv h`.
//!
//! Then the head: gather the wanted rows, `ln_out`, logits in row chunks of the head.
//!
//! Passes of at most [`SMALL_T`] tokens (decode) run other kernels, picked per pass from
//! each node's variants: `ln_shift` over channel slices, r/k/v and each set of low-rank
//! products as one `matvec_group` dispatch, 9–11 as one `wkv_fused`. Larger passes
//! (prefill) run the tiled products — on tensor cores where the adapter has them, with k
//! split for the C-row products — and the per-op WKV kernels.

use crate::error::{EngineError, Result};
use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{buffer, GpuContext};
use crate::model::gpu_weights::{GlobalVecs, GpuWeights, LayerVecs};
use crate::ops::ln_shift::LnShiftArgs;
use crate::ops::matmul::{coop_ksplit, matmul, matmul_split, Act, MatmulArgs, SMALL_T};
use crate::ops::wkv::WkvArgs;
use crate::ops::wkv_fused::WkvFusedArgs;
use crate::ops::wkv_out::WkvOutArgs;
use crate::ops::wkv_prep::WkvPrepArgs;
use crate::ops::{self, Count, Ctx, Dims, Node, Small};

pub use crate::model::regions::Regions;

/// A profiled dispatch: (label `op@layer`, op, layer).
pub type DispatchLabel = (String, &'static str, Option<usize>);

/// LayerNorm eps (torch default, RWKV_x070) and GroupNorm eps of `ln_x`.
pub const LN_EPS: f32 = 1e-5;
pub const GN_EPS: f32 = 64e-5;

/// For decode passes, runs the products of `segs` (independent, nodes `nodes` in the
/// same order) whose matrices share the buffer most of them share as one
/// `matvec_group` dispatch: in the first such node's place, the others dispatch nothing.
/// Larger passes keep every node's own kernels.
fn group_decode(
    cx: &Ctx,
    name: &'static str,
    layer: Option<usize>,
    nodes: &mut [Node],
    segs: &[(&crate::ops::GpuMatrix, MatmulArgs)],
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<()> {
    let in_buf = |b: &wgpu::Buffer| segs.iter().filter(|(m, _)| m.buffer == *b).count();
    let Some(buf) = segs
        .iter()
        .map(|(m, _)| m.buffer.clone())
        .max_by_key(|b| in_buf(b))
    else {
        return Ok(());
    };
    let members: Vec<usize> = (0..segs.len())
        .filter(|&i| segs[i].0.buffer == buf)
        .collect();
    let group: Vec<_> = members.iter().map(|&i| segs[i]).collect();
    let lo = group.iter().map(|(m, _)| m.offset).min().unwrap_or(0);
    let hi = group
        .iter()
        .map(|(m, _)| m.offset + m.span())
        .max()
        .unwrap_or(0);
    // One binding covers the group: skip grouping where that exceeds the device's limit.
    if members.len() < 2 || hi - lo > cx.gpu.max_binding() {
        return Ok(());
    }
    let mut fused = Some(ops::matvec_group::matvec_group(
        cx, name, layer, &group, vecs, act,
    )?);
    for &i in &members {
        let node = &mut nodes[i];
        // The decode variant hangs below the node's matrix × vector variant.
        let Some(mv) = node.small.as_mut() else {
            return Err(EngineError::Op {
                op: "graph",
                what: format!("{}: no matrix × vector variant", node.op),
            });
        };
        let instead = match fused.take() {
            Some(f) => f,
            None => mv.node.skip(),
        };
        mv.node.small = Some(Small {
            count: Count::Tokens,
            max: SMALL_T,
            node: Box::new(instead),
        });
    }
    Ok(())
}

/// GPU buffers and nodes of the forward pass at a given capacity.
pub struct Graph {
    pub t_cap: usize,
    pub r_cap: usize,
    pub b_cap: usize,
    pub n_slots: usize,
    pub slot_len: usize,
    pub regions: Regions,
    pub dims: wgpu::Buffer,
    pub meta: wgpu::Buffer,
    pub act: wgpu::Buffer,
    pub state: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    /// Host-readable copy of the logits (first `r_cap × vocab` f32) and the embeddings
    /// (`r_cap × C` f32 after them), filled by the pass that computes them.
    pub readback: wgpu::Buffer,
    /// Embedding … ln_out (everything but the head).
    pub body: Vec<Node>,
    pub head: Vec<Node>,
    pub(super) dims_host: Dims,
}

impl Graph {
    /// Allocates buffers for `t_cap` tokens, `r_cap` output rows, `b_cap` sequences per
    /// pass and `n_slots` states, and builds every node.
    pub fn new(
        gpu: &GpuContext,
        pipelines: &PipelineCache,
        wts: &GpuWeights,
        t_cap: usize,
        r_cap: usize,
        b_cap: usize,
        n_slots: usize,
    ) -> Result<Self> {
        let cfg = wts.config;
        let c = cfg.n_embd;
        let regions = Regions::new(&cfg, t_cap, r_cap);
        let slot_len = cfg.state_len();
        let max = gpu.max_binding();
        let need = [
            ("activations", regions.len as u64 * 4),
            ("states", (slot_len * n_slots) as u64 * 4),
            ("logits", (r_cap * cfg.vocab_size) as u64 * 4),
        ];
        for (what, bytes) in need {
            if bytes > max {
                return Err(EngineError::TooLarge {
                    what: format!(
                        "{what} need {bytes} bytes in one binding; the device allows {max}"
                    ),
                });
            }
        }
        let dims_host = Dims {
            t_cap: t_cap as u32,
            off_tok_seq: t_cap as u32,
            off_tok_pos: 2 * t_cap as u32,
            off_seqs: 3 * t_cap as u32,
            off_rows: (3 * t_cap + 4 * b_cap) as u32,
            ..Default::default()
        };
        let dims = buffer::uniform(gpu, "dims", &dims_host);
        let meta = buffer::storage(gpu, "meta", (3 * t_cap + 4 * b_cap + r_cap) as u64 * 4);
        let act = buffer::storage(gpu, "activations", regions.len as u64 * 4);
        let state = buffer::storage(gpu, "states", (slot_len * n_slots) as u64 * 4);
        let logits = buffer::storage(gpu, "logits", (r_cap * cfg.vocab_size) as u64 * 4);
        // Scratch of the k-split tensor-core products: [KSPLIT][T][C] f32.
        let split_bytes = [cfg.n_embd, cfg.ffn_dim]
            .iter()
            .map(|&k| coop_ksplit(cfg.n_embd, k) as u64 * (t_cap * cfg.n_embd) as u64 * 4)
            .max()
            .unwrap_or(0);
        let split_ok = gpu.features.coopmat && split_bytes <= max;
        let split = buffer::storage(
            gpu,
            "k-split partial sums",
            if split_ok { split_bytes } else { 16 },
        );
        let readback = buffer::readback(
            gpu,
            "readback",
            ((r_cap * cfg.vocab_size).next_multiple_of(2) + r_cap * c) as u64 * 4,
        );
        let cx = Ctx {
            gpu,
            pipelines,
            dims: &dims,
        };
        let rg = regions;
        let tc = t_cap * c;
        let h = cfg.n_head;
        let per_layer = cfg.state_len_per_layer();
        let d_max = Regions::lora_width(&cfg);
        let lora = |i: usize| rg.lora + i * t_cap * d_max;
        let mm = |x_off: usize,
                  k: usize,
                  y_off: usize,
                  n: usize,
                  act: Act,
                  accumulate: bool,
                  bias: Option<usize>| MatmulArgs {
            x_off,
            x_stride: k,
            y_off,
            y_stride: n,
            act,
            accumulate,
            bias_off: bias,
            rows: Count::Tokens,
        };

        let mut body = Vec::new();
        for chunk in &wts.emb {
            body.push(ops::embed::embed(&cx, chunk, &meta, &act, rg.x)?);
        }
        body.push(ops::layer_norm::layer_norm(
            &cx,
            None,
            c,
            &wts.globals,
            &act,
            rg.x,
            rg.x,
            GlobalVecs::LN0 * c,
            Count::Tokens,
            LN_EPS,
        )?);

        for (l, ly) in wts.layers.iter().enumerate() {
            let lid = Some(l);
            let v = &ly.vecs;
            let base = l * per_layer;
            // The C-row products, with k split on tensor cores (`matmul_split`).
            let big = |name: &'static str, m: &crate::ops::GpuMatrix, args: &MatmulArgs| {
                let ks = if split_ok {
                    coop_ksplit(m.n_out, m.n_in)
                } else {
                    1
                };
                matmul_split(&cx, name, lid, m, v, &act, args, &split, ks)
            };
            // 1–3: ln1, lerps, shift state (one dispatch)
            let shift = LnShiftArgs {
                c,
                n_mix: 6,
                mix_off: LayerVecs::MIX * c,
                ln_off: LayerVecs::LN1 * c,
                x_off: rg.x,
                out_off: rg.mix,
                out_stride: tc,
                state_off: base,
                slot_len,
                eps: LN_EPS,
            };
            body.push(ops::ln_shift::ln_shift(
                &cx, lid, &shift, v, &meta, &state, &act,
            )?);
            let mix = |i: usize| rg.mix + i * tc;
            // 4: r, k, v (one `matvec_group` dispatch in a decode step)
            let rkv = [
                (
                    "att.receptance",
                    &ly.receptance,
                    mm(mix(0), c, rg.r, c, Act::None, false, None),
                ),
                (
                    "att.key",
                    &ly.key,
                    mm(mix(2), c, rg.k, c, Act::None, false, None),
                ),
                (
                    "att.value",
                    &ly.value,
                    mm(mix(3), c, rg.v, c, Act::None, false, None),
                ),
            ];
            let mut nodes = Vec::new();
            let mut reduces = Vec::new();
            for (name, m, args) in &rkv {
                let (node, reduce) = big(name, m, args)?;
                nodes.push(node);
                reduces.push(reduce);
            }
            let segs: Vec<_> = rkv.iter().map(|(_, m, args)| (*m, *args)).collect();
            group_decode(&cx, "att.rkv", lid, &mut nodes, &segs, v, &act)?;
            for (node, reduce) in nodes.into_iter().zip(reduces) {
                body.push(node);
                body.push(reduce);
            }
            // The variant of a node for passes of at most SMALL_T tokens (decode).
            let few = |node: Node| Small {
                count: Count::Tokens,
                max: SMALL_T,
                node: Box::new(node),
            };
            // 5–8: LoRA chains `out = act2(act1(x A) B + bias)`: (op names, A, B, input
            // mix, hidden, act1, out, act2, bias). All first products run before the
            // second ones; a decode step runs each set as one `matvec_group` dispatch.
            let mut chains = vec![
                (
                    ["att.w1", "att.w2"],
                    &ly.w1,
                    &ly.w2,
                    mix(1),
                    lora(0),
                    Act::Tanh,
                    rg.w,
                    Act::None,
                    Some(LayerVecs::W0 * c),
                ),
                (
                    ["att.a1", "att.a2"],
                    &ly.a1,
                    &ly.a2,
                    mix(4),
                    lora(1),
                    Act::None,
                    rg.a,
                    Act::Sigmoid,
                    Some(LayerVecs::A0 * c),
                ),
                (
                    ["att.g1", "att.g2"],
                    &ly.g1,
                    &ly.g2,
                    mix(5),
                    lora(2),
                    Act::Sigmoid,
                    rg.g,
                    Act::None,
                    None,
                ),
            ];
            if let (Some(v1), Some(v2)) = (&ly.v1, &ly.v2) {
                chains.push((
                    ["att.v1", "att.v2"],
                    v1,
                    v2,
                    mix(3),
                    lora(3),
                    Act::None,
                    rg.vmix,
                    Act::Sigmoid,
                    Some(LayerVecs::V0 * c),
                ));
            }
            for second in [false, true] {
                let mut nodes = Vec::new();
                let mut reduces = Vec::new();
                let mut group = Vec::new();
                for &(names, m1, m2, x, hid, act1, y, act2, bias) in &chains {
                    let d = m1.n_out;
                    let (name, m, args) = if second {
                        (names[1], m2, mm(hid, d, y, c, act2, false, bias))
                    } else {
                        (names[0], m1, mm(x, c, hid, d, act1, false, None))
                    };
                    // First products (few rows, k = C): k split on tensor cores.
                    let ks = if split_ok && !second {
                        coop_ksplit(m.n_out, m.n_in)
                    } else {
                        1
                    };
                    let (node, reduce) =
                        matmul_split(&cx, name, lid, m, v, &act, &args, &split, ks)?;
                    nodes.push(node);
                    reduces.push(reduce);
                    group.push((m, args));
                }
                let name = if second { "att.lora2" } else { "att.lora1" };
                group_decode(&cx, name, lid, &mut nodes, &group, v, &act)?;
                for (node, reduce) in nodes.into_iter().zip(reduces) {
                    body.push(node);
                    body.push(reduce);
                }
            }
            // 9–11: WKV
            let prep = WkvPrepArgs {
                c: c as u32,
                n_head: h as u32,
                layer0: u32::from(l == 0),
                k_off: rg.k as u32,
                v_off: rg.v as u32,
                a_off: rg.a as u32,
                w_off: rg.w as u32,
                vmix_off: rg.vmix as u32,
                vfirst_off: rg.vfirst as u32,
                kk_off: rg.kk as u32,
                kk_w_off: (LayerVecs::K_K * c) as u32,
                ka_off: (LayerVecs::K_A * c) as u32,
            };
            // Passes of few tokens run 9–11 as one `wkv_fused` dispatch instead.
            let mut prep_node = ops::wkv_prep::wkv_prep(&cx, lid, &prep, v, &act)?;
            prep_node.small = Some(few(prep_node.skip()));
            body.push(prep_node);
            let wkv = WkvArgs {
                c: c as u32,
                r_off: rg.r as u32,
                w_off: rg.w as u32,
                k_off: rg.k as u32,
                v_off: rg.v as u32,
                kk_off: rg.kk as u32,
                a_off: rg.a as u32,
                y_off: rg.y as u32,
                state_off: (base + c) as u32,
                slot_len: slot_len as u32,
                _p: [0; 2],
            };
            let fused = WkvFusedArgs {
                c: c as u32,
                layer0: u32::from(l == 0),
                r_off: rg.r as u32,
                w_off: rg.w as u32,
                k_off: rg.k as u32,
                v_off: rg.v as u32,
                a_off: rg.a as u32,
                g_off: rg.g as u32,
                vmix_off: rg.vmix as u32,
                vfirst_off: rg.vfirst as u32,
                o_off: rg.o as u32,
                kkw_off: (LayerVecs::K_K * c) as u32,
                ka_off: (LayerVecs::K_A * c) as u32,
                rk_off: (LayerVecs::R_K * c) as u32,
                lnx_off: (LayerVecs::LN_X * c) as u32,
                state_off: (base + c) as u32,
                slot_len: slot_len as u32,
                eps: GN_EPS,
                _p: [0; 2],
            };
            let mut wkv_node = ops::wkv::wkv(&cx, lid, &wkv, &meta, &state, &act)?;
            wkv_node.small = Some(few(ops::wkv_fused::wkv_fused(
                &cx, lid, &fused, &meta, &state, &act, v,
            )?));
            body.push(wkv_node);
            let out = WkvOutArgs {
                c: c as u32,
                n_head: h as u32,
                y_off: rg.y as u32,
                r_off: rg.r as u32,
                k_off: rg.k as u32,
                v_off: rg.v as u32,
                g_off: rg.g as u32,
                o_off: rg.o as u32,
                rk_off: (LayerVecs::R_K * c) as u32,
                lnx_off: (LayerVecs::LN_X * c) as u32,
                eps: GN_EPS,
                _p: 0,
            };
            let mut out_node = ops::wkv_out::wkv_out(&cx, lid, &out, v, &act)?;
            out_node.small = Some(few(out_node.skip()));
            body.push(out_node);
            // 12: x += Wo o
            let (node, reduce) = big(
                "att.output",
                &ly.output,
                &mm(rg.o, c, rg.x, c, Act::None, true, None),
            )?;
            body.push(node);
            body.push(reduce);
            // 13–17: channel mix
            let ffn_state = base + c + h * cfg.head_size * cfg.head_size;
            let shift = LnShiftArgs {
                c,
                n_mix: 1,
                mix_off: LayerVecs::FFN_X_K * c,
                ln_off: LayerVecs::LN2 * c,
                x_off: rg.x,
                out_off: rg.mix,
                out_stride: tc,
                state_off: ffn_state,
                slot_len,
                eps: LN_EPS,
            };
            body.push(ops::ln_shift::ln_shift(
                &cx, lid, &shift, v, &meta, &state, &act,
            )?);
            let f = cfg.ffn_dim;
            body.push(matmul(
                &cx,
                "ffn.key",
                lid,
                &ly.ffn_key,
                v,
                &act,
                None,
                &mm(rg.mix, c, rg.ffn, f, Act::ReluSq, false, None),
            )?);
            let (node, reduce) = big(
                "ffn.value",
                &ly.ffn_value,
                &mm(rg.ffn, f, rg.x, c, Act::None, true, None),
            )?;
            body.push(node);
            body.push(reduce);
        }
        body.push(ops::gather_rows::gather_rows(
            &cx, c, &meta, &act, rg.x, rg.head_in,
        )?);
        body.push(ops::layer_norm::layer_norm(
            &cx,
            None,
            c,
            &wts.globals,
            &act,
            rg.head_in,
            rg.head_norm,
            GlobalVecs::LN_OUT * c,
            Count::Rows,
            LN_EPS,
        )?);

        let mut head = Vec::new();
        for chunk in &wts.head {
            let args = MatmulArgs {
                x_off: rg.head_norm,
                x_stride: c,
                y_off: 0,
                y_stride: cfg.vocab_size,
                act: Act::None,
                accumulate: false,
                bias_off: None,
                rows: Count::Rows,
            };
            head.push(matmul(
                &cx,
                "head",
                None,
                chunk,
                &wts.globals,
                &act,
                Some(&logits),
                &args,
            )?);
        }
        // The pipelines compile on worker threads while the graph is built (and the
        // weights upload): the graph is ready once every compile is done.
        pipelines.finish()?;
        Ok(Graph {
            t_cap,
            r_cap,
            b_cap,
            n_slots,
            slot_len,
            regions,
            dims,
            meta,
            act,
            state,
            logits,
            readback,
            body,
            head,
            dims_host,
        })
    }
}
