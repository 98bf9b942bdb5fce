//! The server's clock: the wall time a command reads (expiry is in Unix
//! milliseconds) and the durations it measures (command statistics, latency
//! histograms, the slow log), without a serialising clock read each time.
//!
//! `clock_gettime` through the vDSO orders its TSC read after every earlier load
//! (`lfence; rdtsc`), so on a request path full of cache misses each call waits for
//! them: three a command (the wall time for its keys, a start and an end) were 9%
//! of the server's CPU time for pipelined GETs (perf, one hot key, `-P 16`). A
//! plain TSC read is a few nanoseconds. `quanta` calibrates the TSC against the
//! monotonic clock once (the first read, when the server is built and before it
//! accepts anyone) and falls back to the OS clock where the TSC is not invariant.
//!
//! Wall time is the counter's advance over a per-thread anchor taken from the OS
//! clock, re-taken once the anchor is [`ANCHOR_AGE_NS`] old: a stepped or slewed
//! system clock is followed within that time (Redis follows it on its next read),
//! and between anchors the error is the calibration's, nanoseconds a second.

use std::cell::Cell;
use std::sync::OnceLock;

/// How long a thread's wall-time anchor serves before it is read again from the
/// OS clock.
const ANCHOR_AGE_NS: u64 = 50_000_000;

fn counter() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// A point in time on the fast monotonic counter, for measuring work.
#[derive(Clone, Copy, Debug)]
pub struct Stamp(u64);

impl Stamp {
    pub fn now() -> Stamp {
        Stamp(counter().raw())
    }

    /// Nanoseconds since this stamp (0 if the counter went backwards, which an
    /// invariant TSC does not).
    pub fn elapsed_ns(self) -> u64 {
        let c = counter();
        c.delta_as_nanos(self.0, c.raw())
    }

    /// The raw counter reading, to keep in an atomic ([`Stamp::from_ticks`]).
    pub fn ticks(self) -> u64 {
        self.0
    }

    pub fn from_ticks(ticks: u64) -> Stamp {
        Stamp(ticks)
    }
}

/// A thread's anchor: the wall time and counter reading it pairs, and the last
/// time it returned.
#[derive(Clone, Copy)]
struct Anchor {
    wall: u64,
    at: u64,
    last: u64,
}

thread_local! {
    static ANCHOR: Cell<Option<Anchor>> = const { Cell::new(None) };
}

/// How far a re-anchored thread's time may fall behind what it last returned and
/// still be held at that (the calibration's drift over an anchor's life, ns at
/// most); a larger step back is the system clock being set back, and is followed.
const HOLD_NS: u64 = 1_000_000;

/// Unix time in nanoseconds; never less than this thread's previous reading but
/// when the system clock is set back.
pub fn now_ns() -> u64 {
    let c = counter();
    let raw = c.raw();
    ANCHOR.with(|cell| {
        let anchor = match cell.get() {
            Some(a) if raw >= a.at && c.delta_as_nanos(a.at, raw) < ANCHOR_AGE_NS => a,
            old => {
                let (wall, at) = wall_and_counter(c);
                Anchor {
                    wall,
                    at,
                    last: old.map_or(0, |a| a.last),
                }
            }
        };
        let mut now = anchor.wall + c.delta_as_nanos(anchor.at, raw.max(anchor.at));
        if now < anchor.last && anchor.last - now < HOLD_NS {
            now = anchor.last;
        }
        cell.set(Some(Anchor {
            last: now,
            ..anchor
        }));
        now
    })
}

/// The OS's wall time and the counter reading it goes with: the counter read on
/// both sides of the OS read and the midpoint taken, retried while a pair is more
/// than 20 µs apart (the thread was preempted between the reads), so the anchor
/// does not carry that delay into the next 50 ms of readings.
fn wall_and_counter(c: &quanta::Clock) -> (u64, u64) {
    let mut best = None;
    for _ in 0..4 {
        let before = c.raw();
        let wall = os_wall_ns();
        let after = c.raw();
        let gap = c.delta_as_nanos(before, after);
        let mid = before + after.saturating_sub(before) / 2;
        if best.is_none_or(|(g, _, _)| gap < g) {
            best = Some((gap, wall, mid));
        }
        if gap < 20_000 {
            break;
        }
    }
    let (_, wall, at) = best.expect("at least one reading");
    (wall, at)
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    now_ns() / 1_000_000
}

fn os_wall_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec.max(0) as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_time_follows_the_os_clock() {
        for _ in 0..5 {
            let before = os_wall_ns();
            let ours = now_ns();
            let after = os_wall_ns();
            // Within the calibration's error of the OS clock's own reads.
            assert!(ours + 1_000_000 >= before, "{ours} far before {before}");
            assert!(ours <= after + 1_000_000, "{ours} far after {after}");
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    }

    #[test]
    fn a_thread_never_reads_time_going_back() {
        let start = Stamp::now();
        let mut prev = now_ns();
        // Four anchors' lives: each re-anchoring is crossed.
        while start.elapsed_ns() < 4 * ANCHOR_AGE_NS + 10_000_000 {
            let t = now_ns();
            assert!(t >= prev, "{t} after {prev}");
            prev = t;
        }
    }

    #[test]
    fn stamps_measure_sleeps() {
        let s = Stamp::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ns = s.elapsed_ns();
        assert!((20_000_000..2_000_000_000).contains(&ns), "{ns}");
    }
}
