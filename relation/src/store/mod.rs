//! The relation tables in sharded MySQL: follow, unfollow, and the reads that fill
//! the cache.
//!
//! [`Store`] owns one `mysql_async` pool per *host* (not per logical shard: a host
//! carries many shards, and one pool per shard would multiply idle connections by the
//! shard count). Statements name their tables fully qualified (`` `relcache_s3`.`following` ``)
//! so any connection to the host serves any of its shards without a `USE` round trip.
//!
//! What it is not: a cache, or aware of one. The relation service puts the cache in
//! front of it; [`Store::queries`] counts the statements it sends so tests and
//! benchmarks can check how many reads reached MySQL.
//!
//! # Time bounds
//!
//! Every call has one budget, counted from its start, for everything it waits on:
//! connection checkouts (each also capped at `connect_timeout`), locks, statements,
//! deadlock retries, and for a batch read every shard's statement. A call finishes
//! or fails with [`StoreError::Timeout`] within `connect_timeout + query_timeout`;
//! a two-shard write, which checks out both connections before its first
//! statement, within `2 × connect_timeout + query_timeout`. A statement abandoned
//! by a timeout leaves its connection mid-reply; `mysql_async` then discards that
//! connection instead of returning it to the pool, and MySQL rolls back its
//! transaction when the socket closes. Server-side lock waits are capped near
//! `query_timeout` too (`innodb_lock_wait_timeout` per session), so a statement whose
//! caller has given up does not hold its place in a lock queue for InnoDB's default
//! 50 s.
//!
//! # Writes
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
//! ## Lock order
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
//! ## Commit order and half-done follows
//!
//! The follower's shard (the truth) commits first. If anything fails before that
//! commit, both transactions roll back and the call fails: nothing was written. If the
//! truth commits and the twin's commit fails, the follow has happened — it cannot be
//! taken back — so the call succeeds with `twin_pending`, logs a warning, and the
//! `relation_log` row written with the truth is what the repair job's recent scan
//! finds to restore the twin.

mod error;
mod read;
mod write;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, OptsBuilder, Params, Pool, PoolConstraints, PoolOpts, Row, TxOpts};
use tokio::time::Instant;

use super::shards::ShardMap;
pub use error::{StoreError, ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT};
pub(crate) use read::in_list;
pub use read::{Cursor, CursorError, Entry, FollowingSnapshot, Page, Relation, MAX_PAGE};
pub use write::{Fixes, FollowOutcome, UnfollowOutcome};

/// How many times a write is re-run after MySQL aborted it to break a deadlock or a
/// lock wait, before the error is returned.
const MAX_RETRIES: u32 = 4;

/// Prepared statements each connection keeps per logical shard on its host: every
/// statement names its shard's database, so the driver's statement cache must grow
/// with the shards per host or it would re-prepare on nearly every call.
const STATEMENTS_PER_SHARD: usize = 24;

/// The most prepared statements one connection keeps. MySQL caps prepared statements
/// server-wide (`max_prepared_stmt_count`, 16382 by default), and a host's pool has
/// `pool_size` connections.
const MAX_STATEMENT_CACHE: usize = 512;

/// Configuration of a [`Store`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Where each logical shard lives.
    pub shards: ShardMap,
    /// Longest wait to check a connection out of a pool, including opening a new one.
    pub connect_timeout: Duration,
    /// Longest time all statements of one call may take together.
    pub query_timeout: Duration,
    /// Most connections open to each host (at least 2: a write whose two users'
    /// shards share a host holds two at once).
    pub pool_size: usize,
}

impl StoreConfig {
    /// Defaults suited to a service answering user requests: 1 s to connect, 2 s of
    /// statements per call, 16 connections per host.
    pub fn new(shards: ShardMap) -> StoreConfig {
        StoreConfig {
            shards,
            connect_timeout: Duration::from_secs(1),
            query_timeout: Duration::from_secs(2),
            pool_size: 16,
        }
    }
}

/// The four tables on every logical shard (see [`schema`](super::schema)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    Following = 0,
    Followers = 1,
    RelationLog = 2,
    RepairState = 3,
}

impl Table {
    pub(crate) const ALL: [Table; 4] = [
        Table::Following,
        Table::Followers,
        Table::RelationLog,
        Table::RepairState,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Table::Following => "following",
            Table::Followers => "followers",
            Table::RelationLog => "relation_log",
            Table::RepairState => "repair_state",
        }
    }
}

