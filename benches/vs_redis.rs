//! relcache against a real `redis-server`, both driven by the same `redis-benchmark`.
//!
//! Run by hand, never in CI: `cargo bench --bench vs_redis`. Cargo builds the
//! release `relcache-server` for benches; this file builds nothing itself. It starts
//! relcache and `redis-server --save '' --appendonly no` on free ports, then for each
//! configuration — `-P 16 -c 50` (pipelined) and `-P 1 -c 50` (one request in flight
//! per connection) — runs
//! `redis-benchmark -t get,set -n N -r 100000 -d 64 --csv` against both servers,
//! alternating which goes first, for R rounds, and prints the median req/s of each
//! and their ratio.
//!
//! Environment: `BENCH_ROUNDS` (default 3), `BENCH_REQUESTS` (N for `-P 1`, default
//! 200000; the pipelined runs use 5×N so they last long enough to measure),
//! `BENCH_THREADS` (relcache worker threads; default: its own default, one per core).
//!
//! What this does NOT measure:
//! - A network. Client and servers share one machine and talk over loopback; on the
//!   2-core machines this is usually run on, redis-benchmark competes with the server
//!   for the same cores, so absolute figures say as much about the client as the
//!   server, and a multi-threaded server (relcache) is starved by the client in a way
//!   a single-threaded one (Redis) is less so. Read the ratio, not the numbers.
//! - Only GET and SET of 64-byte values over 100k keys: no idset commands, no big
//!   values, no expiry, no eviction or memory pressure, no persistence on either side.
//! - Throughput and redis-benchmark's own p50 only; no tail latency under a fixed
//!   offered load (redis-benchmark runs closed-loop: each client waits for replies).
//! - Runs are seconds long, so there is no warm-up control beyond alternation and
//!   the median of R rounds; variance between rounds is printed so you can judge it.

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::process::Command;

use harness::real_redis::RedisServer;
use harness::TestServer;

/// One redis-benchmark row: req/s and p50 latency in ms.
#[derive(Clone, Copy, Debug)]
struct Row {
    rps: f64,
    p50_ms: f64,
}

/// Runs one redis-benchmark and returns (test name, row) for each test it ran.
fn run_benchmark(port: u16, pipeline: u32, requests: u64) -> Vec<(String, Row)> {
    let args = [
        "-h".to_string(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-t".into(),
        "get,set".into(),
        "-n".into(),
        requests.to_string(),
        "-r".into(),
        "100000".into(),
        "-d".into(),
        "64".into(),
        "-c".into(),
        "50".into(),
        "-P".into(),
        pipeline.to_string(),
        "--csv".into(),
    ];
    let out = Command::new(harness::tool("redis-benchmark"))
        .args(&args)
        .output()
        .expect("run redis-benchmark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("Error from server"),
        "redis-benchmark {} failed:\n{stdout}\n{stderr}",
        args.join(" ")
    );
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let rows: Vec<(String, Row)> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("\"test\""))
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split(',').map(|c| c.trim_matches('"')).collect();
            let rps = cols.get(1)?.parse().ok()?;
            let p50_ms = cols.get(4)?.parse().ok()?;
            Some((cols[0].to_string(), Row { rps, p50_ms }))
        })
        .collect();
    assert_eq!(
        rows.len(),
        2,
        "unexpected redis-benchmark output:\n{stdout}"
    );
    rows
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Results of one server for one (test, pipeline) cell, over all rounds.
#[derive(Default)]
struct Cell {
    relcache: Vec<Row>,
    redis: Vec<Row>,
}

fn main() {
    if !harness::invoked_by_cargo_bench() {
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let rounds = env_u64("BENCH_ROUNDS", 3).max(1) as usize;
    let requests = env_u64("BENCH_REQUESTS", 200_000).max(1000);
    let threads = std::env::var("BENCH_THREADS").ok();

    let relcache = match &threads {
        Some(t) => TestServer::start_with(&["--threads", t]),
        None => TestServer::start(),
    };
    let redis = RedisServer::start();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "vs_redis: {rounds} rounds, {cores} cores shared by client and server, relcache threads: {}",
        threads.as_deref().unwrap_or("default")
    );
    println!(
        "relcache on :{}, redis-server on :{}",
        relcache.port, redis.port
    );

    let configs: [(u32, u64); 2] = [(16, requests * 5), (1, requests)];
    let tests = ["SET", "GET"];
    let mut cells: Vec<((&str, u32), Cell)> = Vec::new();
    for &(p, _) in &configs {
        for t in tests {
            cells.push(((t, p), Cell::default()));
        }
    }

    for round in 0..rounds {
        for &(pipeline, n) in &configs {
            // Alternate who goes first so drift (thermal, page cache, the other
            // engineers' builds) does not always favour the same server.
            let order: [bool; 2] = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for is_relcache in order {
                let port = if is_relcache {
                    relcache.port
                } else {
                    redis.port
                };
                let rows = run_benchmark(port, pipeline, n);
                for (name, row) in rows {
                    let cell = cells
                        .iter_mut()
                        .find(|((t, p), _)| *t == name && *p == pipeline)
                        .map(|(_, c)| c)
                        .unwrap_or_else(|| panic!("unexpected test {name}"));
                    if is_relcache {
                        cell.relcache.push(row);
                    } else {
                        cell.redis.push(row);
                    }
                    eprintln!(
                        "round {} -P {pipeline:<2} {:<8} {name:<3} {:>12.0} req/s  p50 {:.3} ms",
                        round + 1,
                        if is_relcache { "relcache" } else { "redis" },
                        row.rps,
                        row.p50_ms
                    );
                }
            }
        }
    }

    println!();
    println!(
        "{:<5} {:>8} {:>16} {:>16} {:>7}   {:>14} {:>14}   {:>19}",
        "test",
        "pipeline",
        "relcache req/s",
        "redis req/s",
        "ratio",
        "relcache p50ms",
        "redis p50ms",
        "relcache min..max"
    );
    for ((test, pipeline), cell) in &cells {
        let mut a: Vec<f64> = cell.relcache.iter().map(|r| r.rps).collect();
        let mut b: Vec<f64> = cell.redis.iter().map(|r| r.rps).collect();
        let mut pa: Vec<f64> = cell.relcache.iter().map(|r| r.p50_ms).collect();
        let mut pb: Vec<f64> = cell.redis.iter().map(|r| r.p50_ms).collect();
        let (lo, hi) = a
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let (ma, mb) = (median(&mut a), median(&mut b));
        println!(
            "{test:<5} {pipeline:>8} {ma:>16.0} {mb:>16.0} {:>7.2}   {:>14.3} {:>14.3}   {:>9.0}..{:<9.0}",
            ma / mb,
            median(&mut pa),
            median(&mut pb),
            lo,
            hi
        );
    }
}
