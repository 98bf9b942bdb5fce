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
//! A script that declares no key holds no shard, and is in a list of its own; one
//! that may touch any key holds every shard, and is in another, which everyone
//! else reads only while the count of such scripts is not 0. Such a script
//! registers there first and then looks through the other lists one at a time,
//! while the others register in their lists first and then read that count
//! (sequentially consistent, both): of two that start at once one always sees the
//! other, and steps back (both may). One that stepped back looks again, as a
//! command would, and waits for the other or tries again if it is gone; until it
//! has passed, a script others see is only starting, never BUSY, and SCRIPT KILL
//! passes it by. A script over every shard looks through the lists only when
//! other scripts run, so it costs one lock, as it did when all scripts shared one.
//!
//! Locks over several lists are taken in list order (the shards', then the
//! keyless list, then the list of scripts over every shard), and nothing else is
//! locked while they are held (a subscription to the scripts' ends is taken
//! without a lock), so no two lockers wait on each other.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Acquire, Ordering::Relaxed};
use std::sync::atomic::{Ordering::Release, Ordering::SeqCst};
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
    /// Listed, but not yet past the check that may make it step back.
    starting: AtomicBool,
    /// Out of its lists again (it ended, or stepped back): what a command
    /// waiting in place for it watches ([`Held::wait_in_place`]).
    gone: AtomicBool,
}

/// A script registered as running; dropping it (after its locks are gone) ends
/// it, and wakes whoever waits, even if the run unwound.
pub struct Registered<'r> {
    registry: &'r Registry,
    pub running: Arc<Running>,
    /// The shard another client's script held at the last look before it
    /// started that found one held (it waited in place for it): what
    /// [`super::affinity`] counts.
    pub waited_on: Option<usize>,
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
    /// (see [`Registry::left`]).
    pub wake: tokio::sync::watch::Receiver<()>,
    /// The first of the command's shards that another client's script holds;
    /// `None` if only a script over no shard or every shard holds it.
    pub shard: Option<usize>,
    in_place: InPlace,
}

/// If no holder is BUSY, the one that started last, which a command may wait
/// for in place, and when the first of them started.
type InPlace = Option<(Arc<Running>, Instant)>;

/// How long a command waits in place, spinning on its thread, for the scripts
/// that hold a shard it needs, if they all started less than this long ago,
/// before it parks. Most scripts take microseconds; parking behind one costs
/// more: the replies before it written on their own, its loop woken from
/// another thread, its signals made and polled, the command run again. With two
/// loops running scripts on one hot key that was half the server's CPU;
/// spinning costs what is left of the other's script. A script that runs
/// longer is waited for parked, as before, and this bounds what a command spins.
const SCRIPT_WAIT_IN_PLACE: Duration = Duration::from_micros(20);

impl Held {
    /// [`wait_in_place`](Self::wait_in_place) until `SCRIPT_WAIT_IN_PLACE`
    /// after the command's first look, which the first call sets in `until`.
    fn waited(&self, until: &mut Option<Instant>) -> bool {
        self.wait_in_place(*until.get_or_insert_with(|| Instant::now() + SCRIPT_WAIT_IN_PLACE))
    }

    /// Waits in place for the scripts this command waits for while the first
    /// of them started less than [`SCRIPT_WAIT_IN_PLACE`] ago, and at most until
    /// `until`: true if the last to start ended meanwhile, and the command is to
    /// look again (and then waits no longer than `until`).
    fn wait_in_place(&self, until: Instant) -> bool {
        let Some((latest, first)) = &self.in_place else {
            return false;
        };
        let until = until.min(*first + SCRIPT_WAIT_IN_PLACE);
        loop {
            // Read before the flag, so that a caller looking again after each
            // of a run of short scripts still stops at `until`.
            let past = Instant::now() >= until;
            if latest.gone.load(Acquire) {
                return !past;
            }
            if past {
                return false;
            }
            // A clock read is ~20 ns, a spin hint up to ~140 cycles: the clock
            // is looked at between every few.
            for _ in 0..8 {
                std::hint::spin_loop();
                if latest.gone.load(Acquire) {
                    return true;
                }
            }
        }
    }
}

