//! relcache against a real `redis-server`, both driven by the same `redis-benchmark`.
//!
//! Run by hand, never in CI: `cargo bench --bench vs_redis`. Cargo builds the
//! release `relcache-server` for benches; this file builds nothing itself. It starts
//! relcache and `redis-server --save '' --appendonly no` on free ports, then for each
//! configuration — `-P 16 -c 50` (pipelined) and `-P 1 -c 50` (one request in flight
//! per connection) — runs
//! `redis-benchmark -t get,set -n N -r 100000 -d 64 --csv` against both servers,
//! alternating which goes first, for R rounds, and prints the median req/s of each
//! and their ratio. GET with `-r` runs once more at each depth in RESP3 (`-3`,
//! the default of go-redis 9 and Lettuce): a RESP3 connection has a message
//! queue, which a server must also wait on.
//!
//! A SET through a script (`EVAL "return redis.call('set', KEYS[1], ARGV[1])"`
//! over the same keys) runs at each depth too: scripts are a request path of
//! their own, the Lua runtime's. It runs once more pipelined on one hot key, where
//! relcache's loops take turns: a script holds its key's shard while it runs.
//!
//! The pipelined SET and GET run a second time with a two-thread client
//! (`redis-benchmark --threads 2`, the `cl` column). One client thread needs about as
//! much CPU a request as either server and fills a core by itself, so at equal server
//! CPU a request neither server can go faster than the client. With two client
//! threads the client no longer sets the rate: a server that runs on both cores
//! (relcache, a loop per core) takes what the client leaves on either, one that runs
//! on one thread (Redis) at most one core, less what the client's threads take from
//! it. Those rows measure that; the machine has no third core to give the client one
//! of its own.
//!
//! Environment: `BENCH_ROUNDS` (default 3), `BENCH_REQUESTS` (N for `-P 1`, default
//! 200000; the pipelined runs use 5×N so they last long enough to measure, 15×N
//! with two client threads),
//! `BENCH_THREADS` (relcache worker threads; default: its own default, one per core),
//! `BENCH_GATHER` (`loop-gather-below`; default 80, as the README's table ran).
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

use harness::{env_u64, median};

use std::process::Command;

use harness::real_redis::RedisServer;
use harness::TestServer;

/// One redis-benchmark run: req/s, p50 latency in ms, and the server's CPU time
/// per request in ns.
#[derive(Clone, Copy, Debug)]
struct Row {
    rps: f64,
    p50_ms: f64,
    cpu_ns: f64,
}

/// One cell of the table: a test at a pipeline depth, on spread keys or one.
#[derive(Clone, Copy, PartialEq)]
struct Config {
    test: &'static str,
    pipeline: u32,
    spread: bool,
    resp3: bool,
    /// redis-benchmark's `--threads`.
    client_threads: u32,
    requests: u64,
}

impl Config {
    /// The table's keys column: `-r` or `hot`, and `-3` in RESP3.
    fn keys(&self) -> &'static str {
        match (self.spread, self.resp3) {
            (true, false) => "-r",
            (false, false) => "hot",
            (true, true) => "-r -3",
            (false, true) => "hot -3",
        }
    }
}

/// The script of the `EVAL` rows: a SET of a 64-byte value, through Lua.
const SCRIPT: &str = "return redis.call('set', KEYS[1], ARGV[1])";

