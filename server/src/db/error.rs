//! What the keyspace's own operations can refuse, in storage terms.
//!
//! The wire text of each kind is chosen in one place, `crate::error` (a
//! `From<Error> for CmdError`), so command handlers keep using `?` and storage does
//! not speak RESP.

use relcache_protocol::idset::{FormatError, TooLarge};

/// Why a storage operation refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The key holds a value of another type than the operation needs.
    #[error("the key holds another type of value")]
    WrongType,
    /// Bytes meant as an idset table are not a valid one.
    #[error("invalid idset table: {0}")]
    InvalidTable(#[from] FormatError),
    /// A set too large for the table format.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}
