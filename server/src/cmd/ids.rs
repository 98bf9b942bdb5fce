//! Parsing ids: the members of relcache's sets are `u64`s.
//!
//! Shared by the SET-family and IDSET-family commands. A member must be the
//! canonical decimal form of a `u64` — what `itoa` prints — so that every member
//! has exactly one spelling: "007", "+7", "7.0" or " 7" would otherwise be distinct
//! members in Redis and the same id here. Anything else is refused with an error
//! that says why, never converted silently.

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
    for &b in arg {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// Parses every argument as an id.
pub fn parse_ids(args: &[bytes::Bytes]) -> Result<Vec<u64>, CmdError> {
    args.iter().map(|a| parse_id(a)).collect()
}

/// Decimal text of an id, as a bulk reply.
pub fn id_frame(id: u64) -> relcache_protocol::resp::Frame {
    let mut buf = itoa::Buffer::new();
    relcache_protocol::resp::Frame::Bulk(bytes::Bytes::copy_from_slice(buf.format(id).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_only() {
        assert_eq!(parse_id_opt(b"0"), Some(0));
        assert_eq!(parse_id_opt(b"18446744073709551615"), Some(u64::MAX));
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

    proptest::proptest! {
        #[test]
        fn round_trips_every_u64(id: u64) {
            let mut buf = itoa::Buffer::new();
            proptest::prop_assert_eq!(parse_id_opt(buf.format(id).as_bytes()), Some(id));
        }
    }
}
