//! The keyspace: keys spread over independently locked shards.
//!
//! A key's shard is chosen by a fixed in-process hash of the key, so two commands on
//! different keys almost never contend. Each shard is a `parking_lot::RwLock`: reads
//! (GET, membership checks — the bulk of a relation cache's traffic) take it shared
//! and run in parallel on every core, even on one hot key; writes take it exclusive
//! for the short time a mutation needs. Work that can be done before taking a lock
//! (parsing, building or validating a table) is done before it.
//!
//! Commands reach the shards only through a [`View`], which locks every shard a
//! command (or a whole MULTI/EXEC transaction) touches, in ascending shard order so
//! two multi-key commands can never deadlock.

mod entry;
mod error;
pub mod evict;
pub mod expire;
mod idset;
mod key;
mod lease;
mod shard;
mod slots;
pub mod track;
mod view;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use ahash::RandomState;
use parking_lot::RwLock;

pub use entry::{Entry, Value, LAZY_FREE_MIN};
pub use error::Error;
pub use idset::{Change, IdSet, Order, TOTALS as IDSET_TOTALS};
pub use key::Key;
pub use lease::{Ended as LeasesEnded, LeaseState};
pub use shard::{Lookup, ShardMap, WatchFlag};
pub use view::{Free, LockMode, View};

/// Number of shards; a power of two so the shard index is a mask of the hash.
pub const SHARDS: usize = 256;

/// How keys are spread over the shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// By a fast in-process hash: standalone.
    Hash,
    /// By cluster hash slot, so a slot's keys all live in one shard and CLUSTER
    /// COUNTKEYSINSLOT / GETKEYSINSLOT, and dropping a lost slot, read one shard
    /// (1/256 of the keys) instead of all of them.
    BySlot,
}

/// The shard a cluster hash slot's keys live in.
pub fn slot_shard(slot: u16) -> usize {
    slot as usize & (SHARDS - 1)
}

/// A shard and a lock-free mirror of its key count (so INFO and DBSIZE never need
/// the locks, and cannot deadlock with a transaction holding them).
pub struct Shard {
    pub(crate) map: RwLock<ShardMap>,
    len: AtomicUsize,
    /// Who may hold a copy of which of its keys (client-side caching).
    pub(crate) tracked: track::Table,
}

/// The whole keyspace (database 0; relcache has no other).
pub struct Db {
    shards: Box<[Shard]>,
    placement: Placement,
    hasher: RandomState,
    /// Leases out across all shards: zero almost always, which lets a write skip
    /// looking for leases to revoke with one load.
    leases_out: AtomicUsize,
    lease_tokens: lease::Tokens,
    /// Changes to the keyspace since start (Redis's `server.dirty`): bumped by every
    /// write a view makes; a snapshot remembers the value it started at.
    pub dirty: crate::stats::Counter,
    /// Client-side caching: the tracking table and where invalidations go.
    pub tracking: track::Tracking,
    /// Keys at least one client WATCHes (INFO `total_watched_keys`), kept by
    /// [`View::watch`] and [`View::unwatch`] under the key's shard lock.
    pub(crate) watched_keys: AtomicUsize,
}

impl Default for Db {
    fn default() -> Self {
        Db::new()
    }
}

impl Db {
    pub fn new() -> Db {
        Db::placed(Placement::Hash)
    }

