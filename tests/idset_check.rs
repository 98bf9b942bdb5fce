//! How deeply the server checks a table a client stores (`idset-table-check`), end to
//! end: by default the structure and a sample of the ids' placement, so a table with
//! a misplaced id outside the sample is stored, answers about itself as laid out,
//! harms nothing else, is mended by its first rebuild, and survives a snapshot and a
//! DUMP / RESTORE; under `full` the same table is refused with the id and slot named,
//! as every table was before. A table that holds one id 260 times passes the sample
//! too, and no command over it loops or panics.

mod harness;

use std::time::{Duration, Instant};

use harness::{info_stat, TempDir, TestServer};
use redis::Connection;
use relcache_protocol::idset::{
    hash, start_and_step, validate, Builder, Header, TableRef, DELETED, EMPTY, HEADER_LEN,
    OFF_DELETED, SAMPLE_SLOTS, SLOT_LEN,
};

const IDS: u64 = 20_000;

/// The first `n` slots of `id`'s probe sequence in a table with this seed.
fn probe(id: u64, seed: u64, capacity: u32, n: usize) -> Vec<u64> {
    let (start, step) = start_and_step(hash(id, seed), capacity);
    let (cap, step) = (u64::from(capacity), u64::from(step));
    (0..n as u64)
        .map(|k| (u64::from(start) + k * step) % cap)
        .collect()
}

fn set_slot(bytes: &mut [u8], slot: u64, v: u64) {
    let off = HEADER_LEN + SLOT_LEN * slot as usize;
    bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// A built table of `IDS` ids with one moved out of reach onto a slot the sample
/// skips: the first id at the start of its sequence goes to an EMPTY slot its lookup
/// never reaches, and its old slot becomes DELETED (no other id's lookup changes). Returns
/// the bytes, all the ids, and the moved one.
fn misplaced_table() -> (Vec<u8>, Vec<u64>, u64) {
    let ids: Vec<u64> = (1..=IDS).map(|i| i * 104_729).collect();
    let mut bytes = Builder::new().build(&ids);
    let table = TableRef::open(&bytes).unwrap();
    let (cap, seed) = (table.capacity(), table.seed());
    let stride = u64::from(cap / SAMPLE_SLOTS);
    assert!(stride > 1, "a table this size is sampled, not read whole");
    let (old, id) = (1..u64::from(cap))
        .filter(|i| i % stride != 0)
        .find_map(|i| {
            let id = table.slot(i)?;
            (probe(id, seed, cap, 1)[0] == i).then_some((i, id))
        })
        .unwrap();
    // The lookup once `old` is DELETED, through the EMPTY slot that ends it.
    let seq = probe(id, seed, cap, cap as usize);
    let end = seq
        .iter()
        .position(|&s| s != old && table.slot(s).is_none())
        .unwrap();
    let path = &seq[..=end];
    let new = (1..u64::from(cap))
        .find(|&s| s % stride != 0 && s != old && table.slot(s).is_none() && !path.contains(&s))
        .unwrap();
    let deleted = table.deleted();
    set_slot(&mut bytes, old, DELETED);
    set_slot(&mut bytes, new, id);
    bytes[OFF_DELETED..OFF_DELETED + 4].copy_from_slice(&(deleted + 1).to_le_bytes());
    (bytes, ids, id)
}

fn int(con: &mut Connection, args: &[&str]) -> i64 {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn set_table(con: &mut Connection, key: &str, bytes: &[u8]) {
    let _: () = redis::cmd("SET").arg(key).arg(bytes).query(con).unwrap();
}

fn set_check(con: &mut Connection, level: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("idset-table-check")
        .arg(level)
        .query(con)
        .unwrap();
}

fn table_of(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("IDSET.TABLE").arg(key).query(con).unwrap()
}

#[test]
fn a_misplaced_id_outside_the_sample_misanswers_only_about_its_own_table() {
    let s = TestServer::start();
    let mut con = s.conn();
    let (bytes, ids, id) = misplaced_table();
    assert!(validate(&bytes).is_err(), "the table is not a valid set");
    let _: () = redis::cmd("SET")
        .arg("other")
        .arg("keep me")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg("neighbour")
        .arg(&ids[..100])
        .query(&mut con)
        .unwrap();

    set_table(&mut con, "t", &bytes);
    let id_s = id.to_string();
    // Counted and listed, but its lookup ends at an EMPTY slot.
    assert_eq!(int(&mut con, &["SCARD", "t"]), IDS as i64);
    assert_eq!(int(&mut con, &["SISMEMBER", "t", &id_s]), 0);
    let members: Vec<u64> = redis::cmd("SMEMBERS").arg("t").query(&mut con).unwrap();
    assert_eq!(members.len() as u64, IDS);
    assert!(members.contains(&id));
    let found: Vec<i64> = redis::cmd("SMISMEMBER")
        .arg("t")
        .arg(
            ids.iter()
                .filter(|&&i| i != id)
                .take(1_000)
                .collect::<Vec<_>>(),
        )
        .query(&mut con)
        .unwrap();
    assert!(found.iter().all(|&f| f == 1), "every other id is found");
    assert_eq!(table_of(&mut con, "t"), bytes, "stored byte for byte");

    // In-place updates keep the header's count that of the slots: an add places a
    // findable second copy, a remove takes it away again.
    assert_eq!(int(&mut con, &["SADD", "t", &id_s]), 1);
    assert_eq!(int(&mut con, &["SISMEMBER", "t", &id_s]), 1);
    assert_eq!(int(&mut con, &["SCARD", "t"]), IDS as i64 + 1);
    assert_eq!(int(&mut con, &["SREM", "t", &id_s]), 1);
    assert_eq!(int(&mut con, &["SCARD", "t"]), IDS as i64);

    // Growth rebuilds the table by the builder's rules: every id placed again, so
    // the misplaced one is found and nothing is stored twice.
    let more: Vec<u64> = (1..=10_000u64).map(|i| (i << 40) | 1).collect();
    let added: i64 = redis::cmd("SADD")
        .arg("t")
        .arg(&more)
        .query(&mut con)
        .unwrap();
    assert_eq!(added, 10_000);
    let rebuilt = table_of(&mut con, "t");
    let table = validate(&rebuilt).expect("a rebuild is a valid table");
    assert_eq!(table.len(), IDS + 10_000);
    assert!(table.contains(id));
    assert_eq!(int(&mut con, &["SISMEMBER", "t", &id_s]), 1);

    // Nothing else was touched.
    let other: String = redis::cmd("GET").arg("other").query(&mut con).unwrap();
    assert_eq!(other, "keep me");
    assert_eq!(int(&mut con, &["SCARD", "neighbour"]), 100);
}

#[test]
fn full_checking_refuses_what_the_sample_lets_through() {
    let s = TestServer::start();
    let mut con = s.conn();
    let (bytes, _, id) = misplaced_table();
    let want = validate(&bytes).unwrap_err().to_string();
    assert!(want.starts_with(&format!("id {id} at slot ")), "{want}");

    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("idset-table-check")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, ["idset-table-check", "sample"]);
    let e = redis::cmd("CONFIG")
        .arg("SET")
        .arg("idset-table-check")
        .arg("most")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("argument must be 'sample' or 'full'"),
        "{e}"
    );
    set_check(&mut con, "FULL");

    for load in [
        redis::cmd("SET").arg("t").arg(&bytes).clone(),
        redis::cmd("IDSET.LOAD")
            .arg("t")
            .arg("TABLE")
            .arg(&bytes)
            .clone(),
        redis::cmd("MSET")
            .arg("u")
            .arg("1")
            .arg("t")
            .arg(&bytes)
            .clone(),
    ] {
        let e = load.query::<redis::Value>(&mut con).unwrap_err();
        assert_eq!(
            e.detail(),
            Some(format!("invalid idset table: {want}").as_str()),
            "{e}"
        );
    }
    assert_eq!(int(&mut con, &["EXISTS", "t", "u"]), 0);

    // The same server under the default stores it.
    set_check(&mut con, "sample");
    set_table(&mut con, "t", &bytes);
    assert_eq!(int(&mut con, &["SCARD", "t"]), IDS as i64);
}

