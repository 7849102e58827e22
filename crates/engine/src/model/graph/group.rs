//! Decode steps run independent matrix × vector products of a block as one
//! `matvec_group` dispatch (`ops::matvec_group`): which nodes group, and where the
//! grouped dispatch takes their place.

use crate::error::{EngineError, Result};
use crate::ops::matmul::{
    matmul_group, tile_groupable, GroupItem, MatmulArgs, MAX_GROUP, MEDIUM_T, SMALL_T,
};
use crate::ops::matvec_group::{groupable, MAX_SEGS};
use crate::ops::{self, Count, Ctx, GpuMatrix, Node, Small};

/// For decode passes, runs the products of `segs` (independent, nodes `nodes` in the
/// same order) as few `matvec_group` dispatches as [`groupable`] allows: the matrices of
/// the buffer most of them share, with the F16 matrices of the second buffer most of the
/// rest share (an adapter's `A`), in the first member's place; the other members
/// dispatch nothing. Larger passes keep every node's own kernels.
pub(super) fn group_decode(
    cx: &Ctx,
    name: &'static str,
    layer: Option<usize>,
    nodes: &mut [Node],
    segs: &[(&GpuMatrix, MatmulArgs)],
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
) -> Result<()> {
    let mut left: Vec<usize> = (0..segs.len()).collect();
    // The buffer most of `from` share (ties: the first), and its members.
    let most = |from: &[usize]| -> Vec<usize> {
        let count = |b: &wgpu::Buffer| from.iter().filter(|&&i| segs[i].0.buffer == *b).count();
        let Some(&best) = from
            .iter()
            .max_by_key(|&&i| (count(&segs[i].0.buffer), usize::MAX - i))
        else {
            return Vec::new();
        };
        let first = segs[best].0;
        from.iter()
            .copied()
            .filter(|&i| segs[i].0.buffer == first.buffer)
            .filter(|&i| groupable(&[first, segs[i].0], u64::MAX))
            .collect()
    };
    while left.len() >= 2 {
        let one = most(&left);
        let rest: Vec<usize> = left
            .iter()
            .copied()
            .filter(|i| !one.contains(i) && segs[*i].0.dtype == crate::DType::F16)
            .collect();
        let two = most(&rest);
        let mut members: Vec<usize> = one.iter().chain(&two).copied().collect();
        members.truncate(MAX_SEGS);
        let mats: Vec<&GpuMatrix> = members.iter().map(|&i| segs[i].0).collect();
        if members.len() < 2 || !groupable(&mats, cx.gpu.max_binding()) {
            break;
        }
        let group: Vec<_> = members.iter().map(|&i| segs[i]).collect();
        let mut fused = Some(ops::matvec_group::matvec_group(
            cx, name, layer, &group, vecs, act,
        )?);
        let mut order = members.clone();
        order.sort_unstable();
        for &i in &order {
            let node = &mut nodes[i];
            // The decode variant hangs below the node's matrix × vector variant (itself
            // below the medium variant, where the product has one).
            let mv = match node.variant_mut(MEDIUM_T).is_some() {
                true => node
                    .variant_mut(MEDIUM_T)
                    .and_then(|m| m.node.small.as_mut()),
                false => node.small.as_mut(),
            };
            let Some(mv) = mv else {
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
        left.retain(|i| !members.contains(i));
    }
    Ok(())
}

/// A product a block may group: its node, its reduce step, matrix, arguments and k slices.
pub(super) type Member<'a> = (Node, Node, &'a GpuMatrix, MatmulArgs, u32);

/// `nodes` (node, reduce step, matrix, arguments, k slices) onto `body` in order, a
/// decode step running them grouped ([`group_decode`]). With `tiles` (the k-split scratch
/// and the graph's token capacity; tensor cores), larger passes run the products of each
/// buffer and encoding as one [`matmul_group`] dispatch (and one reduce step) in their
/// place; the members then keep only their decode variants.
#[allow(clippy::too_many_arguments)]
pub(super) fn push_grouped(
    cx: &Ctx,
    name: &'static str,
    layer: Option<usize>,
    nodes: Vec<Member>,
    vecs: &wgpu::Buffer,
    act: &wgpu::Buffer,
    tiles: Option<(&wgpu::Buffer, usize)>,
    body: &mut Vec<Node>,
) -> Result<()> {
    let mut main = Vec::new();
    let mut reduces = Vec::new();
    let mut segs = Vec::new();
    let mut kss = Vec::new();
    for (n, r, m, args, ks) in nodes {
        main.push(n);
        reduces.push(r);
        segs.push((m, args));
        kss.push(ks);
    }
    group_decode(cx, name, layer, &mut main, &segs, vecs, act)?;
    let mut taken = vec![false; main.len()];
    if let Some((scratch, t_cap)) = tiles {
        // Only members whose own kernels stop at SMALL_T tokens: the group takes over above.
        let mut left: Vec<usize> = (0..segs.len())
            .filter(|&i| main[i].small.as_ref().is_some_and(|s| s.max == SMALL_T))
            .collect();
        while let Some(&i0) = left.first() {
            let (m0, split0) = (segs[i0].0, kss[i0] > 1);
            let same: Vec<usize> = left
                .iter()
                .copied()
                .filter(|&i| {
                    let m = segs[i].0;
                    m.buffer == m0.buffer && m.dtype == m0.dtype && (kss[i] > 1) == split0
                })
                .take(MAX_GROUP)
                .collect();
            left.retain(|i| !same.contains(i));
            let items: Vec<GroupItem> = same
                .iter()
                .map(|&i| GroupItem {
                    m: segs[i].0,
                    args: segs[i].1,
                    ks: kss[i],
                })
                .collect();
            let slices: usize = items
                .iter()
                .map(|it| it.ks as usize * t_cap * it.m.n_out)
                .sum();
            let fits = !split0 || slices as u64 * 4 <= scratch.size();
            if !fits || !tile_groupable(cx, &items) {
                continue;
            }
            let (g, r) = matmul_group(cx, name, layer, &items, vecs, act, scratch, t_cap)?;
            body.push(g);
            body.extend(r);
            for &i in &same {
                taken[i] = true;
            }
        }
    }
    for ((n, r), taken) in main.into_iter().zip(reduces).zip(taken) {
        if taken {
            // Larger passes: the group's dispatch; decode: the node's own variants.
            let mut s = n.skip();
            s.small = n.small;
            body.push(s);
        } else {
            body.push(n);
            body.push(r);
        }
    }
    Ok(())
}

/// Makes passes of one token dispatch `node` in place of everything `nodes` dispatch for
/// them: the first of `nodes` runs `node` as its one-token variant, every other one nothing
/// (each gets a variant for passes of one token below its current smallest, so that larger
/// passes keep what they ran).
pub(super) fn one_token_instead(nodes: &mut [Node], node: Node) {
    let mut node = Some(node);
    for n in nodes.iter_mut() {
        let Some(last) = nth_variant(n, variants(n)) else {
            continue; // not reached: `variants` counted them
        };
        let instead = match node.take() {
            Some(f) => f,
            None => last.skip(),
        };
        last.small = Some(Small {
            count: Count::Tokens,
            max: 1,
            node: Box::new(instead),
        });
    }
}

/// How many variants hang below `n` (its chain of small variants).
fn variants(n: &Node) -> usize {
    n.small.as_ref().map_or(0, |s| 1 + variants(&s.node))
}

/// The `i`-th variant below `n` (`n` itself for 0).
fn nth_variant(n: &mut Node, i: usize) -> Option<&mut Node> {
    if i == 0 {
        return Some(n);
    }
    n.small
        .as_mut()
        .and_then(|s| nth_variant(&mut s.node, i - 1))
}