/// What SCRIPT KILL found.
#[derive(Debug, PartialEq, Eq)]
pub enum Kill {
    Killed,
    NotBusy,
    Unkillable,
}

type List = Vec<Arc<Running>>;

/// The list of the scripts that hold no shard, after the shards' own.
const KEYLESS: usize = SHARDS;
/// The list of the scripts that hold every shard, the last.
const EVERYWHERE: usize = SHARDS + 1;

/// The running scripts, by the shards they hold.
pub struct Registry {
    /// `lists[s]`: the scripts holding shard `s`; `lists[KEYLESS]`: those holding
    /// none; `lists[EVERYWHERE]`: those holding every shard.
    lists: Box<[CachePadded<Mutex<List>>]>,
    /// How many scripts run, read without a lock by every command (most find 0).
    active: CachePadded<AtomicUsize>,
    /// How many scripts over every shard are in `lists[EVERYWHERE]`, or have
    /// just left it: while it is 0, nobody else needs to read that list.
    everywhere: CachePadded<AtomicUsize>,
    /// Signalled each time a script ends: commands parked behind one run again.
    ended: tokio::sync::watch::Sender<()>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            lists: (0..=EVERYWHERE).map(|_| CachePadded::default()).collect(),
            active: CachePadded::default(),
            everywhere: CachePadded::default(),
            ended: tokio::sync::watch::channel(()).0,
        }
    }
}

/// Some locked lists.
type Locked<'r> = SmallVec<[MutexGuard<'r, List>; 4]>;

/// The list a script holding `shards` (in order, each once; `None`: every shard)
/// is in, or the lists: its shards', the keyless one if it holds none.
fn lists_of(shards: Option<&[usize]>) -> &[usize] {
    match shards {
        Some([]) => &[KEYLESS],
        Some(s) => s,
        None => &[EVERYWHERE],
    }
}

/// Why [`Registry::try_start`] did not register a script this time.
enum NotStarted {
    /// Another client's script holds a shard it needs, found before it
    /// registered.
    Held(Held),
    /// One found after it registered: it has left its lists again.
    SteppedBack,
}

/// Whether `list` holds a script of another client than `client`.
fn others(list: &List, client: u64) -> bool {
    list.iter().any(|r| r.client != client)
}

