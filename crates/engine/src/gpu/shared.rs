//! One open device per adapter for the whole process ([`GpuContext::shared`]).
//!
//! Opening a device (Vulkan instance, adapter enumeration, `vkCreateDevice` with every
//! feature the engine uses) takes ≈ 150 ms on an H100 — as long as streaming 1.8 GB of
//! weights. A process that loads models one after another (the app switching models, a
//! Python session, the benchmark's repeated loads) opens it once; each model's buffers
//! still go with its [`crate::Engine`], so dropping an engine frees its GPU memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::{AdapterChoice, GpuContext, Tuning};
use crate::error::Result;

/// What a device opened for a choice depends on: the choice and the knobs it was opened
/// with (adapter override, backends, disabled features, and the kernel shapes its
/// [`GpuContext::tuning`] hands the op builders), so a process whose environment changes
/// between loads gets a device tuned by the new one.
type Key = (String, Tuning);

static OPEN: OnceLock<Mutex<HashMap<Key, Arc<GpuContext>>>> = OnceLock::new();

/// The key of a device for `choice` opened with the environment's knobs now.
fn key(choice: &AdapterChoice) -> Key {
    (format!("{choice:?}"), Tuning::from_env())
}

impl GpuContext {
    /// The process's device for `choice`: the one opened before if it is still usable
    /// (not lost, no validation error, no refused allocation), else a new one
    /// ([`GpuContext::new`], same errors), kept for later calls. Concurrent first calls
    /// open one device between them.
    pub fn shared(choice: &AdapterChoice) -> Result<Arc<GpuContext>> {
        Self::shared_with(choice, Tuning::from_env())
    }

    /// [`GpuContext::shared`] with these knobs instead of the environment's (a device is
    /// kept per adapter and tuning).
    pub fn shared_with(choice: &AdapterChoice, tuning: Tuning) -> Result<Arc<GpuContext>> {
        let open = OPEN.get_or_init(Default::default);
        let mut open = open.lock().unwrap_or_else(|p| p.into_inner());
        let k: Key = (format!("{choice:?}"), tuning);
        if let Some(gpu) = open.get(&k) {
            if gpu.check_lost().is_ok() {
                return Ok(gpu.clone());
            }
            log::warn!("{}: opening a new device ({k:?})", gpu.summary.name);
        }
        let gpu = Arc::new(GpuContext::with_tuning(choice, k.1.clone())?);
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
