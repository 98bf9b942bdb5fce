//! Property tests of the idset table against a `HashSet<u64>` model: building,
//! in-place inserts and removes with rebuilds on `Full`, and the validator on arbitrary
//! and corrupted bytes (it must never panic, and whatever it accepts must behave as a
//! set and stay valid under updates). Every table checked also keeps the probe bound:
//! each stored id sits within the first `MAX_PROBE` slots of its sequence, and a
//! lookup, modelled here with its reads counted, never reads more.

use std::collections::HashSet;

use proptest::prelude::*;
use relcache_protocol::idset::{
    capacity_for, check, hash, probe_limit, rebuild, rebuild_with, start_and_step, validate,
    Builder, Check, Full, Header, TableMut, TableRef, DEFAULT_MAX_LOAD, DEFAULT_SEED, DELETED,
    EMPTY, HEADER_LEN, MAGIC, MASK_IDS, MAX_PROBE, SLOT_LEN,
};

/// Ids biased to the two marker values, small values (duplicates and, in small tables,
/// collisions) and values near `u64::MAX`.
fn id() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        1 => Just(u64::MAX),
        6 => 1u64..48,
        3 => any::<u64>(),
        1 => (u64::MAX - 16)..u64::MAX,
    ]
}

fn seed() -> impl Strategy<Value = u64> {
    prop_oneof![Just(DEFAULT_SEED), Just(0u64), any::<u64>()]
}

/// The slots of `id`'s probe sequence in `table`, all `capacity` of them, computed
/// here from FORMAT.md §4 rather than with the crate's walker.
fn sequence(table: &TableRef<'_>, id: u64) -> Vec<u64> {
    let cap = u64::from(table.capacity());
    let (start, step) = start_and_step(hash(id, table.seed()), table.capacity());
    (0..cap)
        .map(|k| (u64::from(start) + k * u64::from(step)) % cap)
        .collect()
}

/// FORMAT.md §5's lookup of a slot id, counting its reads: whether it found the id.
fn model_lookup(table: &TableRef<'_>, id: u64) -> (bool, u32) {
    let mut reads = 0;
    for slot in sequence(table, id)
        .into_iter()
        .take(probe_limit(table.capacity()) as usize)
    {
        reads += 1;
        let v = table.as_bytes()[HEADER_LEN + SLOT_LEN * slot as usize..][..SLOT_LEN]
            .try_into()
            .map(u64::from_le_bytes)
            .unwrap();
        if v == id {
            return (true, reads);
        }
        if v == EMPTY {
            return (false, reads);
        }
    }
    (false, reads)
}

/// The probe bound on a valid table: every stored id sits within the first
/// `MAX_PROBE` slots of its sequence, and every lookup, of a member or of `absent`
/// ids, ends within `MAX_PROBE` reads with the answer `contains` gives.
fn check_bound(table: &TableRef<'_>, absent: impl IntoIterator<Item = u64>) {
    for (slot, id) in table.slots(0).enumerate() {
        let Some(id) = id else { continue };
        let depth = sequence(table, id)
            .iter()
            .position(|&s| s == slot as u64)
            .unwrap();
        assert!(depth < MAX_PROBE as usize, "id {id} at depth {depth}");
    }
    for id in table.slots(0).flatten().chain(absent) {
        if id == EMPTY || id == DELETED {
            continue;
        }
        let (found, reads) = model_lookup(table, id);
        assert!(reads <= MAX_PROBE, "{reads} reads for {id}");
        assert_eq!(table.contains(id), found, "contains({id})");
    }
}