impl Registry {
    /// Registers a script of `client` that needs `shards` (`None`: every shard),
    /// unless another client's script holds one of them: then what that one's
    /// standing is, and the script is not registered. Two scripts never both
    /// pass and then queue on each other's shard locks, where the second would
    /// hold a worker thread and never hear BUSY (see the module's notes for how).
    /// `in_place`: it may first wait in place for a script that has just
    /// started ([`Held::wait_in_place`]), on a thread holding no shard.
    pub fn try_start(
        &self,
        client: u64,
        shards: Option<Vec<usize>>,
        threshold: Duration,
        in_place: bool,
    ) -> Result<Registered<'_>, Held> {
        let mut shards = shards.map(|mut s| {
            s.sort_unstable();
            s.dedup();
            s
        });
        let mut in_place_until = None;
        let mut waited_on = None;
        loop {
            let r = Arc::new(Running {
                client,
                started: Instant::now(),
                shards,
                killed: AtomicBool::new(false),
                wrote: AtomicBool::new(false),
                starting: AtomicBool::new(true),
                gone: AtomicBool::new(false),
            });
            let started = match r.shards {
                None => self.start_everywhere(&r, threshold),
                Some(_) => self.start_in_lists(&r, threshold),
            };
            let held = match started {
                Ok(()) => {
                    r.starting.store(false, Relaxed);
                    // Only now: its drop is the script's end, which counts it out.
                    return Ok(Registered {
                        registry: self,
                        running: r,
                        waited_on,
                    });
                }
                Err(NotStarted::Held(held)) => held,
                // Its own step back woke the channel: what holds it is looked at
                // again, with a subscription taken after that, and if nothing
                // does any more, it tries again.
                Err(NotStarted::SteppedBack) => {
                    match self.holder(client, r.shards.as_deref(), threshold) {
                        Ok(()) => {
                            shards = r.shards.clone();
                            continue;
                        }
                        Err(held) => held,
                    }
                }
            };
            waited_on = held.shard;
            if !(in_place && held.waited(&mut in_place_until)) {
                return Err(held);
            }
            // Unshared unless it was listed (and stepped back) meanwhile.
            shards = Arc::try_unwrap(r).map_or_else(|r| r.shards.clone(), |r| r.shards);
        }
    }

    /// [`try_start`](Self::try_start) of a script over some shards, or none: into
    /// its lists if no other client's script there holds them, and then unless
    /// one over every shard runs.
    fn start_in_lists(&self, r: &Arc<Running>, threshold: Duration) -> Result<(), NotStarted> {
        let which = lists_of(r.shards.as_deref());
        let mut lists = self.lock(which);
        // Scripts over no shard hold nothing of each other's.
        if r.shards.as_deref() != Some(&[]) {
            self.check(&lists, |i| which[i], r.client, threshold)
                .map_err(NotStarted::Held)?;
        }
        for list in &mut lists {
            list.push(r.clone());
        }
        self.active.fetch_add(1, SeqCst);
        if self.everywhere.load(SeqCst) == 0 || !others(&self.lists[EVERYWHERE].lock(), r.client) {
            return Ok(());
        }
        for list in &mut lists {
            list.retain(|x| !Arc::ptr_eq(x, r));
        }
        drop(lists);
        self.left(r);
        Err(NotStarted::SteppedBack)
    }

    /// [`try_start`](Self::try_start) of a script over every shard: into its list
    /// unless another client's script there runs, and then unless one of another
    /// client runs anywhere else.
    fn start_everywhere(&self, r: &Arc<Running>, threshold: Duration) -> Result<(), NotStarted> {
        {
            let mut list = self.lists[EVERYWHERE].lock();
            self.check(
                std::slice::from_ref(&list),
                |_| EVERYWHERE,
                r.client,
                threshold,
            )
            .map_err(NotStarted::Held)?;
            list.push(r.clone());
            self.everywhere.fetch_add(1, SeqCst);
            self.active.fetch_add(1, SeqCst);
        }
        if self.active.load(SeqCst) == 1
            || !(0..EVERYWHERE).any(|i| others(&self.lists[i].lock(), r.client))
        {
            return Ok(());
        }
        self.lists[EVERYWHERE].lock().retain(|x| !Arc::ptr_eq(x, r));
        self.left(r);
        Err(NotStarted::SteppedBack)
    }

    fn finish(&self, r: &Arc<Running>) {
        for mut list in self.lock(lists_of(r.shards.as_deref())) {
            list.retain(|x| !Arc::ptr_eq(x, r));
        }
        self.left(r);
    }

    /// `r` has left its lists (it ended, or stepped back before it started):
    /// counted out, and whoever waited for it woken. Whoever waits subscribed
    /// under a lock of a list it was in ([`Held::wake`]), so before it left: with
    /// no receiver now, nobody waits, and the wake-up (a walk over the channel's
    /// waiter lists) is skipped.
    fn left(&self, r: &Running) {
        r.gone.store(true, Release);
        if r.shards.is_none() {
            self.everywhere.fetch_sub(1, SeqCst);
        }
        self.active.fetch_sub(1, SeqCst);
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
        let Some(mut shards) = shards else {
            return self.check(&self.lock_all(), |i| i, client, threshold);
        };
        // A command's keys, as it lists them: in any order, maybe repeated.
        let sorted: SmallVec<[usize; 8]>;
        if !shards.is_sorted_by(|a, b| a < b) {
            let mut s: SmallVec<[usize; 8]> = shards.into();
            s.sort_unstable();
            s.dedup();
            sorted = s;
            shards = &sorted;
        }
        // Its shards' lists, and the scripts over every shard if any run (all a
        // command that names no key, such as PING or SAVE, waits for: Redis's
        // global lock), looked at together.
        let mut lists = self.lock(shards);
        if self.everywhere.load(SeqCst) != 0 {
            lists.push(self.lists[EVERYWHERE].lock());
        }
        self.check(
            &lists,
            |i| shards.get(i).copied().unwrap_or(EVERYWHERE),
            client,
            threshold,
        )
    }

    /// [`holder`](Self::holder), having first waited in place for scripts
    /// that have just started ([`Held::wait_in_place`]), on a thread holding
    /// no shard.
    pub fn holder_after_waiting(
        &self,
        client: u64,
        shards: Option<&[usize]>,
        threshold: Duration,
    ) -> Result<(), Held> {
        let mut until = None;
        loop {
            match self.holder(client, shards, threshold) {
                Err(held) if held.waited(&mut until) => {}
                looked => return looked,
            }
        }
    }

    /// Whether any script runs now.
    pub fn any(&self) -> bool {
        self.active.load(Relaxed) != 0
    }

    /// SCRIPT KILL: stops every running script, unless one has written.
    pub fn kill(&self) -> Kill {
        let lists = self.lock_all();
        let mut running = lists
            .iter()
            .flat_map(|l| l.iter())
            .filter(|r| !r.starting.load(Relaxed))
            .peekable();
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
        for list in self.lock_all() {
            for r in list.iter() {
                r.killed.store(true, Relaxed);
            }
        }
    }

    /// The lists `which` (ascending, each once), locked in that order.
    fn lock(&self, which: &[usize]) -> Locked<'_> {
        debug_assert!(
            which.is_sorted_by(|a, b| a < b),
            "lists in order, each once"
        );
        which.iter().map(|&i| self.lists[i].lock()).collect()
    }

    /// Every list, locked in order: what runs anywhere, at one instant.
    fn lock_all(&self) -> Locked<'_> {
        self.lists.iter().map(|l| l.lock()).collect()
    }

    /// [`standing`] over the scripts in `lists` (`list(i)`: which list
    /// `lists[i]` is), and if one holds the command, a subscription to the
    /// scripts' ends taken while `lists` are still locked.
    fn check(
        &self,
        lists: &[MutexGuard<'_, List>],
        list: impl Fn(usize) -> usize,
        client: u64,
        threshold: Duration,
    ) -> Result<(), Held> {
        match standing(lists.iter().flat_map(|l| l.iter()), client, threshold) {
            None => Ok(()),
            Some((standing, in_place)) => Err(Held {
                standing,
                wake: self.ended.subscribe(),
                shard: lists
                    .iter()
                    .position(|l| others(l, client))
                    .map(list)
                    .filter(|&s| s < SHARDS),
                in_place,
            }),
        }
    }
}

