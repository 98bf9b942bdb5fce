//! A bounded pool of connections to one server, shared between tasks.
//!
//! A [`Client`] has one request in flight at a time, so a service that serves many
//! requests at once needs many connections; opening one per request costs a TCP
//! handshake (and AUTH, HELLO) every time, and opening them without bound can
//! exhaust the server's `maxclients`. The pool keeps connections open between
//! calls, opens at most `max_connections`, and puts every call made through it
//! ([`Pool::run`], [`PooledConn::run`], …) under a deadline so that a hung server
//! costs the caller a bounded wait rather than a stuck task.
//!
//! A connection goes back to the pool only if it is still in step with the server
//! ([`Client::is_usable`]): a call that failed on the connection, or timed out,
//! discards it, and a later call opens a fresh one. There is no retry: whether a
//! failed command ran is for the caller to judge.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::timeout;

use crate::{Client, Cmd, Error, Frame, Protocol};

/// How a [`Pool`] connects and how long it waits.
#[derive(Clone)]
pub struct PoolConfig {
    /// `host:port` of the server.
    pub addr: String,
    /// Connections open at once, idle or in use; a call that finds them all busy
    /// waits for one (within `connect_timeout`). Must be at least 1.
    pub max_connections: usize,
    /// The longest [`Pool::get`] waits for a free connection, and then the longest
    /// it takes to open one (TCP and the handshake: AUTH, HELLO or PING), each.
    pub connect_timeout: Duration,
    /// The longest a call on a pooled connection waits for its replies, on top of
    /// what a command is allowed to block for ([`Cmd::blocks_for`]).
    pub command_timeout: Duration,
    /// The protocol to speak: RESP3 sends `HELLO 3` on connect.
    pub protocol: Protocol,
    /// Sent with AUTH on connect, for a server started with `requirepass`.
    pub password: Option<String>,
}

impl Default for PoolConfig {
    /// A local server on the default port, 16 connections, and timeouts of one
    /// second: a cache that takes longer is better treated as down.
    fn default() -> Self {
        PoolConfig {
            addr: "127.0.0.1:6379".into(),
            max_connections: 16,
            connect_timeout: Duration::from_secs(1),
            command_timeout: Duration::from_secs(1),
            protocol: Protocol::Resp2,
            password: None,
        }
    }
}

impl fmt::Debug for PoolConfig {
    /// Everything but the password, so a logged config leaks no secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolConfig")
            .field("addr", &self.addr)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("protocol", &self.protocol)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A snapshot of a pool's connections, for metrics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// Open and waiting to be used.
    pub idle: usize,
    /// Handed out (or being opened) right now.
    pub in_use: usize,
}

/// Connections to one server, shared by cloning (the clones share the pool).
///
/// ```no_run
/// # async fn example() -> Result<(), relcache_client::Error> {
/// use relcache_client::{Pool, PoolConfig};
///
/// let pool = Pool::new(PoolConfig {
///     addr: "127.0.0.1:6379".into(),
///     max_connections: 8,
///     ..PoolConfig::default()
/// });
/// // Typed commands take a connection, run under the command timeout, and return it.
/// let follows = pool.idset_exists("user:1:following", 42).await?;
/// // A connection of one's own, for several calls in a row.
/// let mut conn = pool.get().await?;
/// conn.cmd(&["SET", "k", "v"]).await?;
/// # let _ = follows;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Pool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: PoolConfig,
    /// Connections open and not in use. Last in, first out: the busy ones stay
    /// warm, the spare ones sit still (and are the ones a server's idle timeout
    /// closes). A std mutex because it is held only to push or pop, never across
    /// an await, and `PooledConn::drop` (not async) must take it.
    idle: Mutex<Vec<Client<TcpStream>>>,
    /// One permit per connection handed out. Connections are opened only by a
    /// permit holder that found no idle one, so open connections never outnumber
    /// the permits.
    slots: Arc<Semaphore>,
    /// Commands every new connection runs after its handshake, before it is
    /// handed out (a tracked pool's `CLIENT TRACKING ON REDIRECT <id>`).
    init: Vec<Vec<Bytes>>,
}

