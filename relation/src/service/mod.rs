//! The relation service: what an application links against. Reads go to the cache
//! and fill it from MySQL on a miss; writes go to MySQL and then update the cache.
//!
//! The cache holds one key per user, `<prefix><user id>`: the idset of the users
//! they follow, always complete when present (an empty set is an answer: "follows
//! nobody"). Three rules keep it from ever being stale for longer than a write's
//! own round trip:
//!
//! - **Fills happen under a lease.** A miss asks the cache for the lease in the same
//!   round trip as the question (`IDSET.MEXISTSBIN … LEASE`). The one caller granted
//!   it reads the whole set from MySQL in one query, builds the table here and
//!   stores it with one command carrying the token. Everyone else missing the same
//!   user waits in the cache (`BLOCK`) and is answered from that fill: a hundred
//!   concurrent misses cost one MySQL read.
//! - **Writes go to MySQL first, then to the cache only if the set is there**
//!   (`IDSET.ADD … XX`, `IDSET.REM`): a write-through never creates a partial set.
//!   Any write revokes the key's lease, so a filler that read MySQL before the write
//!   committed has its fill refused, and the next reader fills again.
//! - **Write-throughs apply in commit order.** Each carries its change's number
//!   (`SEQ`, the `relation_log` row's), and each fill the number of the newest
//!   change it read, so an update held up on the way cannot land after a later one
//!   and undo it: the cache applies changes in order, or drops a set that a change
//!   reached out of order and lets the next read fill it again. A write whose
//!   commit may or may not have happened (no answer to `COMMIT`), or whose caller
//!   gave up midway, keeps the set suspect until MySQL shows it settled (below).
//! - **Nothing partial is stored.** A fill is the result of one complete query;
//!   if MySQL fails or times out the lease is released, the caller gets the error,
//!   and the next caller may try again.
//!
//! When the cache is unreachable, reads are answered from MySQL; when MySQL is,
//! cached users are still answered and everything else is an error, never a guess.
//! A cache that keeps failing is skipped for a while rather than waited on by every
//! call ([`RelationsConfig::cache_failure_limit`]), and a set whose write-through
//! was lost is never read back by this process: it is read from MySQL until its key
//! has been deleted ([`RelationsConfig::max_suspects`]).
//! Lists (newest first, paged) and follower counts come from MySQL's indexes: the
//! cache holds membership, not order.
//!
//! Optionally ([`RelationsConfig::local_cache`]), hot users' whole tables are also
//! kept in process, answered from without a cache request, and dropped when the
//! cache server's key tracking says they changed (see `local`).
//!
//! # On a cluster
//!
//! Given a [`Cache::Cluster`], each user's set lives on the node that serves its
//! key's slot, and everything above holds per node: reads and fills go to the
//! node that holds the set, a restarted node is caught up (and read from MySQL
//! meanwhile) on its own while the others are read as usual, and questions about
//! many users (`followers_among`) are split by node, asked in parallel — one
//! `IDSET.WHICH` per slot, pipelined per node — and merged in the caller's order.
//! Keys there are `<prefix>{<id>}`: the hash tag puts every key of one user in one
//! slot (today there is one, the following set; a followers set or counter added
//! later as `followers:{<id>}` lands beside it). One node keeps `<prefix><id>`: a
//! tag changes nothing there but the key's name, and renaming every key would make
//! a rolling upgrade write through to names the old readers never read.
//!
//! A slot can move while a call is on its way, so redirects (`-MOVED`, `-ASK`)
//! are handled by what each command guarantees:
//!
//! - **A read** (taking a lease on a miss) is sent where the slot map says; after
//!   a `-MOVED` it is asked again of the new node (it did not run). A lease is
//!   granted by the node that answered, and is that node's alone. After an
//!   `-ASK` (the slot is migrating) the read is answered from MySQL: following it
//!   would put the lease, and so the fill, on the importing node, reachable only
//!   with `ASKING` before each command.
//! - **A fill goes only to the node, and connection, that granted its lease.** If it
//!   is answered with a redirect, the slot moved (or is moving) since the grant,
//!   and the fill is abandoned: the caller answers from what it read, and the next
//!   read takes a new lease on the slot's new node and fills there. It is never
//!   sent on with its token: the token means nothing to another node (the same
//!   number may be someone else's lease there), and the writes that would have
//!   revoked it went to the new node. Nor is it stored under a lease taken anew:
//!   its MySQL read predates that lease, so a write committed in between would be
//!   lost. One gap is left, server side: a node should revoke the leases of a
//!   slot when it starts migrating away (`CLUSTER SETSLOT … MIGRATING`), and does
//!   not yet. Without that, a write sent on by `-ASK` to the importing node during
//!   a migration that is then aborted (`SETSLOT … STABLE`) misses the lease on
//!   the source, whose fill may then store a set without that write (until the
//!   set's TTL, or the next write's sequence check drops it).
//! - **A write-through is sent again where the redirect points.** A redirected
//!   command did not run, and `IDSET.ADD key XX SEQ n` / `IDSET.REM key SEQ n` are
//!   safe to send anywhere, any number of times: each changes only a set that is
//!   there, only if `n` is newer than the set's own number, so it cannot create a
//!   partial set, cannot apply twice, and is ignored by a set that migrated with the
//!   change already in it (a key moves whole, with its number). A write-through
//!   that still finds no node is lost as usual: the user is suspect.

