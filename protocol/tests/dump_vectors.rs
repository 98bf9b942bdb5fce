//! The test vectors of `protocol/DUMP.md`, read out of that file: the encoder must
//! produce them byte for byte and the decoder must read them back.

mod doc_vectors;

use std::borrow::Cow;

use relcache_protocol::dump::{decode, encode_idset, encode_string, Value};
use relcache_protocol::idset::{Builder, Check};

/// The vector `dump: <name>` of DUMP.md.
fn vector(name: &str) -> Vec<u8> {
    let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/DUMP.md"))
        .expect("read protocol/DUMP.md");
    doc_vectors::vector(&md, &format!("dump: {name}"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn string_payload_matches_the_document() {
    let p = encode_string(b"hello");
    assert_eq!(hex(&p), hex(&vector("string")));
    assert_eq!(
        decode(&p, Check::Full),
        Ok(Value::Str(Cow::Borrowed(&b"hello"[..])))
    );
}

#[test]
fn idset_payload_matches_the_document() {
    let table = Builder::new().build(&[1, 2, 3]);
    let p = encode_idset(&table, 42);
    assert_eq!(hex(&p), hex(&vector("idset")));
    assert_eq!(
        decode(&p, Check::Full),
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
