//! Request framing: turning the bytes a client sends into argument vectors.
//!
//! A request is either a *multibulk* — `*<n>\r\n` followed by `n` bulk strings, each
//! `$<len>\r\n<data>\r\n` — or an *inline* command: one line of whitespace-separated
//! words, as typed into telnet (`PING\r\n`), split the way Redis's `sdssplitargs`
//! does (double quotes with `\n \r \t \b \a \\ \" \xHH` escapes, single quotes with
//! `\'`). This module yields argument vectors only: it knows nothing of commands, and
//! replies are parsed by [`super::reply`].
//!
//! Two entry points share one state machine:
//!
//! - [`RequestDecoder`], for a connection: resumable, so a request that arrives over
//!   many reads is scanned once in total, and zero-copy: a [`Request`] says where
//!   each argument lies in the read buffer, where the request stays until it is
//!   consumed, so a server reads its arguments as slices, with no copy and no
//!   reference count each; but a bulk of [`BIG_ARG`] bytes or more still arriving
//!   when its header is read is gathered into an allocation of its own, which a
//!   server can store as it is.
//! - [`parse_request`], a pure function over `&[u8]` for tests, fuzzing and tools.
//!
//! Empty requests (`*0`, any negative count such as `*-1` or `*-10`, a blank line)
//! are skipped, as Redis does. Sizes are
//! checked as soon as a length is read, before waiting for (or reserving room for)
//! the data it announces.
//!
//! # Compatibility with Redis 7
//!
//! Error texts are Redis's (`Protocol error: invalid bulk length`, …). Where Redis is
//! lax, this decoder is stricter, because every lax case is a client bug that would
//! otherwise surface later as a confusing command error:
//!
//! - bulk data must be followed by CRLF (Redis skips the next two bytes unchecked),
//!   and header lines must end in CRLF, not a lone CR;
//! - line limits apply to the whole line, whether or not its terminator has arrived,
//!   so the verdict on a stream does not depend on how it was split into reads
//!   (Redis checks the limit only while the terminator is still missing).
//!
//! Two smaller differences: a NUL byte in an inline command is an ordinary byte
//! (Redis ends the line there), and in `expected '$', got 'X'` a byte that is not
//! printable ASCII is written as an escape (`'\r'`, `'\xff'`), where Redis copies it
//! raw into the error line.

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use smallvec::SmallVec;

/// Longest `*<n>` or `$<len>` header line, type byte included, that may arrive
/// without its CR (Redis's `PROTO_INLINE_MAX_SIZE`).
const MAX_HEADER_LINE: usize = 64 * 1024;

/// Most argument slots reserved from a count alone: a client announcing a million
/// arguments gets room for them only as they arrive.
const MAX_PREALLOC: usize = 1024;
/// Arguments whose places the decoder keeps without allocating.
const INLINE_ARGS: usize = 8;

/// A bulk argument of at least this many bytes (Redis's `PROTO_MBULK_BIG_ARG`)
/// reaches the caller of [`RequestDecoder::decode`] as the only reference to an
/// allocation of its own, at most 2 bytes larger than it: a server may store it
/// as it is, without a copy and without pinning the read buffer it came in.
/// One whose data has not all arrived when its header is read is gathered into
/// such a buffer directly ([`RequestDecoder::big_buffer`]); one that arrived
/// whole is copied out of the read buffer, as the server would have had to.
pub const BIG_ARG: usize = 32 * 1024;

/// Size limits applied while parsing, before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string accepted (`proto-max-bulk-len`, 512 MB by default).
    pub max_bulk_len: usize,
    /// Most elements in one request array, or in one reply aggregate (map pairs count
    /// once each).
    pub max_multibulk_len: usize,
    /// Longest inline command line, CRLF excluded.
    pub max_inline_len: usize,
    /// Deepest nesting of aggregates (replies only): a flat array has depth 1.
    pub max_depth: usize,
    /// The client has not authenticated where a password is required: as in
    /// Redis 7, a request may then have at most [`UNAUTHENTICATED_MAX_ARGS`]
    /// arguments and bulks of at most [`UNAUTHENTICATED_MAX_BULK`] bytes, so a
    /// stranger cannot make the server buffer a large request before AUTH.
    pub unauthenticated: bool,
}

/// Most arguments of a request from a client that has not authenticated.
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
/// Longest bulk string from a client that has not authenticated.
pub const UNAUTHENTICATED_MAX_BULK: usize = 16 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024 * 1024,
            max_inline_len: 64 * 1024,
            max_depth: 128,
            unauthenticated: false,
        }
    }
}

/// A framing error: the stream cannot be resynchronised, so the connection closes.
///
/// The field is the text after `Protocol error: `, e.g. `invalid bulk length`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

impl ProtocolError {
    pub(super) fn new(text: impl Into<String>) -> ProtocolError {
        ProtocolError(text.into())
    }
}

/// Incremental, zero-copy request decoder; one per connection.
///
/// # Contract
///
/// Between two calls to [`decode`](Self::decode) the caller may only *append* to the
/// buffer: the decoder remembers how far into the front request it has parsed (the
/// argument count, the arguments found so far, how far a line was searched), and
/// those offsets are only valid while the front of the buffer is left alone. After an
/// error the decoder is reset, but the stream cannot be resynchronised: close the
/// connection.
///
/// ```
/// use bytes::BytesMut;
/// use relcache_protocol::resp::{Limits, RequestDecoder};
///
/// let mut decoder = RequestDecoder::new(Limits::default());
/// let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$1\r"[..]);
/// let mut args = Vec::new();
/// assert!(!decoder.decode(&mut buf, &mut args).unwrap()); // half a request
/// buf.extend_from_slice(b"\nk\r\nPING\r\n");
/// assert!(decoder.decode(&mut buf, &mut args).unwrap());
/// assert_eq!(args, [&b"GET"[..], b"k"]);
/// assert!(decoder.decode(&mut buf, &mut args).unwrap()); // inline
/// assert_eq!(args, [&b"PING"[..]]);
/// assert!(buf.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
    progress: Progress,
    /// The big argument of the request under way, whose data goes to a buffer
    /// of its own rather than the read buffer.
    big: Option<BigArg>,
}

/// A bulk of at least [`BIG_ARG`] bytes whose header was read before its data had
/// all arrived: its data, then its CRLF, are gathered in `data`, which grows with
/// them to exactly that size. In the read buffer the argument takes no bytes: the parse goes on
/// after it at `Progress::pos`, where its data would have started.
#[derive(Debug)]
struct BigArg {
    /// Which argument of the request it is.
    index: usize,
    /// Its length, CRLF excluded.
    len: usize,
    /// A Vec rather than a BytesMut for an exact size: BytesMut's reserve rounds up.
    data: Vec<u8>,
}

/// How far a big argument's buffer is allocated ahead of the bytes that have
/// arrived, at most (or as far again as have arrived, when that is more): a
/// header alone, 40 bytes announcing 500 MB, must not take 500 MB, which a
/// server counts as used memory before it knows whose it is.
const BIG_ARG_AHEAD: usize = 1024 * 1024;

impl BigArg {
    /// Its data and CRLF still to come.
    fn missing(&self) -> usize {
        self.len + 2 - self.data.len()
    }

    /// Room for at least `n` more bytes (not past the end of the data and its
    /// CRLF), growing the buffer geometrically from what has arrived; the last
    /// growth ends exactly there, so the buffer is `len + 2` bytes once full.
    fn make_room(&mut self, n: usize) {
        let (have, room) = (self.data.len(), self.data.capacity() - self.data.len());
        let n = n.min(self.missing());
        if room < n {
            let target = have + n.max(have.max(BIG_ARG_AHEAD)).min(self.missing());
            self.data.reserve_exact(target - have);
        }
    }
}

