//! LayerNorm + token shift + shift-state save in one dispatch (`shaders/ln_shift.wgsl`):
//! the six time-mix inputs after `ln1`, or the channel-mix input after `ln2`.
//!
//! Replaces `layer_norm` → `token_shift` → `shift_store` (three dispatches) on the
//! forward path; each token's workgroup recomputes its predecessor's LayerNorm.

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{op_err, Count, Ctx, Grid, Node, Small, COMMON};

/// The `ln_shift` kernel: its workgroup sums by subgroups (`shaders/ln_shift/subgroups.wgsl`)
/// or by a tree in workgroup memory (`shaders/ln_shift/tree.wgsl`); its writes 4 channels
/// a thread (`shaders/ln_shift/out_vec4.wgsl`) or, with `scalar_out`, one
/// (`shaders/ln_shift/out_scalar.wgsl`: on Mesa's llvmpipe, where the 4-channel writes keep
/// memory on every dispatch).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LnShiftSpec {
    pub subgroups: bool,
    pub scalar_out: bool,
}

impl KernelSpec for LnShiftSpec {
    fn label(&self) -> String {
        "ln_shift".into()
    }

    fn source(&self) -> Result<String> {
        let sum = match self.subgroups {
            true => shader!("ln_shift/subgroups.wgsl"),
            false => shader!("ln_shift/tree.wgsl"),
        };
        let out = match self.scalar_out {
            true => shader!("ln_shift/out_scalar.wgsl"),
            false => shader!("ln_shift/out_vec4.wgsl"),
        };
        Ok(Wgsl::new()
            .file(COMMON)
            .file(shader!("seq_meta.wgsl"))
            .file(sum)
            .file(out)
            .file(shader!("ln_shift.wgsl"))
            .build())
    }
}

/// Mirrors `Params` of `shaders/ln_shift.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) c: u32,
    pub(crate) n_mix: u32,
    pub(crate) mix_off: u32,
    pub(crate) ln_off: u32,
    pub(crate) x_off: u32,
    pub(crate) out_off: u32,
    pub(crate) out_stride: u32,
    pub(crate) state_off: u32,
    pub(crate) slot_len: u32,
    pub(crate) eps: f32,
    pub(crate) slices: u32,
    pub(crate) _p: u32,
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

/// Passes of at most this many tokens spread each token over C / 1024 workgroups (each
/// takes the row statistics itself and writes its 1,024 channels, 4 a thread or, on
/// llvmpipe, one); larger ones take one workgroup a token. The two give the same bits. A
/// server's decode step of B sequences is a pass of B tokens: with one workgroup a token,
/// B = 32 kept 32 SMs of an H100 busy and took 27 µs a dispatch (B = 128: 43 µs; one
/// token, sliced: 10 µs).
pub const SLICED_MAX_T: u32 = 256;

/// Channels a workgroup of a sliced pass writes (256 threads × 4).
const SLICE: usize = 1024;

