//! A TCP proxy in front of a test server that can turn into a black hole: bytes in
//! either direction are swallowed, as in a network partition where packets are
//! lost rather than refused. Unlike pausing the server (whose kernel keeps what was
//! sent and hands it over on resume), what the black hole swallows never arrives,
//! which is what a lost cache write looks like.
//!
//! A connection that lost bytes is out of step for good, so it keeps swallowing
//! after the proxy passes traffic again; new connections pass. Plain threads and
//! blocking sockets: it carries a test's few connections, not load.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    blackhole: AtomicBool,
    stopping: AtomicBool,
    accepted: AtomicU64,
    swallowed: AtomicU64,
    /// Every socket opened, to shut down on drop.
    sockets: Mutex<Vec<TcpStream>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let upstream = upstream.to_string();
        let s = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopping.load(SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                s.accepted.fetch_add(1, SeqCst);
                let server = TcpStream::connect(&upstream).expect("proxy connects upstream");
                let lost = Arc::new(AtomicBool::new(s.blackhole.load(SeqCst)));
                {
                    let mut sockets = s.sockets.lock().unwrap();
                    sockets.push(client.try_clone().unwrap());
                    sockets.push(server.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (sa, sb, la) = (s.clone(), s.clone(), lost.clone());
                thread::spawn(move || pump(client, server, &sa, &la));
                thread::spawn(move || pump(s2, c2, &sb, &lost));
            }
        });
        FaultProxy { port, shared }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Swallows everything from now on, on every connection.
    pub fn blackhole(&self) {
        self.shared.blackhole.store(true, SeqCst);
    }

    /// Passes traffic again on connections opened from now on.
    pub fn pass(&self) {
        self.shared.blackhole.store(false, SeqCst);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(SeqCst)
    }

    /// Bytes swallowed so far, both directions.
    pub fn swallowed(&self) -> u64 {
        self.shared.swallowed.load(SeqCst)
    }
}

/// Copies `from` to `to` until either end closes, swallowing instead once the
/// proxy is a black hole.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, lost: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if shared.blackhole.load(SeqCst) {
            lost.store(true, SeqCst);
        }
        if lost.load(SeqCst) {
            shared.swallowed.fetch_add(n as u64, SeqCst);
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, SeqCst);
        for s in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop so it sees `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
