//! Per-command latency histograms (`INFO latencystats`, `LATENCY HISTOGRAM`).
//!
//! Every worker thread records into the same histogram with one relaxed
//! `fetch_add`: no lock on the request path. Buckets are log-linear over
//! nanoseconds, 16 per power of two (at most 1/16 = 6.25% relative error, against
//! HdrHistogram's 1% in Redis), from 1 ns to 2^37 ns (about 2 minutes; longer
//! durations land in the last bucket). The 4.3 KB of buckets are allocated on a
//! command's first call, so commands never used cost one pointer.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Highest power of two with its own buckets.
const MAX_POW: u32 = 36;
pub const BUCKETS: usize = (MAX_POW as usize - SUB_BITS as usize + 2) * SUB;

/// One command's durations.
#[derive(Default)]
pub struct Histogram {
    buckets: OnceLock<Box<[AtomicU64]>>,
}

/// The bucket of a duration in ns.
fn index(nanos: u64) -> usize {
    if nanos < SUB as u64 {
        return nanos as usize;
    }
    let msb = 63 - nanos.leading_zeros();
    if msb > MAX_POW {
        return BUCKETS - 1;
    }
    let shift = msb - SUB_BITS;
    (shift as usize + 1) * SUB + ((nanos >> shift) as usize & (SUB - 1))
}

/// The largest duration (ns) bucket `i` holds.
fn upper(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = (i / SUB - 1) as u32;
    let low = ((SUB + i % SUB) as u64) << shift;
    low + (1u64 << shift) - 1
}

impl Histogram {
    #[inline]
    pub fn record(&self, nanos: u64) {
        let b = self
            .buckets
            .get_or_init(|| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect());
        b[index(nanos)].fetch_add(1, Relaxed);
    }

    /// A copy of the counts, or `None` if nothing was recorded since the start or
    /// the last reset.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let counts: Vec<u64> = self
            .buckets
            .get()?
            .iter()
            .map(|c| c.load(Relaxed))
            .collect();
        let total = counts.iter().sum();
        (total > 0).then_some(Snapshot { counts, total })
    }

    pub fn reset(&self) {
        if let Some(b) = self.buckets.get() {
            b.iter().for_each(|c| c.store(0, Relaxed));
        }
    }
}

/// Counts read at one moment.
pub struct Snapshot {
    counts: Vec<u64>,
    pub total: u64,
}

impl Snapshot {
    /// The duration (ns) at or below which `p` percent of the calls took.
    pub fn percentile(&self, p: f64) -> u64 {
        let target = ((p / 100.0 * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= target {
                return upper(i);
            }
        }
        upper(BUCKETS - 1)
    }

    /// LATENCY HISTOGRAM's cumulative distribution, as Redis reports it: bucket
    /// bounds at 1024 ns times powers of two, in µs, each with the count of calls
    /// at or under it, listed where the count grows.
    pub fn cumulative_usec(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut seen = 0;
        let mut prev = 0;
        let mut i = 0;
        let mut bound: u64 = 1024;
        while seen < self.total {
            while i < BUCKETS && upper(i) < bound {
                seen += self.counts[i];
                i += 1;
            }
            if i == BUCKETS {
                seen = self.total;
            }
            if seen > prev {
                out.push((bound / 1000, seen));
                prev = seen;
            }
            bound *= 2;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        for i in 1..BUCKETS {
            assert_eq!(index(upper(i)), i);
            assert_eq!(index(upper(i - 1) + 1), i);
        }
        for v in [1u64, 17, 1000, 1_000_000, 123_456_789] {
            let u = upper(index(v));
            assert!(u >= v && (u - v) as f64 <= v as f64 / 16.0, "{v} -> {u}");
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_and_cumulative_counts() {
        let h = Histogram::default();
        assert!(h.snapshot().is_none());
        for _ in 0..98 {
            h.record(1_500);
        }
        h.record(40_000);
        h.record(3_000_000);
        let s = h.snapshot().unwrap();
        assert_eq!(s.total, 100);
        assert!((1_500..1_600).contains(&s.percentile(50.0)));
        assert!((40_000..42_600).contains(&s.percentile(99.0)));
        assert!(s.percentile(99.9) >= 3_000_000);
        assert_eq!(s.cumulative_usec(), vec![(2, 98), (65, 99), (4194, 100)]);
        h.reset();
        assert!(h.snapshot().is_none());
    }
}
