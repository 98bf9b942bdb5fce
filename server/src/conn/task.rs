//! A connection served by a task of its core's runtime: one that waits for
//! more than an event loop does (MONITOR's feed, a lingering close). Its loop
//! is [`Conn`]'s pass, then a wait for whichever comes first of its feed, its
//! socket, its kill, its messages and a parked command's signals; once it waits
//! for nothing the event loop does not ([`Conn::plain`]), it goes back to it
//! ([`crate::evloop`]).

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Closed, Conn, Pass};
use crate::blocking;
use crate::observe::monitor;
use crate::pubsub;
use crate::server::Server;

/// Serves `conn` on `stream` until it closes, or until an event loop can serve
/// it again: then it is returned, for the caller to hand back to an event
/// loop. A connection that broke the protocol (`linger`) only gets its error
/// and a lingering close. A panic in one of its commands closes it.
pub(crate) async fn serve(
    server: &Arc<Server>,
    stream: &TcpStream,
    mut conn: Conn,
    linger: bool,
) -> Option<Conn> {
    let closed = if linger {
        Closed::Protocol
    } else {
        // A command's panic costs its connection only, as on the event loop.
        match AssertUnwindSafe(drive(server, stream, &mut conn))
            .catch_unwind()
            .await
        {
            Ok(None) => return Some(conn),
            Ok(Some(closed)) => closed,
            Err(_) => {
                conn.finish_after_panic(server);
                return None;
            }
        }
    };
    if let Closed::Protocol = closed {
        lingering_close(server, stream, &mut conn).await;
    }
    conn.finish(server, closed);
    None
}

/// Runs the connection's loop; `None` once an event loop can serve it again.
async fn drive(server: &Server, stream: &TcpStream, conn: &mut Conn) -> Option<Closed> {
    // Created once, and cheap to poll on every pass (see `cancel`).
    let mut killed = crate::cancel::Cancelled::new(conn.info().kill.clone());
    loop {
        match conn.run(server, stream) {
            Err(closed) => return Some(closed),
            Ok(Pass::Again) => {
                // Yielding first, so a fast reader cannot keep this worker from
                // its other connections.
                tokio::task::yield_now().await;
                continue;
            }
            Ok(Pass::Wait) => {}
        }
        if conn.plain() {
            return None;
        }
        let deadline = conn.deadline(server, Instant::now);
        // Input is read even while requests are held back: a client that writes a
        // whole pipeline before reading any reply (redis-py, hiredis) must be able
        // to finish writing, or it would never read. What waits is bounded by
        // `client-query-buffer-limit`, as any unread input is.
        let (want_read, want_write) = (conn.wants_read(), conn.wants_write());
        let event = {
            let Conn {
                session,
                parked,
                wbuf,
                ..
            } = conn;
            tokio::select! {
                biased;
                _ = &mut killed => Event::Killed,
                _ = blocking::woken(parked) => Event::Handled,
                _ = session.info.unblock_signal.notified(), if parked.is_some() => {
                    blocking::on_unblock(server, session, parked, wbuf.buf());
                    Event::Handled
                }
                line = monitor::next(&mut session.monitor) => {
                    monitor::deliver(line, &mut session.monitor, wbuf.buf());
                    Event::Handled
                }
                msg = pubsub::next(&mut session.pubsub) => {
                    pubsub::deliver(msg, session, wbuf.buf());
                    Event::Handled
                }
                r = stream.writable(), if want_write => Event::from_ready(r, Event::Handled),
                r = stream.readable(), if want_read => Event::from_ready(r, Event::Readable),
                _ = sleep_until(deadline) => Event::Deadline,
            }
        };
        match event {
            Event::Handled => {}
            Event::Killed => {
                // Shutdown or CLIENT KILL: hand over what is already computed.
                conn.write_last(server, stream);
                return Some(Closed::Normal);
            }
            Event::Failed(e) => return Some(Closed::Io(e)),
            Event::Readable => {
                if let Err(closed) = conn.read(server, stream) {
                    return Some(closed);
                }
            }
            Event::Deadline => {
                if conn.idle_expired(server) {
                    tracing::debug!(client = conn.info().id, "closing idle client");
                    return Some(Closed::Normal);
                }
                // Soft output limit and parked commands: re-checked at the top of
                // the loop.
            }
        }
    }
}

/// What ended a connection's wait.
enum Event {
    Killed,
    Readable,
    /// A time to look at: the idle timeout, the soft output limit, a parked
    /// command's recheck.
    Deadline,
    /// The socket failed.
    Failed(io::Error),
    /// Something the wait handled itself (a message delivered, a parked command
    /// woken), or the socket took output: back to the top of the loop.
    Handled,
}

impl Event {
    fn from_ready(r: io::Result<()>, ok: Event) -> Event {
        r.map_or_else(Event::Failed, |()| ok)
    }
}

/// Sends what is pending (the error that explains the close), then reads and
/// discards the client's input for a moment before closing. Closing a socket with
/// unread input makes the kernel send a reset, which can destroy the error reply
/// before the client reads it; draining first lets it arrive, followed by a clean
/// EOF. Bounded in time and bytes, so a client cannot keep the task alive.
async fn lingering_close(server: &Server, stream: &TcpStream, conn: &mut Conn) {
    const LINGER: Duration = Duration::from_secs(2);
    const MAX_DRAIN: usize = 64 * 1024 * 1024;
    let deadline = Instant::now() + LINGER;
    // On the heap: an array here would be part of every connection's task.
    let mut sink = vec![0u8; 16 * 1024];
    let mut drained = 0;
    while Instant::now() < deadline && drained < MAX_DRAIN {
        if conn.wants_write() {
            if conn.write(server, stream).is_err() {
                return;
            }
            if conn.wants_write() {
                let _ = tokio::time::timeout_at(deadline, stream.writable()).await;
                continue;
            }
            // All written: half-close so the client sees EOF after the error.
            let _ = socket_shutdown_write(stream);
        }
        match tokio::time::timeout_at(deadline, stream.readable()).await {
            Ok(Ok(())) => match stream.try_read(&mut sink) {
                Ok(0) => return,
                Ok(n) => drained += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            },
            _ => return,
        }
    }
}

fn socket_shutdown_write(stream: &TcpStream) -> io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    sock.shutdown(std::net::Shutdown::Write)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
