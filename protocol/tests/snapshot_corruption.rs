//! The snapshot decoder against damaged and hostile input: every truncation and
//! every single-bit flip of a small snapshot is refused with its offset and section;
//! records rewritten with correct checksums (a crafted file) never make it panic or
//! read out of bounds; and random keyspaces round-trip.

use proptest::prelude::*;
use relcache_protocol::idset::Builder;
use relcache_protocol::snapshot::{
    crc32, validate, ChunkBuilder, Encoder, Record, Snapshot, SnapshotError,
};

/// A small snapshot with every record kind: strings (one expiring), an inline
/// set, a paged set, in two chunks.
fn sample() -> Vec<u8> {
    let big = Builder::new().build(&(1..=600).collect::<Vec<u64>>());
    let small = Builder::new().build(&[0, 5, u64::MAX]);
    let mut enc = Encoder::new(Vec::new(), 1_700_000_000_000).unwrap();
    let mut c = ChunkBuilder::new();
    c.string(b"a", b"1", 0);
    c.set(b"big", &big, 9, 0);
    c.string(b"ttl", b"soon", 1_900_000_000_000);
    enc.write_chunk(&c).unwrap();
    let mut c = ChunkBuilder::new();
    c.set(b"small", &small, 0, 0);
    c.string(b"", b"", 0);
    enc.write_chunk(&c).unwrap();
    enc.finish().unwrap()
}

fn refused(bytes: &[u8]) -> SnapshotError {
    match validate(bytes) {
        Ok(s) => panic!("accepted a damaged snapshot: {s:?}"),
        Err(e) => {
            assert!(e.offset <= bytes.len() as u64 + 32, "{e}");
            assert!(
                e.to_string().starts_with("snapshot refused at byte "),
                "{e}"
            );
            e
        }
    }
}

#[test]
fn the_sample_is_valid_and_has_a_paged_table() {
    let bytes = sample();
    let s = validate(&bytes).unwrap();
    assert_eq!((s.chunks, s.strings, s.sets), (2, 3, 2));
    assert!(bytes.len() > 8192, "the big table is paged");
}

#[test]
fn every_truncation_is_refused() {
    let bytes = sample();
    for cut in 0..bytes.len() {
        refused(&bytes[..cut]);
    }
}

#[test]
fn a_truncation_names_the_trailer_or_a_length() {
    let bytes = sample();
    let e = refused(&bytes[..bytes.len() - 1]);
    assert!(e.to_string().contains("trailer"), "{e}");
}

#[test]
fn every_single_bit_flip_is_refused() {
    let bytes = sample();
    for i in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[i] ^= 1 << (i % 8);
        refused(&damaged);
    }
}

#[test]
fn flips_in_each_section_name_that_section() {
    let bytes = sample();
    let snap = Snapshot::open(&bytes).unwrap();
    let chunk0 = snap.chunks()[0].offset as usize;
    let cases = [
        (20, "(header)"),
        (chunk0 + 4, "(chunk 0 header)"),
        (chunk0 + 40, "(chunk 0 records)"),
        (8192 + 100, "(chunk 0 tables)"),
        (bytes.len() - 10, "(trailer)"),
    ];
    for (at, section) in cases {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        let e = refused(&damaged);
        assert!(e.to_string().contains(section), "flip at {at}: {e}");
    }
}

