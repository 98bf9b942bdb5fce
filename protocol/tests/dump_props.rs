//! Properties of the DUMP payload codec: every value round-trips, and no mutation
//! of a payload (a flipped bit, a byte changed, a cut, bytes appended, with or
//! without a recomputed CRC) makes it decode to anything but a valid value.

use std::borrow::Cow;

use proptest::prelude::*;
use relcache_protocol::dump::{
    crc64, decode, encode_idset, encode_string, DumpError, Value, FOOTER_LEN,
};
use relcache_protocol::idset::{validate, Builder, Check};

/// A payload, and the value it must decode to.
fn payloads() -> impl Strategy<Value = (Vec<u8>, Vec<u8>, Option<u64>)> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|s| (encode_string(&s), s, None)),
        (
            proptest::collection::vec(any::<u64>(), 0..200),
            any::<u64>()
        )
            .prop_map(|(ids, seq)| {
                let table = Builder::new().build(&ids);
                (encode_idset(&table, seq), table, Some(seq))
            }),
    ]
}

/// The payload with its CRC made right again, so a mutation reaches the body's
/// checks instead of stopping at the footer.
fn recrc(mut p: Vec<u8>) -> Vec<u8> {
    if p.len() >= FOOTER_LEN {
        let body = p.len() - 8;
        let crc = crc64(&p[..body]);
        p[body..].copy_from_slice(&crc.to_le_bytes());
    }
    p
}

fn check_decodes_validly(p: &[u8]) {
    match decode(p, Check::Full) {
        Err(DumpError::VersionOrChecksum | DumpError::BadData) => {}
        Ok(Value::Str(_)) => {}
        Ok(Value::IdSet { table, .. }) => {
            assert!(
                validate(table).is_ok(),
                "an idset decoded from a mutation is valid"
            )
        }
    }
}

proptest! {
    #[test]
    fn every_value_round_trips((p, value, seq) in payloads()) {
        let got = decode(&p, Check::Full).unwrap();
        match seq {
            None => prop_assert_eq!(got, Value::Str(Cow::Borrowed(&value[..]))),
            Some(seq) => prop_assert_eq!(got, Value::IdSet { table: &value, seq }),
        }
    }

    #[test]
    fn a_flipped_bit_is_caught_by_the_crc((p, _, _) in payloads(), bit in any::<prop::sample::Index>()) {
        let mut m = p.clone();
        let i = bit.index(m.len() * 8);
        m[i / 8] ^= 1 << (i % 8);
        // CRC-64 catches every single-bit error.
        prop_assert_eq!(decode(&m, Check::Full), Err(DumpError::VersionOrChecksum));
    }

    #[test]
    fn any_mutation_is_refused_or_decodes_to_something_valid(
        (p, _, _) in payloads(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut changed = p.clone();
        let i = at.index(changed.len());
        changed[i] = byte;
        let mut cut_short = p[..cut.index(p.len())].to_vec();
        cut_short.extend_from_slice(&p[p.len() - FOOTER_LEN..]);
        let body = p.len() - FOOTER_LEN;
        let mut longer = p[..body].to_vec();
        longer.extend_from_slice(&extra);
        longer.extend_from_slice(&p[body..]);
        for m in [changed, cut_short, longer] {
            check_decodes_validly(&m);
            check_decodes_validly(&recrc(m));
        }
    }

    #[test]
    fn arbitrary_bytes_are_refused_or_valid(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_decodes_validly(&bytes);
        check_decodes_validly(&recrc(bytes));
    }
}