/// The batch lookups answer `ids` as `contains` does one id at a time, whatever the
/// table's bytes: `contains_each` in order, and `contains_masks` a bit per id, a
/// mask per 64, with no bit set past the last id.
fn check_batch(table: &TableRef<'_>, ids: &[u64]) {
    let one_by_one: Vec<bool> = ids.iter().map(|&id| table.contains(id)).collect();
    let mut answers = table.contains_each(ids.iter().copied());
    assert_eq!(answers.len(), ids.len());
    let first = answers.next();
    assert_eq!(
        answers.len(),
        ids.len().saturating_sub(1),
        "after one answer"
    );
    let each: Vec<bool> = first.into_iter().chain(answers).collect();
    assert_eq!(each, one_by_one, "contains_each({ids:?})");
    let masks: Vec<u64> = table.contains_masks(ids.iter().copied()).collect();
    assert_eq!(
        masks.len(),
        ids.len().div_ceil(MASK_IDS),
        "masks for {} ids",
        ids.len()
    );
    for (k, (&mask, chunk)) in masks.iter().zip(one_by_one.chunks(MASK_IDS)).enumerate() {
        let want = chunk
            .iter()
            .enumerate()
            .fold(0u64, |m, (i, &hit)| m | u64::from(hit) << i);
        assert_eq!(mask, want, "mask {k} of {ids:?}");
    }
}

/// Members, absent ids and the markers interleaved, cut at lengths either side of a
/// mask's 64 ids.
fn check_batches(table: &TableRef<'_>) {
    let members: Vec<u64> = table.iter().collect();
    let absent = [1, 2, 3, 47, u64::MAX - 1, 1 << 40, 0x1234_5678_9abc];
    let mut ids = Vec::new();
    for k in 0..150 {
        ids.push(match k % 3 {
            0 | 1 if !members.is_empty() => members[k * 7 % members.len()],
            _ => absent[k % absent.len()] ^ (k as u64 >> 3),
        });
        if k % 40 == 0 {
            ids.extend([0, u64::MAX]);
        }
    }
    for len in [0, 1, 63, 64, 65, 128, 129, ids.len()] {
        check_batch(table, &ids[..len]);
    }
}

/// Checks what any table the validator accepts must satisfy, against `model` if given.
fn check_set(table: TableRef<'_>, model: Option<&HashSet<u64>>) {
    check_bound(
        &table,
        [1, 2, 3, 47, u64::MAX - 1, 1 << 40, 0x1234_5678_9abc],
    );
    check_batches(&table);
    let members: Vec<u64> = table.iter().collect();
    let distinct: HashSet<u64> = members.iter().copied().collect();
    assert_eq!(distinct.len(), members.len(), "iter yields an id twice");
    assert_eq!(members.len() as u64, table.len());
    assert_eq!(table.is_empty(), members.is_empty());
    for &id in &members {
        assert!(table.contains(id), "{id} iterated but not contained");
    }
    let h = table.header();
    assert!(u64::from(h.count) + u64::from(h.deleted) < u64::from(h.capacity));
    // Slot by slot: the slot ids are the members but the flag ids, in iteration order.
    let cap = u64::from(h.capacity);
    let by_slot: Vec<Option<u64>> = table.slots(0).collect();
    assert_eq!(by_slot.len() as u64, cap);
    for (i, &s) in by_slot.iter().enumerate() {
        assert_eq!(table.slot(i as u64), s, "slot({i})");
    }
    assert_eq!(table.slot(cap), None);
    assert_eq!(table.slot(u64::MAX), None);
    let in_slots: Vec<u64> = by_slot.iter().flatten().copied().collect();
    let want: Vec<u64> = members
        .iter()
        .copied()
        .filter(|&id| id != 0 && id != u64::MAX)
        .collect();
    assert_eq!(in_slots, want);
    for from in [1, cap / 2, cap, cap + 1, u64::MAX] {
        let rest = &by_slot[from.min(cap) as usize..];
        assert_eq!(table.slots(from).len(), rest.len(), "slots({from})");
        assert!(table.slots(from).eq(rest.iter().copied()), "slots({from})");
    }
    if let Some(model) = model {
        assert_eq!(&distinct, model);
        for id in [0, 1, 2, 47, u64::MAX, u64::MAX - 1, 0x1234_5678_9abc] {
            assert_eq!(table.contains(id), model.contains(&id), "contains({id})");
        }
    }
}

fn model_of(ids: &[u64]) -> HashSet<u64> {
    ids.iter().copied().collect()
}

