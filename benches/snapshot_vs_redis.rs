//! Snapshots: relcache against a real `redis-server` 7 on the same data.
//!
//! Run by hand, never in CI: `cargo bench --bench snapshot_vs_redis`. Both servers
//! get the same keyspace — 1,000 users × 10,000 ids as sets (relcache: idset tables
//! loaded with `IDSET.LOAD … PACKED`; Redis: `SADD`, stored as hashtables since 10,000
//! is past `set-max-intset-entries`) plus 1,000,000 short strings (`str:<i>` =
//! `value-<i>`) — then, for R rounds, each server is measured for:
//!
//! - SAVE time: the `SAVE` round trip as the client sees it.
//! - file size: the snapshot on disk (`dump.rcs` / `dump.rdb`).
//! - restart to first answer: `kill -9`, then from spawning the process to the first
//!   `GET` of a loaded key answered with its value (polled every millisecond; a
//!   `-LOADING` or a refused connection does not count).
//! - RSS after load: `VmRSS` of the restarted process once INFO says `loading:0`.
//! - GET latency while saving: `redis-benchmark -t get -c 10 -P 1` p99, once with the
//!   server idle and once while another connection runs BGSAVE after BGSAVE (Redis
//!   forks for each; relcache walks its shards on a saver thread).
//!
//! Medians of R rounds are printed side by side. Environment: `BENCH_ROUNDS`
//! (default 3), `BENCH_USERS` (1000), `BENCH_IDS` (10000), `BENCH_STRINGS` (1000000).
//!
//! What this does NOT measure: a cold page cache (the file was just written, so the
//! restart reads it from memory on both sides; a cold disk adds its read time to
//! both), a save under write load (the p99 run reads only), or Redis's own fork cost on a large heap (the
//! machine's heap here is small). Loopback only, client and server on the same cores.

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use relcache_protocol::resp::{parse_frame, Frame, Limits};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Relcache,
    Redis,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Relcache => "relcache",
            Kind::Redis => "redis",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Kind::Relcache => "dump.rcs",
            Kind::Redis => "dump.rdb",
        }
    }

    fn spawn(self, port: u16, dir: &Path) -> Child {
        let (port, dir) = (port.to_string(), dir.to_str().unwrap().to_string());
        let mut cmd = match self {
            Kind::Relcache => {
                let mut c = Command::new(harness::server_bin());
                c.args(["--port", &port, "--dir", &dir]);
                c
            }
            Kind::Redis => {
                let mut c = Command::new(harness::tool("redis-server"));
                c.args([
                    "--port",
                    &port,
                    "--dir",
                    &dir,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ]);
                c
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server")
    }
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn connect(port: u16) -> std::io::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(600)))?;
        Ok(Conn { s, buf: Vec::new() })
    }

    fn send(&mut self, args: &[&[u8]]) {
        self.s.write_all(&harness::resp_cmd(args)).unwrap();
    }

    fn reply(&mut self) -> std::io::Result<Frame> {
        loop {
            if let Some((f, n)) = parse_frame(&self.buf, &Limits::default()).unwrap() {
                self.buf.drain(..n);
                return Ok(f);
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.s.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Frame {
        self.send(args);
        self.reply().unwrap()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_up(port: u16) -> Conn {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(c) = Conn::connect(port) {
            return c;
        }
        assert!(Instant::now() < deadline, "server did not come up");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn fill(kind: Kind, c: &mut Conn, users: usize, ids: usize, strings: usize) {
    let mut pending = 0;
    for u in 0..users {
        let key = format!("user:{u}:following");
        let members: Vec<u64> = (0..ids as u64)
            .map(|i| (u as u64 * 1_000_003 + i * 7919) % 100_000_000 + 1)
            .collect();
        match kind {
            Kind::Relcache => {
                let packed: Vec<u8> = members.iter().flat_map(|m| m.to_le_bytes()).collect();
                c.send(&[b"IDSET.LOAD", key.as_bytes(), b"PACKED", &packed]);
            }
            Kind::Redis => {
                let text: Vec<String> = members.iter().map(u64::to_string).collect();
                let mut args: Vec<&[u8]> = vec![b"SADD", key.as_bytes()];
                args.extend(text.iter().map(|t| t.as_bytes()));
                c.send(&args);
            }
        }
        pending += 1;
        if pending == 16 {
            for _ in 0..pending {
                c.reply().unwrap();
            }
            pending = 0;
        }
    }
    for batch in (0..strings).collect::<Vec<_>>().chunks(1000) {
        let kv: Vec<String> = batch
            .iter()
            .flat_map(|i| [format!("str:{i}"), format!("value-{i}")])
            .collect();
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        args.extend(kv.iter().map(|t| t.as_bytes()));
        c.send(&args);
        pending += 1;
        if pending == 16 {
            for _ in 0..pending {
                c.reply().unwrap();
            }
            pending = 0;
        }
    }
    for _ in 0..pending {
        c.reply().unwrap();
    }
}

fn info_field(c: &mut Conn, field: &str) -> Option<String> {
    let Frame::Bulk(text) = c.call(&[b"INFO", b"everything"]) else {
        return None;
    };
    String::from_utf8_lossy(&text).lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

struct Round {
    save_s: f64,
    file_bytes: u64,
    restart_s: f64,
    rss_bytes: u64,
}

/// Restarts `kind` on `dir` after a kill -9 of `child`; returns the new child and
/// the time from spawn to the first GET answered with its value.
// The new child is returned to the caller, which kills and waits for it.
#[allow(clippy::zombie_processes)]
fn restart(kind: Kind, mut child: Child, port: u16, dir: &Path) -> (Child, f64) {
    child.kill().unwrap();
    child.wait().unwrap();
    let want = Frame::Bulk(bytes::Bytes::from_static(b"value-12345"));
    let start = Instant::now();
    let child = kind.spawn(port, dir);
    loop {
        if let Ok(mut c) = Conn::connect(port) {
            loop {
                c.send(&[b"GET", b"str:12345"]);
                match c.reply() {
                    Ok(f) if f == want => return (child, start.elapsed().as_secs_f64()),
                    Ok(_) => std::thread::sleep(Duration::from_millis(1)),
                    Err(_) => break,
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} never answered",
            kind.name()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn measure(kind: Kind, rounds: usize, users: usize, ids: usize, strings: usize) -> Vec<Round> {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "relcache-snapbench-{}-{}",
        kind.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let mut child = kind.spawn(port, &dir);
    let mut c = wait_up(port);
    let t = Instant::now();
    fill(kind, &mut c, users, ids, strings);
    eprintln!(
        "{}: filled in {:.1} s",
        kind.name(),
        t.elapsed().as_secs_f64()
    );
    let (idle, saving, saves) = p99_while_saving(port);
    println!(
        "{}: GET p99 {idle:.3} ms idle, {saving:.3} ms during {saves} back-to-back BGSAVEs ({:.2}x)",
        kind.name(),
        saving / idle
    );
    let mut out = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let reply = c.call(&[b"SAVE"]);
        let save_s = t.elapsed().as_secs_f64();
        assert!(matches!(reply, Frame::Simple(_)), "SAVE: {reply:?}");
        let file_bytes = std::fs::metadata(dir.join(kind.file())).unwrap().len();
        drop(c);
        let (next, restart_s) = restart(kind, child, port, &dir);
        child = next;
        c = wait_up(port);
        while info_field(&mut c, "loading").as_deref() != Some("0") {
            std::thread::sleep(Duration::from_millis(5));
        }
        let rss = rss_bytes(child.id());
        out.push(Round {
            save_s,
            file_bytes,
            restart_s,
            rss_bytes: rss,
        });
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// p99 of GET in ms from one `redis-benchmark` run.
fn get_p99_ms(port: u16) -> f64 {
    let out = Command::new(harness::tool("redis-benchmark"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", "get", "-n", "200000", "-c", "10", "-P", "1", "--csv"])
        .output()
        .expect("run redis-benchmark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
    stdout
        .lines()
        .find(|l| l.starts_with("\"GET\""))
        .and_then(|l| l.split(',').nth(6))
        .and_then(|c| c.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("unexpected redis-benchmark output:\n{stdout}"))
}

/// GET p99 with the server idle, then while BGSAVEs run back to back; and how many
/// saves ran meanwhile.
fn p99_while_saving(port: u16) -> (f64, f64, u32) {
    let idle = get_p99_ms(port);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let saver = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = wait_up(port);
            let mut saves = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if matches!(c.call(&[b"BGSAVE"]), Frame::Simple(_)) {
                    saves += 1;
                }
                while info_field(&mut c, "rdb_bgsave_in_progress").as_deref() == Some("1") {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            saves
        })
    };
    let saving = get_p99_ms(port);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (idle, saving, saver.join().unwrap())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if !harness::invoked_by_cargo_bench() {
        return;
    }
    let rounds = env_usize("BENCH_ROUNDS", 3);
    let users = env_usize("BENCH_USERS", 1000);
    let ids = env_usize("BENCH_IDS", 10_000);
    let strings = env_usize("BENCH_STRINGS", 1_000_000);
    println!("snapshot_vs_redis: {users} users x {ids} ids + {strings} strings, median of {rounds} rounds");
    let mb = |b: f64| b / (1024.0 * 1024.0);
    let mut rows = Vec::new();
    for kind in [Kind::Relcache, Kind::Redis] {
        let r = measure(kind, rounds, users, ids, strings);
        rows.push((
            kind.name(),
            median(r.iter().map(|x| x.save_s).collect()),
            median(r.iter().map(|x| x.file_bytes as f64).collect()),
            median(r.iter().map(|x| x.restart_s).collect()),
            median(r.iter().map(|x| x.rss_bytes as f64).collect()),
        ));
    }
    println!(
        "{:<10} {:>10} {:>12} {:>14} {:>14}",
        "server", "SAVE s", "file MB", "restart s", "RSS MB"
    );
    for (name, save, file, restart, rss) in rows {
        println!(
            "{name:<10} {save:>10.3} {:>12.1} {restart:>14.3} {:>14.1}",
            mb(file),
            mb(rss)
        );
    }
}
