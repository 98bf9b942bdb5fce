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
//! - **Nothing partial is stored.** A fill is the result of one complete query;
//!   if MySQL fails or times out the lease is released, the caller gets the error,
//!   and the next caller may try again.
//!
//! When the cache is unreachable, reads are answered from MySQL; when MySQL is,
//! cached users are still answered and everything else is an error, never a guess.
//! Lists (newest first, paged) and follower counts come from MySQL's indexes: the
//! cache holds membership, not order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use relcache_protocol::idset::TableRef;

use super::store::{Cursor, FollowOutcome, Page, Relation, Store, StoreError, UnfollowOutcome};
use crate::{
    build_table, Cmd, Error as CacheError, Frame, LeaseOpts, Leased, LoadOpts, Pool, PooledConn,
};

/// How the service uses the cache.
#[derive(Clone, Debug)]
pub struct RelationsConfig {
    /// Cache key of a user's following set: this prefix, then the decimal id.
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
}

impl Default for RelationsConfig {
    fn default() -> Self {
        RelationsConfig {
            key_prefix: "following:".into(),
            cache_ttl: Some(Duration::from_secs(3600)),
            lease_ttl: Duration::from_secs(3),
            lease_wait: Duration::from_secs(2),
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
    /// Reads answered from MySQL without filling: someone else held the lease
    /// for longer than `lease_wait`.
    pub busy_reads: AtomicU64,
    /// Reads answered from MySQL because the cache failed.
    pub cache_errors: AtomicU64,
    /// Write-throughs that failed after the MySQL commit (the set is dropped if
    /// the cache can still be reached, and otherwise expires with `cache_ttl`).
    pub write_through_failures: AtomicU64,
}

/// The relation service over one cache node and the sharded MySQL store.
#[derive(Debug)]
pub struct Relations {
    cache: Pool,
    store: Store,
    config: RelationsConfig,
    stats: TierStats,
}

/// What a lease on a missed set led to.
enum Filled {
    /// Someone filled it meanwhile: ask the cache again.
    Present,
    /// The whole set, as MySQL has it now.
    Ids(Vec<u64>),
}

impl Relations {
    pub fn new(cache: Pool, store: Store, config: RelationsConfig) -> Relations {
        Relations {
            cache,
            store,
            config,
            stats: TierStats::default(),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn cache(&self) -> &Pool {
        &self.cache
    }

    pub fn stats(&self) -> &TierStats {
        &self.stats
    }

    /// The cache key holding `user`'s following set.
    pub fn cache_key(&self, user: u64) -> Bytes {
        let mut key = self.config.key_prefix.clone().into_bytes();
        key.extend_from_slice(itoa::Buffer::new().format(user).as_bytes());
        key.into()
    }

    // Writes.

    /// `a` follows `b`: MySQL first (both shards; see [`Store::follow`]), then the
    /// cached set of `a`, if there is one. Idempotent.
    ///
    /// # Errors
    ///
    /// [`RelationError::Store`] if MySQL failed before the follow committed; then
    /// nothing changed anywhere.
    pub async fn follow(&self, a: u64, b: u64) -> Result<FollowOutcome, RelationError> {
        let outcome = self.store.follow(a, b).await?;
        self.write_through(a, Cmd::idset_add_xx(self.cache_key(a), &[b]).map(drop))
            .await;
        Ok(outcome)
    }

    /// `a` no longer follows `b`. Idempotent.
    ///
    /// # Errors
    ///
    /// As [`follow`](Self::follow).
    pub async fn unfollow(&self, a: u64, b: u64) -> Result<UnfollowOutcome, RelationError> {
        let outcome = self.store.unfollow(a, b).await?;
        self.write_through(a, Cmd::idset_rem(self.cache_key(a), &[b]).map(drop))
            .await;
        Ok(outcome)
    }

    /// Applies a committed change to the cached set. If the cache cannot be told,
    /// the set must not outlive the change: it is deleted if the cache can still be
    /// reached, and otherwise expires with `cache_ttl`.
    async fn write_through(&self, user: u64, cmd: Cmd<()>) {
        if let Err(e) = self.cache.run(cmd).await {
            self.stats.write_through_failures.fetch_add(1, Relaxed);
            tracing::warn!(user, error = %e, "cache write-through failed; dropping the set");
            let _ = self.cache.run(Cmd::del(&[self.cache_key(user)])).await;
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
        let mut conn = match self.cache.get().await {
            Ok(conn) => conn,
            Err(e) => {
                self.cache_failed(&e);
                return Ok(self.store.which_followed(a, ids).await?);
            }
        };
        let read = Cmd::idset_mexistsbin_lease(self.cache_key(a), ids, self.lease_opts());
        match conn.run(read).await {
            Ok(Leased::Hit(bits)) => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                Ok(bits)
            }
            Ok(Leased::Granted(token)) => {
                let set = self.fill(&mut conn, a, token).await?;
                Ok(contains_each(&set, ids))
            }
            Ok(Leased::Busy) => {
                drop(conn);
                self.stats.busy_reads.fetch_add(1, Relaxed);
                Ok(self.store.which_followed(a, ids).await?)
            }
            Err(e) => {
                drop(conn);
                self.cache_failed(&e);
                Ok(self.store.which_followed(a, ids).await?)
            }
        }
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
        self.read_set(a, Cmd::idset_members, |ids| ids).await
    }

    /// A read of `user`'s whole set that answers nil when it is missing (`read`),
    /// or the same answer computed from the ids (`from_ids`) when the set had to be
    /// read from MySQL: by this caller as the lease holder, or because the cache
    /// failed or someone else's fill did not land in time.
    async fn read_set<T>(
        &self,
        user: u64,
        read: fn(Bytes) -> Cmd<Option<T>>,
        from_ids: fn(Vec<u64>) -> T,
    ) -> Result<T, RelationError> {
        for _ in 0..3 {
            match self.cache.run(read(self.cache_key(user))).await {
                Ok(Some(answer)) => {
                    self.stats.cache_hits.fetch_add(1, Relaxed);
                    return Ok(answer);
                }
                Ok(None) => {}
                Err(e) => {
                    self.cache_failed(&e);
                    return Ok(from_ids(self.store.following_ids(user).await?));
                }
            }
            if let Filled::Ids(ids) = self.lease_and_fill(user).await? {
                return Ok(from_ids(ids));
            }
        }
        // Filled and evicted again, three times over: the cache is thrashing.
        Ok(from_ids(self.store.following_ids(user).await?))
    }

    /// The users both `a` and `b` follow, ascending: intersected in the cache when
    /// both sets are there.
    ///
    /// # Errors
    ///
    /// As [`is_following`](Self::is_following).
    pub async fn common_following(&self, a: u64, b: u64) -> Result<Vec<u64>, RelationError> {
        let (ka, kb) = (self.cache_key(a), self.cache_key(b));
        // Both present and intersected atomically: SINTER alone would take a missing
        // set for an empty one.
        let cmd = |args: &[&[u8]]| args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        let batch: Vec<Vec<Bytes>> = vec![
            cmd(&[b"MULTI"]),
            cmd(&[b"EXISTS", &ka, &kb]),
            cmd(&[b"SINTER", &ka, &kb]),
            cmd(&[b"EXEC"]),
        ];
        match self.cache.pipeline(&batch).await {
            Ok(mut replies) => {
                if let Some(ids) = replies.pop().and_then(both_present_intersection) {
                    self.stats.cache_hits.fetch_add(2, Relaxed);
                    return Ok(ids);
                }
            }
            Err(e) => self.cache_failed(&e),
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
        let mut pending = candidates;
        // Round 1 asks the cache about everyone; round 2 about those whose sets
        // someone else filled meanwhile. What is left is read from MySQL.
        for _ in 0..2 {
            let keys: Vec<Bytes> = pending.iter().map(|&u| self.cache_key(u)).collect();
            let answers = match self.cache.run(Cmd::idset_which(x, &keys)).await {
                Ok(answers) => answers,
                Err(e) => {
                    self.cache_failed(&e);
                    break;
                }
            };
            let mut missing = Vec::new();
            for (&u, answer) in pending.iter().zip(answers) {
                match answer {
                    Some(true) => found.push(u),
                    Some(false) => {}
                    None => missing.push(u),
                }
            }
            self.stats
                .cache_hits
                .fetch_add((pending.len() - missing.len()) as u64, Relaxed);
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
        if !pending.is_empty() {
            let sets = self.store.following_ids_many(&pending).await?;
            found.extend(sets.iter().filter(|(_, s)| s.contains(&x)).map(|(u, _)| u));
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
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

    // Filling.

    /// Reads `user`'s set from MySQL and stores it under the lease `token`, on the
    /// connection that won the lease (see [`PooledConn::run`]). On a MySQL failure
    /// the lease is released, so waiters need not sit out its TTL.
    async fn fill(
        &self,
        conn: &mut PooledConn,
        user: u64,
        token: u64,
    ) -> Result<Vec<u64>, RelationError> {
        let key = self.cache_key(user);
        let ids = match self.store.following_ids(user).await {
            Ok(ids) => ids,
            Err(e) => {
                let _ = conn.run(Cmd::idset_release(key, token)).await;
                return Err(e.into());
            }
        };
        let opts = LoadOpts {
            ttl: self.config.cache_ttl,
            lease: Some(token),
        };
        // Whether the cache took the fill changes nothing for this caller, whose
        // answer comes from `ids` either way.
        match conn
            .run(Cmd::idset_load_table(key, build_table(&ids), opts))
            .await
        {
            Ok(true) => self.stats.cache_fills.fetch_add(1, Relaxed),
            Ok(false) => self.stats.fills_refused.fetch_add(1, Relaxed),
            Err(e) => {
                self.cache_failed(&e);
                0
            }
        };
        Ok(ids)
    }

    /// After a miss that did not ask for a lease: asks for it, waiting if someone
    /// else holds it, and fills the set if granted.
    async fn lease_and_fill(&self, user: u64) -> Result<Filled, RelationError> {
        let lease = match self.cache.get().await {
            Ok(mut conn) => {
                let lease = conn
                    .run(Cmd::idset_lease(self.cache_key(user), self.lease_opts()))
                    .await;
                if let Ok(Leased::Granted(token)) = lease {
                    return Ok(Filled::Ids(self.fill(&mut conn, user, token).await?));
                }
                lease
            }
            Err(e) => Err(e),
        };
        match lease {
            Ok(Leased::Hit(())) => Ok(Filled::Present),
            Ok(Leased::Granted(_)) => unreachable!("filled above"),
            Ok(Leased::Busy) => {
                self.stats.busy_reads.fetch_add(1, Relaxed);
                Ok(Filled::Ids(self.store.following_ids(user).await?))
            }
            Err(e) => {
                self.cache_failed(&e);
                Ok(Filled::Ids(self.store.following_ids(user).await?))
            }
        }
    }

    /// Fills many missing sets at once: leases asked for in one pipeline, the sets
    /// granted read in one MySQL query per shard and stored in one pipeline. Returns
    /// the sets read, and the users someone else holds a lease for or filled
    /// meanwhile (ask the cache again).
    async fn fill_many(
        &self,
        users: &[u64],
    ) -> Result<(HashMap<u64, Vec<u64>>, Vec<u64>), RelationError> {
        let opts = LeaseOpts {
            px: Some(self.config.lease_ttl),
            wait: None,
        };
        // One connection for the leases and the fills (see [`PooledConn::run`]).
        let mut conn = match self.cache.get().await {
            Ok(conn) => conn,
            Err(e) => {
                self.cache_failed(&e);
                return Ok((self.store.following_ids_many(users).await?, Vec::new()));
            }
        };
        let leases = conn
            .run_pipeline(
                users
                    .iter()
                    .map(|&u| Cmd::idset_lease(self.cache_key(u), opts))
                    .collect(),
            )
            .await;
        let leases = match leases {
            Ok(l) => l,
            Err(e) => {
                drop(conn);
                self.cache_failed(&e);
                return Ok((self.store.following_ids_many(users).await?, Vec::new()));
            }
        };
        let (mut granted, mut later) = (Vec::new(), Vec::new());
        for (&u, lease) in users.iter().zip(leases) {
            match lease {
                Ok(Leased::Granted(token)) => granted.push((u, token)),
                _ => later.push(u),
            }
        }
        let ids: Vec<u64> = granted.iter().map(|&(u, _)| u).collect();
        let sets = match self.store.following_ids_many(&ids).await {
            Ok(sets) => sets,
            Err(e) => {
                let release = granted
                    .iter()
                    .map(|&(u, t)| Cmd::idset_release(self.cache_key(u), t))
                    .collect();
                let _ = conn.run_pipeline(release).await;
                return Err(e.into());
            }
        };
        let load_opts = |token| LoadOpts {
            ttl: self.config.cache_ttl,
            lease: Some(token),
        };
        let fills = granted
            .iter()
            .map(|&(u, t)| {
                let set = sets.get(&u).map_or(&[][..], Vec::as_slice);
                Cmd::idset_load_table(self.cache_key(u), build_table(set), load_opts(t))
            })
            .collect();
        match conn.run_pipeline(fills).await {
            Ok(results) => {
                for r in results {
                    let counter = match r {
                        Ok(true) => &self.stats.cache_fills,
                        _ => &self.stats.fills_refused,
                    };
                    counter.fetch_add(1, Relaxed);
                }
            }
            Err(e) => self.cache_failed(&e),
        }
        Ok((sets, later))
    }

    fn cache_failed(&self, e: &CacheError) {
        self.stats.cache_errors.fetch_add(1, Relaxed);
        tracing::warn!(error = %e, "cache unavailable; answering from MySQL");
    }
}

/// Membership of each of `ids` in `set`, through the same table the cache holds.
fn contains_each(set: &[u64], ids: &[u64]) -> Vec<bool> {
    let table = build_table(set);
    let table = TableRef::open(&table).expect("a freshly built table is valid");
    ids.iter().map(|&id| table.contains(id)).collect()
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
