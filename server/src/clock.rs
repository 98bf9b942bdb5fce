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
}

thread_local! {
    /// (wall-clock ns, counter reading) when this thread last read the OS clock.
    static ANCHOR: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// Unix time in nanoseconds.
pub fn now_ns() -> u64 {
    let c = counter();
    let raw = c.raw();
    ANCHOR.with(|anchor| {
        if let Some((wall, at)) = anchor.get() {
            let since = c.delta_as_nanos(at, raw);
            if since < ANCHOR_AGE_NS && raw >= at {
                return wall + since;
            }
        }
        let wall = os_wall_ns();
        anchor.set(Some((wall, raw)));
        wall
    })
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
    fn stamps_measure_sleeps() {
        let s = Stamp::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ns = s.elapsed_ns();
        assert!((20_000_000..2_000_000_000).contains(&ns), "{ns}");
    }
}
