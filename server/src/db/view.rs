//! The locked part of the keyspace a command works on.
//!
//! A [`View`] holds the locks of every shard the command's keys live in (taken in
//! ascending order), and offers key-level operations that route to the right shard.
//! Asking a view for a key whose shard it did not lock is a bug in the command table
//! (its key positions are wrong) and panics in debug builds.

use std::cell::Cell;

use std::time::Duration;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use smallvec::SmallVec;

use std::sync::atomic::Ordering::Relaxed;

use super::track::ClientId;
use super::{now_ms, Db, Entry, LeaseState, LeasesEnded as Ended, Lookup, ShardMap, Value};

/// Whether a view's shards are locked shared (reads) or exclusive (writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    Read,
    Write,
}

enum Guard<'a> {
    Read(RwLockReadGuard<'a, ShardMap>),
    Write(RwLockWriteGuard<'a, ShardMap>),
}

/// Most commands touch one key: their guards fit inline, so taking a view does not
/// allocate.
type Guards<'a> = SmallVec<[(usize, Guard<'a>); 2]>;

pub struct View<'a> {
    db: &'a Db,
    /// (shard index, guard), sorted by shard index.
    guards: Guards<'a>,
    mode: LockMode,
    now_ms: u64,
    lru: u32,
    /// Keys removed because they had expired; the caller adds them to the stats.
    pub expired: u64,
    /// Which keys those were, for the caller to publish (keyspace notifications).
    /// Empty, and unallocated, unless a command met an expired key.
    pub expired_keys: Vec<super::Key>,
    hits: Cell<u64>,
    misses: Cell<u64>,
    /// The client whose command this is (0: the server's own work), for
    /// tracking's NOLOOP: a client may ask not to hear of its own writes.
    client: ClientId,
    /// Big values this command let go of that must be freed before it replies
    /// ([`Free::Now`]): freed once the locks are released, off the loop.
    /// (An `Option`, so a view that frees nothing drops it with one test.)
    garbage: Option<Vec<Value>>,
}

/// When a value a command lets go of is freed. Only a big one (see
/// [`Entry::is_big`]) is ever freed elsewhere than where it is dropped: unmapping
/// 400 MB takes ~50 ms, which nobody else should wait for — not the clients of the
/// command's loop, nor those of its shard's lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Free {
    /// Before the command replies (DEL, an overwrite, as Redis by default): after
    /// the view's locks are released, on a thread that takes over the loop's other
    /// clients meanwhile ([`crate::offload::offload`]).
    Now,
    /// On the lazy-free thread, whenever it gets there (UNLINK, expiry): the reply
    /// does not wait.
    Later,
}

/// How long a command waits for a shard on its worker thread before it steps off
/// it. Commands hold a shard for microseconds, but a holder the OS preempted keeps
/// it for a time slice (a few ms when clients and workers share the cores), and
/// stepping off costs a thread hand-over that buys nothing then. A hold longer
/// by design is MIGRATE's, through its exchange with the target.
const WAIT_IN_PLACE: Duration = Duration::from_millis(1);

/// Takes a shard's lock shared. A shard held for long is waited for under
/// [`crate::offload::offload`]: a worker blocked on a lock would stall every other
/// client the worker serves (with one worker, the whole server) for as long as the
/// holder keeps it.
pub(super) fn read_shard(lock: &RwLock<ShardMap>) -> RwLockReadGuard<'_, ShardMap> {
    if let Some(g) = lock.try_read_for(WAIT_IN_PLACE) {
        return g;
    }
    crate::offload::offload(|| lock.read())
}

/// Takes a shard's lock exclusive; see [`read_shard`].
pub(super) fn write_shard(lock: &RwLock<ShardMap>) -> RwLockWriteGuard<'_, ShardMap> {
    if let Some(g) = lock.try_write_for(WAIT_IN_PLACE) {
        return g;
    }
    crate::offload::offload(|| lock.write())
}