impl RequestDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        RequestDecoder {
            limits,
            progress: Progress::default(),
            big: None,
        }
    }

    /// Replaces the limits (`CONFIG SET proto-max-bulk-len`). Lengths already
    /// accepted for a request under way stay accepted.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Heap bytes the decoder holds: where each argument of the request under way
    /// lies, kept between reads. A server counts it as the client's memory (a big
    /// argument's buffer is not counted here: see [`big_buffered`](Self::big_buffered)).
    pub fn scratch_bytes(&self) -> usize {
        if self.progress.args.spilled() {
            self.progress.args.capacity() * std::mem::size_of::<Range<usize>>()
        } else {
            0
        }
    }

    /// The buffer of a big argument under way ([`big_buffer`](Self::big_buffer)):
    /// how many bytes it holds and how many it has room for. They are input the
    /// client has sent or announced and no command has taken yet: a server counts
    /// them with its read buffer, as its query buffer.
    pub fn big_buffered(&self) -> (usize, usize) {
        self.big
            .as_ref()
            .map_or((0, 0), |b| (b.data.len(), b.data.capacity() - b.data.len()))
    }

    /// Where the next bytes from the client belong while a big argument's data
    /// is being gathered (see [`BIG_ARG`]): a buffer whose spare capacity is
    /// at most the rest of that data and its CRLF, so a read into it takes
    /// nothing of what follows (and at most a megabyte, or as much as has
    /// arrived, ahead of the bytes). Reading there instead of into the read buffer
    /// saves copying them over; a caller that does not is served all the same.
    pub fn big_buffer(&mut self) -> Option<&mut Vec<u8>> {
        let big = self.big.as_mut().filter(|b| b.missing() > 0)?;
        big.make_room(1);
        Some(&mut big.data)
    }

    /// How many arguments of the request under way have been read.
    pub fn args_read(&self) -> usize {
        self.progress.args.len()
    }

    /// How many arguments the request at the front of `buf` announces, once its
    /// `*<n>` line is complete (0 before, and for an inline request or a count
    /// that is no number): a server can tell a large request that has arrived
    /// whole before a call decodes it all.
    pub fn args_announced(&self, buf: &[u8]) -> usize {
        if let Some(count) = self.progress.count {
            return count;
        }
        if buf.first() != Some(&b'*') {
            return 0;
        }
        // A count of up to 20 digits: a longer line is refused when decoded.
        let line = &buf[..buf.len().min(24)];
        match line.iter().position(|&b| b == b'\r') {
            Some(cr) if cr + 1 < buf.len() => header_number(buf, 0, cr)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// How many more bytes than `buffered` (the bytes in the buffer, the request
    /// under way at its front) that request is expected to need: the rest of a
    /// bulk argument whose header has been read, exactly, and for the arguments
    /// not reached yet the average size of those read so far, and a quarter (not
    /// before AUTH); 0 when no request is under way. A server can grow its
    /// buffer once to about the request's size instead of by doubling (four
    /// copies of a 20,000-id SADD). For arguments not reached it is only an
    /// estimate from a count the client announced: a server should cap how far
    /// ahead of the bytes it allocates.
    pub fn bytes_wanted(&self, buffered: usize) -> usize {
        let p = &self.progress;
        let parsed = p.args.len();
        let mut end = p.pos;
        let mut ahead = p.count.unwrap_or(0).saturating_sub(parsed);
        if let Some(len) = p.bulk_len {
            end = end.saturating_add(len).saturating_add(2);
            ahead = ahead.saturating_sub(1);
        }
        // Before AUTH, only what is known: a stranger's ten arguments of 16 KB
        // each must not make room for 200 KB on the strength of one.
        if parsed > 0 && !self.limits.unauthenticated {
            // Erring high, by a quarter: room a request does not use is given
            // back once it has run (and the server caps how far ahead it makes
            // room), while too little costs a copy of all of it. The first
            // arguments are often shorter than the rest (ids counting up).
            let guess = ahead.saturating_mul(p.pos).div_ceil(parsed);
            end = end.saturating_add(guess.saturating_add(guess / 4));
        }
        end.saturating_sub(buffered)
    }

    /// Decodes one request from the front of `buf` into `request`.
    ///
    /// Returns `Ok(true)` with `request` holding the request (never empty), which
    /// stays at the front of `buf` until [`Request::consume`] takes it: its
    /// arguments are read in place ([`Request::args`]), but for a big argument
    /// whose data was gathered in a buffer of its own ([`BIG_ARG`]). Returns
    /// `Ok(false)` when `buf` holds only part of a request: `buf` is left as it
    /// is, except that empty requests before it have been skipped, and that the
    /// data of a big bulk still arriving has moved to a buffer of its own
    /// ([`big_buffer`](Self::big_buffer)). A request `request` still held is
    /// consumed first, so a caller that forgets to never runs one twice.
    ///
    /// A request's arguments cost nothing each: no copy, no reference count. A
    /// server takes ownership only of what it keeps.
    ///
    /// # Errors
    ///
    /// A [`ProtocolError`] when the bytes are not a valid request or break a limit;
    /// the connection must then be closed, after replying with the error's text.
    pub fn decode_request(
        &mut self,
        buf: &mut BytesMut,
        request: &mut Request,
    ) -> Result<bool, ProtocolError> {
        request.consume(buf);
        loop {
            let parsed = match self.step(buf) {
                Ok(parsed) => parsed,
                Err(e) => {
                    self.progress.reset();
                    self.big = None;
                    return Err(e);
                }
            };
            match parsed {
                Parsed::Incomplete => return Ok(false),
                Parsed::Multibulk { len } if self.progress.args.is_empty() => buf.advance(len),
                Parsed::Multibulk { len } => {
                    request.wire = len;
                    request.data = self.progress.data;
                    // The request's (empty) table becomes the next one's.
                    std::mem::swap(&mut request.ranges, &mut self.progress.args);
                    if let Some(mut big) = self.big.take() {
                        big.data.truncate(big.len);
                        request.big = Some(Bytes::from(big.data));
                        request.big_index = big.index;
                    }
                }
                Parsed::Inline { len, args: words } => {
                    request.wire = len;
                    let mut line = Vec::with_capacity(words.iter().map(Vec::len).sum());
                    for word in words {
                        request.ranges.push(line.len()..line.len() + word.len());
                        line.extend_from_slice(&word);
                    }
                    request.data = line.len();
                    request.words = Some(line);
                }
            }
            self.progress.reset();
            if !request.is_empty() {
                return Ok(true);
            }
            request.consume(buf);
        }
    }

    /// Decodes one request from the front of `buf` into `args`, each argument a
    /// [`Bytes`] of its own: [`decode_request`](Self::decode_request) for a caller
    /// that keeps the arguments, at the price of a reference count each.
    ///
    /// Returns `Ok(true)` with `args` holding the request's arguments (for a
    /// multibulk, slices of the consumed bytes, but each of [`BIG_ARG`] bytes or
    /// more an allocation of its own; never empty) and the request's bytes
    /// removed from `buf`, and `Ok(false)` as `decode_request` does. `args` is
    /// cleared in every case.
    ///
    /// # Errors
    ///
    /// As [`decode_request`](Self::decode_request).
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        args: &mut Vec<Bytes>,
    ) -> Result<bool, ProtocolError> {
        args.clear();
        let mut request = Request::default();
        if !self.decode_request(buf, &mut request)? {
            return Ok(false);
        }
        let bytes = buf.split_to(request.wire).freeze();
        args.extend((0..request.len()).map(|i| match &request.big {
            Some(big) if i == request.big_index => big.clone(),
            _ => {
                let arg = request.arg(&bytes, i);
                // A big argument that arrived whole is copied out, as a server
                // storing it would have to: it must not pin the request.
                if arg.len() >= BIG_ARG || request.words.is_some() {
                    Bytes::copy_from_slice(arg)
                } else {
                    bytes.slice_ref(arg)
                }
            }
        }));
        Ok(true)
    }

    /// One step of parsing the request at the front of `buf`, with a big
    /// argument's data gathered apart: the data of one still arriving is taken
    /// out of `buf` into its own buffer, and the parse goes on after it once it
    /// is all there.
    fn step(&mut self, buf: &mut BytesMut) -> Result<Parsed, ProtocolError> {
        // Until its data is all here and it has taken its place among the
        // arguments, after which the parse goes on in `buf`.
        let gathering = |b: &&mut BigArg| b.index == self.progress.args.len();
        if let Some(big) = self.big.as_mut().filter(gathering) {
            // Data a caller appended to `buf` instead of `big_buffer`.
            let at = self.progress.pos;
            let take = big.missing().min(buf.len() - at);
            if take > 0 {
                big.make_room(take);
                big.data.extend_from_slice(&buf[at..at + take]);
                buf.copy_within(at + take.., at);
                buf.truncate(buf.len() - take);
            }
            if big.data.len() < big.len + 2 {
                return Ok(Parsed::Incomplete);
            }
            if big.data[big.len..] != *b"\r\n" {
                return Err(ProtocolError::new("expected CRLF after bulk data"));
            }
            // In place of its data, an empty range where the data would have
            // been; `decode` puts the gathered bytes there.
            debug_assert_eq!(big.index, self.progress.args.len());
            self.progress.args.push(at..at);
            self.progress.bulk_len = None;
            self.progress.scanned = at;
        }
        let parsed = self.progress.parse(buf, &self.limits)?;
        if let (Parsed::Incomplete, Some(len), None) = (&parsed, self.progress.bulk_len, &self.big)
        {
            if len >= BIG_ARG {
                // Incomplete, so the data is not all here: what is goes over,
                // and the rest is read into the new buffer directly.
                let at = self.progress.pos;
                let mut big = BigArg {
                    index: self.progress.args.len(),
                    len,
                    data: Vec::new(),
                };
                big.make_room(buf.len() - at);
                big.data.extend_from_slice(&buf[at..]);
                buf.truncate(at);
                self.big = Some(big);
            }
        }
        Ok(parsed)
    }
}