impl Pool {
    /// A pool per `config`. Nothing is opened until the first call needs it.
    ///
    /// # Panics
    ///
    /// If `config.max_connections` is 0: such a pool could never serve a call.
    pub fn new(config: PoolConfig) -> Pool {
        Pool::with_init(config, Vec::new())
    }

    /// A pool whose every new connection first runs `init` (each command must
    /// succeed, or the connection counts as failed to open). For session state all
    /// of a pool's connections share, set once per connection instead of once per
    /// call.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new), and if any command in `init` is empty.
    pub fn with_init(config: PoolConfig, init: Vec<Vec<Bytes>>) -> Pool {
        assert!(
            init.iter().all(|cmd| !cmd.is_empty()),
            "an init command needs a name"
        );
        assert!(
            config.max_connections > 0,
            "a pool needs max_connections >= 1"
        );
        let slots = Arc::new(Semaphore::new(config.max_connections));
        Pool {
            inner: Arc::new(Inner {
                config,
                idle: Mutex::new(Vec::new()),
                slots,
                init,
            }),
        }
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// How many connections are idle and in use.
    pub fn status(&self) -> PoolStatus {
        PoolStatus {
            idle: self.inner.idle().len(),
            in_use: self.inner.config.max_connections - self.inner.slots.available_permits(),
        }
    }

    /// A connection of the caller's own until the guard drops: an idle one that
    /// still looks open, or a new one. Calls made on it directly have no timeout;
    /// wrap them in `tokio::time::timeout` if needed (a timed-out call leaves the
    /// connection unusable, and it is discarded on drop).
    ///
    /// Waiting for a free slot and opening a connection have a `connect_timeout`
    /// each: a caller that waited for a slot until the last moment must not then
    /// fail to connect for want of time, and be taken for a sign that the server is
    /// unreachable.
    ///
    /// # Errors
    ///
    /// - [`Error::PoolBusy`] if every connection stayed busy for `connect_timeout`;
    ///   [`Error::Timeout`] if opening one did not finish within `connect_timeout`.
    /// - [`Error::Io`] if connecting failed; [`Error::Server`] if the server refused
    ///   the handshake (a wrong password, or `ERR max number of clients reached`).
    pub async fn get(&self) -> Result<PooledConn, Error> {
        let config = &self.inner.config;
        let slots = self.inner.slots.clone();
        let permit = timeout(config.connect_timeout, slots.acquire_owned())
            .await
            .map_err(|_| Error::PoolBusy)?
            .expect("the pool never closes its semaphore");
        let reused = loop {
            let Some(client) = self.inner.idle().pop() else {
                break None;
            };
            if client.looks_open() {
                break Some(client);
            }
        };
        let client = match reused {
            Some(client) => client,
            None => timeout(config.connect_timeout, self.inner.open())
                .await
                .map_err(|_| Error::Timeout)??,
        };
        Ok(PooledConn {
            client: Some(client),
            pool: self.inner.clone(),
            _permit: permit,
        })
    }

    /// [`Client::cmd`] on a pooled connection, within `command_timeout`.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get) and [`Client::cmd`], and [`Error::Timeout`] if the
    /// reply did not come in time.
    ///
    /// A command that changes the connection's session (`MULTI` or `WATCH` left
    /// open, `HELLO`, `SELECT`, `CLIENT SETNAME` …) closes the connection after it
    /// rather than hand that state to the next caller; for a session of one's own,
    /// use [`get`](Self::get).
    pub async fn cmd(&self, args: &[impl AsRef<[u8]>]) -> Result<Frame, Error> {
        let mut conn = self.get().await?;
        let reply = self.within(Duration::ZERO, conn.cmd(args)).await;
        if Session::default().after(args).is_changed() {
            conn.discard();
        }
        reply
    }

    /// [`Client::pipeline`] on a pooled connection, within `command_timeout`.
    ///
    /// # Errors
    ///
    /// As [`cmd`](Self::cmd).
    pub async fn pipeline(&self, cmds: &[Vec<Bytes>]) -> Result<Vec<Frame>, Error> {
        let mut conn = self.get().await?;
        let replies = self.within(Duration::ZERO, conn.pipeline(cmds)).await;
        let session = cmds.iter().fold(Session::default(), |s, cmd| s.after(cmd));
        if session.is_changed() {
            conn.discard();
        }
        replies
    }

    /// [`Client::run`] on a pooled connection, within `command_timeout` plus what
    /// the command may block for.
    ///
    /// # Errors
    ///
    /// As [`cmd`](Self::cmd), and [`Error::UnexpectedReply`] as [`Client::run`].
    pub async fn run<T>(&self, cmd: Cmd<T>) -> Result<T, Error> {
        self.get().await?.run(cmd).await
    }

    /// [`Client::run_pipeline`] on a pooled connection, within `command_timeout`
    /// plus what the commands may block for together (the server runs them one
    /// after another).
    ///
    /// # Errors
    ///
    /// As [`pipeline`](Self::pipeline).
    pub async fn run_pipeline<T>(&self, cmds: Vec<Cmd<T>>) -> Result<Vec<Result<T, Error>>, Error> {
        self.get().await?.run_pipeline(cmds).await
    }

    /// Runs a call under the command timeout, extended by `blocks_for`. On timeout
    /// the call's future is dropped midway, which leaves its connection unusable,
    /// so the caller's guard discards it.
    async fn within<T>(
        &self,
        blocks_for: Duration,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let limit = self.inner.config.command_timeout.saturating_add(blocks_for);
        timeout(limit, call).await.map_err(|_| Error::Timeout)?
    }
}

impl Inner {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Client<TcpStream>>> {
        // A panic while holding the lock cannot leave the Vec half-updated.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection, authenticated and speaking the configured protocol. It
    /// always makes one round trip before it is handed out (AUTH, HELLO, or else a
    /// PING): a server that accepts the connection only to refuse it (`-ERR max
    /// number of clients reached`, then a close) is found out here, as a failure to
    /// connect, not by the caller's first command.
    async fn open(&self) -> Result<Client<TcpStream>, Error> {
        let mut client = Client::connect(self.config.addr.as_str()).await?;
        let mut greeted = false;
        if let Some(password) = &self.config.password {
            client.cmd(&["AUTH", password.as_str()]).await?;
            greeted = true;
        }
        if self.config.protocol == Protocol::Resp3 {
            client.hello(3).await?;
            greeted = true;
        }
        if !greeted && self.init.is_empty() {
            client.run(Cmd::ping()).await?;
        }
        for cmd in &self.init {
            client.cmd(cmd).await?;
        }
        Ok(client)
    }
}

/// What a batch of raw commands leaves behind on its connection, for [`Pool::cmd`]
/// and [`Pool::pipeline`], which hand the connection to the next caller.
#[derive(Clone, Copy, Debug, Default)]
struct Session {
    /// Inside `MULTI`: the next caller's commands would be queued.
    multi: bool,
    /// Keys are watched: the next caller's `EXEC` would abort for them.
    watching: bool,
    /// Some other state changed (protocol, database, name, subscriptions …).
    changed: bool,
}

impl Session {
    fn after(mut self, args: &[impl AsRef<[u8]>]) -> Session {
        let Some(name) = args.first() else {
            return self;
        };
        let name = name.as_ref();
        let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
        if is("MULTI") {
            self.multi = true;
        } else if is("WATCH") {
            self.watching = true;
        } else if is("EXEC") || is("DISCARD") {
            (self.multi, self.watching) = (false, false);
        } else if is("UNWATCH") {
            self.watching = false;
        } else if is("CLIENT") {
            // CLIENT ID, INFO, LIST, GETNAME … only read.
            let sub = args.get(1).map(|a| a.as_ref().to_ascii_uppercase());
            self.changed |= matches!(
                sub.as_deref(),
                Some(
                    b"SETNAME"
                        | b"SETINFO"
                        | b"REPLY"
                        | b"TRACKING"
                        | b"NO-EVICT"
                        | b"NO-TOUCH"
                        | b"CACHING"
                )
            );
        } else {
            const SESSION: &[&str] = &[
                "HELLO",
                "AUTH",
                "SELECT",
                "RESET",
                "READONLY",
                "READWRITE",
                "SUBSCRIBE",
                "PSUBSCRIBE",
                "SSUBSCRIBE",
                "MONITOR",
            ];
            self.changed |= SESSION.iter().any(|w| is(w));
        }
        self
    }