    /// A keyspace whose keys are placed in shards as `placement` says.
    pub fn placed(placement: Placement) -> Db {
        Db {
            placement,
            shards: (0..SHARDS)
                .map(|_| Shard {
                    map: RwLock::new(ShardMap::default()),
                    len: AtomicUsize::new(0),
                    tracked: track::Table::default(),
                })
                .collect(),
            // Fixed seeds: shard placement only has to be stable within one process,
            // and a fixed hasher keeps runs reproducible. Never used on the wire.
            hasher: RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ),
            leases_out: AtomicUsize::new(0),
            lease_tokens: lease::Tokens::new(now_ms()),
            dirty: crate::stats::Counter::default(),
            tracking: track::Tracking::default(),
            watched_keys: AtomicUsize::new(0),
        }
    }

    /// The shard index that owns `key`.
    pub fn shard_index(&self, key: &[u8]) -> usize {
        match self.placement {
            Placement::Hash => (self.hasher.hash_one(key) >> 32) as usize & (SHARDS - 1),
            Placement::BySlot => slot_shard(relcache_protocol::slot::key_slot(key)),
        }
    }

    pub(crate) fn shard(&self, idx: usize) -> &Shard {
        &self.shards[idx]
    }

    /// Number of keys (expired-but-not-yet-reclaimed included, as in Redis).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len.load(Relaxed)).sum()
    }

    /// Keys at least one client WATCHes.
    pub fn watched_keys(&self) -> usize {
        self.watched_keys.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys with an expiry (for INFO keyspace). Takes each shard's lock
    /// briefly; never call it from inside a command that holds a [`View`].
    pub fn volatile_len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| view::read_shard(&s.map).volatile_len())
            .sum()
    }

    /// Number of leases out (lapsed ones included until swept).
    pub fn leases_out(&self) -> usize {
        self.leases_out.load(Relaxed)
    }

    /// Forgets lapsed leases, skipping shards another thread holds; returns how
    /// many were forgotten. For the cron: a lease nobody asks about again would
    /// otherwise stay in memory.
    pub fn sweep_leases(&self) -> usize {
        if self.leases_out() == 0 {
            return 0;
        }
        let now = now_ms();
        let mut swept = 0;
        for shard in self.shards.iter() {
            if let Some(mut map) = shard.map.try_write() {
                if !map.leases.is_empty() {
                    swept += map.leases.sweep(now);
                }
            }
        }
        self.leases_out.fetch_sub(swept, Relaxed);
        swept
    }

    /// Shrinks the tables of shards that lost most of their keys (see
    /// `ShardMap::shrink`), each under its lock for the copy of what is left.
    /// A shard in use is passed over until the next call. Returns how many
    /// shards were shrunk.
    pub fn shrink_sparse(&self) -> usize {
        let mut shrunk = 0;
        for shard in self.shards.iter() {
            if !shard.map.try_read().is_some_and(|m| m.is_sparse()) {
                continue;
            }
            if let Some(mut map) = shard.map.try_write() {
                map.shrink();
                shrunk += 1;
            }
        }
        shrunk
    }

    /// The current LRU clock: Unix milliseconds, truncated to 32 bits. Entries store
    /// it on access and idle time is a wrapping difference, exact for idle times up
    /// to 49 days (Redis's 24-bit seconds clock wraps after 194 days but cannot order
    /// accesses within a second, which a replayed trace needs).
    pub fn lru_clock(&self) -> u32 {
        now_ms() as u32
    }

    /// A key of shard `idx` went without any client's command (expiry,
    /// eviction): whoever tracks it is told. The caller holds the shard.
    pub(crate) fn removed_by_server(&self, idx: usize, key: &[u8]) {
        if self.tracking.active() {
            self.tracking.changed(&self.shards[idx].tracked, key, 0);
        }
    }

    /// Drops keys from the tracking table until it holds at most `max` (0: no
    /// bound), telling their readers; at most `effort` keys per call, so a
    /// table far over the bound is brought down over several calls (Redis's
    /// `trackingLimitUsedSlots`). Returns how many keys went.
    pub fn shed_tracked(&self, max: usize, effort: usize) -> usize {
        let mut shed = 0;
        if max == 0 {
            return 0;
        }
        let start = rand::random::<usize>();
        for i in 0..SHARDS {
            let over = self.tracking.totals().0.saturating_sub(max);
            if shed >= effort || over == 0 {
                break;
            }
            let idx = (start + i) & (SHARDS - 1);
            // Exclusively, as any change, so a reader registering under the
            // shared lock cannot slip between the take and the message; and
            // never waiting, so the cron does not queue behind client work (a
            // busy shard is left for the next tick).
            let Some(_held) = self.shards[idx].map.try_write() else {
                continue;
            };
            shed += self
                .tracking
                .shed(&self.shards[idx].tracked, over.min(effort - shed));
        }
        shed
    }

    /// Locks the shards owning `keys` (all shards if `all`) and returns the view a
    /// command works through.
    pub fn view<'a, K: AsRef<[u8]>>(&'a self, keys: &[K], all: bool, mode: LockMode) -> View<'a> {
        if all {
            let idx: Vec<usize> = (0..SHARDS).collect();
            return View::lock(self, &idx, mode);
        }
        self.view_of(keys.iter().map(|k| k.as_ref()), mode)
    }

    /// Locks the shards owning `keys`; allocation-free for a handful of keys.
    pub fn view_of<'a, 'k>(
        &'a self,
        keys: impl Iterator<Item = &'k [u8]>,
        mode: LockMode,
    ) -> View<'a> {
        // Pushed, not collected: SmallVec's generic extend cost ~100 instructions
        // for the one key most commands have.
        let mut idx = smallvec::SmallVec::<[usize; 8]>::new();
        for k in keys {
            idx.push(self.shard_index(k));
        }
        if idx.len() > 1 {
            idx.sort_unstable();
            idx.dedup();
        }
        View::lock(self, &idx, mode)
    }
}

impl Db {
    /// Stores entries read from a snapshot at start, holding each shard's lock over
    /// a run of keys of that shard (a snapshot chunk is one shard's keys). Returns
    /// the first key that was already present: a snapshot holds each key once.
    pub fn restore<K: AsRef<[u8]>>(
        &self,
        entries: impl IntoIterator<Item = (K, Value, u64)>,
    ) -> Result<(), K> {
        let lru = self.lru_clock();
        let entries = entries.into_iter();
        // A snapshot's chunk is one shard's keys: room for all of them is made
        // once, where the first of them goes.
        let mut expected = entries.size_hint().0;
        let mut held: Option<(usize, parking_lot::RwLockWriteGuard<'_, ShardMap>)> = None;
        for (key, value, expire_at) in entries {
            let idx = self.shard_index(key.as_ref());
            let map = match &mut held {
                Some((i, g)) if *i == idx => g,
                _ => {
                    held = None;
                    let map = &mut held.insert((idx, self.shards[idx].map.write())).1;
                    map.reserve(std::mem::take(&mut expected));
                    map
                }
            };
            if map.insert(key.as_ref(), value, expire_at, lru).is_some() {
                return Err(key);
            }
            self.shards[idx].len.fetch_add(1, Relaxed);
        }
        Ok(())
    }
}

pub use crate::clock::now_ms;
