//! The `u64` arguments and replies of the set commands: ids, and scan cursors.
//!
//! Shared by the SET-family and IDSET-family commands (and SCAN, for its cursor).
//! A member must be the canonical decimal form of a `u64` — what `itoa` prints — so
//! that every member has exactly one spelling: "007", "+7", "7.0" or " 7" would
//! otherwise be distinct members in Redis and the same id here. Anything else is
//! refused with an error that says why, never converted silently.
//!
//! A cursor is the opposite case: Redis reads it leniently (see [`parse_cursor`]),
//! clients and scripts rely on that, and a cursor names no member, so SCAN, SSCAN
//! and IDSET.SCAN read it exactly as Redis 7 does.

use bytes::{Bytes, BytesMut};
use relcache_protocol::resp::Frame;

use crate::error::CmdError;

/// Parses one canonical decimal `u64`.
pub fn parse_id(arg: &[u8]) -> Result<u64, CmdError> {
    parse_id_opt(arg).ok_or_else(|| {
        let shown = String::from_utf8_lossy(&arg[..arg.len().min(64)]).into_owned();
        CmdError::err(format!(
            "member '{shown}' is not a valid id: relcache sets hold unsigned 64-bit integers in canonical decimal form"
        ))
    })
}

/// [`parse_id`] without the error.
pub fn parse_id_opt(arg: &[u8]) -> Option<u64> {
    if arg.is_empty() || arg.len() > 20 || (arg.len() > 1 && arg[0] == b'0') {
        return None;
    }
    let mut v: u64 = 0;
    // Up to 19 digits cannot overflow a u64: only a 20-digit id needs the checks.
    // (Eight digits at a time in a word was tried: gathering them into the word
    // without reading past the slice cost what it saved.)
    if arg.len() <= 19 {
        for &b in arg {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + u64::from(d);
        }
        return Some(v);
    }
    for &b in arg {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Parses every argument as an id.
pub fn parse_ids(args: &[Bytes]) -> Result<Vec<u64>, CmdError> {
    // Sized once: collecting through `Result` cannot know the length, and grew
    // the vector by doubling (a 20,000-id SADD reallocated 12 times).
    let mut ids = Vec::with_capacity(args.len());
    for a in args {
        ids.push(parse_id(a)?);
    }
    Ok(ids)
}

/// Parses a scan cursor (SCAN, SSCAN, IDSET.SCAN) as Redis 7's
/// `parseScanCursorOrReply` does with C's `strtoul`: an optional sign and decimal
/// digits, a minus sign negating modulo 2^64 (so `-1` is `u64::MAX`), and the empty
/// string reading as 0; leading whitespace, anything after the digits, a sign alone
/// and overflow are refused.
///
/// What a cursor a server never issued means is each pager's business; every one of
/// them must end or resume somewhere, never panic or loop.
///
/// # Errors
///
/// `ERR invalid cursor`, Redis's text.
pub fn parse_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    let invalid = || CmdError::err("invalid cursor");
    let (negative, digits) = match arg.first() {
        None => return Ok(0),
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        Some(_) => (false, arg),
    };
    if digits.is_empty() {
        return Err(invalid());
    }
    let mut v: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(invalid());
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or_else(invalid)?;
    }
    Ok(if negative { v.wrapping_neg() } else { v })
}

/// Decimal text of an id, as a bulk reply.
pub fn id_frame(id: u64) -> Frame {
    let mut buf = itoa::Buffer::new();
    Frame::Bulk(Bytes::copy_from_slice(buf.format(id).as_bytes()))
}

/// Bulk frames of the decimal text of `ids`, all slices of one buffer: a reply of
/// thousands of members costs three allocations, not one per member.
pub fn member_frames(ids: impl Iterator<Item = u64>, len_hint: usize) -> Vec<Frame> {
    let mut text = BytesMut::with_capacity(len_hint.saturating_mul(8));
    let mut ends = Vec::with_capacity(len_hint);
    let mut buf = itoa::Buffer::new();
    for id in ids {
        text.extend_from_slice(buf.format(id).as_bytes());
        ends.push(text.len());
    }
    let text = text.freeze();
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let frame = Frame::Bulk(text.slice(start..end));
            start = end;
            frame
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_only() {
        assert_eq!(parse_id_opt(b"0"), Some(0));
        assert_eq!(parse_id_opt(b"18446744073709551615"), Some(u64::MAX));
        // The largest id the unchecked 19-digit path reads.
        assert_eq!(
            parse_id_opt(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"007",
            b"+7",
            b"-1",
            b"7.0",
            b" 7",
            b"7 ",
            b"18446744073709551616",
            b"abc",
            b"99999999999999999999",
        ] {
            assert_eq!(
                parse_id_opt(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse_id(b"x")
            .unwrap_err()
            .to_string()
            .contains("'x' is not a valid id"));
    }

    /// Redis 7.0.15's answers, checked against a real `redis-server` for SCAN and
    /// SSCAN alike.
    #[test]
    fn cursors_parse_like_strtoul() {
        for (arg, want) in [
            (&b"0"[..], 0),
            (b"", 0),
            (b"007", 7),
            (b"+1", 1),
            (b"+5", 5),
            (b"-0", 0),
            (b"-1", u64::MAX),
            (b"-18446744073709551615", 1),
            (b"9223372036854775808", 1 << 63),
            (b"18446744073709551615", u64::MAX),
        ] {
            assert_eq!(
                parse_cursor(arg),
                Ok(want),
                "{:?}",
                String::from_utf8_lossy(arg)
            );
        }
        for bad in [
            &b" 1"[..],
            b"\t1",
            b" ",
            b"1 ",
            b"-",
            b"+",
            b"+-1",
            b"abc",
            b"1.0",
            b"1.5",
            b"18446744073709551616",
            b"-18446744073709551616",
        ] {
            assert_eq!(
                parse_cursor(bad),
                Err(CmdError::err("invalid cursor")),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn member_frames_slice_one_buffer() {
        let frames = member_frames([0u64, 42, u64::MAX].into_iter(), 3);
        let texts: Vec<&[u8]> = frames
            .iter()
            .map(|f| match f {
                Frame::Bulk(b) => &b[..],
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, [&b"0"[..], b"42", b"18446744073709551615"]);
    }

    /// The rule parse_id_opt implements, spelled the slow way.
    fn reference(arg: &[u8]) -> Option<u64> {
        let canonical = !arg.is_empty()
            && arg.iter().all(u8::is_ascii_digit)
            && (arg.len() == 1 || arg[0] != b'0');
        canonical
            .then(|| std::str::from_utf8(arg).ok()?.parse().ok())
            .flatten()
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_rule_on_any_bytes(
            arg in proptest::collection::vec(
                proptest::prop_oneof![8 => b'0'..=b'9', 1 => proptest::arbitrary::any::<u8>()],
                0..23,
            )
        ) {
            proptest::prop_assert_eq!(parse_id_opt(&arg), reference(&arg));
        }

        #[test]
        fn round_trips_every_u64(id: u64) {
            let mut buf = itoa::Buffer::new();
            proptest::prop_assert_eq!(parse_id_opt(buf.format(id).as_bytes()), Some(id));
        }
    }
}
