//! Command errors and their wire text, in one place.
//!
//! Handlers return `Result<Frame, CmdError>`; the dispatcher turns an error into the
//! exact reply Redis 7 sends, so clients that match on error text (redis-py maps
//! `WRONGTYPE`, `NOAUTH`, `EXECABORT` … to exception classes) behave unchanged.
//! A `CmdError` never closes the connection: only a framing error does.

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use crate::db;

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdError {
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR no such key")]
    NoSuchKey,
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(String),
    #[error("ERR unknown subcommand '{sub}'. Try {cmd} HELP.")]
    UnknownSubcommand { cmd: String, sub: String },
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    Oom,
    /// A command Redis refuses while the dataset loads at start.
    #[error("LOADING Redis is loading the dataset in memory")]
    Loading,
    #[error(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    )]
    Busy,
    /// `ERR <message>`.
    #[error("ERR {0}")]
    Err(String),
    /// A reply whose code is not `ERR` (`WRONGPASS …`, `EXECABORT …`): the full text.
    #[error("{0}")]
    Coded(String),
}

impl CmdError {
    /// `ERR <message>`.
    pub fn err(msg: impl Into<String>) -> CmdError {
        CmdError::Err(msg.into())
    }

    /// The error reply frame.
    pub fn to_frame(&self) -> Frame {
        Frame::error(Bytes::from(self.to_string()))
    }

    /// `ERR unknown subcommand`, with the command name upper-cased as Redis prints it.
    pub fn unknown_subcommand(cmd: &str, sub: &[u8]) -> CmdError {
        CmdError::UnknownSubcommand {
            cmd: cmd.to_ascii_uppercase(),
            sub: String::from_utf8_lossy(sub).into_owned(),
        }
    }
}

impl From<db::Error> for CmdError {
    /// The wire text of each storage refusal.
    fn from(e: db::Error) -> CmdError {
        match e {
            db::Error::WrongType => CmdError::WrongType,
            db::Error::InvalidTable(_) | db::Error::TooLarge(_) => CmdError::err(e.to_string()),
        }
    }
}

/// What every handler returns.
pub type CmdResult = Result<Frame, CmdError>;

#[cfg(test)]
mod tests {
    use super::*;
    use relcache_protocol::idset::{FormatError, TooLarge};

    #[test]
    fn storage_errors_keep_their_wire_text() {
        assert_eq!(CmdError::from(db::Error::WrongType), CmdError::WrongType);
        assert_eq!(
            CmdError::from(db::Error::InvalidTable(FormatError::BadMagic)).to_string(),
            format!("ERR invalid idset table: {}", FormatError::BadMagic)
        );
        let too_large = TooLarge {
            slots: 1 << 40,
            needed: 1 << 41,
        };
        assert_eq!(
            CmdError::from(db::Error::TooLarge(too_large)).to_string(),
            format!("ERR {too_large}")
        );
    }
}
