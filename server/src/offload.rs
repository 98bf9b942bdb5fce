//! Long synchronous work on a runtime worker, without stalling the clients that
//! share the worker.
//!
//! A command runs inside its connection's task. Most take microseconds, but a few
//! take long: loading a table of millions of ids, or rebuilding one that has run
//! out of room. While such work runs, the worker runs nothing else — and the tasks
//! queued on it, or the I/O driver it may hold, wait too: other clients' PINGs were
//! measured waiting 300 ms behind one rebuild of a 4.8M-id set, on every thread
//! count. [`offload`] hands the worker's other tasks to another thread for the
//! duration (tokio's `block_in_place`), so only the client that asked waits.
//!
//! Not for every command: moving a worker costs a thread wake-up, which would
//! double the cost of a fast command. Callers use it where the size of the work is
//! known to be large before it starts.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Requests larger than this (in argument bytes) run offloaded.
pub const LARGE_REQUEST: usize = 256 * 1024;

/// Tables larger than this (in bytes) are rebuilt offloaded.
pub const LARGE_TABLE: usize = 256 * 1024;

/// Runs `f` so that the runtime worker's other tasks go on meanwhile, when called
/// on a multi-threaded runtime (the server's); otherwise (a test, a single-threaded
/// runtime) simply runs it.
pub fn offload<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}
