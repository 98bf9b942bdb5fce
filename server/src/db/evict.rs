//! Eviction under `maxmemory`: which keys go when memory runs out.
//!
//! Approximated LRU the way Redis does it, with two refinements. Each round samples
//! `maxmemory-samples` random keys (a random shard, then a random dense position —
//! O(1) thanks to the shards' `IndexMap`s) under shared locks, and merges them into a
//! small pool of the best candidates seen so far (the idlest, or the soonest to
//! expire); the best candidate is then evicted under its shard's exclusive lock. The
//! pool carries good candidates across rounds, which is what brings sampling close to
//! exact LRU. Refinements: recency is kept in milliseconds (Redis: seconds), so
//! accesses within the same second are still ordered; and a candidate whose key was
//! read since it was sampled is dropped instead of evicted.
//!
//! Reads never pay for any of this: an access is one relaxed store to the entry's
//! clock (see `Entry::touch`). Eviction runs before a command takes its own locks,
//! so it can never remove a key in the middle of a command that uses it, and the
//! evicted values are freed after the shard lock is released.

use parking_lot::Mutex;
use rand::Rng;

use super::{Db, Entry, Key, SHARDS};
use crate::config::EvictionPolicy as Policy;

/// What the evictor asks of a policy (the type itself is configuration).
impl Policy {
    fn volatile_only(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru | Policy::VolatileRandom | Policy::VolatileTtl
        )
    }

    fn random(self) -> bool {
        matches!(self, Policy::AllKeysRandom | Policy::VolatileRandom)
    }
}

/// Candidates kept between rounds (Redis's EVPOOL_SIZE).
const POOL_SIZE: usize = 16;
/// Rounds in a row that may find nothing before giving up.
const MAX_EMPTY_ROUNDS: usize = 8;

struct Candidate {
    /// Higher goes first: idle ms for LRU, time left inverted for TTL.
    score: u64,
    shard: usize,
    key: Key,
}

/// The eviction pool, shared by every connection that needs room.
#[derive(Default)]
pub struct Evictor {
    pool: Mutex<Vec<Candidate>>,
}

impl Evictor {
    /// Evicts keys while `over()` says memory is still over the limit, telling
    /// `evicted` each key once its shard lock is released (the server publishes
    /// it). Returns the number of keys evicted and whether it had to stop with
    /// memory still over (no key the policy may evict).
    pub fn evict(
        &self,
        db: &Db,
        policy: Policy,
        samples: usize,
        mut over: impl FnMut() -> bool,
        mut evicted_key: impl FnMut(&[u8]),
    ) -> (u64, bool) {
        if policy == Policy::NoEviction {
            return (0, over());
        }
        let mut evicted = 0;
        let mut empty_rounds = 0;
        while over() {
            let victim = if policy.random() {
                self.random_victim(db, policy)
            } else {
                self.pooled_victim(db, policy, samples.max(1))
            };
            match victim {
                Some((key, entry)) => {
                    // Freed here, after the shard lock was released, and before
                    // the memory is looked at again. A big one is freed off the
                    // loop, so only the writer that needs the room waits for it.
                    if entry.is_big() {
                        crate::offload::offload(move || drop(entry));
                    } else {
                        drop(entry);
                    }
                    evicted_key(&key);
                    evicted += 1;
                    empty_rounds = 0;
                }
                None => {
                    empty_rounds += 1;
                    if empty_rounds >= MAX_EMPTY_ROUNDS {
                        return (evicted, true);
                    }
                }
            }
        }
        (evicted, false)
    }

    fn random_victim(&self, db: &Db, policy: Policy) -> Option<(Key, Entry)> {
        let mut rng = rand::thread_rng();
        let start = rng.gen_range(0..SHARDS);
        for n in 0..SHARDS {
            let idx = (start + n) % SHARDS;
            let shard = db.shard(idx);
            let Some(mut map) = shard.map.try_write() else {
                continue;
            };
            let key = if policy.volatile_only() {
                let len = map.volatile_len();
                (len > 0)
                    .then(|| map.volatile_key(rng.gen_range(0..len)).cloned())
                    .flatten()
            } else {
                let len = map.len();
                (len > 0)
                    .then(|| map.get_index(rng.gen_range(0..len)).map(|(k, _)| k.clone()))
                    .flatten()
            };
            if let Some(key) = key {
                let entry = map.remove(&key);
                if entry.is_some() {
                    shard.len.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    db.removed_by_server(idx, &key);
                }
                return entry.map(|e| (key, e));
            }
        }
        None
    }

    fn pooled_victim(&self, db: &Db, policy: Policy, samples: usize) -> Option<(Key, Entry)> {
        let mut pool = self.pool.lock();
        self.sample_into(&mut pool, db, policy, samples);
        // Best candidates are at the end.
        while let Some(c) = pool.pop() {
            let shard = db.shard(c.shard);
            let Some(mut map) = shard.map.try_write() else {
                continue;
            };
            let now = super::now_ms();
            // Expired but not yet swept is evicted like any other key, as
            // Redis's pool does: a keyspace of such keys is not "nothing to
            // evict".
            let Some(entry) = map.get(&c.key, 0) else {
                continue;
            };
            if policy.volatile_only() && entry.expire_at().is_none() {
                continue;
            }
            if policy == Policy::VolatileLru || policy == Policy::AllKeysLru {
                // Read since sampled: no longer the idlest we know of.
                if entry.idle_ms(now as u32) + 1000 < c.score {
                    continue;
                }
            }
            let entry = map.remove(&c.key);
            if entry.is_some() {
                shard.len.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                db.removed_by_server(c.shard, &c.key);
            }
            return entry.map(|e| (c.key, e));
        }
        None
    }

