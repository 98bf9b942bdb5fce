//! Writes: follow, unfollow, and reconcile (the repair job's fix for one pair).
//!
//! A follow `a → b` writes three rows, on up to two shards:
//!
//! | row               | shard | meaning                          |
//! |-------------------|-------|----------------------------------|
//! | `following(a, b)` | a's   | the truth: a follows b           |
//! | `relation_log`    | a's   | a followed b at `ts`             |
//! | `followers(b, a)` | b's   | the twin: b is followed by a     |
//!
//! When b follows a as well, the pair's four `following` / `followers` rows all carry
//! `mutual = 1`, so "do they follow each other" is one row's flag on either side.
//!
//! # Lock order
//!
//! Concurrent `follow(a, b)` and `follow(b, a)` must not both conclude "the other
//! does not follow me" and leave `mutual = 0`. Each reads the other's truth row with
//! `SELECT … FOR UPDATE` — a locking read, which sees the latest committed row, not
//! the transaction's snapshot — and writes its own. Under REPEATABLE READ a locking
//! read of an absent key also locks the gap where it would go, so "insert X" and
//! "locking read of X" conflict whichever comes first.
//!
//! Both writes touch the same two keys, `following(a, b)` on a's shard and
//! `following(b, a)` on b's. Each executes its statement on the *lower* key first,
//! ordering keys by `(shard, user_id)`:
//!
//! * if `(shard(a), a) < (shard(b), b)`, `follow(a, b)` starts by inserting
//!   `following(a, b)` and `follow(b, a)` starts by `SELECT following(a, b) FOR UPDATE`;
//! * otherwise `follow(a, b)` starts by `SELECT following(b, a) FOR UPDATE` and
//!   `follow(b, a)` by inserting `following(b, a)`.
//!
//! So the two conflict on their very first statement, at the same row of the same
//! shard. The loser waits there, holding nothing, until the winner commits that shard;
//! by then the winner holds its locks on the other shard too, so the loser's locking
//! read of the winner's row there waits for the winner's commit and then sees the row,
//! and the loser sets the flags. Two transactions that meet first on the same lock
//! cannot deadlock with each other; deadlocks with *unrelated* writes (gap locks of
//! neighbouring keys) remain possible, and MySQL resolves them by aborting one, which
//! is then re-run ([`Store::retries`] counts these). With one shard both keys live
//! in one transaction and the same rule orders them by user id. Unfollow and
//! reconcile follow the same order, so every write on a pair serialises on the
//! pair's lower key.
//!
//! How the transactions are committed, and what a failed second commit leaves, is
//! in [`transaction`](super::transaction).

use super::{now_micros, Deadline, Inner, Session, Store, StoreError, Table, Txn, Txns};
use crate::shards::ShardMap;

/// What [`Store::follow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowOutcome {
    /// False if `a` already followed `b`: nothing changed, `auto_ts` kept.
    pub created: bool,
    /// The change's sequence number (its `relation_log.seq`) when it created the
    /// follow: what a cache update of `a`'s set carries, so that updates are
    /// applied in commit order (see [`Store::following_snapshot`]).
    pub seq: Option<u64>,
    /// Whether `b` follows `a` too (the flags now say so on all four rows).
    pub mutual: bool,
    /// The truth committed but the twin on `b`'s shard did not: the repair job will
    /// add it. Readers of `b`'s followers miss `a` until then.
    pub twin_pending: bool,
}

/// What [`Store::unfollow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnfollowOutcome {
    /// False if `a` did not follow `b`.
    pub removed: bool,
    /// The change's sequence number when it removed the follow, as
    /// [`FollowOutcome::seq`].
    pub seq: Option<u64>,
    /// Whether `b` follows `a` (whose rows' mutual flags were cleared).
    pub followed_back: bool,
    /// The truth committed but the twin on `b`'s shard did not: the repair job will
    /// remove it.
    pub twin_pending: bool,
}

/// Rows [`Store::reconcile`] (and so the repair job) changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fixes {
    /// `followers` rows added for a `following` row that had none.
    pub twins_inserted: u64,
    /// `followers` rows removed because their `following` row does not exist.
    pub twins_deleted: u64,
    /// `followers` rows whose `auto_ts` differed from their `following` row's.
    pub twins_updated: u64,
    /// Rows whose `mutual` flag disagreed with the truth.
    pub mutual_fixed: u64,
}

