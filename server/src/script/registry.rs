//! The scripts running now, as other connections see them: which shards each
//! holds, whether a command that needs one of those waits for the script or hears
//! BUSY, and SCRIPT KILL.
//!
//! Kept by shard, each shard's list under a lock of its own on a cache line of its
//! own: a script registers in the lists of the shards it holds, and a command reads
//! the lists of the shards it needs. Two loops running scripts over different keys
//! then share no lock and write no line in common but the count of running
//! scripts. One list under one mutex for the whole server had every script's start
//! and end on either loop queue on the other's, a fifth of a short EVAL's server
//! CPU with two loops (the mutex's waits are futex sleeps and wake-ups).
//!
//! A script that may touch any key holds every shard, and is in every list. Locks
//! over several lists are taken in shard order, and nothing else is locked while
//! they are held, so no two lockers wait on each other.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::db::SHARDS;

/// A script running now, as other connections see it.
#[derive(Debug)]
pub struct Running {
    /// The client running it (its own connection is never told BUSY).
    pub client: u64,
    pub started: Instant,
    /// The shards it holds, in order, each once; `None` for every shard.
    pub shards: Option<Vec<usize>>,
    /// Raised by SCRIPT KILL; the instruction hook stops the script.
    pub killed: AtomicBool,
    /// Set once it ran a write: it can no longer be killed without breaking
    /// atomicity.
    pub wrote: AtomicBool,
}

/// A script registered as running; dropping it (after its locks are gone) ends
/// it, and wakes whoever waits, even if the run unwound.
pub struct Registered<'r> {
    registry: &'r Registry,
    pub running: Arc<Running>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.registry.finish(&self.running);
    }
}

/// Where the scripts holding a shard a command needs stand.
#[derive(Debug, PartialEq, Eq)]
pub enum Holder {
    /// None has yet run past the threshold: the command waits, at most until
    /// `busy_at`, when the first of them will have.
    Running { busy_at: Instant },
    /// One has run past the threshold: the command is answered BUSY.
    Busy,
}

/// Another client's script holds a shard a command needs: whether the command
/// waits or is answered BUSY, and what wakes it.
#[derive(Debug)]
pub struct Held {
    pub standing: Holder,
    /// Fires when a script ends. Subscribed under the locks the holders were read
    /// under, so no end after that read can be missed; and only when a script
    /// holds the command (which then waits, or is answered BUSY and drops this),
    /// so that a script's end wakes the channel only when someone may wait on it
    /// (see [`Registry::finish`]).
    pub wake: tokio::sync::watch::Receiver<()>,
}

/// What SCRIPT KILL found.
#[derive(Debug, PartialEq, Eq)]
pub enum Kill {
    Killed,
    NotBusy,
    Unkillable,
}

type List = Vec<Arc<Running>>;

/// The running scripts, by the shards they hold.
pub struct Registry {
    /// `by_shard[s]`: the scripts holding shard `s`.
    by_shard: Box<[CachePadded<Mutex<List>>]>,
    /// How many scripts run, read without a lock by every command (most find 0).
    active: CachePadded<AtomicUsize>,
    /// Signalled each time a script ends: commands parked behind one run again.
    ended: tokio::sync::watch::Sender<()>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            by_shard: (0..SHARDS).map(|_| CachePadded::default()).collect(),
            active: CachePadded::default(),
            ended: tokio::sync::watch::channel(()).0,
        }
    }
}

/// The locked lists of some shards.
type Locked<'r> = SmallVec<[MutexGuard<'r, List>; 4]>;

