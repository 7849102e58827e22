//! The timing of one figure: warm-up passes until the GPU's clock is up, then compute
//! passes of a chain of dispatches between two GPU timestamps.

use std::time::Instant;

use super::KernelBenchOptions;
use crate::error::Result;
use crate::gpu::{buffer, GpuContext};
use crate::ops::{Dims, Node};

/// Median over `opts.repeats` passes of the GPU time of one dispatch in a chain of
/// `opts.chain` dispatches, µs: `nodes` in turn, each pass going on where the last one
/// stopped (so with more nodes than a chain, no pass starts on weights the one before it
/// left in the L2), after `opts.warm_ms` of untimed passes of every node.
pub(super) fn time_chain(
    gpu: &GpuContext,
    nodes: &[Node],
    dims: &Dims,
    opts: &KernelBenchOptions,
) -> Result<f64> {
    let qs = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("kernel_bench"),
        ty: wgpu::QueryType::Timestamp,
        count: 2,
    });
    let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("kernel_bench.resolve"),
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let period = gpu.queue.get_timestamp_period() as f64;
    let t0 = Instant::now();
    loop {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for i in 0..opts.chain.max(nodes.len()) {
                let node = &nodes[i % nodes.len()];
                crate::ops::encode(&mut pass, std::slice::from_ref(node), dims);
            }
        }
        gpu.queue.submit([enc.finish()]);
        gpu.wait()?;
        if t0.elapsed().as_millis() as u64 >= opts.warm_ms {
            break;
        }
    }
    let mut times = Vec::with_capacity(opts.repeats);
    for rep in 1..=opts.repeats {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("kernel_bench"),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &qs,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }),
            });
            for i in 0..opts.chain {
                let node = &nodes[(rep * opts.chain + i) % nodes.len()];
                crate::ops::encode(&mut pass, std::slice::from_ref(node), dims);
            }
        }
        enc.resolve_query_set(&qs, 0..2, &resolve, 0);
        gpu.queue.submit([enc.finish()]);
        gpu.wait()?;
        let mut raw = [0u8; 16];
        buffer::read_bytes(gpu, &resolve, 0, 16, &mut raw)?;
        let ticks: [u64; 2] = bytemuck::cast(raw);
        let ns = ticks[1].saturating_sub(ticks[0]) as f64 * period;
        times.push(ns / 1e3 / opts.chain as f64);
    }
    log::debug!(
        "kernel bench: warm-up and {} timed passes in {:?}",
        opts.repeats,
        t0.elapsed()
    );
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