    fn is_changed(self) -> bool {
        self.multi || self.watching || self.changed
    }
}

/// A connection taken from a [`Pool`]; it derefs to the [`Client`]. Dropping it
/// returns the connection to the pool if it is still usable, and closes it if not.
#[derive(Debug)]
pub struct PooledConn {
    /// Always `Some` until drop.
    client: Option<Client<TcpStream>>,
    pool: Arc<Inner>,
    /// Released after `drop` has put the connection back, so whoever is woken by
    /// the free slot finds the connection idle instead of opening another.
    _permit: OwnedSemaphorePermit,
}

impl PooledConn {
    /// [`Client::run`] within the pool's `command_timeout` plus what the command may
    /// block for, as [`Pool::run`] — on this connection, for a caller that needs
    /// several commands in a row. A lease holder, say, fills the key on the
    /// connection that won the lease: asking the pool for another could wait behind
    /// the very callers parked until that fill lands.
    ///
    /// # Errors
    ///
    /// As [`Pool::run`].
    pub async fn run<T>(&mut self, cmd: Cmd<T>) -> Result<T, Error> {
        let limit = self
            .pool
            .config
            .command_timeout
            .saturating_add(cmd.blocks_for());
        let client = self.client.as_mut().expect("present until drop");
        timeout(limit, client.run(cmd))
            .await
            .map_err(|_| Error::Timeout)?
    }