impl Fixes {
    /// Total rows changed.
    pub fn total(&self) -> u64 {
        self.twins_inserted + self.twins_deleted + self.twins_updated + self.mutual_fixed
    }
}

impl std::ops::AddAssign for Fixes {
    fn add_assign(&mut self, o: Fixes) {
        self.twins_inserted += o.twins_inserted;
        self.twins_deleted += o.twins_deleted;
        self.twins_updated += o.twins_updated;
        self.mutual_fixed += o.mutual_fixed;
    }
}

/// A `following` or `followers` row's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Edge {
    mutual: bool,
    auto_ts: u64,
}

impl Store {
    /// `a` follows `b`. Idempotent: following again changes nothing and keeps the
    /// original follow time. The protocol is written down with its code, in
    /// `store/write.rs` (the lock order that keeps a concurrent follow-back from
    /// losing the mutual flag) and `store/transaction.rs` (what a failed second
    /// commit means).
    ///
    /// # Errors
    ///
    /// [`StoreError::SelfFollow`] if `a == b`; otherwise a [`StoreError`] means the
    /// follow did not happen — unless [`StoreError::is_outcome_unknown`], when the
    /// commit was sent and no answer came. Retrying is safe either way. A failed
    /// second commit is not an error: see [`FollowOutcome::twin_pending`].
    pub async fn follow(&self, a: u64, b: u64) -> Result<FollowOutcome, StoreError> {
        let now = now_micros();
        let (done, twin_pending) = self.write_pair(a, b, Op::Follow { a, b, now }).await?;
        let Done::Follow { seq, mutual } = done else {
            unreachable!("a follow answers Done::Follow")
        };
        Ok(FollowOutcome {
            created: seq.is_some(),
            seq,
            mutual,
            twin_pending,
        })
    }

    /// `a` stops following `b`: deletes `following(a, b)` and its twin, clears the
    /// mutual flags on `b`'s rows if `b` follows `a`, and logs it. Unfollowing a user
    /// one does not follow changes nothing (except that a stray twin is removed).
    ///
    /// # Errors
    ///
    /// As [`follow`](Self::follow).
    pub async fn unfollow(&self, a: u64, b: u64) -> Result<UnfollowOutcome, StoreError> {
        let now = now_micros();
        let (done, twin_pending) = self.write_pair(a, b, Op::Unfollow { a, b, now }).await?;
        let Done::Unfollow { seq, followed_back } = done else {
            unreachable!("an unfollow answers Done::Unfollow")
        };
        Ok(UnfollowOutcome {
            removed: seq.is_some(),
            seq,
            followed_back,
            twin_pending,
        })
    }

    /// Runs a follow or unfollow of `b` by `a` on their two shards. Answers what it
    /// did, and whether the twin's commit failed after the truth's succeeded (logged
    /// here: the repair job will finish the write).
    async fn write_pair(&self, a: u64, b: u64, op: Op) -> Result<(Done, bool), StoreError> {
        if a == b {
            return Err(StoreError::SelfFollow(a));
        }
        let map = self.inner().map();
        let (done, second) = self
            .inner()
            .transact(map.shard_of(a), map.shard_of(b), op)
            .await?;
        if let Some(e) = &second {
            tracing::warn!(
                follower = a,
                followed = b,
                error = %e,
                op = ?op,
                "the truth committed but its followers twin did not; the repair job will fix the twin"
            );
        }
        Ok((done, second.is_some()))
    }

    /// Makes the rows of the pair `{a, b}` agree with the truth (`following`): each
    /// `following` row has a `followers` twin with the same `auto_ts`, no twin exists
    /// without its truth, and every flag says mutual exactly when both follow. Runs
    /// under the same locks and order as [`follow`](Self::follow), so it is safe
    /// against concurrent writes to the pair. Answers what it changed.
    ///
    /// # Errors
    ///
    /// Any [`StoreError`], including a failed second commit (the first shard's fixes
    /// stand; running it again finishes the job).
    pub async fn reconcile(&self, a: u64, b: u64) -> Result<Fixes, StoreError> {
        if a == b {
            return Err(StoreError::SelfFollow(a));
        }
        let map = self.inner().map();
        // x is the pair's lower key in the write lock order, y the other.
        let (x, y) = if lower_first(map, a, b) {
            (a, b)
        } else {
            (b, a)
        };
        let (done, second) = self
            .inner()
            .transact(map.shard_of(x), map.shard_of(y), Op::Reconcile { x, y })
            .await?;
        let Done::Reconcile(fixes) = done else {
            unreachable!("a reconcile answers Done::Reconcile")
        };
        match second {
            Some(e) => Err(e),
            None => Ok(fixes),
        }
    }
}