impl Registry {
    /// Registers a script of `client` that needs `shards` (`None`: every shard),
    /// unless another client's script holds one of them: then what that one's
    /// standing is, and nothing is registered. Checking and registering under the
    /// same locks means two scripts never both pass and then queue on each other's
    /// shard locks, where the second would hold a worker thread and never hear
    /// BUSY.
    pub fn try_start(
        &self,
        client: u64,
        shards: Option<Vec<usize>>,
        threshold: Duration,
    ) -> Result<Registered<'_>, Held> {
        let shards = shards.map(|mut s| {
            s.sort_unstable();
            s.dedup();
            s
        });
        let mut lists = self.lock(shards.as_deref());
        self.check(&lists, client, threshold)?;
        let r = Arc::new(Running {
            client,
            started: Instant::now(),
            shards,
            killed: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
        });
        for list in &mut lists {
            list.push(r.clone());
        }
        self.active.fetch_add(1, Relaxed);
        Ok(Registered {
            registry: self,
            running: r,
        })
    }

    fn finish(&self, r: &Arc<Running>) {
        for mut list in self.lock(r.shards.as_deref()) {
            list.retain(|x| !Arc::ptr_eq(x, r));
        }
        self.active.fetch_sub(1, Relaxed);
        // Whoever waits for this script subscribed under a lock it was listed
        // under ([`Held::wake`]), so before the locks above: with no receiver
        // now, nobody waits, and the wake-up (a walk over the channel's waiter
        // lists) is skipped.
        if self.ended.receiver_count() > 0 {
            self.ended.send_replace(());
        }
    }

    /// Whether a command of `client` touching `shards` (`None`: every shard) may
    /// run, given the scripts of other clients holding those shards.
    pub fn holder(
        &self,
        client: u64,
        shards: Option<&[usize]>,
        threshold: Duration,
    ) -> Result<(), Held> {
        if !self.any() {
            return Ok(());
        }
        match shards {
            // A command's keys, as it lists them: in any order, maybe repeated.
            Some(s) if !s.is_sorted_by(|a, b| a < b) => {
                let mut sorted: SmallVec<[usize; 8]> = s.into();
                sorted.sort_unstable();
                sorted.dedup();
                self.check(&self.lock(Some(&sorted)), client, threshold)
            }
            _ => self.check(&self.lock(shards), client, threshold),
        }
    }

    /// Whether any script runs now.
    pub fn any(&self) -> bool {
        self.active.load(Relaxed) != 0
    }

    /// SCRIPT KILL: stops every running script, unless one has written.
    pub fn kill(&self) -> Kill {
        let lists = self.lock(None);
        let mut running = lists.iter().flat_map(|l| l.iter()).peekable();
        if running.peek().is_none() {
            return Kill::NotBusy;
        }
        if running.clone().any(|r| r.wrote.load(Relaxed)) {
            return Kill::Unkillable;
        }
        for r in running {
            r.killed.store(true, Relaxed);
        }
        Kill::Killed
    }

    /// Stops every running script, written or not: the server is going away
    /// (SHUTDOWN NOSAVE, SIGTERM), and a script that never ends would keep its
    /// connection, and so the process, alive.
    pub fn kill_all(&self) {
        for list in self.lock(None) {
            for r in list.iter() {
                r.killed.store(true, Relaxed);
            }
        }
    }

    /// The lists of `shards` (ascending, each once; `None`: every shard), locked
    /// in shard order.
    fn lock(&self, shards: Option<&[usize]>) -> Locked<'_> {
        match shards {
            Some(s) => {
                debug_assert!(s.is_sorted_by(|a, b| a < b), "shards in order, each once");
                s.iter().map(|&i| self.by_shard[i].lock()).collect()
            }
            None => self.by_shard.iter().map(|l| l.lock()).collect(),
        }
    }

    /// [`standing`] over `lists`, and if a script holds the command, a
    /// subscription to the scripts' ends taken while `lists` are still locked.
    fn check(&self, lists: &Locked<'_>, client: u64, threshold: Duration) -> Result<(), Held> {
        match standing(lists.iter().flat_map(|l| l.iter()), client, threshold) {
            None => Ok(()),
            Some(standing) => Err(Held {
                standing,
                wake: self.ended.subscribe(),
            }),
        }
    }
}

