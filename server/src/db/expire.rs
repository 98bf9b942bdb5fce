//! Active expiry: the sampled sweep Redis runs from its cron.
//!
//! Lazy expiry (an expired key reads as absent and is removed by the next write that
//! touches it) keeps answers exact; this sweep reclaims the memory of keys nobody
//! touches again. Each pass samples up to [`SAMPLE`] volatile keys per shard and keeps
//! sampling a shard while more than a quarter of its sample had expired, within a
//! time budget, so a burst of expiring keys is reclaimed quickly but a sweep never
//! holds a shard's lock for long. Shards are visited round-robin from where the last
//! pass stopped, so a budget cut does not starve the last shards.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rand::Rng;

use super::{now_ms, Db, SHARDS};

/// Volatile keys sampled per shard per round (Redis's ACTIVE_EXPIRE_CYCLE_KEYS_PER_LOOP).
pub const SAMPLE: usize = 20;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// What one sweep did and saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    pub removed: u64,
    /// Whether any visited shard had volatile keys.
    pub saw_volatile: bool,
    /// The remaining TTLs (ms) of the live keys sampled, summed, and their count:
    /// what INFO's `avg_ttl` is estimated from, as Redis does in this cycle.
    pub ttl_sum: u64,
    pub ttl_samples: u64,
    /// Rounds of sampling that found a live TTL: Redis 7.4 weighs the sweep's
    /// mean by them.
    pub ttl_rounds: u32,
}

/// Runs one sweep with the given time budget, telling `expired_key` each key it
/// removes while that key's shard is still locked (the server publishes it), so a
/// write that recreates the key cannot be reported before its expiry.
pub fn active_expire_cycle(db: &Db, budget: Duration, mut expired_key: impl FnMut(&[u8])) -> Sweep {
    let start = Instant::now();
    let mut rng = rand::thread_rng();
    let mut sweep = Sweep::default();
    let first = NEXT_SHARD.load(Relaxed);
    for n in 0..SHARDS {
        let idx = (first + n) % SHARDS;
        if start.elapsed() > budget {
            NEXT_SHARD.store(idx, Relaxed);
            return sweep;
        }
        let shard = db.shard(idx);
        loop {
            // try_write: a sweep must never queue behind (or ahead of) client work.
            let Some(mut map) = shard.map.try_write() else {
                break;
            };
            let vol = map.volatile_len();
            if vol == 0 {
                break;
            }
            sweep.saw_volatile = true;
            let now = now_ms();
            let mut expired = Vec::new();
            let samples_before = sweep.ttl_samples;
            for _ in 0..SAMPLE.min(vol) {
                let i = rng.gen_range(0..vol);
                let Some(key) = map.volatile_key(i) else {
                    continue;
                };
                match map.get(key, now) {
                    None => expired.push(key.clone()),
                    Some(entry) => {
                        if let Some(at) = entry.expire_at() {
                            sweep.ttl_sum += at.saturating_sub(now);
                            sweep.ttl_samples += 1;
                        }
                    }
                }
            }
            if sweep.ttl_samples > samples_before {
                sweep.ttl_rounds += 1;
            }
            expired.sort_unstable();
            expired.dedup();
            for key in &expired {
                if let Some(e) = map.remove(key) {
                    super::shard::free_expired(e);
                    shard.len.fetch_sub(1, Relaxed);
                    db.removed_by_server(idx, key);
                    sweep.removed += 1;
                    expired_key(key);
                }
            }
            // Keep going only while the shard looks dense with expired keys.
            if expired.len() * 4 <= SAMPLE.min(vol) || start.elapsed() > budget {
                break;
            }
        }
    }
    NEXT_SHARD.store(first, Relaxed);
    sweep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{LockMode, Value};
    use bytes::Bytes;

    #[test]
    fn sweep_reclaims_expired_keys_and_keeps_live_ones() {
        let db = Db::new();
        let past = now_ms() - 1;
        let keys: Vec<Vec<u8>> = (0..2000).map(|i| format!("k{i}").into_bytes()).collect();
        {
            let mut v = db.view(&keys, false, LockMode::Write);
            for (i, k) in keys.iter().enumerate() {
                let exp = if i % 2 == 0 {
                    past
                } else {
                    now_ms() + 3_600_000
                };
                v.insert(k, Value::Str(Bytes::from_static(b"v")), exp);
            }
        }
        assert_eq!(db.len(), 2000);
        let mut removed = 0;
        let mut told = Vec::new();
        for _ in 0..200 {
            let tell = |k: &[u8]| told.push(k.to_vec());
            removed += active_expire_cycle(&db, Duration::from_millis(50), tell).removed;
        }
        assert_eq!(told.len() as u64, removed, "each removed key is told once");
        let number = |k: &[u8]| {
            std::str::from_utf8(&k[1..])
                .unwrap()
                .parse::<usize>()
                .unwrap()
        };
        assert!(told.iter().all(|k| number(k) % 2 == 0), "only expired keys");
        // Sampling is probabilistic per shard, but 200 passes of a dense shard leave
        // essentially nothing; the live half must be untouched.
        assert!(removed >= 990, "removed {removed}");
        assert!(db.len() >= 1000 && db.len() <= 1010, "len {}", db.len());
        let v = db.view(&keys, false, LockMode::Read);
        assert!(keys.iter().skip(1).step_by(2).all(|k| v.get(k).is_some()));
        drop(v);
        // The live half has an hour left; the sample says so.
        let s = active_expire_cycle(&db, Duration::from_millis(50), |_| {});
        assert!(s.saw_volatile && s.ttl_samples > 0);
        let avg = s.ttl_sum / s.ttl_samples;
        assert!((3_500_000..=3_600_000).contains(&avg), "avg {avg}");
    }
}
