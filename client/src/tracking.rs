//! Invalidations for a client-side cache, from the server's key tracking (Redis 6+'s
//! `CLIENT TRACKING`, default mode: the server remembers the keys each tracked
//! connection read, and says once when one of them changes).
//!
//! A [`Tracker`] holds one **listener** connection, subscribed in RESP2 to
//! `__redis__:invalidate`, and hands out a [`TrackedSession`]: a [`Pool`] whose
//! every connection runs `CLIENT TRACKING ON REDIRECT <listener id>` when it opens,
//! so whatever is read on the session's connections is tracked and its
//! invalidations arrive on the listener, which a task of its own reads at once.
//! Invalidations are not left on the reading connections themselves (RESP3 pushes):
//! a pooled connection sits idle between calls, and an invalidation waiting unread
//! in its socket would leave the cache serving the old value for as long as nobody
//! uses that connection.
//!
//! What this does not do: order a reply against an invalidation. A read on a
//! session connection and the invalidation of what it read travel on two
//! connections, so the invalidation can arrive first; a cache must remember that a
//! key's fetch is in flight and refuse the reply if the key was invalidated
//! meanwhile. Nor does it cache anything: it reports, and the caller drops.
//!
//! Whenever invalidations may have been missed — the listener's connection closed,
//! failed, or missed a heartbeat; the caller ended the session (the server it
//! reads from restarted) — the session is withdrawn and [`Invalidation::All`] is
//! reported before a new one is offered, so a cache that drops everything on `All`
//! and only keeps what it read through the session current when it asked never
//! keeps a value whose invalidation could have been lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use relcache_protocol::resp::reply::ReplyDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::{Client, Error, Frame, Limits, Pool, PoolConfig};

/// The channel a redirected connection's invalidations are published on.
pub const INVALIDATE_CHANNEL: &str = "__redis__:invalidate";

/// What the listener heard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalidation {
    /// These keys changed (written, deleted, expired or evicted) since a session
    /// connection read them.
    Keys(Vec<Bytes>),
    /// Anything read may have changed: the server was flushed (a null instead of
    /// the key list), or the session ended and invalidations may have been lost.
    All(Why),
}

/// Why everything is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The server said so: FLUSHALL or FLUSHDB.
    Flushed,
    /// The listener's session ended: its connection closed or failed, it missed a
    /// heartbeat, or [`Tracker::end_session`] was called.
    SessionEnded,
}

/// How a [`Tracker`] connects and watches its listener.
#[derive(Clone, Debug)]
pub struct TrackingConfig {
    /// The server, credentials and timeouts, for the listener and for the session
    /// pool (which opens at most `max_connections`).
    pub pool: PoolConfig,
    /// The listener PINGs this often, and gives the session up when nothing at all
    /// came back within one interval: a listener cut off without a close (a
    /// partition) would otherwise look healthy while invalidations go nowhere.
    pub heartbeat: Duration,
    /// After a failed or ended session, how long before the next is opened.
    pub retry: Duration,
}

impl TrackingConfig {
    pub fn new(pool: PoolConfig) -> TrackingConfig {
        TrackingConfig {
            pool,
            heartbeat: Duration::from_secs(1),
            retry: Duration::from_millis(100),
        }
    }
}

/// A live listener, and the pool whose reads it hears the invalidations of.
#[derive(Debug)]
pub struct TrackedSession {
    /// The listener's `CLIENT ID`.
    client_id: i64,
    /// The server process the listener is connected to.
    run_id: Arc<str>,
    pool: Pool,
    /// Distinguishes sessions of one tracker: a new one per listener.
    number: u64,
}

impl TrackedSession {
    /// Connections whose reads are tracked, their invalidations sent to this
    /// session's listener. A connection whose server is not [`run_id`](Self::run_id)
    /// reached a restarted server, where the redirect means nothing (or another
    /// client): what it reads must not be cached.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The `run_id` of the server process the listener is subscribed on.
    pub fn run_id(&self) -> &Arc<str> {
        &self.run_id
    }

    /// The listener connection's `CLIENT ID`.
    pub fn client_id(&self) -> i64 {
        self.client_id
    }

    /// Which of its tracker's sessions this is (counting from 1).
    pub fn number(&self) -> u64 {
        self.number
    }
}

#[derive(Debug, Default)]
struct Shared {
    session: Mutex<Option<Arc<TrackedSession>>>,
    /// Wakes the listener task to end its session.
    end: Notify,
}

