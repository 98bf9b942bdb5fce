//! How long one client waits behind another client's heavy command: relcache
//! against a real `redis-server`.
//!
//! Run by hand, never in CI: `cargo bench --bench stalls_vs_redis`. Cargo builds the
//! release `relcache-server` for benches; this file builds nothing itself. It starts
//! relcache and `redis-server --save '' --appendonly no` on free ports, then for each
//! heavy operation below runs a "victim" connection on its own thread that sends
//! PING in a tight loop (one in flight), and reports the longest and the p99 PING
//! round trip among those that overlapped the heavy operation, with the operation's
//! own duration and the server's CPU time during it. Each is done on both servers,
//! alternating which goes first, for R rounds; the table shows the medians.
//!
//! The heavy operations:
//! - `KEYS *` over K keys (the reply read in full);
//! - `FLUSHALL` (synchronous, Redis's default) of those K keys;
//! - one `SADD` of S ids (integers, the request written and the reply read);
//! - `GET` of one value of B megabytes (built with `APPEND` in 4 MB chunks), read in
//!   full as fast as the client can;
//! - `DEL` of that value (synchronous, Redis's default: it replies once the
//!   memory is back);
//! - a client that never reads, cut off by `client-output-buffer-limit normal 64mb
//!   0 0`: it pipelines GETs of an F megabyte value, worth 256 MB of replies; the
//!   window ends when the server no longer counts it in `connected_clients`;
//! - `SUNIONSTORE` of two sets of U ids each (one request, the reply an
//!   integer: the walk of 2U members is the work);
//! - two clients at once, each pipelining P `SINTERCARD 2 a b` over two sets of
//!   10,000 ids (about a third of a millisecond each, too little for relcache
//!   to hand the loop over for one): two, so one shares relcache's loop with the
//!   victim whichever loop the victim is on.
//!
//! Environment: `BENCH_ROUNDS` (default 3), `BENCH_KEYS` (K, default 1000000),
//! `BENCH_SET_IDS` (S, default 5000000), `BENCH_BIG_MB` (B, default 400),
//! `BENCH_FLOOD_MB` (F, default 16), `BENCH_PIPELINE` (P, default 1000),
//! `BENCH_UNION_IDS` (U, default 1000000).
//!
//! What this does NOT measure:
//! - A network, or a quiet machine. Clients and servers share one machine over
//!   loopback; on the usual 2 cores the heavy client, the victim and the servers
//!   compete for them, so "while a core is free" only holds part of the time and
//!   single PINGs can wait for a core, not for the server. The max is one sample:
//!   read it with the p99 and over rounds.
//! - Throughput of the heavy operations themselves (their durations are printed,
//!   but client-side and dominated by transfer for KEYS and GET).
//! - Other heavy commands (EXPIRE of a big key, SMEMBERS, SCRIPT…), many
//!   victims, pipelined victims, or a victim that is itself slow to read.
//! - relcache's default of a loop per core: it runs with `--threads 1`, so the
//!   victim always shares its loop with the heavy client. With a loop per core
//!   a new connection goes to the loop with the fewest, and the victim would
//!   mostly be on the other loop, where what it shows is two cores shared by
//!   three busy threads, not the heavy command.
//! - How the two pipelining clients share the server between themselves.
//! - Asynchronous deletion options (`FLUSHALL ASYNC`, `lazyfree-*`): the synchronous
//!   forms are what clients send by default.

#[path = "../tests/harness/mod.rs"]
mod harness;

use harness::{env_u64, median};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use harness::real_redis::RedisServer;
use harness::TestServer;

/// One heavy operation's effect on the victim.
#[derive(Clone, Copy, Debug)]
struct Row {
    max_ms: f64,
    p99_ms: f64,
    pings: usize,
    op_ms: f64,
    cpu_ms: f64,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Keys,
    Flushall,
    Sadd,
    BigGet,
    BigDel,
    CutOff,
    Union,
    Pipelined,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::Keys,
        Op::Flushall,
        Op::Sadd,
        Op::BigGet,
        Op::BigDel,
        Op::CutOff,
        Op::Union,
        Op::Pipelined,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Keys => "KEYS *",
            Op::Flushall => "FLUSHALL",
            Op::Sadd => "SADD (one request)",
            Op::BigGet => "GET big value",
            Op::BigDel => "DEL big value",
            Op::CutOff => "output limit cut-off",
            Op::Union => "SUNIONSTORE",
            Op::Pipelined => "pipelined SINTERCARDs",
        }
    }
}

struct Sizes {
    keys: u64,
    set_ids: u64,
    big_mb: u64,
    flood_mb: u64,
    pipeline: u64,
    union_ids: u64,
}

