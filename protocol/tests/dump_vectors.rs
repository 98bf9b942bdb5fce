//! The test vectors of `protocol/DUMP.md`, read out of that file: the encoder must
//! produce them byte for byte and the decoder must read them back.

use std::borrow::Cow;

use relcache_protocol::dump::{decode, encode_idset, encode_string, Value};
use relcache_protocol::idset::Builder;

/// The hex of the ```text block that starts with `dump: <name>`, comments (`#` to
/// the end of the line) and whitespace dropped.
fn vector(name: &str) -> Vec<u8> {
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/DUMP.md"))
        .expect("read protocol/DUMP.md");
    let mut lines = md
        .lines()
        .skip_while(|l| l.trim() != format!("dump: {name}"));
    assert!(lines.next().is_some(), "vector {name} not in DUMP.md");
    let digits: String = lines
        .take_while(|l| !l.starts_with("```"))
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.chars().filter(|c| c.is_ascii_hexdigit()))
        .collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn string_payload_matches_the_document() {
    let p = encode_string(b"hello");
    assert_eq!(hex(&p), hex(&vector("string")));
    assert_eq!(decode(&p), Ok(Value::Str(Cow::Borrowed(&b"hello"[..]))));
}

#[test]
fn idset_payload_matches_the_document() {
    let table = Builder::new().build(&[1, 2, 3]);
    let p = encode_idset(&table, 42);
    assert_eq!(hex(&p), hex(&vector("idset")));
    assert_eq!(
        decode(&p),
        Ok(Value::IdSet {
            table: &table,
            seq: 42
        })
    );
}

#[test]
#[ignore = "prints the vectors for DUMP.md"]
fn print_vectors() {
    println!("{}", hex(&encode_string(b"hello")));
    let table = Builder::new().build(&[1, 2, 3]);
    let p = encode_idset(&table, 42);
    for chunk in p.chunks(16) {
        println!("{}", hex(chunk));
    }
}