/// Whether `a`'s side of the pair comes first in the write lock order (see the
/// module docs): by logical shard, then by user id.
fn lower_first(map: &ShardMap, a: u64, b: u64) -> bool {
    (map.shard_of(a), a) < (map.shard_of(b), b)
}

/// A write, as [`Inner::transact`] runs it: `txns.a()` is the first user's shard.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Follow { a: u64, b: u64, now: u64 },
    Unfollow { a: u64, b: u64, now: u64 },
    Reconcile { x: u64, y: u64 },
}

/// What an [`Op`] did.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Done {
    /// `seq`: the log row's, if the follow was created.
    Follow {
        seq: Option<u64>,
        mutual: bool,
    },
    /// `seq`: the log row's, if a follow was removed.
    Unfollow {
        seq: Option<u64>,
        followed_back: bool,
    },
    Reconcile(Fixes),
}

impl Inner {
    /// The statements of `op`, in the open transactions.
    pub(super) async fn apply(
        &self,
        op: Op,
        txns: &mut Txns<'_>,
        d: Deadline,
    ) -> Result<Done, StoreError> {
        match op {
            Op::Follow { a, b, now } => self.follow_steps(txns, d, a, b, now).await,
            Op::Unfollow { a, b, now } => self.unfollow_steps(txns, d, a, b, now).await,
            Op::Reconcile { x, y } => self.reconcile_steps(txns, d, x, y).await,
        }
    }

    async fn follow_steps(
        &self,
        txns: &mut Txns<'_>,
        d: Deadline,
        a: u64,
        b: u64,
        now: u64,
    ) -> Result<Done, StoreError> {
        // The first statement goes to the pair's lower key (module docs).
        let early = self.follows_back_if_first(txns, d, a, b).await?;
        let guess = early.unwrap_or(false);
        let created = self.insert_truth(d, txns.a(), a, b, guess, now).await?;
        let own = if created {
            Edge {
                mutual: guess,
                auto_ts: now,
            }
        } else {
            self.must_lock_edge(d, txns.a(), a, b).await?
        };
        let mutual = self.follows_back(txns, d, a, b, early).await?;
        if own.mutual != mutual {
            self.set_mutual(d, txns.a(), Table::Following, a, b, mutual)
                .await?;
        }
        self.upsert_twin(d, txns.b(), b, a, mutual, own.auto_ts)
            .await?;
        if mutual {
            self.set_back_edge_mutual(txns, d, a, b, true).await?;
        }
        // Last, under the pair's locks: so the log's sequence orders the changes to
        // one pair as they commit (see `Store::following_snapshot`).
        let seq = match created {
            true => Some(self.log(d, txns.a(), a, b, LogOp::Follow, now).await?),
            false => None,
        };
        Ok(Done::Follow { seq, mutual })
    }

    async fn unfollow_steps(
        &self,
        txns: &mut Txns<'_>,
        d: Deadline,
        a: u64,
        b: u64,
        now: u64,
    ) -> Result<Done, StoreError> {
        let early = self.follows_back_if_first(txns, d, a, b).await?;
        let removed = self.delete(d, txns.a(), Table::Following, a, b).await? > 0;
        let followed_back = self.follows_back(txns, d, a, b, early).await?;
        self.delete(d, txns.b(), Table::Followers, b, a).await?;
        if followed_back {
            self.set_back_edge_mutual(txns, d, a, b, false).await?;
        }
        let seq = match removed {
            true => Some(self.log(d, txns.a(), a, b, LogOp::Unfollow, now).await?),
            false => None,
        };
        Ok(Done::Unfollow { seq, followed_back })
    }

    /// `x` is the pair's lower key: its row is locked first, as by follow.
    async fn reconcile_steps(
        &self,
        txns: &mut Txns<'_>,
        d: Deadline,
        x: u64,
        y: u64,
    ) -> Result<Done, StoreError> {
        let xy = self.lock_edge(d, txns.a(), Table::Following, x, y).await?;
        let yx = self.lock_edge(d, txns.b(), Table::Following, y, x).await?;
        let mutual = xy.is_some() && yx.is_some();
        let mut fixes = Fixes::default();
        // x → y: truth on x's shard (a()), twin on y's (b()); then the reverse.
        fixes += self.fix_edge(d, txns, true, x, y, xy, mutual).await?;
        fixes += self.fix_edge(d, txns, false, y, x, yx, mutual).await?;
        Ok(Done::Reconcile(fixes))
    }
}

