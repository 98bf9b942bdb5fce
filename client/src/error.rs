//! The client's error type.

use relcache_protocol::resp::ProtocolError;

/// What can go wrong on a call.
///
/// Only [`Error::Server`] and [`Error::UnexpectedReply`] leave the connection usable:
/// after any other error the [`Client`](crate::Client) answers every call with
/// [`Error::Closed`], and the caller should connect again
/// ([`is_connection_lost`](Self::is_connection_lost)); a [`Pool`](crate::Pool) does
/// that by itself on the next call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Connecting, reading or writing failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent bytes that are not valid RESP, or a reply over the limits.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The server answered with an error reply, e.g. `WRONGTYPE Operation against a
    /// key holding the wrong kind of value`. The connection stays usable.
    #[error("{0}")]
    Server(String),
    /// The connection is closed: the server closed it, or an earlier error, or a
    /// call whose future was dropped before it finished, left it out of step.
    #[error("connection closed")]
    Closed,
    /// A command with no arguments: it has no name, and a server would skip it
    /// without a reply. Nothing was sent.
    #[error("a command needs at least one argument, its name")]
    EmptyCommand,
    /// A [`Pool`](crate::Pool) call did not finish in time: no free connection or no
    /// connection within the connect timeout, or no reply within the command
    /// timeout. A reply may still be on its way, so the connection is out of step
    /// and was discarded; the command may or may not have run.
    #[error("timed out")]
    Timeout,
    /// A [`Pool`](crate::Pool) had no free connection within the connect timeout:
    /// every connection was busy with other calls. Nothing was sent, and nothing
    /// says the server is unwell; the pool is too small for the load, or its
    /// callers hold connections too long.
    #[error("timed out waiting for a free connection in the pool")]
    PoolBusy,
    /// The reply was well-formed RESP but not a shape the typed command can answer
    /// with (a server that does not implement the command as documented, or a
    /// different server altogether). The reply was read whole, so the connection
    /// stays usable.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// A [`ClusterPool`](crate::ClusterPool) call was redirected (`-MOVED`, `-ASK`)
    /// or told to try again (`-TRYAGAIN`) more times than its `max_redirects`: the
    /// cluster's slots keep moving, or two nodes each say the other owns the slot.
    /// The command did not run.
    #[error("gave up after too many cluster redirects; the last: {0}")]
    TooManyRedirects(String),
    /// No node of the cluster serves this hash slot, even after the slot map was
    /// read again: the cluster is missing slots (`cluster_state:fail`). Nothing was
    /// sent.
    #[error("no cluster node serves slot {0}")]
    SlotUnserved(u16),
}

impl Error {
    /// Whether connecting, reading or writing failed.
    pub fn is_io(&self) -> bool {
        matches!(self, Error::Io(_))
    }

    /// Whether the server sent something that is not valid RESP.
    pub fn is_protocol(&self) -> bool {
        matches!(self, Error::Protocol(_))
    }

    /// Whether the server answered with an error reply.
    pub fn is_server(&self) -> bool {
        matches!(self, Error::Server(_))
    }

    /// Whether the connection is closed (see [`Error::Closed`]).
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed)
    }

    /// Whether a call timed out: waiting for the server ([`Error::Timeout`]) or for
    /// a free pooled connection ([`Error::PoolBusy`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout | Error::PoolBusy)
    }

    /// Whether the server said another node serves the key's slot: `-MOVED` (for
    /// good) or `-ASK` (for this key, while the slot migrates). The command did not
    /// run. A [`ClusterPool`](crate::ClusterPool) follows these by itself; a caller
    /// that pins a command to one node (a lease-bound fill) sees them.
    pub fn is_redirect(&self) -> bool {
        matches!(self.code(), Some("MOVED" | "ASK"))
    }

    /// Whether the reply had a shape the typed command did not expect.
    pub fn is_unexpected_reply(&self) -> bool {
        matches!(self, Error::UnexpectedReply(_))
    }

    /// Whether the connection is gone and the caller must connect again: true for
    /// I/O and protocol errors, a closed connection, and a timeout (which leaves
    /// the connection out of step).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            Error::Io(_) | Error::Protocol(_) | Error::Closed | Error::Timeout
        )
    }

    /// The code of a server error, its first word: `ERR`, `WRONGTYPE`, `NOPROTO`, …
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Server(text) => text.split(' ').next(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates() {
        let server = Error::Server("WRONGTYPE Operation against a key".into());
        assert!(server.is_server() && !server.is_connection_lost());
        assert_eq!(server.code(), Some("WRONGTYPE"));
        assert_eq!(server.to_string(), "WRONGTYPE Operation against a key");
        let io = Error::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(io.is_io() && io.is_connection_lost());
        assert_eq!(io.code(), None);
        let protocol = Error::from(ProtocolError("invalid bulk length".into()));
        assert!(protocol.is_protocol() && protocol.is_connection_lost());
        assert_eq!(protocol.to_string(), "Protocol error: invalid bulk length");
        assert!(Error::Closed.is_closed() && Error::Closed.is_connection_lost());
        assert!(!Error::EmptyCommand.is_connection_lost());
        assert!(Error::Timeout.is_timeout() && Error::Timeout.is_connection_lost());
        assert!(Error::PoolBusy.is_timeout() && !Error::PoolBusy.is_connection_lost());
        let odd = Error::UnexpectedReply("integer -1 to IDSET.CARD".into());
        assert!(odd.is_unexpected_reply() && !odd.is_connection_lost());
        assert!(Error::Server("MOVED 3999 127.0.0.1:6381".into()).is_redirect());
        assert!(Error::Server("ASK 3999 127.0.0.1:6381".into()).is_redirect());
        assert!(!Error::Server("TRYAGAIN Multiple keys".into()).is_redirect());
        assert!(!Error::Closed.is_redirect());
        assert_eq!(
            odd.to_string(),
            "unexpected reply: integer -1 to IDSET.CARD"
        );
    }
}