/// Rewrites the checksums of chunk `index` (records and header) after its
/// record area was edited, as a crafted file would have them.
fn reseal(bytes: &mut [u8], chunk: usize) {
    let len = u64::from_le_bytes(bytes[chunk + 8..chunk + 16].try_into().unwrap()) as usize;
    let crc = crc32(&bytes[chunk + 32..chunk + 32 + len]);
    bytes[chunk + 24..chunk + 28].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32(&bytes[chunk..chunk + 28]);
    bytes[chunk + 28..chunk + 32].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn crafted_lengths_with_good_checksums_are_refused_cleanly() {
    let bytes = sample();
    let chunk0 = Snapshot::open(&bytes).unwrap().chunks()[0].offset as usize;
    // The first record's key length, value length, and the paged table's length
    // and offset, each set to huge and off-by-one values.
    let key_len = chunk0 + 32 + 1;
    let value_len = chunk0 + 32 + 1 + 4 + 1 + 8;
    for (at, width) in [(key_len, 4), (value_len, 8)] {
        for v in [u64::MAX, u64::from(u32::MAX), 1 << 40, 2, 0] {
            let mut damaged = bytes.clone();
            damaged[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            reseal(&mut damaged, chunk0);
            let e = refused(&damaged);
            assert!(e.to_string().contains("chunk 0"), "{e}");
        }
    }
}

#[test]
fn a_record_count_the_record_area_cannot_hold_is_refused_at_open() {
    // A reader that sized a buffer by the claimed count would ask for hundreds of
    // gigabytes; the claim is checked against the area's length first.
    let bytes = sample();
    let chunk0 = Snapshot::open(&bytes).unwrap().chunks()[0].offset as usize;
    let mut damaged = bytes.clone();
    damaged[chunk0 + 4..chunk0 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    reseal(&mut damaged, chunk0);
    let e = refused(&damaged);
    assert!(e.to_string().contains("chunk 0 header"), "{e}");
    assert!(e.to_string().contains("claims 4294967295 records"), "{e}");
}

#[test]
fn an_invalid_table_with_good_checksums_is_refused() {
    // A set record whose inline table has a bad capacity, and a checksum to match.
    let mut table = Builder::new().build(&[1, 2, 3]);
    table[16] = 4; // capacity 4: not prime
    let mut enc = Encoder::new(Vec::new(), 1).unwrap();
    let mut c = ChunkBuilder::new();
    c.set(b"k", &table, 0, 0);
    enc.write_chunk(&c).unwrap();
    let bytes = enc.finish().unwrap();
    let e = refused(&bytes);
    assert!(e.to_string().contains("table of key 'k' is invalid"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random edits of a chunk's records, resealed: never a panic.
    #[test]
    fn resealed_edits_never_panic(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = sample();
        let chunk0 = Snapshot::open(&bytes).unwrap().chunks()[0].offset as usize;
        let len = u64::from_le_bytes(bytes[chunk0 + 8..chunk0 + 16].try_into().unwrap()) as usize;
        for (at, v) in edits {
            bytes[chunk0 + 32 + at % len] = v;
        }
        reseal(&mut bytes, chunk0);
        let _ = validate(&bytes);
    }

    /// Whatever is written reads back the same, record for record.
    #[test]
    fn keyspaces_round_trip(
        strings in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..40), prop::collection::vec(any::<u8>(), 0..300), any::<u64>()), 0..20),
        sets in prop::collection::vec((prop::collection::vec(any::<u64>(), 0..900), any::<u64>()), 0..6),
        per_chunk in 1usize..8,
    ) {
        let tables: Vec<Vec<u8>> = sets.iter().map(|(ids, _)| Builder::new().build(ids)).collect();
        let set_keys: Vec<Vec<u8>> = (0..sets.len()).map(|i| format!("set:{i}").into_bytes()).collect();
        let mut enc = Encoder::new(Vec::new(), 42).unwrap();
        let mut want = Vec::new();
        let mut chunk = ChunkBuilder::new();
        for (key, value, exp) in &strings {
            chunk.string(key, value, *exp);
            want.push((key.clone(), value.clone(), *exp, 0));
            if chunk.len() == per_chunk {
                enc.write_chunk(&chunk).unwrap();
                chunk = ChunkBuilder::new();
            }
        }
        for ((key, table), (_, seq)) in set_keys.iter().zip(&tables).zip(&sets) {
            chunk.set(key, table, *seq, 0);
            want.push((key.clone(), table.clone(), 0, *seq));
        }
        enc.write_chunk(&chunk).unwrap();
        let bytes = enc.finish().unwrap();
        let snap = Snapshot::open(&bytes).unwrap();
        prop_assert_eq!(snap.created_ms(), 42);
        let mut got = Vec::new();
        for span in snap.chunks() {
            for r in snap.records(span).unwrap() {
                got.push(match r.unwrap() {
                    Record::String { key, value, expire_at, .. } => (key.to_vec(), value.to_vec(), expire_at, 0),
                    Record::Set { key, table, seq, table_offset, .. } => {
                        if table.len() >= 4096 {
                            prop_assert_eq!(table_offset % 4096, 0);
                        }
                        (key.to_vec(), table.to_vec(), 0, seq)
                    }
                });
            }
        }
        prop_assert_eq!(got, want);
    }
}