mod cache;
mod fill;
mod local;
mod restart;

pub use local::LocalCacheConfig;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use relcache_protocol::idset::TableRef;

use super::guard::Guard;
use super::store::{Cursor, FollowOutcome, Page, Relation, Store, StoreError, UnfollowOutcome};
use crate::cache::Cache;
use cache::NoConn;
use relcache_client::{Cmd, Error as CacheError, Frame, LeaseOpts, Leased, PooledConn};

/// How the service uses the cache.
#[derive(Clone, Debug)]
pub struct RelationsConfig {
    /// Cache key of a user's following set: this prefix, then the decimal id (in
    /// braces on a cluster: see the module docs).
    pub key_prefix: String,
    /// Cached sets expire after this long, so a set whose write-through was lost
    /// (the cache unreachable just after a MySQL commit) is stale for at most this.
    pub cache_ttl: Option<Duration>,
    /// How long a fill lease lasts: longer than a MySQL read takes, short enough
    /// that a filler that dies holds others up only briefly.
    pub lease_ttl: Duration,
    /// How long a caller that misses while someone else fills waits for that fill
    /// before reading MySQL itself.
    pub lease_wait: Duration,
    /// Consecutive transport failures (refused, reset, timed out) after which the
    /// cache is taken for down and skipped.
    pub cache_failure_limit: u32,
    /// While the cache is down, how often one call probes it.
    pub cache_retry_interval: Duration,
    /// How far before a restarted cache's snapshot its catch-up starts replaying
    /// the change log: longer than a write-through can take to land after its
    /// commit, plus any clock difference between the services and the cache.
    pub catchup_margin: Duration,
    /// Users whose lost write-through this process remembers (and so never reads
    /// their possibly stale set) until it can delete their sets. Past this, a lost
    /// write-through is only counted, and the set's TTL bounds its staleness.
    pub max_suspects: usize,
    /// The in-process cache of hot users' sets, kept correct by the cache server's
    /// invalidations (see [`LocalCacheConfig`]); `None`, the default, for none.
    /// With it on, [`Relations::new`] must be called inside a tokio runtime.
    pub local_cache: Option<LocalCacheConfig>,
}

impl Default for RelationsConfig {
    fn default() -> Self {
        RelationsConfig {
            key_prefix: "following:".into(),
            cache_ttl: Some(Duration::from_secs(3600)),
            lease_ttl: Duration::from_secs(3),
            lease_wait: Duration::from_secs(2),
            cache_failure_limit: 3,
            cache_retry_interval: Duration::from_secs(1),
            max_suspects: 1 << 20,
            catchup_margin: Duration::from_secs(60),
            local_cache: None,
        }
    }
}

/// What went wrong with a call. Cache failures never surface: the service answers
/// from MySQL instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelationError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Counters of what the service did, for tests, benchmarks and dashboards.
#[derive(Debug, Default)]
pub struct TierStats {
    /// Reads answered from the cache.
    pub cache_hits: AtomicU64,
    /// Reads that found the set missing and filled it (this caller held the lease).
    pub cache_fills: AtomicU64,
    /// Fills the cache refused because a write revoked their lease meanwhile.
    pub fills_refused: AtomicU64,
    /// Fills abandoned because their node no longer served the set's slot (a
    /// `-MOVED` or `-ASK` answer); see the module docs on clusters.
    pub fills_redirected: AtomicU64,
    /// Reads answered from MySQL without filling: someone else held the lease
    /// for longer than `lease_wait`.
    pub busy_reads: AtomicU64,
    /// Cache calls that failed (a reply that was an error, or none at all); the
    /// read was answered from MySQL.
    pub cache_errors: AtomicU64,
    /// Calls that did not ask the cache: it was down, or the user's cached set was
    /// suspect. Reads among them were answered from MySQL.
    pub cache_bypassed: AtomicU64,
    /// Write-throughs that did not reach the cache after the MySQL commit; each
    /// makes the user's cached set suspect until it is deleted.
    pub write_through_failures: AtomicU64,
    /// Suspect sets deleted from the cache once it answered again.
    pub suspects_cleared: AtomicU64,
    /// Lost write-throughs that could not be remembered (`max_suspects` reached):
    /// the set's TTL is all that bounds their staleness.
    pub suspects_dropped: AtomicU64,
    /// Follows and unfollows whose commit was in doubt (sent and never answered,
    /// or the caller gave up midway): the user's set stayed suspect until MySQL
    /// showed the write settled.
    pub writes_in_doubt: AtomicU64,
    /// Restarted cache processes caught up (or found caught up by another service)
    /// before their sets were read.
    pub catchups: AtomicU64,
    /// Logged changes replayed to restarted caches.
    pub catchup_changes: AtomicU64,
    /// Reads answered from the in-process cache, without asking the cache server.
    pub local_hits: AtomicU64,
    /// Reads that found no table in the in-process cache (the cache was on).
    pub local_misses: AtomicU64,
    /// Tables fetched from the cache server and kept in process.
    pub local_fetches: AtomicU64,
    /// Tables fetched but not kept: invalidated while in flight, or the listener's
    /// session ended meanwhile.
    pub local_fetches_discarded: AtomicU64,
    /// Tables dropped from the in-process cache by the server's invalidations.
    pub local_invalidations: AtomicU64,
    /// Times the whole in-process cache was dropped: the server was flushed, or
    /// invalidations may have been missed (listener lost, server restarted).
    pub local_flushes: AtomicU64,
}

