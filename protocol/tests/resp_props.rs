//! Property tests for the RESP parsers: encode/parse round trips, arbitrary read
//! splits, and arbitrary bytes.

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use relcache_protocol::resp::reply::ReplyDecoder;
use relcache_protocol::resp::request::parse_request;
use relcache_protocol::resp::{
    parse_frame, write_array_header, write_bulk, Frame, Limits, Protocol, ProtocolError, Request,
    RequestDecoder,
};

/// Text for a simple string or error: anything but CR and LF.
fn line_text() -> impl Strategy<Value = Bytes> {
    vec(
        any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'),
        0..12,
    )
    .prop_map(Bytes::from)
}

fn binary(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

/// Any `i64`, and often one of the single digits aggregates write in place.
fn integer() -> impl Strategy<Value = i64> {
    prop_oneof![any::<i64>(), -1i64..=10]
}

/// Leaves that survive RESP2 unchanged.
fn resp2_leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        line_text().prop_map(Frame::Simple),
        line_text().prop_map(Frame::Error),
        integer().prop_map(Frame::Integer),
        binary(40).prop_map(Frame::Bulk),
        Just(Frame::Null),
        Just(Frame::NullArray),
    ]
}

fn resp2_frame() -> impl Strategy<Value = Frame> {
    resp2_leaf().prop_recursive(4, 64, 8, |inner| vec(inner, 0..8).prop_map(Frame::Array))
}

/// Leaves that survive RESP3 unchanged. Not `NullArray`, which RESP3 writes as `_`
/// (read back as `Null`), nor a NaN double, which is equal to nothing.
fn resp3_leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        line_text().prop_map(Frame::Simple),
        line_text().prop_map(Frame::Error),
        integer().prop_map(Frame::Integer),
        binary(40).prop_map(Frame::Bulk),
        Just(Frame::Null),
        any::<f64>()
            .prop_filter("NaN != NaN", |d| !d.is_nan())
            .prop_map(Frame::Double),
        prop_oneof![Just(f64::INFINITY), Just(f64::NEG_INFINITY)].prop_map(Frame::Double),
        any::<bool>().prop_map(Frame::Boolean),
        "-?[0-9]{1,40}".prop_map(|s| Frame::BigNumber(Bytes::from(s))),
        (any::<[u8; 3]>(), binary(20)).prop_map(|(format, text)| Frame::Verbatim { format, text }),
    ]
}

fn resp3_frame() -> impl Strategy<Value = Frame> {
    resp3_leaf().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Frame::Array),
            vec(inner.clone(), 0..8).prop_map(Frame::Set),
            vec(inner.clone(), 0..8).prop_map(Frame::Push),
            vec((inner.clone(), inner), 0..6).prop_map(Frame::Map),
        ]
    })
}

/// Cuts `data` at the given points (taken modulo its length, in order).
fn chunks(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.push(0);
    points.push(data.len());
    points.sort_unstable();
    points
        .windows(2)
        .map(|w| data[w[0]..w[1]].to_vec())
        .collect()
}

/// Decodes the chunks in order with one `ReplyDecoder`; the frames, then the bytes
/// left over, or the first error.
fn decode_replies(parts: &[Vec<u8>]) -> Result<(Vec<Frame>, usize), ProtocolError> {
    let mut decoder = ReplyDecoder::new(Limits::default());
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for part in parts {
        buf.extend_from_slice(part);
        while let Some(frame) = decoder.decode(&mut buf)? {
            frames.push(frame);
        }
    }
    Ok((frames, buf.len()))
}

type Requests = Vec<Vec<Bytes>>;

