//! A real `redis-server` beside relcache, for tests and benchmarks that compare the
//! two: persistence off, on a free port, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tool;

pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// The server's process id (benches read its CPU time from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts one with extra `redis-server` arguments (`--maxmemory 64mb` …).
    pub fn start_with(args: &[&str]) -> RedisServer {
        for _attempt in 0..5 {
            // Pick a free port, release it, hand it to redis-server. Another process
            // could take it in between; then redis-server exits and we try again.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("find a free port")
                .port();
            let child = Command::new(tool("redis-server"))
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server (apt-get install redis-server)");
            let mut server = RedisServer { child, port };
            if server.wait_ready() {
                return server;
            }
        }
        panic!("could not start redis-server");
    }

    /// Polls PING until it answers; false if the process exited (port taken).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return false;
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 16];
                if s.write_all(b"PING\r\n").is_ok()
                    && matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
