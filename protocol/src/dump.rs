//! The DUMP payload: one value as DUMP hands it out and RESTORE (and MIGRATE, which
//! sends RESTORE) takes it back, specified in `protocol/DUMP.md` with a test vector.
//!
//! The shape is Redis's, so tools that treat a payload as opaque bytes (backup
//! scripts, `redis-cli --cluster`) work unchanged: the value, then the format
//! version and a CRC-64 over everything before the CRC.
//!
//! ```text
//!  +------+----------------------+-----------------+------------------------+
//!  | type | value (by type)      | version: u16 LE | CRC-64/REDIS: u64 LE   |
//!  | 1 B  |                      |                 | over type..version     |
//!  +------+----------------------+-----------------+------------------------+
//!
//!  type 0   (TYPE_STRING): an RDB string — length, then the bytes (below)
//!  type 200 (TYPE_IDSET):  seq: u64 LE | table length: u64 LE | idset table
//! ```
//!
//! - Strings use RDB's string encoding, so a relcache string payload is a valid
//!   Redis payload: Redis 6.0 and later RESTORE it. relcache writes
//!   [`WRITE_VERSION`] (9, the oldest RDB version that any Redis 6 or 7 accepts)
//!   and a plain length (never LZF, never an integer encoding). It reads the
//!   string encodings Redis writes (6-, 14-, 32- and 64-bit lengths, the 8-, 16-
//!   and 32-bit integer encodings, LZF) from payloads of versions up to
//!   [`MAX_READ_VERSION`].
//! - Sets are idset tables carried verbatim, so a big set moves with one copy,
//!   under a type byte of relcache's own that Redis refuses (`Bad data format`).
//!   `seq` is the set's sequence number (the newest sequenced change it reflects),
//!   kept across a move so write-throughs stay in order. The table goes through
//!   [`crate::idset::check`] at the level the caller asks for (the server: its
//!   `idset-table-check`, as for a table sent with SET, since anyone can compute
//!   the CRC).
//!
//! Expiry is not in the payload: RESTORE and MIGRATE carry the TTL beside it.
//!
//! Decoding trusts nothing and does no I/O, so it can be fuzzed: a payload is
//! either refused with a [`DumpError`] or decodes to a value the server can
//! store as is.

use std::borrow::Cow;

use crate::idset::{check, Check};

/// The type byte of a string (RDB's `RDB_TYPE_STRING`).
pub const TYPE_STRING: u8 = 0;
/// The type byte of an idset: relcache's own, outside the range of RDB types
/// (0..=21 in Redis 7.4) and opcodes (0xF5..=0xFF).
pub const TYPE_IDSET: u8 = 200;
/// The version relcache writes: RDB 9, which Redis 6.0 through 7.4 accept (a
/// Redis refuses payloads newer than its own RDB version).
pub const WRITE_VERSION: u16 = 9;
/// The newest version relcache reads: RDB 12 (Redis 7.4), whose string
/// encoding is the same.
pub const MAX_READ_VERSION: u16 = 12;
/// Bytes after the value: version (2) and CRC (8).
pub const FOOTER_LEN: usize = 10;

/// RDB length encodings: the top two bits of the first byte.
const LEN_6BIT: u8 = 0;
const LEN_14BIT: u8 = 1;
const LEN_ENCVAL: u8 = 3;
const LEN_32BIT: u8 = 0x80;
const LEN_64BIT: u8 = 0x81;
/// RDB special string encodings (after [`LEN_ENCVAL`]).
const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

/// Why bytes are not a payload this server can restore. The `Display` text is
/// Redis's error (without `ERR `).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// Too short for the footer, a version newer than [`MAX_READ_VERSION`], or a
    /// CRC that does not match.
    #[error("DUMP payload version or checksum are wrong")]
    VersionOrChecksum,
    /// The footer is right but the value is not: an unknown type, a length past
    /// the end, trailing bytes, an invalid table.
    #[error("Bad data format")]
    BadData,
}

/// A decoded value, borrowing the payload where it can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// A string (owned when the payload held it as an integer or compressed).
    Str(Cow<'a, [u8]>),
    /// An idset: a table that [`check`] accepted, as of change `seq`.
    IdSet { table: &'a [u8], seq: u64 },
}

/// Redis's CRC-64 (Jones polynomial, reflected), as `crc64()` in `src/crc64.c`.
pub fn crc64(bytes: &[u8]) -> u64 {
    const CRC: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);
    CRC.checksum(bytes)
}