/// A decoded request: where it lies and where each of its arguments lies,
/// reused from one request to the next ([`RequestDecoder::decode_request`]).
///
/// A multibulk request's arguments lie in the read buffer, at its front, until
/// the request is consumed: so they are read with that buffer in hand
/// ([`args`](Self::args)).
#[derive(Debug, Default)]
pub struct Request {
    /// How many bytes at the front of the read buffer the request takes.
    wire: usize,
    /// Where each argument lies, in the read buffer or in `words`; the big one's
    /// range is empty. In place for a request of a few arguments, as most are.
    ranges: SmallVec<[Range<usize>; INLINE_ARGS]>,
    /// The bytes of its arguments' data, but a big one's.
    data: usize,
    /// An inline request's words, back to back: its arguments lie here.
    words: Option<Vec<u8>>,
    /// The argument whose data was gathered in a buffer of its own, if any
    /// ([`BIG_ARG`]), and which one it is.
    big: Option<Bytes>,
    big_index: usize,
}

impl Request {
    /// How many arguments the request has (the command name counts).
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are none (only between requests).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Argument `i`, `buf` being the buffer the request was decoded from.
    ///
    /// # Panics
    ///
    /// If `i` is not below [`len`](Self::len), or `buf` is not that buffer.
    #[inline]
    pub fn arg<'a>(&'a self, buf: &'a [u8], i: usize) -> &'a [u8] {
        let range = self.ranges[i].clone();
        match (&self.big, &self.words) {
            (Some(big), _) if i == self.big_index => big,
            (_, Some(words)) => &words[range],
            _ => &buf[range],
        }
    }

    /// The arguments in order, `buf` being the buffer the request was decoded
    /// from.
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        // Where the arguments lie, worked out once rather than for each (a
        // 20,000-id SADD has as many), over the ranges as one slice.
        let data = self.words.as_deref().unwrap_or(buf);
        let big = self.big.as_deref().map(|b| (self.big_index, b));
        self.ranges
            .iter()
            .enumerate()
            .map(move |(i, range)| match big {
                Some((at, b)) if at == i => b,
                _ => &data[range.clone()],
            })
    }

    /// The arguments that own an allocation of their own, which a server may
    /// keep as they are (at most one): every other argument is a slice of a
    /// buffer that holds the whole request, which a value kept must not pin.
    pub fn owned(&self) -> &[Bytes] {
        self.big.as_slice()
    }

    /// The bytes of its arguments (what Redis's `argv-mem` counts), framing
    /// not included.
    pub fn size(&self) -> usize {
        self.data + self.big.as_ref().map_or(0, Bytes::len)
    }

    /// How many bytes at the front of the read buffer are the request's.
    pub fn wire_len(&self) -> usize {
        self.wire
    }

    /// How many of [`size`](Self::size)'s bytes lie in the read buffer: a
    /// multibulk's arguments but a big one gathered apart; none of an inline
    /// request's, whose words were copied out. A server counting the read
    /// buffer as query buffer and the arguments apart subtracts these, and
    /// these only: the framing around them is still input it holds.
    pub fn data_in_buffer(&self) -> usize {
        if self.words.is_some() {
            0
        } else {
            self.data
        }
    }

    /// Heap bytes kept from one request to the next: the argument table, once a
    /// request had more arguments than it holds in place.
    pub fn scratch_bytes(&self) -> usize {
        if self.ranges.spilled() {
            self.ranges.capacity() * std::mem::size_of::<Range<usize>>()
        } else {
            0
        }
    }

    /// Takes the request's bytes off the front of `buf`, the buffer it was
    /// decoded from, and forgets it; keeps the argument table's room, unless
    /// one huge request grew it.
    pub fn consume(&mut self, buf: &mut BytesMut) {
        buf.advance(self.wire);
        self.wire = 0;
        self.data = 0;
        self.ranges.clear();
        self.words = None;
        self.big = None;
        if self.ranges.capacity() > 4 * MAX_PREALLOC {
            self.ranges.shrink_to_fit();
        }
    }
}

/// Parses one request from the front of `buf`, from scratch.
///
/// Returns `Ok(Some((args, consumed)))` for a complete request, where `args` is empty
/// for an empty request (`*0`, a negative count, a blank line) that a server skips, and
/// `Ok(None)` when `buf` holds only part of a request. The arguments are copies;
/// a server should use [`RequestDecoder`], which agrees with this function on every
/// input however it is split, but does not rescan or copy.
///
/// # Errors
///
/// A [`ProtocolError`] when the bytes are not a valid request or break a limit.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(Vec<Bytes>, usize)>, ProtocolError> {
    let mut progress = Progress::default();
    Ok(match progress.parse(buf, limits)? {
        Parsed::Incomplete => None,
        Parsed::Multibulk { len } => {
            let args = progress
                .args
                .iter()
                .map(|r| Bytes::copy_from_slice(&buf[r.clone()]))
                .collect();
            Some((args, len))
        }
        Parsed::Inline { len, args } => Some((args.into_iter().map(Bytes::from).collect(), len)),
    })
}

/// What one step of parsing found.
enum Parsed {
    Incomplete,
    /// A multibulk request of `len` bytes; its arguments are `Progress::args` (none
    /// for `*0` and negative counts).
    Multibulk {
        len: usize,
    },
    /// An inline request of `len` bytes, newline included; no words for a blank line.
    Inline {
        len: usize,
        args: Vec<Vec<u8>>,
    },
}

/// How far into the request at the front of the buffer parsing has got. All offsets
/// are from the start of that request.
#[derive(Debug, Default)]
struct Progress {
    /// First byte not yet parsed.
    pos: usize,
    /// The line being read has been searched for its terminator up to here.
    scanned: usize,
    /// The argument count, once the `*<n>` line has been read.
    count: Option<usize>,
    /// The length of the bulk whose `$<len>` line has been read; its data is at `pos`.
    bulk_len: Option<usize>,
    /// Where each argument read so far lies: in place for a request of a few
    /// arguments (most are), so the decoder allocates nothing for them.
    args: SmallVec<[Range<usize>; INLINE_ARGS]>,
    /// The bytes of those arguments' data, but a big one's gathered apart.
    data: usize,
}