/// Fresh ids absent from `model`, far from the generated ones.
fn fresh(model: &HashSet<u64>, n: usize) -> Vec<u64> {
    (1u64 << 40..)
        .filter(|id| !model.contains(id))
        .take(n)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn build_agrees_with_model(
        ids in prop::collection::vec(id(), 0..300),
        seed in seed(),
        reserve in 0usize..64,
        max_load in prop_oneof![Just(DEFAULT_MAX_LOAD), 0.05f64..=1.0],
    ) {
        let builder = Builder::new().seed(seed).reserve(reserve).max_load(max_load);
        let bytes = builder.build(&ids);
        let model = model_of(&ids);
        let table = validate(&bytes).unwrap_or_else(|e| panic!("builder output refused: {e}"));
        check_set(table, Some(&model));
        prop_assert_eq!(table.seed(), seed);
        prop_assert_eq!(table.deleted(), 0);
        let in_slots = model.iter().filter(|&&id| id != 0 && id != u64::MAX).count() as u64;
        prop_assert_eq!(u64::from(table.count()), in_slots);
        prop_assert_eq!(table.capacity(), capacity_for(in_slots + reserve as u64, max_load).unwrap());
        prop_assert!(table.load_factor() <= max_load + 1e-9 || table.count() + 1 == table.capacity());
        // Order of duplicates does not matter, only first occurrences do.
        let mut firsts = Vec::new();
        let mut seen = HashSet::new();
        for &id in &ids {
            if seen.insert(id) {
                firsts.push(id);
            }
        }
        prop_assert_eq!(&builder.build(&firsts), &bytes);
        prop_assert_eq!(&builder.build_iter(ids.iter().copied()), &bytes);
    }

    /// With the default load, `reserve(n)` leaves room for n in-place inserts.
    #[test]
    fn reserve_is_honoured(ids in prop::collection::vec(id(), 0..200), reserve in 0usize..200) {
        let mut bytes = Builder::new().reserve(reserve).build(&ids);
        let mut model = model_of(&ids);
        prop_assert!(validate(&bytes).unwrap().room_in_place() as usize >= reserve);
        let extra = fresh(&model, reserve);
        let mut table = TableMut::open(&mut bytes).unwrap();
        for id in extra {
            prop_assert_eq!(table.insert(id), Ok(true));
            model.insert(id);
        }
        check_set(validate(&bytes).unwrap(), Some(&model));
    }

    #[test]
    fn updates_agree_with_model(
        initial in prop::collection::vec(id(), 0..40),
        seed in seed(),
        ops in prop::collection::vec((any::<bool>(), id()), 0..400),
    ) {
        let mut bytes = Builder::new().seed(seed).build(&initial);
        let mut model = model_of(&initial);
        for (is_insert, id) in ops {
            if is_insert {
                let outcome = TableMut::open(&mut bytes).unwrap().insert(id);
                match outcome {
                    Ok(added) => prop_assert_eq!(added, model.insert(id)),
                    Err(Full) => {
                        prop_assert!(!model.contains(&id), "Full for a member");
                        let before = bytes.clone();
                        let rebuilt =
                            rebuild_with(&TableRef::open(&bytes).unwrap(), &[id], 1).unwrap();
                        prop_assert_eq!(&before, &bytes, "Full changed the table");
                        bytes = rebuilt;
                        let table = validate(&bytes).unwrap();
                        prop_assert_eq!(table.deleted(), 0);
                        prop_assert_eq!(table.seed(), seed);
                        prop_assert!(table.room_in_place() >= 1);
                        prop_assert!(table.contains(id));
                        model.insert(id);
                    }
                }
            } else {
                let removed = TableMut::open(&mut bytes).unwrap().remove(id);
                prop_assert_eq!(removed, model.remove(&id));
            }
            let table = validate(&bytes).unwrap_or_else(|e| panic!("update broke the table: {e}"));
            prop_assert_eq!(table.len(), model.len() as u64);
            prop_assert_eq!(table.contains(id), model.contains(&id));
        }
        let table = validate(&bytes).unwrap();
        check_set(table, Some(&model));
        // A rebuild keeps the members, drops the tombstones.
        let rebuilt = rebuild(&table, 0).unwrap();
        let rebuilt = validate(&rebuilt).unwrap();
        check_set(rebuilt, Some(&model));
        prop_assert_eq!(rebuilt.deleted(), 0);
    }

    #[test]
    fn validate_never_panics_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        with_magic in any::<bool>(),
    ) {
        let mut input = if with_magic { MAGIC.to_vec() } else { Vec::new() };
        if with_magic {
            input.push(1);
        }
        input.extend_from_slice(&bytes);
        if let Ok(table) = validate(&input) {
            check_set(table, None);
        }
        if Header::parse(&input).is_ok() {
            exercise_unvalidated(&mut input);
        }
    }

    /// Random tables with a well-formed header and slots drawn from a small pool, so
    /// that a fair share of them pass validation; those must behave as sets and stay
    /// valid under updates.
    #[test]
    fn random_slot_contents(
        capacity in prop_oneof![Just(2u32), Just(3), Just(5), Just(7), Just(11), Just(13), Just(4), Just(9), Just(31), Just(61)],
        slots in prop::collection::vec(prop_oneof![
            4 => Just(0u64), 1 => Just(u64::MAX), 3 => 1u64..12, 1 => any::<u64>(),
        ], 61),
        flags in 0u8..4,
        seed in prop_oneof![Just(0u64), Just(DEFAULT_SEED), 0u64..4],
        ops in prop::collection::vec((any::<bool>(), 0u64..14), 0..20),
    ) {
        let slots = &slots[..capacity as usize];
        let count = slots.iter().filter(|&&v| v != 0 && v != u64::MAX).count() as u32;
        let deleted = slots.iter().filter(|&&v| v == u64::MAX).count() as u32;
        let header = Header { version: 1, flags, seed, capacity, count, deleted };
        let mut bytes = header.to_bytes().to_vec();
        for v in slots {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let levels = [Check::Structure, Check::Sample, Check::Full]
            .map(|how| check(&bytes, how).is_ok());
        prop_assert!(levels[2] <= levels[1] && levels[1] <= levels[0], "{:?}", levels);
        if levels[0] {
            exercise_structured(&mut bytes.clone(), &ops)?;
        }
        let Ok(table) = validate(&bytes) else {
            exercise_unvalidated(&mut bytes);
            return Ok(());
        };
        check_set(table, None);
        let mut model: HashSet<u64> = table.iter().collect();
        for (is_insert, id) in ops {
            let mut table = TableMut::open(&mut bytes).unwrap();
            if is_insert {
                match table.insert(id) {
                    Ok(added) => prop_assert_eq!(added, model.insert(id)),
                    Err(Full) => prop_assert!(!model.contains(&id)),
                }
            } else {
                prop_assert_eq!(table.remove(id), model.remove(&id));
            }
            check_set(validate(&bytes).unwrap(), Some(&model));
        }
    }

    #[test]
    fn validate_never_panics_on_corrupted_tables(
        ids in prop::collection::vec(id(), 0..120),
        seed in seed(),
        corruptions in prop::collection::vec(corruption(), 1..6),
    ) {
        let mut bytes = Builder::new().seed(seed).build(&ids);
        for c in &corruptions {
            c.apply(&mut bytes);
        }
        if let Ok(table) = validate(&bytes) {
            check_set(table, None);
            let members: HashSet<u64> = table.iter().collect();
            let mut copy = bytes.clone();
            let mut table = TableMut::open(&mut copy).unwrap();
            for id in [1u64, 2, 3, 1 << 50] {
                let _ = table.insert(id);
            }
            let after = validate(&copy).unwrap();
            check_set(after, None);
            prop_assert!(members.iter().all(|&id| after.contains(id)));
        }
        if Header::parse(&bytes).is_ok() {
            exercise_unvalidated(&mut bytes);
        }
    }
}

