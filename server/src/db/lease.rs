//! Leases on missing keys: the read-through fill protocol of "Scaling Memcache at
//! Facebook" (NSDI '13), adapted to whole-set fills.
//!
//! When a key is missing, the first caller to ask is granted a lease: a token that
//! entitles it to fill the key. Callers missing the same key while the lease is out
//! are told the key is being filled, and can wait for it instead of all reading the
//! database. Any client write to the key revokes the lease, so a filler that read the
//! database before a write committed cannot store what it read afterwards: its fill
//! carries a token that no longer matches, and is refused. A lease also lapses after
//! its time-to-live, so a filler that crashed blocks nobody for long.
//!
//! Storage only. Each shard keeps the leases of its keys next to the keys themselves,
//! under the same lock; the rules about which commands grant, end and revoke leases
//! live in `cmd::lease` and in the command context.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ahash::RandomState;
use bytes::Bytes;
use tokio::sync::watch;

/// One outstanding lease.
struct Lease {
    token: u64,
    /// Unix ms after which the lease has lapsed.
    expires_at: u64,
    /// Dropped when the lease ends for any reason, which wakes every caller parked
    /// on it; lapsing wakes nobody, so waiters also set a timer for `expires_at`.
    ended: watch::Sender<()>,
}

/// What a lookup found.
pub enum LeaseState {
    /// No lease is out (or the one that was has lapsed).
    Free,
    /// A lease is out until `expires_at` (Unix ms); `ended` fires when it ends.
    Held {
        expires_at: u64,
        ended: watch::Receiver<()>,
    },
}

/// The leases of one shard's keys.
#[derive(Default)]
pub struct Leases {
    map: std::collections::HashMap<Bytes, Lease, RandomState>,
}

impl Leases {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The lease on `key` as of `now` (Unix ms).
    pub fn state(&self, key: &[u8], now: u64) -> LeaseState {
        match self.map.get(key) {
            Some(l) if l.expires_at > now => LeaseState::Held {
                expires_at: l.expires_at,
                ended: l.ended.subscribe(),
            },
            _ => LeaseState::Free,
        }
    }

    /// Grants a lease on `key` with `token` until `expires_at`, replacing a lapsed
    /// one. Returns true if a lapsed lease was replaced.
    pub fn grant(&mut self, key: &[u8], token: u64, expires_at: u64) -> bool {
        let lease = Lease {
            token,
            expires_at,
            ended: watch::Sender::new(()),
        };
        self.map
            .insert(Bytes::copy_from_slice(key), lease)
            .is_some()
    }

    /// Ends the lease on `key` if it is live and carries `token` (a fill or a
    /// release by its holder). Waiters are woken.
    pub fn end(&mut self, key: &[u8], token: u64, now: u64) -> bool {
        match self.map.get(key) {
            Some(l) if l.token == token && l.expires_at > now => {
                self.map.remove(key);
                true
            }
            _ => false,
        }
    }

    /// Revokes any lease on `key` (a write to it), as of `now`.
    pub fn revoke(&mut self, key: &[u8], now: u64) -> Ended {
        match self.map.remove(key) {
            None => Ended::default(),
            Some(l) => Ended::one(l.expires_at > now),
        }
    }

    /// Revokes every lease (FLUSHALL), as of `now`.
    pub fn revoke_all(&mut self, now: u64) -> Ended {
        let mut ended = Ended::default();
        for (_, l) in self.map.drain() {
            ended += Ended::one(l.expires_at > now);
        }
        ended
    }

    /// Revokes the leases on keys `pick` selects (the keys of a slot that starts
    /// moving to another node), as of `now`.
    pub fn revoke_where(&mut self, now: u64, mut pick: impl FnMut(&[u8]) -> bool) -> Ended {
        let mut ended = Ended::default();
        self.map.retain(|k, l| {
            if !pick(k) {
                return true;
            }
            ended += Ended::one(l.expires_at > now);
            false
        });
        ended
    }

    /// Forgets leases that lapsed before `now`; returns how many.
    pub fn sweep(&mut self, now: u64) -> usize {
        let before = self.map.len();
        self.map.retain(|_, l| l.expires_at > now);
        before - self.map.len()
    }
}

/// Leases removed by a revocation: those still live (revoked), and those that had
/// lapsed already and were only waiting for the sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    pub revoked: usize,
    pub lapsed: usize,
}

impl Ended {
    fn one(live: bool) -> Ended {
        Ended {
            revoked: usize::from(live),
            lapsed: usize::from(!live),
        }
    }

    pub fn total(self) -> usize {
        self.revoked + self.lapsed
    }
}

impl std::ops::AddAssign for Ended {
    fn add_assign(&mut self, o: Ended) {
        self.revoked += o.revoked;
        self.lapsed += o.lapsed;
    }
}

/// Issues lease tokens: unique for the life of the process and, because the sequence
/// starts from the clock, across restarts too, so a filler holding a token from a
/// previous incarnation of the server can never match a new lease. Never 0, which
/// the lease commands use to say "the key is present".
pub struct Tokens(AtomicU64);

impl Tokens {
    pub fn new(now_ms: u64) -> Tokens {
        // 2^20 tokens per millisecond of uptime before the sequence could meet the
        // starting point of a server started later.
        Tokens(AtomicU64::new((now_ms << 20) | 1))
    }

    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_ends_only_with_its_own_token_and_before_it_lapses() {
        let mut l = Leases::default();
        assert!(!l.grant(b"k", 7, 1000));
        assert!(!l.end(b"k", 8, 10), "another token");
        assert!(!l.end(b"k", 7, 1000), "lapsed at its deadline");
        assert!(matches!(l.state(b"k", 999), LeaseState::Held { .. }));
        assert!(l.end(b"k", 7, 999));
        assert!(matches!(l.state(b"k", 0), LeaseState::Free));
    }

    #[test]
    fn ending_or_revoking_wakes_waiters() {
        let mut l = Leases::default();
        l.grant(b"k", 1, 100);
        let LeaseState::Held { ended, .. } = l.state(b"k", 0) else {
            panic!("lease is out")
        };
        assert!(
            ended.has_changed().is_ok(),
            "sender alive while the lease is out"
        );
        assert_eq!(l.revoke(b"k", 0).revoked, 1);
        assert!(ended.has_changed().is_err(), "revoking drops the sender");
        assert_eq!(l.revoke(b"k", 0).total(), 0);
        l.grant(b"k", 2, 100);
        assert_eq!(l.revoke(b"k", 100).lapsed, 1, "lapsed at its deadline");
    }

    #[test]
    fn sweep_forgets_lapsed_leases_only() {
        let mut l = Leases::default();
        l.grant(b"a", 1, 10);
        l.grant(b"b", 2, 20);
        assert_eq!(l.sweep(15), 1);
        assert_eq!(l.len(), 1);
        assert!(l.grant(b"b", 3, 30), "replaces the old entry");
        l.grant(b"c", 4, 25);
        let ended = l.revoke_all(26);
        assert_eq!((ended.revoked, ended.lapsed), (1, 1));
        assert!(l.is_empty());
    }

    #[test]
    fn tokens_are_unique_and_never_zero() {
        let t = Tokens::new(0);
        let (a, b) = (t.next(), t.next());
        assert!(a != 0 && b != 0 && a != b);
        assert!(Tokens::new(5).next() > Tokens::new(4).next() + 1000);
    }
}
