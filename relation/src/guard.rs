//! What the relation service knows about its cache beyond any one call: whether the
//! cache is answering at all, and which cached sets it may no longer trust because a
//! change committed in MySQL never reached them.
//!
//! - **A cache that keeps failing is skipped for a while.** After `failure_limit`
//!   consecutive transport failures (connection refused or reset, a timeout) the
//!   cache is *down*: reads go straight to MySQL instead of each waiting out a
//!   timeout first. Every `retry_interval` one caller is let through as a probe; the
//!   first call that succeeds brings the cache back. (mcrouter's TKO and twemproxy's
//!   `server_failure_limit` / `server_retry_timeout` are the same idea.)
//! - **A set whose write-through was lost is suspect until its key is deleted.**
//!   When a follow commits in MySQL but the cache could not be told (the call
//!   failed, or the cache was down), a cached copy of the follower's set — if there
//!   is one — lacks the change. That user is *suspect*: the service reads their set
//!   from MySQL, never from the cache, until a `DEL` of the key has succeeded; the
//!   service sends it ahead of its next cache call once the cache answers. Each lost
//!   change bumps the user's generation, so a `DEL` that was in flight when a newer
//!   change was lost clears only what it covered.
//!
//! - **A set whose change may still be on its way to MySQL is suspect until it has
//!   landed or not.** A `COMMIT` sent but never answered, or a follow whose caller
//!   gave up midway, may commit later: deleting the set right away would let a read
//!   refill it from the state before that commit. Such a user is *pinned* suspect:
//!   no `DEL` is sent for it until the service has seen the write's locks released
//!   in MySQL (the change landed or rolled back) and unpins it.
//!
//! Over a cluster the service keeps one guard per node for health (a node that is
//! down is skipped, the others asked as usual) and this list on one guard of its
//! own: a user is suspect wherever their set lives (see `service::cache`).
//!
//! The suspect list lives in this process: another service process may read a
//! stale set until the `DEL` lands, and if this process dies first the set's TTL is
//! what bounds it. The list is bounded (`max_suspects`); a lost change past the
//! bound is reported to the caller, who can only count it.
//!
//! Synchronous and socket-free: the service asks before a call and reports after.
//! While the cache is healthy and nothing is suspect, every question is answered
//! from atomic flags and takes no lock, so calls on many cores share no written
//! cache line. Once something is wrong, one `std` mutex guards the state: each
//! critical section is a few field updates with no await inside.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Acquire, Ordering::Release};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a user's set is suspect.
#[derive(Debug, Clone, Copy, Default)]
struct Suspect {
    /// Of the newest lost change: a `DEL` clears only up to it.
    generation: u64,
    /// Writes still in doubt: no `DEL` until they are settled.
    pinned: u32,
}

/// Cache health and the suspect sets; see the module docs.
#[derive(Debug)]
pub(crate) struct Guard {
    failure_limit: u32,
    retry_interval: Duration,
    max_suspects: usize,
    /// Mirrors of `state` for the lock-free healthy path, written only under the
    /// lock: a failure was seen since the last success…
    troubled: AtomicBool,
    /// …the cache is down…
    down: AtomicBool,
    /// …and how many users are suspect.
    suspect_count: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Transport failures since the last success.
    failures: u32,
    /// While the cache is down: when the next probe may go.
    retry_at: Option<Instant>,
    /// Users whose cached set may lack a committed change.
    suspects: HashMap<u64, Suspect>,
    generation: u64,
    /// A caller is deleting suspect keys; others need not send the same `DEL`.
    clearing: bool,
}

