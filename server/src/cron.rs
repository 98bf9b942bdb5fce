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
/// `maxmemory`. A command that adds nothing evicts for a moment only
/// (`Room::Moment`, `maxmemory-eviction-tenacity`'s time), so a limit lowered
/// inside a transaction, or memory that grew while writes were refused, would
/// otherwise stay over until writes came; Redis likewise goes on evicting from
/// a timer once a command's eviction ran out of time. Nothing waits here but
/// this thread: commands evict beside it. Memory that goes over during the
/// wait is seen at the next round.
fn rest(server: &Server, until: Instant) {
    while !server.shutdown.is_cancelled() && server.over_maxmemory() {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            return;
        };
        match server.evict(Room::Background(left.as_nanos() as u64)) {
            (Evicted::Under | Evicted::Stuck, _) => break,
            // Memory is coming back from the lazy-free thread, which a bounded
            // eviction does not wait for: this one does, a little.
            (Evicted::Paused, _) if crate::offload::pending_frees() > 0 => {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Nothing found to evict in its time: tried again next round.
            (Evicted::Paused, 0) => break,
            (Evicted::Paused, _) => {}
        }
    }
    if let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}
