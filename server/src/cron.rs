//! The background loop: active expiry, forgetting lapsed leases and noting the
//! memory peak, `hz` times a second.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::db::expire;
use crate::server::Server;

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
        let removed = expire::active_expire_cycle(&server.db, period / 4);
        if removed > 0 {
            server.stats.expired_keys.add(removed);
        }
        let lapsed = server.db.sweep_leases();
        server.stats.lease_lapses.add(lapsed as u64);
        std::thread::sleep(period);
    }
}
