//! Recording a pass of the [`Graph`]: the token metadata, the dispatches (each node's
//! variant for the pass size), and the profiled form with a timestamp around each.

use super::build::{DispatchLabel, Graph};
use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::ops::{self, Dims, Node};

impl Graph {
    /// Writes the metadata of one pass and records its dispatches with a GPU timestamp
    /// around each (one pass per dispatch, timestamps at the pass boundaries: works
    /// wherever `TIMESTAMP_QUERY` does). Returns the labels in order and the query set
    /// (2 queries per dispatch) to resolve.
    pub fn encode_profiled(
        &self,
        gpu: &GpuContext,
        enc: &mut wgpu::CommandEncoder,
        seqs: &[(u32, &[u32])],
        rows: &[u32],
        run_head: bool,
    ) -> Result<(Vec<DispatchLabel>, wgpu::QuerySet)> {
        let dims = self.write_meta(gpu, seqs, rows)?;
        let mut nodes: Vec<&Node> = self.body.iter().collect();
        if run_head {
            nodes.extend(self.head.iter());
        }
        let nodes: Vec<&Node> = nodes
            .into_iter()
            .map(|n| n.pick_as(&dims, self.invariant))
            .filter(|n| n.grid.size(&dims).is_some())
            .collect();
        let count = (2 * nodes.len()).max(2) as u32;
        let qs = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let mut labels = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(n.op),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &qs,
                    beginning_of_pass_write_index: Some(2 * i as u32),
                    end_of_pass_write_index: Some(2 * i as u32 + 1),
                }),
            });
            if let (Some((x, y, z)), Ok(pipeline)) = (n.grid.size(&dims), n.pipeline.wait()) {
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &n.bind_group, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
            labels.push((n.label(), n.op, n.layer));
        }
        Ok((labels, qs))
    }

    /// Writes the metadata of one pass and records its dispatches.
    ///
    /// `seqs`: (state slot, tokens) per sequence; `rows`: token rows (indices into the
    /// concatenation) to gather for the head / embeddings; `run_head`: compute logits;
    /// `greedy`: and each row's argmax of them after its adjustments (`adjust_buf`, written
    /// by the caller: [`crate::ops::argmax::adjust`]) into `argmax_out`.
    pub fn encode(
        &self,
        gpu: &GpuContext,
        enc: &mut wgpu::CommandEncoder,
        seqs: &[(u32, &[u32])],
        rows: &[u32],
        run_head: bool,
        greedy: bool,
    ) -> Result<Dims> {
        let dims = self.write_meta(gpu, seqs, rows)?;
        self.check_late(&dims)?;
        self.record(enc, &dims, run_head, greedy);
        Ok(dims)
    }

    /// Waits for the late-compiled variants a pass of `dims` takes (2–8 tokens): an
    /// error, not a pass that skips a dispatch, if one failed (the load checked all the
    /// others).
    pub fn check_late(&self, dims: &Dims) -> Result<()> {
        for n in self.body.iter().chain(&self.head) {
            let n = n.pick_as(dims, self.invariant);
            if n.pipeline.late() {
                n.pipeline.wait().map_err(|what| crate::EngineError::Op {
                    op: "pipeline",
                    what,
                })?;
            }
        }
        Ok(())
    }

    /// Records the dispatches of a pass of `dims` (its metadata written separately by
    /// [`Graph::write_meta`] before the submission); with `greedy` (and `run_head`) the
    /// adjustments of `adjust_buf` and each output row's argmax into `argmax_out` after the
    /// head.
    pub fn record(
        &self,
        enc: &mut wgpu::CommandEncoder,
        dims: &Dims,
        run_head: bool,
        greedy: bool,
    ) {
        self.record_from(enc, dims, 0, run_head, greedy);
    }

    /// The body's first `k` nodes of a pass of `dims` (a decode step's opening, submitted
    /// ahead of the rest: `api::decode_loop`); [`Graph::record_from`] `k` records the rest.
    pub fn record_opening(&self, enc: &mut wgpu::CommandEncoder, dims: &Dims, k: usize) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("forward opening"),
            timestamp_writes: None,
        });
        let body = &self.body[..k.min(self.body.len())];
        ops::encode_except(&mut pass, body, dims, self.invariant, &self.timing_skip);
    }

    /// [`Graph::record`] without the body's first `k` nodes.
    pub fn record_from(
        &self,
        enc: &mut wgpu::CommandEncoder,
        dims: &Dims,
        k: usize,
        run_head: bool,
        greedy: bool,
    ) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("forward"),
            timestamp_writes: None,
        });
        let skip = &self.timing_skip;
        let body = &self.body[k.min(self.body.len())..];
        ops::encode_except(&mut pass, body, dims, self.invariant, skip);
        if run_head {
            ops::encode_except(&mut pass, &self.head, dims, self.invariant, skip);
            if greedy {
                for n in [&self.adjust, &self.argmax] {
                    ops::encode_as(&mut pass, std::slice::from_ref(n), dims, false);
                }
            }
        }
    }

    /// [`Graph::record`] with the head, then the adjustments of `adjust_buf` and each
    /// output row's draw candidates under `draw_opts` into `cand_out` (both written by the
    /// caller before the submission; `ops::candidates`).
    pub fn record_draw(&self, enc: &mut wgpu::CommandEncoder, dims: &Dims) {
        self.record_draw_from(enc, dims, 0);
    }

    /// [`Graph::record_draw`] without the body's first `k` nodes.
    pub fn record_draw_from(&self, enc: &mut wgpu::CommandEncoder, dims: &Dims, k: usize) {
        self.record_from(enc, dims, k, true, false);
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("draw"),
            timestamp_writes: None,
        });
        for n in [&self.adjust, &self.candidates] {
            ops::encode_as(&mut pass, std::slice::from_ref(n), dims, false);
        }
    }

    /// [`Dims`] of one decode step: one sequence, one token, its row gathered.
    pub fn decode_dims(&self) -> Dims {
        Dims {
            n_tokens: 1,
            n_seqs: 1,
            n_rows: 1,
            max_len: 1,
            ..self.dims_host
        }
    }

    /// Checks a pass against the capacities and queues its token metadata and [`Dims`].
    pub fn write_meta(
        &self,
        gpu: &GpuContext,
        seqs: &[(u32, &[u32])],
        rows: &[u32],
    ) -> Result<Dims> {
        let t: usize = seqs.iter().map(|s| s.1.len()).sum();
        if t > self.t_cap || seqs.len() > self.b_cap || rows.len() > self.r_cap {
            return Err(EngineError::Op {
                op: "forward",
                what: format!(
                    "pass of {t} tokens / {} sequences / {} rows exceeds capacity {}/{}/{}",
                    seqs.len(),
                    rows.len(),
                    self.t_cap,
                    self.b_cap,
                    self.r_cap
                ),
            });
        }
        let d = self.dims_host;
        let mut meta = vec![0u32; self.emb_rows.rows_off / 4];
        let mut at = 0usize;
        for (b, (slot, toks)) in seqs.iter().enumerate() {
            if *slot as usize >= self.n_slots {
                return Err(EngineError::State {
                    what: format!("slot {slot} out of {} slots", self.n_slots),
                });
            }
            let o = d.off_seqs as usize + 4 * b;
            meta[o] = at as u32;
            meta[o + 1] = toks.len() as u32;
            meta[o + 2] = *slot;
            for (i, &tok) in toks.iter().enumerate() {
                meta[at + i] = tok;
                meta[d.off_tok_seq as usize + at + i] = b as u32;
                meta[d.off_tok_pos as usize + at + i] = i as u32;
            }
            at += toks.len();
        }
        meta[d.off_rows as usize..][..rows.len()].copy_from_slice(rows);
        // The tokens' embedding rows, in pass order, after the rest: copied from the host
        // embedding straight into the write's staging memory (a 512-token chunk of a
        // 2560-wide F16 model is 2.6 MB).
        let er = &self.emb_rows;
        let emb_rows = seqs
            .iter()
            .flat_map(|s| s.1.iter())
            .map(|&tok| self.emb.row(tok))
            .collect::<Result<Vec<&[u8]>>>()?;
        let words: &[u8] = bytemuck::cast_slice(&meta);
        let total = std::num::NonZeroU64::new((er.rows_off + t * er.row_bytes) as u64);
        match total.and_then(|n| gpu.queue.write_buffer_with(&self.meta, 0, n)) {
            Some(mut view) => {
                view.slice(..words.len()).copy_from_slice(words);
                for (i, row) in emb_rows.iter().enumerate() {
                    let at = er.rows_off + i * er.row_bytes;
                    view.slice(at..at + er.row_bytes).copy_from_slice(row);
                }
            }
            None => {
                // No staging memory: a lost device answers so (its error first), or one
                // out of memory, whose plain write fails where the pass reports it.
                gpu.check_lost()?;
                let mut bytes = words.to_vec();
                emb_rows.iter().for_each(|row| bytes.extend_from_slice(row));
                gpu.queue.write_buffer(&self.meta, 0, &bytes);
            }
        }
        let dims = Dims {
            n_tokens: t as u32,
            n_seqs: seqs.len() as u32,
            n_rows: rows.len() as u32,
            max_len: seqs.iter().map(|s| s.1.len() as u32).max().unwrap_or(0),
            ..d
        };
        // Written only when they change (every step of a decode loop has the same): a
        // queued write costs the step a staging buffer, with the GPU idle.
        let mut last = self.dims_written.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|l| bytemuck::bytes_of(&l) != bytemuck::bytes_of(&dims)) {
            gpu.queue
                .write_buffer(&self.dims, 0, bytemuck::bytes_of(&dims));
            *last = Some(dims);
        }
        Ok(dims)
    }
}