impl<'a> View<'a> {
    pub(super) fn lock(db: &'a Db, shards: &[usize], mode: LockMode) -> View<'a> {
        let mut guards = Guards::new();
        for &i in shards {
            let lock = &db.shard(i).map;
            let g = match mode {
                LockMode::Read => Guard::Read(read_shard(lock)),
                LockMode::Write => Guard::Write(write_shard(lock)),
            };
            guards.push((i, g));
        }
        // Taken after the locks: a command sees one instant for all its keys.
        let now = now_ms();
        View {
            db,
            guards,
            mode,
            now_ms: now,
            lru: now as u32,
            expired: 0,
            expired_keys: Vec::new(),
            hits: Cell::new(0),
            misses: Cell::new(0),
            client: 0,
            garbage: None,
        }
    }

    /// Lets go of a removed or replaced entry, freeing a big one as `how` says.
    fn discard(&mut self, e: Entry, how: Free) {
        self.free(e.into_value(), how);
    }

    /// Lets go of a value the command no longer needs (a set's table it has
    /// replaced), freeing a big one as `how` says.
    pub fn free(&mut self, value: Value, how: Free) {
        if !value.is_big() {
            return;
        }
        match how {
            Free::Now => self.garbage.get_or_insert_with(Vec::new).push(value),
            Free::Later => crate::offload::free_later(value),
        }
    }

    /// Names the client whose command works through this view.
    pub fn set_client(&mut self, id: ClientId) {
        self.client = id;
    }

    /// Registers `client` as holding a copy of `key`, read through this view
    /// (client-side caching; see `db::track`).
    pub fn track(&self, key: &[u8], client: ClientId) {
        let shard = self.db.shard(self.db.shard_index(key));
        self.db.tracking.remember(&shard.tracked, key, client);
    }

    /// Whether the shards are locked shared or exclusive.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// The time the command runs at, in Unix ms.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn db(&self) -> &'a Db {
        self.db
    }

    fn position(&self, key: &[u8]) -> usize {
        let idx = self.db.shard_index(key);
        match self.guards.binary_search_by_key(&idx, |(i, _)| *i) {
            Ok(p) => p,
            Err(_) => panic!("shard {idx} not locked for this command: key positions are wrong"),
        }
    }

    fn shard(&self, key: &[u8]) -> &ShardMap {
        match &self.guards[self.position(key)].1 {
            Guard::Read(g) => g,
            Guard::Write(g) => g,
        }
    }

    fn shard_mut(&mut self, key: &[u8]) -> (&mut ShardMap, &'a super::Shard) {
        shard_mut_of(self.db, &mut self.guards, key)
    }

