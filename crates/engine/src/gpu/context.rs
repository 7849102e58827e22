//! Adapter listing and choice, device creation with the features the engine uses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::gpu::Tuning;

/// Whether the engine runs its subgroup kernels on an adapter that offers subgroups.
/// `tuning.subgroups` (`RWKV_SUBGROUPS=1|0`, `RWKV_NO_SUBGROUPS`) decides; without it,
/// yes — except on Mesa's llvmpipe (lavapipe, the CPU driver of CI, VMs and
/// machines without a GPU). There every workgroup that runs a subgroup shuffle keeps
/// memory that never comes back (Mesa 22.3.6: ≈ 2,100 allocations of ≈ 450 bytes a token
/// from the shaders' JIT code in a 2-layer model, RSS +700 KB a token; with the
/// workgroup-memory kernels RSS stays flat — issue 26, docs/reliability.md), and the
/// subgroup kernels bring it no speed (22 vs 25 tok/s without). The tests force them on
/// there to keep covering them (`scripts/test.sh`).
pub fn subgroups_wanted(info: &wgpu::AdapterInfo, tuning: &Tuning) -> bool {
    tuning.subgroups.unwrap_or_else(|| !is_llvmpipe(info))
}

/// Lanes a row of the matrix × vector kernels on Mesa's llvmpipe where `RWKV_MV_LANES`
/// is not set ([`Tuning::mv_lanes`]): the fewest — by our reading because its threads run
/// a workgroup's invocations 8 at a time and every level of a row sum's tree is a
/// workgroup barrier (measured: the figures below, not the cause). The
/// trained demo model on this repository's 2-core CI machine (`rwkv batch`, ms a step):
/// one sequence without logits 84.5 → 48.4, four with their logits (the server's step:
/// the 65,536-row Q6_K head dominates) 513 → 410; greedy generation 4 → 6 tok/s.
pub const LLVMPIPE_MV_LANES: u32 = 4;

/// How long a read-back polls before it blocks where `RWKV_SPIN_WAIT_US` is not set, on
/// every adapter but a CPU one (where it is 0): a decode step of a large model on a small
/// GPU is within it; a longer pass pays one wake-up, a small part of it (H200, a 0.1B decode
/// step: 1,468 → 1,776 tok/s with the finish seen by polling; benchmarks.md).
pub const DEFAULT_SPIN_WAIT_US: u32 = 5_000;

/// Mesa's llvmpipe: lavapipe on Vulkan, the same rasterizer behind GL.
pub fn is_llvmpipe(info: &wgpu::AdapterInfo) -> bool {
    llvmpipe_named(&info.driver, &info.name)
}

/// Whether an adapter of this driver and name is llvmpipe.
fn llvmpipe_named(driver: &str, name: &str) -> bool {
    driver.eq_ignore_ascii_case("llvmpipe") || name.starts_with("llvmpipe")
}

