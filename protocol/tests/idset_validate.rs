//! One test per validator error (input crafted by hand, message checked), plus the
//! header-only `open`, the helpers around `validate`, and what each level of `check`
//! proves.

use relcache_protocol::idset::{
    check, hash, looks_like_table, start_and_step, validate, validate_mut, Builder, Check,
    FormatError, Header, TableMut, TableRef, DELETED, EMPTY, HEADER_LEN, MAGIC, MAX_PROBE,
    OFF_CAPACITY, OFF_COUNT, OFF_DELETED, OFF_FLAGS, OFF_RESERVED, OFF_VERSION, SAMPLE_SLOTS,
    SLOT_LEN,
};

fn set_u32(bytes: &mut [u8], off: usize, v: u32) {
    bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn set_slot(bytes: &mut [u8], slot: u64, v: u64) {
    let off = HEADER_LEN + SLOT_LEN * slot as usize;
    bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// An all-empty table with this capacity (prime or not) and seed 0.
fn blank(capacity: u32) -> Vec<u8> {
    let header = Header {
        version: 1,
        flags: 0,
        seed: 0,
        capacity,
        count: 0,
        deleted: 0,
    };
    let mut bytes = header.to_bytes().to_vec();
    bytes.resize(HEADER_LEN + SLOT_LEN * capacity as usize, 0);
    bytes
}

/// The first `n` slots of the probe sequence of `id` in a seed-0 table.
fn probe(id: u64, capacity: u32, n: usize) -> Vec<u64> {
    let (start, step) = start_and_step(hash(id, 0), capacity);
    let (mut slot, step, cap) = (u64::from(start), u64::from(step), u64::from(capacity));
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(slot);
        slot = (slot + step) % cap;
    }
    out
}

fn err(bytes: &[u8]) -> FormatError {
    validate(bytes).expect_err("validate accepted a bad table")
}

#[test]
fn accepts_built_tables() {
    for ids in [
        &[][..],
        &[1, 2, 3],
        &[0, u64::MAX],
        &[0, u64::MAX, 5, 6, 7, 8, 9],
    ] {
        let bytes = Builder::new().build(ids);
        let table = validate(&bytes).unwrap();
        assert_eq!(table.len(), ids.len() as u64);
        assert!(looks_like_table(&bytes));
    }
}

#[test]
fn bad_magic() {
    for input in [
        &b"hello, world, this is not a table at all"[..],
        b"abc",
        b"\x89RCIDX",
    ] {
        assert_eq!(err(input), FormatError::BadMagic);
        assert!(!looks_like_table(input));
    }
    assert_eq!(
        FormatError::BadMagic.to_string(),
        "bad magic: an idset table starts with the bytes 89 52 43 49 44 53"
    );
}

#[test]
fn too_short() {
    let bytes = Builder::new().build(&[1]);
    assert_eq!(err(&bytes[..20]), FormatError::TooShort { len: 20 });
    assert_eq!(err(&bytes[..31]), FormatError::TooShort { len: 31 });
    // Prefixes of the magic (including nothing) are short tables, not bad magic.
    assert_eq!(err(&MAGIC[..3]), FormatError::TooShort { len: 3 });
    assert_eq!(err(b""), FormatError::TooShort { len: 0 });
    assert_eq!(
        err(&bytes[..20]).to_string(),
        "table is 20 bytes, shorter than the 32-byte header"
    );
}

#[test]
fn unsupported_version() {
    let mut bytes = Builder::new().build(&[1]);
    bytes[OFF_VERSION] = 7;
    assert_eq!(err(&bytes), FormatError::UnsupportedVersion { version: 7 });
    assert_eq!(
        err(&bytes).to_string(),
        "unsupported table version 7 (this server reads version 1)"
    );
    bytes[OFF_VERSION] = 0;
    assert_eq!(err(&bytes), FormatError::UnsupportedVersion { version: 0 });
}

#[test]
fn unknown_flags() {
    let mut bytes = Builder::new().build(&[1]);
    bytes[OFF_FLAGS] = 0x04;
    assert_eq!(err(&bytes), FormatError::UnknownFlags { flags: 0x04 });
    assert_eq!(
        err(&bytes).to_string(),
        "unknown flag bits set (flags byte 0x04, only 0x03 is defined)"
    );
    bytes[OFF_FLAGS] = 0x83;
    assert_eq!(err(&bytes), FormatError::UnknownFlags { flags: 0x83 });
}

#[test]
fn reserved_not_zero() {
    let mut bytes = Builder::new().build(&[1]);
    set_u32(&mut bytes, OFF_RESERVED, 5);
    assert_eq!(err(&bytes), FormatError::ReservedNotZero { reserved: 5 });
    assert_eq!(
        err(&bytes).to_string(),
        "reserved header field is 5, must be 0"
    );
}

#[test]
fn capacity_out_of_range() {
    for capacity in [0, 1, 4_294_967_292, u32::MAX] {
        let mut bytes = blank(2);
        set_u32(&mut bytes, OFF_CAPACITY, capacity);
        assert_eq!(err(&bytes), FormatError::CapacityOutOfRange { capacity });
    }
    let mut bytes = blank(2);
    set_u32(&mut bytes, OFF_CAPACITY, 1);
    assert_eq!(
        err(&bytes).to_string(),
        "capacity 1 is out of range (2 to 4294967291)"
    );
}

#[test]
fn length_mismatch() {
    let mut bytes = blank(120);
    bytes.resize(1000, 0);
    assert_eq!(
        err(&bytes),
        FormatError::LengthMismatch {
            len: 1000,
            capacity: 120,
            expected: 992
        }
    );
    assert_eq!(
        err(&bytes).to_string(),
        "table length 1000 does not match capacity 120 (expected 992 bytes)"
    );

    // One byte too many or too few, and a huge claimed capacity on a short value.
    let mut bytes = Builder::new().build(&[1, 2, 3]);
    bytes.push(0);
    assert!(matches!(
        err(&bytes),
        FormatError::LengthMismatch {
            len: 73,
            capacity: 5,
            ..
        }
    ));
    bytes.truncate(71);
    assert!(matches!(
        err(&bytes),
        FormatError::LengthMismatch {
            len: 71,
            capacity: 5,
            ..
        }
    ));
    let mut bytes = blank(2);
    set_u32(&mut bytes, OFF_CAPACITY, 4_294_967_291);
    assert_eq!(
        err(&bytes),
        FormatError::LengthMismatch {
            len: 48,
            capacity: 4_294_967_291,
            expected: 34_359_738_360
        }
    );
}

#[test]
fn capacity_not_prime() {
    let bytes = blank(10);
    assert_eq!(err(&bytes), FormatError::CapacityNotPrime { capacity: 10 });
    assert_eq!(err(&bytes).to_string(), "capacity 10 is not prime");
    for capacity in [4, 9, 25, 561] {
        assert_eq!(
            err(&blank(capacity)),
            FormatError::CapacityNotPrime { capacity }
        );
    }
    // The header-only check does not test primality.
    assert!(TableRef::open(&blank(10)).is_ok());
}

#[test]
fn count_mismatch() {
    let mut bytes = Builder::new().build(&[1, 2, 3, 4, 5, 6, 7]);
    set_u32(&mut bytes, OFF_COUNT, 5);
    assert_eq!(
        err(&bytes),
        FormatError::CountMismatch {
            header: 5,
            actual: 7
        }
    );
    assert_eq!(err(&bytes).to_string(), "header count 5 but 7 ids in slots");
    // The flag ids are not counted in `count`.
    let mut bytes = Builder::new().build(&[0, 1]);
    set_u32(&mut bytes, OFF_COUNT, 2);
    assert_eq!(
        err(&bytes),
        FormatError::CountMismatch {
            header: 2,
            actual: 1
        }
    );
}

#[test]
fn deleted_mismatch() {
    let mut bytes = Builder::new().build(&[1, 2, 3]);
    TableMut::open(&mut bytes).unwrap().remove(2);
    set_u32(&mut bytes, OFF_DELETED, 0);
    assert_eq!(
        err(&bytes),
        FormatError::DeletedMismatch {
            header: 0,
            actual: 1
        }
    );
    assert_eq!(
        err(&bytes).to_string(),
        "header deleted count 0 but 1 deleted slots"
    );
}

#[test]
fn no_empty_slot() {
    // Two ids in two slots: counts right, nothing empty.
    let mut bytes = blank(2);
    set_slot(&mut bytes, 0, 10);
    set_slot(&mut bytes, 1, 11);
    set_u32(&mut bytes, OFF_COUNT, 2);
    assert_eq!(err(&bytes), FormatError::NoEmptySlot);
    assert_eq!(
        err(&bytes).to_string(),
        "no empty slot: a table must keep at least one"
    );
    // Deleted slots count as used.
    let mut bytes = blank(3);
    for slot in 0..3 {
        set_slot(&mut bytes, slot, DELETED);
    }
    set_u32(&mut bytes, OFF_DELETED, 3);
    assert_eq!(err(&bytes), FormatError::NoEmptySlot);
}

#[test]
fn unreachable() {
    // 42 sits in the second slot of its probe sequence while the first is empty.
    let seq = probe(42, 11, 2);
    let mut bytes = blank(11);
    set_slot(&mut bytes, seq[1], 42);
    set_u32(&mut bytes, OFF_COUNT, 1);
    assert_eq!(
        err(&bytes),
        FormatError::Unreachable {
            id: 42,
            slot: seq[1] as u32
        }
    );
    assert_eq!(
        err(&bytes).to_string(),
        format!(
            "id 42 at slot {} is not reachable from its probe sequence",
            seq[1]
        )
    );
    // With a tombstone in the first slot it is reachable.
    set_slot(&mut bytes, seq[0], DELETED);
    set_u32(&mut bytes, OFF_DELETED, 1);
    let table = validate(&bytes).unwrap();
    assert!(table.contains(42));
}

#[test]
fn duplicate() {
    let seq = probe(42, 11, 2);
    let mut bytes = blank(11);
    set_slot(&mut bytes, seq[0], 42);
    set_slot(&mut bytes, seq[1], 42);
    set_u32(&mut bytes, OFF_COUNT, 2);
    let (first, second) = (seq[0] as u32, seq[1] as u32);
    assert_eq!(
        err(&bytes),
        FormatError::Duplicate {
            id: 42,
            first,
            second
        }
    );
    assert_eq!(
        err(&bytes).to_string(),
        format!("id 42 appears twice (slots {first} and {second})")
    );
}

/// A seed-0 table of `capacity` slots with `id` at index `at` of its probe sequence,
/// every slot before it there DELETED, and the rest EMPTY: reachable, so valid
/// before the bound existed; valid now exactly when `at < MAX_PROBE`.
fn id_at_depth(id: u64, capacity: u32, at: usize) -> (Vec<u8>, u64) {
    let seq = probe(id, capacity, at + 1);
    let mut bytes = blank(capacity);
    for &slot in &seq[..at] {
        set_slot(&mut bytes, slot, DELETED);
    }
    set_slot(&mut bytes, seq[at], id);
    set_u32(&mut bytes, OFF_COUNT, 1);
    set_u32(&mut bytes, OFF_DELETED, at as u32);
    (bytes, seq[at])
}

#[test]
fn past_probe_bound() {
    let bound = MAX_PROBE as usize;
    // At the last read the bound allows: valid, and found.
    let (bytes, _) = id_at_depth(42, 131, bound - 1);
    assert!(validate(&bytes).unwrap().contains(42));
    // One further: refused, though the lookup would reach it without the bound.
    let (bytes, slot) = id_at_depth(42, 131, bound);
    assert_eq!(
        err(&bytes),
        FormatError::PastProbeBound {
            id: 42,
            slot: slot as u32
        }
    );
    assert_eq!(
        err(&bytes).to_string(),
        format!(
            "id 42 at slot {slot} is not within the first 128 slots of its probe sequence; \
             rebuild the table with a lower load or another seed"
        )
    );
    // A lookup stops at the bound even in bytes nobody validated.
    assert!(!TableRef::open(&bytes).unwrap().contains(42));
    // Below MAX_PROBE slots the bound is the whole table: any reachable slot is fine.
    let (bytes, _) = id_at_depth(42, 127, 125);
    assert!(validate(&bytes).unwrap().contains(42));
}

#[test]
fn a_dense_table_that_passed_before_is_refused() {
    // Capacity 211, slot 0 the only empty one, and 210 ids each of whose probe
    // sequence visits slot 0 last (start == step), so any placement is reachable. Put
    // them in slots 1..=210 in order: ids deep in their sequence are past the bound.
    let cap = 211u32;
    let ids: Vec<u64> = (1u64..)
        .filter(|&id| {
            let (start, step) = start_and_step(hash(id, 0), cap);
            start == step
        })
        .take(cap as usize - 1)
        .collect();
    let mut bytes = blank(cap);
    let mut first_past = None;
    for (k, &id) in ids.iter().enumerate() {
        let slot = k as u64 + 1;
        set_slot(&mut bytes, slot, id);
        let seq = probe(id, cap, cap as usize);
        assert_eq!(seq[cap as usize - 1], 0);
        let depth = seq.iter().position(|&s| s == slot).unwrap();
        if depth >= MAX_PROBE as usize && first_past.is_none() {
            first_past = Some((id, slot as u32));
        }
    }
    set_u32(&mut bytes, OFF_COUNT, cap - 1);
    let (id, slot) = first_past.expect("some id sits past the bound");
    assert_eq!(err(&bytes), FormatError::PastProbeBound { id, slot });
    // The same ids placed by the builder are within the bound, at whatever seed and
    // capacity its attempts settle on.
    let built = Builder::new().seed(0).max_load(1.0).build(&ids);
    let table = validate(&built).unwrap();
    assert_eq!(table.len(), ids.len() as u64);
    assert!(ids.iter().all(|&id| table.contains(id)));
}

#[test]
fn open_checks_only_the_header() {
    // Wrong counts and an unreachable id: `open` accepts, `validate` refuses, and
    // operations on the opened table stay bounded.
    let seq = probe(42, 11, 2);
    let mut bytes = blank(11);
    set_slot(&mut bytes, seq[1], 42);
    set_u32(&mut bytes, OFF_COUNT, 3);
    assert!(validate(&bytes).is_err());
    assert!(validate_mut(&mut bytes).is_err());
    let table = TableRef::open(&bytes).unwrap();
    assert!(!table.contains(42));
    assert_eq!(table.len(), 3);
    assert_eq!(table.iter().collect::<Vec<_>>(), [42]);
    let mut table = TableMut::open(&mut bytes).unwrap();
    assert_eq!(table.insert(42), Ok(true)); // a duplicate, in a table already broken
    assert!(table.remove(42));
    let header = Header::parse(&bytes).unwrap();
    assert_eq!((header.count, header.deleted), (3, 1));
    // The header's counts are what `insert` trusts for the in-place limit.
    set_u32(&mut bytes, OFF_COUNT, 1_000);
    assert_eq!(
        TableMut::open(&mut bytes).unwrap().insert(43),
        Err(relcache_protocol::idset::Full)
    );
}

#[test]
fn header_round_trip() {
    let bytes = Builder::new().seed(7).build(&[0, 9, 10]);
    let header = Header::parse(&bytes).unwrap();
    assert_eq!(
        header,
        Header {
            version: 1,
            flags: 1,
            seed: 7,
            capacity: 3,
            count: 2,
            deleted: 0
        }
    );
    assert_eq!(header.len(), 3);
    assert_eq!(&header.to_bytes()[..], &bytes[..HEADER_LEN]);
    let table = validate(&bytes).unwrap();
    assert_eq!(table.header(), header);
    assert_eq!(table.as_bytes(), &bytes[..]);
    assert!(!table.contains(EMPTY + 1));
}

/// A built table of `n` ids with one of them moved out of reach: the id in the first
/// slot after `from` that holds one at the start of its sequence goes to the first
/// EMPTY slot after `to` that its lookup would not reach, and its old slot becomes
/// DELETED (so no other id's lookup changes). Returns the bytes, the id and its new
/// slot.
fn misplaced(n: u64, from: u64, to: u64) -> (Vec<u8>, u64, u64) {
    let ids: Vec<u64> = (1..=n).map(|i| i * 7_919).collect();
    let mut bytes = Builder::new().seed(0).build(&ids);
    let table = TableRef::open(&bytes).unwrap();
    assert_eq!(table.seed(), 0, "the builder reseeded");
    let cap = table.capacity();
    let (old, id) = (from..u64::from(cap))
        .find_map(|i| {
            let id = table.slot(i)?;
            (probe(id, cap, 1)[0] == i).then_some((i, id))
        })
        .unwrap();
    // The lookup of `id` once its slot is DELETED, through the EMPTY slot ending it.
    let seq = probe(id, cap, cap as usize);
    let end = seq
        .iter()
        .position(|&s| s != old && table.slot(s).is_none())
        .unwrap();
    let path = &seq[..=end];
    let new = (to..u64::from(cap))
        .find(|&s| table.slot(s).is_none() && !path.contains(&s) && s != old)
        .unwrap();
    let deleted = table.deleted();
    set_slot(&mut bytes, old, DELETED);
    set_slot(&mut bytes, new, id);
    set_u32(&mut bytes, OFF_DELETED, deleted + 1);
    (bytes, id, new)
}

#[test]
fn check_levels_prove_what_they_say() {
    // 20,000 ids: 27,000-odd slots, a sample stride of about 100.
    let stride = |bytes: &[u8]| u64::from(TableRef::open(bytes).unwrap().capacity() / SAMPLE_SLOTS);
    let (bytes, id, new) = misplaced(20_000, 0, 1);
    let k = stride(&bytes);
    assert!(k > 50, "stride {k}");
    assert_ne!(new % k, 0, "the misplaced id landed on a sampled slot");
    let full = FormatError::Unreachable {
        id,
        slot: new as u32,
    };
    assert_eq!(check(&bytes, Check::Full).err(), Some(full.clone()));
    assert_eq!(validate(&bytes).err(), Some(full));
    // Outside the sample, the structure is all the lower levels see.
    let table = check(&bytes, Check::Sample).unwrap();
    assert!(check(&bytes, Check::Structure).is_ok());
    // What such a table answers about itself: the id counts and is listed, but its
    // lookup ends at an EMPTY slot.
    assert_eq!(table.len(), 20_000);
    assert!(table.iter().any(|i| i == id));
    assert!(!table.contains(id));

    // The same move onto a sampled slot is caught by the sample.
    let (bytes, id, new) = (1..)
        .map(|m| misplaced(20_000, 0, m * k))
        .find(|(_, _, new)| new % k == 0)
        .unwrap();
    let err = check(&bytes, Check::Sample).unwrap_err();
    assert_eq!(
        err,
        FormatError::Unreachable {
            id,
            slot: new as u32
        }
    );
    assert!(check(&bytes, Check::Structure).is_ok());
}

#[test]
fn the_sample_catches_a_builder_with_the_wrong_hash() {
    // Every id placed for one seed while the header names another: what a builder
    // whose hash or step rule is wrong makes: nearly every sampled id is out of
    // place, and the first is refused.
    let ids: Vec<u64> = (1..=20_000u64).map(|i| i * 31).collect();
    let mut bytes = Builder::new().seed(1).build(&ids);
    bytes[8..16].copy_from_slice(&2u64.to_le_bytes());
    assert!(matches!(
        check(&bytes, Check::Sample),
        Err(FormatError::Unreachable { .. } | FormatError::Duplicate { .. })
    ));
    assert!(check(&bytes, Check::Structure).is_ok());
}

#[test]
fn every_level_checks_the_structure_and_small_tables_whole() {
    // A structural fault is refused at every level.
    let mut bytes = Builder::new().build(&[1, 2, 3]);
    set_u32(&mut bytes, OFF_COUNT, 4);
    for how in [Check::Structure, Check::Sample, Check::Full] {
        assert_eq!(
            check(&bytes, how).err(),
            Some(FormatError::CountMismatch {
                header: 4,
                actual: 3
            }),
            "{how:?}"
        );
    }
    // Up to twice SAMPLE_SLOTS slots the sample is every slot.
    let seq = probe(42, 11, 2);
    let mut bytes = blank(11);
    set_slot(&mut bytes, seq[1], 42);
    set_u32(&mut bytes, OFF_COUNT, 1);
    assert!(check(&bytes, Check::Sample).is_err());
    assert!(check(&bytes, Check::Structure).is_ok());
}
