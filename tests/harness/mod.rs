//! Test harness: starts the real `relcache-server` binary on a free port and hands
//! out clients. Each end-to-end test file includes it with `mod harness;`.
//!
//! The server is started on port 0 and the harness reads the port it actually bound
//! from its log line, so tests never race for fixed ports; readiness is polled with
//! PING, never waited for with a sleep. The process is killed when the guard drops.
#![allow(dead_code)]
pub mod cluster;
pub mod fenced;
pub mod mariadb;
pub mod proxy;
pub mod real_redis;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// A running relcache-server, killed on drop.
pub struct TestServer {
    child: Child,
    pub port: u16,
    log: std::sync::Arc<Mutex<String>>,
    /// The server's own `dir`, so a SAVE in one test is never loaded by another's
    /// server (a test that passes `--dir` overrides it).
    _dir: TempDir,
}

/// A fresh directory under the system's temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("relcache-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp dir")
    }

    /// The snapshot file a server with this `dir` and the default `dbfilename` uses.
    pub fn file(&self) -> PathBuf {
        self.0.join("dump.rcs")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Path to the binary under test (cargo builds it for this package's tests).
pub fn server_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_relcache-server"))
}

impl TestServer {
    /// Starts a server with default options.
    pub fn start() -> TestServer {
        TestServer::start_with(&[])
    }

    /// Starts a server with extra command-line options (`["--maxclients", "5"]`).
    pub fn start_with(args: &[&str]) -> TestServer {
        let dir = TempDir::new("server");
        let mut child = Command::new(server_bin())
            .args(["--port", "0", "--bind", "127.0.0.1", "--dir", dir.path()])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn relcache-server");
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(port) = parse_port(&line) {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(port);
                        }
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let port = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "relcache-server did not report its port; log:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        let server = TestServer {
            child,
            port,
            log,
            _dir: dir,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok() {
                    let mut buf = [0u8; 64];
                    if let Ok(n) = s.read(&mut buf) {
                        // +PONG, or -NOAUTH when a password is set: either way it's up.
                        if n > 0 {
                            return;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("relcache-server on port {} never answered PING", self.port);
    }

    /// The server's process id (benches read its CPU time from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A `redis` crate client.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A sync connection from the `redis` crate.
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    /// A raw TCP connection, for byte-level protocol tests.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Runs `redis-cli -p <port> <args>` and returns its output.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(tool("redis-cli"))
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli")
    }

    /// `redis-cli` stdout, trimmed, asserting it exited 0.
    pub fn cli_out(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "redis-cli {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) until the log satisfies `pred`, and returns it: a line
    /// the server writes as it acts reaches the reader thread a moment later.
    pub fn wait_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if pred(&log) {
                return log;
            }
            assert!(Instant::now() < deadline, "{what}; log:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit on its own (after SHUTDOWN).
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse_port(line: &str) -> Option<u16> {
    // "relcache ready to accept connections local_addr=127.0.0.1:PORT"
    let rest = line.split("local_addr=").nth(1)?;
    let addr = rest.split_whitespace().next()?;
    addr.rsplit(':').next()?.parse().ok()
}

/// Path of a Redis tool (`redis-cli`, `redis-benchmark`, `redis-server`). The test
/// command installs redis-tools; a missing tool is a loud failure, never a skip.
pub fn tool(name: &str) -> PathBuf {
    static CHECK: Once = Once::new();
    CHECK.call_once(|| {});
    for dir in ["/usr/bin", "/usr/local/bin"] {
        let p = PathBuf::from(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} is not installed: run ./scripts/test.sh (it installs redis-tools) or apt-get install redis-tools");
}

// ---- Helpers for tool and byte-level tests (tests/tools.rs, tests/limits.rs). ----

impl TestServer {
    /// Runs `redis-cli -p <port> <args>` with `input` on its stdin (fed from a thread,
    /// so a large input cannot deadlock against the tool's output).
    pub fn cli_stdin(&self, args: &[&str], input: Vec<u8>) -> Output {
        let mut child = Command::new(tool("redis-cli"))
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run redis-cli");
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait for redis-cli");
        feeder.join().unwrap();
        out
    }
}

/// How a read loop over a socket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    /// The peer closed the connection (read returned 0).
    Eof,
    /// The peer reset the connection (it closed with our requests unread).
    Reset,
    /// Nothing arrived within the socket's read timeout: the connection is open.
    Timeout,
}

/// Reads everything `s` delivers until EOF, a reset or the read timeout.
pub fn read_to_end(s: &mut TcpStream) -> (Vec<u8>, ReadEnd) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, ReadEnd::Eof),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (out, ReadEnd::Timeout)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (out, ReadEnd::Reset),
        }
    }
}

/// Reads exactly `n` bytes (panics on EOF or timeout, showing what did arrive).
pub fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match s.read(&mut out[got..]) {
            Ok(0) => panic!(
                "EOF after {got} of {n} bytes: {:?}",
                String::from_utf8_lossy(&out[..got])
            ),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!(
                "{e} after {got} of {n} bytes: {:?}",
                String::from_utf8_lossy(&out[..got])
            ),
        }
    }
    out
}

