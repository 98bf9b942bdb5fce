//! The repair job: finds follows whose two halves disagree and fixes them.
//!
//! A follow writes `following(a, b)` on a's shard and its twin `followers(b, a)` on
//! b's, in two transactions that commit one after the other (see
//! [`Store::follow`]). If the second commit fails, or a process dies between the two,
//! or someone edits rows by hand, the pair is left inconsistent:
//!
//! - (a) `following(a, b)` without its twin `followers(b, a)` → the twin is inserted,
//!   with the same `auto_ts`;
//! - (b) `followers(b, a)` without `following(a, b)` → the twin is deleted
//!   (`following` is the truth: it is written first);
//! - (c) a `mutual` flag that disagrees with the truth (mutual ⇔ both `following`
//!   rows exist) → the flag is fixed, on whichever of the four rows has it wrong.
//!
//! Two modes share the same check-then-fix step:
//!
//! - [`full_scan`] reads both tables of every shard in primary-key order, in batches,
//!   checkpointing after each batch in that shard's `repair_state` table, so a stopped
//!   run continues where it left off. A finished pass clears the checkpoints.
//! - [`recent`] reads only the pairs named in `relation_log` within a recent window:
//!   cheap enough to run every few minutes with a window a little longer than the
//!   interval, so half-done follows are fixed minutes after they happen.
//!
//! Detection is a batch of plain (non-locking) reads per shard; a pair that looks
//! wrong is then fixed by [`Store::reconcile`], which re-reads it under the same
//! locks, in the same order, as follow and unfollow. So the job is safe to run
//! against live traffic: a follow caught between its two commits looks wrong to the
//! cheap check but is found right (and left alone) under the locks.
//!
//! Both modes are rate-limited in rows read per second, so a scan can run on a busy
//! primary without crowding out user traffic. [`prune_log`] deletes log rows older
//! than the longest window anyone runs [`recent`] with.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use mysql_async::{Params, Value};
use tokio::time::Instant;

use super::store::{in_list, now_micros, Fixes, Store, StoreError, Table};

/// The `repair_state.job` of the full scan.
const FULL_SCAN_JOB: &str = "full";

/// How a repair run is paced and bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairConfig {
    /// Rows read per statement.
    pub batch: u32,
    /// Most rows read per second, over the run; `None` for no limit.
    pub rate: Option<u32>,
    /// Stop after reading this many rows. A full scan resumes from there next run.
    pub max_rows: Option<u64>,
}

impl Default for RepairConfig {
    /// Batches of 500 rows, 5000 rows per second, no row limit.
    fn default() -> Self {
        RepairConfig {
            batch: 500,
            rate: Some(5000),
            max_rows: None,
        }
    }
}

/// What a repair run read and fixed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Rows read from `following` and `followers` (full scan) or `relation_log`
    /// (recent mode).
    pub rows_scanned: u64,
    /// Distinct pairs checked (a pair is checked once per batch it appears in).
    pub pairs_checked: u64,
    /// Pairs that looked inconsistent and were reconciled under locks.
    pub pairs_reconciled: u64,
    /// Rows changed.
    pub fixes: Fixes,
    /// The run covered everything: false when it stopped at `max_rows`.
    pub complete: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = &self.fixes;
        write!(
            f,
            "scanned {} rows, checked {} pairs, reconciled {}: \
             twins inserted {}, twins deleted {}, twins updated {}, mutual flags fixed {} \
             ({:.1}s, {})",
            self.rows_scanned,
            self.pairs_checked,
            self.pairs_reconciled,
            x.twins_inserted,
            x.twins_deleted,
            x.twins_updated,
            x.mutual_fixed,
            self.elapsed.as_secs_f64(),
            if self.complete {
                "complete"
            } else {
                "stopped at the row limit; run again to continue"
            }
        )
    }
}

/// Where a shard's full scan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Following = 0,
    Followers = 1,
    Done = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checkpoint {
    phase: Phase,
    /// The last primary key read in this phase; `None`: from the start.
    after: Option<(u64, u64)>,
}

impl Checkpoint {
    const START: Checkpoint = Checkpoint {
        phase: Phase::Following,
        after: None,
    };
}

/// Sleeps so that the run reads at most `rate` rows per second on average.
struct Pacer {
    start: Instant,
    rows: u64,
    rate: Option<u32>,
}

impl Pacer {
    fn new(rate: Option<u32>) -> Pacer {
        Pacer {
            start: Instant::now(),
            rows: 0,
            rate: rate.filter(|&r| r > 0),
        }
    }