/// The relation service over one cache node or a cluster, and the sharded MySQL
/// store.
#[derive(Debug)]
pub struct Relations {
    cache: Cache,
    store: Store,
    config: RelationsConfig,
    /// Shared with the tasks that wait out writes in doubt. On a cluster it keeps
    /// the suspect sets only; each node's health is in `health`.
    guard: Arc<Guard>,
    /// On a cluster, each node's health (see `Relations::health`); empty on one
    /// node.
    health: std::sync::Mutex<std::collections::HashMap<Arc<str>, Arc<Guard>>>,
    /// Which cache process's sets may be read (see `restart`).
    restarts: Arc<restart::Restarts>,
    stats: Arc<TierStats>,
    /// The in-process cache, when configured.
    local: Option<local::LocalCache>,
}

/// How a read puts its question about a user's set to the cache (see
/// [`read_through`](Relations::read_through)).
enum Ask<'a, T> {
    /// One round trip: the question carries `LEASE`, so a miss asks for the lease
    /// too (`IDSET.MEXISTSBIN … LEASE`). Built from the set's key.
    WithLease(&'a (dyn Fn(Bytes) -> Cmd<Leased<T>> + Sync)),
    /// The question answers nil on a miss, and the lease is asked for next.
    ThenLease(fn(Bytes) -> Cmd<Option<T>>),
}

/// What the cache said to a read of a user's set (see
/// [`read_through`](Relations::read_through)).
enum Asked<T> {
    /// The answer, from the cached set.
    Hit(T),
    /// The set is missing and this caller holds the lease to fill it.
    Granted(u64),
    /// The set was missing and someone else filled it meanwhile: ask again.
    FilledMeanwhile,
    /// Someone else's fill did not land within `lease_wait`.
    Busy,
}

/// A set read from MySQL by the lease holder, and the table built from it.
struct FilledSet {
    ids: Vec<u64>,
    table: Bytes,
}

/// What a write did, as far as the cache is concerned: the sequence number of the
/// change, if it made one.
trait Sequenced {
    fn seq(&self) -> Option<u64>;
}

impl Sequenced for FollowOutcome {
    fn seq(&self) -> Option<u64> {
        self.seq
    }
}

impl Sequenced for UnfollowOutcome {
    fn seq(&self) -> Option<u64> {
        self.seq
    }
}

/// A follow or unfollow in flight: until it is settled, a caller that gives up on
/// the call (drops its future) may have left a commit in doubt.
struct PendingWrite<'a> {
    relations: &'a Relations,
    user: u64,
    friend: u64,
    settled: bool,
}

impl PendingWrite<'_> {
    /// The write's outcome reached the cache, or was handled otherwise.
    fn settled(mut self) {
        self.settled = true;
    }
}

impl Drop for PendingWrite<'_> {
    fn drop(&mut self) {
        if !self.settled {
            // The caller gave up mid-write: MySQL may have committed, or may yet
            // commit, a change the cache never heard of.
            self.relations.in_doubt(self.user, self.friend);
        }
    }
}

/// The cache key of `user`'s following set: `prefix`, then the decimal id, in
/// braces if `tagged` (on a cluster: see the module docs).
pub(crate) fn user_key(prefix: &str, tagged: bool, user: u64) -> Bytes {
    let mut key = prefix.as_bytes().to_vec();
    if tagged {
        key.push(b'{');
    }
    key.extend_from_slice(itoa::Buffer::new().format(user).as_bytes());
    if tagged {
        key.push(b'}');
    }
    key.into()
}

/// How long a write in doubt is waited for when the cached sets have no TTL.
const SETTLE_PATIENCE: Duration = Duration::from_secs(3600);

/// Suspect sets deleted with one `DEL`: enough to clear a long outage's backlog in
/// few round trips, small enough that the call it precedes is barely delayed.
const CLEAR_BATCH: usize = 1024;