/// Where the scripts of other clients than `client` among `holding` (the
/// scripts holding the shards a command needs, some maybe more than once)
/// stand; `None` if there are none, and the command may run.
fn standing<'a>(
    holding: impl Iterator<Item = &'a Arc<Running>>,
    client: u64,
    threshold: Duration,
) -> Option<Holder> {
    let mut found = None;
    for r in holding.filter(|r| r.client != client) {
        // A threshold past any instant (`u64::MAX` ms) is a century: never, here.
        let busy_at = r
            .started
            .checked_add(threshold)
            .or_else(|| {
                r.started
                    .checked_add(Duration::from_secs(100 * 365 * 86_400))
            })
            .unwrap_or(r.started);
        if threshold == Duration::ZERO || Instant::now() >= busy_at {
            return Some(Holder::Busy);
        }
        found = match found {
            Some(Holder::Running { busy_at: b }) if b <= busy_at => found,
            _ => Some(Holder::Running { busy_at }),
        };
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_only_for_other_clients_on_held_shards() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let reg = s.try_start(1, Some(vec![3]), hour).unwrap();
        let r = reg.running.clone();
        let zero = Duration::ZERO;
        let standing = |held: Result<(), Held>| held.err().map(|h| h.standing);
        assert_eq!(standing(s.holder(2, Some(&[3]), zero)), Some(Holder::Busy));
        assert_eq!(standing(s.holder(2, None, zero)), Some(Holder::Busy));
        assert_eq!(standing(s.holder(2, Some(&[4]), zero)), None);
        assert_eq!(
            standing(s.holder(2, Some(&[9, 3, 9]), zero)),
            Some(Holder::Busy)
        );
        assert_eq!(standing(s.holder(1, Some(&[3]), zero)), None);
        let busy_at = r.started + hour;
        let held = s.holder(2, Some(&[3]), hour).unwrap_err();
        assert_eq!(held.standing, Holder::Running { busy_at });
        // A second script on a held shard is not registered; on another one it is.
        assert_eq!(
            s.try_start(2, Some(vec![5, 3]), hour)
                .err()
                .map(|h| h.standing),
            Some(Holder::Running { busy_at })
        );
        assert!(matches!(
            s.try_start(2, None, zero),
            Err(Held {
                standing: Holder::Busy,
                ..
            })
        ));
        drop(s.try_start(2, Some(vec![5]), hour).unwrap());
        assert_eq!(s.kill(), Kill::Killed);
        assert!(r.killed.load(Relaxed));
        drop(reg);
        assert!(
            held.wake.has_changed().unwrap(),
            "a script's end wakes those it held"
        );
        assert_eq!(s.kill(), Kill::NotBusy);
        assert!(!s.any());
    }

    #[test]
    fn a_script_on_every_shard_holds_each_and_leaves_none_behind() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let all = s.try_start(1, None, hour).unwrap();
        for shard in [0, 7, SHARDS - 1] {
            assert!(s.holder(2, Some(&[shard]), hour).is_err(), "shard {shard}");
            assert!(s.try_start(2, Some(vec![shard]), hour).is_err());
        }
        all.running.wrote.store(true, Relaxed);
        assert_eq!(s.kill(), Kill::Unkillable);
        drop(all);
        assert!(!s.any());
        assert!(s.holder(2, None, Duration::ZERO).is_ok());
        // Scripts on disjoint shards run side by side; one over both waits.
        let a = s.try_start(1, Some(vec![1]), hour).unwrap();
        let b = s.try_start(2, Some(vec![2]), hour).unwrap();
        assert!(s.try_start(3, Some(vec![2, 1]), hour).is_err());
        drop((a, b));
        assert!(s.try_start(3, Some(vec![2, 1]), hour).is_ok());
        assert!(s.by_shard.iter().all(|l| l.lock().is_empty()));
    }
}
