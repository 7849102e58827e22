//! What this process holds, split by who holds it, for the soak (issue 14, part 2):
//! - a counting global allocator: the live bytes and blocks of every Rust allocation (the
//!   app, the engine, Tauri, wgpu) and how many allocations were made;
//! - glibc's `mallinfo2`: everything that went through `malloc` (the Rust allocations above,
//!   which `System` passes to `malloc`, plus the C and C++ ones: Mesa's lavapipe, LLVM's
//!   shader compiler), and the free bytes malloc keeps in its arenas instead of returning;
//! - `/proc/self/status`: resident memory, anonymous / file-backed / shared.
//!
//! So RSS − malloc's live bytes is allocator slack (freed, not returned) plus mappings
//! (the model file, thread stacks, JIT code), and malloc's live − Rust's live is the
//! driver's heap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to `System` unchanged; the counters are only arithmetic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(l.size(), Relaxed);
            LIVE_BLOCKS.fetch_add(1, Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(l.size(), Relaxed);
            LIVE_BLOCKS.fetch_add(1, Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE_BYTES.fetch_sub(l.size(), Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE_BYTES.fetch_add(new, Relaxed);
            LIVE_BYTES.fetch_sub(l.size(), Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
        }
        q
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// One reading, bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Heap {
    /// Live Rust allocations (requested sizes).
    pub rust_live: u64,
    pub rust_blocks: u64,
    /// Rust allocations made so far (a rate, not a level).
    pub rust_allocs: u64,
    /// Live bytes through malloc (arenas + mmapped chunks), Rust and C/C++ together; 0 where
    /// glibc is not the allocator.
    pub malloc_live: u64,
    /// Free bytes malloc holds in its arenas.
    pub malloc_free: u64,
    pub rss: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub rss_shmem: u64,
}

impl Heap {
    /// malloc's live bytes that are not Rust's: the driver's (Mesa, LLVM) heap.
    pub fn c_live(&self) -> u64 {
        self.malloc_live.saturating_sub(self.rust_live)
    }
}

fn proc_status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Reads the counters now.
pub fn read() -> Heap {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut h = Heap {
        rust_live: LIVE_BYTES.load(Relaxed) as u64,
        rust_blocks: LIVE_BLOCKS.load(Relaxed) as u64,
        rust_allocs: ALLOCS.load(Relaxed),
        rss: proc_status_kib(&status, "VmRSS:") * 1024,
        rss_anon: proc_status_kib(&status, "RssAnon:") * 1024,
        rss_file: proc_status_kib(&status, "RssFile:") * 1024,
        rss_shmem: proc_status_kib(&status, "RssShmem:") * 1024,
        ..Heap::default()
    };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: a glibc call without arguments.
        let m = unsafe { libc::mallinfo2() };
        h.malloc_live = (m.uordblks + m.hblkhd) as u64;
        h.malloc_free = m.fordblks as u64;
    }
    h
}

/// Returns malloc's free memory to the system (`malloc_trim(0)`); false where glibc is not
/// the allocator.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: glibc call without pointers.
        unsafe { libc::malloc_trim(0) };
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

pub fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// Most the driver's heap may grow over a long run once warm (`long_chat.rs`; the engine's
/// `generation_memory.rs` allows the same): its caches settle within the warm-up, and the
/// leak this guards against (issue 26) grew it ≈ 0.9 MB a token.
pub const DRIVER_SLACK: u64 = 8 << 20;

/// Two readings side by side, MiB: the driver's heap, Rust's, RSS and how much RSS grew.
pub fn compare(first: &Heap, last: &Heap) -> String {
    format!(
        "driver heap {:.1} / {:.1} MiB, Rust heap {:.1} / {:.1} MiB, RSS {:.1} / {:.1} MiB \
         ({:+.1} %)",
        mib(first.c_live()),
        mib(last.c_live()),
        mib(first.rust_live),
        mib(last.rust_live),
        mib(first.rss),
        mib(last.rss),
        100.0 * (last.rss as f64 / first.rss as f64 - 1.0)
    )
}

/// Asserts the live heaps stayed flat from `first` to `last` (`over`: the stretch between,
/// for the message): the driver's grew at most [`DRIVER_SLACK`], Rust's at most
/// `rust_slack` bytes. RSS is not asserted (allocator slack; docs/reliability.md).
pub fn assert_flat(first: &Heap, last: &Heap, rust_slack: u64, over: &str) {
    assert!(
        last.c_live() <= first.c_live() + DRIVER_SLACK,
        "the driver's heap grew {:.1} MiB over {over}",
        mib(last.c_live().saturating_sub(first.c_live()))
    );
    assert!(
        last.rust_live <= first.rust_live + rust_slack,
        "Rust's live heap grew {:.1} MiB over {over}",
        mib(last.rust_live.saturating_sub(first.rust_live))
    );
}
