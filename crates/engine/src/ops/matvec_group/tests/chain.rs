//! Chained groups: second products that read their first products' outputs in the same
//! one-token dispatch (`chain.rs`), against the CPU. Two dispatches take turns over two h
//! sets (each empties the other's) with new inputs every round; in the middle rounds the
//! producers publish nothing, so every consumer makes its x itself — and one that found a
//! value of an earlier round there (a set not emptied) fails.

use super::*;
use crate::ops::matmul::h_sets;

// (rows, K, activation): two producers, the main product (r, k, v's place), two consumers.
const SHAPES: [(usize, usize, Act); 5] = [
    (64, 256, Act::Tanh),
    (32, 256, Act::Sigmoid),
    (256, 256, Act::None),
    (256, 64, Act::None),
    (256, 32, Act::Sigmoid),
];
const LEAD: usize = 2;
const LINKS: [(usize, usize); 2] = [(0, 3), (1, 4)];

#[test]
fn second_products_read_the_first_ones_in_the_same_dispatch() {
    // The main product F16 beside the others (one buffer) or Q4_K (the chains' F16 in a
    // second buffer, as a Q4_K_M file's); subgroup sums or the tree.
    for (q4k, subgroup) in [(false, true), (true, true), (true, false)] {
        run(q4k, subgroup);
    }
}

fn run(q4k: bool, subgroup: bool) {
    let mut g = (*gpu()).clone();
    g.features.subgroup &= subgroup;
    let h = Harness::with_gpu(
        Dims {
            n_tokens: 1,
            ..Default::default()
        },
        std::sync::Arc::new(g),
    );
    let mut bytes = [Vec::new(), Vec::new()];
    let mut ws = Vec::new();
    let mut mats = Vec::new();
    for (i, &(n, k, _)) in SHAPES.iter().enumerate() {
        let w = rand_vec(150 + i as u64, n * k, 0.2);
        let bi = usize::from(q4k && i != LEAD);
        let b = &mut bytes[bi];
        b.resize(b.len().next_multiple_of(256) + 256 * bi, 0);
        let off = b.len() as u64;
        if q4k && i == LEAD {
            let q: Vec<u8> = bytemuck::cast_slice(&crate::quant::quantize_q4_k_rtn(&w)).to_vec();
            let mut wd = vec![0f32; n * k];
            crate::quant::dequantize(DType::Q4_K, &q, &mut wd).unwrap();
            b.extend_from_slice(&q);
            ws.push(wd);
            mats.push((off, n, k, DType::Q4_K, bi, k / 256 * 144));
        } else {
            let w16: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            b.extend_from_slice(bytemuck::cast_slice(&w16));
            ws.push(w16.iter().map(|v| v.to_f32()).collect());
            mats.push((off, n, k, DType::F16, bi, 2 * k));
        }
    }
    for b in &mut bytes {
        b.resize(b.len().max(256), 0);
    }
    let bufs = [0, 1].map(|i| buffer::storage_init(&h.gpu, "chain", &bytes[i]).unwrap());
    let gm: Vec<GpuMatrix> = mats
        .iter()
        .map(|&(offset, n, k, dtype, bi, row_bytes)| GpuMatrix {
            name: format!("m{bi}.{offset}"),
            buffer: bufs[bi].clone(),
            offset,
            dtype,
            row0: 0,
            n_out: n,
            n_in: k,
            row_bytes,
        })
        .collect();
    // act: each segment's x [k] then y [n]; a consumer's x is its producer's y.
    let mut len = 0;
    let mut offs = Vec::new();
    for &(n, k, _) in &SHAPES {
        offs.push((len, len + k));
        len += k + n;
    }
    let margs: Vec<MatmulArgs> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(n, k, a))| MatmulArgs {
            x_off: offs[i].0,
            x_stride: k,
            y_off: offs[i].1,
            y_stride: n,
            act: a,
            accumulate: false,
            add_before_act: false,
            bias_off: (i == 3).then_some(0),
            rows: Count::Tokens,
            scale: 1.0,
            lora: None,
        })
        .collect();
    let bias = rand_vec(160, 256, 0.5);
    let bias_buf = h.f32_buf(&bias);
    let act_buf = h.f32_buf(&vec![0.0; len]);
    let set_len = 97; // 64 + 32 rows and the count
    let sets = h_sets(&h.gpu, 2 * set_len).unwrap();
    let segs: Vec<(&GpuMatrix, MatmulArgs)> = gm.iter().zip(margs.iter().copied()).collect();
    let node = |set: usize, reset: usize, unpublished: bool| {
        let ch = Chained {
            links: LINKS.to_vec(),
            lead: LEAD,
            sets: &sets,
            set,
            reset,
            len: set_len,
            spin: if unpublished { 0 } else { 4096 },
            unpublished,
        };
        matvec_group_chained(&h.ctx(), "chain", None, &segs, &ch, &bias_buf, &act_buf).unwrap()
    };
    // (set, published) a round: the dispatch of set 0 empties set 1 and the other way.
    let rounds = [
        (0, true),
        (1, true),
        (0, false),
        (1, false),
        (0, true),
        (1, true),
    ];
    for (round, &(set, published)) in rounds.iter().enumerate() {
        let unpublished = !published;
        let round = round as u64;
        // New inputs each round (the consumers' x made in the dispatch).
        let mut act = vec![0.0; len];
        let mut xs = Vec::new();
        for (i, &(_, k, _)) in SHAPES.iter().enumerate() {
            let x = rand_vec(170 + 10 * round + i as u64, k, 1.0);
            act[offs[i].0..offs[i].0 + k].copy_from_slice(&x);
            xs.push(x);
        }
        h.gpu
            .queue
            .write_buffer(&act_buf, 0, bytemuck::cast_slice(&act));
        h.run(&[node(set * set_len, (1 - set) * set_len, unpublished)]);
        let q8 = q4k && h.gpu.tuning.mv_q8 != Some(false);
        let mut ys: Vec<Vec<f32>> = Vec::new();
        for (i, &(n, k, a)) in SHAPES.iter().enumerate() {
            let x = match LINKS.iter().find(|l| l.1 == i) {
                Some(&(pi, _)) => ys[pi].clone(),
                None if i == LEAD && q8 => q8_rounded(&xs[i]),
                None => xs[i].clone(),
            };
            let b = (i == 3).then(|| &bias[..n]);
            let want = reference(&ws[i], n, k, &x, b, a);
            let got = h.read(&act_buf, offs[i].1, n);
            let err = max_abs(&got, &want);
            assert!(
                err < 2e-3,
                "segment {i}, round {round} (Q4_K {q4k}, subgroups {subgroup}, unpublished \
                 {unpublished}): max |Δ| {err}"
            );
            ys.push(want);
        }
    }
}
