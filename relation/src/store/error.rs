//! What a [`Store`](super::Store) call can fail with.

use std::time::Duration;

/// MySQL's "Deadlock found when trying to get lock; try restarting transaction".
pub const ER_LOCK_DEADLOCK: u16 = 1213;
/// MySQL's "Lock wait timeout exceeded; try restarting transaction".
pub const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// MySQL's "Server shutdown in progress".
const ER_SERVER_SHUTDOWN: u16 = 1053;
/// MariaDB's "Connection was killed".
const ER_CONNECTION_KILLED: u16 = 1927;

/// The step name of a transaction's commit, in errors.
pub(crate) const COMMIT: &str = "commit";

/// A failed [`Store`](super::Store) call. Every variant that involved MySQL names the
/// logical shard, its host (`host:port`, never the URL with its password) and the
/// step that failed, so a log line is enough to find the sick server.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The step did not finish in time: checking out a connection took longer than
    /// `connect_timeout`, or the call's statements ran past `query_timeout`.
    #[error("shard {shard} on {host}: {action} timed out after {after:?}")]
    Timeout {
        /// Logical shard.
        shard: u32,
        /// `host:port`.
        host: String,
        /// The step, e.g. `"insert following"`.
        action: &'static str,
        /// The budget that ran out.
        after: Duration,
    },
    /// MySQL or the driver reported an error (server error, I/O, protocol).
    #[error("shard {shard} on {host}: {action}: {source}")]
    Mysql {
        /// Logical shard.
        shard: u32,
        /// `host:port`.
        host: String,
        /// The step, e.g. `"commit"`.
        action: &'static str,
        /// The driver's error.
        #[source]
        source: mysql_async::Error,
    },
    /// A row did not have the shape the schema promises (a table altered by hand?).
    #[error("shard {shard} on {host}: {action}: unexpected row: {detail}")]
    Decode {
        /// Logical shard.
        shard: u32,
        /// `host:port`.
        host: String,
        /// The step.
        action: &'static str,
        /// What did not convert.
        detail: String,
    },
    /// `follow(a, a)` or `unfollow(a, a)`: a user is not in their own lists.
    #[error("user {0} cannot follow themselves")]
    SelfFollow(u64),
}

impl StoreError {
    /// True for [`Timeout`](Self::Timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self, StoreError::Timeout { .. })
    }

    /// The MySQL server error code, if MySQL answered with an error.
    pub fn server_code(&self) -> Option<u16> {
        match self {
            StoreError::Mysql {
                source: mysql_async::Error::Server(e),
                ..
            } => Some(e.code),
            _ => None,
        }
    }

    /// True when MySQL aborted the transaction only to break a lock conflict
    /// (deadlock, lock wait timeout): running it again may well succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.server_code(),
            Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT)
        )
    }

    /// True when the connection was lost or found dead (I/O error, closed by the
    /// server, server shutting down): the statement may not have reached MySQL.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            StoreError::Mysql { source, .. } => {
                matches!(
                    source,
                    mysql_async::Error::Io(_)
                        | mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed)
                ) || matches!(
                    self.server_code(),
                    Some(ER_SERVER_SHUTDOWN | ER_CONNECTION_KILLED)
                )
            }
            _ => false,
        }
    }

    /// True when the call failed after sending a `COMMIT` whose outcome it never
    /// learned (the commit timed out, or its connection was lost): the write may or
    /// may not stand. Follows and unfollows are idempotent, so running the call
    /// again settles it; a cache in front must not assume either way.
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            StoreError::Timeout { action, .. } => *action == COMMIT,
            StoreError::Mysql { action, .. } => *action == COMMIT && self.is_connection_lost(),
            _ => false,
        }
    }

    /// The logical shard involved, if any.
    pub fn shard(&self) -> Option<u32> {
        match self {
            StoreError::Timeout { shard, .. }
            | StoreError::Mysql { shard, .. }
            | StoreError::Decode { shard, .. } => Some(*shard),
            StoreError::SelfFollow(_) => None,
        }
    }
}