    fn sample_into(&self, pool: &mut Vec<Candidate>, db: &Db, policy: Policy, samples: usize) {
        let mut rng = rand::thread_rng();
        let now = super::now_ms();
        for _ in 0..samples {
            // A random shard, or the next one that has something to offer: with few
            // (volatile) keys most shards are empty, and a round must still find them.
            let start = rng.gen_range(0..SHARDS);
            let found = (0..SHARDS).find_map(|n| {
                let idx = (start + n) % SHARDS;
                let map = db.shard(idx).map.try_read()?;
                let len = if policy.volatile_only() {
                    map.volatile_len()
                } else {
                    map.len()
                };
                (len > 0).then_some((idx, map, len))
            });
            let Some((idx, map, len)) = found else { return };
            let picked = if policy.volatile_only() {
                map.volatile_key(rng.gen_range(0..len))
                    .and_then(|k| map.get(k, 0).map(|e| (k, e)))
            } else {
                map.get_index(rng.gen_range(0..len))
            };
            let Some((key, entry)) = picked else { continue };
            let score = match policy {
                Policy::VolatileTtl => u64::MAX - entry.expire_at().unwrap_or(u64::MAX),
                _ => entry.idle_ms(now as u32),
            };
            if pool.iter().any(|c| c.shard == idx && c.key == *key) {
                continue;
            }
            if pool.len() == POOL_SIZE {
                if pool[0].score >= score {
                    continue;
                }
                pool.remove(0);
            }
            let at = pool.partition_point(|c| c.score < score);
            pool.insert(
                at,
                Candidate {
                    score,
                    shard: idx,
                    key: key.clone(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{LockMode, Value};
    use bytes::Bytes;

    fn fill(db: &Db, n: usize, ttl_every: usize) -> Vec<Vec<u8>> {
        let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i}").into_bytes()).collect();
        let mut v = db.view(&keys, false, LockMode::Write);
        for (i, k) in keys.iter().enumerate() {
            let exp = if ttl_every > 0 && i % ttl_every == 0 {
                super::super::now_ms() + 1_000_000 + i as u64
            } else {
                0
            };
            v.insert(k, Value::Str(Bytes::from_static(b"v")), exp);
        }
        keys
    }

    #[test]
    fn lru_prefers_keys_not_read_recently() {
        let db = Db::new();
        let keys = fill(&db, 2000, 0);
        std::thread::sleep(std::time::Duration::from_millis(30));
        // Read the first half: they become recent.
        {
            let v = db.view(&keys[..1000], false, LockMode::Read);
            keys[..1000]
                .iter()
                .for_each(|k| assert!(v.get(k).is_some()));
        }
        let ev = Evictor::default();
        let mut left = 500;
        let mut told = Vec::new();
        let (n, stuck) = ev.evict(
            &db,
            Policy::AllKeysLru,
            5,
            || {
                left -= 1;
                left >= 0
            },
            |k| told.push(k.to_vec()),
        );
        assert_eq!((n, stuck), (500, false));
        assert_eq!(told.len(), 500, "each evicted key is told once");
        let v = db.view(&keys, false, LockMode::Read);
        let recent_kept = keys[..1000].iter().filter(|k| v.peek(k).is_some()).count();
        let old_kept = keys[1000..].iter().filter(|k| v.peek(k).is_some()).count();
        // With a pool, nearly every victim comes from the idle half.
        assert!(recent_kept >= 990, "recent kept {recent_kept}");
        assert!(old_kept <= 510, "old kept {old_kept}");
    }

    #[test]
    fn keys_expired_but_not_swept_are_evicted_not_a_reason_to_stop() {
        let db = Db::new();
        let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("k{i}").into_bytes()).collect();
        {
            let mut v = db.view(&keys, false, LockMode::Write);
            for k in &keys {
                v.insert(k, Value::Str(Bytes::from_static(b"v")), 1);
            }
        }
        for policy in [Policy::AllKeysLru, Policy::VolatileTtl] {
            let ev = Evictor::default();
            let (n, stuck) = ev.evict(&db, policy, 5, || db.len() > 100, |_| {});
            assert_eq!((n, stuck), (100, false), "{policy:?}");
            let (n, stuck) = ev.evict(&db, policy, 5, || !db.is_empty(), |_| {});
            assert_eq!((n, stuck), (100, false), "{policy:?}");
            let mut v = db.view(&keys, false, LockMode::Write);
            for k in &keys {
                v.insert(k, Value::Str(Bytes::from_static(b"v")), 1);
            }
        }
    }

    #[test]
    fn volatile_policies_touch_only_keys_with_ttl_and_report_when_stuck() {
        let db = Db::new();
        let keys = fill(&db, 100, 10); // 10 keys with a TTL
        let ev = Evictor::default();
        let (n, stuck) = ev.evict(
            &db,
            Policy::VolatileTtl,
            5,
            || db.volatile_len() > 0,
            |_| {},
        );
        assert_eq!((n, stuck), (10, false));
        assert_eq!(db.len(), 90);
        let (n, stuck) = ev.evict(&db, Policy::VolatileLru, 5, || true, |_| {});
        assert_eq!((n, stuck), (0, true), "nothing volatile left to evict");
        let (n, _) = ev.evict(&db, Policy::AllKeysRandom, 5, || db.len() > 50, |_| {});
        assert_eq!(n, 40);
        let _ = keys;
    }
}