    /// A batch size that keeps each sleep under a second.
    fn batch(&self, batch: u32) -> u32 {
        self.rate.map_or(batch, |r| batch.min(r)).max(1)
    }

    /// Accounts for `rows` just read and waits until they fit the rate.
    async fn spend(&mut self, rows: u64) {
        self.rows += rows;
        if let Some(rate) = self.rate {
            let due = Duration::from_secs_f64(self.rows as f64 / f64::from(rate));
            tokio::time::sleep_until(self.start + due).await;
        }
    }
}

/// Scans every shard's `following` and `followers` tables in primary-key order and
/// fixes what disagrees. Continues from the checkpoints a stopped run left, unless
/// `restart`.
///
/// # Errors
///
/// The first [`StoreError`]. Checkpoints are saved after each batch, so running
/// again resumes from the batch that failed.
pub async fn full_scan(
    store: &Store,
    config: &RepairConfig,
    restart: bool,
) -> Result<Report, StoreError> {
    let inner = store.inner();
    let shards = inner.map().len();
    if restart {
        for shard in 0..shards {
            clear_checkpoint(store, shard).await?;
        }
    }
    let mut checkpoints = Vec::with_capacity(shards as usize);
    for shard in 0..shards {
        checkpoints.push(load_checkpoint(store, shard).await?);
    }
    if pass_finished(&checkpoints) {
        checkpoints.fill(Checkpoint::START);
    }

    let mut report = Report::default();
    let mut pacer = Pacer::new(config.rate);
    let batch = pacer.batch(config.batch);
    let started = Instant::now();
    for (shard, mut cp) in (0..shards).zip(checkpoints) {
        while cp.phase != Phase::Done {
            let allowed = config
                .max_rows
                .map_or(u64::MAX, |m| m.saturating_sub(report.rows_scanned));
            if allowed == 0 {
                report.elapsed = started.elapsed();
                return Ok(report);
            }
            let limit = u64::from(batch).min(allowed);
            let table = match cp.phase {
                Phase::Following => Table::Following,
                _ => Table::Followers,
            };
            let keys = scan_keys(store, shard, table, cp.after, limit).await?;
            report.rows_scanned += keys.len() as u64;
            // A key names its pair from either side: following(a, b) and its twin
            // followers(b, a) both check the pair {a, b}.
            check_and_fix(store, keys.iter().copied(), &mut report).await?;
            cp = if (keys.len() as u64) < limit {
                Checkpoint {
                    phase: if cp.phase == Phase::Following {
                        Phase::Followers
                    } else {
                        Phase::Done
                    },
                    after: None,
                }
            } else {
                Checkpoint {
                    phase: cp.phase,
                    after: keys.last().copied(),
                }
            };
            save_checkpoint(store, shard, cp).await?;
            pacer.spend(keys.len() as u64).await;
        }
    }
    for shard in 0..shards {
        clear_checkpoint(store, shard).await?;
    }
    report.complete = true;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Whether checkpoints are what a finished pass left behind, rather than a pass in
/// progress. Shards are scanned in order, so while a pass is in progress every
/// shard it finished comes before every shard it has not. All shards done, or a
/// finished shard after an unfinished one, means the last pass finished and was
/// stopped while clearing its checkpoints (which goes in shard order too): the
/// next run is a new pass.
fn pass_finished(checkpoints: &[Checkpoint]) -> bool {
    let unfinished = checkpoints
        .iter()
        .position(|c| c.phase != Phase::Done)
        .unwrap_or(checkpoints.len());
    unfinished == checkpoints.len()
        || checkpoints[unfinished..]
            .iter()
            .any(|c| c.phase == Phase::Done)
}

/// Checks the pairs named in every shard's `relation_log` with `ts` in the last
/// `window`, and fixes those that disagree. Keeps no checkpoint: the window is the
/// state.
///
/// # Errors
///
/// The first [`StoreError`].
pub async fn recent(
    store: &Store,
    config: &RepairConfig,
    window: Duration,
) -> Result<Report, StoreError> {
    let inner = store.inner();
    let from = now_micros().saturating_sub(window.as_micros() as u64);
    let mut report = Report::default();
    let mut pacer = Pacer::new(config.rate);
    let batch = pacer.batch(config.batch);
    let started = Instant::now();
    for shard in 0..inner.map().len() {
        let log = inner.table(shard, Table::RelationLog);
        // Find where the window starts once, through the ts index; then walk the
        // primary key from there, which stays a cheap range scan however the
        // optimizer judges the window. Rows in it stamped before the window (clocks of
        // different writers disagree a little) are skipped by the ts condition.
        let sql = format!("SELECT MIN(seq) FROM {log} WHERE ts >= ?");
        let first: Vec<Option<u64>> = inner
            .read(inner.deadline(), shard, "read relation_log", sql, (from,))
            .await?;
        let Some(mut next) = first.into_iter().next().flatten() else {
            continue;
        };
        let sql = format!(
            "SELECT seq, user_id, friend_id FROM {log} WHERE seq >= ? AND ts >= ? \
             ORDER BY seq LIMIT ?"
        );
        loop {
            let allowed = config
                .max_rows
                .map_or(u64::MAX, |m| m.saturating_sub(report.rows_scanned));
            if allowed == 0 {
                report.elapsed = started.elapsed();
                return Ok(report);
            }
            let limit = u64::from(batch).min(allowed);
            let rows: Vec<(u64, u64, u64)> = inner
                .read(
                    inner.deadline(),
                    shard,
                    "read relation_log",
                    sql.clone(),
                    (next, from, limit),
                )
                .await?;
            report.rows_scanned += rows.len() as u64;
            check_and_fix(store, rows.iter().map(|r| (r.1, r.2)), &mut report).await?;
            pacer.spend(rows.len() as u64).await;
            match rows.last() {
                Some(&(seq, _, _)) if rows.len() as u64 == limit => next = seq + 1,
                _ => break,
            }
        }
    }
    report.complete = true;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Deletes `relation_log` rows older than `age` on every shard, in batches of
/// `batch` rows (short transactions, so pruning never holds locks for long).
/// Answers how many rows it deleted.
///
/// Each user's newest row stays, however old: its `seq` is the number a cache fill
/// stamps the user's set with (see `Store::following_snapshot`), and a number that
/// went back once the row was gone would let a write-through older than it apply.
///
/// # Errors
///
/// The first [`StoreError`]; rows deleted before it stay deleted.
pub async fn prune_log(store: &Store, age: Duration, batch: u32) -> Result<u64, StoreError> {
    let inner = store.inner();
    let before = now_micros().saturating_sub(age.as_micros() as u64);
    let batch = batch.max(1) as usize;
    let mut deleted = 0;
    for shard in 0..inner.map().len() {
        let log = inner.table(shard, Table::RelationLog);
        let old =
            format!("SELECT seq, user_id FROM {log} WHERE ts < ? AND seq > ? ORDER BY seq LIMIT ?");
        let mut after = 0u64;
        loop {
            let rows: Vec<(u64, u64)> = inner
                .read(
                    inner.deadline(),
                    shard,
                    "read relation_log",
                    old.clone(),
                    (before, after, batch as u64),
                )
                .await?;
            let Some(&(last, _)) = rows.last() else {
                break;
            };
            after = last;
            let users: BTreeSet<u64> = rows.iter().map(|&(_, u)| u).collect();
            let (marks, values) = in_list(users.iter().map(|&u| Value::from(u)));
            let newest = format!(
                "SELECT user_id, MAX(seq) FROM {log} WHERE user_id IN ({marks}) GROUP BY user_id"
            );
            let newest: HashMap<u64, u64> = inner
                .read::<(u64, u64)>(
                    inner.deadline(),
                    shard,
                    "read relation_log",
                    newest,
                    Params::Positional(values),
                )
                .await?
                .into_iter()
                .collect();
            let doomed: Vec<Value> = rows
                .iter()
                .filter(|&&(seq, user)| newest.get(&user).is_some_and(|&max| seq < max))
                .map(|&(seq, _)| Value::from(seq))
                .collect();
            if !doomed.is_empty() {
                let (marks, values) = in_list(doomed);
                let sql = format!("DELETE FROM {log} WHERE seq IN ({marks})");
                deleted += inner
                    .write(
                        inner.deadline(),
                        shard,
                        "prune relation_log",
                        sql,
                        Params::Positional(values),
                    )
                    .await?;
            }
            if rows.len() < batch {
                break;
            }
        }
    }
    Ok(deleted)
}

/// One batch of primary keys of `table` on `shard`, after `after`.
async fn scan_keys(
    store: &Store,
    shard: u32,
    table: Table,
    after: Option<(u64, u64)>,
    limit: u64,
) -> Result<Vec<(u64, u64)>, StoreError> {
    let inner = store.inner();
    let t = inner.table(shard, table);
    match after {
        None => {
            let sql =
                format!("SELECT user_id, friend_id FROM {t} ORDER BY user_id, friend_id LIMIT ?");
            inner
                .read(inner.deadline(), shard, "scan", sql, (limit,))
                .await
        }
        Some((u, f)) => {
            let sql = format!(
                "SELECT user_id, friend_id FROM {t} \
                 WHERE user_id > ? OR (user_id = ? AND friend_id > ?) \
                 ORDER BY user_id, friend_id LIMIT ?"
            );
            inner
                .read(inner.deadline(), shard, "scan", sql, (u, u, f, limit))
                .await
        }
    }
}

/// A primary key: `(user_id, friend_id)`.
type Key = (u64, u64);

/// A row's `(mutual, auto_ts)`.
type Payload = (bool, u64);

/// Rows of `following` or `followers` by key.
type Rows = HashMap<Key, Payload>;

/// Checks each pair (in either order; duplicates are checked once) with plain reads
/// and reconciles the ones that disagree.
async fn check_and_fix(
    store: &Store,
    pairs: impl Iterator<Item = (u64, u64)>,
    report: &mut Report,
) -> Result<(), StoreError> {
    let pairs: HashSet<(u64, u64)> = pairs
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.min(b), a.max(b)))
        .collect();
    if pairs.is_empty() {
        return Ok(());
    }
    // Every key of both directions, in both tables.
    let keys: Vec<(u64, u64)> = pairs.iter().flat_map(|&(x, y)| [(x, y), (y, x)]).collect();
    let (following, followers) = tokio::try_join!(
        lookup(store, Table::Following, &keys),
        lookup(store, Table::Followers, &keys)
    )?;
    let mut pairs: Vec<(u64, u64)> = pairs.into_iter().collect();
    pairs.sort_unstable();
    report.pairs_checked += pairs.len() as u64;
    for (x, y) in pairs {
        if !consistent(&following, &followers, x, y) {
            report.pairs_reconciled += 1;
            report.fixes += store.reconcile(x, y).await?;
        }
    }
    Ok(())
}

