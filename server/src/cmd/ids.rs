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
    match parse_id_opt(arg) {
        Some(id) => Ok(id),
        None => Err(not_an_id(arg)),
    }
}

#[cold]
fn not_an_id(arg: &[u8]) -> CmdError {
    let shown = String::from_utf8_lossy(&arg[..arg.len().min(64)]).into_owned();
    CmdError::err(format!(
        "member '{shown}' is not a valid id: relcache sets hold unsigned 64-bit integers in canonical decimal form"
    ))
}

/// [`parse_id`] without the error.
///
/// Batch commands parse every id of a request (20,000 for a set's SADD, 100 for a
/// batch check), so digits are read a word at a time: four to eight in one `u64`,
/// validated and converted with a few multiplies (the SWAR method of Lemire's
/// "Faster Integer Parsing"), instead of a compare, multiply and add per digit
/// (callgrind, a 20,000-id SADD of 1- to 6-digit ids: 115 → 60 instructions an id,
/// calls included).
#[inline(always)]
pub fn parse_id_opt(arg: &[u8]) -> Option<u64> {
    let n = arg.len();
    if n == 0 || n > 20 || (n > 1 && arg[0] == b'0') {
        return None;
    }
    if n <= 8 {
        return up_to_eight(arg);
    }
    let low = eight(&arg[n - 8..])?;
    let head = &arg[..n - 8];
    if head.len() <= 8 {
        // At most 16 digits: no overflow.
        return Some(up_to_eight(head)? * 100_000_000 + low);
    }
    let mid = eight(&head[head.len() - 8..])?;
    // One to four digits; only a 20-digit id can overflow.
    let top = up_to_eight(&head[..head.len() - 8])?;
    let rest = mid * 100_000_000 + low;
    if n < 20 {
        return Some(top * 10_000_000_000_000_000 + rest);
    }
    top.checked_mul(10_000_000_000_000_000)?.checked_add(rest)
}

/// The number spelled by 1 to 8 decimal digits, if they are all digits.
#[inline(always)]
fn up_to_eight(digits: &[u8]) -> Option<u64> {
    let n = digits.len();
    debug_assert!((1..=8).contains(&n));
    if n < 4 {
        let mut v = 0;
        for &b in digits {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + u64::from(d);
        }
        return Some(v);
    }
    // Two overlapping four-byte loads, the first shifted so that only the digits
    // the second does not hold remain, with '0's in front: eight digits in all.
    let first = u64::from(u32::from_le_bytes(digits[..4].try_into().unwrap()));
    let last = u64::from(u32::from_le_bytes(digits[n - 4..].try_into().unwrap()));
    let pad = 8 * (8 - n) as u32;
    let lead = ((first << pad) & 0xFFFF_FFFF) | (0x3030_3030u64 >> (32 - pad));
    word_value(lead | (last << 32))
}

/// The number spelled by exactly 8 decimal digits, if they are all digits.
#[inline(always)]
fn eight(digits: &[u8]) -> Option<u64> {
    word_value(u64::from_le_bytes(digits.try_into().unwrap()))
}

/// Eight ASCII bytes loaded little-endian (the first, most significant digit in
/// the low byte), as the number they spell if every one is a digit.
#[inline(always)]
fn word_value(w: u64) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    // Each byte is 0x30..=0x39 exactly when its high nibble is 3 and adding 6
    // leaves it 3 (a byte that carries into the next is >= 0xFA: refused by
    // its own high nibble).
    if (w & HIGH) | ((w.wrapping_add(0x0606_0606_0606_0606) & HIGH) >> 4) != 0x3333_3333_3333_3333 {
        return None;
    }
    let w = (w & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561) >> 8;
    let w = (w & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601) >> 16;
    Some((w & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001) >> 32)
}

/// Parses every argument as an id.
pub fn parse_ids(args: &[&[u8]]) -> Result<Vec<u64>, CmdError> {
    // Sized once: collecting through `Result` cannot know the length, and grew
    // the vector by doubling (a 20,000-id SADD reallocated 12 times).
    let mut ids = Vec::with_capacity(args.len());
    for a in args {
        let Some(id) = parse_id_opt(a) else {
            return Err(not_an_id(a));
        };
        ids.push(id);
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

    /// Every length the word-at-a-time reader splits differently (1–3 digits
    /// alone, 4–8 in one word, 9–16 in two, 17–20 in three), with a non-digit in
    /// every place: the neighbours of '0' and '9', and the bytes whose +6 carries
    /// into the next byte of the word.
    #[test]
    fn every_length_and_every_place() {
        for len in 1..=20usize {
            let top = if len == 20 { 1 } else { 9 };
            let digits: Vec<u8> = (0..len)
                .map(|i| {
                    if i == 0 {
                        b'0' + top
                    } else {
                        b'0' + (i % 10) as u8
                    }
                })
                .collect();
            assert_eq!(parse_id_opt(&digits), reference(&digits), "{len}");
            for place in 0..len {
                for bad in [b'/', b':', b' ', 0xFA, 0xFF, 0x80, 0x00] {
                    let mut arg = digits.clone();
                    arg[place] = bad;
                    assert_eq!(parse_id_opt(&arg), None, "{len} {place} {bad:#x}");
                }
            }
            let power = 10u128.pow(len as u32 - 1);
            for n in [power, power * 10 - 1] {
                let text = n.to_string();
                assert_eq!(parse_id_opt(text.as_bytes()), u64::try_from(n).ok(), "{n}");
            }
        }
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
