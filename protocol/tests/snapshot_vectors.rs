//! The test vectors of `protocol/SNAPSHOT.md`, read out of that file: the encoder
//! must produce them byte for byte and the decoder must read them back.

mod doc_vectors;

use relcache_protocol::idset::Builder;
use relcache_protocol::snapshot::{validate, ChunkBuilder, Encoder, Record, Snapshot};

fn snapshot_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/SNAPSHOT.md");
    std::fs::read_to_string(path).expect("read protocol/SNAPSHOT.md")
}

/// The vector `snapshot: <name>` of SNAPSHOT.md.
fn vector(md: &str, name: &str) -> Vec<u8> {
    doc_vectors::vector(md, &format!("snapshot: {name}"))
}

const CREATED: u64 = 1_700_000_000_000;

fn encode(fill: impl FnOnce(&mut Encoder<Vec<u8>>)) -> Vec<u8> {
    let mut enc = Encoder::new(Vec::new(), CREATED).unwrap();
    fill(&mut enc);
    enc.finish().unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn empty_snapshot_matches_the_document() {
    let bytes = encode(|_| {});
    assert_eq!(hex(&bytes), hex(&vector(&snapshot_md(), "empty")));
    let summary = validate(&bytes).unwrap();
    assert_eq!(summary.created_ms, CREATED);
    assert_eq!((summary.chunks, summary.strings, summary.sets), (0, 0, 0));
}

#[test]
fn small_snapshot_matches_the_document() {
    let table = Builder::new().build(&[1, 2, 3]);
    let bytes = encode(|enc| {
        let mut chunk = ChunkBuilder::new();
        chunk.string(b"greeting", b"hello", 0);
        chunk.string(b"session", b"x", 1_700_000_060_000);
        chunk.set(b"following:1", &table, 42, 0);
        enc.write_chunk(&chunk).unwrap();
    });
    assert_eq!(hex(&bytes), hex(&vector(&snapshot_md(), "small")));

    let snap = Snapshot::open(&bytes).unwrap();
    assert_eq!(snap.created_ms(), CREATED);
    let records: Vec<Record<'_>> = snap
        .records(&snap.chunks()[0])
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records.len(), 3);
    assert!(matches!(
        records[1],
        Record::String {
            key: b"session",
            value: b"x",
            expire_at: 1_700_000_060_000,
            ..
        }
    ));
    match records[2] {
        Record::Set {
            key,
            table: t,
            seq,
            expire_at,
            ..
        } => {
            assert_eq!((key, seq, expire_at), (&b"following:1"[..], 42, 0));
            assert_eq!(t, &table[..]);
        }
        other => panic!("expected the set, got {other:?}"),
    }
}

#[test]
fn paged_tables_start_on_page_boundaries() {
    let big = Builder::new().build(&(1..=2000).collect::<Vec<u64>>());
    let small = Builder::new().build(&[7]);
    let bytes = encode(|enc| {
        let mut chunk = ChunkBuilder::new();
        chunk.set(b"a", &big, 1, 0);
        chunk.set(b"b", &small, 2, 0);
        chunk.set(b"c", &big, 3, 5);
        enc.write_chunk(&chunk).unwrap();
        let mut second = ChunkBuilder::new();
        second.string(b"s", b"v", 0);
        second.set(b"d", &big, 4, 0);
        enc.write_chunk(&second).unwrap();
    });
    let snap = Snapshot::open(&bytes).unwrap();
    let mut paged = 0;
    for span in snap.chunks() {
        for r in snap.records(span).unwrap() {
            if let Record::Set {
                table,
                table_offset,
                ..
            } = r.unwrap()
            {
                if table.len() >= 4096 {
                    assert_eq!(table_offset % 4096, 0);
                    assert_eq!(table, &big[..]);
                    paged += 1;
                }
            }
        }
    }
    assert_eq!(paged, 3);
}
