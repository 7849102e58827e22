//! LayerNorm + token shift + shift-state save in one dispatch (`shaders/ln_shift.wgsl`):
//! the six time-mix inputs after `ln1`, or the channel-mix input after `ln2`.
//!
//! Replaces `layer_norm` → `token_shift` → `shift_store` (three dispatches) on the
//! forward path; each token's workgroup recomputes its predecessor's LayerNorm.

use crate::error::Result;
use crate::gpu::pipeline::PipelineKey;
use crate::ops::{op_err, Count, Ctx, Grid, Node, Small};

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    c: u32,
    n_mix: u32,
    mix_off: u32,
    ln_off: u32,
    x_off: u32,
    out_off: u32,
    out_stride: u32,
    state_off: u32,
    slot_len: u32,
    eps: f32,
    slices: u32,
    lora_wgs: u32,
    prev_off: u32,
    copy_off: u32,
    zero_off: u32,
    zero_len: u32,
}

/// Where a fused LayerNorm + token shift reads and writes (offsets in f32 elements).
#[derive(Debug, Clone, Copy)]
pub struct LnShiftArgs {
    pub c: usize,
    /// 6 (time mix: r, w, k, v, a, g) or 1 (channel mix: k).
    pub n_mix: usize,
    /// `vecs` offset of the mixes `[n_mix, C]`.
    pub mix_off: usize,
    /// `vecs` offset of the LayerNorm weight `[C]`, bias right after.
    pub ln_off: usize,
    /// `act` offset of the residual stream x `[T, C]`.
    pub x_off: usize,
    /// `act` offset of mix 0's output; mix m at `out_off + m * out_stride`.
    pub out_off: usize,
    pub out_stride: usize,
    /// Offset of the shift vector inside a state slot, and the slot length (f32).
    pub state_off: usize,
    pub slot_len: usize,
    pub eps: f32,
}

/// What the decode variant of an `ln_shift` does for the block's fused LoRA first
/// products (`ops::lora_out`); offsets in f32 elements of `act`.
pub struct LnShiftFuse<'a> {
    /// The channel-mix shift copy `[T, C]`: written by the time mix (`copy_from`) for each
    /// sequence's first token, read by the channel mix's LoRA workgroups.
    pub prev_off: usize,
    /// Time mix: the channel-mix shift vector's offset inside a state slot, to copy.
    pub copy_from: Option<usize>,
    /// Time mix: `(offset, length per token)` of the fixed-point accumulators to zero.
    pub zero: Option<(usize, usize)>,
    /// Channel mix: ffn.key's first products on xk (h f32 `[T, stride]`).
    pub lora: Option<crate::ops::lora_out::LoraOut<'a>>,
}

/// `xn = LayerNorm(x[t])`, `out_m[t] = xn + (prev(t) − xn)·mix_m` with `prev` the
/// previous token's `xn` (the state's shift vector for a sequence's first token), and
/// each sequence's last `xn` saved as its new shift vector.
///
/// Errors: no mixes or more than six.
#[allow(clippy::too_many_arguments)]
pub fn ln_shift(
    cx: &Ctx,
    layer: Option<usize>,
    a: &LnShiftArgs,
    vecs: &wgpu::Buffer,
    meta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    build(cx, layer, a, None, [vecs, meta, state, act])
}

/// [`ln_shift`] whose decode variant also does `fuse`'s work: a time mix copies the
/// channel-mix shift vector and zeroes accumulators; a channel mix adds `A xk`'s
/// workgroups (4 rows each, after each token's slices).
///
/// Errors: as [`ln_shift`]; the first products' (see [`crate::ops::lora_out`]).
#[allow(clippy::too_many_arguments)]
pub fn ln_shift_fused(
    cx: &Ctx,
    layer: Option<usize>,
    a: &LnShiftArgs,
    fuse: &LnShiftFuse,
    vecs: &wgpu::Buffer,
    meta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    build(cx, layer, a, Some(fuse), [vecs, meta, state, act])
}