/// What a table that passed only [`Check::Structure`] keeps through updates, as the
/// server applies them (a rebuild with the id on `Full`): its counts stay those of
/// its slots, one slot stays EMPTY, iteration yields `len` ids, and a rebuild is a
/// valid table of exactly the distinct ids it held. This is what lets the server
/// store such a table without proving every id's placement.
fn exercise_structured(bytes: &mut Vec<u8>, ops: &[(bool, u64)]) -> Result<(), TestCaseError> {
    for &(is_insert, id) in ops {
        let mut table = TableMut::open(bytes).unwrap();
        if is_insert {
            if let Err(Full) = table.insert(id) {
                let held: HashSet<u64> = table.as_table().iter().chain([id]).collect();
                let rebuilt = rebuild_with(&table.as_table(), &[id], 0).unwrap();
                let valid = validate(&rebuilt).unwrap();
                prop_assert_eq!(valid.iter().collect::<HashSet<u64>>(), held);
                *bytes = rebuilt;
            }
        } else {
            table.remove(id);
        }
        let table = check(bytes, Check::Structure);
        prop_assert!(table.is_ok(), "{:?}", table.err());
        let table = table.unwrap();
        prop_assert_eq!(table.iter().count() as u64, table.len());
    }
    let table = TableRef::open(bytes).unwrap();
    let held: HashSet<u64> = table.iter().collect();
    let rebuilt = rebuild(&table, 0).unwrap();
    prop_assert_eq!(
        validate(&rebuilt).unwrap().iter().collect::<HashSet<u64>>(),
        held
    );
    Ok(())
}

