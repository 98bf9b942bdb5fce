//! The one wait an event loop does not do: the lingering close of a connection
//! that broke the protocol. It runs on a task of the core's tokio runtime,
//! where a timer and a readiness wait cost nothing to the loop's other clients.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Closed, Conn};
use crate::server::Server;

/// Sends `conn` its protocol error, drains its input for a moment, and closes it.
pub(crate) async fn linger(server: Arc<Server>, stream: std::net::TcpStream, mut conn: Conn) {
    let stream = match TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => return conn.finish(&server, Closed::Io(e)),
    };
    lingering_close(&server, &stream, &mut conn).await;
    conn.finish(&server, Closed::Protocol);
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
