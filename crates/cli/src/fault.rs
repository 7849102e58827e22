//! Fault injection for the reliability tests (docs/reliability.md, `tests/gpu_faults.rs`),
//! through `RWKV_FAULT`:
//! - `lose-device`: the device is destroyed right after the load, as a driver reset or an
//!   unplugged GPU would;
//! - `data-limit-mb:N`: the model's buffers are allocated under a real memory limit: once
//!   the device is open, the process's data limit (`RLIMIT_DATA`, the private writable
//!   memory `malloc` hands out) is set to what it uses plus N MiB until the load ends. A
//!   driver whose GPU memory is process memory (lavapipe) then refuses the allocation for
//!   real: the driver's out-of-memory, not the engine's budget check.

use std::sync::Arc;
use std::time::Instant;

use rwkv_engine::gpu::GpuContext;
use rwkv_engine::{Engine, LoadOptions, ModelFile, Rwkv7Weights};

/// The fault asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    None,
    LoseDevice,
    DataLimitMb(u64),
}

/// `RWKV_FAULT`, parsed; an unknown value is an error (a test must not pass by a typo).
pub fn fault() -> anyhow::Result<Fault> {
    let Ok(v) = std::env::var("RWKV_FAULT") else {
        return Ok(Fault::None);
    };
    if v == "lose-device" {
        return Ok(Fault::LoseDevice);
    }
    if let Some(n) = v.strip_prefix("data-limit-mb:") {
        return Ok(Fault::DataLimitMb(n.parse().map_err(|_| {
            anyhow::anyhow!("RWKV_FAULT={v}: the margin is a whole number of MiB")
        })?));
    }
    anyhow::bail!("RWKV_FAULT={v}: expected lose-device or data-limit-mb:N")
}

/// `Engine::load` in its steps, the buffers allocated with the data limit at what the
/// process uses once the device is open plus `margin_mb` MiB (the old limit comes back
/// before this returns, so the error path and the exit run unlimited).
pub fn load_under_data_limit(
    path: &std::path::Path,
    opts: &LoadOptions,
    margin_mb: u64,
) -> anyhow::Result<Engine> {
    let t0 = Instant::now();
    let file = ModelFile::open(path)?;
    let weights = Rwkv7Weights::from_file(&file)?;
    let gpu = Arc::new(GpuContext::new(&opts.adapter)?);
    let eng = with_data_margin(margin_mb << 20, || {
        Engine::from_weights(gpu, &file, &weights, opts, &mut |_| {}, t0)
    })?;
    Ok(eng?)
}

#[cfg(unix)]
fn with_data_margin<T>(margin: u64, f: impl FnOnce() -> T) -> anyhow::Result<T> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let used_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmData:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmData in /proc/self/status"))?;
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid rlimit to write into.
    if unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut old) } != 0 {
        anyhow::bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    let new = libc::rlimit {
        rlim_cur: (used_kib * 1024 + margin).min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: valid rlimits, read only.
    if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &new) } != 0 {
        anyhow::bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    let out = f();
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &old) } != 0 {
        anyhow::bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(out)
}

#[cfg(not(unix))]
fn with_data_margin<T>(_margin: u64, _f: impl FnOnce() -> T) -> anyhow::Result<T> {
    anyhow::bail!("RWKV_FAULT=data-limit-mb needs a Unix process limit (RLIMIT_DATA)")
}