impl Progress {
    fn reset(&mut self) {
        self.pos = 0;
        self.scanned = 0;
        self.count = None;
        self.bulk_len = None;
        self.args.clear();
        self.data = 0;
        // One huge request must not pin its argument table for the connection's life.
        if self.args.capacity() > 4 * MAX_PREALLOC {
            self.args.shrink_to_fit();
        }
    }

    fn parse(&mut self, buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        match buf.first() {
            None => Ok(Parsed::Incomplete),
            Some(b'*') => self.multibulk(buf, limits),
            Some(_) => self.inline(buf, limits),
        }
    }

    fn multibulk(&mut self, buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        let count = match self.count {
            Some(count) => count,
            None => {
                let (number, len) = match short_header(buf, b'*') {
                    Some((n, len)) => (Some(n as i64), len),
                    None => {
                        let too_big = "too big mbulk count string";
                        let Some(cr) =
                            find_cr(buf, 0, &mut self.scanned, MAX_HEADER_LINE, too_big)?
                        else {
                            return Ok(Parsed::Incomplete);
                        };
                        (header_number(buf, 0, cr), cr + 2)
                    }
                };
                let count = match number {
                    // Redis skips every count <= 0 as an empty request, and clients
                    // (and the upstream test suite) rely on the connection staying up.
                    Some(n) if n <= 0 => return Ok(Parsed::Multibulk { len }),
                    Some(n) => usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= limits.max_multibulk_len),
                    None => None,
                };
                let count = count.ok_or_else(|| ProtocolError::new("invalid multibulk length"))?;
                if limits.unauthenticated && count > UNAUTHENTICATED_MAX_ARGS {
                    return Err(ProtocolError::new("unauthenticated multibulk length"));
                }
                self.count = Some(count);
                self.pos = len;
                self.scanned = len;
                self.args.reserve_exact(count.min(MAX_PREALLOC));
                count
            }
        };
        // The data of a bulk under way is no argument's: room is made for the
        // arguments the bytes after it can hold.
        let after = match self.bulk_len {
            Some(len) => self.pos.saturating_add(len).saturating_add(2),
            None => self.pos,
        };
        self.make_room(count, buf.len().saturating_sub(after));
        loop {
            if self.bulk_len.is_none() {
                self.short_arguments(buf, count, limits);
            }
            if self.args.len() >= count {
                break;
            }
            let len = match self.bulk_len {
                Some(len) => len,
                None => match self.bulk_header(buf, limits)? {
                    Some(len) => len,
                    None => return Ok(Parsed::Incomplete),
                },
            };
            let end = self.pos.saturating_add(len);
            let Some(crlf) = buf.get(end..end.saturating_add(2)) else {
                return Ok(Parsed::Incomplete);
            };
            if crlf != b"\r\n" {
                return Err(ProtocolError::new("expected CRLF after bulk data"));
            }
            self.args.push(self.pos..end);
            self.data += len;
            self.pos = end + 2;
            self.scanned = self.pos;
            self.bulk_len = None;
        }
        Ok(Parsed::Multibulk { len: self.pos })
    }

    /// Takes every complete argument with a one- or two-digit header (`$6\r\n`)
    /// from `pos` on, keeping the position in a register rather than the state
    /// a resumable parse needs: the ids of a SADD or a batch check, and the
    /// command and key of most requests (callgrind: 77 → 50 instructions an
    /// argument of a 20,000-id SADD, 324 → 291 a pipelined GET). It stops,
    /// consuming nothing of it, at the first argument it cannot take whole (a
    /// longer header, data not all here, a malformed one), which the general
    /// loop then reads, reporting what is wrong with it as it always has, before
    /// handing the arguments after it back to this one.
    #[inline]
    fn short_arguments(&mut self, buf: &[u8], count: usize, limits: &Limits) {
        let start_pos = self.pos;
        let (mut pos, mut data) = (start_pos, self.data);
        let taken = std::iter::from_fn(|| {
            let (len, header) = buf.get(pos..).and_then(|b| short_header(b, b'$'))?;
            if len > limits.max_bulk_len {
                return None;
            }
            let start = pos + header;
            let end = start + len;
            if buf.get(end..end + 2) != Some(b"\r\n") {
                return None;
            }
            data += len;
            pos = end + 2;
            Some(start..end)
        });
        // Through `extend`, which writes into the room `make_room` made without
        // asking at each argument whether the list has left its inline storage,
        // as a `push` does (callgrind: a fifth of a SADD's decoding).
        self.args.extend(taken.take(count - self.args.len()));
        self.data = data;
        // Only when it took something: `scanned` may be far into a long header
        // line the general loop is still waiting to see the end of, and searching
        // it again from its start on every read would make a header trickling in
        // a byte at a time cost the square of its length.
        if pos != start_pos {
            self.pos = pos;
            self.scanned = pos;
        }
    }

    /// Makes room for the places of the arguments `unparsed` buffered bytes can
    /// hold (an argument takes at least 6: `$0` and two CRLFs), `count` in all
    /// being announced, once a read rather than a check a place: a request that
    /// has arrived is placed in a few allocations, not by doubling from 1,024.
    /// A growth at least doubles the room, so a request that trickles in (or a
    /// long header line whose bytes are counted again each read) is still
    /// placed in amortised constant time; and at most quadruples it, since those
    /// bytes may be one big argument's data rather than many small ones. The
    /// places kept stay within what the bytes decoded at once could hold, never
    /// in proportion to the count alone.
    #[inline]
    fn make_room(&mut self, count: usize, unparsed: usize) {
        let (have, room) = (self.args.len(), self.args.capacity());
        let want = (count - have).min(unparsed / 6 + 1);
        if room - have < want {
            // Each term is past `room`: have + want by the test, and count
            // because count - have >= want.
            let target = (have + want)
                .max(2 * room)
                .min(4 * room.max(MAX_PREALLOC))
                .min(count);
            self.args.reserve_exact(target - have);
        }
    }

    /// Reads the `$<len>` header at `pos` and moves `pos` past it; `None` while the
    /// header is incomplete.
    fn bulk_header(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
        let start = self.pos;
        let (len, end) = match buf.get(start..).and_then(|b| short_header(b, b'$')) {
            Some((len, header)) => (Some(len), start + header),
            None => {
                let Some(&kind) = buf.get(start) else {
                    return Ok(None);
                };
                if kind != b'$' {
                    return Err(ProtocolError(format!(
                        "expected '$', got '{}'",
                        kind.escape_ascii()
                    )));
                }
                let too_big = "too big bulk count string";
                let Some(cr) = find_cr(buf, start, &mut self.scanned, MAX_HEADER_LINE, too_big)?
                else {
                    return Ok(None);
                };
                let len = header_number(buf, start, cr).and_then(|n| usize::try_from(n).ok());
                (len, cr + 2)
            }
        };
        let len = len
            .filter(|&n| n <= limits.max_bulk_len)
            .ok_or_else(|| ProtocolError::new("invalid bulk length"))?;
        if limits.unauthenticated && len > UNAUTHENTICATED_MAX_BULK {
            return Err(ProtocolError::new("unauthenticated bulk length"));
        }
        self.pos = end;
        self.bulk_len = Some(len);
        Ok(Some(len))
    }

    fn inline(&mut self, buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        let max = limits.max_inline_len;
        // A line within the limit has its LF at index max + 1 at the latest.
        let cap = max.saturating_add(2);
        let window = &buf[..buf.len().min(cap)];
        let from = self.scanned.min(window.len());
        let too_big = || ProtocolError::new("too big inline request");
        let Some(lf) = window[from..].iter().position(|&b| b == b'\n') else {
            if window.len() == cap {
                return Err(too_big());
            }
            self.scanned = buf.len();
            return Ok(Parsed::Incomplete);
        };
        let lf = from + lf;
        let end = if lf > 0 && buf[lf - 1] == b'\r' {
            lf - 1
        } else {
            lf
        };
        if end > max {
            return Err(too_big());
        }
        let args = split_args(&buf[..end])
            .ok_or_else(|| ProtocolError::new("unbalanced quotes in request"))?;
        Ok(Parsed::Inline { len: lf + 1, args })
    }
}