fn build(
    cx: &Ctx,
    layer: Option<usize>,
    a: &LnShiftArgs,
    fuse: Option<&LnShiftFuse>,
    bufs: [&wgpu::Buffer; 4],
) -> Result<Node> {
    if a.n_mix == 0 || a.n_mix > 6 {
        return Err(op_err(
            "ln_shift",
            format!("{} mixes; 1 to 6 allowed", a.n_mix),
        ));
    }
    let p = Params {
        c: a.c as u32,
        n_mix: a.n_mix as u32,
        mix_off: a.mix_off as u32,
        ln_off: a.ln_off as u32,
        x_off: a.x_off as u32,
        out_off: a.out_off as u32,
        out_stride: a.out_stride as u32,
        state_off: a.state_off as u32,
        slot_len: a.slot_len as u32,
        eps: a.eps,
        slices: 1,
        lora_wgs: 0,
        prev_off: 0,
        copy_off: u32::MAX,
        zero_off: 0,
        zero_len: 0,
    };
    let sg = cx.gpu.features.subgroup;
    let key = PipelineKey {
        op: "ln_shift",
        dtype: None,
        spec: vec![("SG", u32::from(sg))],
    };
    // One workgroup per token; passes of few tokens (decode) spread each token over
    // workgroups of 256 channels.
    let slices = a.c.div_ceil(256) as u32;
    let grid = |per| Grid::Linear {
        count: Count::Tokens,
        per,
        wg_size: 1,
    };
    let mut node = cx.node("ln_shift", layer, &key, &p, &bufs, grid(1))?;
    let small = match fuse {
        None => cx.node(
            "ln_shift",
            layer,
            &key,
            &Params { slices, ..p },
            &bufs,
            grid(slices),
        )?,
        Some(f) => small_fused(cx, layer, a, f, Params { slices, ..p }, key, bufs)?,
    };
    node.small = Some(Small {
        count: Count::Tokens,
        max: crate::ops::matmul::SMALL_T,
        node: Box::new(small),
    });
    Ok(node)
}

