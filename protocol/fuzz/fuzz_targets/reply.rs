//! The reply parser over arbitrary bytes.
//!
//! Invariants: no panic; a frame consumes at least one byte and no more than the
//! input; an accepted frame, encoded as RESP3 and parsed again, encodes the same
//! (encodings are compared rather than frames because NaN equals nothing and RESP3
//! writes `NullArray` as `_`, read back as `Null`); the resumable decoder, fed the
//! input in arbitrary reads, finds the same first frame or error.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use relcache_protocol::resp::reply::ReplyDecoder;
use relcache_protocol::resp::{parse_frame, Limits, Protocol};
use relcache_protocol_fuzz::split_input;

fuzz_target!(|data: &[u8]| {
    let (limits, stream, parts) = split_input(data);

    let whole = parse_frame(stream, &limits);
    if let Ok(Some((frame, n))) = &whole {
        assert!(*n > 0 && *n <= stream.len());
        let wire = frame.to_bytes(Protocol::Resp3);
        let again = parse_frame(&wire, &Limits::default())
            .expect("an encoded frame parses")
            .expect("an encoded frame is complete");
        assert_eq!(again.1, wire.len());
        assert_eq!(again.0.to_bytes(Protocol::Resp3), wire);
    }

    let mut decoder = ReplyDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut first = Ok(None);
    for part in parts {
        buf.extend_from_slice(part);
        first = decoder.decode(&mut buf);
        if !matches!(first, Ok(None)) {
            break;
        }
    }
    // Debug text, so that a NaN compares equal to itself.
    let whole = whole.map(|r| r.map(|(frame, _)| frame));
    assert_eq!(format!("{first:?}"), format!("{whole:?}"));
});
