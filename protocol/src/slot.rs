//! Redis Cluster's key → hash slot mapping, shared by the server (which refuses
//! keys it does not own) and clients (which route by it).
//!
//! A key's slot is CRC16 (the XMODEM variant: polynomial 0x1021, no reflection,
//! zero init) of the key, modulo 16,384. If the key holds a `{…}` with at least one
//! byte between the first `{` and the first `}` after it, only those bytes are
//! hashed, so `{user:42}:following` and `{user:42}:followers` share a slot.

use crc::{Crc, CRC_16_XMODEM};

/// Hash slots in a cluster.
pub const SLOTS: usize = 16_384;

const CRC16: Crc<u16> = Crc::<u16>::new(&CRC_16_XMODEM);

/// The part of `key` that is hashed: the first non-empty `{hash tag}`, or all of it.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// The hash slot `key` lives in.
pub fn key_slot(key: &[u8]) -> u16 {
    // SLOTS is a power of two: the mask is the modulo.
    CRC16.checksum(hash_tag(key)) & (SLOTS as u16 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_the_reference_values() {
        // The check value of CRC-16/XMODEM, and slots Redis reports for
        // CLUSTER KEYSLOT.
        assert_eq!(CRC16.checksum(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"somekey"), 11058);
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{"), b"{");
        assert_eq!(hash_tag(b"}{"), b"}{");
    }

    proptest! {
        #[test]
        fn a_tagged_key_shares_its_tags_slot(tag in proptest::collection::vec(any::<u8>().prop_filter("no brace", |b| *b != b'}'), 1..20), tail in proptest::collection::vec(any::<u8>(), 0..20)) {
            let mut key = b"x{".to_vec();
            key.extend_from_slice(&tag);
            key.push(b'}');
            key.extend_from_slice(&tail);
            prop_assert_eq!(key_slot(&key), key_slot(&tag));
        }

        #[test]
        fn every_slot_is_in_range(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert!((key_slot(&key) as usize) < SLOTS);
        }
    }
}
