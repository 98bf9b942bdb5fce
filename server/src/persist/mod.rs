//! Snapshots: SAVE / BGSAVE / the save policy write the keyspace to `dir/dbfilename`
//! (format: `protocol/SNAPSHOT.md`), and a restart loads it back.
//!
//! relcache is multi-threaded, so it cannot fork for a point-in-time copy as Redis
//! does. Instead a saver thread walks the shards one at a time ([`save`]): under a
//! shard's read lock it takes reference-counted handles on the shard's values (no
//! bytes copied), releases the lock, and writes them out. Readers never wait;
//! writers of a shard wait only for that copy of handles. A value written while a
//! save holds its handle is copied on write, so a save's extra memory is bounded by
//! what one shard's batch pins. The snapshot's recorded time is the moment the save
//! started: whatever was written before it is in the file; a write during the save
//! may or may not be.
//!
//! Loading ([`load`]) runs at start on its own threads while the server already
//! accepts connections; until it is done, commands Redis refuses while loading get
//! `-LOADING`. A file that fails any check is refused (the process exits non-zero)
//! unless `snapshot-load-corrupt start-empty` says to start empty.

mod load;
mod save;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::server::Server;

pub use load::start_load;
pub use save::SaveError;

/// Persistence state and counters, read by INFO persistence and LASTSAVE.
#[derive(Default)]
pub struct State {
    loading: AtomicBool,
    /// Unix ms a running load started at, and the file's size (INFO while loading).
    pub loading_start_ms: AtomicU64,
    pub loading_total_bytes: AtomicU64,
    pub loading_loaded_keys: AtomicU64,
    /// A save of any kind is running (only one runs at a time).
    busy: AtomicBool,
    /// The running save is a background one (INFO `rdb_bgsave_in_progress`).
    background: AtomicBool,
    /// BGSAVE SCHEDULE arrived inside EXEC: start one at the next tick.
    scheduled: AtomicBool,
    /// The dirty counter's value when the last successful save started.
    dirty_at_save: AtomicU64,
    /// Unix seconds of the last successful save (start time at first).
    pub last_save_secs: AtomicU64,
    /// Unix ms the running save started at (0 when none runs).
    pub current_started_ms: AtomicU64,
    pub current_keys_processed: AtomicU64,
    pub current_keys_total: AtomicU64,
    last_bgsave_failed: AtomicBool,
    /// Unix secs of the last failed background save (the policy waits before retrying).
    last_failure_secs: AtomicU64,
    last_bgsave_secs: AtomicI64,
    pub saves: AtomicU64,
    /// Most value bytes one batch of a save held handles on (our analogue of
    /// Redis's `rdb_last_cow_size`: what writes during the save may have to copy).
    pub last_pinned_bytes: AtomicU64,
    pub last_load_keys_loaded: AtomicU64,
    pub last_load_keys_expired: AtomicU64,
    /// The recorded time of the snapshot loaded at start; 0 if none was.
    pub last_load_ctime_ms: AtomicU64,
    /// Set when a load failed and the server must exit non-zero.
    pub load_error: Mutex<Option<String>>,
    /// SHUTDOWN settled the save question (saved or NOSAVE): the exit path must not
    /// save again.
    shutdown_settled: AtomicBool,
    /// Requests to the background saver thread.
    requests: Mutex<Option<mpsc::Sender<()>>>,
}

/// Why a BGSAVE was not started.
#[derive(Debug, PartialEq, Eq)]
pub enum BgsaveRefused {
    InProgress,
}

impl State {
    /// Whether the snapshot is still loading (commands without Redis's `loading`
    /// flag are refused meanwhile).
    pub fn loading(&self) -> bool {
        self.loading.load(Relaxed)
    }

    pub fn bgsave_in_progress(&self) -> bool {
        self.busy.load(Relaxed) && self.background.load(Relaxed)
    }

    pub fn last_bgsave_ok(&self) -> bool {
        !self.last_bgsave_failed.load(Relaxed)
    }

    pub fn last_bgsave_secs(&self) -> i64 {
        self.last_bgsave_secs.load(Relaxed)
    }

    /// `rdb_changes_since_last_save`.
    pub fn changes_since_save(&self, server: &Server) -> u64 {
        server
            .db
            .dirty
            .get()
            .saturating_sub(self.dirty_at_save.load(Relaxed))
    }

