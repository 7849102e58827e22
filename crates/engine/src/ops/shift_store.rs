//! Saves each sequence's last LayerNorm output as its token-shift state
//! (`shaders/shift_store.wgsl`).

use crate::error::Result;
use crate::gpu::pipeline::PipelineKey;
use crate::ops::{Count, Ctx, Grid, Node};

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    c: u32,
    x_off: u32,
    state_off: u32,
    slot_len: u32,
}

/// `state[slot(b)][state_off..+c] = act[x_off + last_token(b) * c ..]` for each sequence.
#[allow(clippy::too_many_arguments)]
pub fn shift_store(
    cx: &Ctx,
    layer: Option<usize>,
    c: usize,
    x_off: usize,
    state_off: usize,
    slot_len: usize,
    meta: &wgpu::Buffer,
    act: &wgpu::Buffer,
    state: &wgpu::Buffer,
) -> Result<Node> {
    let p = Params {
        c: c as u32,
        x_off: x_off as u32,
        state_off: state_off as u32,
        slot_len: slot_len as u32,
    };
    let key = PipelineKey {
        op: "shift_store",
        dtype: None,
        spec: vec![],
    };
    cx.node(
        "shift_store",
        layer,
        &key,
        &p,
        &[meta, act, state],
        Grid::Linear {
            count: Count::Seqs,
            per: c as u32,
            wg_size: 64,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    #[test]
    fn stores_last_row_of_each_sequence() {
        let c = 64;
        // seqs: (start 0, len 3, slot 1), (start 3, len 2, slot 0)
        let meta = [0u32, 3, 1, 0, 3, 2, 0, 0];
        let h = Harness::new(Dims {
            n_tokens: 5,
            n_seqs: 2,
            off_seqs: 0,
            ..Default::default()
        });
        let x = rand_vec(7, 5 * c, 1.0);
        let slot_len = 2 * c;
        let state_buf = h.f32_buf(&vec![0.0; 2 * slot_len]);
        let n = shift_store(
            &h.ctx(),
            None,
            c,
            0,
            c,
            slot_len,
            &h.u32_buf(&meta),
            &h.f32_buf(&x),
            &state_buf,
        )
        .unwrap();
        h.run(&[n]);
        let st = h.read(&state_buf, 0, 2 * slot_len);
        assert_eq!(&st[slot_len + c..2 * slot_len], &x[2 * c..3 * c]);
        assert_eq!(&st[c..2 * c], &x[4 * c..5 * c]);
        assert!(st[..c].iter().all(|&v| v == 0.0));
    }
}
