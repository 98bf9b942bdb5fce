//! The background loop: active expiry, forgetting lapsed leases, closing idle
//! MIGRATE links, noting the memory peak, sampling the instantaneous rates and
//! shrinking emptied tables, `hz` times a second; and between those, evicting
//! while memory stays over `maxmemory`.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::db::expire;
use crate::server::{Evicted, Room, Server};

/// Runs until shutdown, on its own thread so a sweep never occupies a runtime
/// worker that serves clients.
pub fn run(server: &Server) {
    while !server.shutdown.is_cancelled() {
        let hz = server.config.hz.load(Relaxed).clamp(1, 500);
        let period = Duration::from_millis(1000 / hz);
        if let Some(used) = crate::alloc::allocated() {
            crate::alloc::note_peak(used as u64);
        }
        // Redis gives the slow expiry cycle 25% of a cron period.
        let started = Instant::now();
        let sweep = expire::active_expire_cycle(&server.db, period / 4, |key| {
            crate::notify::event(server, crate::notify::EXPIRED, "expired", key)
        });
        if sweep.removed > 0 {
            server.stats.expired_keys.add(sweep.removed);
        }
        let rates = &server.observe.rates;
        rates.note_ttls(sweep.saw_volatile.then_some((
            sweep.ttl_sum,
            sweep.ttl_samples,
            sweep.ttl_rounds,
        )));
        // Redis's "expire-cycle" latency event.
        let threshold = server.config.latency_monitor_threshold.load(Relaxed);
        let ms = started.elapsed().as_millis() as u64;
        if threshold > 0 && ms >= threshold {
            server.observe.latency.add("expire-cycle", ms);
        }
        server.observe.cron(server);
        // A lowered `maxmemory-clients` takes effect without waiting for a client
        // to grow.
        crate::client_memory::evict_clients(server);
        crate::tracking::enforce_limit(server);
        crate::outbound::sweep();
        let lapsed = server.db.sweep_leases();
        server.stats.lease_lapses.add(lapsed as u64);
        server.db.shrink_sparse();
        rest(server, started + period);
    }
}

/// Waits for the next round, evicting meanwhile while memory is over
/// `maxmemory`. A command that adds nothing evicts for a millisecond at most
/// (`Room::Moment`), so a limit lowered under a full keyspace, or memory that
/// grew while a write was refused, would otherwise stay over until writes came;
/// Redis likewise goes on evicting from a timer once a command's eviction ran
/// out of time. Nothing waits here but this thread: commands evict beside it.
fn rest(server: &Server, until: Instant) {
    while server.over_maxmemory() && Instant::now() < until {
        match server.evict(Room::Background) {
            Evicted::Under | Evicted::Stuck => break,
            // Memory is coming back from the lazy-free thread, which a slice of
            // eviction does not wait for: this one does, a little.
            Evicted::Paused if crate::offload::pending_frees() > 0 => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Evicted::Paused => {}
        }
    }
    if let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}