/// Whether the four rows of the pair `{x, y}` agree with each other.
fn consistent(following: &Rows, followers: &Rows, x: u64, y: u64) -> bool {
    let xy = following.get(&(x, y));
    let yx = following.get(&(y, x));
    let mutual = xy.is_some() && yx.is_some();
    // The twin of following(u, v) is followers(v, u).
    let edge_ok = |truth: Option<&Payload>, twin: Option<&Payload>| match (truth, twin) {
        (None, None) => true,
        (Some(&(tm, tts)), Some(&(wm, wts))) => tts == wts && tm == mutual && wm == mutual,
        _ => false,
    };
    edge_ok(xy, followers.get(&(y, x))) && edge_ok(yx, followers.get(&(x, y)))
}

/// Reads the rows of `table` with the given primary keys: one statement per shard
/// (split past 512 keys), shards concurrently.
async fn lookup(store: &Store, table: Table, keys: &[(u64, u64)]) -> Result<Rows, StoreError> {
    const MAX_KEYS: usize = 512;
    let inner = store.inner();
    let d = inner.deadline();
    let mut by_shard: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for &(u, f) in keys {
        by_shard
            .entry(inner.map().shard_of(u))
            .or_default()
            .push((u, f));
    }
    let queries = by_shard.iter().flat_map(|(&shard, keys)| {
        keys.chunks(MAX_KEYS).map(move |chunk| {
            // A row-constructor IN list, padded like the reads' id lists so the
            // number of distinct statements stays small; InnoDB answers it with
            // primary-key lookups.
            let padded = chunk.len().next_power_of_two();
            let last = chunk[chunk.len() - 1];
            let mut params = Vec::with_capacity(padded * 2);
            for &(u, f) in chunk
                .iter()
                .chain(std::iter::repeat_n(&last, padded - chunk.len()))
            {
                params.push(Value::from(u));
                params.push(Value::from(f));
            }
            let sql = format!(
                "SELECT user_id, friend_id, mutual, auto_ts FROM {} \
                 WHERE (user_id, friend_id) IN ({})",
                inner.table(shard, table),
                vec!["(?,?)"; padded].join(",")
            );
            inner.read::<(u64, u64, bool, u64)>(
                d,
                shard,
                "check pairs",
                sql,
                Params::Positional(params),
            )
        })
    });
    let mut rows = Rows::new();
    for batch in inner.concurrently(queries).await? {
        rows.extend(batch.into_iter().map(|(u, f, m, ts)| ((u, f), (m, ts))));
    }
    Ok(rows)
}

