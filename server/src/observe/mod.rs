//! Observability: what INFO, SLOWLOG, LATENCY and MONITOR read, recorded here.
//!
//! This module stores; the commands that read it live in `cmd/` (`slowlog.rs`,
//! `latency.rs`, `monitor.rs`) and the INFO lines in [`info`]. Recording happens in
//! three places: [`after_command`] once a command has run (histograms, slow log,
//! latency events, the MONITOR feed), [`error_reply`] wherever an error reply is
//! counted, and [`Observe::cron`] from the background loop (instantaneous rates,
//! the `avg_ttl` estimate).
//!
//! What it costs on the request path: with everything off (`latency-tracking no`,
//! `slowlog-log-slower-than -1`, `latency-monitor-threshold 0`, no monitor) one
//! relaxed load of the [`Gate`] and a compare. With Redis's defaults
//! (`latency-tracking yes`) one relaxed `fetch_add` into the command's histogram and
//! three relaxed loads of configuration; a command slower than a threshold takes a
//! mutex to record itself, which is fine because it was slow anyway.

pub mod errors;
pub mod histogram;
pub mod info;
pub mod latency;
pub mod monitor;
pub mod rates;
pub mod slowlog;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use relcache_protocol::resp::Frame;

use crate::cmd::{registry, spec, CommandSpec};
use crate::config::Config;
use crate::server::Server;
use crate::session::ClientInfo;

/// The one load the request path makes when nothing is being observed: the
/// shortest command duration (ns) any recorder wants to see, 0 when every command
/// must be seen (latency tracking, a monitor), `u64::MAX` when none is wanted.
/// Kept in [`Config`] because its setters are what change it.
pub struct Gate {
    min_nanos: AtomicU64,
    monitoring: AtomicBool,
    /// Serializes recomputations, so a CONFIG SET racing a MONITOR cannot store a
    /// stale value last.
    lock: Mutex<()>,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            // Open until the first refresh: the defaults track latency anyway.
            min_nanos: AtomicU64::new(0),
            monitoring: AtomicBool::new(false),
            lock: Mutex::new(()),
        }
    }
}

impl Gate {
    /// Whether a command that took `nanos` must go through [`record`].
    #[inline]
    pub fn open(&self, nanos: u64) -> bool {
        nanos >= self.min_nanos.load(Relaxed)
    }

    /// Recomputes the gate from the configuration (called by its setters).
    pub fn refresh(&self, c: &Config) {
        let _serial = self.lock.lock();
        let mut min = u64::MAX;
        if c.latency_tracking.load(Relaxed) || self.monitoring.load(Relaxed) {
            min = 0;
        }
        let slow = c.slowlog_log_slower_than.load(Relaxed);
        if slow >= 0 {
            min = min.min((slow as u64).saturating_mul(1000));
        }
        let latency = c.latency_monitor_threshold.load(Relaxed);
        if latency > 0 {
            min = min.min(latency.saturating_mul(1_000_000));
        }
        self.min_nanos.store(min, Relaxed);
    }

    fn set_monitoring(&self, c: &Config, on: bool) {
        if self.monitoring.swap(on, Relaxed) != on {
            self.refresh(c);
        }
    }

    fn monitoring(&self) -> bool {
        self.monitoring.load(Relaxed)
    }
}

/// Everything recorded, one per server.
pub struct Observe {
    pub errors: errors::ErrorStats,
    /// Per command and subcommand, indexed like `cmd::registry().all`.
    pub histograms: Vec<histogram::Histogram>,
    pub slowlog: slowlog::SlowLog,
    pub latency: latency::Events,
    pub monitors: monitor::Monitors,
    pub rates: rates::Rates,
}

impl Default for Observe {
    fn default() -> Observe {
        Observe {
            errors: errors::ErrorStats::default(),
            histograms: registry()
                .all
                .iter()
                .map(|_| histogram::Histogram::default())
                .collect(),
            slowlog: slowlog::SlowLog::default(),
            latency: latency::Events::default(),
            monitors: monitor::Monitors::default(),
            rates: rates::Rates::default(),
        }
    }
}

impl Observe {
    /// `CONFIG RESETSTAT`: error counts and histograms (Redis keeps the slow log
    /// and latency events, which have their own RESET).
    pub fn reset_stats(&self) {
        self.errors.reset();
        self.histograms.iter().for_each(|h| h.reset());
    }

    /// The background loop's share: a rate sample every 100 ms.
    pub fn cron(&self, server: &Server) {
        self.rates.sample(&server.stats);
    }
}

/// Counts an error reply: `total_error_replies` and its `errorstat_<CODE>` line.
/// Every place that sends an error reply calls this, once per reply.
pub fn error_reply(server: &Server, reply: &Frame) {
    if let Frame::Error(text) = reply {
        server.stats.total_error_replies.incr();
        server.observe.errors.record(text);
    }
}

/// Records a command that has run and answered: called by `cmd::run` with its
/// duration. Costs one relaxed load when nothing is observed (see [`Gate`]).
#[inline]
pub fn after_command(
    server: &Server,
    client: &ClientInfo,
    id: usize,
    spec: &CommandSpec,
    args: &[&[u8]],
    nanos: u64,
) {
    if server.config.observe_gate.open(nanos) {
        record(server, client, id, spec, args, nanos);
    }
}

#[inline(never)]
fn record(
    server: &Server,
    client: &ClientInfo,
    id: usize,
    spec: &CommandSpec,
    args: &[&[u8]],
    nanos: u64,
) {
    let c = &server.config;
    let o = &server.observe;
    if c.latency_tracking.load(Relaxed) {
        o.histograms[id].record(nanos);
    }
    let micros = nanos / 1000;
    let slower_than = c.slowlog_log_slower_than.load(Relaxed);
    if slower_than >= 0 && micros >= slower_than as u64 && !spec.has(spec::SKIP_SLOWLOG) {
        o.slowlog
            .push(c.slowlog_max_len.load(Relaxed), client, spec, args, micros);
    }
    let threshold_ms = c.latency_monitor_threshold.load(Relaxed);
    if threshold_ms > 0 && nanos / 1_000_000 >= threshold_ms {
        let event = if spec.has(spec::FAST) {
            "fast-command"
        } else {
            "command"
        };
        o.latency.add(event, nanos / 1_000_000);
    }
    // Redis shows no administrative command to monitors (CONFIG could carry a
    // password; MONITOR, SLOWLOG, LATENCY are about the server itself).
    if c.observe_gate.monitoring() && !spec.has(spec::ADMIN) {
        o.monitors.feed(c, client, spec, args);
    }
}

/// Whether argument `i` is hidden, as Redis redacts it from MONITOR and the slow
/// log: AUTH's arguments, and the user name and password of `HELLO … AUTH`.
pub fn redacted(spec: &CommandSpec, args: &[&[u8]], i: usize) -> bool {
    match spec.name {
        "auth" => i >= 1,
        "hello" => (2..i)
            .rev()
            .take(2)
            .any(|k| args[k].eq_ignore_ascii_case(b"auth") && i - k <= 2),
        _ => false,
    }
}

/// Now, as Unix seconds and microseconds.
fn unix_now() -> (u64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.subsec_micros())
}
