//! A write's transactions: one per shard it touches, checked out, begun,
//! committed in order, rolled back, and re-run when MySQL aborts them to break a
//! deadlock. What the statements inside are is [`write`](super::write)'s business.
//!
//! # Commit order and half-done follows
//!
//! The follower's shard (the truth) commits first. If anything fails before that
//! commit, both transactions roll back and the call fails: nothing was written. If the
//! truth commits and the twin's commit fails, the follow has happened — it cannot be
//! taken back — so the call succeeds with `twin_pending`, logs a warning, and the
//! `relation_log` row written with the truth is what the repair job's recent scan
//! finds to restore the twin.

use std::sync::atomic::Ordering;
use std::time::Duration;

use mysql_async::{Conn, TxOpts};
use tokio::time::Instant;

use super::session::Deadline;
use super::{error, now_micros, write, Inner, StoreError};

/// How many times a write is re-run after MySQL aborted it to break a deadlock or a
/// lock wait, before the error is returned.
const MAX_RETRIES: u32 = 4;

/// One shard's transaction within a write.
pub(crate) struct Txn<'c> {
    pub(crate) shard: u32,
    pub(super) tx: mysql_async::Transaction<'c>,
}

/// The transactions of one write: one when both users live on the same logical
/// shard, else the first-committed one (the follower's shard) and the second.
pub(crate) enum Txns<'c> {
    One(Txn<'c>),
    Two(Txn<'c>, Txn<'c>),
}

impl<'c> Txns<'c> {
    /// The transaction on the first user's shard.
    pub(crate) fn a(&mut self) -> &mut Txn<'c> {
        match self {
            Txns::One(t) | Txns::Two(t, _) => t,
        }
    }

    /// The transaction on the second user's shard (the same one if they share it).
    pub(crate) fn b(&mut self) -> &mut Txn<'c> {
        match self {
            Txns::One(t) | Txns::Two(_, t) => t,
        }
    }
}

/// Which commit of a write, for fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommitPoint {
    First,
    Second,
}

impl Inner {
    /// The budget of a write that checks out a connection to each of two shards
    /// before its first statement: `2 × connect_timeout + query_timeout`.
    fn pair_deadline(&self) -> Deadline {
        Deadline::new(2 * self.connect_timeout + self.query_timeout)
    }

    /// Runs `op` in one transaction per shard (`first`'s, then `second`'s; one if
    /// equal) and commits them in that order. `op` is re-run from a fresh
    /// transaction when MySQL aborts it to break a deadlock or a lock wait.
    ///
    /// Returns what `op` did and, if the first commit succeeded but the second did
    /// not, the second's error: the first is durable and cannot be taken back.
    ///
    /// (`op` is data rather than a closure: an async closure taking `&mut Txns<'_>`
    /// makes the caller's future fail `Send` checks for all lifetimes, and a `Store`
    /// call must be spawnable.)
    pub(crate) async fn transact(
        &self,
        first: u32,
        second: u32,
        op: write::Op,
    ) -> Result<(write::Done, Option<StoreError>), StoreError> {
        let d = if first == second {
            self.deadline()
        } else {
            self.pair_deadline()
        };
        let (mut c1, mut c2) = self.checkout_for(d, first, second).await?;
        let mut attempt = 0;
        let mut stale = 0;
        loop {
            let begun = match c2.as_mut() {
                None => self.begin(d, first, &mut c1).await.map(Txns::One),
                Some(c2) => {
                    tokio::try_join!(self.begin(d, first, &mut c1), self.begin(d, second, c2))
                        .map(|(a, b)| Txns::Two(a, b))
                }
            };
            // Nothing was written yet: a dead pooled connection (see `autocommit`) is
            // replaced and the write starts over.
            if matches!(&begun, Err(e) if e.is_connection_lost()) && stale < self.pool_size {
                drop(begun);
                stale += 1;
                drop((c1, c2));
                (c1, c2) = self.checkout_for(d, first, second).await?;
                continue;
            }
            let mut txns = begun?;
            match self.apply(op, &mut txns, d).await {
                Ok(value) => return Ok((value, self.commit(d, txns).await?)),
                Err(e) => {
                    self.rollback(d, txns).await;
                    if !e.is_retryable() || attempt == MAX_RETRIES {
                        return Err(e);
                    }
                    attempt += 1;
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(attempt, error = %e, "write aborted by MySQL; running it again");
                    // Back off a little, differently per call, so two writers that
                    // just deadlocked do not collide again in lockstep.
                    let jitter = crate::shards::splitmix64(now_micros()) % 4_000;
                    let pause = Duration::from_micros((1_000 << attempt) + jitter);
                    tokio::time::sleep_until((Instant::now() + pause).min(d.at)).await;
                }
            }
        }
    }

