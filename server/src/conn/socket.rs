//! What a connection needs of its socket, whichever loop serves it: one `recv`,
//! one `send`, one `writev`, each returning `WouldBlock` rather than waiting.
//!
//! Both kinds of socket keep a readiness of their own, the way edge-triggered
//! epoll wants it: a read that does not fill the buffer it was given, or a write
//! that does not take everything, has drained the socket (or filled it), and
//! says so, so the next wait goes straight to epoll. Otherwise every round trip
//! would cost a second `recv` that finds nothing (1.8 per request at `-P 1`, by
//! the syscall tracepoints, before tokio's socket was told). Data that arrives
//! meanwhile is not lost: epoll reports it, and the readiness is set again.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;

use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;

pub(crate) trait Socket {
    /// One `recv` into `spare`; returns how many of its bytes it initialised.
    fn recv_spare(&self, spare: &mut [MaybeUninit<u8>]) -> io::Result<usize>;
    fn send(&self, buf: &[u8]) -> io::Result<usize>;
    fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
}

/// A socket of a tokio runtime (a connection that is blocked, subscribed or a
/// MONITOR, see [`super::task`]): the runtime keeps its readiness, and is told
/// of a short read through `try_io`, as tokio's own `poll_read` does.
impl Socket for TcpStream {
    fn recv_spare(&self, spare: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        let room = spare.len();
        let mut n = 0;
        let read = self.try_io(Interest::READABLE, || {
            n = SockRef::from(self).recv(spare)?;
            if n > 0 && n < room {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        match read {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => Ok(n),
            r => r.map(|()| n),
        }
    }

    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.try_write(buf)
    }

    fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.try_write_vectored(bufs)
    }
}
