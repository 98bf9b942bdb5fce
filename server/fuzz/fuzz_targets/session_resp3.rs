//! A RESP3 session (HELLO 3, with AUTH when a password is set) that then sends the
//! fuzz input as its stream, cut into reads, next to an honest client whose keys
//! were set up first.
//!
//! Input: `[flags][2 × cuts bytes of u16 LE cut points][stream]`; bit 0 of `flags`
//! sets `requirepass`, bit 7 leaves AUTH out of HELLO (the session stays
//! unauthenticated, in RESP2), bits 1–6 are the number of cuts.
//!
//! Invariants: no panic; every read's output is whole, well-formed frames; a framing
//! error is answered `-ERR Protocol error` and closes the session, and nothing else
//! but QUIT, a kill, SHUTDOWN or a smaller query buffer limit closes it; the honest
//! client's keys are unchanged unless the stream itself could have named them (or
//! flushed, reconfigured, killed or shut down), which is checked by parsing the
//! stream independently.
#![no_main]

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use libfuzzer_sys::fuzz_target;
use relcache_protocol::idset::Builder;
use relcache_protocol::resp::request::parse_request;
use relcache_protocol::resp::{Frame, Limits};
use relcache_server_fuzz::{call, check_key, frames, harness, Value};

const PASSWORD: &str = "sesame";

/// Cuts `stream` at the points read from `cut_bytes`.
fn reads<'a>(cut_bytes: &[u8], stream: &'a [u8]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cut_bytes
        .chunks_exact(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])) % (stream.len() + 1))
        .collect();
    points.push(0);
    points.push(stream.len());
    points.sort_unstable();
    points.windows(2).map(|w| &stream[w[0]..w[1]]).collect()
}

/// Whether some request in `stream` could change the honest client's keys: one
/// that names them, or one that reaches every key or client. Parsed with the most
/// permissive limits, so it sees at least every request the server ran.
fn may_touch_honest(stream: &[u8]) -> bool {
    const WIDE: [&[u8]; 6] = [
        b"flushall",
        b"flushdb",
        b"config",
        b"client",
        b"shutdown",
        b"swapdb",
    ];
    let mut rest = stream;
    while let Ok(Some((request, n))) = parse_request(rest, &Limits::default()) {
        rest = &rest[n..];
        if let Some(name) = request.first() {
            if WIDE.iter().any(|w| name.eq_ignore_ascii_case(w)) {
                return true;
            }
        }
        if request.iter().any(|a| a.windows(6).any(|w| w == b"honest")) {
            return true;
        }
    }
    false
}

/// Whether some request in `stream` could close the session without a framing
/// error: QUIT, CLIENT KILL, SHUTDOWN, or CONFIG SET of the query buffer limit.
fn may_close(stream: &[u8]) -> bool {
    const CLOSING: [&[u8]; 4] = [b"quit", b"client", b"shutdown", b"config"];
    let mut rest = stream;
    while let Ok(Some((request, n))) = parse_request(rest, &Limits::default()) {
        rest = &rest[n..];
        if request
            .first()
            .is_some_and(|name| CLOSING.iter().any(|c| name.eq_ignore_ascii_case(c)))
        {
            return true;
        }
    }
    false
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let with_password = flags & 1 == 1;
    let cuts = usize::from((flags >> 1) & 0x3f).min(rest.len() / 2);
    let (cut_bytes, stream) = rest.split_at(cuts * 2);

    // A run whose stream may have reconfigured or shut down the server leaves the
    // next one a new server.
    static WIDE: AtomicBool = AtomicBool::new(false);
    let wide = may_touch_honest(stream);
    let harness = harness(WIDE.swap(wide, Relaxed));
    if with_password {
        harness
            .config()
            .set("requirepass", PASSWORD, true)
            .expect("a password");
    }
    let mut honest = harness.connect();
    let mut hostile = harness.connect();
    if with_password {
        assert_eq!(
            call(&mut honest, &[b"AUTH", PASSWORD.as_bytes()]),
            Frame::ok()
        );
    }
    let table = Builder::new().build(&[5, 6, 0]);
    assert_eq!(
        call(&mut honest, &[b"SET", b"honest:str", b"v"]),
        Frame::ok()
    );
    assert_eq!(
        call(
            &mut honest,
            &[b"IDSET.LOAD", b"honest:set", b"TABLE", &table]
        ),
        Frame::Integer(3)
    );

    let hello = if with_password && flags & 0x80 == 0 {
        call(
            &mut hostile,
            &[b"HELLO", b"3", b"AUTH", b"default", PASSWORD.as_bytes()],
        )
    } else {
        call(&mut hostile, &[b"HELLO", b"3"])
    };
    if with_password && flags & 0x80 != 0 {
        assert!(matches!(hello, Frame::Error(_)), "{hello:?}");
    } else {
        assert!(matches!(hello, Frame::Array(_)), "{hello:?}");
    }

    for read in reads(cut_bytes, stream) {
        let was_closed = hostile.is_closed();
        let out = hostile.feed(read);
        if was_closed {
            assert!(out.is_empty(), "a closed session answered");
            continue;
        }
        let replies = frames(&out);
        let framing_error =
            matches!(replies.last(), Some(Frame::Error(e)) if e.starts_with(b"ERR Protocol error"));
        if framing_error {
            assert!(hostile.is_closed(), "a framing error left the session open");
        } else if hostile.is_closed() {
            assert!(may_close(stream), "the session closed for no reason");
        }
    }

    if !wide {
        assert!(!honest.is_closed());
        check_key(&mut honest, b"honest:str", Some(&Value::Str(b"v".to_vec())));
        check_key(
            &mut honest,
            b"honest:set",
            Some(&Value::Set([0, 5, 6].into())),
        );
    }
});