async fn load_checkpoint(store: &Store, shard: u32) -> Result<Checkpoint, StoreError> {
    let inner = store.inner();
    let sql = format!(
        "SELECT phase, after_user, after_friend FROM {} WHERE job = ?",
        inner.table(shard, Table::RepairState)
    );
    let rows: Vec<(u8, Option<u64>, Option<u64>)> = inner
        .read(
            inner.deadline(),
            shard,
            "read repair_state",
            sql,
            (FULL_SCAN_JOB,),
        )
        .await?;
    Ok(match rows.first() {
        None => Checkpoint::START,
        Some(&(phase, u, f)) => Checkpoint {
            phase: match phase {
                0 => Phase::Following,
                1 => Phase::Followers,
                _ => Phase::Done,
            },
            after: u.zip(f),
        },
    })
}

async fn save_checkpoint(store: &Store, shard: u32, cp: Checkpoint) -> Result<(), StoreError> {
    let inner = store.inner();
    let sql = format!(
        "INSERT INTO {} (job, phase, after_user, after_friend, updated_at) \
         VALUES (?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE phase = ?, after_user = ?, after_friend = ?, updated_at = ?",
        inner.table(shard, Table::RepairState)
    );
    let (phase, u, f, now) = (
        cp.phase as u8,
        cp.after.map(|k| k.0),
        cp.after.map(|k| k.1),
        now_micros(),
    );
    let params: Vec<Value> = vec![
        FULL_SCAN_JOB.into(),
        phase.into(),
        u.into(),
        f.into(),
        now.into(),
        phase.into(),
        u.into(),
        f.into(),
        now.into(),
    ];
    inner
        .write(
            inner.deadline(),
            shard,
            "write repair_state",
            sql,
            Params::Positional(params),
        )
        .await?;
    Ok(())
}