/// A server under test, whichever it is.
struct Target {
    name: &'static str,
    port: u16,
    pid: u32,
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s
}

/// Reads and discards one RESP reply (any type, nested), returning the bulk
/// bytes and array elements seen, so a caller can check it was what it expected.
fn skip_reply(r: &mut impl BufRead) -> std::io::Result<u64> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    let n = |l: &[u8]| -> i64 {
        std::str::from_utf8(&l[1..l.len() - 2])
            .unwrap()
            .parse()
            .unwrap()
    };
    match line.first() {
        Some(b'*') => {
            let len = n(&line).max(0) as u64;
            for _ in 0..len {
                skip_reply(r)?;
            }
            Ok(len)
        }
        Some(b'$') if n(&line) >= 0 => {
            let mut left = n(&line) as u64 + 2;
            while left > 0 {
                let buf = r.fill_buf()?;
                if buf.is_empty() {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                let k = buf.len().min(left as usize);
                r.consume(k);
                left -= k as u64;
            }
            Ok(n(&line) as u64)
        }
        Some(b':') => Ok(n(&line).max(0) as u64),
        Some(b'-') => panic!("error reply: {}", String::from_utf8_lossy(&line)),
        Some(_) => Ok(0),
        None => Err(std::io::ErrorKind::UnexpectedEof.into()),
    }
}

/// Sends one request and reads its reply.
fn call(s: &mut BufReader<TcpStream>, args: &[&[u8]]) -> u64 {
    s.get_mut().write_all(&harness::resp_cmd(args)).unwrap();
    skip_reply(s).unwrap()
}

/// Stores `n` small keys, pipelined in batches.
fn populate(port: u16, n: u64) {
    let mut s = BufReader::with_capacity(1 << 16, connect(port));
    let batch = 10_000;
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let mut req = Vec::new();
        for k in i..end {
            let key = format!("key:{k}");
            req.extend(harness::resp_cmd(&[b"SET", key.as_bytes(), b"v"]));
        }
        s.get_mut().write_all(&req).unwrap();
        for _ in i..end {
            skip_reply(&mut s).unwrap();
        }
        i = end;
    }
}

/// Stores sets `a` and `b` of `n` ids each, the multiples of `steps[0]` and of
/// `steps[1]`, in requests of at most 100,000 ids.
fn two_sets(s: &mut BufReader<TcpStream>, t: &Target, n: u64, steps: [u64; 2]) {
    for (key, step) in [&b"a"[..], b"b"].into_iter().zip(steps) {
        for from in (0..n).step_by(100_000) {
            let ids: Vec<String> = (from..(from + 100_000).min(n))
                .map(|i| (i * step).to_string())
                .collect();
            let mut args: Vec<&[u8]> = vec![b"SADD", key];
            args.extend(ids.iter().map(|id| id.as_bytes()));
            assert_eq!(call(s, &args), ids.len() as u64, "SADD on {}", t.name);
        }
    }
}

/// The size of each of the two sets the pipelined SINTERCARDs intersect.
const PIPELINED_SET_IDS: u64 = 10_000;

/// PING round trips: when each was sent and how long it took.
struct Victim {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<(Instant, Duration)>>,
}

impl Victim {
    fn start(port: u16) -> Victim {
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = connect(port);
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut samples = Vec::with_capacity(1 << 20);
            let mut buf = [0u8; 7];
            while !flag.load(Ordering::Relaxed) {
                let sent = Instant::now();
                s.write_all(b"PING\r\n").unwrap();
                s.read_exact(&mut buf).unwrap();
                assert_eq!(&buf, b"+PONG\r\n");
                samples.push((sent, sent.elapsed()));
            }
            samples
        });
        Victim { stop, thread }
    }

    /// Stops the victim and keeps the PINGs that overlapped `from..to`.
    fn finish(self, from: Instant, to: Instant) -> Vec<Duration> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap();
        samples
            .into_iter()
            .filter(|&(sent, took)| sent < to && sent + took > from)
            .map(|(_, took)| took)
            .collect()
    }
}

fn info_stat(s: &mut BufReader<TcpStream>, section: &str, name: &str) -> u64 {
    s.get_mut()
        .write_all(&harness::resp_cmd(&[b"INFO", section.as_bytes()]))
        .unwrap();
    let mut line = Vec::new();
    s.read_until(b'\n', &mut line).unwrap();
    let len: usize = std::str::from_utf8(&line[1..line.len() - 2])
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0u8; len + 2];
    s.read_exact(&mut body).unwrap();
    harness::info_value(&String::from_utf8_lossy(&body), name)
}

