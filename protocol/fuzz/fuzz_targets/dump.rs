//! The DUMP payload decoder over arbitrary bytes.
//!
//! Invariants: `decode` never panics; whatever it accepts is a value the server
//! can store as is (an idset's table validates) and encodes back to a payload that
//! decodes to the same value. A CRC stops nearly every mutation at the footer, so
//! each input is also decoded with its CRC fixed up, which lets the fuzzer reach
//! the body's checks (lengths, string encodings, LZF, the table).
#![no_main]

use libfuzzer_sys::fuzz_target;
use relcache_protocol::dump::{crc64, decode, encode_idset, encode_string, Value, FOOTER_LEN};
use relcache_protocol::idset::{validate, Check};

fn check(bytes: &[u8]) {
    let Ok(value) = decode(bytes, Check::Full) else {
        return;
    };
    let again = match &value {
        Value::Str(s) => encode_string(s),
        Value::IdSet { table, seq } => {
            assert!(validate(table).is_ok(), "an accepted table validates");
            encode_idset(table, *seq)
        }
    };
    assert_eq!(
        decode(&again, Check::Full).as_ref(),
        Ok(&value),
        "re-encoding keeps the value"
    );
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= FOOTER_LEN {
        let mut fixed = data.to_vec();
        let body = fixed.len() - 8;
        let crc = crc64(&fixed[..body]);
        fixed[body..].copy_from_slice(&crc.to_le_bytes());
        check(&fixed);
    }
});