impl Relations {
    /// # Panics
    ///
    /// With [`RelationsConfig::local_cache`] set, outside a tokio runtime (its
    /// invalidation listener is a task). On a cluster the in-process cache is not
    /// kept (its invalidations come from one node), and the setting is ignored.
    pub fn new(cache: impl Into<Cache>, store: Store, config: RelationsConfig) -> Relations {
        let cache = cache.into();
        let guard = Arc::new(Guard::new(
            config.cache_failure_limit,
            config.cache_retry_interval,
            config.max_suspects,
        ));
        let stats: Arc<TierStats> = Arc::default();
        let local = match &cache {
            Cache::Node(pool) => config.local_cache.as_ref().map(|local| {
                local::LocalCache::start(local, pool.config(), &config.key_prefix, stats.clone())
            }),
            Cache::Cluster(_) => {
                if config.local_cache.is_some() {
                    tracing::warn!("no in-process cache over a cluster; local_cache ignored");
                }
                None
            }
        };
        Relations {
            cache,
            store,
            config,
            guard,
            health: Default::default(),
            restarts: Arc::default(),
            stats,
            local,
        }
    }

    /// Tables held by the in-process cache, and their bytes; `None` when it is off.
    pub fn local_cache_size(&self) -> Option<(usize, usize)> {
        self.local.as_ref().map(|l| l.size())
    }

    /// Whether `user`'s table is held in process (false when the cache is off).
    pub fn local_cache_holds(&self, user: u64) -> bool {
        self.local.as_ref().is_some_and(|l| l.holds(user))
    }