/// The number and header size of a `kind` header (`$` bulk, `*` multibulk) of one or
/// two digits in canonical form (`$7\r\n`, `*3\r\n`, `$42\r\n`) at the front of
/// `buf`: what nearly every request and every argument of a command over ids or
/// short keys starts with, read without a search. Anything else, a header still
/// incomplete included, is `None` and takes the general path, which accepts and
/// refuses exactly as before.
#[inline]
fn short_header(buf: &[u8], kind: u8) -> Option<(usize, usize)> {
    let digit = |b: u8| b.wrapping_sub(b'0') < 10;
    match *buf {
        [k, d, b'\r', b'\n', ..] if k == kind && digit(d) => Some((usize::from(d - b'0'), 4)),
        [k, d1, d2, b'\r', b'\n', ..] if k == kind && d1 != b'0' && digit(d1) && digit(d2) => {
            Some((usize::from(d1 - b'0') * 10 + usize::from(d2 - b'0'), 5))
        }
        _ => None,
    }
}

/// Finds the CR ending the header line that starts at `start`, searching only bytes
/// not searched before. `Ok(Some(cr))` once the CR and the byte after it are in
/// `buf`; `Ok(None)` until then. The line, type byte included, may be at most `max`
/// bytes long, or the error is `too_big`.
pub(super) fn find_cr(
    buf: &[u8],
    start: usize,
    scanned: &mut usize,
    max: usize,
    too_big: &str,
) -> Result<Option<usize>, ProtocolError> {
    // The CR of a line within the limit is at `start + max` at the latest.
    let cap = start.saturating_add(max).saturating_add(1);
    let window = &buf[..buf.len().min(cap)];
    let from = (*scanned).clamp(start, window.len());
    match window[from..].iter().position(|&b| b == b'\r') {
        Some(i) => {
            let cr = from + i;
            *scanned = cr;
            Ok((cr + 1 < buf.len()).then_some(cr))
        }
        None if window.len() == cap => Err(ProtocolError::new(too_big)),
        None => {
            *scanned = buf.len();
            Ok(None)
        }
    }
}

/// The number on the header line `buf[start..cr]` (after its type byte), if the line
/// is CRLF-terminated and the number valid.
fn header_number(buf: &[u8], start: usize, cr: usize) -> Option<i64> {
    if buf[cr + 1] != b'\n' {
        return None;
    }
    parse_strict_i64(&buf[start + 1..cr])
}

/// Parses a decimal `i64` by the rules of Redis's `string2ll`: an optional `-`, then
/// digits without leading zeros (`0` alone excepted, `-0` refused); no `+`, no
/// spaces, and the value must fit.
pub fn parse_strict_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    // Up to 18 digits cannot overflow: the common case (every length and count)
    // skips the overflow checks.
    if digits.len() <= 18 {
        let mut value: i64 = 0;
        for &b in digits {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            value = value * 10 + i64::from(d);
        }
        return Some(if negative { -value } else { value });
    }
    // Accumulate downwards so that i64::MIN, which has no positive twin, parses.
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// C's `isspace`: what separates inline arguments.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(b: Option<&u8>) -> Option<u8> {
    char::from(*b?).to_digit(16).map(|d| d as u8)
}