/// Follow relations in sharded MySQL. Cheap to clone (the pools are shared).
///
/// ```no_run
/// use relcache_relation::{schema, ShardMap, Store, StoreConfig};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shards = ShardMap::single_host("mysql://root@127.0.0.1:3306", "relcache_s", 8)?;
/// let store = Store::new(StoreConfig::new(shards));
/// schema::create_all(&store).await?;
/// store.follow(1, 2).await?;
/// assert!(store.is_following(1, 2).await?);
/// assert_eq!(store.following_ids(1).await?, vec![2]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    map: ShardMap,
    /// One pool per host, indexed like `map.hosts()`.
    pools: Vec<Pool>,
    /// Per logical shard, the quoted, database-qualified name of each [`Table`].
    tables: Vec<[String; 4]>,
    connect_timeout: Duration,
    query_timeout: Duration,
    pool_size: usize,
    /// Per host, taken to check out the two connections of a write whose shards
    /// both live there: see [`Inner::checkout_for`].
    host_turns: Vec<tokio::sync::Mutex<()>>,
    queries: AtomicU64,
    retries: AtomicU64,
    #[cfg(feature = "fault-injection")]
    fault: std::sync::Mutex<Option<Fault>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.inner.map.len())
            .field("hosts", &self.inner.map.hosts())
            .field("queries", &self.queries())
            .finish()
    }
}

impl Store {
    /// Creates the pools. No connection is opened until the first call, so this
    /// cannot fail: a host that is down shows up as errors from calls.
    pub fn new(config: StoreConfig) -> Store {
        let StoreConfig {
            shards: map,
            connect_timeout,
            query_timeout,
            pool_size,
        } = config;
        // A two-shard write on one host holds two of its connections.
        let pool_size = pool_size.max(2);
        // Lock waits past our own deadline only hold a queue slot for a caller that
        // has gone; whole seconds is MySQL's granularity.
        let lock_wait = query_timeout.as_secs_f64().ceil().max(1.0) as u64;
        let pools = map
            .hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let opts =
                    mysql_async::Opts::from_url(host.url()).expect("ShardMap validated the URL");
                let cache =
                    (map.shards_on(i) * STATEMENTS_PER_SHARD).clamp(32, MAX_STATEMENT_CACHE);
                let builder = OptsBuilder::from_opts(opts)
                    .stmt_cache_size(cache)
                    // Writes read "inserted or not" from the affected-row count
                    // (`insert_truth`): with CLIENT_FOUND_ROWS a row that was
                    // already there would count as inserted, whatever the URL says.
                    .client_found_rows(false)
                    // Every write depends on REPEATABLE READ (see `follow`), whatever
                    // the server's default.
                    .init(vec![
                        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ".to_string(),
                        format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}"),
                    ])
                    .pool_opts(
                        PoolOpts::new()
                            .with_constraints(
                                PoolConstraints::new(1, pool_size).expect("1 <= pool_size"),
                            )
                            // COM_RESET_CONNECTION on every return would drop the
                            // prepared statements; the session state this store sets
                            // is the same for every use, and the driver itself rolls
                            // back a transaction left open.
                            .with_reset_connection(false),
                    );
                Pool::new(builder)
            })
            .collect();
        let tables = (0..map.len())
            .map(|s| {
                let db = map.database(s);
                Table::ALL.map(|t| format!("`{db}`.`{}`", t.name()))
            })
            .collect();
        let host_turns = map
            .hosts()
            .iter()
            .map(|_| tokio::sync::Mutex::new(()))
            .collect();
        Store {
            inner: Arc::new(Inner {
                map,
                pools,
                tables,
                connect_timeout,
                query_timeout,
                pool_size,
                host_turns,
                queries: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                #[cfg(feature = "fault-injection")]
                fault: std::sync::Mutex::new(None),
            }),
        }
    }

    /// The shard map this store routes by.
    pub fn shards(&self) -> &ShardMap {
        &self.inner.map
    }

    /// Statements sent to MySQL so far, by all clones of this store: every query,
    /// including `START TRANSACTION`, `COMMIT` and `ROLLBACK`. Reads are one statement
    /// per shard they touch, so a test can count cache misses that reached MySQL.
    pub fn queries(&self) -> u64 {
        self.inner.queries.load(Ordering::Relaxed)
    }

    /// Writes re-run so far because MySQL aborted them to break a deadlock or a lock
    /// wait. Follows and unfollows of one pair never deadlock with each other (see
    /// [`follow`](Store::follow)); a steady rate here means hot users' neighbouring
    /// keys are contended.
    pub fn retries(&self) -> u64 {
        self.inner.retries.load(Ordering::Relaxed)
    }

    /// Closes every pool, waiting for connections in use to come back.
    ///
    /// # Errors
    ///
    /// The first error a pool reported while closing.
    pub async fn close(self) -> Result<(), mysql_async::Error> {
        let Ok(inner) = Arc::try_unwrap(self.inner) else {
            // Other clones still use the pools; they close when the last one drops.
            return Ok(());
        };
        for pool in inner.pools {
            pool.disconnect().await?;
        }
        Ok(())
    }

    /// Arms a one-shot fault: the next write that reaches the named commit has that
    /// commit fail for real (its connection is killed server-side with
    /// `KILL CONNECTION` just before `COMMIT` is sent). A write that touches only one
    /// shard has no second commit and leaves [`Fault::KillSecondCommit`] armed.
    #[cfg(feature = "fault-injection")]
    pub fn inject(&self, fault: Fault) {
        *self.inner.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(fault);
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

/// A failure [`Store::inject`] can arm (feature `fault-injection`, for tests only).
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first commit of a write (the follower's shard, or the only one) fails.
    KillFirstCommit,
    /// The second commit of a two-shard write (the followed user's shard) fails.
    KillSecondCommit,
}

/// Microseconds since the Unix epoch: `auto_ts` and `relation_log.ts`.
pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One call's time budget: everything the call waits on — connection checkouts,
/// locks, statements, retries — ends by `at`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    start: Instant,
    at: Instant,
}