/// `relation_log.op`.
#[derive(Debug, Clone, Copy)]
enum LogOp {
    Follow,
    Unfollow,
}

impl LogOp {
    fn code(self) -> &'static str {
        match self {
            LogOp::Follow => "F",
            LogOp::Unfollow => "U",
        }
    }
}

impl Inner {
    /// Sets the mutual flag on the two rows of `b`'s follow of `a` (`b`'s
    /// `following` row and `a`'s `followers` row), which `a` following or
    /// unfollowing `b` turns on or off.
    async fn set_back_edge_mutual(
        &self,
        txns: &mut Txns<'_>,
        d: Deadline,
        a: u64,
        b: u64,
        mutual: bool,
    ) -> Result<(), StoreError> {
        self.set_mutual(d, txns.b(), Table::Following, b, a, mutual)
            .await?;
        self.set_mutual(d, txns.a(), Table::Followers, a, b, mutual)
            .await?;
        Ok(())
    }

    /// Whether `b` follows `a`, read (and `b`'s row locked) now if `b`'s side is
    /// the pair's lower key, which must be locked first; `None` when the lock
    /// order puts it after `a`'s row (then [`follows_back`](Self::follows_back)).
    async fn follows_back_if_first(
        &self,
        txns: &mut Txns<'_>,
        d: Deadline,
        a: u64,
        b: u64,
    ) -> Result<Option<bool>, StoreError> {
        if lower_first(self.map(), a, b) {
            return Ok(None);
        }
        let row = self.lock_edge(d, txns.b(), Table::Following, b, a).await?;
        Ok(Some(row.is_some()))
    }

    /// Whether `b` follows `a`: what [`follows_back_if_first`](Self::follows_back_if_first)
    /// read, or read (and locked) now, after `a`'s row.
    async fn follows_back(
        &self,
        txns: &mut Txns<'_>,
        d: Deadline,
        a: u64,
        b: u64,
        early: Option<bool>,
    ) -> Result<bool, StoreError> {
        match early {
            Some(back) => Ok(back),
            None => Ok(self
                .lock_edge(d, txns.b(), Table::Following, b, a)
                .await?
                .is_some()),
        }
    }

    /// `SELECT … FOR UPDATE` of one row of `following` or `followers`.
    async fn lock_edge(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        table: Table,
        user: u64,
        friend: u64,
    ) -> Result<Option<Edge>, StoreError> {
        let sql = format!(
            "SELECT mutual, auto_ts FROM {} WHERE user_id = ? AND friend_id = ? FOR UPDATE",
            self.table(t.shard, table)
        );
        let row: Option<(bool, u64)> = self
            .exec_first(d, t.shard, &mut t.tx, "lock row", sql, (user, friend))
            .await?;
        Ok(row.map(|(mutual, auto_ts)| Edge { mutual, auto_ts }))
    }

    /// [`lock_edge`](Self::lock_edge) of a `following` row this transaction just
    /// found by a duplicate key, so it holds its lock and the row must be there.
    async fn must_lock_edge(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        user: u64,
        friend: u64,
    ) -> Result<Edge, StoreError> {
        self.lock_edge(d, t, Table::Following, user, friend)
            .await?
            .ok_or_else(|| StoreError::Decode {
                shard: t.shard,
                host: self.map().host(t.shard).label().to_string(),
                action: "lock row",
                detail: format!("following({user}, {friend}) was a duplicate key but is gone"),
            })
    }

    /// Inserts `following(user, friend)` unless present (then leaves it untouched:
    /// the original `auto_ts` stays). Answers whether it inserted.
    async fn insert_truth(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        user: u64,
        friend: u64,
        mutual: bool,
        auto_ts: u64,
    ) -> Result<bool, StoreError> {
        // A no-op ON DUPLICATE KEY UPDATE rather than INSERT IGNORE, which would also
        // turn other errors into warnings. Affected rows: 1 inserted, 0 present.
        let sql = format!(
            "INSERT INTO {} (user_id, friend_id, mutual, auto_ts) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE user_id = user_id",
            self.table(t.shard, Table::Following)
        );
        let n = self
            .exec_drop(
                d,
                t.shard,
                &mut t.tx,
                "insert following",
                sql,
                (user, friend, mutual, auto_ts),
            )
            .await?;
        Ok(n == 1)
    }