/// Runs one redis-benchmark of `c` against the server `pid` listening on `port`.
fn run_benchmark(port: u16, pid: u32, c: Config) -> Row {
    let mut args = vec![
        "-h".to_string(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
    ];
    if c.test != "EVAL" {
        args.extend(["-t".into(), c.test.to_ascii_lowercase()]);
    }
    args.extend([
        "-n".into(),
        c.requests.to_string(),
        "-d".into(),
        "64".into(),
        "-c".into(),
        "50".into(),
        "-P".into(),
        c.pipeline.to_string(),
        "--csv".into(),
    ]);
    if c.spread {
        args.extend(["-r".into(), "100000".into()]);
    }
    if c.resp3 {
        args.push("-3".into());
    }
    if c.client_threads > 1 {
        args.extend(["--threads".into(), c.client_threads.to_string()]);
    }
    if c.test == "EVAL" {
        let key = if c.spread { "key:__rand_int__" } else { "key" };
        args.extend(["eval", SCRIPT, "1", key, &"x".repeat(64)].map(String::from));
    }
    let cpu_before = harness::cpu_ns(pid);
    let out = Command::new(harness::tool("redis-benchmark"))
        .args(&args)
        .output()
        .expect("run redis-benchmark");
    let cpu = harness::cpu_ns(pid) - cpu_before;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("Error from server"),
        "redis-benchmark {} failed:\n{stdout}\n{stderr}",
        args.join(" ")
    );
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let rows: Vec<Row> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("\"test\""))
        .skip(1)
        .filter_map(|l| {
            // Counted from the end: a custom command's name (the EVAL rows') has
            // commas of its own.
            let cols: Vec<&str> = l.rsplitn(8, ',').map(|c| c.trim_matches('"')).collect();
            Some(Row {
                rps: cols.get(6)?.parse().ok()?,
                p50_ms: cols.get(3)?.parse().ok()?,
                cpu_ns: cpu as f64 / c.requests as f64,
            })
        })
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "unexpected redis-benchmark output:\n{stdout}"
    );
    rows[0]
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

    // The README's table was run with the loops gathering (`--loop-gather-below
    // 80`); `BENCH_GATHER=0` runs them always spread, the server's default.
    let gather = std::env::var("BENCH_GATHER").unwrap_or_else(|_| "80".into());
    let mut args = vec!["--loop-gather-below", gather.as_str()];
    if let Some(t) = &threads {
        args.extend(["--threads", t.as_str()]);
    }
    let relcache = TestServer::start_with(&args);
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

    let mut configs = Vec::new();
    for (pipeline, n) in [(16, requests * 5), (1, requests)] {
        for spread in [true, false] {
            for test in ["SET", "GET"] {
                configs.push(Config {
                    test,
                    pipeline,
                    spread,
                    resp3: false,
                    client_threads: 1,
                    requests: n,
                });
            }
        }
        configs.push(Config {
            test: "GET",
            pipeline,
            spread: true,
            resp3: true,
            client_threads: 1,
            requests: n,
        });
        configs.push(Config {
            test: "EVAL",
            pipeline,
            spread: true,
            resp3: false,
            client_threads: 1,
            requests: n,
        });
    }
    // Scripts on one hot key: on relcache both loops' scripts want the same
    // shard, and wait for each other's.
    configs.push(Config {
        test: "EVAL",
        pipeline: 16,
        spread: false,
        resp3: false,
        client_threads: 1,
        requests: requests * 5,
    });
    for spread in [true, false] {
        for test in ["SET", "GET"] {
            configs.push(Config {
                test,
                pipeline: 16,
                spread,
                resp3: false,
                client_threads: 2,
                // Threaded, redis-benchmark times a run in steps of its 250 ms
                // poll: a run three times longer keeps that error to a few percent.
                requests: requests * 15,
            });
        }
    }
    let mut cells: Vec<(Config, Cell)> = configs.iter().map(|&c| (c, Cell::default())).collect();

    for round in 0..rounds {
        for (c, cell) in cells.iter_mut() {
            // Alternate who goes first so drift (thermal, page cache, the other
            // engineers' builds) does not always favour the same server.
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for is_relcache in order {
                let row = if is_relcache {
                    run_benchmark(relcache.port, relcache.pid(), *c)
                } else {
                    run_benchmark(redis.port, redis.pid(), *c)
                };
                eprintln!(
                    "round {} -P {:<2} {:<6} cl {} {:<8} {:<3} {:>10.0} req/s  p50 {:.3} ms  {:>6.0} ns CPU/req",
                    round + 1,
                    c.pipeline,
                    c.keys(),
                    c.client_threads,
                    if is_relcache { "relcache" } else { "redis" },
                    c.test,
                    row.rps,
                    row.p50_ms,
                    row.cpu_ns
                );
                if is_relcache {
                    cell.relcache.push(row);
                } else {
                    cell.redis.push(row);
                }
            }
        }
    }

    println!();
    println!(
        "{:<4} {:>3} {:<6} {:>2} {:>14} {:>14} {:>6}   {:>12} {:>12} {:>6}   {:>8} {:>8}",
        "test",
        "-P",
        "keys",
        "cl",
        "relcache req/s",
        "redis req/s",
        "ratio",
        "relcache ns",
        "redis ns",
        "ratio",
        "rc p50ms",
        "rd p50ms"
    );
    for (c, cell) in &cells {
        let med =
            |rows: &[Row], f: fn(&Row) -> f64| median(&mut rows.iter().map(f).collect::<Vec<_>>());
        let (ra, rb) = (med(&cell.relcache, |r| r.rps), med(&cell.redis, |r| r.rps));
        let (ca, cb) = (
            med(&cell.relcache, |r| r.cpu_ns),
            med(&cell.redis, |r| r.cpu_ns),
        );
        println!(
            "{:<4} {:>3} {:<6} {:>2} {ra:>14.0} {rb:>14.0} {:>6.2}   {ca:>12.0} {cb:>12.0} {:>6.2}   {:>8.3} {:>8.3}",
            c.test,
            c.pipeline,
            c.keys(),
            c.client_threads,
            ra / rb,
            ca / cb,
            med(&cell.relcache, |r| r.p50_ms),
            med(&cell.redis, |r| r.p50_ms),
        );
    }
    println!("(ns: server CPU time per request, all threads; ratio < 1 in ns and > 1 in req/s favour relcache;");
    println!(" cl: redis-benchmark client threads)");
}
