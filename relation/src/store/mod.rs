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
//! The rooms:
//!
//! - `session`: one call's time budget, connection checkout and the statements
//!   run within it ("Time bounds" there).
//! - `transaction`: a write's one or two shard transactions, their checkout,
//!   commit order and deadlock retries.
//! - `write`: follow, unfollow and reconcile — the rows they write and the lock
//!   order that keeps a concurrent follow-back from losing the mutual flag.
//! - `read`: whole sets, membership, pages and counts.
//! - `fault` (feature `fault-injection`, tests only): commits made to fail for real.

mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod read;
mod session;
mod transaction;
mod write;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mysql_async::{OptsBuilder, Pool, PoolConstraints, PoolOpts};

use super::shards::ShardMap;
pub use error::{StoreError, ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT};
#[cfg(feature = "fault-injection")]
pub use fault::Fault;
pub(crate) use read::in_list;
pub use read::{Cursor, CursorError, Entry, FollowingSnapshot, Page, Relation, MAX_PAGE};
pub(crate) use session::{Deadline, Session};
pub(crate) use transaction::{Txn, Txns};
pub use write::{Fixes, FollowOutcome, UnfollowOutcome};

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

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

/// Microseconds since the Unix epoch: `auto_ts` and `relation_log.ts`.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Inner {
    pub(crate) fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The database-qualified, quoted name of `table` on `shard`.
    pub(crate) fn table(&self, shard: u32, table: Table) -> &str {
        &self.tables[shard as usize][table as usize]
    }
}