/// The payload of a string.
pub fn encode_string(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 9 + value.len() + FOOTER_LEN);
    out.push(TYPE_STRING);
    let n = value.len() as u64;
    if n < 1 << 6 {
        out.push((LEN_6BIT << 6) | n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[(LEN_14BIT << 6) | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(LEN_32BIT);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(LEN_64BIT);
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(value);
    finish(out)
}

/// The payload of an idset `table` as of change `seq`.
pub fn encode_idset(table: &[u8], seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 16 + table.len() + FOOTER_LEN);
    out.push(TYPE_IDSET);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(table.len() as u64).to_le_bytes());
    out.extend_from_slice(table);
    finish(out)
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&WRITE_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks the footer and decodes the value, checking an idset table as deeply as
/// `how` says (O(its length)).
///
/// # Errors
///
/// [`DumpError::VersionOrChecksum`] for a bad footer, [`DumpError::BadData`] for
/// a bad value; nothing else is read from a payload that fails.
pub fn decode(payload: &[u8], how: Check) -> Result<Value<'_>, DumpError> {
    let body_len = payload
        .len()
        .checked_sub(FOOTER_LEN)
        .ok_or(DumpError::VersionOrChecksum)?;
    let (body, footer) = payload.split_at(body_len);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..].try_into().expect("8 bytes"));
    if version > MAX_READ_VERSION || crc64(&payload[..body_len + 2]) != crc {
        return Err(DumpError::VersionOrChecksum);
    }
    let (&ty, mut rest) = body.split_first().ok_or(DumpError::BadData)?;
    let value = match ty {
        TYPE_STRING => Value::Str(read_string(&mut rest)?),
        TYPE_IDSET => {
            let seq = read_u64_le(&mut rest)?;
            let len = read_u64_le(&mut rest)?;
            let table = take(&mut rest, len)?;
            check(table, how).map_err(|_| DumpError::BadData)?;
            Value::IdSet { table, seq }
        }
        _ => return Err(DumpError::BadData),
    };
    if !rest.is_empty() {
        return Err(DumpError::BadData);
    }
    Ok(value)
}

/// `n` bytes off the front of `rest`.
fn take<'a>(rest: &mut &'a [u8], n: u64) -> Result<&'a [u8], DumpError> {
    let n = usize::try_from(n).map_err(|_| DumpError::BadData)?;
    if n > rest.len() {
        return Err(DumpError::BadData);
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn read_u64_le(rest: &mut &[u8]) -> Result<u64, DumpError> {
    let b = take(rest, 8)?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// An RDB length, or the special encoding that replaces it (`Err(enc)`).
fn read_len(rest: &mut &[u8]) -> Result<Result<u64, u8>, DumpError> {
    let first = take(rest, 1)?[0];
    Ok(match (first >> 6, first) {
        (LEN_6BIT, _) => Ok(u64::from(first & 0x3F)),
        (LEN_14BIT, _) => Ok(u64::from(first & 0x3F) << 8 | u64::from(take(rest, 1)?[0])),
        (LEN_ENCVAL, _) => Err(first & 0x3F),
        (_, LEN_32BIT) => Ok(u64::from(u32::from_be_bytes(
            take(rest, 4)?.try_into().expect("4 bytes"),
        ))),
        (_, LEN_64BIT) => Ok(u64::from_be_bytes(
            take(rest, 8)?.try_into().expect("8 bytes"),
        )),
        _ => return Err(DumpError::BadData),
    })
}

/// An RDB string: plain, an integer written as one, or LZF-compressed.
fn read_string<'a>(rest: &mut &'a [u8]) -> Result<Cow<'a, [u8]>, DumpError> {
    let int = |n: i64| Cow::Owned(n.to_string().into_bytes());
    Ok(match read_len(rest)? {
        Ok(len) => Cow::Borrowed(take(rest, len)?),
        Err(ENC_INT8) => int(i64::from(take(rest, 1)?[0] as i8)),
        Err(ENC_INT16) => int(i64::from(i16::from_le_bytes(
            take(rest, 2)?.try_into().expect("2 bytes"),
        ))),
        Err(ENC_INT32) => int(i64::from(i32::from_le_bytes(
            take(rest, 4)?.try_into().expect("4 bytes"),
        ))),
        Err(ENC_LZF) => {
            let (Ok(clen), Ok(len)) = (read_len(rest)?, read_len(rest)?) else {
                return Err(DumpError::BadData);
            };
            Cow::Owned(lzf_decompress(take(rest, clen)?, len)?)
        }
        Err(_) => return Err(DumpError::BadData),
    })
}

