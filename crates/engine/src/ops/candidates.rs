//! A sampled draw's O(vocab) part on the GPU (`shaders/candidates.wgsl`): each output row's
//! largest logit, the sum and count of its eligible probabilities, the highest of the CPU
//! draw's floors (2⁻⁸, 2⁻¹², … 2⁻²⁴) whose tokens hold the k best or the nucleus, and those
//! tokens. A decode step then reads back [`row_words`] words a row instead of `vocab`, and
//! the host draws from the candidates (`Sampler::draw_from_candidates`). The output's
//! format ([`CandRow`]) is the sampler's (`sampler/gpu.rs`), which reads it.

use crate::error::Result;
use crate::gpu::pipeline::{KernelSpec, Wgsl};
use crate::ops::{Count, Ctx, Grid, Node, COMMON};
pub use crate::sampler::{row_options, row_words, CandRow, CAP};

/// The `candidates` kernel (one variant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CandidatesSpec;

impl KernelSpec for CandidatesSpec {
    fn label(&self) -> String {
        "candidates".into()
    }

    fn source(&self) -> Result<String> {
        Ok(Wgsl::new()
            .file(COMMON)
            .file(shader!("argmax_reduce.wgsl"))
            .file(shader!("candidates.wgsl"))
            .build())
    }
}

/// Mirrors `Params` of `shaders/candidates.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub(crate) vocab: u32,
    pub(crate) cap: u32,
    pub(crate) _p: [u32; 2],
}

/// The node: `opts` `[R, 4]` u32 ([`row_options`], written before the pass), `logits`
/// `[R, vocab]` f32 (after `adjust_logits`), `out` `[R, row_words()]` u32.
pub fn candidates(
    cx: &Ctx,
    vocab: usize,
    opts: &wgpu::Buffer,
    logits: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<Node> {
    let p = Params {
        vocab: vocab as u32,
        cap: CAP as u32,
        _p: [0; 2],
    };
    cx.node(
        "candidates",
        None,
        &CandidatesSpec,
        &p,
        &[opts, logits, out],
        Grid::Linear {
            count: Count::Rows,
            per: 1,
            wg_size: 1,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::buffer;
    use crate::ops::testing::*;
    use crate::ops::Dims;

    /// The definition on the CPU (f64): max, eligible sum and count, the first floor of
    /// the ladder that holds the k best / the nucleus, and the set above it.
    fn reference(row: &[f32], lo: f32, k: usize, top_p: f32) -> (f32, f64, usize, f32, Vec<u32>) {
        let m = row
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        let p: Vec<f64> = row.iter().map(|&l| f64::from(l - m).exp()).collect();
        let elig = |q: f64| q >= f64::from(lo);
        let sum: f64 = p.iter().copied().filter(|&q| elig(q)).sum();
        let count = p.iter().filter(|&&q| elig(q)).count();
        for j in 0..5 {
            let tau = 2f32.powi(-8 - 4 * j).max(lo);
            let above: Vec<u32> = (0..row.len() as u32)
                .filter(|&i| elig(p[i as usize]) && p[i as usize] >= f64::from(tau))
                .collect();
            let mass: f64 = above.iter().map(|&i| p[i as usize]).sum();
            let holds = if k > 0 && k < count {
                above.len() >= k
            } else {
                mass >= f64::from(top_p) * sum
            };
            if holds {
                return (m, sum, count, tau, above);
            }
        }
        (m, sum, count, 0.0, Vec::new())
    }

    /// Rows shaped like a model's logits (a spread and a few tokens above it), a row of
    /// NaN, a flat row no floor holds, and min-p: the header and the candidate set equal
    /// the CPU definition's (the set up to tokens within 2⁻¹² of the floor, which the
    /// kernel lets through for the host to drop).
    #[test]
    fn matches_the_cpu_definition() {
        let vocab = 65_531;
        let mut rows: Vec<Vec<f32>> = (0..6).map(|r| rand_vec(300 + r, vocab, 3.0)).collect();
        for (r, row) in rows.iter_mut().enumerate().take(4) {
            for (t, l) in [(11usize, 12.0), (4000, 11.0), (65_000, 10.5)] {
                row[t] = l + r as f32;
            }
            row[77] = f32::NAN;
        }
        rows[4] = vec![f32::NAN; vocab];
        rows[5] = vec![0.25; vocab]; // flat: the nucleus needs far more than CAP tokens
        let opts: Vec<(f32, usize, f32)> = vec![
            (f32::from_bits(1), 0, 0.3),
            (f32::from_bits(1), 3, 1.0),
            (0.01, 0, 0.95),
            (f32::from_bits(1), 3, 0.5),
            (f32::from_bits(1), 0, 0.3),
            (f32::from_bits(1), 0, 0.9),
        ];
        let h = Harness::new(Dims {
            n_rows: rows.len() as u32,
            ..Default::default()
        });
        let o: Vec<u32> = opts
            .iter()
            .flat_map(|&(lo, k, tp)| row_options(lo, k, tp))
            .collect();
        let opt_buf = h.u32_buf(&o);
        let logits = h.f32_buf(&rows.concat());
        let words = row_words();
        let out = buffer::storage(&h.gpu, "candidates", (rows.len() * words * 4) as u64);
        let n = candidates(&h.ctx(), vocab, &opt_buf, &logits, &out).unwrap();
        h.run(&[n]);
        let got = buffer::read_f32(&h.gpu, &out, 0, rows.len() * words).unwrap();
        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
        for (r, row) in rows.iter().enumerate() {
            let c = CandRow::parse(&got[r * words..(r + 1) * words]);
            let (lo, k, tp) = opts[r];
            if r == 4 {
                assert_eq!((c.max, c.argmax, c.found), (f32::NEG_INFINITY, u32::MAX, 0));
                continue;
            }
            let (m, sum, count, tau, set) = reference(row, lo, k, tp);
            assert_eq!(c.max, m, "row {r}");
            assert_eq!(c.argmax, crate::ops::argmax::reference(row).0, "row {r}");
            // An f32 tree sum of up to 65,531 terms ≤ 1 against f64: 1e-5 relative.
            assert!(
                (f64::from(c.sum) - sum).abs() <= 1e-5 * sum,
                "row {r}: {} {sum}",
                c.sum
            );
            assert_eq!(c.count, count, "row {r}");
            assert_eq!(c.floor, tau, "row {r}");
            if r == 5 {
                assert!(c.found > CAP, "row 5 found {}", c.found);
                continue;
            }
            assert!(tau > 0.0 && c.found <= CAP, "row {r}: {tau} {}", c.found);
            let mut ids: Vec<u32> = c.cands.iter().map(|x| x.0).collect();
            ids.sort_unstable();
            // The kernel's margin may add tokens just under the floor, never drop one.
            let extra: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|i| set.binary_search(i).is_err())
                .collect();
            assert!(
                set.iter().all(|i| ids.binary_search(i).is_ok()),
                "row {r}: a token missing"
            );
            for i in extra {
                let q = f64::from(row[i as usize] - m).exp();
                assert!(
                    q >= f64::from(tau) * (1.0 - 4e-4),
                    "row {r}: token {i} far under the floor"
                );
            }
            for &(i, l) in &c.cands {
                assert_eq!(
                    l.to_bits(),
                    row[i as usize].to_bits(),
                    "row {r}: token {i}'s logit"
                );
            }
        }
    }
}