/// Sets up what `op` needs, outside the measured window.
fn prepare(t: &Target, op: Op, sizes: &Sizes) {
    let mut s = BufReader::new(connect(t.port));
    match op {
        // FLUSHALL runs right after KEYS, on the same keys.
        Op::Keys => populate(t.port, sizes.keys),
        Op::Flushall | Op::Sadd => {}
        Op::Pipelined => two_sets(&mut s, t, PIPELINED_SET_IDS, [7, 3]),
        Op::Union => two_sets(&mut s, t, sizes.union_ids, [2, 3]),
        Op::BigGet | Op::BigDel => {
            let chunk = vec![b'x'; 4 << 20];
            for _ in 0..sizes.big_mb.div_ceil(4) {
                call(&mut s, &[b"APPEND", b"big", &chunk]);
            }
        }
        Op::CutOff => {
            let size = (sizes.flood_mb << 20).to_string();
            call(&mut s, &[b"SETRANGE", b"flood", size.as_bytes(), b"x"]);
            call(
                &mut s,
                &[
                    b"CONFIG",
                    b"SET",
                    b"client-output-buffer-limit",
                    b"normal 64mb 0 0",
                ],
            );
        }
    }
}

/// Runs `op` once; returns when it is over, as seen by its client.
fn run(t: &Target, op: Op, sizes: &Sizes) {
    let mut s = BufReader::with_capacity(1 << 20, connect(t.port));
    match op {
        Op::Keys => {
            let n = call(&mut s, &[b"KEYS", b"*"]);
            assert_eq!(n, sizes.keys, "KEYS on {}", t.name);
        }
        Op::Flushall => {
            call(&mut s, &[b"FLUSHALL"]);
        }
        Op::Sadd => {
            let mut req =
                format!("*{}\r\n$4\r\nSADD\r\n$3\r\nids\r\n", sizes.set_ids + 2).into_bytes();
            for id in 0..sizes.set_ids {
                let id = (id * 7919 + 1_000_000_000).to_string();
                req.extend(format!("${}\r\n{id}\r\n", id.len()).as_bytes());
            }
            s.get_mut().write_all(&req).unwrap();
            assert_eq!(
                skip_reply(&mut s).unwrap(),
                sizes.set_ids,
                "SADD on {}",
                t.name
            );
        }
        Op::BigGet => {
            let n = call(&mut s, &[b"GET", b"big"]);
            assert!(n >= sizes.big_mb << 20, "GET big on {}", t.name);
        }
        Op::BigDel => {
            assert_eq!(call(&mut s, &[b"DEL", b"big"]), 1, "DEL big on {}", t.name);
        }
        Op::Union => {
            // a ∪ b: the even ids and the multiples of 3, less the multiples of 6.
            let n = sizes.union_ids;
            let union = 2 * n - (2 * n).div_ceil(6);
            let reply = call(&mut s, &[b"SUNIONSTORE", b"dst", b"a", b"b"]);
            assert_eq!(reply, union, "SUNIONSTORE on {}", t.name);
        }
        Op::Pipelined => {
            let req = harness::resp_cmd(&[b"SINTERCARD", b"2", b"a", b"b"])
                .repeat(sizes.pipeline as usize);
            let mut clients: Vec<_> = (0..2)
                .map(|_| BufReader::with_capacity(1 << 16, connect(t.port)))
                .collect();
            for c in &mut clients {
                c.get_mut().write_all(&req).unwrap();
            }
            // The ids both sets hold: multiples of 21 below 3 × their size.
            let both = (3 * PIPELINED_SET_IDS).div_ceil(21);
            for c in &mut clients {
                for _ in 0..sizes.pipeline {
                    assert_eq!(skip_reply(c).unwrap(), both, "SINTERCARD on {}", t.name);
                }
            }
        }
        Op::CutOff => {
            let mut ctl = BufReader::new(connect(t.port));
            // Redis 7.0 has no `client_output_buffer_limit_disconnections`.
            let before = info_stat(&mut ctl, "clients", "connected_clients");
            let mut req = Vec::new();
            for _ in 0..(256 / sizes.flood_mb).max(2) {
                req.extend(harness::resp_cmd(&[b"GET", b"flood"]));
            }
            s.get_mut().write_all(&req).unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while info_stat(&mut ctl, "clients", "connected_clients") >= before {
                assert!(
                    Instant::now() < deadline,
                    "{} never cut the client off",
                    t.name
                );
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Clears what `op` left, outside the measured window.
fn cleanup(t: &Target, op: Op) {
    let mut s = BufReader::new(connect(t.port));
    match op {
        Op::Keys => {}
        Op::CutOff => {
            call(
                &mut s,
                &[
                    b"CONFIG",
                    b"SET",
                    b"client-output-buffer-limit",
                    b"normal 0 0 0",
                ],
            );
            call(&mut s, &[b"FLUSHALL"]);
        }
        _ => {
            call(&mut s, &[b"FLUSHALL"]);
        }
    }
}

fn measure(t: &Target, op: Op, sizes: &Sizes) -> Row {
    prepare(t, op, sizes);
    thread::sleep(Duration::from_millis(200));
    let victim = Victim::start(t.port);
    thread::sleep(Duration::from_millis(100));
    let cpu_before = harness::cpu_ns(t.pid);
    let from = Instant::now();
    run(t, op, sizes);
    let to = Instant::now();
    let cpu = harness::cpu_ns(t.pid) - cpu_before;
    let mut waits = victim.finish(from, to);
    cleanup(t, op);
    waits.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Row {
        max_ms: waits.last().map_or(0.0, |&d| ms(d)),
        p99_ms: waits.get(waits.len() * 99 / 100).map_or(0.0, |&d| ms(d)),
        pings: waits.len(),
        op_ms: ms(to - from),
        cpu_ms: cpu as f64 / 1e6,
    }
}

fn main() {
    if !harness::invoked_by_cargo_bench() {
        return;
    }
    let rounds = env_u64("BENCH_ROUNDS", 3).max(1) as usize;
    let sizes = Sizes {
        keys: env_u64("BENCH_KEYS", 1_000_000).max(1),
        set_ids: env_u64("BENCH_SET_IDS", 5_000_000).max(1),
        big_mb: env_u64("BENCH_BIG_MB", 400).max(4),
        flood_mb: env_u64("BENCH_FLOOD_MB", 16).clamp(1, 128),
        pipeline: env_u64("BENCH_PIPELINE", 1000).max(1),
        union_ids: env_u64("BENCH_UNION_IDS", 1_000_000).max(1),
    };
    let relcache = TestServer::start_with(&["--threads", "1"]);
    let redis = RedisServer::start();
    let targets = [
        Target {
            name: "relcache",
            port: relcache.port,
            pid: relcache.pid(),
        },
        Target {
            name: "redis",
            port: redis.port,
            pid: redis.pid(),
        },
    ];
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "stalls_vs_redis: {rounds} rounds, {cores} cores, {} keys, {} set ids, {} MB value, \
         {} ids a union set, {} SINTERCARDs a pipeline; relcache with one loop",
        sizes.keys, sizes.set_ids, sizes.big_mb, sizes.union_ids, sizes.pipeline
    );

    // results[op][target] = one row per round
    let mut results: Vec<[Vec<Row>; 2]> = Op::ALL.iter().map(|_| [vec![], vec![]]).collect();
    for round in 0..rounds {
        // Alternate who goes first so drift (the other engineers' builds) does not
        // always favour the same server.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for ti in order {
            let t = &targets[ti];
            for (oi, &op) in Op::ALL.iter().enumerate() {
                let row = measure(t, op, &sizes);
                eprintln!(
                    "round {} {:<8} {:<22} max {:>8.1} ms  p99 {:>7.1} ms  ({} pings)  op {:>8.1} ms  cpu {:>8.1} ms",
                    round + 1,
                    t.name,
                    op.name(),
                    row.max_ms,
                    row.p99_ms,
                    row.pings,
                    row.op_ms,
                    row.cpu_ms
                );
                results[oi][ti].push(row);
            }
        }
    }

    println!();
    println!(
        "{:<22} {:>12} {:>12}   {:>12} {:>12}   {:>10} {:>10}",
        "heavy op (medians)",
        "rc max ms",
        "redis max",
        "rc p99 ms",
        "redis p99",
        "rc op ms",
        "redis op"
    );
    for (oi, op) in Op::ALL.iter().enumerate() {
        let med =
            |rows: &[Row], f: fn(&Row) -> f64| median(&mut rows.iter().map(f).collect::<Vec<_>>());
        let [rc, rd] = &results[oi];
        println!(
            "{:<22} {:>12.1} {:>12.1}   {:>12.1} {:>12.1}   {:>10.0} {:>10.0}",
            op.name(),
            med(rc, |r| r.max_ms),
            med(rd, |r| r.max_ms),
            med(rc, |r| r.p99_ms),
            med(rd, |r| r.p99_ms),
            med(rc, |r| r.op_ms),
            med(rd, |r| r.op_ms),
        );
    }
    println!(
        "(max / p99: another client's PING round trip during the op; the goal is max < 10 ms)"
    );
}
