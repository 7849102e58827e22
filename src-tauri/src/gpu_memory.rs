//! How much memory the GPU adapter has, for the library's "fits this GPU" check. wgpu does
//! not say; on Vulkan the physical device's memory heaps do (the largest device-local
//! heap: a discrete GPU's VRAM, an integrated GPU's or lavapipe's share of system memory).
//! Other backends (Metal, DX12) answer `None` and the view shows the need without a verdict.

use serde::Serialize;

/// The adapter and its memory as the library view shows them (`GpuMemory` in api.ts).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuMemory {
    /// The adapter's name (`AdapterSummary::name`).
    pub adapter: String,
    /// Its largest device-local memory heap, bytes; `None` where the backend does not say.
    pub bytes: Option<u64>,
}

/// The largest device-local heap of `adapter` in bytes, on Vulkan; `None` elsewhere.
pub fn device_local_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "windows"))]
    {
        // SAFETY: `as_hal` lends the Vulkan adapter wgpu-hal wraps, alive as long as
        // `adapter`; we only read its physical device's memory properties through the
        // instance it was enumerated from, and keep no handle.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
        let props = unsafe {
            hal.shared_instance()
                .raw_instance()
                .get_physical_device_memory_properties(hal.raw_physical_device())
        };
        let n = usize::try_from(props.memory_heap_count).ok()?;
        // VK_MEMORY_HEAP_DEVICE_LOCAL_BIT = 0x1.
        props
            .memory_heaps
            .get(..n)?
            .iter()
            .filter(|h| h.flags.as_raw() & 1 != 0)
            .map(|h| h.size)
            .max()
    }
    #[cfg(not(any(target_os = "linux", target_os = "windows")))]
    {
        let _ = adapter;
        None
    }
}
