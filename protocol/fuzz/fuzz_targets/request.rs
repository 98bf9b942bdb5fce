//! The request decoder over arbitrary bytes, cut into arbitrary reads.
//!
//! Invariants: no panic; a call never consumes more than the buffer holds, and
//! never returns an empty request; the resumable decoder, fed the reads one by one,
//! finds exactly the requests (and the error, if any) that one-shot parsing of the
//! whole stream finds, and leaves the same bytes over (as many, when a big bulk's
//! data is being gathered apart from the buffer).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use relcache_protocol::resp::request::parse_request;
use relcache_protocol::resp::RequestDecoder;
use relcache_protocol_fuzz::split_input;

fuzz_target!(|data: &[u8]| {
    let (limits, stream, parts) = split_input(data);

    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut args = Vec::new();
    let mut chunked = Vec::new();
    let mut chunked_error = None;
    'reads: for part in parts {
        buf.extend_from_slice(part);
        loop {
            let before = buf.len();
            match decoder.decode(&mut buf, &mut args) {
                Ok(true) => {
                    assert!(!args.is_empty(), "empty requests are skipped");
                    assert!(buf.len() < before);
                    chunked.push(args.clone());
                }
                Ok(false) => {
                    assert!(buf.len() <= before);
                    break;
                }
                Err(e) => {
                    chunked_error = Some(e);
                    break 'reads;
                }
            }
        }
    }

    let mut rest = stream;
    let mut whole = Vec::new();
    let mut whole_error = None;
    loop {
        match parse_request(rest, &limits) {
            Ok(Some((request, n))) => {
                assert!(n > 0 && n <= rest.len());
                if !request.is_empty() {
                    whole.push(request);
                }
                rest = &rest[n..];
            }
            Ok(None) => break,
            Err(e) => {
                whole_error = Some(e);
                break;
            }
        }
    }

    assert_eq!(chunked, whole);
    assert_eq!(chunked_error, whole_error);
    if whole_error.is_none() {
        // The data of a big bulk still arriving is held apart from `buf`.
        let (held, _) = decoder.big_buffered();
        if held == 0 {
            assert_eq!(&buf[..], rest);
        } else {
            assert_eq!(buf.len() + held, rest.len());
        }
    }
});
