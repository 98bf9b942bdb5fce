//! RESP2 and RESP3: the frame value type, its encoder, and the parsers.
//!
//! [`Frame`] is one RESP3 value (a superset of RESP2). The server builds replies as
//! frames and encodes them for the protocol version the connection negotiated with
//! HELLO, so a command never needs to know which version its caller speaks: maps,
//! sets, doubles, booleans and nulls are downgraded to their RESP2 shapes exactly as
//! Redis 7 does.
//!
//! Parsing lives in [`request`] (what a server reads: arrays of bulk strings, or
//! inline commands) and [`reply`] (what a client reads: any RESP2/RESP3 value). Both
//! are incremental — a partial frame is "need more bytes", never an error — and both
//! enforce size limits before allocating anything.

mod encode;
pub mod reply;
pub mod request;

use bytes::Bytes;

pub use encode::{write_array_header, write_bulk, write_integer};
pub use reply::{parse_frame, ReplyDecoder};
pub use request::{
    parse_request, parse_strict_i64, split_args, Limits, ProtocolError, Request, RequestDecoder,
    BIG_ARG, UNAUTHENTICATED_MAX_ARGS, UNAUTHENTICATED_MAX_BULK,
};

/// The protocol version a connection speaks; RESP2 until the client says `HELLO 3`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    /// The number HELLO and `CLIENT INFO` use for this version.
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// One RESP value.
///
/// `Simple` and `Error` hold their text without the type byte or the trailing CRLF
/// and must not contain CR or LF; build them with [`Frame::simple`] and
/// [`Frame::error`], which enforce that.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `+OK`
    Simple(Bytes),
    /// `-ERR message` — the text starts with the error code (`ERR`, `WRONGTYPE`, …).
    Error(Bytes),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo`
    Bulk(Bytes),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Null,
    /// A missing aggregate (EXEC after a WATCH fired): `*-1` in RESP2, `_` in RESP3.
    NullArray,
    /// `*n`
    Array(Vec<Frame>),
    /// `*n` of `:i` elements, the same bytes on the wire as an `Array` of `Integer`s,
    /// held flat: batch checks (SMISMEMBER, IDSET.MEXISTS) answer hundreds of 0/1
    /// flags, and a 40-byte `Frame` each, built, matched on and dropped one by one,
    /// cost more than the lookups they report.
    Integers(Vec<i64>),
    /// `%n` in RESP3; a flat array of `2n` elements in RESP2.
    Map(Vec<(Frame, Frame)>),
    /// `~n` in RESP3; an array in RESP2.
    Set(Vec<Frame>),
    /// `>n` in RESP3 (out-of-band data); an array in RESP2.
    Push(Vec<Frame>),
    /// `,1.5` in RESP3; a bulk string in RESP2.
    Double(f64),
    /// `#t` in RESP3; the integer 1 or 0 in RESP2.
    Boolean(bool),
    /// `(12345…` in RESP3; a bulk string in RESP2.
    BigNumber(Bytes),
    /// `=n\r\ntxt:…` in RESP3; a bulk string of the text alone in RESP2.
    Verbatim { format: [u8; 3], text: Bytes },
}

impl Frame {
    /// The `+OK` reply.
    pub fn ok() -> Frame {
        Frame::Simple(Bytes::from_static(b"OK"))
    }

    /// A status reply; CR and LF, which would break framing, become spaces.
    pub fn simple(text: impl Into<Bytes>) -> Frame {
        Frame::Simple(sanitize_line(text.into()))
    }

    /// An error reply. `text` starts with the code (`ERR …`); CR and LF become spaces,
    /// as Redis does for error strings built from user input.
    pub fn error(text: impl Into<Bytes>) -> Frame {
        Frame::Error(sanitize_line(text.into()))
    }

    /// A bulk string.
    pub fn bulk(data: impl Into<Bytes>) -> Frame {
        Frame::Bulk(data.into())
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_))
    }

    /// Appends the encoding of `self` for `proto` to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut bytes::BytesMut) {
        encode::encode(self, proto, out)
    }

    /// The encoding of `self` for `proto` as a fresh buffer (tests and tools).
    pub fn to_bytes(&self, proto: Protocol) -> Bytes {
        let mut out = bytes::BytesMut::new();
        self.encode(proto, &mut out);
        out.freeze()
    }
}

fn sanitize_line(text: Bytes) -> Bytes {
    if !text.iter().any(|&b| b == b'\r' || b == b'\n') {
        return text;
    }
    text.iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect::<Vec<u8>>()
        .into()
}