    /// Inserts or overwrites `followers(user, friend)`. Answers affected rows
    /// (1 inserted, 2 changed, 0 already equal).
    async fn upsert_twin(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        user: u64,
        friend: u64,
        mutual: bool,
        auto_ts: u64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "INSERT INTO {} (user_id, friend_id, mutual, auto_ts) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE mutual = ?, auto_ts = ?",
            self.table(t.shard, Table::Followers)
        );
        let params = (user, friend, mutual, auto_ts, mutual, auto_ts);
        self.exec_drop(d, t.shard, &mut t.tx, "upsert followers", sql, params)
            .await
    }

    /// Sets one row's mutual flag; answers 1 if it changed.
    async fn set_mutual(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        table: Table,
        user: u64,
        friend: u64,
        mutual: bool,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "UPDATE {} SET mutual = ? WHERE user_id = ? AND friend_id = ? AND mutual <> ?",
            self.table(t.shard, table)
        );
        self.exec_drop(
            d,
            t.shard,
            &mut t.tx,
            "update mutual",
            sql,
            (mutual, user, friend, mutual),
        )
        .await
    }

    async fn delete(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        table: Table,
        user: u64,
        friend: u64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE user_id = ? AND friend_id = ?",
            self.table(t.shard, table)
        );
        self.exec_drop(d, t.shard, &mut t.tx, "delete", sql, (user, friend))
            .await
    }

    async fn log(
        &self,
        d: Deadline,
        t: &mut Txn<'_>,
        user: u64,
        friend: u64,
        op: LogOp,
        ts: u64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "INSERT INTO {} (user_id, friend_id, op, ts) VALUES (?, ?, ?, ?)",
            self.table(t.shard, Table::RelationLog)
        );
        self.exec_drop(
            d,
            t.shard,
            &mut t.tx,
            "insert relation_log",
            sql,
            (user, friend, op.code(), ts),
        )
        .await?;
        t.tx.inserted_id().ok_or_else(|| StoreError::Decode {
            shard: t.shard,
            host: self.map().host(t.shard).label().to_string(),
            action: "insert relation_log",
            detail: "no AUTO_INCREMENT value for the log row".into(),
        })
    }

    /// Makes the twin and the flag of the directed edge `u → v` agree with the truth
    /// `truth` (its `following` row, already locked) and the pair's `mutual`.
    /// `u_first` says whether `u`'s shard is `txns.a()` (else `txns.b()`).
    #[allow(clippy::too_many_arguments)]
    async fn fix_edge(
        &self,
        d: Deadline,
        txns: &mut Txns<'_>,
        u_first: bool,
        u: u64,
        v: u64,
        truth: Option<Edge>,
        mutual: bool,
    ) -> Result<Fixes, StoreError> {
        let mut fixes = Fixes::default();
        let Some(truth) = truth else {
            let twin_side = if u_first { txns.b() } else { txns.a() };
            fixes.twins_deleted += self.delete(d, twin_side, Table::Followers, v, u).await?;
            return Ok(fixes);
        };
        if truth.mutual != mutual {
            let truth_side = if u_first { txns.a() } else { txns.b() };
            fixes.mutual_fixed += self
                .set_mutual(d, truth_side, Table::Following, u, v, mutual)
                .await?;
        }
        let twin_side = if u_first { txns.b() } else { txns.a() };
        match self.lock_edge(d, twin_side, Table::Followers, v, u).await? {
            None => {
                self.upsert_twin(d, twin_side, v, u, mutual, truth.auto_ts)
                    .await?;
                fixes.twins_inserted += 1;
            }
            Some(twin) if twin.auto_ts != truth.auto_ts => {
                self.upsert_twin(d, twin_side, v, u, mutual, truth.auto_ts)
                    .await?;
                fixes.twins_updated += 1;
            }
            Some(twin) if twin.mutual != mutual => {
                fixes.mutual_fixed += self
                    .set_mutual(d, twin_side, Table::Followers, v, u, mutual)
                    .await?;
            }
            Some(_) => {}
        }
        Ok(fixes)
    }
}