    /// Takes the one save slot; false if a save runs.
    fn try_begin(&self, background: bool) -> bool {
        if self
            .busy
            .compare_exchange(false, true, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        self.background.store(background, Relaxed);
        true
    }

    fn end(&self) {
        self.current_started_ms.store(0, Relaxed);
        self.background.store(false, Relaxed);
        self.busy.store(false, Relaxed);
    }
}

/// Initial values that depend on the start time.
pub fn init(server: &Server) {
    let secs = crate::db::now_ms() / 1000;
    server.persist.last_save_secs.store(secs, Relaxed);
    server.persist.last_bgsave_secs.store(-1, Relaxed);
}

/// Runs one save (foreground or background) now, in this thread, and records it.
fn run_save(server: &Server, background: bool) -> Result<(), SaveError> {
    let state = &server.persist;
    let started = Instant::now();
    let result = save::write_snapshot(server);
    match &result {
        Ok(report) => {
            state.dirty_at_save.store(report.dirty_at_start, Relaxed);
            state
                .last_save_secs
                .store(report.created_ms / 1000, Relaxed);
            state.saves.fetch_add(1, Relaxed);
            state.last_pinned_bytes.store(report.peak_pinned, Relaxed);
            tracing::info!(
                keys = report.keys,
                bytes = report.bytes,
                ms = started.elapsed().as_millis() as u64,
                "DB saved on disk"
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "snapshot save failed");
            state
                .last_failure_secs
                .store(crate::db::now_ms() / 1000, Relaxed);
        }
    }
    if background {
        state.last_bgsave_failed.store(result.is_err(), Relaxed);
        state
            .last_bgsave_secs
            .store(started.elapsed().as_secs() as i64, Relaxed);
    }
    state.end();
    result.map(|_| ())
}

/// SAVE: a save in the calling thread (the caller offloads its runtime worker).
///
/// # Errors
///
/// `Err(None)` if another save runs; `Err(Some(e))` if writing failed.
pub fn save_now(server: &Server) -> Result<(), Option<SaveError>> {
    if !server.persist.try_begin(false) {
        return Err(None);
    }
    run_save(server, false).map_err(Some)
}

/// A save that waits for a running one to end first: the save on shutdown, which
/// must contain every write made before it.
pub fn save_final(server: &Server) -> Result<(), SaveError> {
    while !server.persist.try_begin(false) {
        std::thread::sleep(Duration::from_millis(5));
    }
    run_save(server, false)
}

/// `BGSAVE SCHEDULE` where a save cannot start now (inside EXEC): the saver
/// thread starts one at its next tick.
pub fn schedule_bgsave(server: &Server) {
    server.persist.scheduled.store(true, Relaxed);
}

/// BGSAVE: hands a save to the saver thread.
pub fn bgsave(server: &Server) -> Result<(), BgsaveRefused> {
    let state = &server.persist;
    if !state.try_begin(true) {
        return Err(BgsaveRefused::InProgress);
    }
    state.current_started_ms.store(crate::db::now_ms(), Relaxed);
    match state.requests.lock().as_ref().map(|tx| tx.send(())) {
        Some(Ok(())) => Ok(()),
        // No saver thread (shutting down): nothing will run it.
        _ => {
            state.end();
            Err(BgsaveRefused::InProgress)
        }
    }
}

/// SHUTDOWN settled whether to save; the exit path leaves it alone.
pub fn settle_shutdown(server: &Server) {
    server.persist.shutdown_settled.store(true, Relaxed);
}

/// On the way out (SIGTERM, SIGINT): saves if a save policy is set and SHUTDOWN
/// did not already decide, as Redis does.
pub fn at_exit(server: &Server) -> Result<(), SaveError> {
    if server.persist.shutdown_settled.load(Relaxed)
        || server.config.save_policy.read().is_empty()
        || server.persist.loading()
    {
        return Ok(());
    }
    tracing::info!("saving the final snapshot before exit");
    save_final(server)
}

/// Starts the saver thread: it runs BGSAVEs and applies the save policy until
/// shutdown.
pub fn start_saver(server: Arc<Server>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let (tx, rx) = mpsc::channel();
    *server.persist.requests.lock() = Some(tx);
    std::thread::Builder::new()
        .name("relcache-saver".into())
        .spawn(move || saver_loop(&server, &rx))
}

fn saver_loop(server: &Server, rx: &mpsc::Receiver<()>) {
    lower_priority();
    let state = &server.persist;
    while !server.shutdown.is_cancelled() {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => {
                let _ = run_save(server, true);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if state.loading() {
            continue;
        }
        let due = state.scheduled.load(Relaxed) || policy_due(server);
        if due && state.try_begin(true) {
            state.scheduled.store(false, Relaxed);
            state.current_started_ms.store(crate::db::now_ms(), Relaxed);
            let _ = run_save(server, true);
        }
    }
    state.requests.lock().take();
}

/// Redis waits this long after a failed background save before the policy tries
/// again.
const RETRY_DELAY_SECS: u64 = 5;

/// Whether some `save <seconds> <changes>` pair is met.
fn policy_due(server: &Server) -> bool {
    let state = &server.persist;
    let changes = state.changes_since_save(server);
    if changes == 0 {
        return false;
    }
    let now = crate::db::now_ms() / 1000;
    if state.last_bgsave_failed.load(Relaxed)
        && now.saturating_sub(state.last_failure_secs.load(Relaxed)) < RETRY_DELAY_SECS
    {
        return false;
    }
    let since = now.saturating_sub(state.last_save_secs.load(Relaxed));
    server
        .config
        .save_policy
        .read()
        .iter()
        .any(|&(secs, min_changes)| changes >= min_changes && since >= secs)
}

/// Background saves run niced: a save is a long burst of CPU (CRCs, copies, writes)
/// that nobody waits for, and on a machine with few cores the threads answering
/// clients must win it. Linux keeps nice values per thread, so this changes only
/// the saver (SAVE, which its client waits for, runs on a worker at full priority).
fn lower_priority() {
    // SAFETY: setpriority has no memory-safety preconditions; `who = 0` is the
    // calling thread on Linux. Lowering needs no privilege; a failure
    // leaves the thread at normal priority: only other clients are the slower.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower the saver's priority");
    }
}
