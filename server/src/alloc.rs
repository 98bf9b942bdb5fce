//! A counting global allocator: `used_memory` is the live heap, measured.
//!
//! Wraps the system allocator and keeps the number of bytes requested and not yet
//! freed, so INFO's `used_memory` and the maxmemory check see real figures — a
//! 5 MB table counts 5 MB the moment its buffer is allocated, before it is stored.
//! The count is striped across cache-padded slots picked per thread, so concurrent
//! allocations on different cores never write the same cache line; a read sums the
//! slots (a few dozen loads), which is cheap enough to do before every write command.
//!
//! The binary installs it (`#[global_allocator]`); in a process that does not,
//! [`allocated`] returns `None` and callers fall back to estimates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering::Relaxed};

const STRIPES: usize = 32;

#[repr(align(128))]
struct Slot(AtomicIsize);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Slot = Slot(AtomicIsize::new(0));
static SLOTS: [Slot; STRIPES] = [ZERO; STRIPES];
static INSTALLED: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and without a destructor: accessing it never allocates, so
    // it is safe to use from inside the allocator.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Allocations of this many bytes or more run the function [`before_big_alloc`]
/// set first.
pub const BIG_ALLOC: usize = 1 << 20;

thread_local! {
    // Const-initialised `fn` pointer, no destructor: safe inside the allocator.
    static BEFORE_BIG: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// Runs `f` once, before the next allocation of [`BIG_ALLOC`] bytes or more this
/// thread makes while the returned guard lives. A big allocation is the first
/// sign of a step that is long in one go, which code watching from outside it (a
/// Lua instruction hook) sees only once it has ended. `f` runs inside the
/// allocator: it must not unwind, and what it allocates itself is not watched.
pub fn before_big_alloc(f: fn()) -> BigAllocWatch {
    BEFORE_BIG.set(Some(f));
    BigAllocWatch(())
}

/// Stops [`before_big_alloc`]'s watch when dropped.
pub struct BigAllocWatch(());

impl Drop for BigAllocWatch {
    fn drop(&mut self) {
        BEFORE_BIG.set(None);
    }
}

#[inline]
fn watch(size: usize) {
    if size >= BIG_ALLOC {
        if let Some(f) = BEFORE_BIG.try_with(Cell::take).ok().flatten() {
            f();
        }
    }
}

#[inline]
fn add(delta: isize) {
    let i = STRIPE
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                i = NEXT.fetch_add(1, Relaxed) % STRIPES;
                s.set(i);
            }
            i
        })
        .unwrap_or(0);
    SLOTS[i].0.fetch_add(delta, Relaxed);
}

/// The counting allocator; install with `#[global_allocator]`.
pub struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and
// only adds bookkeeping on an atomic counter, so System's guarantees carry over.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        watch(layout.size());
        // SAFETY: forwarded as is; the caller upholds alloc's contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        watch(layout.size());
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (hence System) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            watch(new_size);
        }
        // SAFETY: as for dealloc; the caller upholds realloc's contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Fixes the C allocator's mmap and trim thresholds; the binary calls this at start.
///
/// By default glibc raises its mmap threshold to the largest mapped block freed so
/// far, and hands back the top of an arena once more than twice that is free. A
/// load's blocks (the request, the parsed ids, the new table and the one it
/// replaces: a few hundred KB each for 20,000 ids) are freed together, which crosses
/// that line, so every load gave the same pages back and faulted them in again: a
/// quarter to a third of a 20,000-id SADD's server CPU, and none of Redis's, whose
/// jemalloc keeps freed pages for seconds.
///
/// The thresholds are now fixed at the most glibc's adaptive ones ever reach (once
/// a 32 MB block has been freed): blocks under 32 MB (a table of about 3M ids) come
/// from the arenas, where a freed block is reused in place, instead of a mapping of
/// their own that every reuse faults in again; and up to 64 MB free at an arena's
/// top, room for the blocks of a 1M-id load freed together, is kept. Lower ones
/// made big loads fault more than glibc's own (4 MB: a 1M-id load 17,000 faults
/// against 1,000–3,000). Setting either threshold turns glibc's adaptive pair off,
/// so each is set here unless the operator set that one (`GLIBC_TUNABLES` or
/// glibc's older `MALLOC_*_` variable). 64-bit only: 32-bit glibc caps the mmap
/// threshold at 512 KB.
pub fn tune_system_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 64 << 20;
        let tunables = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
        let set_by_operator = |tunable: &str, legacy: &str| {
            std::env::var_os(legacy).is_some()
                || tunables
                    .as_encoded_bytes()
                    .windows(tunable.len())
                    .any(|w| w == tunable.as_bytes())
        };
        let settings = [
            (
                "glibc.malloc.mmap_threshold",
                "MALLOC_MMAP_THRESHOLD_",
                libc::M_MMAP_THRESHOLD,
                MMAP_THRESHOLD,
            ),
            (
                "glibc.malloc.trim_threshold",
                "MALLOC_TRIM_THRESHOLD_",
                libc::M_TRIM_THRESHOLD,
                TRIM_THRESHOLD,
            ),
        ];
        for (tunable, legacy, param, value) in settings {
            if set_by_operator(tunable, legacy) {
                continue;
            }
            // SAFETY: mallopt takes no pointers and only sets glibc's parameters,
            // under its lock, from any thread.
            if unsafe { libc::mallopt(param, value) } != 1 {
                tracing::warn!(tunable, value, "glibc refused the allocator threshold");
            }
        }
    }
}

/// Returns the free pages of the C allocator's arenas to the OS (MEMORY PURGE).
pub fn purge() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it walks glibc's own arenas under
    // their locks, and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Marks the allocator as installed; the binary calls this at start.
pub fn mark_installed() {
    INSTALLED.store(true, Relaxed);
}

/// Bytes currently allocated through [`Counting`], if it is the global allocator.
pub fn allocated() -> Option<usize> {
    if !INSTALLED.load(Relaxed) {
        return None;
    }
    let sum: isize = SLOTS.iter().map(|s| s.0.load(Relaxed)).sum();
    Some(sum.max(0) as usize)
}

/// The highest `used_memory` seen: sampled by the server cron every tick and by
/// INFO, not on every allocation (a true high-water mark would put a
/// compare-and-swap on the allocator's hot path).
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Records `used` as a peak candidate.
pub fn note_peak(used: u64) {
    PEAK.fetch_max(used as usize, Relaxed);
}

/// The highest sampled `used_memory`.
pub fn peak() -> u64 {
    PEAK.load(Relaxed) as u64
}

/// `CONFIG RESETSTAT`.
pub fn reset_peak() {
    PEAK.store(0, Relaxed);
}

/// Resident set size of this process, from /proc (0 where unavailable).
pub fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}
