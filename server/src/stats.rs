//! Server counters, exposed through INFO.
//!
//! Counters are bumped on every command from every worker thread, so a single shared
//! `AtomicU64` would bounce its cache line between cores on the hot path. A
//! [`Counter`] is striped: each thread adds to its own cache-padded slot, and a read
//! sums the slots. Reads (INFO) are rare; writes are constant.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

pub(crate) const STRIPES: usize = 16;

#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// A striped monotonic counter (may be reset by `CONFIG RESETSTAT`).
pub struct Counter {
    slots: [Slot; STRIPES],
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            slots: std::array::from_fn(|_| Slot::default()),
        }
    }
}

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

/// This thread's stripe of the striped counters.
pub(crate) fn stripe() -> usize {
    STRIPE.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_STRIPE.fetch_add(1, Relaxed) % STRIPES;
            s.set(i);
        }
        i
    })
}

impl Counter {
    pub fn add(&self, n: u64) {
        self.slots[stripe()].0.fetch_add(n, Relaxed);
    }

    pub fn incr(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.slots.iter().map(|s| s.0.load(Relaxed)).sum()
    }

    pub fn reset(&self) {
        for s in &self.slots {
            s.0.store(0, Relaxed);
        }
    }
}

/// A striped signed gauge (a value that goes up and down), summed on read.
pub struct Gauge {
    slots: [GaugeSlot; STRIPES],
}

#[repr(align(128))]
#[derive(Default)]
struct GaugeSlot(std::sync::atomic::AtomicI64);

impl Gauge {
    pub const fn new() -> Gauge {
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: GaugeSlot = GaugeSlot(std::sync::atomic::AtomicI64::new(0));
        Gauge {
            slots: [ZERO; STRIPES],
        }
    }

    pub fn add(&self, delta: i64) {
        if delta != 0 {
            self.slots[stripe()].0.fetch_add(delta, Relaxed);
        }
    }

    pub fn get(&self) -> i64 {
        self.slots.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

impl Default for Gauge {
    fn default() -> Self {
        Gauge::new()
    }
}

/// The `INFO stats` counters.
#[derive(Default)]
pub struct Stats {
    pub total_connections_received: Counter,
    pub total_commands_processed: Counter,
    pub total_net_input_bytes: Counter,
    pub total_net_output_bytes: Counter,
    pub rejected_connections: Counter,
    pub expired_keys: Counter,
    pub evicted_keys: Counter,
    /// Of `evicted_keys`, those the background loop evicted, with no command
    /// waiting (INFO's `evicted_keys_background`).
    pub evicted_keys_background: Counter,
    /// Clients closed to bring client memory under `maxmemory-clients`.
    pub evicted_clients: Counter,
    /// EVAL-cached scripts dropped to keep at most 500 of them (Redis 7.4).
    pub evicted_scripts: Counter,
    pub keyspace_hits: Counter,
    pub keyspace_misses: Counter,
    pub total_error_replies: Counter,
    pub client_output_buffer_limit_disconnections: Counter,
    pub client_query_buffer_limit_disconnections: Counter,
    /// Leases granted on missing keys.
    pub lease_grants: Counter,
    /// Calls parked because another caller held the key's lease.
    pub lease_waits: Counter,
    /// Calls answered "busy": a lease was out and waiting was not asked for, or
    /// timed out.
    pub lease_busy: Counter,
    pub lease_fills: Counter,
    /// Fills refused: their lease was revoked, had lapsed, or was never granted.
    pub lease_fills_refused: Counter,
    /// Leases revoked by a write to their key.
    pub lease_revocations: Counter,
    pub lease_releases: Counter,
    /// Leases that lapsed and were replaced or swept.
    pub lease_lapses: Counter,
    /// Leases refused: `lease-max-count` were out, or memory was over `maxmemory`.
    pub lease_refusals: Counter,
    /// Sequenced idset changes that arrived after a later one, each dropping its
    /// key (see `IdSet::order`).
    pub idset_late_changes: Counter,
    /// Connections moved to the loop their scripts' keys call home (see
    /// `script::affinity`).
    pub connection_moves: Counter,
    /// Connections moved to gather the server's connections on one loop or
    /// to spread them again (see `gather`).
    pub balance_moves: Counter,
    /// Times the connections gathered on one loop, and spread again.
    pub loop_gathers: Counter,
    pub loop_spreads: Counter,
    /// Connections parked in a blocking command right now (a gauge).
    pub blocked_clients: Gauge,
}

impl Stats {
    /// `CONFIG RESETSTAT`.
    pub fn reset(&self) {
        for c in [
            &self.total_connections_received,
            &self.total_commands_processed,
            &self.total_net_input_bytes,
            &self.total_net_output_bytes,
            &self.rejected_connections,
            &self.expired_keys,
            &self.evicted_keys,
            &self.evicted_keys_background,
            &self.evicted_clients,
            &self.evicted_scripts,
            &self.keyspace_hits,
            &self.keyspace_misses,
            &self.total_error_replies,
            &self.client_output_buffer_limit_disconnections,
            &self.client_query_buffer_limit_disconnections,
            &self.lease_grants,
            &self.lease_waits,
            &self.lease_busy,
            &self.lease_fills,
            &self.lease_fills_refused,
            &self.lease_revocations,
            &self.lease_releases,
            &self.lease_lapses,
            &self.lease_refusals,
            &self.idset_late_changes,
            &self.connection_moves,
            &self.balance_moves,
            &self.loop_gathers,
            &self.loop_spreads,
        ] {
            c.reset();
        }
    }
}

/// Per-command counters for `INFO commandstats`.
#[derive(Default)]
pub struct CommandStats {
    pub calls: Counter,
    /// Nanoseconds, summed unrounded: a fast command takes well under a
    /// microsecond, and rounding each call would lose most of the total.
    pub nanos: Counter,
    pub rejected_calls: Counter,
    pub failed_calls: Counter,
}

impl CommandStats {
    pub fn reset(&self) {
        self.calls.reset();
        self.nanos.reset();
        self.rejected_calls.reset();
        self.failed_calls.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_counter_sums_across_threads() {
        let c = std::sync::Arc::new(Counter::default());
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.incr()))
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(c.get(), 8000);
        c.reset();
        assert_eq!(c.get(), 0);
    }
}
