//! Sampled rates (`instantaneous_ops_per_sec`, `instantaneous_input_kbps`,
//! `instantaneous_output_kbps`) and the `avg_ttl` estimate, as Redis computes them:
//! a sample every 100 ms from the background loop, reported as the mean of the last
//! 16 samples.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::stats::Stats;

/// Redis's STATS_METRIC_SAMPLES.
const SAMPLES: usize = 16;
const PERIOD: Duration = Duration::from_millis(100);

#[derive(Clone, Copy)]
enum Metric {
    Ops = 0,
    Input = 1,
    Output = 2,
}

struct Series {
    last_value: u64,
    samples: [u64; SAMPLES],
}

struct State {
    last_at: Option<Instant>,
    next: usize,
    series: [Series; 3],
}

/// The rate samples (touched by the background loop and INFO only), and the TTL
/// estimate the expiry cycle keeps.
pub struct Rates {
    state: Mutex<State>,
    avg_ttl_ms: AtomicU64,
}

impl Default for Rates {
    fn default() -> Rates {
        Rates {
            state: Mutex::new(State {
                last_at: None,
                next: 0,
                series: std::array::from_fn(|_| Series {
                    last_value: 0,
                    samples: [0; SAMPLES],
                }),
            }),
            avg_ttl_ms: AtomicU64::new(0),
        }
    }
}

impl Rates {
    /// Takes a sample if 100 ms have passed since the last one.
    pub fn sample(&self, stats: &Stats) {
        self.sample_at(
            Instant::now(),
            [
                stats.total_commands_processed.get(),
                stats.total_net_input_bytes.get(),
                stats.total_net_output_bytes.get(),
            ],
        );
    }

    fn sample_at(&self, now: Instant, values: [u64; 3]) {
        let mut st = self.state.lock();
        let Some(last) = st.last_at else {
            st.last_at = Some(now);
            for (s, v) in st.series.iter_mut().zip(values) {
                s.last_value = v;
            }
            return;
        };
        let ms = now.duration_since(last).as_millis() as u64;
        if ms < PERIOD.as_millis() as u64 {
            return;
        }
        let i = st.next;
        for (s, v) in st.series.iter_mut().zip(values) {
            // A CONFIG RESETSTAT makes a counter go back: count from zero.
            let delta = v.checked_sub(s.last_value).unwrap_or(v);
            s.samples[i] = delta * 1000 / ms;
            s.last_value = v;
        }
        st.next = (i + 1) % SAMPLES;
        st.last_at = Some(now);
    }

    fn mean(&self, m: Metric) -> u64 {
        self.state.lock().series[m as usize]
            .samples
            .iter()
            .sum::<u64>()
            / SAMPLES as u64
    }

    pub fn ops_per_sec(&self) -> u64 {
        self.mean(Metric::Ops)
    }

    /// Input bytes per second over the last samples, in KiB/s.
    pub fn input_kbps(&self) -> f64 {
        self.mean(Metric::Input) as f64 / 1024.0
    }

    pub fn output_kbps(&self) -> f64 {
        self.mean(Metric::Output) as f64 / 1024.0
    }

    /// Folds one expiry cycle's sample of TTLs into the estimate, as Redis 7.4
    /// does: `sampled` is `None` when there were no volatile keys (the estimate
    /// drops to 0), otherwise the sampled keys' TTL sum and count and how many
    /// rounds of sampling found any. The cycle's mean replaces 2% of the estimate
    /// per such round (0.98^rounds of the old one is kept), so a cycle that
    /// sampled the whole keyspace all but sets it, where 7.2 gave any cycle 2%.
    pub fn note_ttls(&self, sampled: Option<(u64, u64, u32)>) {
        match sampled {
            None => self.avg_ttl_ms.store(0, Relaxed),
            Some((_, 0, _)) => {}
            Some((sum, n, rounds)) => {
                let avg = sum / n;
                let old = self.avg_ttl_ms.load(Relaxed);
                let new = if old == 0 {
                    avg
                } else {
                    let kept = 0.98f64.powi(rounds.max(1) as i32);
                    (avg as f64 + (old as f64 - avg as f64) * kept) as u64
                };
                self.avg_ttl_ms.store(new, Relaxed);
            }
        }
    }

    /// The estimated mean TTL of volatile keys, in ms.
    pub fn avg_ttl_ms(&self) -> u64 {
        self.avg_ttl_ms.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_the_mean_of_sixteen_samples() {
        let r = Rates::default();
        let t0 = Instant::now();
        r.sample_at(t0, [0, 0, 0]);
        // Too soon: ignored.
        r.sample_at(t0 + Duration::from_millis(50), [999, 0, 0]);
        r.sample_at(t0 + Duration::from_millis(100), [1000, 102_400, 0]);
        assert_eq!(r.ops_per_sec(), 10_000 / 16);
        assert_eq!(r.input_kbps(), 1000.0 / 16.0);
        for k in 2..=17u64 {
            r.sample_at(t0 + Duration::from_millis(100 * k), [1000 * k, 0, 0]);
        }
        assert_eq!(r.ops_per_sec(), 10_000);
    }

    #[test]
    fn avg_ttl_follows_redis_smoothing() {
        let r = Rates::default();
        r.note_ttls(Some((10_000, 10, 1)));
        assert_eq!(r.avg_ttl_ms(), 1000);
        // One round: 2% of the new mean.
        r.note_ttls(Some((6_000, 2, 1)));
        assert_eq!(r.avg_ttl_ms(), 1040);
        // Many rounds (a sweep of many shards): the new mean all but replaces it.
        r.note_ttls(Some((10_000, 2, 256)));
        let avg = r.avg_ttl_ms();
        assert!((4_970..5_000).contains(&avg), "{avg}");
        r.note_ttls(None);
        assert_eq!(r.avg_ttl_ms(), 0);
    }
}