/// LZF (liblzf's format, as Redis compresses strings): literal runs and
/// back-references, into exactly `len` bytes. The output is never allocated past
/// what the input can produce (a back-reference of 3 bytes yields at most 264).
fn lzf_decompress(mut input: &[u8], len: u64) -> Result<Vec<u8>, DumpError> {
    let len = usize::try_from(len).map_err(|_| DumpError::BadData)?;
    if len > input.len().saturating_mul(88) {
        return Err(DumpError::BadData);
    }
    let mut out = Vec::with_capacity(len);
    while let Some((&ctrl, tail)) = input.split_first() {
        input = tail;
        if ctrl < 32 {
            let run = take(&mut input, u64::from(ctrl) + 1)?;
            out.extend_from_slice(run);
        } else {
            let mut n = usize::from(ctrl >> 5);
            if n == 7 {
                n += usize::from(take(&mut input, 1)?[0]);
            }
            let back = (usize::from(ctrl & 0x1F) << 8) + usize::from(take(&mut input, 1)?[0]) + 1;
            let from = out.len().checked_sub(back).ok_or(DumpError::BadData)?;
            for i in 0..n + 2 {
                let b = out[from + i];
                out.push(b);
            }
        }
        if out.len() > len {
            return Err(DumpError::BadData);
        }
    }
    if out.len() != len {
        return Err(DumpError::BadData);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idset::Builder;

    #[test]
    fn crc64_is_redis_s() {
        // The check value in Redis's src/crc64.c test.
        assert_eq!(crc64(b"123456789"), 0xe9c6d914c4b8d9ca);
    }

    #[test]
    fn strings_round_trip_at_every_length_encoding() {
        for n in [0, 1, 63, 64, 16383, 16384, 70000] {
            let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let p = encode_string(&v);
            assert_eq!(
                decode(&p, Check::Full),
                Ok(Value::Str(Cow::Borrowed(&v[..]))),
                "{n}"
            );
        }
    }

    #[test]
    fn idsets_round_trip() {
        let table = Builder::new().build(&[1, 2, 3, u64::MAX]);
        let p = encode_idset(&table, 42);
        assert_eq!(
            decode(&p, Check::Full),
            Ok(Value::IdSet {
                table: &table,
                seq: 42
            })
        );
    }

    /// A payload with `body` and a right footer of `version`.
    fn with_footer(body: &[u8], version: u16) -> Vec<u8> {
        let mut p = body.to_vec();
        p.extend_from_slice(&version.to_le_bytes());
        let crc = crc64(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    #[test]
    fn redis_s_string_encodings_are_read() {
        // What Redis 7 writes for SET k 12, SET k -300, SET k 100000.
        let int = |b: &[u8]| match decode(&with_footer(b, 10), Check::Full).unwrap() {
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            other => panic!("{other:?}"),
        };
        assert_eq!(int(&[0, 0xC0, 12]), Value::Str(Cow::Owned(b"12".to_vec())));
        let m300 = (-300i16).to_le_bytes();
        assert_eq!(
            int(&[0, 0xC1, m300[0], m300[1]]),
            Value::Str(Cow::Owned(b"-300".to_vec()))
        );
        let big = 100_000i32.to_le_bytes();
        assert_eq!(
            int(&[0, 0xC2, big[0], big[1], big[2], big[3]]),
            Value::Str(Cow::Owned(b"100000".to_vec()))
        );
        // "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" (30 a's) as LZF: a literal "a", then a
        // back-reference of 29 bytes at distance 1.
        let lzf = [0x00, b'a', 0xE0, 29 - 2 - 7, 0x00];
        let mut body = vec![0, 0xC3, lzf.len() as u8, 30];
        body.extend_from_slice(&lzf);
        assert_eq!(int(&body), Value::Str(Cow::Owned(vec![b'a'; 30])));
        // Redis 7.0's own DUMP of the same string, byte for byte.
        let redis = b"\x00\xc3\x09\x1e\x01aa\xe0\x11\x00\x01aa\x0a\x00Es|\xbb+d{\xbb";
        assert_eq!(
            decode(redis, Check::Full).map(|v| v == Value::Str(Cow::Owned(vec![b'a'; 30]))),
            Ok(true)
        );
    }

    #[test]
    fn bad_footers_and_bodies_are_told_apart() {
        let good = encode_string(b"hello");
        assert_eq!(
            decode(&good[..9], Check::Full),
            Err(DumpError::VersionOrChecksum)
        );
        let mut flipped = good.clone();
        flipped[3] ^= 1;
        assert_eq!(
            decode(&flipped, Check::Full),
            Err(DumpError::VersionOrChecksum)
        );
        assert_eq!(
            decode(
                &with_footer(&good[..good.len() - FOOTER_LEN], 13),
                Check::Full
            ),
            Err(DumpError::VersionOrChecksum)
        );
        for body in [
            &[][..],
            &[7, 0],
            &[0, 6, b'x'],
            &[0, 1, b'x', b'y'],
            &[0, 0xC4],
        ] {
            assert_eq!(
                decode(&with_footer(body, 9), Check::Full),
                Err(DumpError::BadData),
                "{body:?}"
            );
        }
        // A table with a flipped slot is refused, as IDSET.LOAD would.
        let mut table = Builder::new().build(&[1, 2, 3]);
        let last = table.len() - 1;
        table[last] ^= 0x40;
        let p = encode_idset(&table, 0);
        assert_eq!(decode(&p, Check::Full), Err(DumpError::BadData));
    }
}