/// `xn = LayerNorm(x[t])`, `out_m[t] = xn + (prev(t) − xn)·mix_m` with `prev` the
/// previous token's `xn` (the state's shift vector for a sequence's first token), and
/// each sequence's last `xn` saved as its new shift vector.
///
/// Errors: no mixes or more than six; C, the x or output offsets or the output stride
/// not multiples of 4 (the kernel reads and writes the activations as vec4s).
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
    if a.n_mix == 0 || a.n_mix > 6 {
        return Err(op_err(
            "ln_shift",
            format!("{} mixes; 1 to 6 allowed", a.n_mix),
        ));
    }
    if [a.c, a.x_off, a.out_off, a.out_stride]
        .iter()
        .any(|v| v % 4 != 0)
    {
        return Err(op_err(
            "ln_shift",
            format!(
                "C {}, x offset {}, output offset {} and stride {} must be multiples of 4",
                a.c, a.x_off, a.out_off, a.out_stride
            ),
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
        _p: 0,
    };
    let spec = LnShiftSpec {
        subgroups: cx.gpu.features.subgroup,
        scalar_out: cx
            .gpu
            .tuning
            .ln_shift_scalar
            .unwrap_or_else(|| cx.gpu.is_llvmpipe()),
    };
    // One workgroup per token; passes of up to `SLICED_MAX_T` tokens (decode steps)
    // spread each token over workgroups of `SLICE` channels.
    let slices = a.c.div_ceil(SLICE) as u32;
    let mut node = cx.node(
        "ln_shift",
        layer,
        &spec,
        &p,
        &[vecs, meta, state, act],
        Grid::Linear {
            count: Count::Tokens,
            per: 1,
            wg_size: 1,
        },
    )?;
    let small = cx.node(
        "ln_shift",
        layer,
        &spec,
        &Params { slices, ..p },
        &[vecs, meta, state, act],
        Grid::Linear {
            count: Count::Tokens,
            per: slices,
            wg_size: 1,
        },
    )?;
    node.small = Some(Small {
        count: Count::Tokens,
        max: SLICED_MAX_T,
        node: Box::new(small),
    });
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::layer_norm::reference as ln_ref;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// Three sequences (lengths 3, 1, 2; 250, 1, 9; 1, 1, 1) in slots 1, 2, 0; six mixes and
    /// one; 320 and 1,312 channels; with subgroup sums and without; writes 4 channels a
    /// thread and one. Checks the mixes and every slot's new shift vector; C not a multiple
    /// of 4 is refused.
    #[test]
    fn matches_layer_norm_then_token_shift() {
        let mut plain = (*gpu()).clone();
        plain.features.subgroup = false;
        let mut vec4 = (*gpu()).clone();
        vec4.tuning.ln_shift_scalar = Some(false);
        let mut scalar = plain.clone();
        scalar.tuning.ln_shift_scalar = Some(true);
        let (plain, vec4, scalar) = (plain.into(), vec4.into(), scalar.into());
        for g in [gpu(), plain, vec4, scalar] {
            for n_mix in [6, 1] {
                // 6 tokens: channel slices; 260 (> SLICED_MAX_T): one workgroup a token;
                // 1,312 channels: two slices, the second part-filled; decode steps (one
                // token a sequence: one row's statistics).
                for c in [320, 1312] {
                    check(g.clone(), n_mix, c, &[3, 1, 2]);
                    check(g.clone(), n_mix, c, &[250, 1, 9]);
                    check(g.clone(), n_mix, c, &[1, 1, 1]);
                }
            }
        }
        let h = Harness::new(Dims::default());
        let buf = h.f32_buf(&[0.0; 64]);
        let args = LnShiftArgs {
            c: 322,
            n_mix: 1,
            mix_off: 0,
            ln_off: 0,
            x_off: 0,
            out_off: 0,
            out_stride: 0,
            state_off: 0,
            slot_len: 322,
            eps: crate::config::LN_EPS,
        };
        let err = ln_shift(&h.ctx(), None, &args, &buf, &h.u32_buf(&[0]), &buf, &buf)
            .err()
            .expect("C = 322 refused");
        assert!(err.to_string().contains("multiples of 4"), "{err}");
    }

    fn check(gpu: std::sync::Arc<crate::gpu::GpuContext>, n_mix: usize, c: usize, lens: &[usize]) {
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
        let act_buf = h.f32_buf(&act);
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
            eps: crate::config::LN_EPS,
        };
        let node = ln_shift(
            &h.ctx(),
            None,
            &args,
            &h.f32_buf(&vecs),
            &h.u32_buf(&meta),
            &state_buf,
            &act_buf,
        )
        .unwrap();
        h.run(&[node]);
        let got = h.read(&act_buf, t * c, n_mix * t * c);
        let st = h.read(&state_buf, 0, 3 * slot_len);
        let xn: Vec<Vec<f32>> = (0..t)
            .map(|i| ln_ref(&x[i * c..(i + 1) * c], &ln_w, &ln_b, crate::config::LN_EPS))
            .collect();
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
    }
}
