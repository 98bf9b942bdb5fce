//! Shared pieces of the by-hand benchmarks: starting relcache and a real Redis on
//! free ports, a pipelined request blaster, a latency probe and INFO readers.
//!
//! Both servers are driven by the same client code over the same loopback, so the
//! client's own cost is the same on both sides of every comparison. What none of
//! these measure: network latency (loopback only), and the client and the server
//! share the machine's cores, so absolute rates are lower than on separate hosts.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use relcache_protocol::resp::{parse_frame, Frame, Limits};

#[path = "../../tests/harness/mod.rs"]
pub mod harness;

/// A server under test: relcache or a real redis-server.
pub enum Target {
    Relcache(harness::TestServer),
    Redis(harness::real_redis::RedisServer),
}

impl Target {
    pub fn relcache(args: &[&str]) -> Target {
        Target::Relcache(harness::TestServer::start_with(args))
    }

    /// A real redis-server with persistence off, on a free port.
    pub fn redis(args: &[&str]) -> Target {
        Target::Redis(harness::real_redis::RedisServer::start_with(args))
    }

    pub fn port(&self) -> u16 {
        match self {
            Target::Relcache(s) => s.port,
            Target::Redis(r) => r.port,
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Target::Relcache(s) => s.pid(),
            Target::Redis(r) => r.pid(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Target::Relcache(_) => "relcache",
            Target::Redis(_) => "redis",
        }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// One field of INFO, as a number.
    pub fn info_u64(&self, field: &str) -> u64 {
        let mut s = self.connect();
        let reply = roundtrip(&mut s, &[b"INFO", b"all"]).unwrap();
        let (Frame::Bulk(text) | Frame::Verbatim { text, .. }) = reply else {
            panic!("INFO reply {reply:?}")
        };
        let text = String::from_utf8_lossy(&text).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or_else(|| panic!("{} INFO has no {field}", self.name()))
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// RESP encoding of one command.
pub use harness::resp_cmd as encode;

/// Sends one command and reads its reply.
pub fn roundtrip(s: &mut TcpStream, args: &[&[u8]]) -> std::io::Result<Frame> {
    s.write_all(&encode(args))?;
    let mut replies = read_replies(s, 1, &mut Vec::new())?;
    Ok(replies.pop().unwrap())
}

/// Reads `n` replies, keeping leftover bytes in `buf`.
pub fn read_replies(s: &mut TcpStream, n: usize, buf: &mut Vec<u8>) -> std::io::Result<Vec<Frame>> {
    let limits = Limits::default();
    let mut out = Vec::with_capacity(n);
    let mut chunk = vec![0u8; 256 * 1024];
    while out.len() < n {
        match parse_frame(buf, &limits) {
            Ok(Some((frame, used))) => {
                buf.drain(..used);
                out.push(frame);
                continue;
            }
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
        let k = s.read(&mut chunk)?;
        if k == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..k]);
    }
    Ok(out)
}

/// Counts the replies in `buf` without building frames: returns (complete replies,
/// bytes they span, error replies among them). The load generator must cost as
/// little as possible per reply, or it, not the server, sets the rate.
fn count_replies(buf: &[u8], _limits: &Limits) -> (usize, usize, usize) {
    let (mut n, mut at, mut errors) = (0, 0, 0);
    while let Some(used) = skip_frame(&buf[at..]) {
        errors += (buf[at] == b'-') as usize;
        n += 1;
        at += used;
    }
    (n, at, errors)
}

/// Length of the complete RESP2/RESP3 value at the front of `buf`, if complete.
fn skip_frame(buf: &[u8]) -> Option<usize> {
    let line_end = buf.iter().position(|&b| b == b'\n')?;
    let header = &buf[1..line_end.saturating_sub(1)];
    let num = || std::str::from_utf8(header).ok()?.parse::<i64>().ok();
    let after = line_end + 1;
    match *buf.first()? {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
        b'$' | b'=' | b'!' => {
            let len = num()?;
            if len < 0 {
                return Some(after);
            }
            let end = after + len as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' => {
            let mut count = num()?;
            if count < 0 {
                return Some(after);
            }
            if buf[0] == b'%' {
                count *= 2;
            }
            let mut at = after;
            for _ in 0..count {
                at += skip_frame(&buf[at..])?;
            }
            Some(at)
        }
        _ => panic!("unexpected reply byte {:?}", buf[0] as char),
    }
}

/// Result of a throughput run.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub requests_per_sec: f64,
    /// Requests completed in all.
    pub requests: u64,
    pub errors: u64,
}

/// Sends `requests` (cycled) over `conns` connections with `pipeline` requests in
/// flight each, for `secs`, and measures completed requests per second. Each
/// connection has its own thread and blocking socket.
pub fn blast(port: u16, requests: &[Vec<u8>], conns: usize, pipeline: usize, secs: f64) -> Rate {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|c| {
            let reqs: Vec<Vec<u8>> = requests.to_vec();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_nodelay(true).unwrap();
                let limits = Limits::default();
                let mut batch = Vec::new();
                let mut buf = Vec::with_capacity(1 << 20);
                let mut chunk = vec![0u8; 256 * 1024];
                let (mut done, mut errors, mut next) = (0u64, 0u64, c);
                while Instant::now() < deadline {
                    batch.clear();
                    for _ in 0..pipeline {
                        batch.extend_from_slice(&reqs[next % reqs.len()]);
                        next += 1;
                    }
                    s.write_all(&batch).unwrap();
                    let mut got = 0;
                    while got < pipeline {
                        let k = s.read(&mut chunk).unwrap();
                        assert!(k > 0, "server closed the connection");
                        buf.extend_from_slice(&chunk[..k]);
                        let (n, used, e) = count_replies(&buf, &limits);
                        buf.drain(..used);
                        got += n;
                        errors += e as u64;
                    }
                    done += pipeline as u64;
                }
                (done, errors)
            })
        })
        .collect();
    let (mut done, mut errors) = (0, 0);
    for h in handles {
        let (d, e) = h.join().unwrap();
        done += d;
        errors += e;
    }
    Rate {
        requests_per_sec: done as f64 / start.elapsed().as_secs_f64(),
        requests: done,
        errors,
    }
}

/// Closed-loop latency of `request` on `conns` connections for `secs`, in µs.
pub fn latency(port: u16, request: &[u8], conns: usize, secs: f64) -> Histogram<u64> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let req = request.to_vec();
            std::thread::spawn(move || {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_nodelay(true).unwrap();
                let mut buf = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    s.write_all(&req).unwrap();
                    read_replies(&mut s, 1, &mut buf).unwrap();
                    h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                }
                h
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for h in handles {
        all.add(h.join().unwrap()).unwrap();
    }
    all
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Runs `f` once per target per round, alternating, and returns the medians.
pub fn alternate(
    targets: &[&Target],
    rounds: usize,
    mut f: impl FnMut(&Target) -> f64,
) -> Vec<f64> {
    let mut results = vec![Vec::new(); targets.len()];
    for _ in 0..rounds {
        for (i, t) in targets.iter().enumerate() {
            results[i].push(f(t));
        }
    }
    results.into_iter().map(median).collect()
}

/// Rounds per comparison (env BENCH_ROUNDS, default 3).
pub fn rounds() -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// One line describing the machine, for the record.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {cpu}")
}