/// Where the scripts of other clients than `client` among `holding` (the
/// scripts holding the shards a command needs, some maybe more than once)
/// stand, and unless one is BUSY, the one that started last and when the first
/// started; `None` if there are none, and the command may run.
fn standing<'a>(
    holding: impl Iterator<Item = &'a Arc<Running>>,
    client: u64,
    threshold: Duration,
) -> Option<(Holder, InPlace)> {
    // (the earliest BUSY instant, the holder that started last, the first start)
    let mut found: Option<(Instant, &Arc<Running>, Instant)> = None;
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
        // One still starting may yet step back: waited for, never BUSY.
        if !r.starting.load(Relaxed) && (threshold == Duration::ZERO || Instant::now() >= busy_at) {
            return Some((Holder::Busy, None));
        }
        found = Some(match found {
            None => (busy_at, r, r.started),
            Some((b, latest, first)) => (
                b.min(busy_at),
                if r.started > latest.started {
                    r
                } else {
                    latest
                },
                first.min(r.started),
            ),
        });
    }
    found.map(|(busy_at, latest, first)| {
        (Holder::Running { busy_at }, Some((latest.clone(), first)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_only_for_other_clients_on_held_shards() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let reg = s.try_start(1, Some(vec![3]), hour, false).unwrap();
        let r = reg.running.clone();
        let zero = Duration::ZERO;
        let standing = |held: Result<(), Held>| held.err().map(|h| h.standing);
        assert_eq!(standing(s.holder(2, Some(&[3]), zero)), Some(Holder::Busy));
        assert_eq!(standing(s.holder(2, None, zero)), Some(Holder::Busy));
        assert_eq!(standing(s.holder(2, Some(&[4]), zero)), None);
        assert_eq!(standing(s.holder(2, Some(&[]), zero)), None);
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
            s.try_start(2, Some(vec![5, 3]), hour, false)
                .err()
                .map(|h| h.standing),
            Some(Holder::Running { busy_at })
        );
        assert!(matches!(
            s.try_start(2, None, zero, false),
            Err(Held {
                standing: Holder::Busy,
                ..
            })
        ));
        drop(s.try_start(2, Some(vec![5]), hour, false).unwrap());
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
    fn a_held_command_learns_which_of_its_shards_is_held() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let shard = |held: Result<(), Held>| held.unwrap_err().shard;
        let pair = s.try_start(1, Some(vec![3, 9]), hour, false).unwrap();
        assert_eq!(pair.waited_on, None, "it found its shards free");
        assert_eq!(shard(s.holder(2, Some(&[9, 12]), hour)), Some(9));
        assert_eq!(shard(s.holder(2, Some(&[1, 3, 9]), hour)), Some(3));
        assert_eq!(shard(s.holder(2, None, hour)), Some(3));
        let refused = s.try_start(2, Some(vec![12, 9]), hour, false);
        assert_eq!(refused.err().and_then(|h| h.shard), Some(9));
        drop(pair);

        // A script over every shard or none has no shard of its own to report.
        let every = s.try_start(1, None, hour, false).unwrap();
        assert_eq!(shard(s.holder(2, Some(&[4]), hour)), None);
        drop(every);
        let keyless = s.try_start(1, Some(vec![]), hour, false).unwrap();
        assert_eq!(shard(s.holder(2, None, hour)), None);
        drop(keyless);
        assert!(!s.any());
    }

    #[test]
    fn a_script_on_every_shard_holds_each_and_leaves_none_behind() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let all = s.try_start(1, None, hour, false).unwrap();
        for shard in [0, 7, SHARDS - 1] {
            assert!(s.holder(2, Some(&[shard]), hour).is_err(), "shard {shard}");
            assert!(s.try_start(2, Some(vec![shard]), hour, false).is_err());
        }
        // Redis's global lock: even a command that names no key waits.
        assert!(s.holder(2, Some(&[]), hour).is_err());
        assert!(s.try_start(2, Some(vec![]), hour, false).is_err());
        all.running.wrote.store(true, Relaxed);
        assert_eq!(s.kill(), Kill::Unkillable);
        drop(all);
        assert!(!s.any());
        assert!(s.holder(2, None, Duration::ZERO).is_ok());
        // Scripts on disjoint shards run side by side; one over both waits.
        let a = s.try_start(1, Some(vec![1]), hour, false).unwrap();
        let b = s.try_start(2, Some(vec![2]), hour, false).unwrap();
        assert!(s.try_start(3, Some(vec![2, 1]), hour, false).is_err());
        drop((a, b));
        assert!(s.try_start(3, Some(vec![2, 1]), hour, false).is_ok());
        assert!(s.lists.iter().all(|l| l.lock().is_empty()));
    }

    /// A script that finds another client's script after it registered (one over
    /// every shard finding one on a shard or over none, or the other way round)
    /// steps back, leaves no trace, and waits for that one: woken when it ends,
    /// not by its own step back.
    #[test]
    fn a_script_that_steps_back_leaves_no_trace_and_waits_for_the_other() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let counts = |s: &Registry| (s.active.load(SeqCst), s.everywhere.load(SeqCst));
        for (first, second) in [
            (Some(vec![SHARDS - 1]), None),
            (Some(vec![]), None),
            (None, Some(vec![3])),
        ] {
            let one = s.try_start(1, first.clone(), hour, false).unwrap();
            let held = s
                .try_start(2, second.clone(), hour, false)
                .err()
                .expect("held");
            let busy_at = one.running.started + hour;
            assert_eq!(held.standing, Holder::Running { busy_at }, "{first:?}");
            assert_eq!(counts(&s), (1, usize::from(first.is_none())));
            assert!(
                !held.wake.has_changed().unwrap(),
                "woken by its own step back"
            );
            // Its own client's scripts hold nothing of its.
            drop(s.try_start(1, second, hour, false).unwrap());
            drop(one);
            assert!(held.wake.has_changed().unwrap(), "not woken by the end");
            assert_eq!(counts(&s), (0, 0));
            assert!(s.lists.iter().all(|l| l.lock().is_empty()));
        }
    }

    /// A command waits in place only for a script that has just started, and
    /// only until it ends, its own limit or the script's passes.
    #[test]
    fn waits_in_place_for_a_young_script_until_it_ends() {
        let s = Registry::default();
        let hour = Duration::from_secs(3600);
        let far = Instant::now() + hour;
        let one = s.try_start(1, Some(vec![3]), hour, false).unwrap();
        let held = s.holder(2, Some(&[3]), hour).unwrap_err();
        assert!(!held.wait_in_place(Instant::now()), "past its own limit");
        drop(one);
        assert!(held.wait_in_place(far), "the script ended");

        // One that has run longer than SCRIPT_WAIT_IN_PLACE is waited for parked.
        let old = s.try_start(1, Some(vec![3]), hour, false).unwrap();
        let began = Instant::now();
        while began.elapsed() <= SCRIPT_WAIT_IN_PLACE {
            std::hint::spin_loop();
        }
        let held = s.holder(2, Some(&[3]), hour).unwrap_err();
        assert!(!held.wait_in_place(far));
        // A script past the threshold is BUSY: nothing to wait in place for.
        let busy = s.holder(2, Some(&[3]), Duration::ZERO).unwrap_err();
        assert_eq!(busy.standing, Holder::Busy);
        assert!(!busy.wait_in_place(far));

        // Of two holders the one that started last is waited for, as long as
        // the first is young: beside the old one, the young one is not.
        let after = |r: &Registered<'_>| {
            while Instant::now() <= r.running.started {
                std::hint::spin_loop();
            }
        };
        after(&old);
        let young = s.try_start(4, Some(vec![5]), hour, false).unwrap();
        let held = s.holder(2, Some(&[3, 5]), hour).unwrap_err();
        let (latest, first) = held.in_place.as_ref().unwrap();
        assert!(Arc::ptr_eq(latest, &young.running));
        assert_eq!(*first, old.running.started);
        // (False either way, at once here; 20 µs later if `first` were the
        // young one's start, which the line above catches.)
        assert!(!held.wait_in_place(far));
        drop((old, young));

        let a = s.try_start(1, Some(vec![3]), hour, false).unwrap();
        after(&a);
        let b = s.try_start(4, Some(vec![5]), hour, false).unwrap();
        let held = s.holder(2, Some(&[3, 5]), hour).unwrap_err();
        drop(a);
        assert!(!held.wait_in_place(Instant::now()), "waited for the first");
        drop(b);
        assert!(held.wait_in_place(far));
        assert!(!s.any());
    }

    /// Threads starting scripts over random shards (some over none, some over
    /// every one), waiting in place or looking again as a parked command would:
    /// no two clients' scripts ever hold a shard at once, none over every shard
    /// runs beside any other, and everything left behind is gone at the end.
    #[test]
    fn concurrent_scripts_never_hold_a_shard_together() {
        use rand::{Rng, SeedableRng};
        use std::sync::atomic::AtomicU64;
        const CLIENTS: u64 = 4;
        let s = Registry::default();
        let owner: Vec<AtomicU64> = (0..SHARDS).map(|_| AtomicU64::new(0)).collect();
        // Scripts over no shard, and over every shard, running now.
        let (keyless, everywhere) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let hour = Duration::from_secs(3600);
        std::thread::scope(|scope| {
            for client in 1..=CLIENTS {
                let (s, owner, keyless, everywhere) = (&s, &owner, &keyless, &everywhere);
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(client);
                    for round in 0..3_000 {
                        let shards = match rng.gen_range(0..20) {
                            0 => None,
                            1 => Some(vec![]),
                            // Few shards, so that scripts meet.
                            n => Some((0..n % 3 + 1).map(|_| rng.gen_range(0..4) * 61).collect()),
                        };
                        let in_place = round % 2 == 0;
                        let reg = loop {
                            match s.try_start(client, shards.clone(), hour, in_place) {
                                Ok(reg) => break reg,
                                Err(held) => {
                                    assert!(matches!(held.standing, Holder::Running { .. }));
                                    // As a parked command would, on two cores
                                    // shared by four threads: the holder may be
                                    // preempted.
                                    std::thread::yield_now();
                                }
                            }
                        };
                        let mine: Vec<usize> = match &reg.running.shards {
                            Some(mine) => mine.clone(),
                            None => (0..SHARDS).collect(),
                        };
                        for &i in &mine {
                            let was = owner[i].swap(client, SeqCst);
                            assert_eq!(was, 0, "shard {i} held by {was} and {client}");
                        }
                        match &reg.running.shards {
                            None => {
                                assert_eq!(everywhere.fetch_add(1, SeqCst), 0);
                                assert_eq!(keyless.load(SeqCst), 0, "beside a keyless script");
                            }
                            Some(m) if m.is_empty() => {
                                keyless.fetch_add(1, SeqCst);
                                assert_eq!(
                                    everywhere.load(SeqCst),
                                    0,
                                    "beside an every-shard script"
                                );
                            }
                            Some(_) => {}
                        }
                        std::hint::spin_loop();
                        match &reg.running.shards {
                            None => everywhere.fetch_sub(1, SeqCst),
                            Some(m) if m.is_empty() => keyless.fetch_sub(1, SeqCst),
                            Some(_) => 0,
                        };
                        for &i in &mine {
                            assert_eq!(owner[i].swap(0, SeqCst), client);
                        }
                        drop(reg);
                    }
                });
            }
        });
        assert!(!s.any());
        assert_eq!(s.everywhere.load(SeqCst), 0);
        assert!(s.lists.iter().all(|l| l.lock().is_empty()));
    }

    /// A script only starting is waited for, never BUSY, and SCRIPT KILL passes it by.
    #[test]
    fn a_script_still_starting_is_not_busy_nor_killed() {
        let s = Registry::default();
        let one = s
            .try_start(1, Some(vec![3]), Duration::from_secs(3600), false)
            .unwrap();
        one.running.starting.store(true, Relaxed);
        let held = s.holder(2, Some(&[3]), Duration::ZERO).unwrap_err();
        assert!(matches!(held.standing, Holder::Running { .. }));
        assert_eq!(s.kill(), Kill::NotBusy);
        assert!(!one.running.killed.load(Relaxed));
    }

    #[test]
    fn a_script_over_no_shard_is_found_by_kill_and_waited_for_by_the_keyspace() {
        let s = Registry::default();
        let (hour, zero) = (Duration::from_secs(3600), Duration::ZERO);
        let none = s.try_start(1, Some(vec![]), hour, false).unwrap();
        assert!(s.any());
        // It holds no shard: commands on keys, or on none, go on.
        assert!(s.holder(2, Some(&[3]), zero).is_ok());
        assert!(s.holder(2, Some(&[]), zero).is_ok());
        // A command over the whole keyspace, and a script over every shard, wait.
        let busy = |h: Result<(), Held>| h.err().map(|h| h.standing);
        assert_eq!(busy(s.holder(2, None, zero)), Some(Holder::Busy));
        assert!(s.try_start(2, None, hour, false).is_err());
        // Another script over no shard, or over some, runs beside it.
        drop(s.try_start(2, Some(vec![]), hour, false).unwrap());
        drop(s.try_start(2, Some(vec![3]), hour, false).unwrap());
        assert_eq!(s.kill(), Kill::Killed);
        assert!(none.running.killed.load(Relaxed));
        drop(none);
        assert!(!s.any());
        assert_eq!(s.kill(), Kill::NotBusy);
        assert!(s.lists.iter().all(|l| l.lock().is_empty()));
    }
}
