//! Meeting a restarted cache: its sets are read only once it has been caught up.
//!
//! On a cluster all of this is per node: each node's process is met, trusted and
//! caught up on its own (a restarted node is read from MySQL while the others are
//! read as usual), and each node keeps its own marker, under a key whose slot it
//! serves. The replay itself is sent through the cluster's routing, so it reaches
//! every node's sets, not only the restarted one's: wasted work on the others,
//! never wrong (see [`catchup`](crate::catchup)).
//!
//! Each cache connection reports the run id of the process it reaches
//! ([`server_run_id`](relcache_client::Client::server_run_id)); no connection
//! outlives a restart, so the first read on a new process sees a new run id. The
//! service then reads from MySQL, and writes through as usual (a write-through is
//! sequenced, so one that lands before the catch-up's older changes only makes the
//! catch-up drop that set), while one task per process brings the cache up to date
//! ([`catchup`](crate::catchup)):
//!
//! - a process that started empty holds nothing stale: trusted at once;
//! - one that loaded a snapshot (`INFO persistence`, `rdb_last_load_ctime_ms`) gets
//!   every change logged since a margin before the snapshot's time;
//! - the run id is then stored in the cache under `<prefix>caught-up`, so the other
//!   services sharing the cache trust it without replaying the log again (if that
//!   key is evicted, the next one to look replays it again, which is safe: a replay
//!   can drop sets, never make one wrong).
//!
//! The log replay has a blind spot: a change whose write-through was lost (a long
//! partition, a commit in doubt for minutes) is mended by deleting the user's set
//! once the cache answers again, and a snapshot taken before that delete brings the
//! stale set back, with a change older than the replay's window. So each service
//! remembers the sets it deleted that way, and deletes again, before reading a
//! restarted cache, every one it deleted after the snapshot was taken. Only the
//! service that lost a write-through knows of it, which is why this is not left to
//! whoever holds the marker.
//!
//! A catch-up that fails (MySQL or the cache unreachable) is tried again by the next
//! read; until one succeeds, the cache is written to but never read.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use bytes::Bytes;
use relcache_client::{Cmd, Error as CacheError};

use super::cache::NodeConn;
use super::{Relations, TierStats, CLEAR_BATCH};
use crate::cache::Cache;
use crate::catchup::{catch_up, loaded_snapshot_ms, CatchUpConfig, CatchUpError};
use crate::store::{now_micros, Store};

/// Which cache process this service reads from, and which one it is catching up.
#[derive(Debug, Default)]
pub(super) struct Restarts {
    state: Mutex<State>,
    /// Users whose sets this service deleted to end a lost write-through, with
    /// when (Unix ms), oldest first; bounded by `max_suspects` and `MENDED_FOR`.
    mended: Mutex<VecDeque<(u64, u64)>>,
}

/// How long a mended set is remembered: longer than any snapshot a cache would be
/// restarted from is old.
const MENDED_FOR: Duration = Duration::from_secs(24 * 3600);

/// Per node (by address): the run id of the process trusted, and of the one being
/// caught up. Keyed by node so that the nodes of a cluster do not take turns
/// displacing each other's standing.
#[derive(Debug, Default)]
struct State {
    trusted: HashMap<Arc<str>, Arc<str>>,
    catching_up: HashMap<Arc<str>, Arc<str>>,
}

/// What a service knows of a cache process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// Its sets may be read.
    Trusted,
    /// This service is catching it up.
    CatchingUp,
    /// Not met yet, or a catch-up failed.
    Unknown,
}

/// What a first look at a process found.
enum Look {
    /// It started empty, or someone caught it up already.
    UpToDate,
    /// It loaded a snapshot taken at this time (ms since the epoch).
    Behind(u64),
}

impl Restarts {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn standing(&self, node: &str, run_id: &str) -> Standing {
        let state = self.state();
        if state.trusted.get(node).map(|id| &**id) == Some(run_id) {
            Standing::Trusted
        } else if state.catching_up.get(node).map(|id| &**id) == Some(run_id) {
            Standing::CatchingUp
        } else {
            Standing::Unknown
        }
    }

    fn trust(&self, node: &Arc<str>, run_id: &Arc<str>) {
        let mut state = self.state();
        if state.catching_up.get(node) == Some(run_id) {
            state.catching_up.remove(node);
        }
        state.trusted.insert(node.clone(), run_id.clone());
    }

    /// Claims the catch-up of `node`'s process `run_id`; false if it is trusted or
    /// under way.
    fn begin(&self, node: &Arc<str>, run_id: &Arc<str>) -> bool {
        let mut state = self.state();
        if state.trusted.get(node) == Some(run_id) || state.catching_up.get(node) == Some(run_id) {
            return false;
        }
        state.catching_up.insert(node.clone(), run_id.clone());
        true
    }

    /// Records that `users`' sets were deleted now to end lost write-throughs.
    pub(super) fn mended(&self, users: impl Iterator<Item = u64>, limit: usize) {
        let now = now_micros() / 1000;
        let mut mended = self.mended.lock().unwrap_or_else(|e| e.into_inner());
        mended.extend(users.map(|u| (now, u)));
        let horizon = now.saturating_sub(MENDED_FOR.as_millis() as u64);
        while mended
            .front()
            .is_some_and(|&(at, _)| at < horizon || mended.len() > limit)
        {
            mended.pop_front();
        }
    }

