//! Placeholder: the reply parser is being written.
use super::{Frame, Limits, ProtocolError};

/// Parses one frame from the front of `buf`: `Ok(Some((frame, consumed)))`.
pub fn parse_frame(_buf: &[u8], _limits: &Limits) -> Result<Option<(Frame, usize)>, ProtocolError> {
    Ok(None)
}
