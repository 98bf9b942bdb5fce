//! Gathering a lightly loaded server's connections on one loop, and spreading
//! them over every loop again once one is not enough.
//!
//! With two loops and unpipelined clients, each loop answers what it has and
//! sleeps, and is woken for the next request a moment later: the two loops
//! slept and woke twice as often per request as one loop serving the same
//! clients (`redis-benchmark -P 1 -c 50`, voluntary context switches), and
//! each wake-up is a trip through the scheduler with colder caches. So while
//! one loop can carry the load (with `loop-gather-below` set; it is off by
//! default), the connections live on the first, and new
//! ones are accepted there; once that loop has no time to spare, they spread
//! evenly over all of them, as before. Redis does the same with its I/O
//! threads: it stops them while few clients have replies waiting
//! (`stopThreadedIOIfNeeded`) and serves every client on its main thread.
//!
//! Looked at `hz` times a second, from the time each loop slept in epoll
//! waiting for work. A gathered loop that slept a tenth or less of two
//! rounds in a row is full: the connections spread. Spread loops that were
//! busy together less than `loop-gather-below` percent of one round gather.
//! What loads on two loops cannot say is what they would load one with: a
//! pipelined load that keeps each of two loops half idle fills one (measured:
//! busy 61–90% together, 91–97% gathered). So gathering under a load is a
//! trial, and one that fills the loop at once, spreading again within
//! [`HOLD`], makes the next wait twice as long as the last, from
//! [`FIRST_WAIT`] up to [`LONGEST_WAIT`]; a gathering that holds starts the
//! waits over. Loops all but idle (busy under [`IDLE`] together) gather at
//! once, whatever the wait: the load that spread them has gone, and the next
//! is another one.
//!
//! What the sleeps cannot see: work a loop hands to another thread
//! ([`crate::offload`]: a script or transaction past 1 ms, a big walk or
//! request) leaves the loop polling, so a load made of such work reads as
//! light and stays gathered, its long requests on the loop's spare threads
//! (at most `loop-max-threads`), as it would on one loop with `--threads 1`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Stamp;
use crate::loops::Loops;
use crate::server::Server;

/// `loop-gather-below`'s default: off. With it on (80, the figure the
/// measurements used), two client-memory tests failed about one run in eight
/// (`tests/client_memory.rs`: a key evicted while a big request was still
/// arriving, and a client's `tot-mem` off its buffers), for a reason not yet
/// found; gathering stays a choice until it is.
pub const DEFAULT_BELOW: u64 = 0;
/// Its most: a load gathered from under it must not read as full at once.
pub const MAX_BELOW: u64 = FULL;
/// Busy this percent of a round or more, a loop is full.
const FULL: u64 = 90;
/// Rounds in a row a gathered loop must be full to spread: one busy round (a
/// big reply, a sweep) is no load.
const FULL_ROUNDS: u32 = 2;
/// A gathering that spreads again within this was a trial that failed.
const HOLD: Duration = Duration::from_secs(5);
/// Busy together under this percent, the loops have no load to try.
const IDLE: u64 = 20;
const FIRST_WAIT: Duration = Duration::from_secs(1);
const LONGEST_WAIT: Duration = Duration::from_secs(64);

/// How busy (not asleep in epoll) the loops were in a round, in percent of it.
#[derive(Clone, Copy, Debug)]
struct Busy {
    /// The first loop.
    first: u64,
    /// All of them, summed before rounding: with many loops, each rounded on
    /// its own would be off by up to a point each.
    together: u64,
}

