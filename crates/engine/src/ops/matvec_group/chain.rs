//! One-token groups whose later segments read what earlier ones make in the same dispatch
//! (`shaders/matvec_group/chain.wgsl`): in a decode step, the low-rank chains' second
//! products (`w2`, `a2`, `g2`, `v2`: `[C, D]`, F16) after their first products and r, k,
//! v, so that a block's steps 4–8 are one dispatch instead of two (H200, 2.9B Q4_K:
//! `att.lora2` took 5.4–7.4 µs of wall time a dispatch, 32 a token).
//!
//! The producers (first products) publish their rows in a set of "h sets" (u32 slots,
//! empty = `u32::MAX`, [`crate::ops::matmul::h_sets`]) with atomic stores; the consumers'
//! workgroups, last in the grid, gather their x from it (polling an empty slot at most
//! `spin` times, then computing that row of the producer themselves), then compute their
//! rows from workgroup memory. Each dispatch publishes into its own set and empties the
//! next dispatch's (`reset`): a pass's layers take sets in turn, so a set is always emptied
//! by a dispatch that ends before its reader begins and begins after its last reader ended.

use super::Params;
use crate::error::Result;
use crate::ops::{op_err, GpuMatrix};
use crate::DType;

/// Rounds of rows a consumer workgroup computes (`CR`): its gather of h serves
/// 4 · 256 / LANES rows.
pub const CHAIN_ROUNDS: u32 = 4;

/// Most values a consumer reads (its depth: the rank of its chain).
pub const CHAIN_MAX_K: usize = 512;

/// The producer → consumer pairs of a chained group and the h sets they publish into.
pub struct Chained<'a> {
    /// (producer, consumer) indices into the group's segments: the consumer's x is the
    /// producer's output (its rows, after its epilogue).
    pub links: Vec<(usize, usize)>,
    /// The segment whose buffer and encoding are the group's first (as the first segment
    /// of [`super::groupable`]'s list; the producers need not be in it).
    pub lead: usize,
    /// The h sets: u32 slots, empty where nothing is published.
    pub sets: &'a wgpu::Buffer,
    /// This dispatch's set and the set its workgroup 0 empties (u32 offsets, different),
    /// and the slots of a set: the producers' rows, then the count of producer workgroups
    /// done (the last slot).
    pub set: usize,
    pub reset: usize,
    pub len: usize,
    /// Polls of an unpublished value before an invocation computes it itself.
    pub spin: u32,
    /// Tests only: the producers publish nothing, so every consumer makes its x itself
    /// (the path a scheduler that runs the consumers first would take).
    pub unpublished: bool,
}

/// Fills the chained fields of `p` (segments `mats`, `lanes` lanes a row) and each
/// segment's first workgroup; returns the dispatch's workgroups. Consumers take
/// `CHAIN_ROUNDS · 256 / lanes` rows a workgroup and come after their producers.
///
/// Errors: a consumer that is not F16 in the group's buffer or its second buffer (source
/// 0 or 2), deeper than [`CHAIN_MAX_K`] or not a multiple of 8, not as deep as its
/// producer's rows, or not after it; a segment both; sets that do not hold the producers'
/// rows or that coincide.
pub(super) fn chain_table(
    op: &'static str,
    p: &mut Params,
    mats: &[&GpuMatrix],
    ch: &Chained,
    lanes: u32,
) -> Result<u32> {
    let bad = |what: String| Err(op_err(op, what));
    let mut at = 0usize;
    // Where each producer publishes (once, whatever its consumers).
    let mut published: Vec<Option<u32>> = vec![None; mats.len()];
    for (i, &(pi, ci)) in ch.links.iter().enumerate() {
        let (Some(pm), Some(cm)) = (mats.get(pi), mats.get(ci)) else {
            return bad(format!("link {i}: no segment {pi} or {ci}"));
        };
        let cs = &p.seg[ci];
        let consumer_src = cs.src == 2 || (cs.src == 0 && cm.dtype == DType::F16);
        if cm.dtype != DType::F16 || !consumer_src {
            return bad(format!("{}: a chained consumer reads F16 rows", cm.name));
        }
        if cm.n_in > CHAIN_MAX_K || cm.n_in % 8 != 0 || cm.n_in != pm.n_out || ci <= pi {
            return bad(format!(
                "{} ({} deep) after {} ({} rows): not a consumer of it",
                cm.name, cm.n_in, pm.name, pm.n_out
            ));
        }
        if ch.links.iter().any(|&(a, b)| a == ci || b == pi) {
            return bad(format!("{}: both a producer and a consumer", pm.name));
        }
        let hp = *published[pi].get_or_insert_with(|| {
            let o = (ch.set + at) as u32;
            at += pm.n_out;
            o
        });
        if !ch.unpublished {
            p.seg[pi].hp = hp;
        }
        p.seg[ci].hc = hp;
        p.seg[ci].hseg = pi as u32;
    }
    if at + 1 > ch.len || ch.set.abs_diff(ch.reset) < ch.len {
        return bad(format!(
            "{at} published rows for sets of {} at {} and {}",
            ch.len, ch.set, ch.reset
        ));
    }
    p.hreset = ch.reset as u32;
    p.hreset_len = ch.len as u32;
    p.hspin = ch.spin;
    p.hcount = (ch.set + ch.len - 1) as u32;
    let mut wg = 0u32;
    for (i, m) in mats.iter().enumerate() {
        p.seg[i].wg0 = wg;
        let rows = match p.seg[i].hc {
            u32::MAX => 256 / lanes,
            _ => CHAIN_ROUNDS * 256 / lanes,
        };
        let n_wg = (m.n_out as u32).div_ceil(rows);
        if published[i].is_some() {
            p.hwgs += n_wg;
        }
        wg += n_wg;
    }
    Ok(wg)
}