    /// Whether the in-process cache's invalidation listener is subscribed, so that
    /// tables can be fetched and kept; `None` when the cache is off.
    pub fn local_cache_listening(&self) -> Option<bool> {
        self.local.as_ref().map(|l| l.tracker.session().is_some())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn stats(&self) -> &TierStats {
        &self.stats
    }

    /// Whether the cache is taken for down (calls skip it until a probe succeeds).
    /// On a cluster: whether any node is.
    pub fn cache_down(&self) -> bool {
        let health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        self.guard.is_down() || health.values().any(|g| g.is_down())
    }

    /// Users whose cached set is not trusted until it has been deleted.
    pub fn suspect_sets(&self) -> usize {
        self.guard.suspects()
    }

    /// The cache key holding `user`'s following set.
    pub fn cache_key(&self, user: u64) -> Bytes {
        user_key(&self.config.key_prefix, self.cache.is_cluster(), user)
    }

    // Writes.

    /// `a` follows `b`: MySQL first (both shards; see [`Store::follow`]), then the
    /// cached set of `a`, if there is one, as change number `seq` of that set (see
    /// [`Cmd::idset_add_xx_seq`]), so write-throughs of concurrent writes apply in
    /// the order MySQL committed them however they arrive. Idempotent: a follow that
    /// changes nothing writes nothing through.
    ///
    /// # Errors
    ///
    /// [`RelationError::Store`] if MySQL failed. Then the follow did not happen,
    /// unless [`StoreError::is_outcome_unknown`]: the commit was sent and no answer
    /// came. `a`'s set is then read from MySQL here, and deleted from the cache
    /// once MySQL shows the write landed or rolled back, so neither outcome is
    /// hidden.
    pub async fn follow(&self, a: u64, b: u64) -> Result<FollowOutcome, RelationError> {
        let key = self.cache_key(a);
        let add = move |seq| Cmd::idset_add_xx_seq(key.clone(), seq, &[b]).map(drop);
        self.write(a, b, self.store.follow(a, b), add).await
    }

    /// `a` no longer follows `b`; as [`follow`](Self::follow). Idempotent.
    ///
    /// # Errors
    ///
    /// As [`follow`](Self::follow).
    pub async fn unfollow(&self, a: u64, b: u64) -> Result<UnfollowOutcome, RelationError> {
        let key = self.cache_key(a);
        let rem = move |seq| Cmd::idset_rem_seq(key.clone(), seq, &[b]).map(drop);
        self.write(a, b, self.store.unfollow(a, b), rem).await
    }

    /// A change to `user`'s set (following `friend` or not): `commit` in MySQL,
    /// then, if it changed anything, `through(seq)` to the cache.
    async fn write<O: Sequenced>(
        &self,
        user: u64,
        friend: u64,
        commit: impl std::future::Future<Output = Result<O, StoreError>>,
        through: impl Fn(u64) -> Cmd<()>,
    ) -> Result<O, RelationError> {
        let pending = PendingWrite {
            relations: self,
            user,
            friend,
            settled: false,
        };
        let outcome = match commit.await {
            Ok(outcome) => outcome,
            Err(e) => {
                if e.is_outcome_unknown() {
                    self.in_doubt(user, friend);
                }
                pending.settled();
                return Err(e.into());
            }
        };
        if let Some(seq) = outcome.seq() {
            self.write_through(user, || through(seq)).await;
            // After the write-through is answered (or lost), not before: a fetch
            // that raced it may hold the old set, and is refused now, while the
            // next fetch reads what the write-through left.
            self.forget_local(user);
        }
        pending.settled();
        Ok(outcome)
    }

    /// A change of `user` following `friend` whose commit is in doubt: it may land
    /// any time, or never. Deleting the cached set now would let a read refill it
    /// from the state before the commit, which then lands unseen; so the set is
    /// suspect (read from MySQL here) and not deleted until a task has seen the
    /// write's row lock released — the change landed or rolled back — after which
    /// the usual `DEL` clears it.
    fn in_doubt(&self, user: u64, friend: u64) {
        self.stats.writes_in_doubt.fetch_add(1, Relaxed);
        self.forget_local(user);
        if !self.guard.suspect_in_doubt(user) {
            self.stats.suspects_dropped.fetch_add(1, Relaxed);
            tracing::error!(
                user,
                max_suspects = self.config.max_suspects,
                "a write in doubt and too many suspect sets to track; the cached set may be stale until its TTL"
            );
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Without a runtime the set stays suspect: read from MySQL for good.
            return;
        };
        let (store, guard) = (self.store.clone(), self.guard.clone());
        let patience = self.config.cache_ttl.unwrap_or(SETTLE_PATIENCE);
        runtime.spawn(async move {
            let give_up = Instant::now() + patience;
            let mut pause = Duration::from_millis(50);
            loop {
                match store.await_settled(user, friend).await {
                    Ok(()) => break,
                    Err(e) if Instant::now() < give_up => {
                        tracing::debug!(user, error = %e, "write in doubt not settled yet");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    Err(e) => {
                        tracing::warn!(user, error = %e, "gave up waiting for a write in doubt; its set is deleted now");
                        break;
                    }
                }
            }
            guard.settled(user);
        });
    }

    /// Applies a committed change to the cached set. If the cache cannot be told,
    /// the set (if cached) lacks the change: the user becomes suspect, read from
    /// MySQL until the set is deleted.
    ///
    /// A busy pool is waited out for up to `lease_wait`: callers parked on a lease
    /// hold connections for at most that long, and a write-through lost to them
    /// would cost the user's set a trip through the suspect list.
    ///
    /// On a cluster, a write-through answered with a redirect is sent again where
    /// the slot is now (see the module docs: it is conditional and sequenced, so
    /// safe anywhere).
    async fn write_through(&self, user: u64, cmd: impl Fn() -> Cmd<()>) {
        let patience = Instant::now() + self.config.lease_wait;
        let conn = loop {
            match self.try_cache_conn(user).await {
                Ok(conn) => break Some(conn),
                Err(NoConn::Busy) if Instant::now() < patience => continue,
                Err(_) => break None,
            }
        };
        let applied = match conn {
            Some(mut conn) => match self.call(&mut conn, cmd()).await {
                Ok(()) => true,
                Err(e) if e.is_redirect() => {
                    drop(conn);
                    let sent_on = self.cache.run(cmd()).await;
                    self.report(None, sent_on.as_ref().err());
                    sent_on.is_ok()
                }
                Err(_) => false,
            },
            None => false,
        };
        if !applied {
            self.write_through_lost(user);
        }
    }

    /// A committed change to `user`'s set did not reach the cache: the user is
    /// suspect until the set is deleted.
    fn write_through_lost(&self, user: u64) {
        self.stats.write_through_failures.fetch_add(1, Relaxed);
        self.forget_local(user);
        if self.guard.suspect(user) {
            tracing::warn!(
                user,
                "cache write-through lost; the cached set is not read until deleted"
            );
        } else {
            self.stats.suspects_dropped.fetch_add(1, Relaxed);
            tracing::error!(
                user,
                max_suspects = self.config.max_suspects,
                "cache write-through lost and too many suspect sets to track; the cached set may be stale until its TTL"
            );
        }
    }

    // Membership.

    /// Whether `a` follows `b`.
    ///
    /// # Errors
    ///
    /// [`RelationError::Store`] if the answer needed MySQL and MySQL failed.
    pub async fn is_following(&self, a: u64, b: u64) -> Result<bool, RelationError> {
        Ok(self.which_followed(a, &[b]).await?[0])
    }

    /// For each of `ids`, whether `a` follows them: one cache round trip when `a`'s
    /// set is cached.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn which_followed(&self, a: u64, ids: &[u64]) -> Result<Vec<bool>, RelationError> {
        let each = |t: TableRef<'_>| t.contains_each(ids.iter().copied()).collect();
        if let Some(answer) = self.local_read(a, each).await {
            return Ok(answer);
        }
        let opts = self.lease_opts();
        let read = move |key| Cmd::idset_mexistsbin_lease(key, ids, opts);
        let from_fill = |set: FilledSet| contains_each(&set.table, ids);
        let from_mysql = self.store.which_followed(a, ids);
        self.read_through(a, Ask::WithLease(&read), from_fill, from_mysql)
            .await
    }

    /// Lease options for a read that waits for someone else's fill.
    fn lease_opts(&self) -> LeaseOpts {
        LeaseOpts {
            px: Some(self.config.lease_ttl),
            wait: Some(self.config.lease_wait),
        }
    }

    /// How `a` and `b` relate: both directions, asked of the cache concurrently.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn relation(&self, a: u64, b: u64) -> Result<Relation, RelationError> {
        let (ab, ba) = tokio::try_join!(self.is_following(a, b), self.is_following(b, a))?;
        Ok(match (ab, ba) {
            (true, true) => Relation::Mutual,
            (true, false) => Relation::Following,
            (false, true) => Relation::FollowedBy,
            (false, false) => Relation::None,
        })
    }