impl Shared {
    fn session(&self) -> std::sync::MutexGuard<'_, Option<Arc<TrackedSession>>> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keeps a listener for tracked keys' invalidations connected, and reports what it
/// hears to a callback (see the [module docs](self)). The listener task stops when
/// the tracker is dropped.
#[derive(Debug)]
pub struct Tracker {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Tracker {
    /// Starts the listener task (on the current tokio runtime). `on` is called from
    /// that task with each invalidation as it is read, in the order the server sent
    /// them; it should be quick.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        config: TrackingConfig,
        on: impl Fn(Invalidation) + Send + Sync + 'static,
    ) -> Tracker {
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(listen_forever(config, shared.clone(), on));
        Tracker { shared, task }
    }

    /// The current session, or `None` while the listener is not subscribed (at
    /// start, and between a session's end and the next).
    pub fn session(&self) -> Option<Arc<TrackedSession>> {
        self.shared.session().clone()
    }

    /// Ends `session` if it is still the current one: its invalidations can no
    /// longer be trusted (its server restarted, or a session connection was told
    /// its redirect broke). [`Invalidation::All`] is reported, and a new session
    /// opened.
    pub fn end_session(&self, session: &TrackedSession) {
        let mut current = self.shared.session();
        if current.as_ref().is_some_and(|s| s.number == session.number) {
            // Withdrawn here, at once, rather than when the listener task gets to
            // it, so no caller takes it up meanwhile.
            *current = None;
            drop(current);
            self.shared.end.notify_one();
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen_forever(
    config: TrackingConfig,
    shared: Arc<Shared>,
    on: impl Fn(Invalidation) + Send + Sync + 'static,
) {
    let mut number = 0;
    loop {
        number += 1;
        match subscribe(&config, number).await {
            Ok((session, stream, leftover)) => {
                tracing::debug!(
                    client_id = session.client_id,
                    "tracking listener subscribed"
                );
                // A notify left over from an earlier session's end must not end
                // this one.
                consume_permit(&shared.end).await;
                *shared.session() = Some(Arc::new(session));
                let why = listen(&config, &shared, stream, leftover, &on).await;
                // Withdrawn before everything is declared invalid, so no caller
                // takes up the old session after the caches have dropped what it
                // read.
                *shared.session() = None;
                on(Invalidation::All(Why::SessionEnded));
                tracing::warn!(reason = %why, "tracking listener's session ended; every cached value dropped");
            }
            Err(e) => {
                tracing::warn!(error = %e, "tracking listener could not subscribe");
            }
        }
        tokio::time::sleep(config.retry).await;
    }
}

/// Takes the permit `notify` stores when nobody waits, if there is one: an end
/// asked for a session that had ended by itself meanwhile.
async fn consume_permit(notify: &Notify) {
    let notified = notify.notified();
    tokio::pin!(notified);
    std::future::poll_fn(|cx| {
        let _ = std::future::Future::poll(notified.as_mut(), cx);
        std::task::Poll::Ready(())
    })
    .await;
}

/// Opens the listener: `CLIENT ID`, the server's run id, `SUBSCRIBE`, all within the
/// connect and command timeouts.
async fn subscribe(
    config: &TrackingConfig,
    number: u64,
) -> Result<(TrackedSession, TcpStream, BytesMut), Error> {
    let pool = &config.pool;
    let limit = pool.connect_timeout.saturating_add(pool.command_timeout);
    timeout(limit, async {
        let mut client = Client::connect(pool.addr.as_str()).await?;
        if let Some(password) = &pool.password {
            client.cmd(&["AUTH", password.as_str()]).await?;
        }
        let client_id = match client.cmd(&["CLIENT", "ID"]).await? {
            Frame::Integer(id) => id,
            f => return Err(Error::UnexpectedReply(format!("CLIENT ID: {f:?}"))),
        };
        let run_id = client.server_run_id().await?;
        match client.cmd(&["SUBSCRIBE", INVALIDATE_CHANNEL]).await? {
            Frame::Array(items) | Frame::Push(items)
                if matches!(items.first(), Some(Frame::Bulk(k)) if k.eq_ignore_ascii_case(b"subscribe")) => {}
            f => return Err(Error::UnexpectedReply(format!("SUBSCRIBE: {f:?}"))),
        }
        let redirect = vec![
            Bytes::from_static(b"CLIENT"),
            Bytes::from_static(b"TRACKING"),
            Bytes::from_static(b"ON"),
            Bytes::from_static(b"REDIRECT"),
            Bytes::from(client_id.to_string()),
        ];
        let session = TrackedSession {
            client_id,
            run_id,
            pool: Pool::with_init(pool.clone(), vec![redirect]),
            number,
        };
        // One tracked connection opened now, so a server without CLIENT TRACKING
        // (or refusing the redirect) fails the session here instead of every
        // caller's fetch; it waits in the pool for the first one.
        drop(session.pool.get().await?);
        let (stream, leftover) = client.into_parts();
        Ok((session, stream, leftover))
    })
    .await
    .map_err(|_| Error::Timeout)?
}

/// Why a listener's session ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("connection: {0}")]
    Connection(#[from] Error),
    #[error("no reply to a heartbeat within {0:?}")]
    Silent(Duration),
    #[error("ended by the caller")]
    Asked,
    #[error("unexpected message {0}")]
    Unexpected(String),
}

/// Reads the listener until its session ends, reporting each invalidation.
async fn listen(
    config: &TrackingConfig,
    shared: &Shared,
    stream: TcpStream,
    mut buf: BytesMut,
    on: &(impl Fn(Invalidation) + Send + Sync),
) -> Ended {
    let (mut rd, mut wr) = stream.into_split();
    let mut decoder = ReplyDecoder::new(Limits::default());
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await;
    let mut heard = true;
    loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    heard = true;
                    match message(frame) {
                        Ok(Some(inv)) => on(inv),
                        Ok(None) => {}
                        Err(text) => return Ended::Unexpected(text),
                    }
                }
                Ok(None) => break,
                Err(e) => return Ended::Connection(Error::Protocol(e)),
            }
        }
        tokio::select! {
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) => return Ended::Connection(Error::Closed),
                Ok(_) => {}
                Err(e) => return Ended::Connection(e.into()),
            },
            _ = heartbeat.tick() => {
                if !heard {
                    return Ended::Silent(config.heartbeat);
                }
                heard = false;
                if let Err(e) = wr.write_all(b"*1\r\n$4\r\nPING\r\n").await {
                    return Ended::Connection(e.into());
                }
            }
            _ = shared.end.notified() => return Ended::Asked,
        }
    }
}

