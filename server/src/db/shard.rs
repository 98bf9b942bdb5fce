//! One shard of the keyspace: a map from key to entry, plus the indexes the
//! background jobs need (volatile keys for active expiry, watched keys for WATCH).
//!
//! Storage only: no sockets, no replies. A shard is always used under its lock (see
//! `db::view`); the methods here assume the caller holds it.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use ahash::RandomState;
use bytes::Bytes;
use indexmap::{IndexMap, IndexSet};

use super::entry::{Entry, Value};
use super::key::Key;
use super::lease::Leases;

/// A cleared shard with more keys than this is freed on the lazy-free thread
/// (Redis's `LAZYFREE_THRESHOLD` is 64 allocations).
const INLINE_FREE_MAX: usize = 64;

/// A table holding keys in fewer than one of every `SPARSE` places it has room
/// for is shrunk ([`ShardMap::shrink`]), as Redis resizes a dict under a tenth
/// full: a keyspace emptied by DEL, expiry or eviction otherwise kept the room of
/// its largest size (29 MB of empty tables after 200,000 keys went, where the
/// server started at 3 MB).
const SPARSE: usize = 10;
/// Tables with room for fewer keys than this are left as they are: too little to
/// be worth a copy.
const SHRINK_MIN_CAPACITY: usize = 64;

fn sparse(capacity: usize, len: usize) -> bool {
    capacity >= SHRINK_MIN_CAPACITY && len * SPARSE < capacity
}

/// What a WATCHing connection shares with the shards: set when a watched key changes.
pub type WatchFlag = Arc<AtomicBool>;

#[derive(Default)]
pub struct ShardMap {
    /// `IndexMap` rather than a plain hash map: dense storage gives O(1) random
    /// sampling (RANDOMKEY, eviction) and a position-based SCAN cursor.
    map: IndexMap<Key, Entry, RandomState>,
    /// Keys with an expiry, for the active expiry cycle's random sampling.
    volatile: IndexSet<Key, RandomState>,
    /// Keys some connection WATCHes, and the flags to raise when they change.
    watched: ahash::HashMap<Bytes, Vec<WatchFlag>>,
    /// Leases out on missing keys of this shard (see `db::lease`).
    pub(super) leases: Leases,
}

