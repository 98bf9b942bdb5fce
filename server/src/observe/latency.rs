//! The latency monitor's events (LATENCY LATEST / HISTORY / RESET): for each event
//! that took at least `latency-monitor-threshold` ms, its last 160 samples at one
//! per second (a second's worst), as Redis's `latency.c` keeps them.

use std::collections::{BTreeMap, VecDeque};

use parking_lot::Mutex;

/// Redis's LATENCY_TS_LEN.
const SAMPLES: usize = 160;

/// One event's samples.
#[derive(Default, Clone)]
pub struct History {
    /// `(unix seconds, ms)`, oldest first.
    pub samples: VecDeque<(u64, u64)>,
    /// The worst ever seen.
    pub max: u64,
}

/// Every event's history, by name. Only events over the threshold take the lock.
#[derive(Default)]
pub struct Events {
    events: Mutex<BTreeMap<&'static str, History>>,
}

impl Events {
    pub fn add(&self, event: &'static str, ms: u64) {
        let now = super::unix_now().0;
        let mut events = self.events.lock();
        let h = events.entry(event).or_default();
        h.max = h.max.max(ms);
        match h.samples.back_mut() {
            Some((t, worst)) if *t == now => *worst = (*worst).max(ms),
            _ => {
                if h.samples.len() == SAMPLES {
                    h.samples.pop_front();
                }
                h.samples.push_back((now, ms));
            }
        }
    }

    /// Every event with its history, by name.
    pub fn all(&self) -> Vec<(&'static str, History)> {
        self.events
            .lock()
            .iter()
            .map(|(n, h)| (*n, h.clone()))
            .collect()
    }

    pub fn history(&self, event: &[u8]) -> Option<History> {
        let name = std::str::from_utf8(event).ok()?;
        self.events.lock().get(name).cloned()
    }

    /// Forgets the named events (all of them with none); answers how many were
    /// forgotten.
    pub fn reset(&self, names: &[&[u8]]) -> usize {
        let mut events = self.events.lock();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        let mut n = 0;
        for name in names {
            if let Ok(name) = std::str::from_utf8(name) {
                n += usize::from(events.remove(name).is_some());
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_keeps_the_worst() {
        let e = Events::default();
        e.add("command", 5);
        e.add("command", 9);
        e.add("command", 2);
        let h = e.history(b"command").unwrap();
        // All three fall in the same second, unless the clock ticked between.
        assert!(h.samples.len() <= 2);
        assert_eq!(h.max, 9);
        assert_eq!(e.reset(&[b"nosuch", b"command"]), 1);
        assert!(e.all().is_empty());
    }
}
