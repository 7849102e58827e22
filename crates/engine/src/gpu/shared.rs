//! One open device per adapter for the whole process ([`GpuContext::shared`]).
//!
//! Opening a device (Vulkan instance, adapter enumeration, `vkCreateDevice` with every
//! feature the engine uses) takes ≈ 150 ms on an H100 — as long as streaming 1.8 GB of
//! weights. A process that loads models one after another (the app switching models, a
//! Python session, the benchmark's repeated loads) opens it once; each model's buffers
//! still go with its [`crate::Engine`], so dropping an engine frees its GPU memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::{AdapterChoice, GpuContext};
use crate::error::Result;

static OPEN: OnceLock<Mutex<HashMap<String, Arc<GpuContext>>>> = OnceLock::new();

/// What a device opened for `choice` depends on: the choice and the environment
/// [`GpuContext::new`] reads (adapter override, backends, disabled features).
fn key(choice: &AdapterChoice) -> String {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    format!(
        "{choice:?}|{}|{}|{}|{}|{}",
        env("RWKV_ADAPTER"),
        env("WGPU_BACKEND"),
        env("RWKV_NO_COOPMAT"),
        env("RWKV_NO_SUBGROUPS"),
        env("RWKV_SUBGROUPS")
    )
}

impl GpuContext {
    /// The process's device for `choice`: the one opened before if it is still usable
    /// (not lost, no validation error, no refused allocation), else a new one
    /// ([`GpuContext::new`], same errors), kept for later calls. Concurrent first calls
    /// open one device between them.
    pub fn shared(choice: &AdapterChoice) -> Result<Arc<GpuContext>> {
        let open = OPEN.get_or_init(Default::default);
        let mut open = open.lock().unwrap_or_else(|p| p.into_inner());
        let k = key(choice);
        if let Some(gpu) = open.get(&k) {
            if gpu.check_lost().is_ok() {
                return Ok(gpu.clone());
            }
            log::warn!("{}: opening a new device ({k})", gpu.summary.name);
        }
        let gpu = Arc::new(GpuContext::new(choice)?);
        open.insert(k, gpu.clone());
        Ok(gpu)
    }

    /// Whether the process has a usable device for `choice` open already (a
    /// [`GpuContext::shared`] call would not open one).
    pub fn shared_is_open(choice: &AdapterChoice) -> bool {
        OPEN.get().is_some_and(|open| {
            let open = open.lock().unwrap_or_else(|p| p.into_inner());
            open.get(&key(choice))
                .is_some_and(|gpu| gpu.check_lost().is_ok())
        })
    }

    /// Forgets the process's shared devices: each closes once no engine holds it, and
    /// the next [`GpuContext::shared`] opens a new one.
    pub fn release_shared() {
        if let Some(open) = OPEN.get() {
            open.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The second call returns the first call's device; a device marked unusable is
    /// replaced; `release_shared` forgets it. (By the first adapter's full name: a key of
    /// its own, so that no other test's engine gets the device this one spoils.)
    #[test]
    fn one_device_until_unusable_or_released() {
        let name = GpuContext::list_adapters()
            .first()
            .map(|a| a.name.clone())
            .expect("an adapter (lavapipe in CI)");
        let choice = AdapterChoice::Name(name);
        GpuContext::release_shared();
        assert!(!GpuContext::shared_is_open(&choice));
        let a = GpuContext::shared(&choice).unwrap();
        assert!(GpuContext::shared_is_open(&choice));
        let b = GpuContext::shared(&choice).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        a.mark_unusable("test: pretend the driver refused an allocation".into());
        assert!(!GpuContext::shared_is_open(&choice));
        let c = GpuContext::shared(&choice).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(c.check_lost().is_ok());
        GpuContext::release_shared();
        let d = GpuContext::shared(&choice).unwrap();
        assert!(!Arc::ptr_eq(&c, &d));
        GpuContext::release_shared();
    }

    #[test]
    fn key_names_the_choice() {
        assert_ne!(key(&AdapterChoice::Index(0)), key(&AdapterChoice::Index(1)));
        assert_ne!(
            key(&AdapterChoice::Auto),
            key(&AdapterChoice::Name("nvidia".into()))
        );
    }
}
