//! Greedy draws on the GPU: each output row's bans and penalties applied to its logits
//! (`shaders/adjust_logits.wgsl`), then its argmax (`shaders/argmax.wgsl`), so that greedy
//! decoding of many sequences reads back 8 bytes a row instead of the row's logits.

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{Count, Ctx, Grid, Node, COMMON};

/// The `argmax` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArgmaxSpec;

impl KernelSpec for ArgmaxSpec {
    fn label(&self) -> String {
        "argmax".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .file(COMMON)
            .file(shader!("argmax_reduce.wgsl"))
            .file(shader!("argmax.wgsl"))
            .build())
    }
}

/// The `adjust_logits` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AdjustSpec;

impl KernelSpec for AdjustSpec {
    fn label(&self) -> String {
        "adjust_logits".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .file(COMMON)
            .file(shader!("adjust_logits.wgsl"))
            .build())
    }
}

/// Entries of the adjustment buffer per output row a pass may have (see [`adjust`]).
pub const ADJUST_PER_ROW: usize = 1024;

/// The adjustment buffer for `rows` output rows: a count and [`ADJUST_PER_ROW`] entries a
/// row, each (logit index, f32 bits of its delta).
pub fn adjust_buffer(gpu: &crate::gpu::GpuContext, rows: usize) -> wgpu::Buffer {
    crate::gpu::buffer::storage(
        gpu,
        "logit adjustments",
        (4 + 8 * ADJUST_PER_ROW * rows) as u64,
    )
}

/// `logits[i] −= delta` for each (i, delta) entry of `adj` (`[count, (i, delta bits)…]`,
/// written before the pass; distinct i, each below the pass's R × vocab; delta = +inf
/// bans): the CPU sampler's bans and penalties of greedy draws, before [`argmax`].
pub fn adjust(cx: &Ctx, vocab: usize, adj: &wgpu::Buffer, logits: &wgpu::Buffer) -> Result<Node> {
    let p = Params {
        vocab: vocab as u32,
        _p: [0; 3],
    };
    cx.node(
        "adjust_logits",
        None,
        &AdjustSpec,
        &p,
        &[adj, logits],
        Grid::Linear {
            count: Count::Rows,
            per: ADJUST_PER_ROW as u32,
            wg_size: 256,
        },
    )
}

/// Mirrors `Params` of `shaders/argmax.wgsl` and `shaders/adjust_logits.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) vocab: u32,
    pub(crate) _p: [u32; 3],
}

/// `out[r] = (i, l[i].to_bits())` for each of the pass's R output rows of `logits`
/// (`[R, vocab]` f32): `i` the lowest index of the row's largest value, NaN never chosen
/// (a row of NaN only: `(u32::MAX, −inf)`). `out` holds R × 2 u32.
pub fn argmax(cx: &Ctx, vocab: usize, logits: &wgpu::Buffer, out: &wgpu::Buffer) -> Result<Node> {
    let p = Params {
        vocab: vocab as u32,
        _p: [0; 3],
    };
    cx.node(
        "argmax",
        None,
        &ArgmaxSpec,
        &p,
        &[logits, out],
        Grid::Linear {
            count: Count::Rows,
            per: 1,
            wg_size: 1,
        },
    )
}