    /// The live entry for `key`, for a read: records the access for LRU and counts a
    /// keyspace hit or miss.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        let Some(e) = self.shard(key).get(key, self.now_ms) else {
            self.misses.set(self.misses.get() + 1);
            self.expired_on_read(key);
            return None;
        };
        self.hits.set(self.hits.get() + 1);
        e.touch(self.lru);
        Some(e)
    }

    /// (keyspace hits, keyspace misses) counted by [`get`](Self::get).
    pub fn hits_misses(&self) -> (u64, u64) {
        (self.hits.get(), self.misses.get())
    }

    /// Like [`get`](Self::get) but without counting as an access (TYPE-like
    /// introspection, `OBJECT IDLETIME`).
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.shard(key).get(key, self.now_ms)
    }

    /// Like [`get`](Self::get) (counts a keyspace hit or miss) but leaves the key's
    /// recency alone: Redis's `LOOKUP_NOTOUCH` (EXISTS, TYPE, TTL, OBJECT).
    pub fn get_notouch(&self, key: &[u8]) -> Option<&Entry> {
        let e = self.shard(key).get(key, self.now_ms);
        let counter = if e.is_some() {
            &self.hits
        } else {
            self.expired_on_read(key);
            &self.misses
        };
        counter.set(counter.get() + 1);
        e
    }

    /// A read found `key` expired but, holding its shard shared, cannot remove
    /// it: whoever tracks it is told now rather than at the removal, which may be
    /// far off (Redis removes such a key, and tells them, on the read).
    fn expired_on_read(&self, key: &[u8]) {
        if self.db.tracking.active() && self.shard(key).holds_expired(key, self.now_ms) {
            changed(self.db, key, 0);
        }
    }

    /// Whether `key` exists (and has not expired).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.peek(key).is_some()
    }

    /// The live entry for `key`, to modify in place (watchers are told).
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let (now, lru, db, client) = (self.now_ms, self.lru, self.db, self.client);
        // Borrow only the guards, so the expired counter stays usable below.
        let (map, shard) = shard_mut_of(self.db, &mut self.guards, key);
        match map.get_mut(key, now) {
            Lookup::Live(e) => {
                e.touch(lru);
                db.dirty.incr();
                changed(db, key, client);
                Some(e)
            }
            Lookup::Expired => {
                shard.len.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                self.expired += 1;
                changed(db, key, 0);
                self.expired_keys.push(super::Key::copy_from(key));
                None
            }
            Lookup::Absent => None,
        }
    }

    /// Stores `value` under `key` with expiry `expire_at` (Unix ms, 0 = none),
    /// replacing any previous value and expiry. Returns whether a live key was
    /// replaced; its old value is freed before the command replies.
    pub fn insert(&mut self, key: &[u8], value: Value, expire_at: u64) -> bool {
        let (now, lru) = (self.now_ms, self.lru);
        let (map, shard) = self.shard_mut(key);
        let old = map.insert(key, value, expire_at, lru);
        self.db.dirty.incr();
        changed(self.db, key, self.client);
        match old {
            None => {
                shard.len.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                false
            }
            Some(e) if e.is_expired(now) => {
                // Replacing an expired key expires it first, as Redis's lookup
                // for a write does.
                self.expired += 1;
                self.expired_keys.push(super::Key::copy_from(key));
                self.discard(e, Free::Later);
                false
            }
            Some(e) => {
                self.discard(e, Free::Now);
                true
            }
        }
    }

    /// Removes `key`; returns the entry if it was live. Its value is the
    /// caller's to keep or drop (RENAME moves it, GETDEL replies with it); a
    /// caller that only deletes calls [`delete`](Self::delete).
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let now = self.now_ms;
        let (map, shard) = self.shard_mut(key);
        let e = map.remove(key)?;
        shard.len.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if e.is_expired(now) {
            self.expired += 1;
            changed(self.db, key, 0);
            self.expired_keys.push(super::Key::copy_from(key));
            self.discard(e, Free::Later);
            return None;
        }
        self.db.dirty.incr();
        changed(self.db, key, self.client);
        Some(e)
    }

    /// Deletes `key`, freeing its value as `how` says; whether it was live.
    pub fn delete(&mut self, key: &[u8], how: Free) -> bool {
        match self.remove(key) {
            Some(e) => {
                self.discard(e, how);
                true
            }
            None => false,
        }
    }

    /// Sets (Unix ms) or clears (0) the expiry of a live key; false if absent.
    pub fn set_expire(&mut self, key: &[u8], expire_at: u64) -> bool {
        if self.get_mut(key).is_none() {
            return false;
        }
        self.shard_mut(key).0.set_expire(key, expire_at)
    }

    /// Every locked shard, in shard order (keyspace-wide commands lock them all).
    pub fn shards(&self) -> impl Iterator<Item = (usize, &ShardMap)> {
        self.guards.iter().map(|(i, g)| {
            let m: &ShardMap = match g {
                Guard::Read(g) => g,
                Guard::Write(g) => g,
            };
            (*i, m)
        })
    }

    /// Removes every key in every locked shard; returns how many there were.
    pub fn clear_all(&mut self) -> usize {
        let db = self.db;
        let mut n = 0;
        for (i, g) in &mut self.guards {
            if let Guard::Write(g) = g {
                let cleared = g.clear();
                db.dirty.add(cleared as u64);
                n += cleared;
                db.shard(*i)
                    .len
                    .store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if db.tracking.active() {
            let tables = self.guards.iter().filter_map(|(i, g)| match g {
                Guard::Write(_) => Some(&db.shard(*i).tracked),
                Guard::Read(_) => None,
            });
            db.tracking.flushed(tables);
        }
        n
    }

    /// The lease on missing `key` (see `db::lease`).
    pub fn lease_state(&self, key: &[u8]) -> LeaseState {
        self.shard(key).leases.state(key, self.now_ms)
    }

    /// Grants a lease on `key` for `ttl_ms` and returns its token. Returns as well
    /// whether it replaced a lapsed lease.
    pub fn grant_lease(&mut self, key: &[u8], ttl_ms: u64) -> (u64, bool) {
        let db = self.db;
        let token = db.lease_tokens.next();
        let expires_at = self.now_ms.saturating_add(ttl_ms);
        let replaced = self.shard_mut(key).0.leases.grant(key, token, expires_at);
        if !replaced {
            db.leases_out.fetch_add(1, Relaxed);
        }
        (token, replaced)
    }

    /// Ends the live lease on `key` if `token` is its token (a fill or a release by
    /// the holder), waking whoever waits on it.
    pub fn end_lease(&mut self, key: &[u8], token: u64) -> bool {
        let (db, now) = (self.db, self.now_ms);
        let ended = self.shard_mut(key).0.leases.end(key, token, now);
        if ended {
            db.leases_out.fetch_sub(1, Relaxed);
        }
        ended
    }

    /// Revokes the leases on `keys` (a client wrote them), waking their waiters.
    /// Costs one atomic load when no lease is out anywhere, which is nearly always.
    pub fn revoke_leases<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>) -> Ended {
        let (db, now) = (self.db, self.now_ms);
        let mut ended = Ended::default();
        if db.leases_out.load(Relaxed) == 0 {
            return ended;
        }
        for key in keys {
            let (map, _) = shard_mut_of(db, &mut self.guards, key);
            if !map.leases.is_empty() {
                ended += map.leases.revoke(key, now);
            }
        }
        db.leases_out.fetch_sub(ended.total(), Relaxed);
        ended
    }

    /// Revokes every lease in the locked shards (FLUSHALL).
    pub fn revoke_all_leases(&mut self) -> Ended {
        let (db, now) = (self.db, self.now_ms);
        let mut ended = Ended::default();
        if db.leases_out.load(Relaxed) == 0 {
            return ended;
        }
        for (_, g) in &mut self.guards {
            if let Guard::Write(g) = g {
                ended += g.leases.revoke_all(now);
            }
        }
        db.leases_out.fetch_sub(ended.total(), Relaxed);
        ended
    }

    /// Revokes the leases on the locked shards' keys that `pick` selects.
    pub fn revoke_leases_where(&mut self, mut pick: impl FnMut(&[u8]) -> bool) -> Ended {
        let (db, now) = (self.db, self.now_ms);
        let mut ended = Ended::default();
        for (_, g) in &mut self.guards {
            if let Guard::Write(g) = g {
                ended += g.leases.revoke_where(now, &mut pick);
            }
        }
        db.leases_out.fetch_sub(ended.total(), Relaxed);
        ended
    }

    /// Registers a WATCH of `key` (needs a write-locked view).
    pub fn watch(&mut self, key: &[u8], flag: &super::WatchFlag) {
        if self.shard_mut(key).0.watch(key, flag) {
            self.db.watched_keys.fetch_add(1, Relaxed);
        }
    }

    /// Drops a WATCH of `key`.
    pub fn unwatch(&mut self, key: &[u8], flag: &super::WatchFlag) {
        if self.shard_mut(key).0.unwatch(key, flag) {
            self.db.watched_keys.fetch_sub(1, Relaxed);
        }
    }
}