impl Guard {
    pub fn new(failure_limit: u32, retry_interval: Duration, max_suspects: usize) -> Guard {
        Guard {
            failure_limit: failure_limit.max(1),
            retry_interval,
            max_suspects,
            troubled: AtomicBool::new(false),
            down: AtomicBool::new(false),
            suspect_count: AtomicUsize::new(0),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding this lock cannot leave the fields
        // inconsistent (each update is a single assignment), so a poisoned lock is
        // still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a call may use the cache now. While the cache is down this answers
    /// true once per `retry_interval`: that call is the probe.
    pub fn admit(&self, now: Instant) -> bool {
        if !self.down.load(Acquire) {
            return true;
        }
        let mut s = self.state();
        match s.retry_at {
            None => true,
            Some(at) if now >= at => {
                // Push the next probe out now, so a probe whose caller is cancelled
                // before it reports does not leave the cache down for good.
                s.retry_at = Some(now + self.retry_interval);
                true
            }
            Some(_) => false,
        }
    }

    /// The cache answered (any reply, errors included).
    pub fn succeeded(&self) {
        if !self.troubled.load(Acquire) {
            return;
        }
        let mut s = self.state();
        s.failures = 0;
        s.retry_at = None;
        self.down.store(false, Release);
        self.troubled.store(false, Release);
    }

    /// A call failed in transport. Answers true if the cache is down now.
    pub fn failed(&self, now: Instant) -> bool {
        let mut s = self.state();
        s.failures = s.failures.saturating_add(1);
        if s.failures >= self.failure_limit || s.retry_at.is_some() {
            s.retry_at = Some(now + self.retry_interval);
        }
        let down = s.retry_at.is_some();
        self.troubled.store(true, Release);
        self.down.store(down, Release);
        down
    }

    /// Whether the cache is down: calls skip it, but for a probe now and then.
    pub fn is_down(&self) -> bool {
        self.down.load(Acquire)
    }

    /// `user`'s cached set may lack a committed change. Answers false if the list is
    /// full and the user could not be added.
    pub fn suspect(&self, user: u64) -> bool {
        self.mark(user, false)
    }

    /// `user`'s cached set may lack a change whose commit is still in doubt: the
    /// set is suspect, and not to be deleted until [`settled`](Self::settled).
    /// Answers false if the list is full and the user could not be added.
    pub fn suspect_in_doubt(&self, user: u64) -> bool {
        self.mark(user, true)
    }

    /// A write in doubt on `user`'s set has landed or rolled back: once no other is
    /// in doubt, the set may be deleted (and then trusted again).
    pub fn settled(&self, user: u64) {
        let mut s = self.state();
        s.generation += 1;
        let generation = s.generation;
        if let Some(suspect) = s.suspects.get_mut(&user) {
            suspect.pinned = suspect.pinned.saturating_sub(1);
            // The DEL must come after the write settled, not before.
            suspect.generation = generation;
        }
    }

    fn mark(&self, user: u64, in_doubt: bool) -> bool {
        let mut s = self.state();
        if s.suspects.len() >= self.max_suspects && !s.suspects.contains_key(&user) {
            return false;
        }
        s.generation += 1;
        let generation = s.generation;
        let suspect = s.suspects.entry(user).or_default();
        suspect.generation = generation;
        suspect.pinned += u32::from(in_doubt);
        self.suspect_count.store(s.suspects.len(), Release);
        true
    }

    pub fn is_suspect(&self, user: u64) -> bool {
        self.suspects() > 0 && self.state().suspects.contains_key(&user)
    }

    pub fn suspects(&self) -> usize {
        self.suspect_count.load(Acquire)
    }

    /// Up to `max` suspect users for this caller to delete, unless there are none or
    /// another caller is already at it. Dropping the batch without
    /// [`Clearing::done`] leaves every user suspect.
    pub fn clearing(&self, max: usize) -> Option<Clearing<'_>> {
        if self.suspects() == 0 {
            return None;
        }
        let mut s = self.state();
        if s.clearing || s.suspects.is_empty() {
            return None;
        }
        let batch: Vec<(u64, u64)> = s
            .suspects
            .iter()
            .filter(|(_, suspect)| suspect.pinned == 0)
            .take(max)
            .map(|(&u, suspect)| (u, suspect.generation))
            .collect();
        if batch.is_empty() {
            return None;
        }
        s.clearing = true;
        Some(Clearing { guard: self, batch })
    }
}

/// Suspect users being deleted from the cache by one caller.
#[must_use = "dropped without done(), every user stays suspect"]
pub(crate) struct Clearing<'a> {
    guard: &'a Guard,
    batch: Vec<(u64, u64)>,
}

impl Clearing<'_> {
    pub fn users(&self) -> impl Iterator<Item = u64> + '_ {
        self.batch.iter().map(|&(u, _)| u)
    }

    /// Their keys are deleted: each user is trusted again unless a newer change was
    /// lost meanwhile. Answers how many were cleared.
    pub fn done(self) -> usize {
        let mut s = self.guard.state();
        let before = s.suspects.len();
        for &(user, generation) in &self.batch {
            let current = s.suspects.get(&user);
            if current.is_some_and(|c| c.generation == generation && c.pinned == 0) {
                s.suspects.remove(&user);
            }
        }
        self.guard.suspect_count.store(s.suspects.len(), Release);
        before - s.suspects.len()
    }
}