    /// [`Client::run_pipeline`] within the pool's timeouts, as
    /// [`Pool::run_pipeline`], on this connection.
    ///
    /// # Errors
    ///
    /// As [`Pool::run_pipeline`].
    pub async fn run_pipeline<T>(
        &mut self,
        cmds: Vec<Cmd<T>>,
    ) -> Result<Vec<Result<T, Error>>, Error> {
        // The server runs them one after another: their waits add up.
        let blocks_for = cmds
            .iter()
            .fold(Duration::ZERO, |sum, c| sum.saturating_add(c.blocks_for()));
        let limit = self.pool.config.command_timeout.saturating_add(blocks_for);
        let client = self.client.as_mut().expect("present until drop");
        timeout(limit, client.run_pipeline(cmds))
            .await
            .map_err(|_| Error::Timeout)?
    }

    /// The address of the server this connection reaches (its pool's `addr`).
    pub fn addr(&self) -> &str {
        &self.pool.config.addr
    }

    /// Closes the connection instead of returning it: for one whose session state
    /// was changed (HELLO, CLIENT SETNAME, a MULTI left open …) in ways the next
    /// user should not inherit.
    pub fn discard(mut self) {
        self.client = None;
    }
}

impl Deref for PooledConn {
    type Target = Client<TcpStream>;

    fn deref(&self) -> &Client<TcpStream> {
        self.client.as_ref().expect("present until drop")
    }
}

impl DerefMut for PooledConn {
    fn deref_mut(&mut self) -> &mut Client<TcpStream> {
        self.client.as_mut().expect("present until drop")
    }
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            if client.is_usable() {
                self.pool.idle().push(client);
            }
        }
    }
}