    /// One connection for a one-shard write, two for a two-shard one (in
    /// `(first, second)` order), all within the call's deadline.
    ///
    /// Writers that each hold one connection while waiting for a second could take
    /// whole pools between them and wait on each other until they time out. Two
    /// rules rule that out without making writers on unrelated hosts wait for each
    /// other:
    ///
    /// - Across hosts, connections are checked out in host order, lower index
    ///   first. A writer waiting on a host's pool then holds connections only of
    ///   lower hosts, so waits never form a cycle: the highest host in any chain of
    ///   waits is held only by callers that wait on no pool and finish.
    /// - Two shards on one host take both connections from one pool, under that
    ///   host's mutex: at most one writer per host holds one of its connections
    ///   while waiting for another, and everyone else holding them finishes.
    ///
    /// So a host that hangs holds up only the writes that touch it.
    async fn checkout_for(
        &self,
        d: Deadline,
        first: u32,
        second: u32,
    ) -> Result<(Conn, Option<Conn>), StoreError> {
        if first == second {
            return Ok((self.checkout(d, first).await?, None));
        }
        let (h1, h2) = (self.map.host_of(first), self.map.host_of(second));
        if h1 == h2 {
            let Ok(_turn) = tokio::time::timeout_at(d.at, self.host_turns[h1].lock()).await else {
                return Err(self.timeout(d, first, "connect"));
            };
            let c1 = self.checkout(d, first).await?;
            let c2 = self.checkout(d, second).await?;
            return Ok((c1, Some(c2)));
        }
        if h1 < h2 {
            let c1 = self.checkout(d, first).await?;
            let c2 = self.checkout(d, second).await?;
            Ok((c1, Some(c2)))
        } else {
            let c2 = self.checkout(d, second).await?;
            let c1 = self.checkout(d, first).await?;
            Ok((c1, Some(c2)))
        }
    }

    async fn begin<'c>(
        &self,
        d: Deadline,
        shard: u32,
        conn: &'c mut Conn,
    ) -> Result<Txn<'c>, StoreError> {
        let tx = self
            .run(
                d,
                shard,
                "start transaction",
                conn.start_transaction(TxOpts::default()),
            )
            .await?;
        Ok(Txn { shard, tx })
    }

    async fn commit(&self, d: Deadline, txns: Txns<'_>) -> Result<Option<StoreError>, StoreError> {
        match txns {
            Txns::One(t) => {
                self.commit_one(d, t, CommitPoint::First).await?;
                Ok(None)
            }
            Txns::Two(a, b) => {
                if let Err(e) = self.commit_one(d, a, CommitPoint::First).await {
                    self.rollback_one(d, b).await;
                    return Err(e);
                }
                Ok(self.commit_one(d, b, CommitPoint::Second).await.err())
            }
        }
    }

    async fn commit_one(
        &self,
        d: Deadline,
        t: Txn<'_>,
        point: CommitPoint,
    ) -> Result<(), StoreError> {
        #[cfg(feature = "fault-injection")]
        self.fire_fault(d, &t, point).await?;
        #[cfg(not(feature = "fault-injection"))]
        let _ = point;
        self.run(d, t.shard, error::COMMIT, t.tx.commit()).await
    }

    /// Best effort: a transaction that cannot be rolled back explicitly is rolled
    /// back by MySQL when its connection closes, which is what the driver does with a
    /// connection it gave up on.
    async fn rollback(&self, d: Deadline, txns: Txns<'_>) {
        match txns {
            Txns::One(t) => self.rollback_one(d, t).await,
            Txns::Two(a, b) => {
                tokio::join!(self.rollback_one(d, a), self.rollback_one(d, b));
            }
        }
    }

    async fn rollback_one(&self, d: Deadline, t: Txn<'_>) {
        let shard = t.shard;
        if let Err(e) = self.run(d, shard, "rollback", t.tx.rollback()).await {
            tracing::debug!(shard, error = %e, "rollback failed; the connection is discarded");
        }
    }
}
