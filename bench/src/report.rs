//! Results of a run: what is measured, its JSON form, and the human-readable table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latency and count figures of one op type (or of all ops).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OpStats {
    /// Ops completed in the measured window.
    pub count: u64,
    /// Error replies among them (an op of several commands can have several).
    pub errors: u64,
    /// Ids checked by them.
    pub ids: u64,
    /// Latency percentiles and max, in µs (from send of the op's first command to
    /// receipt of its last reply, so queueing inside a pipeline is included).
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl OpStats {
    /// Fills the latency fields from `h`.
    pub fn set_latency(&mut self, h: &Histogram<u64>) {
        if h.is_empty() {
            return;
        }
        self.p50_us = h.value_at_quantile(0.50);
        self.p90_us = h.value_at_quantile(0.90);
        self.p99_us = h.value_at_quantile(0.99);
        self.p999_us = h.value_at_quantile(0.999);
        self.max_us = h.max();
        self.mean_us = h.mean();
    }
}

/// Everything a run reports; this is the `--json` file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunReport {
    pub label: String,
    pub target: String,
    pub redis_type: String,
    pub host: String,
    pub port: u16,
    pub connections: usize,
    pub pipeline: usize,
    pub batch: usize,
    pub dist: String,
    pub skew: f64,
    pub users: u64,
    pub seed: u64,
    pub mix: String,
    /// Seconds of the measured window (warmup excluded).
    pub elapsed_s: f64,
    /// Ops completed in the measured window.
    pub requests: u64,
    pub ids_checked: u64,
    pub requests_per_s: f64,
    pub ids_per_s: f64,
    /// Error replies in the measured window (never ignored: a run with errors says so).
    pub errors: u64,
    /// Error replies by text (truncated), warmup included.
    pub error_kinds: BTreeMap<String, u64>,
    /// Load-on-miss ops that found the key missing and wrote it.
    pub load_misses: u64,
    /// `used_memory` from INFO before and after the run.
    pub used_memory_before: Option<u64>,
    pub used_memory_after: Option<u64>,
    pub total: OpStats,
    pub ops: BTreeMap<String, OpStats>,
}

fn mem(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |b| format!("{:.1} MB", b as f64 / 1e6))
}

impl RunReport {
    /// The human-readable summary.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} [{}{}] c={} P={} batch={} dist={} skew={} users={} mix={}",
            self.label,
            self.target,
            if self.target == "redis" {
                format!("/{}", self.redis_type)
            } else {
                String::new()
            },
            self.connections,
            self.pipeline,
            self.batch,
            self.dist,
            self.skew,
            self.users,
            self.mix
        );
        let _ = writeln!(
            s,
            "  {} requests in {:.2}s: {:.0} req/s, {:.0} ids checked/s, {} errors, {} load misses",
            self.requests,
            self.elapsed_s,
            self.requests_per_s,
            self.ids_per_s,
            self.errors,
            self.load_misses
        );
        let _ = writeln!(
            s,
            "  used_memory before {} after {}",
            mem(self.used_memory_before),
            mem(self.used_memory_after)
        );
        let _ = writeln!(
            s,
            "  {:<9} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "op", "count", "errors", "p50µs", "p90µs", "p99µs", "p99.9µs", "maxµs"
        );
        let rows = self.ops.iter().map(|(k, v)| (k.as_str(), v));
        for (name, o) in rows.chain(std::iter::once(("total", &self.total))) {
            let _ = writeln!(
                s,
                "  {:<9} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}",
                name, o.count, o.errors, o.p50_us, o.p90_us, o.p99_us, o.p999_us, o.max_us
            );
        }
        for (text, n) in &self.error_kinds {
            let _ = writeln!(s, "  error x{n}: {text}");
        }
        s
    }
}