impl Busy {
    /// From each loop's idle nanoseconds in a round of `round_ns`, measured on
    /// the same clock.
    fn of(idle_ns: impl Iterator<Item = u64>, round_ns: u64) -> Busy {
        let round = round_ns.max(1) as u128;
        let busy: Vec<u128> = idle_ns
            .map(|idle| round.saturating_sub(idle as u128))
            .collect();
        let percent = |ns: u128| (ns * 100 / round) as u64;
        Busy {
            first: busy.first().map_or(0, |&b| percent(b)),
            together: percent(busy.iter().sum()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    Gather,
    Spread,
}

/// What the last rounds said, and when gathering may be tried next.
#[derive(Debug)]
struct Gatherer {
    /// When the connections last gathered, if they did under a load: a trial
    /// of whether one loop carries it.
    trial: Option<Instant>,
    /// Gathered rounds in a row with the loop full.
    full_rounds: u32,
    /// How long the last failed gathering made the next wait.
    wait: Duration,
    /// No gathering before this.
    not_before: Option<Instant>,
}

impl Gatherer {
    fn new() -> Gatherer {
        Gatherer {
            trial: None,
            full_rounds: 0,
            wait: Duration::ZERO,
            not_before: None,
        }
    }

    /// What the loops do after a round at `now` in which they were `busy`,
    /// gathered or not; `below` is `loop-gather-below` (0: never gather).
    fn decide(&mut self, now: Instant, gathered: bool, below: u64, busy: Busy) -> Option<Turn> {
        if gathered && below == 0 {
            // Turned off: no load's verdict, and no wait for a later turn on.
            *self = Gatherer::new();
            return Some(Turn::Spread);
        }
        if gathered {
            let full = busy.first >= FULL;
            self.full_rounds = if full { self.full_rounds + 1 } else { 0 };
            if self.full_rounds < FULL_ROUNDS {
                if self.trial.is_some_and(|at| now >= at + HOLD) {
                    // It held: the next spread is a new load, not this one.
                    self.wait = Duration::ZERO;
                }
                return None;
            }
            self.full_rounds = 0;
            let failed = self.trial.is_some_and(|at| now < at + HOLD);
            self.wait = if failed {
                (self.wait * 2).clamp(FIRST_WAIT, LONGEST_WAIT)
            } else {
                Duration::ZERO
            };
            self.not_before = Some(now + self.wait);
            return Some(Turn::Spread);
        }
        let together = busy.together;
        let idle = together < IDLE;
        let may = idle || self.not_before.is_none_or(|t| now >= t);
        if below == 0 || !may || together >= below {
            return None;
        }
        self.trial = (!idle).then_some(now);
        Some(Turn::Gather)
    }
}

/// Whether a server with `loops` loops starts gathered: with gathering on, as
/// a server just started is idle.
pub fn starts_gathered(server: &Server, loops: usize) -> bool {
    loops > 1 && server.config.loop_gather_below.load(Relaxed) > 0
}

/// Looks at the loops `hz` times a second and gathers or spreads their
/// connections, until shutdown.
pub async fn run(server: Arc<Server>, loops: Arc<Loops>) {
    if loops.len() < 2 {
        return;
    }
    let mut g = Gatherer::new();
    // The round is timed on the clock the loops' sleeps are (the TSC's), not
    // on one an NTP slew can make run slower or faster than it.
    let mut last = (Stamp::now(), loops.idle_ns());
    loop {
        let hz = server.config.hz.load(Relaxed).clamp(1, 500);
        tokio::select! {
            _ = server.shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(1000 / hz)) => {}
        }
        let round_ns = last.0.elapsed_ns();
        let now = (Stamp::now(), loops.idle_ns());
        let idle = now
            .1
            .iter()
            .zip(&last.1)
            .map(|(idle, was)| idle.saturating_sub(*was));
        let busy = Busy::of(idle, round_ns);
        last = now;
        let below = server.config.loop_gather_below.load(Relaxed);
        match g.decide(Instant::now(), loops.gathered(), below, busy) {
            Some(Turn::Gather) => {
                server.stats.loop_gathers.incr();
                loops.gather();
            }
            Some(Turn::Spread) => {
                server.stats.loop_spreads.incr();
                loops.spread();
            }
            // Those that could not go when the loops gathered (being served,
            // or parked) go as they settle.
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUND: Duration = Duration::from_millis(100);

    /// Feeds `g` `n` rounds, from `at`, while the loops do as told: each loop
    /// busy as `spread` says while spread, the first as `gathered_busy` while
    /// gathered. The turns taken.
    fn rounds(
        g: &mut Gatherer,
        at: &mut Instant,
        gathered: &mut bool,
        below: u64,
        (spread, gathered_busy): (&[u64], u64),
        n: usize,
    ) -> Vec<Turn> {
        let mut turns = Vec::new();
        for _ in 0..n {
            *at += ROUND;
            let busy = if *gathered {
                Busy {
                    first: gathered_busy,
                    together: gathered_busy,
                }
            } else {
                Busy {
                    first: spread[0],
                    together: spread.iter().sum(),
                }
            };
            if let Some(t) = g.decide(*at, *gathered, below, busy) {
                *gathered = t == Turn::Gather;
                turns.push(t);
            }
        }
        turns
    }

    #[test]
    fn a_light_load_stays_gathered_and_a_full_loop_spreads() {
        let (mut g, mut at, mut gathered) = (Gatherer::new(), Instant::now(), true);
        let mut r = |busy: u64, n| rounds(&mut g, &mut at, &mut gathered, 80, (&[30, 30], busy), n);
        // Unpipelined clients: busy up to 86% gathered, and it stays.
        assert!(r(86, 100).is_empty());
        // One full round is no load; two are.
        assert!(r(95, 1).is_empty());
        assert!(r(50, 1).is_empty());
        assert_eq!(r(95, 2), [Turn::Spread]);
        // It had held for long: spread at 30% a loop, it gathers at the next
        // look.
        assert_eq!(r(50, 1), [Turn::Gather]);
    }

    #[test]
    fn a_load_that_fills_one_loop_is_tried_ever_less_often() {
        let (mut g, mut at, mut gathered) = (Gatherer::new(), Instant::now(), true);
        // Each of two loops half idle, which fills one: 64 seconds of it.
        let turns = rounds(&mut g, &mut at, &mut gathered, 80, (&[35, 35], 96), 640);
        let gathers = turns.iter().filter(|&&t| t == Turn::Gather).count();
        // Started gathered, it spreads and is tried again at once (no try had
        // failed), then after 1, 2, 4, 8 and 16 seconds, each spreading again
        // two rounds later; the next wait, 32 seconds, runs past the end.
        assert_eq!(gathers, 6, "{turns:?}");
        assert!(!gathered);
        // Loads spread that would not fit one loop are never tried.
        let (mut g, mut at, mut gathered) = (Gatherer::new(), Instant::now(), false);
        assert!(rounds(&mut g, &mut at, &mut gathered, 80, (&[60, 60], 100), 100).is_empty());
    }

    #[test]
    fn loads_that_come_and_go_gather_between_them_whatever_the_wait() {
        let (mut g, mut at, mut gathered) = (Gatherer::new(), Instant::now(), true);
        // A pipelined load that fills one loop, tried until the wait is 8 s.
        rounds(&mut g, &mut at, &mut gathered, 80, (&[35, 35], 96), 100);
        assert!(!gathered);
        assert!(g.wait >= Duration::from_secs(4), "{g:?}");
        // It ends: the idle loops gather at the next look.
        assert_eq!(
            rounds(&mut g, &mut at, &mut gathered, 80, (&[0, 0], 0), 1),
            [Turn::Gather]
        );
        // A new one comes 2 s later: it spreads, and the idle gathering was no
        // trial, so it is tried again at once.
        assert!(rounds(&mut g, &mut at, &mut gathered, 80, (&[0, 0], 0), 20).is_empty());
        let turns = rounds(&mut g, &mut at, &mut gathered, 80, (&[35, 35], 96), 3);
        assert_eq!(turns, [Turn::Spread, Turn::Gather]);
    }

    #[test]
    fn many_idle_loops_read_as_idle_and_many_light_ones_as_their_sum() {
        let round = 100_000_000;
        // 128 loops asleep all round but a nanosecond, or longer than the
        // round (a sleep read a moment after the round's end).
        let asleep = (0..128).map(|i| round - (i % 2) + (i % 3) * 1_000);
        let busy = Busy::of(asleep, round);
        assert_eq!((busy.first, busy.together), (0, 0));
        // 64 loops 1.9% busy each: 121% together, not 64 nor 128.
        let light = std::iter::repeat_n(round - round * 19 / 1000, 64);
        let busy = Busy::of(light, round);
        assert_eq!((busy.first, busy.together), (1, 121));
        // Loop 0 full, another idle.
        let busy = Busy::of([round / 20, round].into_iter(), round);
        assert_eq!((busy.first, busy.together), (95, 95));
    }

    #[test]
    fn turning_gathering_off_is_no_failed_trial() {
        let (mut g, mut at, mut gathered) = (Gatherer::new(), Instant::now(), false);
        // Gathered under a load, and at once turned off, then on again.
        let load = (&[30, 30][..], 70);
        assert_eq!(
            rounds(&mut g, &mut at, &mut gathered, 80, load, 1),
            [Turn::Gather]
        );
        assert_eq!(
            rounds(&mut g, &mut at, &mut gathered, 0, load, 1),
            [Turn::Spread]
        );
        assert_eq!(
            rounds(&mut g, &mut at, &mut gathered, 80, load, 1),
            [Turn::Gather]
        );
    }

    #[test]
    fn gathering_off_spreads_and_stays_spread() {
        let (mut g, mut at, mut gathered) = (Gatherer::new(), Instant::now(), true);
        assert_eq!(
            rounds(&mut g, &mut at, &mut gathered, 0, (&[0, 0], 0), 50),
            [Turn::Spread]
        );
        assert_eq!(
            rounds(&mut g, &mut at, &mut gathered, 80, (&[0, 0], 0), 1),
            [Turn::Gather]
        );
    }
}
