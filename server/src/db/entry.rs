//! One stored key: its value, its expiry and its recency.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use bytes::Bytes;

use super::{Error, IdSet};

/// A stored value. Each variant is one Redis type as `TYPE` reports it.
#[derive(Debug, Clone)]
pub enum Value {
    /// A string (also what `INCR` works on: Redis keeps integers as strings too).
    Str(Bytes),
    /// A set of `u64` ids (TYPE says `set`): what SADD, SET of a table and
    /// IDSET.LOAD store.
    IdSet(IdSet),
}

impl Value {
    /// The name `TYPE` replies with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::IdSet(_) => "set",
        }
    }

    /// The string's bytes, or [`Error::WrongType`].
    pub fn as_str(&self) -> Result<&Bytes, Error> {
        match self {
            Value::Str(b) => Ok(b),
            Value::IdSet(_) => Err(Error::WrongType),
        }
    }

    /// The idset, or [`Error::WrongType`].
    pub fn as_idset(&self) -> Result<&IdSet, Error> {
        match self {
            Value::IdSet(s) => Ok(s),
            _ => Err(Error::WrongType),
        }
    }

    /// The idset for an update, or [`Error::WrongType`].
    pub fn as_idset_mut(&mut self) -> Result<&mut IdSet, Error> {
        match self {
            Value::IdSet(s) => Ok(s),
            _ => Err(Error::WrongType),
        }
    }

    /// See [`Entry::is_big`]. A string a reply still holds (a GET of it being
    /// sent) frees nothing when dropped here: the reply frees it once written.
    pub fn is_big(&self) -> bool {
        match self {
            Value::Str(b) => b.len() >= LAZY_FREE_MIN && b.is_unique(),
            Value::IdSet(s) => s.heap_size() >= LAZY_FREE_MIN,
        }
    }

    /// Bytes of heap this value owns, for `MEMORY USAGE`.
    pub fn heap_size(&self) -> usize {
        match self {
            Value::Str(b) => b.len(),
            Value::IdSet(s) => s.heap_size(),
        }
    }
}

/// Values of this many heap bytes and more are freed off the loop: a free this
/// size costs a few hundred microseconds at most (unmapping is ~0.5 µs a page
/// here), while handing one to another thread costs a few microseconds. Below 32
/// MB a block is not mapped on its own (`alloc::tune_system_allocator`) and its free
/// is cheap, unless it takes its arena's free top past 64 MB and the arena is
/// trimmed; freeing those off the loop costs little, and keeps that trim off it too.
pub const LAZY_FREE_MIN: usize = 1 << 20;

/// A key's entry in its shard.
#[derive(Debug)]
pub struct Entry {
    value: Value,
    /// Absolute expiry in Unix milliseconds; 0 means the key never expires. Changed
    /// only through the shard, which also keeps its set of volatile keys.
    pub(super) expire_at: u64,
    /// The LRU clock ([`Db::lru_clock`](super::Db::lru_clock)) at the last access.
    /// Readers update it with a relaxed store while holding only a shared lock:
    /// recency is a hint, and a read must never need an exclusive lock.
    lru: AtomicU32,
}

impl Entry {
    pub(super) fn new(value: Value, expire_at: u64, now_lru: u32) -> Entry {
        Entry {
            value,
            expire_at,
            lru: AtomicU32::new(now_lru),
        }
    }

    /// Whether the value is big enough that freeing it could keep a loop, or a
    /// shard's lock, for a noticeable time: then it is freed off the loop
    /// ([`View::delete`](super::View::delete), expiry, eviction).
    pub fn is_big(&self) -> bool {
        self.value.is_big()
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn value_mut(&mut self) -> &mut Value {
        &mut self.value
    }

    pub fn into_value(self) -> Value {
        self.value
    }

    /// The expiry in Unix milliseconds, if any.
    pub fn expire_at(&self) -> Option<u64> {
        (self.expire_at != 0).then_some(self.expire_at)
    }

    pub(super) fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at != 0 && self.expire_at <= now_ms
    }

    /// Records an access. Skips the store when the clock has not moved, so a hot key
    /// read from many cores does not have its cache line written on every read.
    pub fn touch(&self, lru_clock: u32) {
        if self.lru.load(Relaxed) != lru_clock {
            self.lru.store(lru_clock, Relaxed);
        }
    }

    /// The LRU clock value of the last access.
    pub fn lru(&self) -> u32 {
        self.lru.load(Relaxed)
    }

    /// Milliseconds since the last access, given the current LRU clock (which
    /// wraps every 49 days). An access stamped up to a minute after `lru_clock`
    /// (another thread's clock a little ahead of the caller's) counts as idle for
    /// 0 ms, not 49 days.
    pub fn idle_ms(&self, lru_clock: u32) -> u64 {
        const AHEAD: u32 = 60_000;
        let d = lru_clock.wrapping_sub(self.lru());
        if d > u32::MAX - AHEAD {
            0
        } else {
            d as u64
        }
    }
}