impl Deadline {
    fn new(budget: Duration) -> Deadline {
        let start = Instant::now();
        Deadline {
            start,
            at: start + budget,
        }
    }

    /// How long the call has run: what a timeout error reports.
    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// A connection or a transaction: what statements run on.
pub(crate) trait Session: Queryable {
    fn affected(&self) -> u64;
    fn inserted_id(&self) -> Option<u64>;
}

impl Session for Conn {
    fn affected(&self) -> u64 {
        self.affected_rows()
    }

    fn inserted_id(&self) -> Option<u64> {
        self.last_insert_id()
    }
}

impl Session for mysql_async::Transaction<'_> {
    fn affected(&self) -> u64 {
        self.affected_rows()
    }

    fn inserted_id(&self) -> Option<u64> {
        self.last_insert_id()
    }
}

/// One shard's transaction within a write.
pub(crate) struct Txn<'c> {
    pub(crate) shard: u32,
    tx: mysql_async::Transaction<'c>,
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
enum CommitPoint {
    First,
    Second,
}

impl Inner {
    pub(crate) fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The database-qualified, quoted name of `table` on `shard`.
    pub(crate) fn table(&self, shard: u32, table: Table) -> &str {
        &self.tables[shard as usize][table as usize]
    }

    fn host_label(&self, shard: u32) -> String {
        self.map.host(shard).label().to_string()
    }

    /// The budget of a call that checks out one connection at a time:
    /// `connect_timeout + query_timeout`.
    pub(crate) fn deadline(&self) -> Deadline {
        Deadline::new(self.connect_timeout + self.query_timeout)
    }

    /// The budget of a write that checks out a connection to each of two shards
    /// before its first statement: `2 × connect_timeout + query_timeout`.
    fn pair_deadline(&self) -> Deadline {
        Deadline::new(2 * self.connect_timeout + self.query_timeout)
    }

    fn mysql_error(
        &self,
        shard: u32,
        action: &'static str,
        source: mysql_async::Error,
    ) -> StoreError {
        StoreError::Mysql {
            shard,
            host: self.host_label(shard),
            action,
            source,
        }
    }

