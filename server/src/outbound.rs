//! Connections this server opens to other servers: MIGRATE's links to its
//! targets, kept for reuse as Redis keeps them.
//!
//! A `redis-cli --cluster reshard` sends thousands of MIGRATEs to the same target,
//! one batch of keys each; connecting (and authenticating) once per batch would
//! double their round trips. So a link that served a MIGRATE is put back here,
//! by `host:port`, and the next MIGRATE to that target takes it. As in Redis, a
//! link unused for [`IDLE`] is closed (by the cron thread's [`sweep`]), and at
//! most [`MAX_LINKS`] are kept.
//!
//! The I/O is blocking `std::net` with the MIGRATE's timeout on every connect,
//! read and write: a MIGRATE runs under [`crate::offload::offload`], so its
//! worker's other clients go on meanwhile, and only the client that asked waits.
//! A link is taken out of the cache while in use, so two MIGRATEs to one target
//! never share a socket (the second opens its own). Not here: what is sent on a
//! link (`cmd/migrate.rs`).

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A cached link is closed after this long unused (Redis's
/// `MIGRATE_SOCKET_CACHE_TTL`).
pub const IDLE: Duration = Duration::from_secs(10);
/// At most this many links are kept (Redis's `MIGRATE_SOCKET_CACHE_ITEMS`).
pub const MAX_LINKS: usize = 64;
/// A reply line longer than this is a broken peer, not a MIGRATE reply.
const MAX_LINE: u64 = 64 * 1024;

/// One connection to a target.
#[derive(Debug)]
pub struct Link {
    stream: BufReader<TcpStream>,
    /// The database the target has SELECTed on this link, if known.
    pub db: Option<i64>,
    /// Whether it came from the cache (it may have been closed by the peer since).
    pub reused: bool,
    last_use: Instant,
}

/// Idle links, by `host:port`. A `parking_lot` mutex held only to take or put
/// one entry back, never across I/O.
static LINKS: LazyLock<Mutex<HashMap<String, Link>>> = LazyLock::new(Default::default);

/// The cache key of a target.
pub fn name(host: &[u8], port: &[u8]) -> String {
    format!(
        "{}:{}",
        String::from_utf8_lossy(host),
        String::from_utf8_lossy(port)
    )
}

/// The cached link to `host:port`, or a new one connected within `timeout`.
///
/// # Errors
///
/// The connect's error (or `InvalidInput` for a port that is not a number).
pub fn take(host: &[u8], port: &[u8], timeout: Duration) -> io::Result<Link> {
    // The fuzz targets send MIGRATE with any host and timeout: they must reach no
    // network, nor wait on it.
    if cfg!(feature = "fuzzing") {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no outbound connections while fuzzing",
        ));
    }
    if let Some(mut link) = LINKS.lock().remove(&name(host, port)) {
        link.reused = true;
        link.set_timeout(timeout)?;
        return Ok(link);
    }
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, "bad address");
    let port: u16 = std::str::from_utf8(port)
        .ok()
        .and_then(|p| p.parse().ok())
        .ok_or_else(bad)?;
    let host = std::str::from_utf8(host).map_err(|_| bad())?;
    let mut last = bad();
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                let mut link = Link {
                    stream: BufReader::new(s),
                    db: None,
                    reused: false,
                    last_use: Instant::now(),
                };
                link.set_timeout(timeout)?;
                return Ok(link);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Keeps `link` to `host:port` for the next MIGRATE there.
pub fn give_back(host: &[u8], port: &[u8], mut link: Link) {
    link.last_use = Instant::now();
    let mut links = LINKS.lock();
    if links.len() >= MAX_LINKS {
        if let Some(k) = links.keys().next().cloned() {
            links.remove(&k);
        }
    }
    links.insert(name(host, port), link);
}

/// Closes the links unused for longer than [`IDLE`]: called by the cron thread.
pub fn sweep() {
    let mut links = LINKS.lock();
    if !links.is_empty() {
        links.retain(|_, l| l.last_use.elapsed() <= IDLE);
    }
}

impl Link {
    fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let s = self.stream.get_ref();
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))
    }

    /// Writes all of `bytes`.
    ///
    /// # Errors
    ///
    /// The socket's, a timeout included.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.get_mut().write_all(bytes)
    }

    /// One reply line, without its `\r\n`.
    ///
    /// # Errors
    ///
    /// The socket's; `UnexpectedEof` when the peer closed or sent a line past
    /// 64 KB.
    pub fn read_line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        (&mut self.stream)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)?;
        if line.last() != Some(&b'\n') {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(line)
    }
}

/// Whether `e` is a timeout (which MIGRATE does not retry).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}