/// Decodes the chunks in order with one `RequestDecoder` and one `Request`
/// reused, as a server does; the requests, then the bytes left over, or the
/// first error.
fn decode_requests(parts: &[Vec<u8>], limits: Limits) -> Result<(Requests, usize), ProtocolError> {
    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut request = Request::default();
    let mut requests = Vec::new();
    for part in parts {
        buf.extend_from_slice(part);
        let before = buf.len();
        while decoder.decode_request(&mut buf, &mut request)? {
            assert!(!request.is_empty());
            assert_eq!(request.args(&buf).len(), request.len());
            requests.push(request.args(&buf).map(Bytes::copy_from_slice).collect());
            // Consumed now or by the next call: both, on alternate requests.
            if requests.len() % 2 == 0 {
                request.consume(&mut buf);
            }
        }
        assert!(buf.len() <= before);
    }
    request.consume(&mut buf);
    Ok((requests, buf.len()))
}

/// Repeated one-shot parsing of `data`, skipping empty requests.
fn parse_requests(data: &[u8], limits: Limits) -> Result<(Requests, usize), ProtocolError> {
    let mut rest = data;
    let mut requests = Vec::new();
    while let Some((args, n)) = parse_request(rest, &limits)? {
        assert!(n > 0 && n <= rest.len(), "consumed {n} of {}", rest.len());
        if !args.is_empty() {
            requests.push(args);
        }
        rest = &rest[n..];
    }
    Ok((requests, rest.len()))
}

/// One request on the wire: as a multibulk, or as an inline command whose every
/// byte is a `\xHH` escape inside double quotes.
fn encode_request(args: &[Bytes], inline: bool, out: &mut BytesMut) {
    if inline {
        for (i, arg) in args.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b" ");
            }
            out.extend_from_slice(b"\"");
            for b in arg.iter() {
                out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
            }
            out.extend_from_slice(b"\"");
        }
        out.extend_from_slice(b"\r\n");
    } else {
        write_array_header(out, args.len());
        for arg in args {
            write_bulk(out, arg);
        }
    }
}

/// Bytes that look like RESP often enough to get past the first check.
fn resp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\\x4".to_vec()),
        Just(b" ".to_vec()),
        Just(b"-1".to_vec()),
        Just(b"+".to_vec()),
        Just(b"%1\r\n".to_vec()),
        Just(b"|1\r\n".to_vec()),
        Just(b"=5\r\ntxt:".to_vec()),
        (0u32..20).prop_map(|n| n.to_string().into_bytes()),
        vec(any::<u8>(), 0..4),
        Just(b",".to_vec()),
        Just(b"#t".to_vec()),
        Just(b"_".to_vec()),
    ];
    vec(token, 0..40).prop_map(|t| t.concat())
}

