//! The snapshot decoder over arbitrary bytes.
//!
//! Invariants: `validate` never panics and returns; whatever it accepts, walking it
//! record by record gives the same counts, every set's table passes the structure
//! check (what makes it safe to serve; its ids' placement is proven when a client
//! stores it, not on load) and every paged table starts on a page boundary; and
//! re-encoding the decoded records gives a file that validates to the same summary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relcache_protocol::idset::{check, Check};
use relcache_protocol::snapshot::{validate, ChunkBuilder, Encoder, Record, Snapshot};

fuzz_target!(|data: &[u8]| {
    let Ok(summary) = validate(data) else {
        return;
    };
    let snap = Snapshot::open(data).expect("validated");
    let mut enc = Encoder::new(Vec::new(), snap.created_ms()).unwrap();
    let (mut strings, mut sets) = (0, 0);
    for span in snap.chunks() {
        let mut chunk = ChunkBuilder::new();
        for r in snap.records(span).expect("validated") {
            match r.expect("validated") {
                Record::String {
                    key,
                    value,
                    expire_at,
                    ..
                } => {
                    strings += 1;
                    chunk.string(key, value, expire_at);
                }
                Record::Set {
                    key,
                    table,
                    seq,
                    expire_at,
                    table_offset,
                    ..
                } => {
                    sets += 1;
                    assert!(check(table, Check::Structure).is_ok());
                    assert!(table_offset + table.len() as u64 <= data.len() as u64);
                    chunk.set(key, table, seq, expire_at);
                }
            }
        }
        enc.write_chunk(&chunk).unwrap();
    }
    assert_eq!((strings, sets), (summary.strings, summary.sets));
    let again = validate(&enc.finish().unwrap()).expect("re-encoded file is valid");
    assert_eq!(again, summary);
});