#[test]
fn the_sample_refuses_a_table_from_a_builder_with_the_wrong_hash() {
    let s = TestServer::start();
    let mut con = s.conn();
    // Placed for seed 1, labelled seed 2: what a builder with a wrong hash or step
    // rule makes, nearly all of its ids out of place.
    let ids: Vec<u64> = (1..=IDS).map(|i| i * 31).collect();
    let mut bytes = Builder::new().seed(1).build(&ids);
    bytes[8..16].copy_from_slice(&2u64.to_le_bytes());
    let e = redis::cmd("SET")
        .arg("t")
        .arg(&bytes)
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("invalid idset table: id "), "{e}");
    assert_eq!(int(&mut con, &["EXISTS", "t"]), 0);
}

#[test]
fn what_was_stored_survives_a_snapshot_and_a_dump() {
    let dir = TempDir::new("idset-check");
    let (bytes, _, id) = misplaced_table();
    let id_s = id.to_string();
    {
        let s = TestServer::start_with(&["--dir", dir.path()]);
        let mut con = s.conn();
        set_table(&mut con, "t", &bytes);
        let _: () = redis::cmd("SAVE").query(&mut con).unwrap();

        // DUMP / RESTORE: a payload relcache wrote is checked in its structure, so
        // a move between nodes never refuses what the source stored.
        let payload: Vec<u8> = redis::cmd("DUMP").arg("t").query(&mut con).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg("copy")
            .arg(0)
            .arg(&payload)
            .query(&mut con)
            .unwrap();
        assert_eq!(table_of(&mut con, "copy"), bytes);
        // Under `full`, RESTORE proves it like SET does.
        set_check(&mut con, "full");
        let e = redis::cmd("RESTORE")
            .arg("copy2")
            .arg(0)
            .arg(&payload)
            .query::<()>(&mut con)
            .unwrap_err();
        assert!(e.to_string().contains("Bad data format"), "{e}");
    }
    let s = TestServer::start_with(&["--dir", dir.path()]);
    let mut con = s.conn();
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_stat::<u8>(&mut con, "persistence", "loading") != 0 {
        assert!(Instant::now() < deadline, "the snapshot never loaded");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(table_of(&mut con, "t"), bytes, "loaded byte for byte");
    assert_eq!(int(&mut con, &["SISMEMBER", "t", &id_s]), 0);
}

/// 521 slots: the sample reads the even ones, left EMPTY; every odd one holds 12345.
fn duplicated_table() -> Vec<u8> {
    let capacity = 521u32;
    let slots: Vec<u64> = (0..capacity)
        .map(|i| if i % 2 == 1 { 12_345 } else { EMPTY })
        .collect();
    let header = Header {
        version: 1,
        flags: 0,
        seed: 0,
        capacity,
        count: 260,
        deleted: 0,
    };
    let mut bytes = header.to_bytes().to_vec();
    for v in slots {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

#[test]
fn a_table_holding_one_id_many_times_never_hangs_a_command() {
    let s = TestServer::start();
    let mut con = s.conn();
    // A hang fails the test instead of stalling it.
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let bytes = duplicated_table();
    assert!(validate(&bytes).is_err());
    set_table(&mut con, "dup", &bytes);
    assert_eq!(int(&mut con, &["SCARD", "dup"]), 260);

    // Asked for two distinct members, there is only one to give.
    let two: Vec<u64> = redis::cmd("SRANDMEMBER")
        .arg("dup")
        .arg(2)
        .query(&mut con)
        .unwrap();
    assert_eq!(two, [12_345]);
    let many: Vec<u64> = redis::cmd("SRANDMEMBER")
        .arg("dup")
        .arg(200)
        .query(&mut con)
        .unwrap();
    assert_eq!(many, [12_345]);
    let repeats: Vec<u64> = redis::cmd("SRANDMEMBER")
        .arg("dup")
        .arg(-5)
        .query(&mut con)
        .unwrap();
    assert_eq!(repeats, [12_345; 5]);
    let one: u64 = redis::cmd("SRANDMEMBER")
        .arg("dup")
        .query(&mut con)
        .unwrap();
    assert_eq!(one, 12_345);

    // SPOP with a count takes the one id, and the set with it.
    let popped: Vec<u64> = redis::cmd("SPOP")
        .arg("dup")
        .arg(2)
        .query(&mut con)
        .unwrap();
    assert_eq!(popped, [12_345]);
    assert_eq!(int(&mut con, &["EXISTS", "dup"]), 0);

    // A popped id is gone: the pop that finds it still there after removing one
    // copy rebuilds the table, which collapses the copies.
    set_table(&mut con, "dup", &bytes);
    let mut pops = 0;
    while int(&mut con, &["EXISTS", "dup"]) == 1 {
        let id: u64 = redis::cmd("SPOP").arg("dup").query(&mut con).unwrap();
        assert_eq!(id, 12_345);
        pops += 1;
        assert_eq!(pops, 1, "one pop takes the one id");
    }

    // The rest of the set commands answer, and other clients are served throughout.
    set_table(&mut con, "dup", &bytes);
    let members: Vec<u64> = redis::cmd("SMEMBERS").arg("dup").query(&mut con).unwrap();
    assert_eq!(members.len(), 260);
    let _: () = redis::cmd("SADD")
        .arg("other")
        .arg(12_345)
        .arg(7)
        .query(&mut con)
        .unwrap();
    for cmd in ["SINTER", "SUNION", "SDIFF"] {
        let _: Vec<u64> = redis::cmd(cmd)
            .arg("dup")
            .arg("other")
            .query(&mut con)
            .unwrap();
    }
    let _: i64 = redis::cmd("SINTERCARD")
        .arg(2)
        .arg("dup")
        .arg("other")
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("SMOVE")
        .arg("dup")
        .arg("other")
        .arg(12_345)
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("SREM")
        .arg("dup")
        .arg(12_345)
        .query(&mut con)
        .unwrap();
    let _: (u64, Vec<u64>) = redis::cmd("SSCAN")
        .arg("dup")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut s.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn an_empty_set_answers_random_member_commands_as_a_missing_key() {
    let s = TestServer::start();
    let mut con = s.conn();
    let empty = Builder::new().build(&[]);
    let _: () = redis::cmd("SET")
        .arg("e")
        .arg(&empty)
        .query(&mut con)
        .unwrap();
    assert_eq!(int(&mut con, &["SCARD", "e"]), 0);
    let one: Option<u64> = redis::cmd("SRANDMEMBER").arg("e").query(&mut con).unwrap();
    assert_eq!(one, None);
    let one: Option<u64> = redis::cmd("SPOP").arg("e").query(&mut con).unwrap();
    assert_eq!(one, None);
    for count in [3, -3] {
        let some: Vec<u64> = redis::cmd("SRANDMEMBER")
            .arg("e")
            .arg(count)
            .query(&mut con)
            .unwrap();
        assert!(some.is_empty());
    }
    let some: Vec<u64> = redis::cmd("SPOP").arg("e").arg(3).query(&mut con).unwrap();
    assert!(some.is_empty());
    // The connection is still up (a panic would have closed it).
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}
