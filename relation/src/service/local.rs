//! The in-process cache of hot users' sets: whole idset tables, fetched from the
//! cache server on connections whose reads it tracks (`CLIENT TRACKING`, default
//! mode, invalidations redirected to one listener: see
//! [`relcache_client::tracking`]), kept until the server says the key changed, and
//! bounded by bytes, least recently used first. Off unless
//! [`RelationsConfig::local_cache`](super::RelationsConfig::local_cache) is set.
//!
//! A stale answer here is a wrong answer to "does A follow B?", so a table is kept
//! only when nothing could have changed it unseen:
//!
//! - **Invalidated while in flight.** The reply to a fetch and the invalidation of
//!   the key it read come on different connections, in either order. A fetch takes
//!   a [`Ticket`] before it asks; an invalidation of that user meanwhile bumps the
//!   user's version, and the reply is then used for this one answer but not kept.
//! - **Everything, when invalidations may have been missed**: the listener's
//!   session ended (its connection closed or went silent, the server restarted, a
//!   redirect broke), or the server was flushed. Dropping bumps a generation, and a
//!   ticket from an older generation keeps nothing.
//! - **This process's own writes.** Once a follow or unfollow's write-through is
//!   answered (or lost), the user's table is dropped here and any fetch in flight is
//!   refused, so a caller reads its own write: the next fetch reads the set after
//!   the write-through landed. Suspect sets (see `guard`) are never read here.
//!
//! Only users asked about [`admit_after`](LocalCacheConfig::admit_after) times
//! without a local copy are fetched: a table costs more on the wire than the bitmap
//! a single question gets, and the tracking table on the server grows with every
//! key fetched, so users asked about once stay on the ordinary path.
//!
//! What remains is the delivery time of an invalidation for another process's
//! write: between the server applying that write and the listener reading its
//! invalidation (one network hop), this process may still answer from the old
//! table — the same order of window that the cache server itself has between a
//! MySQL commit and its write-through.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use relcache_client::tracking::Why;
use relcache_client::{Cmd, Invalidation, PoolConfig, Tracker, TrackingConfig};
use relcache_protocol::idset::{validate, TableRef};

use super::restart::Standing;
use super::{Relations, TierStats};

/// How big the in-process cache may grow, and which users it holds.
#[derive(Clone, Debug)]
pub struct LocalCacheConfig {
    /// Bytes of tables held (the tables' own length); past it the least recently
    /// used are dropped. A table larger than this is never kept.
    pub max_bytes: usize,
    /// Questions about a user without a local copy before the user's table is
    /// fetched: 1 fetches on the first.
    pub admit_after: u32,
    /// Connections the tracked pool opens to the cache server.
    pub connections: usize,
    /// How often the invalidation listener checks that its connection is alive; a
    /// silent one is given up (and everything dropped) after this long.
    pub heartbeat: Duration,
}

impl Default for LocalCacheConfig {
    fn default() -> Self {
        LocalCacheConfig {
            max_bytes: 64 << 20,
            admit_after: 2,
            connections: 8,
            heartbeat: Duration::from_secs(1),
        }
    }
}

/// Users counted toward admission before the counts are forgotten (a doorkeeper,
/// as TinyLFU's): bounds its memory, and lets a user who was hot long ago start
/// over.
const DOORKEEPER: usize = 1 << 16;

/// The in-process cache and its listener.
pub(super) struct LocalCache {
    pub(super) tracker: Tracker,
    state: Arc<Mutex<State>>,
    admit_after: u32,
}

impl std::fmt::Debug for LocalCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("LocalCache")
            .field("entries", &state.entries.len())
            .field("bytes", &state.bytes)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry>,
    /// Last use → user, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
    bytes: usize,
    max_bytes: usize,
    /// Bumped whenever everything is dropped.
    generation: u64,
    /// Users with fetches in flight.
    pending: HashMap<u64, Pending>,
    /// Misses per user not yet admitted.
    misses: HashMap<u64, u32>,
}

struct Entry {
    table: Bytes,
    used: u64,
}

