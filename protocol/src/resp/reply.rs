//! Reply parsing: turning the bytes a server sends into [`Frame`]s (client side).
//!
//! Every RESP2 and RESP3 type is understood:
//!
//! | byte | type | frame |
//! |------|------|-------|
//! | `+` `-` `:` | simple string, error, integer | `Simple`, `Error`, `Integer` |
//! | `$` | bulk string; `$-1` is RESP2's null | `Bulk`, `Null` |
//! | `*` | array; `*-1` is RESP2's null array | `Array`, `NullArray` |
//! | `_` `,` `#` `(` | null, double, boolean, big number | `Null`, `Double`, `Boolean`, `BigNumber` |
//! | `!` `=` | blob error, verbatim string | `Error`, `Verbatim` |
//! | `%` `~` `>` | map, set, push | `Map`, `Set`, `Push` |
//! | `\|` | attribute | parsed and dropped; the value after it is returned |
//!
//! RESP3's streamed strings and aggregates (`$?`, `*?`) are not: Redis never sends
//! them. Text that [`Frame`] requires to be a single line (simple strings, errors,
//! blob errors) has any CR or LF turned into a space, as [`Frame::simple`] does.
//!
//! Two entry points share one state machine: [`parse_frame`], a pure function over
//! `&[u8]`, and [`ReplyDecoder`], which remembers the elements of a large aggregate
//! parsed so far so that a reply arriving over many reads is parsed once in total.
//! Both check lengths, counts and nesting against [`Limits`] as soon as they are
//! read, and reserve at most a small, fixed number of elements up front whatever an
//! aggregate announces. This module does not parse requests: see [`super::request`].

use bytes::{Buf, Bytes, BytesMut};

use super::request::{find_cr, parse_strict_i64};
use super::{Frame, Limits, ProtocolError};

/// Longest aggregate or bulk header line (`*<n>`, `$<len>`, …), type byte included.
const MAX_HEADER_LINE: usize = 64 * 1024;

/// Most elements reserved from an aggregate's count alone.
const MAX_PREALLOC: usize = 1024;

/// Parses one frame from the front of `buf`.
///
/// Returns `Ok(Some((frame, consumed)))` for a complete frame and `Ok(None)` when
/// `buf` holds only part of one. Attributes (`|`) before the value are parsed,
/// counted in `consumed`, and dropped.
///
/// ```
/// use relcache_protocol::resp::{parse_frame, Frame, Limits};
///
/// let limits = Limits::default();
/// let (frame, n) = parse_frame(b"*2\r\n:1\r\n$-1\r\n+OK", &limits).unwrap().unwrap();
/// assert_eq!(frame, Frame::Array(vec![Frame::Integer(1), Frame::Null]));
/// assert_eq!(n, 13);
/// assert_eq!(parse_frame(b"+OK\r", &limits), Ok(None));
/// ```
///
/// # Errors
///
/// A [`ProtocolError`] when the bytes are not valid RESP, or break a limit.
pub fn parse_frame(buf: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, ProtocolError> {
    ReplyDecoder::new(*limits).resume(buf)
}

/// Incremental reply decoder; one per connection.
///
/// Between two calls to [`decode`](Self::decode) the caller may only *append* to the
/// buffer: the decoder keeps the elements of the front frame parsed so far, and the
/// offset where it stopped. After an error it is reset, but the stream cannot be
/// resynchronised.
///
/// ```
/// use bytes::BytesMut;
/// use relcache_protocol::resp::{reply::ReplyDecoder, Frame, Limits};
///
/// let mut decoder = ReplyDecoder::new(Limits::default());
/// let mut buf = BytesMut::from(&b"%1\r\n+a\r\n"[..]);
/// assert_eq!(decoder.decode(&mut buf), Ok(None));
/// buf.extend_from_slice(b",1.5\r\n");
/// let map = Frame::Map(vec![(Frame::simple("a"), Frame::Double(1.5))]);
/// assert_eq!(decoder.decode(&mut buf), Ok(Some(map)));
/// assert!(buf.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct ReplyDecoder {
    limits: Limits,
    /// First byte of the front frame not yet parsed.
    pos: usize,
    /// The line being read has been searched for its CR up to here.
    scanned: usize,
    /// The aggregates opened and not yet complete, outermost first.
    stack: Vec<Partial>,
}

/// An aggregate whose elements are still arriving.
#[derive(Debug)]
struct Partial {
    /// The type byte: one of `* ~ > % |`.
    kind: u8,
    /// Elements still to come (twice the pair count for maps and attributes).
    remaining: usize,
    items: Vec<Frame>,
}