impl Drop for Clearing<'_> {
    fn drop(&mut self) {
        self.guard.state().clearing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_cache_goes_down_after_the_limit_and_is_probed_once_per_interval() {
        let g = Guard::new(3, SEC, 10);
        let t0 = Instant::now();
        assert!(g.admit(t0));
        assert!(!g.failed(t0));
        assert!(!g.failed(t0));
        g.succeeded();
        assert!(!g.failed(t0), "a success resets the count");
        assert!(!g.failed(t0));
        assert!(g.failed(t0), "third consecutive failure");
        assert!(g.is_down());
        assert!(!g.admit(t0 + SEC / 2), "skipped within the interval");
        assert!(g.admit(t0 + SEC), "one probe when it is up");
        assert!(!g.admit(t0 + SEC), "only one");
        assert!(g.failed(t0 + SEC), "a failed probe keeps it down");
        assert!(!g.admit(t0 + SEC + SEC / 2));
        assert!(g.admit(t0 + 2 * SEC));
        g.succeeded();
        assert!(!g.is_down());
        assert!(g.admit(t0 + 2 * SEC));
    }

    #[test]
    fn a_probe_whose_caller_vanished_is_retried_after_another_interval() {
        let g = Guard::new(1, SEC, 10);
        let t0 = Instant::now();
        g.failed(t0);
        assert!(g.admit(t0 + SEC), "probe, never reported");
        assert!(!g.admit(t0 + SEC + SEC / 2));
        assert!(g.admit(t0 + 2 * SEC), "the next probe");
    }

    #[test]
    fn suspects_clear_only_up_to_the_generation_deleted() {
        let g = Guard::new(1, SEC, 10);
        assert!(g.suspect(1) && g.suspect(2));
        let batch = g.clearing(10).expect("suspects to clear");
        assert!(g.clearing(10).is_none(), "one clearer at a time");
        let mut users: Vec<u64> = batch.users().collect();
        users.sort_unstable();
        assert_eq!(users, [1, 2]);
        assert!(g.suspect(2), "a newer change to 2 is lost meanwhile");
        assert_eq!(batch.done(), 1);
        assert!(!g.is_suspect(1));
        assert!(g.is_suspect(2), "the DEL may have run before that change");
        let batch = g.clearing(10).expect("2 is left");
        drop(batch);
        assert!(g.is_suspect(2), "an abandoned batch clears nothing");
        assert_eq!(g.clearing(1).map(Clearing::done), Some(1));
        assert_eq!(g.suspects(), 0);
        assert!(g.clearing(10).is_none());
    }

    #[test]
    fn a_set_in_doubt_is_not_deleted_until_its_write_settles() {
        let g = Guard::new(1, SEC, 10);
        assert!(g.suspect_in_doubt(7));
        assert!(g.is_suspect(7));
        assert!(g.clearing(10).is_none(), "no DEL while the commit may land");
        assert!(g.suspect_in_doubt(7), "a second write in doubt");
        g.settled(7);
        assert!(g.clearing(10).is_none(), "one is still in doubt");
        g.settled(7);
        let batch = g.clearing(10).expect("deletable now");
        assert_eq!(batch.users().collect::<Vec<_>>(), [7]);
        assert_eq!(batch.done(), 1);
        assert!(!g.is_suspect(7));
        // A DEL taken before the write settled clears nothing.
        assert!(g.suspect(8));
        let early = g.clearing(10).unwrap();
        assert!(g.suspect_in_doubt(8));
        g.settled(8);
        assert_eq!(early.done(), 0, "the DEL predates the settlement");
        assert!(g.is_suspect(8));
    }

    #[test]
    fn the_suspect_list_is_bounded() {
        let g = Guard::new(1, SEC, 2);
        assert!(g.suspect(1) && g.suspect(2));
        assert!(!g.suspect(3), "full");
        assert!(g.suspect(2), "one already listed can still be bumped");
        assert_eq!(g.suspects(), 2);
    }
}