struct Pending {
    fetches: u32,
    /// Bumped by each invalidation of the user while fetches are in flight.
    version: u64,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // Every update leaves the state consistent before anything can panic.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn remove(&mut self, user: u64) -> bool {
        match self.entries.remove(&user) {
            Some(entry) => {
                self.lru.remove(&entry.used);
                self.bytes -= entry.table.len();
                true
            }
            None => false,
        }
    }

    fn invalidate(&mut self, user: u64) -> bool {
        if let Some(p) = self.pending.get_mut(&user) {
            p.version += 1;
        }
        self.remove(user)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.lru.clear();
        self.bytes = 0;
        self.generation += 1;
    }
}

/// A fetch in flight for one user: what the reply must still match to be kept.
pub(super) struct Ticket {
    state: Arc<Mutex<State>>,
    user: u64,
    generation: u64,
    version: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(p) = self.pending_mut(&mut state) {
            p.fetches -= 1;
            if p.fetches == 0 {
                state.pending.remove(&self.user);
            }
        }
    }
}

impl Ticket {
    fn pending_mut<'s>(&self, state: &'s mut State) -> Option<&'s mut Pending> {
        state.pending.get_mut(&self.user)
    }
}

impl LocalCache {
    /// Starts the listener (on the current tokio runtime). `pool` is the cache
    /// server's pool config; `prefix` what a user's key starts with.
    pub(super) fn start(
        config: &LocalCacheConfig,
        pool: &PoolConfig,
        prefix: &str,
        stats: Arc<TierStats>,
    ) -> LocalCache {
        let state = Arc::new(Mutex::new(State {
            max_bytes: config.max_bytes,
            ..State::default()
        }));
        let tracking = TrackingConfig {
            heartbeat: config.heartbeat,
            ..TrackingConfig::new(PoolConfig {
                max_connections: config.connections.max(1),
                ..pool.clone()
            })
        };
        let (listened, prefix) = (state.clone(), prefix.as_bytes().to_vec());
        let tracker = Tracker::start(tracking, move |inv| {
            let mut state = lock(&listened);
            match inv {
                Invalidation::Keys(keys) => {
                    for key in keys {
                        if let Some(user) = user_of(&prefix, &key) {
                            if state.invalidate(user) {
                                stats.local_invalidations.fetch_add(1, Relaxed);
                            }
                        }
                    }
                }
                Invalidation::All(why) => {
                    state.clear();
                    stats.local_flushes.fetch_add(1, Relaxed);
                    if why == Why::Flushed {
                        tracing::info!("cache server flushed; in-process cache dropped");
                    }
                }
            }
        });
        LocalCache {
            tracker,
            state,
            admit_after: config.admit_after.max(1),
        }
    }

    /// The user's table, if held here.
    pub(super) fn get(&self, user: u64) -> Option<Bytes> {
        let mut state = lock(&self.state);
        let State {
            entries, lru, tick, ..
        } = &mut *state;
        let entry = entries.get_mut(&user)?;
        lru.remove(&entry.used);
        *tick += 1;
        entry.used = *tick;
        lru.insert(*tick, user);
        Some(entry.table.clone())
    }

    /// Counts a question about a user held nowhere here; true once the user has
    /// been asked about often enough to fetch.
    pub(super) fn admit(&self, user: u64) -> bool {
        if self.admit_after <= 1 {
            return true;
        }
        let mut state = lock(&self.state);
        if state.misses.len() >= DOORKEEPER {
            state.misses.clear();
        }
        let n = state.misses.entry(user).or_insert(0);
        *n += 1;
        if *n >= self.admit_after {
            state.misses.remove(&user);
            return true;
        }
        false
    }

    /// Takes a ticket for a fetch of `user`'s table: to be taken before the
    /// tracked session is, and before the fetch is sent.
    pub(super) fn begin(&self, user: u64) -> Ticket {
        let mut state = lock(&self.state);
        let generation = state.generation;
        let p = state.pending.entry(user).or_insert(Pending {
            fetches: 0,
            version: 0,
        });
        p.fetches += 1;
        Ticket {
            state: self.state.clone(),
            user,
            generation,
            version: p.version,
        }
    }