impl Partial {
    /// The finished aggregate; `None` for an attribute, which is dropped.
    fn finish(kind: u8, items: Vec<Frame>) -> Option<Frame> {
        Some(match kind {
            b'~' => Frame::Set(items),
            b'>' => Frame::Push(items),
            b'%' => {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                Frame::Map(pairs)
            }
            b'|' => return None,
            _ => Frame::Array(items),
        })
    }
}

/// One element read at the current position.
enum Token {
    Value(Frame),
    /// An aggregate header: its type byte and its count (pairs for `%` and `|`).
    Open(u8, usize),
}

impl ReplyDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        ReplyDecoder {
            limits,
            ..ReplyDecoder::default()
        }
    }

    /// Replaces the limits; they apply from the next element read.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Decodes one frame from the front of `buf`, removing its bytes; `Ok(None)`,
    /// with `buf` untouched, while the frame is incomplete.
    ///
    /// # Errors
    ///
    /// A [`ProtocolError`] when the bytes are not valid RESP, or break a limit.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        Ok(self.resume(buf)?.map(|(frame, len)| {
            buf.advance(len);
            frame
        }))
    }

    /// Continues parsing the frame at the front of `buf`; resets once it is complete
    /// or found invalid.
    fn resume(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
        let result = self.step(buf);
        if !matches!(result, Ok(None)) {
            self.pos = 0;
            self.scanned = 0;
            self.stack.clear();
        }
        result
    }

    fn step(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
        loop {
            let Some((token, next)) = self.element(buf)? else {
                return Ok(None);
            };
            self.pos = next;
            self.scanned = next;
            let mut frame = match token {
                Token::Value(frame) => frame,
                Token::Open(kind, count) => {
                    if self.stack.len() >= self.limits.max_depth {
                        return Err(ProtocolError::new("too deeply nested reply"));
                    }
                    let elements = if matches!(kind, b'%' | b'|') {
                        count.checked_mul(2).ok_or_else(invalid_count)?
                    } else {
                        count
                    };
                    if elements > 0 {
                        self.stack.push(Partial {
                            kind,
                            remaining: elements,
                            items: Vec::with_capacity(elements.min(MAX_PREALLOC)),
                        });
                        continue;
                    }
                    match Partial::finish(kind, Vec::new()) {
                        Some(frame) => frame,
                        None => continue,
                    }
                }
            };
            // Hand the value to its aggregate, closing every aggregate it completes.
            loop {
                let Some(top) = self.stack.last_mut() else {
                    return Ok(Some((frame, self.pos)));
                };
                top.items.push(frame);
                top.remaining -= 1;
                if top.remaining > 0 {
                    break;
                }
                let Partial { kind, items, .. } = self.stack.pop().expect("stack has a top");
                match Partial::finish(kind, items) {
                    Some(done) => frame = done,
                    // An attribute describes the value that follows; it takes no slot.
                    None => break,
                }
            }
        }
    }

    /// Reads the element at `self.pos`: `Ok(Some((token, next)))`, where `next` is
    /// the offset after it, or `Ok(None)` if it is incomplete.
    fn element(&mut self, buf: &[u8]) -> Result<Option<(Token, usize)>, ProtocolError> {
        let start = self.pos;
        let Some(&kind) = buf.get(start) else {
            return Ok(None);
        };
        let max_line = match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
                self.limits.max_bulk_len.saturating_add(1)
            }
            b'$' | b'!' | b'=' | b'*' | b'%' | b'~' | b'>' | b'|' => MAX_HEADER_LINE,
            _ => {
                return Err(ProtocolError(format!(
                    "invalid reply type byte '{}'",
                    kind.escape_ascii()
                )))
            }
        };
        let Some(cr) = find_cr(
            buf,
            start,
            &mut self.scanned,
            max_line,
            "too big reply line",
        )?
        else {
            return Ok(None);
        };
        if buf[cr + 1] != b'\n' {
            return Err(ProtocolError::new("expected CRLF after reply line"));
        }
        let line = &buf[start + 1..cr];
        let next = cr + 2;
        let invalid = |what: &str| ProtocolError(format!("invalid {what}"));
        let frame = match kind {
            b'+' => Frame::simple(Bytes::copy_from_slice(line)),
            b'-' => Frame::error(Bytes::copy_from_slice(line)),
            b':' => Frame::Integer(parse_i64(line).ok_or_else(|| invalid("integer"))?),
            b'_' if line.is_empty() => Frame::Null,
            b'_' => return Err(invalid("null")),
            b',' => Frame::Double(parse_double(line).ok_or_else(|| invalid("double"))?),
            b'#' => match line {
                b"t" => Frame::Boolean(true),
                b"f" => Frame::Boolean(false),
                _ => return Err(invalid("boolean")),
            },
            b'(' if is_big_number(line) => Frame::BigNumber(Bytes::copy_from_slice(line)),
            b'(' => return Err(invalid("big number")),
            b'$' if line == b"-1" => Frame::Null,
            b'*' if line == b"-1" => Frame::NullArray,
            b'$' | b'!' | b'=' => {
                let len = parse_strict_i64(line)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= self.limits.max_bulk_len)
                    .ok_or_else(|| invalid("bulk length"))?;
                let end = next.saturating_add(len);
                let Some(crlf) = buf.get(end..end.saturating_add(2)) else {
                    return Ok(None);
                };
                if crlf != b"\r\n" {
                    return Err(ProtocolError::new("expected CRLF after bulk data"));
                }
                let data = &buf[next..end];
                let frame = match kind {
                    b'$' => Frame::Bulk(Bytes::copy_from_slice(data)),
                    b'!' => Frame::error(Bytes::copy_from_slice(data)),
                    _ => match data {
                        [a, b, c, b':', text @ ..] => Frame::Verbatim {
                            format: [*a, *b, *c],
                            text: Bytes::copy_from_slice(text),
                        },
                        _ => return Err(invalid("verbatim string")),
                    },
                };
                return Ok(Some((Token::Value(frame), end + 2)));
            }
            _ => {
                let count = parse_strict_i64(line)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= self.limits.max_multibulk_len)
                    .ok_or_else(invalid_count)?;
                return Ok(Some((Token::Open(kind, count), next)));
            }
        };
        Ok(Some((Token::Value(frame), next)))
    }
}