    // Sets and counts.

    /// How many users `a` follows.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn following_count(&self, a: u64) -> Result<u64, RelationError> {
        if let Some(n) = self.local_read(a, |t| t.len()).await {
            return Ok(n);
        }
        self.read_set(a, Cmd::idset_card, |ids| ids.len() as u64)
            .await
    }

    /// How many users follow `a` (from MySQL's index on `followers`).
    ///
    /// # Errors
    ///
    /// [`RelationError::Store`] if MySQL failed.
    pub async fn followers_count(&self, a: u64) -> Result<u64, RelationError> {
        Ok(self.store.followers_count(a).await?)
    }

    /// Everyone `a` follows, in no particular order.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn following_set(&self, a: u64) -> Result<Vec<u64>, RelationError> {
        if let Some(ids) = self.local_read(a, |t| t.iter().collect()).await {
            return Ok(ids);
        }
        self.read_set(a, Cmd::idset_members, |ids| ids).await
    }

    /// A read of `user`'s whole set that answers nil when it is missing (`read`),
    /// or the same answer computed from the ids (`from_ids`) when the set had to be
    /// read from MySQL. A miss asks for the lease in a second round trip, waiting
    /// if someone else holds it.
    async fn read_set<T>(
        &self,
        user: u64,
        read: fn(Bytes) -> Cmd<Option<T>>,
        from_ids: fn(Vec<u64>) -> T,
    ) -> Result<T, RelationError> {
        let from_mysql = async { Ok(from_ids(self.store.following_ids(user).await?)) };
        self.read_through(
            user,
            Ask::ThenLease(read),
            |set| from_ids(set.ids),
            from_mysql,
        )
        .await
    }

    /// The read-through, written once for every read of a user's set: `ask` is the
    /// question for the cache, which on a miss asks for the fill lease. A hit is
    /// the answer. A granted lease makes this caller the filler: it reads the set
    /// from MySQL, stores it, and answers `from_fill`. Everything else is answered
    /// by `from_mysql` (not started unless needed): the cache is down or failed,
    /// the user's set is suspect, someone else's fill did not land within
    /// `lease_wait`, or sets were filled and evicted again three times over (the
    /// cache is thrashing).
    async fn read_through<T>(
        &self,
        user: u64,
        ask: Ask<'_, T>,
        from_fill: impl FnOnce(FilledSet) -> T,
        from_mysql: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, RelationError> {
        for _ in 0..3 {
            let Some(mut conn) = self.conn_for(user).await else {
                break;
            };
            match self.ask(&mut conn, user, &ask).await {
                Ok(Asked::Hit(answer)) => {
                    self.stats.cache_hits.fetch_add(1, Relaxed);
                    return Ok(answer);
                }
                Ok(Asked::Granted(token)) => {
                    return Ok(from_fill(self.fill(&mut conn, user, token).await?));
                }
                Ok(Asked::FilledMeanwhile) => {}
                Ok(Asked::Busy) => {
                    self.stats.busy_reads.fetch_add(1, Relaxed);
                    break;
                }
                // The slot moved (`-MOVED`: the map is fixed by now) and the read
                // did not run: ask the new node. A slot still migrating (`-ASK`)
                // keeps answering so, and the read ends at MySQL.
                Err(e) if e.is_redirect() => {}
                Err(_) => break,
            }
        }
        // Any connection went back to the pool with the loop: MySQL may be slow.
        Ok(from_mysql.await?)
    }

    /// Puts `ask` about `user`'s set to the cache on `conn`.
    async fn ask<T>(
        &self,
        conn: &mut PooledConn,
        user: u64,
        ask: &Ask<'_, T>,
    ) -> Result<Asked<T>, CacheError> {
        let key = self.cache_key(user);
        let reply = match ask {
            Ask::WithLease(read) => self.call(conn, read(key)).await?,
            Ask::ThenLease(read) => match self.call(conn, read(key.clone())).await? {
                Some(answer) => Leased::Hit(answer),
                None => match self
                    .call(conn, Cmd::idset_lease(key, self.lease_opts()))
                    .await?
                {
                    Leased::Hit(()) => return Ok(Asked::FilledMeanwhile),
                    Leased::Granted(token) => Leased::Granted(token),
                    Leased::Busy => Leased::Busy,
                },
            },
        };
        Ok(match reply {
            Leased::Hit(answer) => Asked::Hit(answer),
            Leased::Granted(token) => Asked::Granted(token),
            Leased::Busy => Asked::Busy,
        })
    }

    /// The users both `a` and `b` follow, ascending: intersected in the cache when
    /// both sets are there.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn common_following(&self, a: u64, b: u64) -> Result<Vec<u64>, RelationError> {
        if let Some(ids) = self.cached_intersection(a, b).await {
            self.stats.cache_hits.fetch_add(2, Relaxed);
            return Ok(ids);
        }
        let (sa, sb) = tokio::try_join!(self.following_set(a), self.following_set(b))?;
        let mut common: Vec<u64> = if sa.len() <= sb.len() {
            let other: std::collections::HashSet<u64> = sb.into_iter().collect();
            sa.into_iter().filter(|id| other.contains(id)).collect()
        } else {
            let other: std::collections::HashSet<u64> = sa.into_iter().collect();
            sb.into_iter().filter(|id| other.contains(id)).collect()
        };
        common.sort_unstable();
        Ok(common)
    }

    /// `SINTER` of both users' sets in the cache, if both are there and trusted.
    /// Not on a cluster, where two users' sets are in two slots.
    async fn cached_intersection(&self, a: u64, b: u64) -> Option<Vec<u64>> {
        if self.cache.is_cluster() {
            return None;
        }
        let mut conn = self.conn_for(a).await?;
        if self.guard.is_suspect(b) {
            self.stats.cache_bypassed.fetch_add(1, Relaxed);
            return None;
        }
        let (ka, kb) = (self.cache_key(a), self.cache_key(b));
        // Both present and intersected atomically: SINTER alone would take a missing
        // set for an empty one.
        let frame = |args: &[&[u8]]| {
            let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
            Cmd::new(args, Ok)
        };
        let batch = vec![
            frame(&[b"MULTI"]),
            frame(&[b"EXISTS", &ka, &kb]),
            frame(&[b"SINTER", &ka, &kb]),
            frame(&[b"EXEC"]),
        ];
        let exec = self.call_pipeline(&mut conn, batch).await.ok()?.pop()?;
        exec.ok().and_then(both_present_intersection)
    }

    /// Which of the people `a` follows follow `x` ("friends of yours who follow
    /// them"), ascending: one `IDSET.WHICH` over the cached sets, with the missing
    /// ones filled in one MySQL query per shard.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn followers_among(&self, x: u64, a: u64) -> Result<Vec<u64>, RelationError> {
        let candidates = self.following_set(a).await?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        // Suspect sets are not asked about: they join what is read from MySQL.
        let (mut pending, mut unasked): (Vec<u64>, Vec<u64>) = candidates
            .into_iter()
            .partition(|&u| !self.guard.is_suspect(u));
        // Sets held in process answer here; the rest go to the cache server. (No
        // fetches for them: a question about many users is no sign that any one of
        // them is hot.)
        if self.local.is_some() {
            pending.retain(|&u| match self.local_held(u, |t| t.contains(x)) {
                Some(true) => {
                    found.push(u);
                    false
                }
                Some(false) => false,
                None => true,
            });
        }
        self.stats
            .cache_bypassed
            .fetch_add(unasked.len() as u64, Relaxed);
        // Round 1 asks the cache about everyone; round 2 about those whose sets
        // someone else filled meanwhile. What is left, and whoever's node could not
        // be asked, is read from MySQL.
        for _ in 0..2 {
            if pending.is_empty() {
                break;
            }
            let (answers, mut unreached) = self.which_cached(x, &pending).await;
            unasked.append(&mut unreached);
            let asked = answers.len();
            let mut missing = Vec::new();
            for (u, answer) in answers {
                match answer {
                    Some(true) => found.push(u),
                    Some(false) => {}
                    None => missing.push(u),
                }
            }
            self.stats
                .cache_hits
                .fetch_add((asked - missing.len()) as u64, Relaxed);
            if missing.is_empty() {
                pending.clear();
                break;
            }
            let (filled, present) = self.fill_many(&missing).await?;
            found.extend(
                filled
                    .iter()
                    .filter(|(_, s)| s.contains(&x))
                    .map(|(u, _)| u),
            );
            pending = present;
        }
        unasked.append(&mut pending);
        if !unasked.is_empty() {
            let sets = self.store.following_ids_many(&unasked).await?;
            found.extend(sets.iter().filter(|(_, s)| s.contains(&x)).map(|(u, _)| u));
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }

    /// `IDSET.WHICH x` over `users`' cached sets, split by node and asked of the
    /// nodes in parallel (one command per slot on a cluster, pipelined per node).
    /// Answers each user asked (`None`: not cached), and the users whose node could
    /// not be asked: down, failing, being caught up, or no longer serving the slot.
    async fn which_cached(&self, x: u64, users: &[u64]) -> (Vec<(u64, Option<bool>)>, Vec<u64>) {
        let asks = self
            .by_node(users)
            .into_iter()
            .map(|(node, pool, users)| async move {
                let answers = self.which_on_node(x, node, pool, &users).await;
                (users, answers)
            });
        let (mut answered, mut unreached) = (Vec::new(), Vec::new());
        for (users, answers) in futures_util::future::join_all(asks).await {
            for (u, answer) in users.into_iter().zip(answers) {
                match answer {
                    Some(answer) => answered.push((u, answer)),
                    None => unreached.push(u),
                }
            }
        }
        (answered, unreached)
    }

    /// [`which_cached`](Self::which_cached) on one node: for each of `users`, the
    /// answer, or `None` if it could not be had there.
    async fn which_on_node(
        &self,
        x: u64,
        node: Arc<str>,
        pool: relcache_client::Pool,
        users: &[u64],
    ) -> Vec<Option<Option<bool>>> {
        let mut answers = vec![None; users.len()];
        let Ok(conn) = self.try_node_conn(node, pool).await else {
            return answers;
        };
        let Some(mut conn) = self.admitted(conn).await else {
            return answers;
        };
        let keys: Vec<Bytes> = users.iter().map(|&u| self.cache_key(u)).collect();
        // A command's keys must share a slot on a cluster; one node takes them all.
        let groups: Vec<Vec<usize>> = if self.cache.is_cluster() {
            let mut by_slot: Vec<(u16, Vec<usize>)> = Vec::new();
            for (i, key) in keys.iter().enumerate() {
                let slot = relcache_protocol::slot::key_slot(key);
                match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, ids)) => ids.push(i),
                    None => by_slot.push((slot, vec![i])),
                }
            }
            by_slot.into_iter().map(|(_, ids)| ids).collect()
        } else {
            vec![(0..keys.len()).collect()]
        };
        let cmds = groups
            .iter()
            .map(|ids| {
                let keys: Vec<&Bytes> = ids.iter().map(|&i| &keys[i]).collect();
                Cmd::idset_which(x, &keys)
            })
            .collect();
        let Ok(replies) = self.call_pipeline(&mut conn, cmds).await else {
            return answers;
        };
        for (ids, reply) in groups.iter().zip(replies) {
            match reply {
                Ok(found) if found.len() == ids.len() => {
                    for (&i, answer) in ids.iter().zip(found) {
                        answers[i] = Some(answer);
                    }
                }
                // Not one answer per key: those users are read from MySQL.
                Ok(_) => {}
                // A slot that moved away (the map is fixed for next time), or an
                // error reply: those users are read from MySQL.
                Err(e) => self.report(Some(conn.addr()), Some(&e)),
            }
        }
        answers
    }

    /// `users` grouped by the node believed to hold their sets, in first-seen
    /// order (one group on a single node).
    pub(super) fn by_node(
        &self,
        users: &[u64],
    ) -> Vec<(Arc<str>, relcache_client::Pool, Vec<u64>)> {
        let mut groups: Vec<(Arc<str>, relcache_client::Pool, Vec<u64>)> = Vec::new();
        for &u in users {
            let (node, pool) = self.cache.node_for(&self.cache_key(u));
            match groups.iter_mut().find(|(n, ..)| *n == node) {
                Some((.., us)) => us.push(u),
                None => groups.push((node, pool, vec![u])),
            }
        }
        groups
    }

    // Lists.

    /// Whom `a` follows, newest first, a page at a time (from MySQL).
    ///
    /// # Errors
    ///
    /// [`RelationError::Store`] if MySQL failed.
    pub async fn following(
        &self,
        a: u64,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<Page, RelationError> {
        Ok(self.store.following_page(a, cursor, limit).await?)
    }

    /// Who follows `a`, newest first, a page at a time (from MySQL).
    ///
    /// # Errors
    ///
    /// [`RelationError::Store`] if MySQL failed.
    pub async fn followers(
        &self,
        a: u64,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<Page, RelationError> {
        Ok(self.store.followers_page(a, cursor, limit).await?)
    }
}

/// Membership of each of `ids` in a freshly built `table`, as the cache would
/// answer it.
fn contains_each(table: &[u8], ids: &[u64]) -> Vec<bool> {
    let table = TableRef::open(table).expect("a freshly built table is valid");
    table.contains_each(ids.iter().copied()).collect()
}

/// The EXEC reply of `EXISTS a b` + `SINTER a b`: the intersection, ascending, if
/// both sets were present.
fn both_present_intersection(exec: Frame) -> Option<Vec<u64>> {
    let Frame::Array(mut replies) = exec else {
        return None;
    };
    if replies.len() != 2 || replies[0] != Frame::Integer(2) {
        return None;
    }
    let members = match replies.pop()? {
        Frame::Array(m) | Frame::Set(m) => m,
        _ => return None,
    };
    let mut ids = members
        .iter()
        .map(|m| match m {
            Frame::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        })
        .collect::<Option<Vec<u64>>>()?;
    ids.sort_unstable();
    Some(ids)
}