    /// Keeps `table` (validated by the caller) as the user's, unless the user was
    /// invalidated or everything dropped since `ticket` was taken. True if kept.
    pub(super) fn keep(&self, ticket: Ticket, table: Bytes) -> bool {
        let mut state = lock(&self.state);
        let current = state.generation == ticket.generation
            && ticket
                .pending_mut(&mut state)
                .is_some_and(|p| p.version == ticket.version);
        if !current || table.len() > state.max_bytes {
            return false;
        }
        let user = ticket.user;
        state.remove(user);
        while state.bytes + table.len() > state.max_bytes {
            let Some((_, oldest)) = state.lru.pop_first() else {
                break;
            };
            let entry = state
                .entries
                .remove(&oldest)
                .expect("lru and entries agree");
            state.bytes -= entry.table.len();
        }
        state.tick += 1;
        let used = state.tick;
        state.bytes += table.len();
        state.lru.insert(used, user);
        state.entries.insert(user, Entry { table, used });
        true
    }

    /// Drops the user's table, and refuses the replies of fetches in flight.
    pub(super) fn invalidate(&self, user: u64) {
        lock(&self.state).invalidate(user);
    }

    /// Whether the user's table is held, without counting as a use.
    pub(super) fn holds(&self, user: u64) -> bool {
        lock(&self.state).entries.contains_key(&user)
    }

    /// Tables held and their bytes.
    pub(super) fn size(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.entries.len(), state.bytes)
    }
}

impl Relations {
    /// `answer` from `user`'s table in process, fetching it first (on a tracked
    /// connection) if the user is hot enough; `None` when the read must take the
    /// ordinary path: the in-process cache is off, the user's set is suspect or
    /// not hot yet, the listener is down, the cache server is down, restarted and
    /// not caught up, or does not hold the set.
    pub(super) async fn local_read<T>(
        &self,
        user: u64,
        answer: impl FnOnce(TableRef<'_>) -> T,
    ) -> Option<T> {
        let local = self.local.as_ref()?;
        if self.guard.is_suspect(user) {
            return None;
        }
        if let Some(table) = local.get(user) {
            self.stats.local_hits.fetch_add(1, Relaxed);
            return Some(answer(open(&table)));
        }
        self.stats.local_misses.fetch_add(1, Relaxed);
        if self.guard.is_down() || !local.admit(user) {
            return None;
        }
        // The ticket before the session: a session that ends after this point
        // drops everything after it, which the ticket then sees.
        let ticket = local.begin(user);
        let session = local.tracker.session()?;
        let mut conn = session.pool().get().await.ok()?;
        let limit = self.cache.pool_config().command_timeout;
        let run_id = tokio::time::timeout(limit, conn.server_run_id())
            .await
            .ok()?
            .ok()?;
        if run_id != *session.run_id() {
            // This connection reached another server process than the listener:
            // the listener's is gone, and its invalidations with it.
            local.tracker.end_session(&session);
            return None;
        }
        let (node, _) = self.cache.node_for(&self.cache_key(user));
        if self.restarts.standing(&node, &run_id) != Standing::Trusted {
            // Not caught up yet (or not met): the ordinary path deals with it.
            return None;
        }
        let table = self
            .call(&mut conn, Cmd::idset_table(self.cache_key(user)))
            .await
            .ok()?;
        if conn.tracking_redirect_broken() {
            local.tracker.end_session(&session);
            return None;
        }
        // Not cached on the server: the ordinary path fills it.
        let table = table?;
        let value = match validate(&table) {
            Ok(t) => answer(t),
            Err(e) => {
                tracing::warn!(user, error = %e, "cache server sent an invalid table");
                return None;
            }
        };
        let counter = match local.keep(ticket, table) {
            true => &self.stats.local_fetches,
            false => &self.stats.local_fetches_discarded,
        };
        counter.fetch_add(1, Relaxed);
        self.stats.cache_hits.fetch_add(1, Relaxed);
        Some(value)
    }

    /// `answer` from `user`'s table if it is held in process, without fetching.
    pub(super) fn local_held<T>(
        &self,
        user: u64,
        answer: impl FnOnce(TableRef<'_>) -> T,
    ) -> Option<T> {
        let table = self.local.as_ref()?.get(user)?;
        self.stats.local_hits.fetch_add(1, Relaxed);
        Some(answer(open(&table)))
    }

    /// Drops `user`'s table from the in-process cache, and refuses fetches in
    /// flight: this process changed the set.
    pub(super) fn forget_local(&self, user: u64) {
        if let Some(local) = &self.local {
            local.invalidate(user);
        }
    }
}

/// A table kept here: validated when it was fetched.
fn open(table: &[u8]) -> TableRef<'_> {
    TableRef::open(table).expect("tables are validated before they are kept")
}

/// The user whose key `key` is, if it is one: `prefix` then a decimal id.
fn user_of(prefix: &[u8], key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max_bytes: usize, admit_after: u32) -> LocalCache {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _enter = rt.enter();
        let config = LocalCacheConfig {
            max_bytes,
            admit_after,
            ..LocalCacheConfig::default()
        };
        // Nothing listens on port 1: the listener only retries, which these tests
        // never let run.
        let pool = PoolConfig {
            addr: "127.0.0.1:1".into(),
            ..PoolConfig::default()
        };
        LocalCache::start(&config, &pool, "following:", Arc::default())
    }