/// Splits an inline command line into words as Redis's `sdssplitargs` does; `None`
/// for unbalanced quotes, or a closing quote followed by something other than
/// whitespace. Redis reads config files with the same rules.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while line.get(i).is_some_and(|&b| is_c_space(b)) {
            i += 1;
        }
        if i == line.len() {
            return Some(args);
        }
        let mut word = Vec::new();
        let mut quote = None;
        loop {
            let at = line.get(i).copied();
            match (quote, at) {
                (Some(_), None) => return None,
                (Some(q), Some(b)) if b == q => {
                    if line.get(i + 1).is_some_and(|&next| !is_c_space(next)) {
                        return None;
                    }
                    i += 1;
                    break;
                }
                (Some(b'"'), Some(b'\\')) => {
                    if line.get(i + 1) == Some(&b'x') {
                        if let (Some(hi), Some(lo)) =
                            (hex_value(line.get(i + 2)), hex_value(line.get(i + 3)))
                        {
                            word.push(hi << 4 | lo);
                            i += 4;
                            continue;
                        }
                    }
                    match line.get(i + 1) {
                        Some(&escaped) => {
                            word.push(match escaped {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 0x08,
                                b'a' => 0x07,
                                other => other,
                            });
                            i += 2;
                        }
                        // A trailing backslash is kept; the quote is then unbalanced.
                        None => {
                            word.push(b'\\');
                            i += 1;
                        }
                    }
                }
                (Some(b'\''), Some(b'\\')) if line.get(i + 1) == Some(&b'\'') => {
                    word.push(b'\'');
                    i += 2;
                }
                (Some(_), Some(b)) => {
                    word.push(b);
                    i += 1;
                }
                // Unquoted words end at these four only: `\v` and `\f` are skipped
                // between words but belong to a word, as in sdssplitargs.
                (None, None | Some(b' ' | b'\n' | b'\r' | b'\t')) => break,
                (None, Some(q @ (b'"' | b'\''))) => {
                    quote = Some(q);
                    i += 1;
                }
                (None, Some(b)) => {
                    word.push(b);
                    i += 1;
                }
            }
        }
        args.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Requests = Vec<Vec<Vec<u8>>>;

    /// Feeds `chunks` one after the other to a decoder, collecting every request;
    /// returns the requests, then the bytes left over, or the first error.
    fn feed(chunks: &[&[u8]], limits: Limits) -> Result<(Requests, Vec<u8>), ProtocolError> {
        let mut decoder = RequestDecoder::new(limits);
        let mut buf = BytesMut::new();
        let mut args = Vec::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while decoder.decode(&mut buf, &mut args)? {
                out.push(args.iter().map(|a| a.to_vec()).collect());
            }
        }
        Ok((out, buf.to_vec()))
    }

    /// What repeated one-shot parsing makes of `input`, skipping empty requests.
    fn one_shot(input: &[u8], limits: Limits) -> Result<(Requests, Vec<u8>), ProtocolError> {
        let mut out = Vec::new();
        let mut rest = input;
        while let Some((args, n)) = parse_request(rest, &limits)? {
            if !args.is_empty() {
                out.push(args.iter().map(|a| a.to_vec()).collect());
            }
            rest = &rest[n..];
        }
        Ok((out, rest.to_vec()))
    }

    /// The result of decoding `input` whole, after checking that every split into
    /// two reads, byte-at-a-time reads, and one-shot parsing all agree with it.
    fn decode_every_split(input: &[u8], limits: Limits) -> Result<Requests, ProtocolError> {
        let whole = feed(&[input], limits);
        for split in 0..=input.len() {
            let (a, b) = input.split_at(split);
            assert_eq!(feed(&[a, b], limits), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(feed(&bytes, limits), whole, "byte at a time");
        assert_eq!(one_shot(input, limits), whole, "one-shot");
        whole.map(|(requests, _)| requests)
    }

    fn ok(input: &[u8]) -> Requests {
        decode_every_split(input, Limits::default()).unwrap()
    }

    fn err(input: &[u8], limits: Limits) -> String {
        decode_every_split(input, limits).unwrap_err().to_string()
    }

    fn words(list: &[&[&[u8]]]) -> Requests {
        list.iter()
            .map(|r| r.iter().map(|a| a.to_vec()).collect())
            .collect()
    }

    #[test]
    fn multibulk() {
        assert_eq!(ok(b"*1\r\n$4\r\nPING\r\n"), words(&[&[b"PING"]]));
        assert_eq!(
            ok(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n"),
            words(&[&[b"SET", b"k", b""], &[b"PING"]])
        );
        // Binary data, CRLF included, is opaque.
        assert_eq!(
            ok(b"*2\r\n$3\r\nGET\r\n$4\r\n\r\n\0*\r\n"),
            words(&[&[b"GET", b"\r\n\0*"]])
        );
    }

    #[test]
    fn empty_requests_are_skipped() {
        assert_eq!(
            ok(b"*0\r\n*-1\r\n*-10\r\n\r\n\n  \t\r\n*1\r\n$1\r\nx\r\n"),
            words(&[&[b"x"]])
        );
        let (requests, rest) = feed(&[b"*0\r\n\r\n"], Limits::default()).unwrap();
        assert!(requests.is_empty());
        assert!(rest.is_empty(), "skipped requests are consumed");
    }

    #[test]
    fn incomplete_consumes_nothing() {
        let (requests, rest) = feed(&[b"*2\r\n$3\r\nGET\r\n$1"], Limits::default()).unwrap();
        assert!(requests.is_empty());
        assert_eq!(rest, b"*2\r\n$3\r\nGET\r\n$1");
        assert_eq!(
            parse_request(b"*2\r\n$3\r\nGET\r\n", &Limits::default()),
            Ok(None)
        );
    }

    #[test]
    fn inline() {
        assert_eq!(ok(b"PING\r\n"), words(&[&[b"PING"]]));
        assert_eq!(ok(b"set  a\tb\n"), words(&[&[b"set", b"a", b"b"]]));
        assert_eq!(
            ok(b"SET k \"a b\\n\\x41\\x4g\\\"\" 'it\\'s' x\"y z\"\r\n"),
            words(&[&[b"SET", b"k", b"a b\nAx4g\"", b"it's", b"xy z"]])
        );
        assert_eq!(ok(b"\"\" ''\r\n"), words(&[&[b"", b""]]));
        assert_eq!(ok(b"a\x0bb \x0c c\r\n"), words(&[&[b"a\x0bb", b"c"]]));
        // Only one CR before the LF belongs to the terminator; others separate.
        assert_eq!(ok(b"a\rb\r\r\n"), words(&[&[b"a", b"b"]]));
        // An inline request followed by a multibulk one.
        assert_eq!(
            ok(b"PING\n*1\r\n$4\r\nPING\r\n"),
            words(&[&[b"PING"], &[b"PING"]])
        );
    }

    #[test]
    fn split_args_like_sdssplitargs() {
        let split = |s: &[u8]| split_args(s);
        assert_eq!(split(b""), Some(vec![]));
        assert_eq!(
            split(b"\"\\a\\b\\t\\r\\q\\\\\""),
            Some(vec![b"\x07\x08\t\rq\\".to_vec()])
        );
        assert_eq!(split(b"'a\\nb'"), Some(vec![b"a\\nb".to_vec()]));
        assert_eq!(split(b"\"abc"), None);
        assert_eq!(split(b"'abc"), None);
        assert_eq!(split(b"\"abc\"x"), None);
        assert_eq!(split(b"'abc'x"), None);
        assert_eq!(split(b"\"abc\\\""), None);
        assert_eq!(split(b"\"abc\\"), None);
        assert_eq!(split(b"\"a\"\x0c"), Some(vec![b"a".to_vec()]));
    }

    #[test]
    fn errors_have_redis_texts() {
        let limits = Limits::default();
        let e = |input: &[u8]| err(input, limits);
        assert_eq!(e(b"*x\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*+1\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*1\rx"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*1\r\n$x\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(e(b"*1\r\n$-1\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(e(b"*1\r\n$01\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(e(b"*1\r\n:1\r\n"), "Protocol error: expected '$', got ':'");
        assert_eq!(
            e(b"*2\r\n$1\r\na\r\n\r\n"),
            "Protocol error: expected '$', got '\\r'"
        );
        assert_eq!(
            e(b"*1\r\n$1\r\nab\r\n"),
            "Protocol error: expected CRLF after bulk data"
        );
        assert_eq!(
            e(b"\"abc\r\n"),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            e(b"a 'b'c\r\n"),
            "Protocol error: unbalanced quotes in request"
        );
    }

    #[test]
    fn unauthenticated_clients_get_redis_7_limits() {
        let limits = Limits {
            unauthenticated: true,
            ..Limits::default()
        };
        let e = |input: &[u8]| parse_request(input, &limits).unwrap_err().to_string();
        let ok = |input: &[u8]| parse_request(input, &limits).unwrap().is_some();
        // Ten arguments and 16 KB bulks pass; one more of either is refused at
        // its header, before the data arrives.
        assert!(ok(&b"*10\r\n"
            .iter()
            .chain(b"$1\r\nx\r\n".repeat(10).iter())
            .copied()
            .collect::<Vec<_>>()));
        assert_eq!(
            e(b"*11\r\n"),
            "Protocol error: unauthenticated multibulk length"
        );
        let mut big = b"*2\r\n$4\r\nAUTH\r\n$16384\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'p', 16384));
        big.extend(b"\r\n");
        assert!(ok(&big));
        assert_eq!(
            e(b"*2\r\n$3\r\nSET\r\n$16385\r\n"),
            "Protocol error: unauthenticated bulk length"
        );
        // The protocol's own limits still come first.
        assert_eq!(e(b"*-0\r\n"), "Protocol error: invalid multibulk length");
    }

    #[test]
    fn limits_are_checked_before_the_data_arrives() {
        let limits = Limits {
            max_bulk_len: 10,
            max_multibulk_len: 3,
            max_inline_len: 8,
            ..Limits::default()
        };
        let e = |input: &[u8]| err(input, limits);
        assert_eq!(e(b"*4\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*1\r\n$11\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            e(b"123456789\r\n"),
            "Protocol error: too big inline request"
        );
        assert_eq!(e(b"123456789\r"), "Protocol error: too big inline request");
        assert_eq!(
            decode_every_split(b"123456789", limits),
            Ok(vec![]),
            "might be 8 + CR"
        );
        assert_eq!(
            decode_every_split(b"12345678\r\n", limits).unwrap().len(),
            1
        );
        assert_eq!(
            decode_every_split(b"*3\r\n$10\r\n0123456789\r\n", limits),
            Ok(vec![])
        );

        let huge = b"*1\r\n$999999999999\r\n";
        assert_eq!(e(huge), "Protocol error: invalid bulk length");
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&huge[..]);
        assert!(decoder.decode(&mut buf, &mut Vec::new()).is_err());
        assert!(
            buf.capacity() < 1024,
            "nothing reserved for the announced data"
        );
    }

    #[test]
    fn header_lines_are_bounded() {
        let mut long = b"*".to_vec();
        long.resize(MAX_HEADER_LINE + 1, b'1');
        let e = |input: &[u8]| feed(&[input], Limits::default()).unwrap_err().to_string();
        assert_eq!(e(&long), "Protocol error: too big mbulk count string");
        long.extend_from_slice(b"\r\n");
        assert_eq!(e(&long), "Protocol error: too big mbulk count string");
        let mut long = b"*1\r\n$".to_vec();
        long.resize(MAX_HEADER_LINE + 5, b'1');
        assert_eq!(e(&long), "Protocol error: too big bulk count string");
        // Just within the limit, the line is read and its number judged.
        let mut fits = b"*".to_vec();
        fits.resize(MAX_HEADER_LINE, b'1');
        fits.extend_from_slice(b"\r\n");
        assert_eq!(e(&fits), "Protocol error: invalid multibulk length");
    }

    #[test]
    fn arguments_are_slices_of_one_buffer() {
        let mut decoder = RequestDecoder::default();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"[..]);
        let mut args = Vec::new();
        assert!(decoder.decode(&mut buf, &mut args).unwrap());
        // "GET\r\n$3\r\n" lies between the two arguments.
        assert_eq!(
            args[1].as_ptr() as usize - args[0].as_ptr() as usize,
            3 + 2 + 4
        );
    }

    #[test]
    fn resumes_where_it_stopped() {
        let n = 20_000;
        let mut input = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            let arg = i.to_string();
            input.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        let mut decoder = RequestDecoder::default();
        let mut buf = BytesMut::new();
        let mut args = Vec::new();
        let half = input.len() / 2;
        buf.extend_from_slice(&input[..half]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        let parsed = decoder.progress.args.len();
        assert!(parsed > n / 3, "arguments parsed so far are remembered");
        assert_eq!(buf.len(), half);
        for chunk in input[half..].chunks(7) {
            assert!(args.is_empty());
            buf.extend_from_slice(chunk);
            decoder.decode(&mut buf, &mut args).unwrap();
        }
        assert_eq!(args.len(), n);
        assert_eq!(args[n - 1], (n - 1).to_string());
        assert!(buf.is_empty());
        assert!(decoder.progress.args.capacity() <= MAX_PREALLOC);
    }

    #[test]
    fn bytes_wanted_is_the_rest_of_the_bulk_under_way() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$100"[..]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        // The second argument's header is not complete: one more argument at the
        // average of those so far (13 bytes, the count's line included), and a
        // quarter.
        assert_eq!(decoder.bytes_wanted(buf.len()), 13 + 13 + 3 - buf.len());
        buf.extend_from_slice(b"\r\nabc");
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        // 100 bytes and the CRLF, three of them here.
        assert_eq!(decoder.bytes_wanted(buf.len()), 99);
        buf.extend_from_slice(&[b'x'; 97]);
        buf.extend_from_slice(b"\r\n");
        assert!(decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(decoder.bytes_wanted(buf.len()), 0);
    }

    #[test]
    fn bytes_wanted_estimates_the_arguments_still_to_come() {
        let n = 20_000;
        let mut input = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            let arg = format!("{:06}", 100_000 + i);
            input.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        let mut decoder = RequestDecoder::default();
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&input[..16 * 1024]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        let wanted = decoder.bytes_wanted(buf.len());
        let rest = input.len() - buf.len();
        // Every argument is 14 bytes: the estimate is the rest and a quarter,
        // give or take the count's line spread over the arguments read so far.
        assert!(
            wanted >= rest + rest / 4 && wanted <= rest + rest / 4 + rest / 100,
            "{wanted} for {rest}"
        );
        // Once the whole request is buffered its places are made with one copy.
        buf.extend_from_slice(&input[16 * 1024..]);
        assert!(decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(args.len(), n);
    }

    #[test]
    fn a_header_arriving_a_byte_at_a_time_is_searched_once() {
        let mut decoder = RequestDecoder::default();
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&b"*1\r\n$"[..]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        for _ in 0..100 {
            buf.extend_from_slice(b"1");
            assert!(!decoder.decode(&mut buf, &mut args).unwrap());
            // Searched up to the end, and not again from the header's start.
            assert_eq!(decoder.progress.scanned, buf.len());
        }
    }

    #[test]
    fn the_data_of_a_big_argument_makes_no_argument_places() {
        let mut decoder = RequestDecoder::default();
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&b"*1000000\r\n$1\r\na\r\n$600000\r\n"[..]);
        buf.extend_from_slice(&vec![b'x'; 600_000]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(decoder.progress.args.len(), 1);
        assert!(decoder.progress.args.capacity() <= 4 * MAX_PREALLOC);
    }

    #[test]
    fn a_long_header_line_arriving_slowly_grows_the_places_geometrically() {
        let mut decoder = RequestDecoder::default();
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&b"*100000\r\n$1\r\na\r\n$"[..]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        let mut growths = 0;
        let mut room = decoder.progress.args.capacity();
        for _ in 0..20_000 {
            buf.extend_from_slice(b"1");
            assert!(!decoder.decode(&mut buf, &mut args).unwrap());
            if decoder.progress.args.capacity() != room {
                room = decoder.progress.args.capacity();
                growths += 1;
            }
        }
        assert!(growths <= 4, "{growths} growths, room for {room}");
    }

    #[test]
    fn the_announced_count_is_read_from_a_complete_line() {
        let d = RequestDecoder::default();
        assert_eq!(d.args_announced(b"*70000\r\n$3"), 70_000);
        assert_eq!(d.args_announced(b"*2\r\n"), 2);
        for partial in [
            &b"*70000"[..],
            b"*70000\r",
            b"PING\r\n",
            b"",
            b"*-1\r\n",
            b"*x\r\n",
        ] {
            assert_eq!(d.args_announced(partial), 0, "{}", partial.escape_ascii());
        }
    }

    #[test]
    fn before_auth_only_the_known_rest_is_wanted() {
        let limits = Limits {
            unauthenticated: true,
            ..Limits::default()
        };
        let mut decoder = RequestDecoder::new(limits);
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&b"*10\r\n$3\r\nSET\r\n$3"[..]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(decoder.bytes_wanted(buf.len()), 0);
    }

    #[test]
    fn argument_places_follow_the_bytes_not_the_count() {
        // A count of a million and three small arguments: room for what arrived.
        let mut decoder = RequestDecoder::default();
        let mut args = Vec::new();
        let mut buf = BytesMut::from(&b"*1000000\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"[..]);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(decoder.progress.args.len(), 3);
        assert!(decoder.progress.args.capacity() <= MAX_PREALLOC);
        // 60,000 more, arriving at once: never more places than the bytes could
        // hold.
        let more: Vec<u8> = b"$1\r\nx\r\n".repeat(60_000);
        buf.extend_from_slice(&more);
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(decoder.progress.args.len(), 60_003);
        assert!(decoder.progress.args.capacity() <= 60_003 + more.len() / 6 + MAX_PREALLOC);
    }

    #[test]
    fn strict_integers() {
        let p = |s: &[u8]| parse_strict_i64(s);
        assert_eq!(p(b"0"), Some(0));
        assert_eq!(p(b"-1"), Some(-1));
        assert_eq!(p(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(p(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1x",
            b"9223372036854775808",
            b"-9223372036854775809",
        ] {
            assert_eq!(p(bad), None, "{}", bad.escape_ascii());
        }
        // Both sides of the 18-digit fast path, against the standard parser.
        for n in [
            999_999_999_999_999_999i64,
            -999_999_999_999_999_999,
            1_000_000_000_000_000_000,
            -1_000_000_000_000_000_000,
            123_456_789_012_345_678,
        ] {
            assert_eq!(p(n.to_string().as_bytes()), Some(n));
        }
        assert_eq!(p(b"12345678901234567x"), None);
        assert_eq!(p(b"1234567890123456789x"), None);
    }

    /// Feeds `chunks` the way a server does: while the decoder offers a big
    /// argument's buffer, bytes go there (as much as it has room for), the rest
    /// to the read buffer. Returns the requests with their arguments as decoded.
    fn feed_reading_big(chunks: &[&[u8]]) -> Vec<Vec<Bytes>> {
        let mut decoder = RequestDecoder::new(Limits::default());
        let (mut buf, mut args, mut out) = (BytesMut::new(), Vec::new(), Vec::new());
        for &chunk in chunks {
            let mut rest = chunk;
            while !rest.is_empty() {
                match decoder.big_buffer() {
                    Some(big) => {
                        let n = rest.len().min(big.capacity() - big.len());
                        big.extend_from_slice(&rest[..n]);
                        rest = &rest[n..];
                    }
                    None => {
                        buf.extend_from_slice(rest);
                        rest = &[];
                    }
                }
                while decoder.decode(&mut buf, &mut args).unwrap() {
                    out.push(std::mem::take(&mut args));
                }
            }
        }
        assert!(buf.is_empty() && decoder.big_buffer().is_none());
        out
    }

    /// Every argument of `BIG_ARG` bytes or more is the only reference to an
    /// allocation at most two bytes larger than itself.
    fn assert_big_args_own_their_bytes(requests: Vec<Vec<Bytes>>) {
        for arg in requests.into_iter().flatten() {
            if arg.len() >= BIG_ARG {
                let len = arg.len();
                let owned = arg.try_into_mut().expect("a big argument is unique");
                assert!(
                    owned.capacity() <= len + 2,
                    "{} for {len}",
                    owned.capacity()
                );
            }
        }
    }

    #[test]
    fn big_arguments_come_in_buffers_of_their_own() {
        let pattern = |n: usize| (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
        let (big1, big2) = (pattern(BIG_ARG), pattern(3 * BIG_ARG + 7));
        let mut input = Vec::new();
        for (key, value) in [(&b"k1"[..], &big1), (b"k2", &big2)] {
            input.extend_from_slice(format!("*5\r\n$3\r\nSET\r\n${}\r\n", key.len()).as_bytes());
            input.extend_from_slice(key);
            input.extend_from_slice(format!("\r\n${}\r\n", value.len()).as_bytes());
            input.extend_from_slice(value);
            input.extend_from_slice(b"\r\n$2\r\nEX\r\n$2\r\n10\r\n");
        }
        // Two big bulks in one request: the second is read into the read buffer
        // and copied out of it.
        input.extend_from_slice(b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$");
        input.extend_from_slice(format!("{}\r\n", big1.len()).as_bytes());
        input.extend_from_slice(&big1);
        input.extend_from_slice(format!("\r\n$1\r\nb\r\n${}\r\n", big2.len()).as_bytes());
        input.extend_from_slice(&big2);
        input.extend_from_slice(b"\r\nPING\r\n");
        let (want, rest) = one_shot(&input, Limits::default()).unwrap();
        assert!(rest.is_empty());
        assert_eq!(want.len(), 4);
        assert_eq!(want[1][2], big2);
        assert_eq!((&want[2][2], &want[2][4]), (&big1, &big2));

        // Two reads split anywhere near a header, data edge or CRLF, and every
        // 997th byte between; with the decoder's buffer used and not.
        let edges: Vec<usize> = input
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w == b"\r\n")
            .flat_map(|(i, _)| [i.saturating_sub(1), i, i + 1, i + 2, i + 3])
            .chain((0..input.len()).step_by(997))
            .filter(|&i| i <= input.len())
            .collect();
        for split in edges {
            let (a, b) = input.split_at(split);
            let read = feed_reading_big(&[a, b]);
            let got: Requests = read
                .iter()
                .map(|r| r.iter().map(|a| a.to_vec()).collect())
                .collect();
            assert_eq!(got, want, "split at {split}, reading into the big buffer");
            assert_big_args_own_their_bytes(read);
            assert_eq!(
                feed(&[a, b], Limits::default()).unwrap().0,
                want,
                "split at {split}"
            );
        }
        // Reads of a few bytes, and one whole.
        let small: Vec<&[u8]> = input.chunks(7).collect();
        assert_big_args_own_their_bytes(feed_reading_big(&small));
        assert_eq!(feed(&small, Limits::default()).unwrap().0, want);
        assert_big_args_own_their_bytes(feed_reading_big(&[&input]));
    }

    /// A header announcing 500 MB takes a megabyte of buffer, not 500 MB; the
    /// buffer grows as the data comes, geometrically, and ends at its size.
    #[test]
    fn a_big_argument_is_allocated_as_its_data_arrives() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let (mut buf, mut args) = (
            BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$500000000\r\nab"[..]),
            Vec::new(),
        );
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        assert_eq!(decoder.big_buffered(), (2, BIG_ARG_AHEAD - 2));
        let len = 3 * BIG_ARG_AHEAD + 12_345;
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(format!("*1\r\n${len}\r\n").as_bytes());
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        let mut grown = Vec::new();
        while let Some(big) = decoder.big_buffer() {
            grown.push(big.capacity());
            let n = (big.capacity() - big.len()).min(100_000);
            big.extend_from_slice(&vec![b'x'; n]);
        }
        grown.dedup();
        assert_eq!(grown, [BIG_ARG_AHEAD, 2 * BIG_ARG_AHEAD, len + 2]);
        buf.extend_from_slice(b"PING\r\n");
        assert!(
            decoder.decode(&mut buf, &mut args).is_err(),
            "x where the CRLF goes"
        );
    }

    #[test]
    fn a_big_argument_without_its_crlf_is_refused() {
        let mut input = format!("*2\r\n$3\r\nSET\r\n${BIG_ARG}\r\n").into_bytes();
        input.resize(input.len() + BIG_ARG, b'x');
        input.extend_from_slice(b"\n\r");
        for split in [40, input.len() - 1] {
            let (a, b) = input.split_at(split);
            let e = feed(&[a, b], Limits::default()).unwrap_err();
            assert_eq!(
                e.to_string(),
                "Protocol error: expected CRLF after bulk data"
            );
        }
        // The decoder is ready for a new connection's bytes after the error.
        let mut decoder = RequestDecoder::new(Limits::default());
        let (mut buf, mut args) = (BytesMut::from(&input[..40]), Vec::new());
        assert!(!decoder.decode(&mut buf, &mut args).unwrap());
        let (held, room) = decoder.big_buffered();
        assert!(decoder.big_buffer().is_some() && held > 0 && held + room == BIG_ARG + 2);
        buf.extend_from_slice(&input[40..]);
        assert!(decoder.decode(&mut buf, &mut args).is_err());
        assert!(decoder.big_buffer().is_none() && decoder.big_buffered() == (0, 0));
    }

    /// A request stays at the front of the buffer, read in place, until it is
    /// consumed (by the caller, or by the next call); a big argument gathered
    /// apart is the one owned argument; `size` counts the arguments' data.
    #[test]
    fn a_request_is_read_in_place_until_consumed() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut request = Request::default();
        let big = vec![b'v'; BIG_ARG];
        let mut buf = BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\nPING  x\r\n"[..]);
        assert!(decoder.decode_request(&mut buf, &mut request).unwrap());
        let wire = buf.len() - 9;
        assert_eq!(request.wire_len(), wire);
        assert_eq!(
            request.args(&buf).collect::<Vec<_>>(),
            [&b"SET"[..], b"k", b"vv"]
        );
        assert_eq!((request.size(), request.owned().len()), (6, 0));
        let at = request.arg(&buf, 1).as_ptr();
        let k = buf.iter().position(|&b| b == b'k').unwrap();
        assert_eq!(at, buf[k..].as_ptr(), "in place");
        request.consume(&mut buf);
        assert_eq!(&buf[..], b"PING  x\r\n");
        assert!(request.is_empty() && request.size() == 0);

        // Inline, then left for the next call to consume.
        assert!(decoder.decode_request(&mut buf, &mut request).unwrap());
        assert_eq!(request.args(&buf).collect::<Vec<_>>(), [&b"PING"[..], b"x"]);
        assert_eq!(request.size(), 5);
        buf.extend_from_slice(format!("*2\r\n$3\r\nSET\r\n${BIG_ARG}\r\n").as_bytes());
        assert!(!decoder.decode_request(&mut buf, &mut request).unwrap());
        assert!(request.is_empty() && decoder.big_buffer().is_some());
        let gathering = decoder.big_buffer().unwrap();
        gathering.extend_from_slice(&big);
        gathering.extend_from_slice(b"\r\n");
        assert!(decoder.decode_request(&mut buf, &mut request).unwrap());
        assert_eq!(request.size(), 3 + BIG_ARG);
        assert_eq!(request.owned().len(), 1);
        assert_eq!(request.arg(&buf, 1).as_ptr(), request.owned()[0].as_ptr());
        assert_eq!(request.arg(&buf, 1), &big[..]);
        request.consume(&mut buf);
        assert!(buf.is_empty());
    }
}