/// Reads one reply line, up to and including its CRLF (a byte at a time: for
/// short replies only).
pub fn read_line(s: &mut TcpStream) -> Vec<u8> {
    let mut line = Vec::new();
    while !line.ends_with(b"\r\n") {
        line.extend(read_n(s, 1));
    }
    line
}

/// Sends `req` and reads exactly as many bytes as `expected` has, asserting they match.
pub fn roundtrip(s: &mut TcpStream, req: &[u8], expected: &[u8]) {
    s.write_all(req).unwrap();
    let got = read_n(s, expected.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected),
        "reply to {:?}",
        String::from_utf8_lossy(req)
    );
}

/// Sends `request` (long work) on a connection of its own, then, `after` it, a
/// PING on another, and checks that the PING is answered while the long work
/// runs: its own reply has not come yet. Returns the first connection, whose
/// reply is next. Every read has a deadline, so a server that holds the PING
/// fails the test rather than hanging it.
#[allow(dead_code)] // not every test binary uses it
pub fn ping_answered_during(port: u16, request: &[&[u8]], after: Duration) -> TcpStream {
    let mut heavy = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut other = TcpStream::connect(("127.0.0.1", port)).unwrap();
    for sock in [&mut heavy, &mut other] {
        sock.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        // Both accepted and served once, so the request is read as it comes,
        // not in one round with the PING (which may come first then).
        roundtrip(sock, b"PING\r\n", b"+PONG\r\n");
    }
    heavy.write_all(&resp_cmd(request)).unwrap();
    // Long enough for the request to be read and its work under way, so the
    // PING does not simply come first in the same batch.
    std::thread::sleep(after);
    other.write_all(&resp_cmd(&[b"PING"])).unwrap();
    let mut pong = [0u8; 7];
    other.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    heavy.set_nonblocking(true).unwrap();
    match heavy.read(&mut [0u8; 1]) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        r => panic!(
            "{:?} replied before the PING was answered: {r:?}",
            String::from_utf8_lossy(request[0])
        ),
    }
    heavy.set_nonblocking(false).unwrap();
    heavy
}