fn small_limits() -> Limits {
    Limits {
        max_bulk_len: 16,
        max_multibulk_len: 8,
        max_inline_len: 24,
        max_depth: 3,
        unauthenticated: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn resp3_frames_round_trip(frame in resp3_frame()) {
        let wire = frame.to_bytes(Protocol::Resp3);
        let parsed = parse_frame(&wire, &Limits::default()).unwrap();
        prop_assert_eq!(parsed, Some((frame, wire.len())));
    }

    /// A flat array of integers is, on the wire, the array of `Integer` frames it
    /// stands for, and parses back as that.
    #[test]
    fn flat_integers_encode_as_an_array_of_integers(
        // Runs of one-digit values take the encoder's grouped path.
        values in prop_oneof![vec(0i64..=9, 0..300), vec(integer(), 0..300)]
    ) {
        let array = Frame::Array(values.iter().copied().map(Frame::Integer).collect());
        for proto in [Protocol::Resp2, Protocol::Resp3] {
            let wire = Frame::Integers(values.clone()).to_bytes(proto);
            prop_assert_eq!(&wire, &array.to_bytes(proto));
            let parsed = parse_frame(&wire, &Limits::default()).unwrap();
            prop_assert_eq!(parsed, Some((array.clone(), wire.len())));
        }
    }

    #[test]
    fn resp2_frames_round_trip(frame in resp2_frame()) {
        let wire = frame.to_bytes(Protocol::Resp2);
        let parsed = parse_frame(&wire, &Limits::default()).unwrap();
        prop_assert_eq!(parsed, Some((frame, wire.len())));
    }

    #[test]
    fn reply_streams_survive_any_read_split(
        frames in vec(resp3_frame(), 1..6),
        cuts in vec(any::<usize>(), 0..12),
    ) {
        let mut wire = BytesMut::new();
        for frame in &frames {
            frame.encode(Protocol::Resp3, &mut wire);
        }
        let decoded = decode_replies(&chunks(&wire, &cuts)).unwrap();
        prop_assert_eq!(decoded, (frames, 0));
    }

    #[test]
    fn pipelines_survive_any_read_split(
        // Up to 12 arguments: past what the tables hold in place, so a request
        // of many follows one of few in the same tables, and the other way.
        requests in vec((vec(binary(24), 1..13), any::<bool>()), 1..8),
        empties in vec(any::<bool>(), 8),
        cuts in vec(any::<usize>(), 0..12),
    ) {
        let mut wire = BytesMut::new();
        for (i, (args, inline)) in requests.iter().enumerate() {
            if empties[i] {
                wire.extend_from_slice(if *inline { b"\r\n" } else { b"*0\r\n" });
            }
            encode_request(args, *inline, &mut wire);
        }
        let expected: Requests = requests.into_iter().map(|(args, _)| args).collect();
        let parts = chunks(&wire, &cuts);
        prop_assert_eq!(decode_requests(&parts, Limits::default()), Ok((expected.clone(), 0)));
        prop_assert_eq!(parse_requests(&wire, Limits::default()), Ok((expected, 0)));
    }

    #[test]
    fn request_decoder_agrees_with_one_shot_parsing(
        data in prop_oneof![vec(any::<u8>(), 0..200), resp_like_bytes()],
        cuts in vec(any::<usize>(), 0..12),
        small in any::<bool>(),
    ) {
        let limits = if small { small_limits() } else { Limits::default() };
        let chunked = decode_requests(&chunks(&data, &cuts), limits);
        prop_assert_eq!(&chunked, &parse_requests(&data, limits));
        if let Ok((_, left)) = chunked {
            prop_assert!(left <= data.len());
        }
    }

    #[test]
    fn reply_parser_takes_any_bytes(
        data in prop_oneof![vec(any::<u8>(), 0..200), resp_like_bytes()],
        cuts in vec(any::<usize>(), 0..12),
        small in any::<bool>(),
    ) {
        let limits = if small { small_limits() } else { Limits::default() };
        let whole = parse_frame(&data, &limits);
        if let Ok(Some((frame, n))) = &whole {
            prop_assert!(*n > 0 && *n <= data.len());
            // Whatever was accepted re-encodes to something that parses back to the
            // same encoding. (Comparing encodings, not frames, because NaN is equal
            // to nothing and RESP3 writes NullArray as `_`, read back as Null.)
            let wire = frame.to_bytes(Protocol::Resp3);
            let again = parse_frame(&wire, &Limits::default()).unwrap();
            let again = again.map(|(f, _)| f.to_bytes(Protocol::Resp3));
            prop_assert_eq!(again, Some(wire));
        }
        // The resumable decoder, fed the same bytes in pieces, finds the same first frame.
        let mut decoder = ReplyDecoder::new(limits);
        let mut buf = BytesMut::new();
        let mut first = Ok(None);
        for part in chunks(&data, &cuts) {
            buf.extend_from_slice(&part);
            first = decoder.decode(&mut buf);
            if !matches!(first, Ok(None)) {
                break;
            }
        }
        // Debug text, so that a NaN compares equal to itself.
        let whole_frame = whole.map(|r| r.map(|(f, _)| f));
        prop_assert_eq!(format!("{first:?}"), format!("{whole_frame:?}"));
    }
}