fn invalid_count() -> ProtocolError {
    ProtocolError::new("invalid multibulk length")
}

/// An integer reply: an optional sign, then decimal digits; it must fit an `i64`.
fn parse_i64(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.parse().ok()
}

/// A double reply: `inf`, `-inf`, `nan`, or a decimal number with an optional
/// exponent. Rust's parser alone would also take `infinity` and `NaN`.
fn parse_double(line: &[u8]) -> Option<f64> {
    match line {
        b"inf" | b"+inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        b"nan" | b"-nan" => Some(f64::NAN),
        _ if line
            .iter()
            .all(|&b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E')) =>
        {
            std::str::from_utf8(line).ok()?.parse().ok()
        }
        _ => None,
    }
}

/// A big number: an optional sign, then one or more decimal digits.
fn is_big_number(line: &[u8]) -> bool {
    let digits = match line {
        [b'-' | b'+', rest @ ..] => rest,
        _ => line,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Protocol;

    /// The result of parsing `input`, after checking that every prefix is either
    /// incomplete or the same error, and that a resumable decoder fed the input in
    /// two reads, or a byte at a time, agrees.
    fn parse(input: &[u8], limits: Limits) -> Result<Option<(Frame, usize)>, ProtocolError> {
        let whole = parse_frame(input, &limits);
        for split in 0..input.len() {
            let prefix = parse_frame(&input[..split], &limits);
            match (&prefix, &whole) {
                (Ok(None), _) => {}
                (Err(a), Err(b)) if a == b => {}
                // A frame may end before the input does.
                (Ok(Some(a)), Ok(Some(b))) if a == b => {}
                _ => panic!("prefix of {split} bytes gave {prefix:?}, whole gave {whole:?}"),
            }
            let mut decoder = ReplyDecoder::new(limits);
            let mut buf = BytesMut::from(&input[..split]);
            let first = decoder.decode(&mut buf);
            if matches!(first, Ok(None)) {
                buf.extend_from_slice(&input[split..]);
                let second = decoder.decode(&mut buf);
                assert_eq!(
                    second,
                    whole.clone().map(|r| r.map(|(f, _)| f)),
                    "split {split}"
                );
            }
        }
        let mut decoder = ReplyDecoder::new(limits);
        let mut buf = BytesMut::new();
        let mut result = Ok(None);
        for &b in input {
            buf.extend_from_slice(&[b]);
            result = decoder.decode(&mut buf);
            if !matches!(result, Ok(None)) {
                break;
            }
        }
        assert_eq!(
            result,
            whole.clone().map(|r| r.map(|(f, _)| f)),
            "byte at a time"
        );
        whole
    }

    fn ok(input: &[u8]) -> Frame {
        let (frame, n) = parse(input, Limits::default()).unwrap().unwrap();
        assert_eq!(n, input.len(), "whole input consumed");
        frame
    }

    fn err(input: &[u8]) -> String {
        parse(input, Limits::default()).unwrap_err().to_string()
    }

    fn bulk(s: &str) -> Frame {
        Frame::bulk(s.to_owned())
    }

    #[test]
    fn resp2_types() {
        assert_eq!(ok(b"+OK\r\n"), Frame::ok());
        assert_eq!(ok(b"-ERR bad\r\n"), Frame::error("ERR bad"));
        assert_eq!(ok(b":-42\r\n"), Frame::Integer(-42));
        assert_eq!(ok(b":+7\r\n"), Frame::Integer(7));
        assert_eq!(ok(b"$5\r\na\r\nb\0\r\n"), Frame::bulk(&b"a\r\nb\0"[..]));
        assert_eq!(ok(b"$0\r\n\r\n"), bulk(""));
        assert_eq!(ok(b"$-1\r\n"), Frame::Null);
        assert_eq!(ok(b"*-1\r\n"), Frame::NullArray);
        assert_eq!(ok(b"*0\r\n"), Frame::Array(vec![]));
        assert_eq!(
            ok(b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$-1\r\n"),
            Frame::Array(vec![
                Frame::Integer(1),
                Frame::Array(vec![bulk("x")]),
                Frame::Null
            ])
        );
    }

    #[test]
    fn resp3_types() {
        assert_eq!(ok(b"_\r\n"), Frame::Null);
        assert_eq!(ok(b"#t\r\n"), Frame::Boolean(true));
        assert_eq!(ok(b"#f\r\n"), Frame::Boolean(false));
        assert_eq!(ok(b",1.5\r\n"), Frame::Double(1.5));
        assert_eq!(ok(b",-2\r\n"), Frame::Double(-2.0));
        assert_eq!(ok(b",1e300\r\n"), Frame::Double(1e300));
        assert_eq!(ok(b",2.5E-3\r\n"), Frame::Double(2.5e-3));
        assert_eq!(ok(b",inf\r\n"), Frame::Double(f64::INFINITY));
        assert_eq!(ok(b",-inf\r\n"), Frame::Double(f64::NEG_INFINITY));
        assert_eq!(
            ok(b"(-12345678901234567890\r\n"),
            Frame::BigNumber(Bytes::from_static(b"-12345678901234567890"))
        );
        assert_eq!(ok(b"!8\r\nERR a\r\nb\r\n"), Frame::error("ERR a  b"));
        assert_eq!(
            ok(b"=7\r\ntxt:a\nb\r\n"),
            Frame::Verbatim {
                format: *b"txt",
                text: Bytes::from_static(b"a\nb")
            }
        );
        assert_eq!(
            ok(b"%2\r\n+a\r\n:1\r\n+b\r\n~1\r\n#t\r\n"),
            Frame::Map(vec![
                (Frame::simple("a"), Frame::Integer(1)),
                (Frame::simple("b"), Frame::Set(vec![Frame::Boolean(true)])),
            ])
        );
        assert_eq!(
            ok(b">2\r\n+x\r\n_\r\n"),
            Frame::Push(vec![Frame::simple("x"), Frame::Null])
        );
        assert_eq!(ok(b"%0\r\n"), Frame::Map(vec![]));
    }

    #[test]
    fn nan() {
        let parsed = parse_frame(b",nan\r\n", &Limits::default()).unwrap();
        assert!(matches!(parsed, Some((Frame::Double(d), 6)) if d.is_nan()));
        assert_eq!(parse_frame(b",na", &Limits::default()), Ok(None));
    }

    #[test]
    fn attributes_are_dropped() {
        assert_eq!(ok(b"|1\r\n+key\r\n:1\r\n:2\r\n"), Frame::Integer(2));
        assert_eq!(ok(b"|0\r\n:2\r\n"), Frame::Integer(2));
        assert_eq!(
            ok(b"*2\r\n|1\r\n+a\r\n*1\r\n:0\r\n:1\r\n:2\r\n"),
            Frame::Array(vec![Frame::Integer(1), Frame::Integer(2)])
        );
    }

    #[test]
    fn a_frame_ends_where_it_ends() {
        let limits = Limits::default();
        let (frame, n) = parse(b"+OK\r\n:1\r\n", limits).unwrap().unwrap();
        assert_eq!((frame, n), (Frame::ok(), 5));
    }

    #[test]
    fn errors() {
        assert_eq!(err(b"?\r\n"), "Protocol error: invalid reply type byte '?'");
        assert_eq!(
            err(b"\x01"),
            "Protocol error: invalid reply type byte '\\x01'"
        );
        assert_eq!(err(b":1x\r\n"), "Protocol error: invalid integer");
        assert_eq!(err(b":\r\n"), "Protocol error: invalid integer");
        assert_eq!(
            err(b"+OK\rx"),
            "Protocol error: expected CRLF after reply line"
        );
        assert_eq!(err(b"$-2\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(err(b"$?\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(err(b"!-1\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            err(b"$1\r\nab\r\n"),
            "Protocol error: expected CRLF after bulk data"
        );
        assert_eq!(err(b"*-2\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(err(b"%-1\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(err(b"_x\r\n"), "Protocol error: invalid null");
        assert_eq!(err(b"#x\r\n"), "Protocol error: invalid boolean");
        assert_eq!(err(b",1.5x\r\n"), "Protocol error: invalid double");
        assert_eq!(err(b",infinity\r\n"), "Protocol error: invalid double");
        assert_eq!(err(b"(12a\r\n"), "Protocol error: invalid big number");
        assert_eq!(
            err(b"=3\r\ntxt\r\n"),
            "Protocol error: invalid verbatim string"
        );
    }

    #[test]
    fn limits() {
        let limits = Limits {
            max_bulk_len: 4,
            max_multibulk_len: 2,
            max_depth: 2,
            ..Limits::default()
        };
        let e = |input: &[u8]| parse(input, limits).unwrap_err().to_string();
        assert_eq!(e(b"$5\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(e(b"*3\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"%3\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(
            e(b"*1\r\n*1\r\n*0\r\n"),
            "Protocol error: too deeply nested reply"
        );
        assert_eq!(e(b"+12345"), "Protocol error: too big reply line");
        assert!(parse(b"*1\r\n*1\r\n:1\r\n", limits).unwrap().is_some());
        assert!(parse(b"+1234\r\n", limits).unwrap().is_some());
        let huge = parse_frame(b"*999999999999999\r\n", &Limits::default());
        assert_eq!(
            huge.unwrap_err().to_string(),
            "Protocol error: invalid multibulk length"
        );
        // A large but allowed count reserves a bounded number of slots.
        let mut decoder = ReplyDecoder::default();
        let mut buf = BytesMut::from(&b"*1000000\r\n:1\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        assert!(decoder.stack[0].items.capacity() <= MAX_PREALLOC);
    }

    #[test]
    fn deep_nesting_is_refused_without_recursion() {
        let input = b"*1\r\n".repeat(100_000);
        let e = parse_frame(&input, &Limits::default()).unwrap_err();
        assert_eq!(e.to_string(), "Protocol error: too deeply nested reply");
        let unlimited = Limits {
            max_depth: usize::MAX,
            ..Limits::default()
        };
        assert_eq!(parse_frame(&input, &unlimited), Ok(None));
    }

    #[test]
    fn resumes_where_it_stopped() {
        let items: Vec<Frame> = (0..5000).map(|i| Frame::Integer(i * 7)).collect();
        let reply = Frame::Map(vec![(bulk("k"), Frame::Array(items))]);
        let wire = reply.to_bytes(Protocol::Resp3);
        let mut decoder = ReplyDecoder::default();
        let mut buf = BytesMut::new();
        for chunk in wire.chunks(13) {
            buf.extend_from_slice(chunk);
            if let Some(frame) = decoder.decode(&mut buf).unwrap() {
                assert_eq!(frame, reply);
                assert!(buf.is_empty());
                return;
            }
            assert_eq!(buf.len() % 13, 0, "nothing consumed before the end");
        }
        panic!("never completed");
    }

    #[test]
    fn encoder_round_trips() {
        let frame = Frame::Array(vec![
            Frame::Map(vec![(bulk("a"), Frame::Double(0.1))]),
            Frame::Set(vec![Frame::BigNumber(Bytes::from_static(b"123"))]),
            Frame::Push(vec![Frame::Boolean(false), Frame::Null]),
            Frame::Verbatim {
                format: *b"mkd",
                text: Bytes::from_static(b"# hi\r\n"),
            },
        ]);
        let wire = frame.to_bytes(Protocol::Resp3);
        assert_eq!(ok(&wire), frame);
    }
}