impl ShardMap {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Number of keys with an expiry.
    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    /// The live entry for `key`; an expired one reads as absent.
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        self.map.get(key).filter(|e| !e.is_expired(now_ms))
    }

    /// Whether `key` is there but expired (a read sees it as absent).
    pub fn holds_expired(&self, key: &[u8], now_ms: u64) -> bool {
        self.map.get(key).is_some_and(|e| e.is_expired(now_ms))
    }

    /// The live entry for `key`, for modification: an expired entry is removed first
    /// (returned as `Expired` so the caller can count it), and watchers of the key are
    /// told it changed.
    pub fn get_mut(&mut self, key: &[u8], now_ms: u64) -> Lookup<'_> {
        let Some(idx) = self.map.get_index_of(key) else {
            return Lookup::Absent;
        };
        if self.map[idx].is_expired(now_ms) {
            if let Some(e) = self.remove(key) {
                free_expired(e);
            }
            return Lookup::Expired;
        }
        self.touch_watched(key);
        Lookup::Live(&mut self.map[idx])
    }

    /// Stores `value` under `key`, replacing any previous entry (and its expiry).
    /// `expire_at` is Unix ms, 0 for none. Returns the old entry.
    pub fn insert(&mut self, key: &[u8], value: Value, expire_at: u64, lru: u32) -> Option<Entry> {
        self.touch_watched(key);
        let entry = Entry::new(value, expire_at, lru);
        let old = match self.map.get_full_mut(key) {
            Some((_, stored_key, slot)) => {
                let stored_key = stored_key.clone();
                let old = std::mem::replace(slot, entry);
                self.index_expiry(&stored_key, old.expire_at, expire_at);
                return Some(old);
            }
            None => None,
        };
        // Copy the key: the caller's bytes are a slice of a connection's read buffer,
        // and keeping a reference would pin that whole buffer for the key's lifetime.
        let owned = Key::copy_from(key);
        if expire_at != 0 {
            self.volatile.insert(owned.clone());
        }
        self.map.insert(owned, entry);
        old
    }

    /// Makes room for `additional` more keys at once (a bulk load), rather than
    /// growing the table step by step.
    pub fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// Whether a table of the shard has far more room than keys (see [`SPARSE`]).
    pub fn is_sparse(&self) -> bool {
        sparse(self.map.capacity(), self.map.len())
            || sparse(self.volatile.capacity(), self.volatile.len())
            || sparse(self.watched.capacity(), self.watched.len())
    }

    /// Gives back the room of sparse tables, keeping twice what they hold so
    /// that the next keys do not grow them again at once. Positions stay as they
    /// are, so a SCAN cursor means what it meant.
    pub fn shrink(&mut self) {
        if sparse(self.map.capacity(), self.map.len()) {
            self.map.shrink_to(self.map.len() * 2);
        }
        if sparse(self.volatile.capacity(), self.volatile.len()) {
            self.volatile.shrink_to(self.volatile.len() * 2);
        }
        if sparse(self.watched.capacity(), self.watched.len()) {
            self.watched.shrink_to(self.watched.len() * 2);
        }
    }

    /// Removes `key`, expired or not.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let (_, k, entry) = self.map.swap_remove_full(key)?;
        if entry.expire_at != 0 {
            self.volatile.swap_remove(&k);
        }
        self.touch_watched(key);
        Some(entry)
    }

    /// Sets or clears (`0`) the expiry of an existing key. Returns false if absent.
    pub fn set_expire(&mut self, key: &[u8], expire_at: u64) -> bool {
        let Some((_, k, entry)) = self.map.get_full_mut(key) else {
            return false;
        };
        let (old, k) = (entry.expire_at, k.clone());
        entry.expire_at = expire_at;
        self.index_expiry(&k, old, expire_at);
        self.touch_watched(key);
        true
    }

    fn index_expiry(&mut self, key: &Key, old: u64, new: u64) {
        match (old != 0, new != 0) {
            (false, true) => {
                self.volatile.insert(key.clone());
            }
            (true, false) => {
                self.volatile.swap_remove(key);
            }
            _ => {}
        }
    }

    /// Removes every key. Returns how many there were.
    ///
    /// Only watchers of keys that were there are told, as in Redis 7: a flush
    /// changes nothing for a watched key that did not exist, so it must not abort
    /// that client's transaction.
    pub fn clear(&mut self) -> usize {
        let n = self.map.len();
        for (key, flags) in &self.watched {
            if self.map.contains_key(&key[..]) {
                flags.iter().for_each(|f| f.store(true, Relaxed));
            }
        }
        // A shard of a big keyspace holds thousands of entries: freeing them all
        // here would keep a FLUSHALL's worker from its other clients.
        let old = (
            std::mem::take(&mut self.map),
            std::mem::take(&mut self.volatile),
        );
        if n > INLINE_FREE_MAX || old.0.values().any(Entry::is_big) {
            crate::offload::free_later(old);
        }
        n
    }

    /// The entry at dense position `idx` (SCAN, RANDOMKEY, sampling).
    pub fn get_index(&self, idx: usize) -> Option<(&Key, &Entry)> {
        self.map.get_index(idx)
    }

    /// A volatile key at dense position `idx` of the expiry index.
    pub fn volatile_key(&self, idx: usize) -> Option<&Key> {
        self.volatile.get_index(idx)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Entry)> {
        self.map.iter()
    }

    /// Registers `flag` to be raised when `key` changes; true if nobody watched
    /// `key` before (INFO's `total_watched_keys` counts such keys).
    pub fn watch(&mut self, key: &[u8], flag: &WatchFlag) -> bool {
        let list = self.watched.entry(Bytes::copy_from_slice(key)).or_default();
        let first = list.is_empty();
        if !list.iter().any(|f| Arc::ptr_eq(f, flag)) {
            list.push(flag.clone());
        }
        first
    }

    /// Forgets `flag` for `key`; true if that was `key`'s last watcher.
    pub fn unwatch(&mut self, key: &[u8], flag: &WatchFlag) -> bool {
        if let Some(list) = self.watched.get_mut(key) {
            list.retain(|f| !Arc::ptr_eq(f, flag));
            if list.is_empty() {
                self.watched.remove(key);
                return true;
            }
        }
        false
    }

    fn touch_watched(&self, key: &[u8]) {
        // The common case — nobody watches anything in this shard — costs one branch.
        if self.watched.is_empty() {
            return;
        }
        if let Some(list) = self.watched.get(key) {
            list.iter().for_each(|f| f.store(true, Relaxed));
        }
    }
}

