//! Placeholder: the request decoder is being written.
use bytes::{Bytes, BytesMut};

/// Size limits applied while parsing, before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string accepted (`proto-max-bulk-len`, 512 MB by default).
    pub max_bulk_len: usize,
    /// Most elements in one request array.
    pub max_multibulk_len: usize,
    /// Longest inline command line.
    pub max_inline_len: usize,
    /// Deepest nesting of aggregates (replies only).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024 * 1024,
            max_inline_len: 64 * 1024,
            max_depth: 128,
        }
    }
}

/// A framing error: the stream cannot be resynchronised, so the connection closes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

/// Incremental request decoder.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
}

impl RequestDecoder {
    pub fn new(limits: Limits) -> Self {
        RequestDecoder { limits }
    }
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }
    /// Decodes one request from the front of `buf` into `args`.
    pub fn decode(&mut self, _buf: &mut BytesMut, _args: &mut Vec<Bytes>) -> Result<bool, ProtocolError> {
        let _ = self.limits;
        Ok(false)
    }
}
