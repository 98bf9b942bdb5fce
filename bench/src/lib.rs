//! `relcache-bench`: a load generator for relation workloads ("does A follow B?",
//! "which of these 100 does A follow?", load-on-miss, follow/unfollow) that drives
//! relcache with its IDSET commands and Redis with the set (or hash) commands a
//! relation service would use, on the same seeded dataset, and reports rates,
//! HdrHistogram latency percentiles, errors and server memory as text and JSON.
//!
//! It is not a general Redis benchmark (see redis-benchmark / rpc-perf for that),
//! and it measures from one client machine, closed-loop.

pub mod chart;
pub mod cli;
pub mod dataset;
pub mod load;
pub mod report;
pub mod wire;
pub mod workload;