/// Encodes one request as a RESP array of bulk strings.
pub fn resp_cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Whether a by-hand benchmark binary was started by `cargo bench` (which passes
/// `--bench`). `cargo test --all-targets` also runs bench binaries, without it: a
/// benchmark then prints how to run it and exits instead of loading the machine.
pub fn invoked_by_cargo_bench() -> bool {
    let yes = std::env::args().any(|a| a == "--bench");
    if !yes {
        eprintln!("benchmark skipped: run it with `cargo bench --bench <name>`");
    }
    yes
}

/// The value of field `name` in an INFO text, parsed; panics if absent.
pub fn info_value<T: std::str::FromStr>(info: &str, name: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    let raw = info
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO has no {name}:\n{info}"));
    raw.trim()
        .parse()
        .unwrap_or_else(|e| panic!("INFO {name}:{raw}: {e:?}"))
}

/// The connections on each client loop, by loop, from an `INFO loops` text.
pub fn loop_connections(info: &str) -> Vec<u64> {
    let loops: usize = info_value(info, "loops");
    (0..loops)
        .map(|i| {
            let line: String = info_value(info, &format!("loop{i}"));
            line.strip_prefix("connections=").unwrap().parse().unwrap()
        })
        .collect()
}

/// One parameter's value, by CONFIG GET.
pub fn config_get(con: &mut redis::Connection, name: &str) -> String {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap();
    assert_eq!(v.len(), 2, "{v:?}");
    v[1].clone()
}

/// Field `name` of `INFO section` (`everything` for all), parsed.
pub fn info_stat<T: std::str::FromStr>(con: &mut redis::Connection, section: &str, name: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info_value(&info, name)
}

/// A byte-level connection: sends a request and returns the exact reply bytes.
pub struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn new(server: &TestServer) -> Raw {
        Raw {
            s: server.raw(),
            buf: Vec::new(),
        }
    }

    pub fn call(&mut self, args: &[&str]) -> Vec<u8> {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.s.write_all(&req).unwrap();
        loop {
            if let Some((_, n)) = relcache_protocol::resp::parse_frame(
                &self.buf,
                &relcache_protocol::resp::Limits::default(),
            )
            .unwrap()
            {
                let reply = self.buf[..n].to_vec();
                self.buf.drain(..n);
                return reply;
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.s.read(&mut chunk).expect("reply");
            assert!(n > 0, "server closed the connection after {args:?}");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Writes every request of `steps` in one go and checks the replies come
    /// back byte for byte and in order, then that nothing follows the last one
    /// (a reply written twice, say).
    pub fn expect_pipeline<A: AsRef<[u8]>>(&mut self, steps: &[(&[A], &[u8])]) {
        let mut req = Vec::new();
        let mut expected = Vec::new();
        for (args, reply) in steps {
            let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
            req.extend(resp_cmd(&args));
            expected.extend_from_slice(reply);
        }
        self.s.write_all(&req).unwrap();
        while self.buf.len() < expected.len() {
            let mut chunk = [0u8; 64 * 1024];
            let got = self.s.read(&mut chunk).expect("reply");
            assert!(got > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..got]);
        }
        let got: Vec<u8> = self.buf.drain(..expected.len()).collect();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected)
        );
        self.expect(&["PING"], b"+PONG\r\n");
    }

    pub fn frame(&mut self, args: &[&str]) -> relcache_protocol::resp::Frame {
        let bytes = self.call(args);
        relcache_protocol::resp::parse_frame(&bytes, &relcache_protocol::resp::Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    /// Asserts the exact reply bytes.
    pub fn expect(&mut self, args: &[&str], want: &[u8]) {
        let got = self.call(args);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "reply to {args:?}"
        );
    }

    /// Asserts an exact error reply (`-<text>\r\n`).
    pub fn expect_err(&mut self, args: &[&str], text: &str) {
        self.expect(args, format!("-{text}\r\n").as_bytes());
    }
}

/// CPU time, in nanoseconds, that process `pid` has run so far, all its threads
/// together, those that have exited included: `/proc/PID/stat`'s utime + stime.
/// They count clock ticks (10 ms), so measure runs of seconds; summing the
/// threads' nanosecond `schedstat` instead loses the time of every thread that
/// ends in between (tokio's blocking threads come and go).
pub fn cpu_ns(pid: u32) -> u64 {
    // utime and stime are fields 14 and 15, read from one snapshot.
    let [utime, stime] = stat_fields(pid, [14, 15]);
    let ticks = utime + stime;
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * 1_000_000_000 / hz
}

/// Page faults process `pid` has taken without reading from disk (`minflt`): each
/// is a page of anonymous memory touched for the first time since it was mapped.
pub fn minor_faults(pid: u32) -> u64 {
    let [minflt] = stat_fields(pid, [10]);
    minflt
}

/// Numeric fields of one read of `/proc/PID/stat`, numbered from 1 as `man 5 proc`
/// numbers them (from 3 on: the command name, field 2, may hold spaces).
fn stat_fields<const N: usize>(pid: u32, fields: [usize; N]) -> [u64; N] {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let rest = &stat[stat.rfind(')').expect("stat has (comm)") + 2..];
    let values: Vec<&str> = rest.split_whitespace().collect();
    fields.map(|n| values[n - 3].parse().expect("a numeric stat field"))
}

/// Runs `tests/python/<script> <port>` (redis-py checks, as Python users run
/// them), asserting it printed "ok" and exited 0.
pub fn python_checks(script: &str, port: u16) {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(&path)
        .arg(port.to_string())
        .output()
        .expect("run python3 (scripts/test.sh installs redis-py)");
    assert!(
        out.status.success() && out.stdout.starts_with(b"ok"),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The median of `v` (sorted in place); for the benches' rounds.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A number from the environment (a bench's size or round count), or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