    /// Checks a connection to `shard`'s host out of its pool, within
    /// `connect_timeout` and what is left of the call's budget.
    pub(crate) async fn checkout(&self, d: Deadline, shard: u32) -> Result<Conn, StoreError> {
        let pool = &self.pools[self.map.host_of(shard)];
        let until = d.at.min(Instant::now() + self.connect_timeout);
        match tokio::time::timeout_at(until, pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.mysql_error(shard, "connect", e)),
            Err(_) => Err(self.timeout(d, shard, "connect")),
        }
    }

    fn timeout(&self, d: Deadline, shard: u32, action: &'static str) -> StoreError {
        StoreError::Timeout {
            shard,
            host: self.host_label(shard),
            action,
            after: d.elapsed(),
        }
    }

    /// Runs one statement's future within the call's deadline, counting it.
    async fn run<T>(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        fut: impl std::future::Future<Output = mysql_async::Result<T>>,
    ) -> Result<T, StoreError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout_at(d.at, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.mysql_error(shard, action, e)),
            Err(_) => Err(self.timeout(d, shard, action)),
        }
    }

    /// Runs a statement and decodes every row as `T`.
    pub(crate) async fn exec<T: FromRow, Q: Session>(
        &self,
        d: Deadline,
        shard: u32,
        q: &mut Q,
        action: &'static str,
        sql: String,
        params: impl Into<Params> + Send,
    ) -> Result<Vec<T>, StoreError> {
        let rows: Vec<Row> = self.run(d, shard, action, q.exec(sql, params)).await?;
        rows.into_iter()
            .map(|row| {
                mysql_async::from_row_opt(row).map_err(|e| StoreError::Decode {
                    shard,
                    host: self.host_label(shard),
                    action,
                    detail: e.to_string(),
                })
            })
            .collect()
    }

    /// Runs a statement and decodes its first row, if any.
    pub(crate) async fn exec_first<T: FromRow, Q: Session>(
        &self,
        d: Deadline,
        shard: u32,
        q: &mut Q,
        action: &'static str,
        sql: String,
        params: impl Into<Params> + Send,
    ) -> Result<Option<T>, StoreError> {
        Ok(self
            .exec(d, shard, q, action, sql, params)
            .await?
            .into_iter()
            .next())
    }

    /// Runs a statement that returns no rows; answers the rows it affected.
    pub(crate) async fn exec_drop<Q: Session>(
        &self,
        d: Deadline,
        shard: u32,
        q: &mut Q,
        action: &'static str,
        sql: String,
        params: impl Into<Params> + Send,
    ) -> Result<u64, StoreError> {
        self.run(d, shard, action, q.exec_drop(sql, params)).await?;
        Ok(q.affected())
    }

    /// Runs DDL or another statement that cannot be prepared (text protocol).
    pub(crate) async fn query_drop(
        &self,
        d: Deadline,
        shard: u32,
        conn: &mut Conn,
        action: &'static str,
        sql: String,
    ) -> Result<(), StoreError> {
        self.run(d, shard, action, conn.query_drop(sql)).await
    }

    /// One statement on one shard, outside any transaction, within the call's
    /// deadline `d`; every row decoded as `T`.
    pub(crate) async fn read<T: FromRow>(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        sql: String,
        params: impl Into<Params>,
    ) -> Result<Vec<T>, StoreError> {
        Ok(self
            .autocommit(d, shard, action, sql, params.into())
            .await?
            .0)
    }

    /// One autocommitted statement that returns no rows; answers the rows affected.
    /// Like [`read`](Self::read) it may be sent twice, so only for statements that
    /// are harmless to repeat.
    pub(crate) async fn write(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        sql: String,
        params: impl Into<Params>,
    ) -> Result<u64, StoreError> {
        let (_, affected) = self
            .autocommit::<Row>(d, shard, action, sql, params.into())
            .await?;
        Ok(affected)
    }

    /// Runs `reads` (one per shard, say) concurrently, but no more at once than a
    /// pool has connections: more would only queue for one and risk
    /// `connect_timeout`. Answers in completion order.
    pub(crate) async fn concurrently<T>(
        &self,
        reads: impl IntoIterator<Item = impl std::future::Future<Output = Result<T, StoreError>>>,
    ) -> Result<Vec<T>, StoreError> {
        use futures_util::{StreamExt, TryStreamExt};
        futures_util::stream::iter(reads)
            .buffer_unordered(self.pool_size)
            .try_collect()
            .await
    }

    /// Runs one statement on its own connection: its rows and the rows it affected.
    ///
    /// A connection that turns out dead before the statement got anywhere — an idle
    /// pooled connection whose server restarted, say — is dropped and the statement
    /// sent again on the next one, up to the pool size, so a server restart costs
    /// failed attempts rather than failed calls.
    async fn autocommit<T: FromRow>(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        sql: String,
        params: Params,
    ) -> Result<(Vec<T>, u64), StoreError> {
        let mut conn = self.checkout(d, shard).await?;
        let mut retries = 0;
        loop {
            match self
                .exec(d, shard, &mut conn, action, sql.clone(), params.clone())
                .await
            {
                Ok(rows) => return Ok((rows, conn.affected())),
                Err(e) if e.is_connection_lost() && retries < self.pool_size => {
                    retries += 1;
                    conn = self.checkout(d, shard).await?;
                }
                Err(e) => return Err(e),
            }
        }
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
                    let jitter = super::shards::splitmix64(now_micros()) % 4_000;
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

    #[cfg(feature = "fault-injection")]
    async fn fire_fault(
        &self,
        d: Deadline,
        t: &Txn<'_>,
        point: CommitPoint,
    ) -> Result<(), StoreError> {
        let wanted = match point {
            CommitPoint::First => Fault::KillFirstCommit,
            CommitPoint::Second => Fault::KillSecondCommit,
        };
        let fired = self
            .fault
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_if(|f| *f == wanted)
            .is_some();
        if !fired {
            return Ok(());
        }
        // A connection outside the pool, so a pool of one cannot deadlock on it.
        let url = self.map.host(t.shard).url();
        let opts = mysql_async::Opts::from_url(url).expect("ShardMap validated the URL");
        let mut killer = self
            .run(d, t.shard, "connect (fault injection)", Conn::new(opts))
            .await?;
        // KILL cannot take a bound parameter; the id is the driver's own u32.
        let kill = format!("KILL CONNECTION {}", t.tx.id());
        self.query_drop(d, t.shard, &mut killer, "kill (fault injection)", kill)
            .await?;
        let _ = killer.disconnect().await;
        Ok(())
    }
}
