//! Token shift with lerp (`shaders/token_shift.wgsl`): the six time-mix inputs
//! (r, w, k, v, a, g) or the one channel-mix input, from x and the previous token.

use crate::error::Result;
use crate::gpu::pipeline::PipelineKey;
use crate::ops::{op_err, Count, Ctx, Grid, Node};

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    c: u32,
    n_mix: u32,
    mix_off: u32,
    x_off: u32,
    out_off: u32,
    out_stride: u32,
    state_off: u32,
    slot_len: u32,
}

/// Where a token-shift reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct ShiftArgs {
    pub c: usize,
    /// 6 (time mix) or 1 (channel mix).
    pub n_mix: usize,
    /// `vecs` offset of the mixes `[n_mix, C]`.
    pub mix_off: usize,
    /// `act` offset of x `[T, C]`.
    pub x_off: usize,
    /// `act` offset of mix 0's output; mix m at `out_off + m * out_stride`.
    pub out_off: usize,
    pub out_stride: usize,
    /// Offset of the shift vector inside a state slot, and the slot length (f32).
    pub state_off: usize,
    pub slot_len: usize,
}

/// `out_m[t] = x[t] + (prev(t) - x[t]) * mix_m`, prev from the state for a sequence's
/// first token in the pass.
#[allow(clippy::too_many_arguments)]
pub fn token_shift(
    cx: &Ctx,
    layer: Option<usize>,
    a: &ShiftArgs,
    vecs: &wgpu::Buffer,
    meta: &wgpu::Buffer,
    state: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<Node> {
    if a.n_mix == 0 || a.n_mix > 6 {
        return Err(op_err(
            "token_shift",
            format!("{} mixes; 1 to 6 allowed", a.n_mix),
        ));
    }
    let p = Params {
        c: a.c as u32,
        n_mix: a.n_mix as u32,
        mix_off: a.mix_off as u32,
        x_off: a.x_off as u32,
        out_off: a.out_off as u32,
        out_stride: a.out_stride as u32,
        state_off: a.state_off as u32,
        slot_len: a.slot_len as u32,
    };
    let key = PipelineKey {
        op: "token_shift",
        dtype: None,
        spec: vec![],
    };
    cx.node(
        "token_shift",
        layer,
        &key,
        &p,
        &[vecs, meta, state, act],
        Grid::Linear {
            count: Count::Tokens,
            per: a.c as u32,
            wg_size: 64,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// Two sequences (lengths 3 and 2) in slots 1 and 0; six mixes.
    #[test]
    fn mixes_with_previous_token_or_state() {
        let c = 64;
        let lens = [3usize, 2];
        let t: usize = lens.iter().sum();
        // meta: tok_seq [T], tok_pos [T], seqs [B*4]
        let mut meta = vec![0u32, 0, 0, 1, 1];
        meta.extend([0u32, 1, 2, 0, 1]);
        meta.extend([0u32, 3, 1, 0, 3, 2, 0, 0]);
        let h = Harness::new(Dims {
            n_tokens: t as u32,
            n_seqs: 2,
            off_tok_seq: 0,
            off_tok_pos: t as u32,
            off_seqs: 2 * t as u32,
            ..Default::default()
        });
        let x = rand_vec(4, t * c, 1.0);
        let mixes = rand_vec(5, 6 * c, 1.0);
        let slot_len = 3 * c;
        let state = rand_vec(6, 2 * slot_len, 1.0);
        let mut act = x.clone();
        act.extend(vec![0.0; 6 * t * c]);
        let act_buf = h.f32_buf(&act);
        let args = ShiftArgs {
            c,
            n_mix: 6,
            mix_off: 0,
            x_off: 0,
            out_off: t * c,
            out_stride: t * c,
            state_off: c,
            slot_len,
        };
        let n = token_shift(
            &h.ctx(),
            None,
            &args,
            &h.f32_buf(&mixes),
            &h.u32_buf(&meta),
            &h.f32_buf(&state),
            &act_buf,
        )
        .unwrap();
        h.run(&[n]);
        let got = h.read(&act_buf, t * c, 6 * t * c);
        let slots = [1usize, 0];
        let starts = [0usize, 3];
        for m in 0..6 {
            for tok in 0..t {
                let b = usize::from(tok >= 3);
                for i in 0..c {
                    let prev = if tok == starts[b] {
                        state[slots[b] * slot_len + c + i]
                    } else {
                        x[(tok - 1) * c + i]
                    };
                    let xv = x[tok * c + i];
                    let want = xv + (prev - xv) * mixes[m * c + i];
                    let g = got[m * t * c + tok * c + i];
                    assert!(
                        (g - want).abs() < 1e-6,
                        "mix {m} token {tok} ch {i}: {g} vs {want}"
                    );
                }
            }
        }
    }
}