/// Tells tracking that `key` changed, when any client tracks keys (one load
/// otherwise). The caller holds the key's shard exclusively.
#[inline]
fn changed(db: &Db, key: &[u8], client: ClientId) {
    if db.tracking.active() {
        db.tracking
            .changed(&db.shard(db.shard_index(key)).tracked, key, client);
    }
}

fn shard_mut_of<'g, 'a>(
    db: &'a Db,
    guards: &'g mut [(usize, Guard<'a>)],
    key: &[u8],
) -> (&'g mut ShardMap, &'a super::Shard) {
    let idx = db.shard_index(key);
    let p = match guards.binary_search_by_key(&idx, |(i, _)| *i) {
        Ok(p) => p,
        Err(_) => panic!("shard {idx} not locked for this command: key positions are wrong"),
    };
    match &mut guards[p].1 {
        Guard::Write(g) => (g, db.shard(idx)),
        Guard::Read(_) => panic!("write through a read-locked view: command flags are wrong"),
    }
}

impl Drop for View<'_> {
    /// Big values to be freed before the reply are freed here, once the locks
    /// are released (so no other command waits for the shards meanwhile), off
    /// the loop (so the loop's other clients do not wait either).
    fn drop(&mut self) {
        let Some(garbage) = self.garbage.take() else {
            return;
        };
        self.guards.clear();
        crate::offload::offload(move || drop(garbage));
    }
}