async fn clear_checkpoint(store: &Store, shard: u32) -> Result<(), StoreError> {
    let inner = store.inner();
    let sql = format!(
        "DELETE FROM {} WHERE job = ?",
        inner.table(shard, Table::RepairState)
    );
    inner
        .write(
            inner.deadline(),
            shard,
            "clear repair_state",
            sql,
            (FULL_SCAN_JOB,),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(entries: &[(Key, Payload)]) -> Rows {
        entries.iter().copied().collect()
    }

    #[test]
    fn consistency_rules() {
        let none = Rows::new();
        // Nothing at all: consistent.
        assert!(consistent(&none, &none, 1, 2));
        // One-way follow with its twin.
        let f = rows(&[((1, 2), (false, 10))]);
        let r = rows(&[((2, 1), (false, 10))]);
        assert!(consistent(&f, &r, 1, 2));
        // (a) twin missing, (b) orphan twin.
        assert!(!consistent(&f, &none, 1, 2));
        assert!(!consistent(&none, &r, 1, 2));
        // Twin with another auto_ts.
        assert!(!consistent(&f, &rows(&[((2, 1), (false, 11))]), 1, 2));
        // (c) flag set on a one-way follow.
        assert!(!consistent(&rows(&[((1, 2), (true, 10))]), &r, 1, 2));
        // Mutual pair: all four rows flagged, or it is wrong.
        let f = rows(&[((1, 2), (true, 10)), ((2, 1), (true, 20))]);
        let r = rows(&[((2, 1), (true, 10)), ((1, 2), (true, 20))]);
        assert!(consistent(&f, &r, 1, 2));
        let r_bad = rows(&[((2, 1), (true, 10)), ((1, 2), (false, 20))]);
        assert!(!consistent(&f, &r_bad, 1, 2));
    }

    #[test]
    fn a_pass_is_finished_only_by_what_a_finished_pass_leaves() {
        const DONE: Checkpoint = Checkpoint {
            phase: Phase::Done,
            after: None,
        };
        let busy = Checkpoint {
            phase: Phase::Followers,
            after: Some((7, 9)),
        };
        let start = Checkpoint::START;
        // In progress: finished shards, then the current one, then untouched ones.
        assert!(!pass_finished(&[start, start, start]));
        assert!(!pass_finished(&[DONE, busy, start]));
        assert!(!pass_finished(&[DONE, DONE, start]));
        // Finished, with its checkpoints all there or partly cleared.
        assert!(pass_finished(&[DONE, DONE, DONE]));
        assert!(pass_finished(&[start, DONE, DONE]));
        assert!(pass_finished(&[start, start, DONE]));
    }

    #[tokio::test(start_paused = true)]
    async fn pacer_spreads_rows_over_time() {
        let mut pacer = Pacer::new(Some(100));
        assert_eq!(pacer.batch(500), 100);
        let start = Instant::now();
        for _ in 0..5 {
            pacer.spend(100).await;
        }
        assert!(start.elapsed() >= Duration::from_secs(5));
        let mut unlimited = Pacer::new(None);
        assert_eq!(unlimited.batch(500), 500);
        let start = Instant::now();
        unlimited.spend(1_000_000).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