/// What one frame on the listener says: an invalidation, nothing (a heartbeat's
/// reply), or something a subscribed connection should never get.
fn message(frame: Frame) -> Result<Option<Invalidation>, String> {
    let items = match frame {
        Frame::Array(items) | Frame::Push(items) => items,
        f => return Err(format!("{f:?}")),
    };
    let kind = match items.first() {
        Some(Frame::Bulk(kind) | Frame::Simple(kind)) => kind.to_ascii_lowercase(),
        _ => return Err(format!("{items:?}")),
    };
    match (kind.as_slice(), items.len()) {
        (b"pong", _) => Ok(None),
        (b"message", 3) => {
            let mut items = items;
            let payload = items.pop().expect("three items");
            match payload {
                Frame::Null | Frame::NullArray => Ok(Some(Invalidation::All(Why::Flushed))),
                Frame::Array(keys) | Frame::Set(keys) => keys
                    .into_iter()
                    .map(|k| match k {
                        Frame::Bulk(k) => Ok(k),
                        f => Err(format!("invalidated key {f:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(|keys| Some(Invalidation::Keys(keys))),
                // Some servers publish a single key as a bulk string.
                Frame::Bulk(key) => Ok(Some(Invalidation::Keys(vec![key]))),
                f => Err(format!("invalidation payload {f:?}")),
            }
        }
        _ => Err(format!("{items:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::bulk(s.to_string())
    }

    #[test]
    fn messages_read_as_invalidations() {
        let msg = |payload| Frame::Array(vec![bulk("message"), bulk(INVALIDATE_CHANNEL), payload]);
        assert_eq!(
            message(msg(Frame::Array(vec![bulk("a"), bulk("b")]))),
            Ok(Some(Invalidation::Keys(vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"b")
            ])))
        );
        assert_eq!(
            message(msg(Frame::Null)),
            Ok(Some(Invalidation::All(Why::Flushed)))
        );
        assert_eq!(
            message(msg(Frame::NullArray)),
            Ok(Some(Invalidation::All(Why::Flushed)))
        );
        assert_eq!(
            message(Frame::Array(vec![bulk("pong"), bulk("")])),
            Ok(None)
        );
        assert!(message(Frame::Integer(1)).is_err());
        assert!(message(msg(Frame::Integer(3))).is_err());
    }
}
