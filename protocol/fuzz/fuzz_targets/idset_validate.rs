//! The idset validator over arbitrary bytes, and the table operations behind it.
//!
//! Invariants: `validate` never panics (and returns, the run's timeout catches a
//! loop); a table it accepts behaves as a set (iteration yields `len()` distinct ids,
//! each of which `contains` finds), keeps every stored id within the first
//! `MAX_PROBE` slots of its probe sequence, stays valid through in-place inserts and
//! removes (whose return values agree with a model; a `Full` insert is rebuilt with
//! the id), and rebuilds to a valid table with the same members; on bytes that pass
//! only the header check, every operation is still panic-free, and a batch lookup
//! answers as the lookups one at a time do. The levels of `check`
//! nest (what `Full` accepts `Sample` accepts, and `Structure` what `Sample` does), and
//! a table with only its structure proven keeps it through updates. Input that is not a
//! table is also read as little-endian ids to build: the builder's output must
//! validate and hold exactly those ids.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use relcache_protocol::idset::{
    check, hash, looks_like_table, probe_limit, rebuild, rebuild_with, start_and_step, validate,
    Builder, Check, Full, Header, TableMut, TableRef,
};

/// Whether every slot id sits within the first `MAX_PROBE` slots of its probe
/// sequence, walked here by FORMAT.md §4 rather than by the crate.
fn within_bound(table: &TableRef<'_>) -> bool {
    let cap = u64::from(table.capacity());
    table.slots(0).enumerate().all(|(i, id)| {
        let Some(id) = id else { return true };
        let (start, step) = start_and_step(hash(id, table.seed()), table.capacity());
        (0..u64::from(probe_limit(table.capacity())))
            .any(|k| (u64::from(start) + k * u64::from(step)) % cap == i as u64)
    })
}

fn check_set(table: TableRef<'_>) -> HashSet<u64> {
    assert!(within_bound(&table), "an id past the probe bound");
    let members: Vec<u64> = table.iter().collect();
    let set: HashSet<u64> = members.iter().copied().collect();
    assert_eq!(set.len(), members.len(), "an id iterated twice");
    assert_eq!(members.len() as u64, table.len());
    for &id in &members {
        assert!(table.contains(id));
    }
    assert!(table.contains_each(members.iter().copied()).all(|hit| hit));
    set
}

/// The batch lookup answers as `contains` does one id at a time, on any bytes.
fn check_batch(table: &TableRef<'_>, ids: &[u64]) {
    assert!(table
        .contains_each(ids.iter().copied())
        .eq(ids.iter().map(|&id| table.contains(id))));
}

/// Ids to update with: some from the input, plus the markers and small values.
fn op_ids(data: &[u8]) -> Vec<u64> {
    let mut ids = vec![0, 1, 2, 3, u64::MAX];
    ids.extend(
        data.rchunks_exact(8)
            .take(16)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
    );
    ids
}

fuzz_target!(|data: &[u8]| {
    let levels = [Check::Structure, Check::Sample, Check::Full].map(|how| check(data, how).is_ok());
    assert!(
        levels[2] <= levels[1] && levels[1] <= levels[0],
        "levels do not nest: {levels:?}"
    );
    match validate(data) {
        Ok(table) => {
            let mut model = check_set(table);
            if let Ok(rebuilt) = rebuild(&table, 1) {
                let rebuilt = validate(&rebuilt).expect("a rebuild is valid");
                assert_eq!(check_set(rebuilt), model);
            }
            let mut bytes = data.to_vec();
            for (k, id) in op_ids(data).into_iter().enumerate() {
                let mut table = TableMut::open(&mut bytes).unwrap();
                if k % 3 == 2 {
                    assert_eq!(table.remove(id), model.remove(&id));
                } else {
                    match table.insert(id) {
                        Ok(added) => assert_eq!(added, model.insert(id)),
                        Err(Full) => {
                            assert!(!model.contains(&id));
                            let Ok(rebuilt) = rebuild_with(&table.as_table(), &[id], 0) else {
                                return;
                            };
                            bytes = rebuilt;
                            model.insert(id);
                        }
                    }
                }
                match validate(&bytes) {
                    Ok(table) => assert_eq!(check_set(table), model),
                    Err(e) => panic!("an update broke a valid table: {e}"),
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
            if Header::parse(data).is_ok() {
                let mut bytes = data.to_vec();
                let table = TableRef::open(&bytes).unwrap();
                let _ = table.iter().count();
                for id in op_ids(data) {
                    let _ = table.contains(id);
                }
                let members: Vec<u64> = table.iter().take(100).collect();
                check_batch(&table, &members);
                check_batch(&table, &op_ids(data));
                if let Ok(rebuilt) = rebuild(&table, 0) {
                    validate(&rebuilt).expect("a rebuild is valid");
                }
                let mut table = TableMut::open(&mut bytes).unwrap();
                for id in op_ids(data) {
                    let _ = table.insert(id);
                    let _ = table.remove(id ^ 1);
                }
                if levels[0] {
                    assert!(
                        check(&bytes, Check::Structure).is_ok(),
                        "an update broke a table's structure"
                    );
                }
            }
        }
    }

    if !looks_like_table(data) {
        let ids: Vec<u64> = data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let bytes = Builder::new()
            .seed(ids.first().copied().unwrap_or(0))
            .build(&ids);
        let table = validate(&bytes).expect("builder output is valid");
        assert_eq!(
            check_set(table),
            ids.iter().copied().collect::<HashSet<u64>>()
        );
    }
});
