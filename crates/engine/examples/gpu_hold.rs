//! Holds GPU memory for the driver out-of-memory check on a real GPU (scripts/gpu-oom.sh):
//! allocates `MIB` MiB in 1 GiB storage buffers on the engine's adapter (the same choice as
//! `rwkv`: discrete first, `RWKV_ADAPTER`), clears each one (so the memory is committed), prints `holding N MiB`, and keeps it until stdin closes or the process is killed.
//!
//! Usage: `gpu_hold MIB`

use rwkv_engine::gpu::{buffer, AdapterChoice, GpuContext};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: u64 = std::env::args()
        .nth(1)
        .ok_or("usage: gpu_hold MIB")?
        .parse()?;
    let gpu = GpuContext::new(&AdapterChoice::Auto)?;
    let chunk = (1u64 << 30).min(gpu.limits.max_buffer_size);
    let mut held = Vec::new();
    let mut bytes = 0u64;
    while bytes < mib << 20 {
        let n = chunk.min((mib << 20) - bytes);
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let b = buffer::storage(&gpu, "hold", n);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.clear_buffer(&b, 0, None);
        gpu.queue.submit([enc.finish()]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            eprintln!(
                "gpu_hold: the driver refused more after {} MiB: {e}",
                bytes >> 20
            );
            break;
        }
        held.push(b);
        bytes += n;
    }
    gpu.wait()?;
    println!("holding {} MiB on {}", bytes >> 20, gpu.summary.name);
    // Until stdin closes (or a kill).
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink)? > 0 {}
    drop(held);
    Ok(())
}
