//! Long synchronous work on a client loop, without stalling the clients that
//! share the loop.
//!
//! A command runs on its connection's loop. Most take microseconds, but a few
//! take long: loading a table of millions of ids, or rebuilding one that has run
//! out of room. While such work runs, the loop serves nobody else: other clients'
//! PINGs were measured waiting 300 ms behind one rebuild of a 4.8M-id set, on
//! every thread count. [`offload`] hands the loop's other clients to another
//! thread for the duration (an event loop's [`crate::evloop::hand_over`], a
//! runtime worker's `block_in_place`), so only the client that asked waits.
//!
//! Not for every command: moving a worker costs a thread wake-up, which would
//! double the cost of a fast command. Callers use it where the size of the work is
//! known to be large before it starts.
//!
//! Freeing is such work too, and often needs no one to wait for it: dropping the
//! million entries of a flushed keyspace took 250 ms of a worker. [`free_later`]
//! hands what is to be dropped to one background thread (Redis's lazyfree), and
//! [`wait_freed`] waits for it where memory must be back before a reply (FLUSHALL
//! SYNC).

use std::sync::mpsc::{self, Sender};
use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::clock::Stamp;

/// Requests larger than this (in argument bytes) run offloaded.
pub const LARGE_REQUEST: usize = 256 * 1024;

/// Requests with more arguments than this run off the loop, as do the listing
/// of their arguments and the freeing of the tables of where they lie (a
/// millisecond or more each at a few million), and a command's work on them
/// (one-byte keys, which [`LARGE_REQUEST`] would not catch). Below it the hand-over costs more than
/// it saves: a 20,000-id SADD paid two of them, ~2.5 context switches, when
/// the threshold was 8,192 arguments.
pub const LARGE_ARGS: usize = 64 * 1024;

/// Tables larger than this (in bytes) are rebuilt offloaded.
pub const LARGE_TABLE: usize = 256 * 1024;

/// Slots (or keys) a command may read on its loop, walking, gathering or
/// intersecting sets: about a millisecond of work. A walk of a 3M-id set
/// (SMEMBERS, SUNIONSTORE…) held the loop's other clients for 150–650 ms.
pub const LARGE_WALK: u64 = 32 * 1024;

/// Lets the loop go on without the command running on it, for the rest of the
/// command, if that reads more than [`LARGE_WALK`] slots or keys (below that
/// the hand-over would cost more than the wait it saves). What [`offload`] does,
/// for a command that knows how long it will be only once it has its keys.
pub fn step_aside_past(reads: u64) {
    if reads > LARGE_WALK {
        crate::evloop::hand_over();
    }
}

/// Runs `f` so that the other connections of the loop it is called on go on
/// meanwhile: an event loop's ([`crate::evloop::hand_over`]), or a multi-threaded
/// runtime worker's tasks; otherwise (a test, a single-threaded runtime, a
/// thread that has already handed its loop over) simply runs it.
pub fn offload<R>(f: impl FnOnce() -> R) -> R {
    if crate::evloop::hand_over() {
        return f();
    }
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// How long work whose length is not known before it starts (a transaction's
/// commands, a script) runs on its loop before the loop goes on without it
/// ([`StepAside`]). A hand-over costs a thread wake-up and a few context
/// switches, more than most such work takes: with every script handed off,
/// `EVAL "return 1" 0` cost 1.6–2.0 times the CPU a request.
pub const STEP_ASIDE_AFTER_NS: u64 = 1_000_000;

/// Work of unknown length done in steps on a loop (a transaction's commands,
/// the keys an eviction takes):
/// once it has run [`STEP_ASIDE_AFTER_NS`], the loop goes on without it, as
/// with [`offload`], and the loop's other clients wait for at most one step
/// more.
pub struct StepAside {
    started: Stamp,
    aside: bool,
}

impl StepAside {
    pub fn start() -> StepAside {
        StepAside {
            started: Stamp::now(),
            aside: false,
        }
    }

    /// Between two steps: hands the loop over if the work is overdue. Tried
    /// again at the next step if no thread could take it (`loop-max-threads`);
    /// on a thread that no longer holds its loop, trying costs a look.
    pub fn check(&mut self) {
        if !self.aside && self.started.elapsed_ns() >= STEP_ASIDE_AFTER_NS {
            self.aside = crate::evloop::hand_over();
        }
    }
}

/// The lazy-free thread's queue, and how far it has got.
struct Freer {
    queue: Sender<Box<dyn Send>>,
    /// (objects queued, objects dropped) so far; `progress` is signalled after
    /// each drop. The queue is FIFO, so an object is gone once `dropped` reaches
    /// the `queued` count its queueing made.
    counts: Mutex<(u64, u64)>,
    progress: Condvar,
}

fn freer() -> &'static Freer {
    static FREER: OnceLock<Freer> = OnceLock::new();
    FREER.get_or_init(|| {
        let (queue, garbage) = mpsc::channel::<Box<dyn Send>>();
        std::thread::Builder::new()
            .name("relcache-lazyfree".into())
            .spawn(move || {
                for g in garbage {
                    // A drop that panicked would end the thread, and whatever
                    // was queued behind it would never be freed nor its waiters
                    // (FLUSHALL SYNC, MEMORY PURGE) woken.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(g)));
                    // Only sent to once FREER is set.
                    let f = FREER.get().expect("lazy-free queue");
                    f.counts.lock().1 += 1;
                    f.progress.notify_all();
                }
            })
            .expect("start the lazy-free thread");
        Freer {
            queue,
            counts: Mutex::new((0, 0)),
            progress: Condvar::new(),
        }
    })
}

/// Drops `garbage` on the lazy-free thread, so that whoever lets go of something
/// big (a keyspace, a huge value) does not spend its worker freeing it.
pub fn free_later<T: Send + 'static>(garbage: T) {
    let f = freer();
    f.counts.lock().0 += 1;
    if let Err(mpsc::SendError(g)) = f.queue.send(Box::new(garbage)) {
        // The thread is gone (it panicked): free here rather than leak.
        drop(g);
        f.counts.lock().1 += 1;
    }
}

/// Objects handed to [`free_later`] and not yet freed (INFO's
/// `lazyfree_pending_objects`).
pub fn pending_frees() -> u64 {
    let (queued, dropped) = *freer().counts.lock();
    queued - dropped
}

/// Objects freed in the background so far (INFO's `lazyfreed_objects`).
pub fn lazyfreed() -> u64 {
    freer().counts.lock().1
}

/// Blocks until everything handed to [`free_later`] before the call has been
/// freed — not what others hand over meanwhile, so a steady stream of big
/// replies cannot keep a FLUSHALL SYNC waiting. Run it [`offload`]ed: it can
/// take as long as the freeing does.
pub fn wait_freed() {
    let f = freer();
    let mut counts = f.counts.lock();
    let target = counts.0;
    while counts.1 < target {
        f.progress.wait(&mut counts);
    }
}
