//! Gathers the rows that feed the head / embeddings (`shaders/gather_rows.wgsl`).

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{Count, Ctx, Grid, Node, COMMON};

/// The `gather_rows` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GatherRowsSpec;

impl KernelSpec for GatherRowsSpec {
    fn label(&self) -> String {
        "gather_rows".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .file(COMMON)
            .file(shader!("gather_rows.wgsl"))
            .build())
    }
}

/// Mirrors `Params` of `shaders/gather_rows.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) c: u32,
    pub(crate) src_off: u32,
    pub(crate) dst_off: u32,
    pub(crate) _p: u32,
}

/// `act[dst_off + i*c ..] = act[src_off + rows[i]*c ..]` for the R rows listed in `meta`.
pub fn gather_rows(
    cx: &Ctx,
    c: usize,
    meta: &wgpu::Buffer,
    act: &wgpu::Buffer,
    src_off: usize,
    dst_off: usize,
) -> Result<Node> {
    let p = Params {
        c: c as u32,
        src_off: src_off as u32,
        dst_off: dst_off as u32,
        _p: 0,
    };
    cx.node(
        "gather_rows",
        None,
        &GatherRowsSpec,
        &p,
        &[meta, act],
        Grid::Linear {
            count: Count::Rows,
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
    fn gathers_listed_rows() {
        let (t, c) = (6, 64);
        let rows = [5u32, 0, 3];
        let h = Harness::new(Dims {
            n_tokens: t,
            n_rows: rows.len() as u32,
            off_rows: 0,
            ..Default::default()
        });
        let x = rand_vec(3, t as usize * c, 1.0);
        let mut act = x.clone();
        act.extend(vec![0.0; rows.len() * c]);
        let act_buf = h.f32_buf(&act);
        let meta = h.u32_buf(&rows);
        let n = gather_rows(&h.ctx(), c, &meta, &act_buf, 0, t as usize * c).unwrap();
        h.run(&[n]);
        let got = h.read(&act_buf, t as usize * c, rows.len() * c);
        for (i, &r) in rows.iter().enumerate() {
            assert_eq!(
                &got[i * c..(i + 1) * c],
                &x[r as usize * c..(r as usize + 1) * c]
            );
        }
    }
}
