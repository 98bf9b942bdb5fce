//! Catching a restarted cache up with MySQL.
//!
//! A cache that restarts from a snapshot comes back with the sets as they were when
//! the snapshot was taken. Follows and unfollows that committed later — while the
//! cache was saving, down, or loading — never reached it: their write-throughs
//! failed or went to the old process. Sequenced write-throughs alone do not mend
//! this: a set that missed change 7 still applies change 9 when it comes, and then
//! says "follows" where MySQL says otherwise.
//!
//! So before a restarted cache's sets are trusted, every change logged since the
//! snapshot is sent again, in each shard's log order, as the sequenced write-through
//! it was (`IDSET.ADD key XX SEQ n id`, `IDSET.REM key SEQ n id`). The cache applies
//! each one that is newer than its set, ignores one it already holds, and drops a
//! set that an older change reaches (it can no longer tell what the set misses), so
//! afterwards every cached set holds every committed change, or is gone and will be
//! filled from MySQL. Replaying more than needed is safe — it can drop a set (one
//! that already holds a newer change than a replayed one cannot tell what it lacks),
//! never make one wrong — so the window starts a margin before the snapshot's time,
//! for a write-through that was still on its way when the snapshot began and for
//! clocks that disagree a little, at the cost of refilling the sets changed within
//! the margin.
//!
//! [`Relations`](crate::service::Relations) does this by itself when it meets a new
//! cache process (see `service::restart`); `relcache-repair catchup` runs it by hand.

use std::time::{Duration, Instant};

use relcache_client::{Cmd, Error as CacheError};

use super::cache::Cache;

use super::service::user_key;
use super::store::{Store, StoreError, Table};

/// How a catch-up reads the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpConfig {
    /// `relation_log` rows read per statement, and write-throughs sent per pipeline.
    pub batch: u32,
}

impl Default for CatchUpConfig {
    fn default() -> Self {
        CatchUpConfig { batch: 1000 }
    }
}

/// What a catch-up did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatchUpReport {
    /// Changes read from `relation_log` and sent to the cache.
    pub changes: u64,
    /// Of those, changes the cache applied (or already held) to a cached set.
    pub applied: u64,
    /// Changes the cache answered nil: the user's set was not cached, or the change
    /// came out of sequence and the set was dropped.
    pub not_applied: u64,
    pub elapsed: Duration,
}

/// Why a catch-up stopped before the end. Either way the cache is not caught up,
/// and its sets must not be trusted until a later attempt succeeds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatchUpError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
}

/// Replays every change logged at or after `since` (microseconds since the Unix
/// epoch, `relation_log.ts`) to the cached sets under `key_prefix`, shard by shard
/// in `seq` order.
///
/// # Errors
///
/// The first MySQL or cache failure.
pub async fn catch_up(
    store: &Store,
    cache: &Cache,
    key_prefix: &str,
    since: u64,
    config: CatchUpConfig,
) -> Result<CatchUpReport, CatchUpError> {
    let started = Instant::now();
    let inner = store.inner();
    let batch = u64::from(config.batch.max(1));
    let mut report = CatchUpReport::default();
    for shard in 0..inner.map().len() {
        let log = inner.table(shard, Table::RelationLog);
        // As the repair job's recent mode: find the window's first row through the
        // ts index, then walk the primary key, which keeps `seq` order.
        let sql = format!("SELECT MIN(seq) FROM {log} WHERE ts >= ?");
        let first: Vec<Option<u64>> = inner
            .read(inner.deadline(), shard, "read relation_log", sql, (since,))
            .await?;
        let Some(mut next) = first.into_iter().next().flatten() else {
            continue;
        };
        let sql = format!(
            "SELECT seq, user_id, friend_id, op FROM {log} WHERE seq >= ? AND ts >= ? \
             ORDER BY seq LIMIT ?"
        );
        loop {
            let rows: Vec<(u64, u64, u64, String)> = inner
                .read(
                    inner.deadline(),
                    shard,
                    "read relation_log",
                    sql.clone(),
                    (next, since, batch),
                )
                .await?;
            let cmds = rows
                .iter()
                .map(|(seq, user, friend, op)| {
                    let key = user_key(key_prefix, cache.is_cluster(), *user);
                    write_through(key, *seq, *friend, op)
                })
                .collect();
            for reply in cache.run_pipeline(cmds).await? {
                match reply? {
                    Some(_) => report.applied += 1,
                    None => report.not_applied += 1,
                }
            }
            report.changes += rows.len() as u64;
            match rows.last() {
                Some(&(seq, ..)) if rows.len() as u64 == batch => next = seq + 1,
                _ => break,
            }
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// When the snapshot a cache process loaded at start was taken, in milliseconds
/// since the Unix epoch, from its `INFO persistence` fields
/// (`rdb_last_load_ctime_ms`): every change committed before then is in it. `None`
/// if it started empty, or does not say (a server without snapshots holds nothing
/// from before its start).
pub fn loaded_snapshot_ms(info_persistence: &[(String, String)]) -> Option<u64> {
    info_persistence
        .iter()
        .find(|(k, _)| k == "rdb_last_load_ctime_ms")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
}

/// The write-through a logged change was sent as (see `Relations::follow`).
fn write_through(key: bytes::Bytes, seq: u64, friend: u64, op: &str) -> Cmd<Option<u64>> {
    if op == "U" {
        Cmd::idset_rem_seq(key, seq, &[friend])
    } else {
        Cmd::idset_add_xx_seq(key, seq, &[friend])
    }
}