/// The result of [`ShardMap::get_mut`].
pub enum Lookup<'a> {
    Live(&'a mut Entry),
    /// The key had expired and has just been removed.
    Expired,
    Absent,
}

/// Lets go of an entry removed because it expired: a big one is freed on the
/// lazy-free thread (nobody waits for an expired key's memory), not under the
/// shard's lock.
pub(super) fn free_expired(e: Entry) {
    if e.is_big() {
        crate::offload::free_later(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(Bytes::copy_from_slice(v.as_bytes()))
    }

    #[test]
    fn expiry_index_follows_entries() {
        let mut m = ShardMap::default();
        m.insert(b"a", s("1"), 100, 0);
        m.insert(b"b", s("2"), 0, 0);
        assert_eq!(m.volatile_len(), 1);
        assert!(m.get(b"a", 99).is_some());
        assert!(m.get(b"a", 100).is_none(), "expired at its deadline");
        m.insert(b"a", s("3"), 0, 0);
        assert_eq!(m.volatile_len(), 0, "a plain SET clears the TTL");
        assert!(m.set_expire(b"b", 50));
        assert_eq!(m.volatile_len(), 1);
        assert!(matches!(m.get_mut(b"b", 60), Lookup::Expired));
        assert_eq!((m.len(), m.volatile_len()), (1, 0));
    }

    #[test]
    fn watchers_are_flagged_on_change_only_for_their_key() {
        let mut m = ShardMap::default();
        let flag: WatchFlag = Arc::default();
        m.watch(b"k", &flag);
        m.insert(b"other", s("x"), 0, 0);
        assert!(!flag.load(Relaxed));
        m.insert(b"k", s("x"), 0, 0);
        assert!(flag.load(Relaxed));
        flag.store(false, Relaxed);
        m.unwatch(b"k", &flag);
        m.remove(b"k");
        assert!(!flag.load(Relaxed));
    }

    #[test]
    fn a_table_left_mostly_empty_gives_its_room_back_and_keeps_its_order() {
        let mut m = ShardMap::default();
        for i in 0..10_000 {
            m.insert(format!("k{i}").as_bytes(), s("v"), 1 + i as u64, 0);
        }
        assert!(!m.is_sparse());
        for i in 0..9_500 {
            m.remove(format!("k{i}").as_bytes());
        }
        assert!(m.is_sparse());
        let before: Vec<Key> = m.iter().map(|(k, _)| k.clone()).collect();
        let room = m.map.capacity();
        m.shrink();
        assert!(!m.is_sparse());
        assert!(
            m.map.capacity() * 5 < room,
            "{} of {room}",
            m.map.capacity()
        );
        assert!(m.volatile.capacity() < 2_000);
        assert!(m.map.capacity() >= 1_000, "twice the keys left stay");
        let after: Vec<Key> = m.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(before, after, "dense positions (SCAN's cursor) unchanged");
        assert_eq!(m.volatile_len(), 500);
        assert!(m.get(b"k9999", 0).is_some());
    }

    #[test]
    fn a_flush_flags_watchers_of_keys_that_were_there_only() {
        let mut m = ShardMap::default();
        let (there, missing): (WatchFlag, WatchFlag) = (Arc::default(), Arc::default());
        m.insert(b"k", s("x"), 0, 0);
        m.watch(b"k", &there);
        m.watch(b"nokey", &missing);
        assert_eq!(m.clear(), 1);
        assert!(there.load(Relaxed));
        assert!(!missing.load(Relaxed));
    }
}