/// Runs every operation on a table that passed only the header check: nothing may
/// panic, loop or read out of bounds.
fn exercise_unvalidated(bytes: &mut [u8]) {
    let table = TableRef::open(bytes).unwrap();
    let _ = table.iter().count();
    let _ = (
        table.len(),
        table.load_factor(),
        table.room_in_place(),
        format!("{table:?}"),
    );
    for id in [0, 1, 2, 3, 7, 11, u64::MAX, 1 << 63] {
        let _ = table.contains(id);
    }
    check_batches(&table);
    if let Ok(rebuilt) = rebuild(&table, 1) {
        validate(&rebuilt).expect("a rebuild is always valid");
    }
    let mut table = TableMut::open(bytes).unwrap();
    for id in [0, 1, 2, 3, 7, 11, u64::MAX, 1 << 63] {
        let _ = table.insert(id);
        let _ = table.remove(id.wrapping_add(1));
        let _ = table.contains(id);
    }
}

#[derive(Clone, Debug)]
enum Corruption {
    /// XOR a byte (index taken modulo the length).
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
    /// Write a u32 into a header field (offset 16, 20, 24 or 28).
    HeaderField(usize, u32),
    /// Write a value into a slot (index modulo the capacity).
    Slot(usize, u64),
    SwapSlots(usize, usize),
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..).prop_map(|(i, x)| Corruption::Flip(i, x)),
        1 => (0usize..200).prop_map(Corruption::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Corruption::Extend),
        2 => (prop_oneof![Just(16usize), Just(20), Just(24), Just(28)],
              prop_oneof![0u32..8, any::<u32>()])
            .prop_map(|(o, v)| Corruption::HeaderField(o, v)),
        3 => (any::<usize>(), prop_oneof![Just(0u64), Just(u64::MAX), 1u64..48, any::<u64>()])
            .prop_map(|(i, v)| Corruption::Slot(i, v)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Corruption::SwapSlots(i, j)),
    ]
}

impl Corruption {
    fn apply(&self, bytes: &mut Vec<u8>) {
        let slots = bytes.len().saturating_sub(HEADER_LEN) / SLOT_LEN;
        let slot = |i: usize| HEADER_LEN + SLOT_LEN * (i % slots);
        match *self {
            Self::Flip(i, x) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes[i] ^= x;
            }
            Self::Truncate(n) => bytes.truncate(n),
            Self::Extend(ref more) => bytes.extend_from_slice(more),
            Self::HeaderField(off, v) if bytes.len() >= HEADER_LEN => {
                bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
            }
            Self::Slot(i, v) if slots > 0 => {
                let o = slot(i);
                bytes[o..o + 8].copy_from_slice(&v.to_le_bytes());
            }
            Self::SwapSlots(i, j) if slots > 0 => {
                let (a, b) = (slot(i), slot(j));
                for k in 0..SLOT_LEN {
                    bytes.swap(a + k, b + k);
                }
            }
            _ => {}
        }
    }
}