/// CPU reference: (index, value) of the largest value of `row`, the lowest index on ties,
/// NaN skipped; `(u32::MAX, −inf)` when every value is NaN.
pub fn reference(row: &[f32]) -> (u32, f32) {
    let mut best = (u32::MAX, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        if v > best.1 || (v == best.1 && (i as u32) < best.0) {
            best = (i as u32, v);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// Five rows of a 65,536-token vocabulary (not a multiple of anything but the
    /// workgroup): random values; a tie of the maximum at two indices (the lower wins);
    /// NaN beside the maximum and as the first value; −inf everywhere but NaN; NaN only.
    #[test]
    fn matches_the_cpu_argmax() {
        let vocab = 65_531;
        let mut rows: Vec<Vec<f32>> = (0..5).map(|r| rand_vec(70 + r, vocab, 4.0)).collect();
        rows[1][40_000] = 9.0;
        rows[1][7] = 9.0;
        rows[2][0] = f32::NAN;
        rows[2][3] = 11.0;
        rows[2][4] = f32::NAN;
        rows[3] = vec![f32::NEG_INFINITY; vocab];
        rows[3][5] = f32::NAN;
        rows[4] = vec![f32::NAN; vocab];
        let h = Harness::new(Dims {
            n_rows: rows.len() as u32,
            ..Default::default()
        });
        let logits = h.f32_buf(&rows.concat());
        let out = buffer::storage(&h.gpu, "argmax", rows.len() as u64 * 8);
        let n = argmax(&h.ctx(), vocab, &logits, &out).unwrap();
        h.run(&[n]);
        let got = buffer::read_f32(&h.gpu, &out, 0, 2 * rows.len()).unwrap();
        let want: Vec<(u32, f32)> = rows.iter().map(|r| reference(r)).collect();
        assert_eq!(want[1].0, 7);
        assert_eq!(want[2], (3, 11.0));
        assert_eq!(want[3].0, 0);
        assert_eq!(want[4], (u32::MAX, f32::NEG_INFINITY));
        for (r, w) in want.iter().enumerate() {
            assert_eq!(got[2 * r].to_bits(), w.0, "row {r}");
            assert_eq!(got[2 * r + 1], w.1, "row {r}");
        }
    }

    /// Bans and penalties on three rows of 1,000 logits — a penalty that moves the argmax,
    /// a ban of it, an entry of a row past the pass (ignored) — then the argmax: the
    /// logits equal the CPU's `l − delta` bit for bit, and the argmax follows them.
    #[test]
    fn adjustments_are_the_cpu_subtraction() {
        let vocab = 1000;
        let rows: Vec<Vec<f32>> = (0..3).map(|r| rand_vec(80 + r, vocab, 2.0)).collect();
        let h = Harness::new(Dims {
            n_rows: 3,
            ..Default::default()
        });
        let top = |r: &[f32]| reference(r).0 as usize;
        let (t0, t1) = (top(&rows[0]), top(&rows[1]));
        let entries: Vec<(usize, f32)> = vec![
            (t0, 100.0),
            (17, 0.37),
            (vocab + t1, f32::INFINITY),
            (vocab + 3, -0.25),
            (3 * vocab + 5, 1.0), // row 3: not in this pass
        ];
        let mut adj = vec![entries.len() as u32];
        for &(i, dlt) in &entries {
            adj.extend([i as u32, dlt.to_bits()]);
        }
        let adj_buf = h.u32_buf(&adj);
        let mut flat = rows.concat();
        flat.extend(vec![0.5; vocab]);
        let logits = h.f32_buf(&flat);
        let out = buffer::storage(&h.gpu, "argmax", 3 * 8);
        let a = adjust(&h.ctx(), vocab, &adj_buf, &logits).unwrap();
        let m = argmax(&h.ctx(), vocab, &logits, &out).unwrap();
        h.run(&[a, m]);
        let mut want = flat.clone();
        for &(i, dlt) in &entries[..4] {
            want[i] -= dlt;
        }
        let got = h.read(&logits, 0, 4 * vocab);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(g, w)| g.to_bits() == w.to_bits()));
        assert_eq!(got[vocab + t1], f32::NEG_INFINITY);
        let am = buffer::read_f32(&h.gpu, &out, 0, 6).unwrap();
        for r in 0..3 {
            let w = reference(&want[r * vocab..(r + 1) * vocab]);
            assert_eq!((am[2 * r].to_bits(), am[2 * r + 1]), w, "row {r}");
        }
        assert_ne!(
            am[0].to_bits() as usize,
            t0,
            "the penalty moved row 0's argmax"
        );
        assert_ne!(am[2].to_bits() as usize, t1, "the ban moved row 1's argmax");
    }
}