    /// Users whose sets were mended at or after `since_ms`.
    fn mended_since(&self, since_ms: u64) -> Vec<u64> {
        let mended = self.mended.lock().unwrap_or_else(|e| e.into_inner());
        mended
            .iter()
            .filter(|&&(at, _)| at >= since_ms)
            .map(|&(_, u)| u)
            .collect()
    }

    fn failed(&self, node: &Arc<str>, run_id: &Arc<str>) {
        let mut state = self.state();
        if state.catching_up.get(node) == Some(run_id) {
            state.catching_up.remove(node);
        }
    }
}

impl Relations {
    /// Whether the sets of cache process `run_id`, reached on `conn`, may be read:
    /// at once if it started empty or was caught up by someone already; otherwise
    /// not until the catch-up this starts in the background is done.
    pub(super) async fn admit(&self, conn: &mut NodeConn, run_id: Arc<str>) -> bool {
        let node = conn.node.clone();
        match self.restarts.standing(&node, &run_id) {
            Standing::Trusted => return true,
            Standing::CatchingUp => return false,
            Standing::Unknown => {}
        }
        let marker = self.cache.marker_key(&self.config.key_prefix, &node);
        match self.look(conn, &run_id, marker.clone()).await {
            Ok(Look::UpToDate) => {
                self.restarts.trust(&node, &run_id);
                true
            }
            Ok(Look::Behind(snapshot_ms)) => {
                self.catch_up_in_background(node, run_id, marker, snapshot_ms);
                false
            }
            // `call` has reported the failure.
            Err(_) => false,
        }
    }

    async fn look(
        &self,
        conn: &mut NodeConn,
        run_id: &str,
        marker: Option<Bytes>,
    ) -> Result<Look, CacheError> {
        let fields = self.call(conn, Cmd::info("persistence")).await?;
        let Some(snapshot_ms) = loaded_snapshot_ms(&fields) else {
            // Started empty: nothing in it predates this process.
            return Ok(Look::UpToDate);
        };
        let margin_ms = self.config.catchup_margin.as_millis() as u64;
        let mended = self
            .restarts
            .mended_since(snapshot_ms.saturating_sub(margin_ms));
        for users in mended.chunks(CLEAR_BATCH) {
            let keys: Vec<_> = users.iter().map(|&u| self.cache_key(u)).collect();
            // Routed by key: on a cluster, wherever each set now lives.
            let deleted = self.cache.del(&keys).await;
            self.report(None, deleted.as_ref().err());
            deleted?;
        }
        // A node that serves no slot has no marker, and nothing to read either.
        let Some(marker) = marker else {
            return Ok(Look::Behind(snapshot_ms));
        };
        if self.call(conn, Cmd::get(marker)).await?.as_deref() == Some(run_id.as_bytes()) {
            return Ok(Look::UpToDate);
        }
        Ok(Look::Behind(snapshot_ms))
    }

    fn catch_up_in_background(
        &self,
        node: Arc<str>,
        run_id: Arc<str>,
        marker: Option<Bytes>,
        snapshot_ms: u64,
    ) {
        if !self.restarts.begin(&node, &run_id) {
            return;
        }
        let job = CatchUpJob {
            store: self.store.clone(),
            cache: self.cache.clone(),
            prefix: self.config.key_prefix.clone(),
            marker,
            since: (snapshot_ms * 1000)
                .saturating_sub(self.config.catchup_margin.as_micros() as u64),
            stats: self.stats.clone(),
        };
        let restarts = self.restarts.clone();
        tokio::spawn(async move {
            match job.run(&run_id).await {
                Ok(()) => restarts.trust(&node, &run_id),
                Err(e) => {
                    tracing::warn!(node = %node, run_id = %run_id, error = %e, "cache catch-up failed; reading from MySQL until it succeeds");
                    restarts.failed(&node, &run_id);
                }
            }
        });
    }
}

/// The key naming the cache process last caught up (see [`Cache::marker_key`]) is
/// under the sets' prefix, where no user's key can be: those are digits after the
/// prefix, or `{digits}` on a cluster.
struct CatchUpJob {
    store: Store,
    cache: Cache,
    prefix: String,
    /// `None` for a node that serves no slot: caught up, and not marked.
    marker: Option<Bytes>,
    since: u64,
    stats: Arc<TierStats>,
}

impl CatchUpJob {
    async fn run(&self, run_id: &str) -> Result<(), CatchUpError> {
        let report = catch_up(
            &self.store,
            &self.cache,
            &self.prefix,
            self.since,
            CatchUpConfig::default(),
        )
        .await?;
        tracing::info!(
            run_id,
            changes = report.changes,
            applied = report.applied,
            elapsed = ?report.elapsed,
            behind = ?Duration::from_micros(now_micros().saturating_sub(self.since)),
            "restarted cache caught up"
        );
        self.stats
            .catchup_changes
            .fetch_add(report.changes, Relaxed);
        if let Some(marker) = &self.marker {
            self.cache
                .run(Cmd::set(marker, run_id.as_bytes().to_vec()))
                .await?;
        }
        self.stats.catchups.fetch_add(1, Relaxed);
        Ok(())
    }
}