/// The decode variant with `f`'s work (bindings 6.. : the first products' params and
/// each adapter's A).
fn small_fused(
    cx: &Ctx,
    layer: Option<usize>,
    a: &LnShiftArgs,
    f: &LnShiftFuse,
    mut p: Params,
    mut key: PipelineKey,
    bufs: [&wgpu::Buffer; 4],
) -> Result<Node> {
    p.prev_off = f.prev_off as u32;
    if let Some(c) = f.copy_from {
        p.copy_off = c as u32;
    }
    if let Some((off, len)) = f.zero {
        (p.zero_off, p.zero_len) = (off as u32, len as u32);
    }
    if f.copy_from.is_some() || f.zero.is_some() {
        key.spec.push(("PREP", 1));
    }
    let mut res: Vec<(u32, wgpu::BindingResource)> = (2..)
        .zip(bufs.iter().map(|b| b.as_entire_binding()))
        .collect();
    let mut lo_bind = None;
    if let Some(lo) = &f.lora {
        if a.n_mix != 1 {
            return Err(op_err("ln_shift", "LoRA first products on a time mix"));
        }
        p.lora_wgs = lo.row_wgs();
        key.spec.extend(lo.spec(6, false));
        lo_bind = Some(lo.bind(cx.gpu, &lo.params("ln_shift", a.c)?, bufs[3], 6, false));
    }
    if let Some((u, extra)) = &lo_bind {
        res.push((6, u.as_entire_binding()));
        res.extend(extra.iter().cloned());
    }
    let grid = Grid::Linear {
        count: Count::Tokens,
        per: p.slices + p.lora_wgs,
        wg_size: 1,
    };
    cx.node_at("ln_shift", layer, &key, &p, res, grid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::layer_norm::reference as ln_ref;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// Three sequences (lengths 3, 1, 2 and 9, 1, 2) in slots 1, 2, 0; six mixes and one; with
    /// subgroup sums and without. Checks the mixes and every slot's new shift vector; the
    /// decode variant with fused LoRA work does the same and also (time mix) copies the
    /// other shift vector of each first token's slot and zeroes the accumulators, or
    /// (channel mix) writes `h = s · A xk` of two adapters (ranks 5 and 8).
    #[test]
    fn matches_layer_norm_then_token_shift() {
        let mut plain = (*gpu()).clone();
        plain.features.subgroup = false;
        for g in [gpu(), std::sync::Arc::new(plain)] {
            for n_mix in [6, 1] {
                // 6 tokens: the decode variant (channel slices); 12: one workgroup a token.
                check(g.clone(), n_mix, &[3, 1, 2], false);
                check(g.clone(), n_mix, &[9, 1, 2], false);
                check(g.clone(), n_mix, &[3, 1, 2], true);
            }
        }
    }

    fn check(
        gpu: std::sync::Arc<crate::gpu::GpuContext>,
        n_mix: usize,
        lens: &[usize],
        fused: bool,
    ) {
        let c = 320; // not a multiple of the workgroup size
        let slots = [1usize, 2, 0];
        let t: usize = lens.iter().sum();
        let mut tok_seq = Vec::new();
        let mut tok_pos = Vec::new();
        let mut seqs = Vec::new();
        let mut at = 0;
        for (b, &len) in lens.iter().enumerate() {
            for i in 0..len {
                tok_seq.push(b as u32);
                tok_pos.push(i as u32);
            }
            seqs.extend([at as u32, len as u32, slots[b] as u32, 0]);
            at += len;
        }
        let meta = [tok_seq, tok_pos, seqs].concat();
        let h = Harness::with_gpu(
            Dims {
                n_tokens: t as u32,
                n_seqs: lens.len() as u32,
                off_tok_seq: 0,
                off_tok_pos: t as u32,
                off_seqs: 2 * t as u32,
                ..Default::default()
            },
            gpu,
        );
        // Residual stream with an offset and spread, as deep layers have.
        let x: Vec<f32> = rand_vec(7, t * c, 3.0).iter().map(|v| v + 5.0).collect();
        let ln_w = rand_vec(8, c, 1.0);
        let ln_b = rand_vec(9, c, 0.5);
        let mixes = rand_vec(10, n_mix * c, 1.0);
        let vecs = [ln_w.clone(), ln_b.clone(), mixes.clone()].concat();
        let slot_len = 3 * c;
        let state0 = rand_vec(11, 3 * slot_len, 1.0);
        let state_buf = h.f32_buf(&state0);
        let mut act = x.clone();
        act.extend(vec![0.0; n_mix * t * c]);
        // Fused: the shift copy [t, c], accumulators [t, 12] (at 7 before), h [t, 16].
        let prev_off = act.len();
        let (zero_off, h_off) = (prev_off + t * c, prev_off + t * c + t * 12);
        act.extend(vec![0.0; t * c]);
        act.extend(vec![7.0; t * 12]);
        act.extend(vec![0.0; t * 16]);
        let (mut tok0, mut first) = (0, Vec::new());
        for (b, &len) in lens.iter().enumerate() {
            first.push((tok0, slots[b]));
            tok0 += len;
        }
        if n_mix == 1 {
            // What the time mix's copy leaves for the channel mix's LoRA workgroups.
            for &(tok, slot) in &first {
                let from = &state0[slot * slot_len + c..slot * slot_len + 2 * c];
                act[prev_off + tok * c..prev_off + (tok + 1) * c].copy_from_slice(from);
            }
        }
        let act_buf = h.f32_buf(&act);
        let adapters = [(5usize, 0.5f32, 0usize), (8, -2.0, 5)];
        let a_vals: Vec<Vec<f32>> = (0..2)
            .map(|i| {
                rand_vec(12 + i as u64, adapters[i].0 * c, 1.0)
                    .iter()
                    .map(|&v| half::f16::from_f32(v).to_f32())
                    .collect()
            })
            .collect();
        let a_mats: Vec<crate::ops::GpuMatrix> = (0..2)
            .map(|i| {
                let h16: Vec<half::f16> =
                    a_vals[i].iter().map(|&v| half::f16::from_f32(v)).collect();
                let bytes = bytemuck::cast_slice(&h16);
                crate::ops::GpuMatrix::upload(
                    &h.gpu,
                    "A".into(),
                    crate::DType::F16,
                    bytes,
                    adapters[i].0,
                    c,
                )
                .unwrap()
            })
            .collect();
        let fuse = LnShiftFuse {
            prev_off,
            copy_from: (n_mix > 1).then_some(2 * c),
            zero: (n_mix > 1).then_some((zero_off, 12)),
            lora: (n_mix == 1).then(|| crate::ops::lora_out::LoraOut {
                firsts: adapters
                    .iter()
                    .zip(&a_mats)
                    .map(|(&(_, s, j0), m)| (m, s, j0))
                    .collect(),
                h_off,
                h_stride: 16,
            }),
        };
        let args = LnShiftArgs {
            c,
            n_mix,
            mix_off: 2 * c,
            ln_off: 0,
            x_off: 0,
            out_off: t * c,
            out_stride: t * c,
            state_off: c,
            slot_len,
            eps: 1e-5,
        };
        let (vecs_buf, meta_buf) = (h.f32_buf(&vecs), h.u32_buf(&meta));
        let bufs = (&vecs_buf, &meta_buf, &state_buf, &act_buf);
        let node = match fused {
            true => ln_shift_fused(&h.ctx(), None, &args, &fuse, bufs.0, bufs.1, bufs.2, bufs.3),
            false => ln_shift(&h.ctx(), None, &args, bufs.0, bufs.1, bufs.2, bufs.3),
        };
        h.run(&[node.unwrap()]);
        let got = h.read(&act_buf, t * c, n_mix * t * c);
        let st = h.read(&state_buf, 0, 3 * slot_len);
        let xn: Vec<Vec<f32>> = (0..t)
            .map(|i| ln_ref(&x[i * c..(i + 1) * c], &ln_w, &ln_b, 1e-5))
            .collect();
        let mut xk = vec![0f32; t * c]; // mix 0
        let mut at = 0;
        for (b, &len) in lens.iter().enumerate() {
            for p in 0..len {
                let tok = at + p;
                for i in 0..c {
                    let prev = if p == 0 {
                        state0[slots[b] * slot_len + c + i]
                    } else {
                        xn[tok - 1][i]
                    };
                    for m in 0..n_mix {
                        let want = xn[tok][i] + (prev - xn[tok][i]) * mixes[m * c + i];
                        if m == 0 {
                            xk[tok * c + i] = want;
                        }
                        let g = got[m * t * c + tok * c + i];
                        assert!(
                            (g - want).abs() < 1e-4,
                            "mix {m} token {tok} ch {i}: {g} vs {want}"
                        );
                    }
                }
            }
            let sb = slots[b] * slot_len + c;
            let err = max_abs(&st[sb..sb + c], &xn[at + len - 1]);
            assert!(err < 1e-4, "sequence {b}: saved shift off by {err}");
            at += len;
        }
        // Everything else in the slots is untouched.
        for s in 0..3 {
            let o = s * slot_len;
            assert_eq!(st[o..o + c], state0[o..o + c]);
            assert_eq!(st[o + 2 * c..o + 3 * c], state0[o + 2 * c..o + 3 * c]);
        }
        if !fused {
            return;
        }
        let rest = h.read(&act_buf, prev_off, t * c + t * 12 + t * 16);
        if n_mix > 1 {
            for &(tok, slot) in &first {
                let from = &state0[slot * slot_len + 2 * c..slot * slot_len + 3 * c];
                assert_eq!(
                    &rest[tok * c..(tok + 1) * c],
                    from,
                    "token {tok}: shift copy"
                );
            }
            assert!(
                rest[t * c..t * c + t * 12].iter().all(|&v| v == 0.0),
                "not zeroed"
            );
            return;
        }
        for tok in 0..t {
            for (&(r, s, j0), a) in adapters.iter().zip(&a_vals) {
                for i in 0..r {
                    let terms = (0..c).map(|q| a[i * c + q] as f64 * xk[tok * c + q] as f64);
                    let abs: f64 = terms.clone().map(f64::abs).sum();
                    let want = s as f64 * terms.sum::<f64>();
                    let g = rest[t * c + t * 12 + tok * 16 + j0 + i] as f64;
                    assert!(
                        (g - want).abs() < 1e-5 * abs + 1e-5,
                        "token {tok} h row {}: {g} vs {want}",
                        j0 + i
                    );
                }
            }
        }
    }
}
