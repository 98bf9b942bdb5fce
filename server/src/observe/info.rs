//! INFO's lines for what this module records: each a function the INFO command
//! calls, so the recording and its presentation stay together.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::cmd::registry;
use crate::server::Server;

pub fn instantaneous_ops_per_sec(server: &Server) -> u64 {
    server.observe.rates.ops_per_sec()
}

pub fn instantaneous_input_kbps(server: &Server) -> String {
    format!("{:.2}", server.observe.rates.input_kbps())
}

pub fn instantaneous_output_kbps(server: &Server) -> String {
    format!("{:.2}", server.observe.rates.output_kbps())
}

/// The keyspace line's `avg_ttl` (ms), estimated by the expiry cycle.
pub fn avg_ttl(server: &Server) -> u64 {
    server.observe.rates.avg_ttl_ms()
}

/// `# Errorstats`: `errorstat_<CODE>:count=N`.
pub fn errorstats(server: &Server, out: &mut String) {
    for (code, n) in server.observe.errors.counts() {
        let _ = write!(out, "errorstat_{code}:count={n}\r\n");
    }
}

/// `# Latencystats`: `latency_percentiles_usec_<cmd>:p50=…,p99=…,p99.9=…`, for
/// every command called since the start or the last CONFIG RESETSTAT.
pub fn latencystats(server: &Server, out: &mut String) {
    if !server.config.latency_tracking.load(Relaxed) {
        return;
    }
    let percentiles = server
        .config
        .latency_tracking_info_percentiles
        .read()
        .clone();
    let mut rows: Vec<_> = registry()
        .all
        .iter()
        .zip(&server.observe.histograms)
        .filter_map(|(spec, h)| Some((spec.name, h.snapshot()?)))
        .collect();
    rows.sort_unstable_by_key(|r| r.0);
    for (name, snap) in rows {
        let _ = write!(out, "latency_percentiles_usec_{name}:");
        for (i, p) in percentiles.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let usec = snap.percentile(*p) as f64 / 1000.0;
            let _ = write!(out, "{sep}p{p}={usec:.3}");
        }
        out.push_str("\r\n");
    }
}