/// Optional features the engine uses when the adapter has them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct GpuFeatures {
    /// `SHADER_F16`: f16 arithmetic in shaders.
    pub shader_f16: bool,
    /// `SUBGROUP`: subgroup operations (`subgroupAdd`, …).
    pub subgroup: bool,
    /// Smallest subgroup size the adapter may run a shader with (0 when unknown).
    pub subgroup_min_size: u32,
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` with 16×16×16 f16 × f16 → f32 tiles and
    /// subgroups of exactly 32 (tensor cores on NVIDIA Vulkan): the prefill matrix
    /// kernel `matmul_coop`. `RWKV_NO_COOPMAT` ([`Tuning::no_coopmat`]) turns it off.
    pub coopmat: bool,
    /// `TIMESTAMP_QUERY`: GPU timestamps at pass boundaries.
    pub timestamp: bool,
    /// `TIMESTAMP_QUERY_INSIDE_PASSES`: timestamps between dispatches of one pass.
    pub timestamp_inside_passes: bool,
}

/// A description of one adapter, for listings and model cards.
#[derive(Debug, Clone, Serialize)]
pub struct AdapterSummary {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
}

/// Which adapter to use.
#[derive(Debug, Clone, Default)]
pub enum AdapterChoice {
    /// Discrete GPU first, then integrated, then virtual, then CPU. `RWKV_ADAPTER`
    /// ([`Tuning::adapter`]: an index or a case-insensitive name substring) overrides.
    #[default]
    Auto,
    /// The adapter at this index of [`GpuContext::list_adapters`].
    Index(usize),
    /// The first adapter whose name contains this text (case-insensitive).
    Name(String),
}

/// The device the engine runs on, with its queue, limits and features.
#[derive(Clone)]
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: wgpu::Adapter,
    pub summary: AdapterSummary,
    pub features: GpuFeatures,
    pub limits: wgpu::Limits,
    /// The environment's knobs, read when the device opened: what the op builders, the
    /// loader and the pipeline cache tune by.
    pub tuning: Tuning,
    /// The first fault that makes the device unusable: lost, an engine bug (validation),
    /// or a buffer the driver could not allocate (see `out_of_memory`).
    lost: Arc<Mutex<Option<String>>>,
    /// The driver refused an allocation outside an error scope: some buffer the engine
    /// holds is invalid, so every later pass fails until the model is reloaded.
    out_of_memory: Arc<AtomicBool>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("adapter", &self.summary)
            .finish()
    }
}

fn instance(tuning: &Tuning) -> wgpu::Instance {
    let backends = tuning.wgpu_backend.as_deref();
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backends.map_or(wgpu::Backends::all(), wgpu::Backends::from_comma_list),
        flags: wgpu::InstanceFlags::from_build_config().with_env(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    })
}

fn summarize(index: usize, a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    AdapterSummary {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver,
        driver_info: info.driver_info,
    }
}

fn type_rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn usable(a: &wgpu::Adapter) -> bool {
    // The engine's shaders are compute-only; a GL adapter without f16 unpacking or with
    // tiny limits is still usable, but it must allow storage buffers in compute.
    a.limits().max_storage_buffers_per_shader_stage >= 8
}

/// The adapter `choice` names (`RWKV_ADAPTER`, [`Tuning::adapter`], in place of `Auto`),
/// with its index.
///
/// Errors: [`EngineError::Gpu`] when no adapter exists (with a hint on installing Mesa's
/// lavapipe) or when the choice matches none (listing them).
fn pick_adapter(choice: &AdapterChoice, tuning: &Tuning) -> Result<(usize, wgpu::Adapter)> {
    let inst = instance(tuning);
    let adapters = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()));
    if adapters.is_empty() {
        return Err(EngineError::gpu(
            "no GPU adapter found. On Linux without a GPU install Mesa's CPU Vulkan driver \
             (`apt-get install mesa-vulkan-drivers`) and set WGPU_BACKEND=vulkan",
        ));
    }
    let choice = match (choice, &tuning.adapter) {
        (AdapterChoice::Auto, Some(v)) => match v.parse::<usize>() {
            Ok(i) => AdapterChoice::Index(i),
            Err(_) => AdapterChoice::Name(v.clone()),
        },
        (c, _) => c.clone(),
    };
    let index = match &choice {
        AdapterChoice::Auto => adapters
            .iter()
            .enumerate()
            .filter(|(_, a)| usable(a))
            .min_by_key(|(i, a)| (type_rank(a.get_info().device_type), *i))
            .map(|(i, _)| i),
        AdapterChoice::Index(i) => (*i < adapters.len()).then_some(*i),
        AdapterChoice::Name(n) => {
            let n = n.to_lowercase();
            adapters
                .iter()
                .position(|a| a.get_info().name.to_lowercase().contains(&n))
        }
    };
    let Some(index) = index else {
        let names: Vec<String> = adapters
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{i}: {}", a.get_info().name))
            .collect();
        return Err(EngineError::gpu(format!(
            "no adapter matches {choice:?}; available: {}",
            names.join(", ")
        )));
    };
    let adapter = adapters
        .into_iter()
        .nth(index)
        .ok_or_else(|| EngineError::gpu("adapter vanished"))?;
    Ok((index, adapter))
}

/// The optional features to ask `adapter` for (those of f16, subgroups and timestamps it
/// has), and whether cooperative matrices are among them: 16×16×16 f16 × f16 → f32 tiles
/// with subgroups of exactly 32, unless `RWKV_NO_COOPMAT` ([`Tuning::no_coopmat`]).
fn features_to_ask(adapter: &wgpu::Adapter, tuning: &Tuning) -> (wgpu::Features, bool) {
    let have = adapter.features();
    let want = wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP
        | wgpu::Features::TIMESTAMP_QUERY
        | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    let mut required = have & want;
    let info = adapter.get_info();
    let coop_tile = adapter.cooperative_matrix_properties().iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
            && p.ab_type == wgpu::CooperativeScalarType::F16
            && p.cr_type == wgpu::CooperativeScalarType::F32
    });
    let coopmat = have.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && required.contains(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP)
        && coop_tile
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && !tuning.no_coopmat;
    if coopmat {
        required |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    (required, coopmat)
}

/// The device's fault records, kept by its callbacks: the first fault that makes it
/// unusable (lost, a validation error, a refused allocation), and whether the driver
/// refused an allocation outside an error scope (`name`: the adapter, for the message).
fn watch_faults(
    device: &wgpu::Device,
    name: String,
) -> (Arc<Mutex<Option<String>>>, Arc<AtomicBool>) {
    let lost = Arc::new(Mutex::new(None));
    let lost2 = lost.clone();
    device.set_device_lost_callback(move |reason, msg| {
        if let Ok(mut l) = lost2.lock() {
            *l = Some(format!("{reason:?}: {msg}"));
        }
    });
    // A validation error is an engine bug: keep the first one and fail the next check.
    // An out-of-memory error is the driver refusing an allocation (wgpu reports it here
    // unless an error scope on the creating thread catches it first, as the load's do):
    // the buffer is invalid, and the engine holding it cannot run another pass.
    let lost3 = lost.clone();
    let out_of_memory = Arc::new(AtomicBool::new(false));
    let oom2 = out_of_memory.clone();
    device.on_uncaptured_error(Arc::new(move |e| {
        log::error!("wgpu: {e}");
        let msg = match &e {
            wgpu::Error::OutOfMemory { .. } => {
                oom2.store(true, Ordering::Relaxed);
                format!(
                    "{name} ran out of memory: the driver could not allocate a buffer \
                     ({e}); free GPU memory (other programs, fewer states or a smaller \
                     model) and reload the model"
                )
            }
            _ => format!("GPU error: {e}"),
        };
        if let Ok(mut l) = lost3.lock() {
            l.get_or_insert(msg);
        }
    }));
    (lost, out_of_memory)
}

impl GpuContext {
    /// Whether the adapter is Mesa's llvmpipe ([`is_llvmpipe`]).
    pub fn is_llvmpipe(&self) -> bool {
        llvmpipe_named(&self.summary.driver, &self.summary.name)
    }

    /// Every adapter wgpu sees (respecting `WGPU_BACKEND`), in enumeration order.
    pub fn list_adapters() -> Vec<AdapterSummary> {
        let inst = instance(&Tuning::from_env());
        let adapters = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()));
        adapters
            .iter()
            .enumerate()
            .map(|(i, a)| summarize(i, a))
            .collect()
    }

    /// Opens a device on the chosen adapter, with every useful optional feature it has
    /// and its full limits (so storage bindings can be as large as the adapter allows),
    /// tuned by the environment's knobs ([`Tuning::from_env`], read here once).
    ///
    /// Errors: [`EngineError::Gpu`] when no adapter exists (with a hint on installing
    /// Mesa's lavapipe), when the choice matches none, or when device creation fails.
    pub fn new(choice: &AdapterChoice) -> Result<Self> {
        Self::with_tuning(choice, Tuning::from_env())
    }

    /// [`GpuContext::new`] with the knobs given.
    ///
    /// Errors: as [`GpuContext::new`].
    pub fn with_tuning(choice: &AdapterChoice, mut tuning: Tuning) -> Result<Self> {
        let (index, adapter) = pick_adapter(choice, &tuning)?;
        let summary = summarize(index, &adapter);
        let info = adapter.get_info();
        if is_llvmpipe(&info) {
            tuning.mv_lanes.get_or_insert(LLVMPIPE_MV_LANES);
        }
        // A CPU "GPU" runs its work on the cores a spinning wait would take from it.
        let cpu = info.device_type == wgpu::DeviceType::Cpu || is_llvmpipe(&info);
        tuning
            .spin_wait_us
            .get_or_insert(if cpu { 0 } else { DEFAULT_SPIN_WAIT_US });
        let (required, coopmat) = features_to_ask(&adapter, &tuning);
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("rwkv-engine"),
            required_features: required,
            required_limits: limits.clone(),
            experimental_features: if coopmat {
                // SAFETY: the one experimental feature asked for is cooperative matrices;
                // its kernel (`matmul_coop`) is tested against the CPU reference on the
                // adapters that offer it, and the bench checks the logits on every run.
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| EngineError::gpu(format!("{}: cannot open device: {e}", summary.name)))?;
        let (lost, out_of_memory) = watch_faults(&device, summary.name.clone());
        let features = GpuFeatures {
            shader_f16: required.contains(wgpu::Features::SHADER_F16),
            subgroup: required.contains(wgpu::Features::SUBGROUP)
                && subgroups_wanted(&info, &tuning),
            subgroup_min_size: info.subgroup_min_size,
            coopmat,
            timestamp: required.contains(wgpu::Features::TIMESTAMP_QUERY),
            timestamp_inside_passes: required
                .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        };
        log::info!(
            "GPU: {} ({}, {}) {:?}",
            summary.name,
            summary.backend,
            summary.device_type,
            features
        );
        Ok(GpuContext {
            device,
            queue,
            adapter,
            summary,
            features,
            limits,
            tuning,
            lost,
            out_of_memory,
        })
    }

    /// Largest buffer range one storage binding may cover, in bytes.
    pub fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// Waits for all submitted work. Errors if the device was lost or the wait failed.
    pub fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| EngineError::gpu(format!("waiting for the GPU: {e}")))?;
        self.check_lost()
    }

    /// Waits until `done()` holds (it turns true in a callback the device's polls run,
    /// such as a buffer mapping's) or else the submitted work has finished: after sleeping
    /// `sleep_first` (a [`crate::gpu::pacing::Pacer`]'s plan; only where spinning is on),
    /// with non-blocking polls for up to [`crate::gpu::Tuning::spin_wait_us`] µs, then as
    /// [`GpuContext::wait`]. Spinning spares the thread wake-up after the GPU's finish (the
    /// GPU idles until the host submits the next step) at the price of a busy CPU core.
    /// Returns whether `done()` held at the first poll after a sleep (the sleep outlasted
    /// the work).
    ///
    /// Errors: as [`GpuContext::wait`].
    pub fn wait_for(&self, done: &dyn Fn() -> bool, sleep_first: Duration) -> Result<bool> {
        let spin = Duration::from_micros(self.tuning.spin_wait_us.unwrap_or(0).into());
        if spin.is_zero() {
            self.wait()?;
            return Ok(false);
        }
        if !sleep_first.is_zero() {
            std::thread::sleep(sleep_first);
        }
        let t0 = std::time::Instant::now();
        let mut first = !sleep_first.is_zero();
        loop {
            self.device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| EngineError::gpu(format!("polling the GPU: {e}")))?;
            if done() {
                self.check_lost()?;
                return Ok(first);
            }
            first = false;
            if t0.elapsed() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
        self.wait()?;
        Ok(false)
    }

    /// Whether the driver refused an allocation that no error scope caught (the device
    /// is then unusable: [`GpuContext::check_lost`] fails with the message).
    pub fn out_of_memory(&self) -> bool {
        self.out_of_memory.load(Ordering::Relaxed)
    }

    /// Marks the device unusable with `msg` (an error an error scope caught that the
    /// uncaptured-error handler would have recorded).
    pub fn mark_unusable(&self, msg: String) {
        log::error!("wgpu: {msg}");
        if let Ok(mut l) = self.lost.lock() {
            l.get_or_insert(msg);
        }
    }

    /// Errors ([`EngineError::Gpu`] "device unusable: …") if the device has been lost, a
    /// validation error was raised, or the driver refused an allocation.
    pub fn check_lost(&self) -> Result<()> {
        if let Ok(l) = self.lost.lock() {
            if let Some(msg) = l.as_ref() {
                return Err(EngineError::gpu(format!("device unusable: {msg}")));
            }
        }
        Ok(())
    }
}
