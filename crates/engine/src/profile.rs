//! Per-dispatch GPU timing of one forward pass (`rwkv profile`, the app's dashboard).

use std::time::Instant;

use serde::Serialize;

use crate::api::{Engine, Rows, SeqInput, StateId};
use crate::error::{EngineError, Result};
use crate::gpu::buffer;

/// One dispatch's GPU time.
#[derive(Debug, Clone, Serialize)]
pub struct DispatchTime {
    /// `op@layer`, e.g. `att.key@3`.
    pub label: String,
    pub op: String,
    pub layer: Option<usize>,
    pub ns: f64,
}

/// Totals of one op (or one layer) over the pass.
#[derive(Debug, Clone, Serialize)]
pub struct Total {
    pub name: String,
    pub ns: f64,
    pub percent: f64,
    pub dispatches: usize,
}

/// GPU profile of one forward pass of `tokens` tokens.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    pub tokens: usize,
    /// How the times were taken.
    pub method: String,
    pub dispatches: Vec<DispatchTime>,
    pub by_op: Vec<Total>,
    pub by_layer: Vec<Total>,
    /// Sum of the dispatch times, ns.
    pub gpu_ns: f64,
    /// CPU side: recording the passes, submitting, waiting for the result, ms.
    pub encode_ms: f64,
    pub submit_ms: f64,
    pub wait_ms: f64,
}

fn totals(items: impl Iterator<Item = (String, f64)>, all: f64) -> Vec<Total> {
    let mut v: Vec<Total> = Vec::new();
    for (name, ns) in items {
        match v.iter_mut().find(|t| t.name == name) {
            Some(t) => {
                t.ns += ns;
                t.dispatches += 1;
            }
            None => v.push(Total {
                name,
                ns,
                percent: 0.0,
                dispatches: 1,
            }),
        }
    }
    for t in &mut v {
        t.percent = 100.0 * t.ns / all.max(1.0);
    }
    v.sort_by(|a, b| b.ns.total_cmp(&a.ns));
    v
}

impl Engine {
    /// Runs `tokens` (fed into `state`) as one pass with a timestamp around every
    /// dispatch, the head on the last token. `tokens.len()` must fit one pass (≤ the
    /// prefill chunk).
    ///
    /// Errors: [`EngineError::Gpu`] when the adapter has no timestamp queries; input
    /// errors as [`Engine::forward`].
    pub fn profile(&mut self, state: StateId, tokens: &[u32]) -> Result<ProfileReport> {
        self.profile_seqs(&[(state, tokens)])
    }

    /// [`Self::profile`] of one pass over several sequences, each `(state, tokens)`, the
    /// head on each one's last token: a server's decode step of B sequences is `B` entries
    /// of one token. The tokens together must fit one pass and the sequences the slots.
    ///
    /// Errors: as [`Self::profile`]; a state given twice.
    pub fn profile_seqs(&mut self, seqs: &[(StateId, &[u32])]) -> Result<ProfileReport> {
        if !self.gpu().features.timestamp {
            return Err(EngineError::gpu(format!(
                "{} has no timestamp queries: no GPU profile",
                self.gpu().summary.name
            )));
        }
        if seqs.is_empty() {
            return Err(EngineError::invalid("profile: no tokens"));
        }
        let inputs: Vec<SeqInput> = seqs
            .iter()
            .map(|&(state, tokens)| SeqInput {
                state,
                tokens,
                rows: Rows::Last,
            })
            .collect();
        self.check_inputs(&inputs)?;
        let (graph, gpu) = self.graph_and_gpu(seqs[0].0)?;
        let total: usize = seqs.iter().map(|s| s.1.len()).sum();
        if total > graph.t_cap {
            return Err(EngineError::invalid(format!(
                "profile: {total} tokens exceed one pass ({})",
                graph.t_cap
            )));
        }
        let t0 = Instant::now();
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let rows: Vec<u32> = seqs.iter().map(|s| s.1.len() as u32 - 1).collect();
        let ids: Vec<(u32, &[u32])> = seqs.iter().map(|s| (s.0 .0, s.1)).collect();
        let (labels, qs) = graph.encode_profiled(gpu, &mut enc, &ids, &rows, true)?;
        let n = 2 * labels.len() as u64;
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile.resolve"),
            size: n.max(2) * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        enc.resolve_query_set(&qs, 0..n as u32, &resolve, 0);
        let cmd = enc.finish();
        let encode_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        gpu.queue.submit([cmd]);
        let submit_ms = t1.elapsed().as_secs_f64() * 1e3;
        let t2 = Instant::now();
        gpu.wait()?;
        let wait_ms = t2.elapsed().as_secs_f64() * 1e3;
        let mut raw = vec![0u8; (n * 8) as usize];
        buffer::read_bytes(gpu, &resolve, 0, n * 8, &mut raw)?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&raw);
        let period = gpu.queue.get_timestamp_period() as f64;
        let dispatches: Vec<DispatchTime> = labels
            .into_iter()
            .enumerate()
            .map(|(i, (label, op, layer))| DispatchTime {
                label,
                op: op.to_string(),
                layer,
                ns: ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period,
            })
            .collect();
        let gpu_ns: f64 = dispatches.iter().map(|d| d.ns).sum();
        let by_op = totals(dispatches.iter().map(|d| (d.op.clone(), d.ns)), gpu_ns);
        let by_layer = totals(
            dispatches.iter().map(|d| {
                (
                    d.layer
                        .map_or("embed/head".to_string(), |l| format!("layer {l}")),
                    d.ns,
                )
            }),
            gpu_ns,
        );
        Ok(ProfileReport {
            tokens: total,
            method: "one compute pass per dispatch, GPU timestamps at pass boundaries".into(),
            dispatches,
            by_op,
            by_layer,
            gpu_ns,
            encode_ms,
            submit_ms,
            wait_ms,
        })
    }
}
