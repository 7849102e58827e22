//! Buffer helpers: storage buffers from bytes (padded to 4), uniforms, read-back.

use std::sync::atomic::{AtomicBool, Ordering};

use wgpu::util::DeviceExt;

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;

/// Storage usage for every engine buffer: read/write in shaders, copy in and out.
pub const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

/// A zeroed storage buffer of at least `bytes` bytes (rounded up to 16).
pub fn storage(ctx: &GpuContext, label: &str, bytes: u64) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(16).next_multiple_of(16),
        usage: STORAGE,
        mapped_at_creation: false,
    })
}

/// A storage buffer holding `data` (padded with zeros to a multiple of 16 bytes, so
/// shaders may read whole words past an odd-sized tensor's end).
pub fn storage_init(ctx: &GpuContext, label: &str, data: &[u8]) -> Result<wgpu::Buffer> {
    let size = (data.len() as u64).max(16).next_multiple_of(16);
    let buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage: STORAGE,
        mapped_at_creation: true,
    });
    {
        let mut view = buf
            .slice(..)
            .get_mapped_range_mut()
            .map_err(|e| EngineError::gpu(format!("{label}: mapping a new buffer failed: {e}")))?;
        view.slice(..data.len()).copy_from_slice(data);
    }
    buf.unmap();
    Ok(buf)
}

/// A uniform buffer holding `data` (one `Pod` struct).
pub fn uniform<T: bytemuck::Pod>(ctx: &GpuContext, label: &str, data: &T) -> wgpu::Buffer {
    ctx.device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::bytes_of(data),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        })
}

/// Copies `bytes` bytes at `offset` of `src` to the host (waits for the GPU).
pub fn read_bytes(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    offset: u64,
    bytes: u64,
    out: &mut [u8],
) -> Result<()> {
    if out.len() as u64 != bytes {
        return Err(EngineError::Op {
            op: "read_back",
            what: format!("output holds {} bytes, {bytes} requested", out.len()),
        });
    }
    if bytes == 0 {
        return Ok(());
    }
    let padded = bytes.next_multiple_of(4);
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read_back"),
        size: padded,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(src, offset, &staging, 0, padded);
    ctx.queue.submit([enc.finish()]);
    read_staged(ctx, &staging, 0, out)
}

/// A host-readable buffer of `bytes` bytes that passes copy into (kept for the life of a
/// graph, so reading results back allocates nothing).
pub fn readback(ctx: &GpuContext, label: &str, bytes: u64) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(16).next_multiple_of(16),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

/// Waits for the submitted work, then copies `out.len()` bytes at byte `offset` (a
/// multiple of 8) of the readback buffer `staging` (see [`readback`]) into `out` and
/// unmaps it.
pub fn read_staged(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    offset: u64,
    out: &mut [u8],
) -> Result<()> {
    read_staged_paced(ctx, staging, offset, out, std::time::Duration::ZERO).map(|_| ())
}

/// [`read_staged`] sleeping `sleep_first` before it polls for the result (a
/// [`crate::gpu::pacing::Pacer`]'s plan for a loop of alike steps); returns whether the
/// result was there at the first poll after the sleep ([`GpuContext::wait_for`]).
pub fn read_staged_paced(
    ctx: &GpuContext,
    staging: &wgpu::Buffer,
    offset: u64,
    out: &mut [u8],
    sleep_first: std::time::Duration,
) -> Result<bool> {
    if out.is_empty() {
        return Ok(false);
    }
    let slice = staging.slice(offset..offset + (out.len() as u64).next_multiple_of(4));
    // The callback runs in whichever thread's poll sees the work done — another user of a
    // shared device may be that thread, after this one's wait has returned: `recv` waits
    // for it (the flag only ends a polling wait early).
    let (tx, rx) = std::sync::mpsc::channel();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let d = done.clone();
    slice.map_async(wgpu::MapMode::Read, move |m| {
        let _ = tx.send(m);
        d.store(true, Ordering::Release);
    });
    let overslept = ctx.wait_for(&|| done.load(Ordering::Acquire), sleep_first)?;
    rx.recv()
        .map_err(|_| EngineError::gpu("read-back callback never ran"))?
        .map_err(|e| EngineError::gpu(format!("read-back mapping failed: {e}")))?;
    {
        let view = slice
            .get_mapped_range()
            .map_err(|e| EngineError::gpu(format!("read-back range failed: {e}")))?;
        out.copy_from_slice(&view[..out.len()]);
    }
    staging.unmap();
    Ok(overslept)
}

/// Reads `n` f32 values at element offset `offset` of `src`.
pub fn read_f32(ctx: &GpuContext, src: &wgpu::Buffer, offset: usize, n: usize) -> Result<Vec<f32>> {
    let mut out = vec![0f32; n];
    read_bytes(
        ctx,
        src,
        offset as u64 * 4,
        n as u64 * 4,
        bytemuck::cast_slice_mut(&mut out),
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::gpu::{AdapterChoice, Tuning};
    use std::time::Duration;

    /// A context that polls for up to `spin_us` before it blocks (0: blocks at once).
    fn spinning(spin_us: u32) -> GpuContext {
        let tuning = Tuning {
            spin_wait_us: Some(spin_us),
            ..Tuning::from_env()
        };
        GpuContext::with_tuning(&AdapterChoice::Auto, tuning).expect("a GPU adapter (lavapipe)")
    }

    /// Read-backs that poll (with and without a sleep first) or block return the bytes
    /// the GPU copied; a sleep that outlasts the work says so, a blocking wait never does.
    #[test]
    fn polled_and_blocking_read_backs_return_the_copied_bytes() {
        for spin_us in [0, 200_000] {
            let ctx = spinning(spin_us);
            assert_eq!(ctx.tuning.spin_wait_us, Some(spin_us));
            let data: Vec<u8> = (0..4096u32)
                .flat_map(|i| (i * 7 + 3).to_le_bytes())
                .collect();
            let src = storage_init(&ctx, "src", &data).unwrap();
            let rb = readback(&ctx, "rb", data.len() as u64);
            for sleep_ms in [0u64, 50] {
                let mut enc = ctx.device.create_command_encoder(&Default::default());
                enc.copy_buffer_to_buffer(&src, 0, &rb, 0, data.len() as u64);
                ctx.queue.submit([enc.finish()]);
                let mut out = vec![0u8; data.len()];
                let sleep = Duration::from_millis(sleep_ms);
                let overslept = read_staged_paced(&ctx, &rb, 0, &mut out, sleep).unwrap();
                assert_eq!(out, data, "spin {spin_us} µs, sleep {sleep_ms} ms");
                // A 16 KB copy is done within 50 ms; only a polling wait sees it at once.
                assert_eq!(
                    overslept,
                    spin_us > 0 && sleep_ms > 0,
                    "spin {spin_us}, sleep {sleep_ms}"
                );
            }
        }
    }
}