/// Ids that land on the same start slot, inserted and removed in every order.
#[test]
fn colliding_ids_in_every_order() {
    let builder = Builder::new().reserve(8);
    let empty = builder.build(&[]);
    let cap = validate(&empty).unwrap().capacity();
    let target = {
        let (start, _) = relcache_protocol::idset::start_and_step(
            relcache_protocol::idset::hash(1, DEFAULT_SEED),
            cap,
        );
        start
    };
    let colliding: Vec<u64> = (1u64..)
        .filter(|&id| {
            relcache_protocol::idset::start_and_step(
                relcache_protocol::idset::hash(id, DEFAULT_SEED),
                cap,
            )
            .0 == target
        })
        .take(4)
        .collect();
    // All 24 orders of inserting the four, then removing them in reverse.
    let mut order = [0usize, 1, 2, 3];
    for _ in 0..24 {
        let mut bytes = empty.clone();
        let mut model = HashSet::new();
        for &k in &order {
            assert_eq!(
                TableMut::open(&mut bytes).unwrap().insert(colliding[k]),
                Ok(true)
            );
            model.insert(colliding[k]);
            check_set(validate(&bytes).unwrap(), Some(&model));
        }
        for &k in order.iter().rev() {
            assert!(TableMut::open(&mut bytes).unwrap().remove(colliding[k]));
            model.remove(&colliding[k]);
            check_set(validate(&bytes).unwrap(), Some(&model));
        }
        // Reinsert: the tombstones get reused, the load does not grow.
        let used = {
            let t = validate(&bytes).unwrap();
            t.count() + t.deleted()
        };
        for &k in &order {
            TableMut::open(&mut bytes)
                .unwrap()
                .insert(colliding[k])
                .unwrap();
        }
        let t = validate(&bytes).unwrap();
        assert_eq!(t.count() + t.deleted(), used);
        next_permutation(&mut order);
    }
}

fn next_permutation(a: &mut [usize]) {
    let Some(i) = (0..a.len() - 1).rev().find(|&i| a[i] < a[i + 1]) else {
        a.reverse();
        return;
    };
    let j = (i + 1..a.len()).rev().find(|&j| a[j] > a[i]).unwrap();
    a.swap(i, j);
    a[i + 1..].reverse();
}

/// Grows a table from empty to 5,000 ids one insert at a time, rebuilding on `Full`
/// with room for one more: the number of rebuilds stays logarithmic.
#[test]
fn growth_by_rebuild_is_geometric() {
    let mut bytes = Builder::new().build(&[]);
    let mut rebuilds = 0;
    for id in 1..=5_000u64 {
        let outcome = TableMut::open(&mut bytes).unwrap().insert(id);
        if outcome == Err(Full) {
            bytes = rebuild(&TableRef::open(&bytes).unwrap(), 1).unwrap();
            TableMut::open(&mut bytes).unwrap().insert(id).unwrap();
            rebuilds += 1;
        }
    }
    let table = validate(&bytes).unwrap();
    assert_eq!(table.len(), 5_000);
    assert!(rebuilds <= 45, "{rebuilds} rebuilds");
    // Churn at the limit: removing then adding other ids reuses tombstones or
    // rebuilds (compacting), and never lets the load pass the in-place limit.
    for id in 1..=5_000u64 {
        TableMut::open(&mut bytes).unwrap().remove(id);
        let outcome = TableMut::open(&mut bytes).unwrap().insert(id + 10_000);
        if outcome == Err(Full) {
            bytes = rebuild(&TableRef::open(&bytes).unwrap(), 1).unwrap();
            TableMut::open(&mut bytes)
                .unwrap()
                .insert(id + 10_000)
                .unwrap();
        }
        let t = TableRef::open(&bytes).unwrap();
        assert!(t.load_factor() <= 0.9 + 1e-9 || t.capacity() < 20);
    }
    check_set(
        validate(&bytes).unwrap(),
        Some(&(10_001..=15_000).collect()),
    );
}

