//! This process's data limit (`RLIMIT_DATA`: the private writable memory it may map, which
//! is what `malloc` hands out), for the driver out-of-memory test: on lavapipe, GPU memory
//! is process memory, so a limit just above what the process uses makes the driver's next
//! large allocation fail for real (`vkAllocateMemory` → `VK_ERROR_OUT_OF_DEVICE_MEMORY`).

/// `VmData` of `/proc/self/status`: what `RLIMIT_DATA` is checked against, bytes.
pub fn data_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmData:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .expect("VmData in /proc/self/status")
        * 1024
}

/// Runs `f` with the soft data limit at what the process uses now plus `margin` bytes,
/// then puts the old limit back (a soft limit may be raised again up to the hard one).
pub fn with_data_margin<T>(margin: u64, f: impl FnOnce() -> T) -> T {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid rlimit to write into.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut old) }, 0);
    let new = libc::rlimit {
        rlim_cur: data_bytes() + margin,
        rlim_max: old.rlim_max,
    };
    // SAFETY: a valid rlimit, read only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_DATA, &new) }, 0);
    let out = f();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_DATA, &old) }, 0);
    out
}