    fn table(n: usize) -> Bytes {
        Bytes::from(vec![0u8; n])
    }

    #[test]
    fn a_fetch_invalidated_in_flight_is_not_kept() {
        let c = cache(1000, 1);
        let t = c.begin(7);
        c.invalidate(7);
        assert!(!c.keep(t, table(10)));
        assert!(c.get(7).is_none());
        // A fetch begun after the invalidation is kept.
        let t = c.begin(7);
        assert!(c.keep(t, table(10)));
        assert_eq!(c.get(7).unwrap().len(), 10);
        // And invalidating drops it.
        c.invalidate(7);
        assert!(c.get(7).is_none());
    }

    #[test]
    fn dropping_everything_refuses_fetches_in_flight() {
        let c = cache(1000, 1);
        let kept = c.begin(1);
        assert!(c.keep(kept, table(10)));
        let t = c.begin(2);
        lock(&c.state).clear();
        assert!(!c.keep(t, table(10)));
        assert!(c.get(1).is_none());
        assert_eq!(c.size(), (0, 0));
        // Two fetches of one user: the invalidation refuses both.
        let (a, b) = (c.begin(3), c.begin(3));
        c.invalidate(3);
        assert!(!c.keep(a, table(1)));
        assert!(!c.keep(b, table(1)));
        assert!(lock(&c.state).pending.is_empty(), "tickets cleaned up");
    }

    #[test]
    fn the_least_recently_used_go_first_within_the_byte_bound() {
        let c = cache(100, 1);
        for user in 1..=3 {
            let t = c.begin(user);
            assert!(c.keep(t, table(40)));
        }
        // 1 was evicted for 3; touching 2 makes 3 the oldest.
        assert!(c.get(1).is_none());
        assert!(c.get(2).is_some());
        let t = c.begin(4);
        assert!(c.keep(t, table(40)));
        assert!(c.get(3).is_none());
        assert!(c.get(2).is_some() && c.get(4).is_some());
        assert_eq!(c.size(), (2, 80));
        let t = c.begin(5);
        assert!(!c.keep(t, table(101)), "larger than the whole cache");
    }

    #[test]
    fn users_are_fetched_on_their_nth_miss() {
        let c = cache(100, 3);
        assert!(!c.admit(9));
        assert!(!c.admit(9));
        assert!(c.admit(9));
        assert!(!c.admit(9), "counting starts over once admitted");
    }

    #[test]
    fn keys_map_back_to_users() {
        assert_eq!(user_of(b"following:", b"following:42"), Some(42));
        assert_eq!(user_of(b"following:", b"following:caught-up"), None);
        assert_eq!(user_of(b"following:", b"following:"), None);
        assert_eq!(user_of(b"following:", b"other:42"), None);
    }
}