/// A table as hostile as the bound allows: `capacity` slots, all DELETED but a run of
/// `empties` EMPTY slots from `empty_at`, and each of `ids` placed at the given depth
/// of its probe sequence when that slot is still DELETED. A depth of `MAX_PROBE` or
/// more puts it past the bound; an EMPTY slot earlier on its path brings a smaller
/// depth back before it and drops a larger one, so no id is off its path.
fn hostile(capacity: u32, seed: u64, empty_at: u32, empties: u32, ids: &[(u64, u16)]) -> Vec<u8> {
    let cap = u64::from(capacity);
    let mut slots = vec![DELETED; capacity as usize];
    for k in 0..u64::from(empties) {
        slots[((u64::from(empty_at) + k) % cap) as usize] = EMPTY;
    }
    let blank = Builder::new().seed(seed).build(&[]);
    for &(id, depth) in ids {
        let (start, step) = start_and_step(hash(id, seed), capacity);
        let at = |d: u64| ((u64::from(start) + d * u64::from(step)) % cap) as usize;
        let open = (0..u64::from(depth)).find(|&d| slots[at(d)] == EMPTY);
        let depth = match open {
            None => u64::from(depth),
            Some(0) => continue,
            Some(_) if u32::from(depth) >= MAX_PROBE => continue,
            Some(d) => d - 1,
        };
        let slot = at(depth);
        if id != EMPTY && id != DELETED && slots[slot] == DELETED {
            slots[slot] = id;
        }
    }
    let count = slots
        .iter()
        .filter(|&&v| v != EMPTY && v != DELETED)
        .count() as u32;
    let deleted = slots.iter().filter(|&&v| v == DELETED).count() as u32;
    let mut header = Header::parse(&blank).unwrap();
    (header.capacity, header.count, header.deleted) = (capacity, count, deleted);
    let mut bytes = header.to_bytes().to_vec();
    for v in slots {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Tables laid out to make lookups long: clustered EMPTY slots, ids deep in their
    /// sequences. Those that validate answer every lookup within `MAX_PROBE` reads
    /// and stay valid and within the bound under updates; those refused had an id past
    /// the bound or off its path.
    #[test]
    fn hostile_layouts_are_bounded_or_refused(
        capacity in prop_oneof![Just(131u32), Just(257), Just(1031)],
        seed in seed(),
        empty_at in any::<u32>(),
        empties in 1u32..8,
        mut ids in prop::collection::vec((any::<u64>(), 0u16..128), 0..60),
        past in prop::option::of((any::<u64>(), 128u16..160)),
        ops in prop::collection::vec((any::<bool>(), prop_oneof![1u64..64, any::<u64>()]), 0..60),
    ) {
        let within = hostile(capacity, seed, empty_at, empties, &ids);
        ids.extend(past);
        let mut bytes = hostile(capacity, seed, empty_at, empties, &ids);
        if bytes != within {
            prop_assert!(validate(&bytes).is_err(), "an id past the bound was accepted");
            // Read unvalidated, the id past the bound is absent to a lookup that
            // stops at the bound, which a batch lookup reading one slot more
            // would find.
            check_batches(&TableRef::open(&bytes).unwrap());
            bytes = within;
        }
        let Ok(table) = validate(&bytes) else {
            // Only an id placed twice (a repeat in `ids`) can be wrong here.
            let repeats = ids.iter().map(|&(id, _)| id).collect::<HashSet<_>>().len() < ids.len();
            prop_assert!(repeats, "{:?}", validate(&bytes).err());
            return Ok(());
        };
        check_set(table, None);
        let mut model: HashSet<u64> = table.iter().collect();
        for (is_insert, id) in ops {
            let outcome = if is_insert {
                TableMut::open(&mut bytes).unwrap().insert(id)
            } else {
                Ok(TableMut::open(&mut bytes).unwrap().remove(id))
            };
            match (is_insert, outcome) {
                (true, Ok(added)) => prop_assert_eq!(added, model.insert(id)),
                (false, Ok(removed)) => prop_assert_eq!(removed, model.remove(&id)),
                (_, Err(Full)) => {
                    prop_assert!(!model.contains(&id));
                    bytes = rebuild_with(&TableRef::open(&bytes).unwrap(), &[id], 0).unwrap();
                    model.insert(id);
                }
            }
            check_set(validate(&bytes).unwrap(), Some(&model));
        }
    }
}

/// An id whose first `MAX_PROBE` slots all hold other ids, in a table with plenty of
/// room: the in-place insert is `Full` and writes nothing; a rebuild with it places
/// it. With one of those slots deleted instead, the insert reuses it.
#[test]
fn an_insert_past_the_bound_is_full() {
    let mut bytes = Builder::new().seed(0).reserve(700).build(&[]);
    let cap = validate(&bytes).unwrap().capacity();
    let x = 1u64 << 50;
    let (start, step) = start_and_step(hash(x, 0), cap);
    let path: Vec<u64> = (0..u64::from(MAX_PROBE))
        .map(|k| (u64::from(start) + k * u64::from(step)) % u64::from(cap))
        .collect();
    // For each slot of x's path, an id that starts there.
    let blockers: Vec<u64> = path
        .iter()
        .map(|&slot| {
            (1u64..)
                .find(|&id| u64::from(start_and_step(hash(id, 0), cap).0) == slot)
                .unwrap()
        })
        .collect();
    let mut t = TableMut::open(&mut bytes).unwrap();
    for &id in &blockers {
        assert_eq!(t.insert(id), Ok(true));
    }
    let table = validate(&bytes).unwrap();
    assert_eq!(table.count(), MAX_PROBE);
    assert!(table.room_in_place() > 500, "room is not what stops it");
    let before = bytes.clone();
    assert_eq!(TableMut::open(&mut bytes).unwrap().insert(x), Err(Full));
    assert_eq!(bytes, before, "Full writes nothing");

    let rebuilt = rebuild_with(&TableRef::open(&bytes).unwrap(), &[x], 0).unwrap();
    let mut model: HashSet<u64> = blockers.iter().copied().collect();
    model.insert(x);
    check_set(validate(&rebuilt).unwrap(), Some(&model));

    // Remove the blocker in the last slot of the path: x takes that tombstone.
    assert!(TableMut::open(&mut bytes)
        .unwrap()
        .remove(blockers[MAX_PROBE as usize - 1]));
    assert_eq!(TableMut::open(&mut bytes).unwrap().insert(x), Ok(true));
    let table = validate(&bytes).unwrap();
    assert_eq!(table.slot(path[MAX_PROBE as usize - 1]), Some(x));
    assert_eq!(table.deleted(), 0);
}

/// Ids crafted to share a start and step under the default seed defeat that seed; the
/// builder moves to the next seed (FORMAT.md §7) and stays at the same capacity.
#[test]
fn colliding_ids_make_the_builder_reseed() {
    let n = 200u64;
    let cap = capacity_for(n, DEFAULT_MAX_LOAD).unwrap();
    let (start, step) = start_and_step(hash(1, DEFAULT_SEED), cap);
    let ids: Vec<u64> = (1u64..)
        .filter(|&id| start_and_step(hash(id, DEFAULT_SEED), cap) == (start, step))
        .take(MAX_PROBE as usize + 1)
        .chain((1u64 << 60..).take(n as usize - MAX_PROBE as usize - 1))
        .collect();
    let bytes = Builder::new().build(&ids);
    let table = validate(&bytes).unwrap();
    assert_eq!(table.capacity(), cap);
    assert_eq!(
        table.seed(),
        DEFAULT_SEED.wrapping_add(relcache_protocol::idset::RESEED_STEP)
    );
    check_set(table, Some(&ids.iter().copied().collect()));
}
