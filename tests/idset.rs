//! End-to-end tests of the IDSET family against the real server.

mod harness;

use std::collections::HashSet;

use harness::TestServer;
use proptest::prelude::*;
use redis::{Connection, Value as RV};
use relcache_protocol::idset::{validate, Builder};

fn cmd(con: &mut Connection, args: &[&[u8]]) -> redis::RedisResult<RV> {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

fn packed(ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

#[test]
fn set_of_a_prebuilt_table_is_a_usable_set_and_get_returns_it() {
    let s = TestServer::start();
    let mut con = s.conn();
    let ids: Vec<u64> = (1..=2000).map(|i| i * 7).chain([0, u64::MAX]).collect();
    let table = Builder::new().build(&ids);
    let () = redis::cmd("SET")
        .arg("u:1")
        .arg(&table)
        .query(&mut con)
        .unwrap();
    let back: Vec<u8> = redis::cmd("IDSET.TABLE")
        .arg("u:1")
        .query(&mut con)
        .unwrap();
    assert_eq!(back, table, "IDSET.TABLE returns the exact bytes");
    // GET of a set is WRONGTYPE, as in Redis, and MGET reads it as nil.
    let err = redis::cmd("GET")
        .arg("u:1")
        .query::<Vec<u8>>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    let got: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg("u:1").query(&mut con).unwrap();
    assert_eq!(got, vec![None]);
    let t: String = redis::cmd("TYPE").arg("u:1").query(&mut con).unwrap();
    assert_eq!(t, "set");
    let card: i64 = redis::cmd("IDSET.CARD").arg("u:1").query(&mut con).unwrap();
    assert_eq!(card, 2002);
    let yes: i64 = redis::cmd("IDSET.EXISTS")
        .arg("u:1")
        .arg(14)
        .query(&mut con)
        .unwrap();
    let no: i64 = redis::cmd("IDSET.EXISTS")
        .arg("u:1")
        .arg(15)
        .query(&mut con)
        .unwrap();
    assert_eq!((yes, no), (1, 0));
    let max: i64 = redis::cmd("SISMEMBER")
        .arg("u:1")
        .arg(u64::MAX.to_string())
        .query(&mut con)
        .unwrap();
    assert_eq!(max, 1, "the id kept as a header flag is a member");
}

#[test]
fn hostile_tables_are_refused_and_touch_nothing() {
    let s = TestServer::start();
    let mut con = s.conn();
    let () = redis::cmd("SET")
        .arg("other")
        .arg("keep me")
        .query(&mut con)
        .unwrap();
    let good = Builder::new().build(&[1, 2, 3, 4, 5]);
    let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
    cases.push((good[..good.len() - 1].to_vec(), "length"));
    let mut lying = good.clone();
    lying[20] = 9; // count field
    cases.push((lying, "count"));
    let mut bad_version = good.clone();
    bad_version[6] = 7;
    cases.push((bad_version, "version"));
    let mut moved = good.clone();
    // Swap an id into the wrong slot: it becomes unreachable or duplicated.
    let first = (0..5)
        .map(|i| 32 + 8 * i)
        .find(|&o| good[o..o + 8] != [0; 8])
        .unwrap();
    let empty = (0..5)
        .map(|i| 32 + 8 * i)
        .find(|&o| good[o..o + 8] == [0; 8])
        .unwrap();
    moved.copy_within(first..first + 8, empty);
    moved[first..first + 8].copy_from_slice(&[0; 8]);
    cases.push((moved, "reach"));
    for (bytes, what) in &cases {
        assert!(validate(bytes).is_err(), "case {what} must be invalid");
        for c in ["SET", "IDSET.LOAD"] {
            let r: redis::RedisResult<RV> = if c == "SET" {
                redis::cmd("SET").arg("victim").arg(bytes).query(&mut con)
            } else {
                redis::cmd("IDSET.LOAD")
                    .arg("victim")
                    .arg("TABLE")
                    .arg(bytes)
                    .query(&mut con)
            };
            let err = r.expect_err(what).to_string();
            assert!(err.contains("invalid idset table"), "{c} {what}: {err}");
        }
    }
    let exists: i64 = redis::cmd("EXISTS").arg("victim").query(&mut con).unwrap();
    assert_eq!(exists, 0);
    let other: String = redis::cmd("GET").arg("other").query(&mut con).unwrap();
    assert_eq!(other, "keep me");
}

#[test]
fn load_forms_expiry_and_missing_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    let n: i64 = redis::cmd("IDSET.LOAD")
        .arg("a")
        .arg("IDS")
        .arg(&[5, 6, 7, 7])
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 3);
    let n: i64 = redis::cmd("IDSET.LOAD")
        .arg("b")
        .arg("PACKED")
        .arg(packed(&[1, 2, 0]))
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 3);
    let n: i64 = redis::cmd("IDSET.LOAD")
        .arg("c")
        .arg("PX")
        .arg(100_000)
        .arg("RESERVE")
        .arg(100)
        .arg("TABLE")
        .arg(Builder::new().build(&[9]))
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 1);
    let pttl: i64 = redis::cmd("PTTL").arg("c").query(&mut con).unwrap();
    assert!(pttl > 90_000 && pttl <= 100_000, "pttl {pttl}");
    let room: RV = redis::cmd("IDSET.INFO").arg("c").query(&mut con).unwrap();
    let text = format!("{room:?}");
    assert!(text.contains("room_in_place"), "{text}");
    // Errors.
    let e = cmd(&mut con, &[b"IDSET.LOAD", b"x", b"PACKED", b"123"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 8"), "{e}");
    let e = cmd(&mut con, &[b"IDSET.LOAD", b"x", b"IDS", b"1", b"-2"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("'-2' is not a valid id"), "{e}");
    let e = cmd(&mut con, &[b"IDSET.LOAD", b"x", b"EX", b"0", b"IDS", b"1"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid expire time"), "{e}");
    let e = cmd(&mut con, &[b"IDSET.LOAD", b"x", b"BOGUS", b"1"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("syntax error"), "{e}");
    // A missing key is nil for every read, never "no".
    for c in [
        &["IDSET.EXISTS", "nope", "1"][..],
        &["IDSET.CARD", "nope"],
        &["IDSET.MEXISTS", "nope", "1", "2"],
        &["IDSET.MEMBERS", "nope"],
        &["IDSET.INFO", "nope"],
        &["IDSET.REM", "nope", "1"],
    ] {
        let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        let r = cmd(&mut con, &args).unwrap();
        assert_eq!(r, RV::Nil, "{c:?}");
    }
    // An empty set is an answer, not a miss.
    let n: i64 = redis::cmd("IDSET.LOAD")
        .arg("empty")
        .arg("PACKED")
        .arg(b"")
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 0);
    let r: i64 = redis::cmd("IDSET.EXISTS")
        .arg("empty")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(r, 0);
    // Wrong type both ways.
    let () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let e = cmd(&mut con, &[b"IDSET.CARD", b"str"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"), "{e}");
    let e = cmd(&mut con, &[b"APPEND", b"a", b"x"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"), "{e}");
}

#[test]
fn batch_membership_decimal_and_binary() {
    let s = TestServer::start();
    let mut con = s.conn();
    let members: Vec<u64> = (0..1000).map(|i| i * 3).collect();
    let () = redis::cmd("SET")
        .arg("f")
        .arg(Builder::new().build(&members))
        .query(&mut con)
        .unwrap();
    let probes: Vec<u64> = (0..100).collect();
    let r: Vec<i64> = redis::cmd("IDSET.MEXISTS")
        .arg("f")
        .arg(&probes)
        .query(&mut con)
        .unwrap();
    let want: Vec<i64> = probes.iter().map(|p| (p % 3 == 0) as i64).collect();
    assert_eq!(r, want);
    let bitmap: Vec<u8> = redis::cmd("IDSET.MEXISTSBIN")
        .arg("f")
        .arg(packed(&probes))
        .query(&mut con)
        .unwrap();
    assert_eq!(bitmap.len(), 13);
    for (i, p) in probes.iter().enumerate() {
        assert_eq!(bitmap[i / 8] >> (i % 8) & 1 == 1, p % 3 == 0, "probe {p}");
    }
    let nil: RV = redis::cmd("IDSET.MEXISTSBIN")
        .arg("missing")
        .arg(packed(&[1]))
        .query(&mut con)
        .unwrap();
    assert_eq!(nil, RV::Nil);
    let e = cmd(&mut con, &[b"IDSET.MEXISTSBIN", b"f", b"abc"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 8"), "{e}");
}

#[test]
fn add_rem_in_place_with_xx_and_growth() {
    let s = TestServer::start();
    let mut con = s.conn();
    let r: RV = redis::cmd("IDSET.ADD")
        .arg("w")
        .arg("XX")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(r, RV::Nil, "XX never creates a partial set");
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("w")
            .query::<i64>(&mut con)
            .unwrap(),
        0
    );
    let n: i64 = redis::cmd("IDSET.LOAD")
        .arg("w")
        .arg("IDS")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 1);
    let mut model: HashSet<u64> = [1].into();
    // Grow from 1 id to 5,000 through many rebuilds.
    for chunk in (2..5000u64).collect::<Vec<_>>().chunks(97) {
        let added: i64 = redis::cmd("IDSET.ADD")
            .arg("w")
            .arg("XX")
            .arg(chunk)
            .query(&mut con)
            .unwrap();
        let want = chunk.iter().filter(|i| model.insert(**i)).count() as i64;
        assert_eq!(added, want);
    }
    let removed: i64 = redis::cmd("IDSET.REM")
        .arg("w")
        .arg(&[1, 2, 3, 999_999])
        .query(&mut con)
        .unwrap();
    assert_eq!(removed, 3);
    for i in [1, 2, 3] {
        model.remove(&i);
    }
    let card: i64 = redis::cmd("IDSET.CARD").arg("w").query(&mut con).unwrap();
    assert_eq!(card as usize, model.len());
    let table: Vec<u8> = redis::cmd("IDSET.TABLE").arg("w").query(&mut con).unwrap();
    let t = validate(&table).expect("the stored table stays valid");
    assert_eq!(t.iter().collect::<HashSet<_>>(), model);
    // Removing everything keeps an empty set.
    let all: Vec<u64> = model.iter().copied().collect();
    let _: i64 = redis::cmd("IDSET.REM")
        .arg("w")
        .arg(&all)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        redis::cmd("IDSET.CARD")
            .arg("w")
            .query::<i64>(&mut con)
            .unwrap(),
        0
    );
}

/// Write-throughs that say which change of the source they are apply only in
/// sequence: the same change twice does nothing, and one that arrives after a later
/// change drops the key rather than undo that change.
#[test]
fn sequenced_changes_apply_in_order_and_a_late_one_drops_the_key() {
    let s = TestServer::start();
    let mut con = s.conn();
    let seq_of = |con: &mut Connection| -> i64 {
        let info: std::collections::HashMap<String, RV> =
            redis::cmd("IDSET.INFO").arg("f").query(con).unwrap();
        redis::from_redis_value(info["seq"].clone()).unwrap()
    };
    let members = |con: &mut Connection| -> Option<Vec<u64>> {
        let mut m: Option<Vec<u64>> = redis::cmd("IDSET.MEMBERS").arg("f").query(con).unwrap();
        if let Some(m) = m.as_mut() {
            m.sort_unstable();
        }
        m
    };
    let change = |con: &mut Connection, op: &str, seq: u64, id: u64| -> RV {
        let mut c = redis::cmd(op);
        c.arg("f");
        if op == "IDSET.ADD" {
            c.arg("XX");
        }
        c.arg("SEQ").arg(seq).arg(id).query(con).unwrap()
    };
    // A load as of change 10.
    let n: i64 = redis::cmd("IDSET.LOAD")
        .arg("f")
        .arg("SEQ")
        .arg(10)
        .arg("IDS")
        .arg(&[1, 2])
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(seq_of(&mut con), 10);
    // The change the load is as of, again (a retried write-through): nothing
    // happens.
    assert_eq!(change(&mut con, "IDSET.ADD", 10, 2), RV::Int(0));
    assert_eq!(members(&mut con), Some(vec![1, 2]));
    // Newer changes apply in order, even those that change no id.
    assert_eq!(change(&mut con, "IDSET.ADD", 12, 3), RV::Int(1));
    assert_eq!(change(&mut con, "IDSET.ADD", 13, 3), RV::Int(0));
    assert_eq!(change(&mut con, "IDSET.REM", 15, 1), RV::Int(1));
    assert_eq!(seq_of(&mut con), 15);
    assert_eq!(change(&mut con, "IDSET.REM", 15, 1), RV::Int(0), "a retry");
    assert_eq!(members(&mut con), Some(vec![2, 3]));
    // Change 14 (say, a follow of 1 that committed before the unfollow at 15)
    // arrives last: applying it would undo 15, so the key goes.
    let late_before: i64 = harness::info_stat(&mut con, "idsets", "idset_late_changes");
    assert_eq!(change(&mut con, "IDSET.ADD", 14, 1), RV::Nil);
    assert_eq!(members(&mut con), None, "dropped, to be reloaded");
    let late_after: i64 = harness::info_stat(&mut con, "idsets", "idset_late_changes");
    assert_eq!(late_after, late_before + 1);
    // The same for a late removal.
    let _: i64 = redis::cmd("IDSET.LOAD")
        .arg("f")
        .arg("SEQ")
        .arg(20)
        .arg("IDS")
        .arg(&[1])
        .query(&mut con)
        .unwrap();
    assert_eq!(change(&mut con, "IDSET.REM", 19, 1), RV::Nil);
    assert_eq!(members(&mut con), None);
    // The same number for a change the set does not show: the number was reused
    // (a counter that went back), so the set is dropped rather than trusted.
    let _: i64 = redis::cmd("IDSET.LOAD")
        .arg(&["f", "SEQ", "25", "IDS", "1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(change(&mut con, "IDSET.ADD", 25, 2), RV::Nil);
    assert_eq!(members(&mut con), None);
    let _: i64 = redis::cmd("IDSET.LOAD")
        .arg(&["f", "SEQ", "25", "IDS", "1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(change(&mut con, "IDSET.REM", 25, 1), RV::Nil);
    assert_eq!(members(&mut con), None);
    // A change to a missing key stays a miss, and XX creates nothing.
    assert_eq!(change(&mut con, "IDSET.ADD", 30, 1), RV::Nil);
    assert_eq!(change(&mut con, "IDSET.REM", 30, 1), RV::Nil);
    // Without SEQ a set is as of no change (0), and any sequenced one is newer.
    let _: i64 = redis::cmd("SADD").arg("f").arg(5).query(&mut con).unwrap();
    assert_eq!(seq_of(&mut con), 0);
    assert_eq!(change(&mut con, "IDSET.ADD", 1, 6), RV::Int(1));
    // An unsequenced write leaves the sequence where it was.
    let _: i64 = redis::cmd("IDSET.ADD")
        .arg("f")
        .arg(7)
        .query(&mut con)
        .unwrap();
    assert_eq!(seq_of(&mut con), 1);
    // Bad sequence numbers and misplaced options are refused.
    for bad in [
        &["IDSET.ADD", "f", "XX", "SEQ", "-1", "1"][..],
        &["IDSET.ADD", "f", "XX", "SEQ", "x", "1"],
        &["IDSET.ADD", "f", "XX", "SEQ", "0", "1"],
        &["IDSET.REM", "f", "SEQ", "9223372036854775808", "1"],
        &["IDSET.LOAD", "f", "SEQ", "-1", "IDS", "1"],
    ] {
        let err = redis::cmd(bad[0])
            .arg(&bad[1..])
            .query::<RV>(&mut con)
            .unwrap_err();
        assert!(err.to_string().contains("invalid sequence number"), "{err}");
    }
    let err = redis::cmd("IDSET.REM")
        .arg(&["f", "XX", "1"])
        .query::<RV>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("not a valid id"), "{err}");
    // A numbered change never creates a set, which would claim to be complete.
    let err = redis::cmd("IDSET.ADD")
        .arg(&["new", "SEQ", "5", "1"])
        .query::<RV>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("SEQ needs XX"), "{err}");
    let err = redis::cmd("IDSET.LOAD")
        .arg(&["f", "SEQ", "5", "SEQ", "6", "IDS", "1"])
        .query::<RV>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("syntax error"), "{err}");
    // The largest number IDSET.INFO can report is accepted.
    let _: i64 = redis::cmd("IDSET.LOAD")
        .arg(&["f", "SEQ", "9223372036854775807", "IDS", "1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(seq_of(&mut con), i64::MAX);
    let err = redis::cmd("IDSET.ADD")
        .arg(&["f", "XX", "SEQ", "5"])
        .query::<RV>(&mut con)
        .unwrap_err();
    assert!(
        err.to_string().contains("wrong number of arguments"),
        "{err}"
    );
}

#[test]
fn members_scan_which_and_info() {
    let s = TestServer::start();
    let mut con = s.conn();
    let ids: Vec<u64> = (1..=500).chain([0, u64::MAX]).collect();
    let _: i64 = redis::cmd("IDSET.LOAD")
        .arg("m")
        .arg("PACKED")
        .arg(packed(&ids))
        .query(&mut con)
        .unwrap();
    let mut members: Vec<String> = redis::cmd("IDSET.MEMBERS")
        .arg("m")
        .query(&mut con)
        .unwrap();
    members.sort();
    let mut want: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    want.sort();
    assert_eq!(members, want);
    let p: Vec<u8> = redis::cmd("IDSET.MEMBERS")
        .arg("m")
        .arg("PACKED")
        .query(&mut con)
        .unwrap();
    let mut got: Vec<u64> = p
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    got.sort();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(got, sorted);
    // SCAN: every id exactly once.
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    loop {
        let (next, page): (String, Vec<String>) = redis::cmd("IDSET.SCAN")
            .arg("m")
            .arg(&cursor)
            .arg("COUNT")
            .arg(50)
            .query(&mut con)
            .unwrap();
        seen.extend(page);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    seen.sort();
    assert_eq!(seen, want);
    // WHICH: per key 1 / 0 / nil.
    let _: i64 = redis::cmd("IDSET.LOAD")
        .arg("n")
        .arg("IDS")
        .arg(7)
        .query(&mut con)
        .unwrap();
    let r: Vec<Option<i64>> = redis::cmd("IDSET.WHICH")
        .arg(7)
        .arg("m")
        .arg("n")
        .arg("missing")
        .arg("m")
        .query(&mut con)
        .unwrap();
    assert_eq!(r, vec![Some(1), Some(1), None, Some(1)]);
    let r: Vec<Option<i64>> = redis::cmd("IDSET.WHICH")
        .arg(600)
        .arg("m")
        .arg("n")
        .query(&mut con)
        .unwrap();
    assert_eq!(r, vec![Some(0), Some(0)]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("IDSET.WHICH")
        .arg(7)
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, vec!["a", "b"]);
    let info: std::collections::HashMap<String, redis::Value> =
        redis::cmd("IDSET.INFO").arg("m").query(&mut con).unwrap();
    assert_eq!(info["ids"], RV::Int(502));
    let bytes = match &info["bytes"] {
        RV::Int(b) => *b,
        v => panic!("{v:?}"),
    };
    let cap = match &info["capacity"] {
        RV::Int(b) => *b,
        v => panic!("{v:?}"),
    };
    assert_eq!(bytes, 32 + 8 * cap);
}

#[test]
fn resp3_shapes() {
    use std::io::{Read, Write};
    let s = TestServer::start();
    let mut raw = s.raw();
    raw.write_all(b"HELLO 3\r\n").unwrap();
    let mut buf = vec![0u8; 4096];
    let n = raw.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"%"), "HELLO 3 replies a map");
    raw.write_all(b"IDSET.CARD nope\r\nIDSET.LOAD k IDS 1 2\r\nIDSET.INFO k\r\n")
        .unwrap();
    let mut got = Vec::new();
    // The INFO map ends with the seq field; read until its value is complete.
    let complete = |g: &[u8]| {
        let t = String::from_utf8_lossy(g);
        t.split_once("+seq\r\n:")
            .is_some_and(|(_, rest)| rest.contains("\r\n"))
    };
    while !complete(&got) {
        let n = raw.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed early");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("_\r\n:2\r\n%10\r\n"), "{text}");
    assert!(
        text.contains("+load_factor\r\n,"),
        "doubles are RESP3 doubles: {text}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Any sequence of loads, adds, removes and checks through the real server gives
    /// the answers of a HashSet model.
    #[test]
    fn server_matches_a_hashset_model(ops in proptest::collection::vec(op(), 1..60)) {
        let s = TestServer::start();
        let mut con = s.conn();
        let key = format!("model:{}", rand::random::<u64>());
        let mut model: Option<HashSet<u64>> = None;
        for op in ops {
            match op {
                Op::Load(ids) => {
                    let n: i64 = redis::cmd("IDSET.LOAD").arg(&key).arg("TABLE").arg(Builder::new().build(&ids)).query(&mut con).unwrap();
                    let m: HashSet<u64> = ids.into_iter().collect();
                    prop_assert_eq!(n as usize, m.len());
                    model = Some(m);
                }
                Op::Add(ids) => {
                    let r: Option<i64> = redis::cmd("IDSET.ADD").arg(&key).arg("XX").arg(&ids).query(&mut con).unwrap();
                    match &mut model {
                        None => prop_assert_eq!(r, None),
                        Some(m) => prop_assert_eq!(r, Some(ids.iter().filter(|i| m.insert(**i)).count() as i64)),
                    }
                }
                Op::Rem(ids) => {
                    let r: Option<i64> = redis::cmd("IDSET.REM").arg(&key).arg(&ids).query(&mut con).unwrap();
                    match &mut model {
                        None => prop_assert_eq!(r, None),
                        Some(m) => prop_assert_eq!(r, Some(ids.iter().filter(|i| m.remove(i)).count() as i64)),
                    }
                }
                Op::Check(ids) => {
                    let r: Option<Vec<i64>> = redis::cmd("IDSET.MEXISTS").arg(&key).arg(&ids).query(&mut con).unwrap();
                    let want = model.as_ref().map(|m| ids.iter().map(|i| m.contains(i) as i64).collect::<Vec<_>>());
                    prop_assert_eq!(r, want);
                    let bitmap: Option<Vec<u8>> = redis::cmd("IDSET.MEXISTSBIN").arg(&key).arg(packed(&ids)).query(&mut con).unwrap();
                    if let (Some(b), Some(m)) = (bitmap, &model) {
                        prop_assert_eq!(b.len(), ids.len().div_ceil(8));
                        for i in 0..b.len() * 8 {
                            let hit = ids.get(i).is_some_and(|id| m.contains(id));
                            prop_assert_eq!(b[i / 8] >> (i % 8) & 1 == 1, hit, "bit {}", i);
                        }
                    }
                    // The same through SMISMEMBER, with a member that is no id two
                    // thirds in (past the first 64 of a long batch, and past the 128
                    // SMISMEMBER parses on the stack in the longest).
                    let mid = ids.len() * 2 / 3;
                    let r: Vec<i64> = redis::cmd("SMISMEMBER").arg(&key).arg(&ids[..mid]).arg("x").arg(&ids[mid..]).query(&mut con).unwrap();
                    let mut want: Vec<i64> = ids.iter().map(|i| model.as_ref().is_some_and(|m| m.contains(i)) as i64).collect();
                    want.insert(mid, 0);
                    prop_assert_eq!(r, want);
                }
                Op::Members => {
                    let r: Option<Vec<String>> = redis::cmd("IDSET.MEMBERS").arg(&key).query(&mut con).unwrap();
                    let got = r.map(|v| v.into_iter().map(|s| s.parse::<u64>().unwrap()).collect::<HashSet<_>>());
                    prop_assert_eq!(got, model.clone());
                    if let Some(m) = &model {
                        let table: Vec<u8> = redis::cmd("IDSET.TABLE").arg(&key).query(&mut con).unwrap();
                        let t = validate(&table).unwrap();
                        // The client-side reader agrees with the server on every id.
                        prop_assert!(m.iter().all(|&id| t.contains(id)));
                        prop_assert_eq!(t.len() as usize, m.len());
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Follows and unfollows of a few ids, numbered as their source committed them;
    /// a load as of one of them; then every write-through arriving in any order. The
    /// set ends up exactly as the source has it, or missing (to be reloaded) — never
    /// wrong. Arriving in order, it is never dropped.
    #[test]
    fn sequenced_changes_in_any_arrival_order_never_leave_a_wrong_set(
        start in proptest::collection::btree_set(0u64..6, 0..6),
        picks in proptest::collection::vec(0u64..6, 1..25),
        loaded_after in any::<prop::sample::Index>(),
        arrival in any::<u64>(),
        in_order in any::<bool>(),
    ) {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        // Each change flips one id; sequence numbers have gaps, as a shared
        // counter's do.
        let mut state = start.clone();
        let mut states = vec![state.clone()];
        let mut changes = Vec::new();
        for (i, &id) in picks.iter().enumerate() {
            let seq = 3 * (i as u64 + 1) + 7;
            let add = state.insert(id);
            if !add {
                state.remove(&id);
            }
            changes.push((seq, add, id));
            states.push(state.clone());
        }
        let k = loaded_after.index(changes.len() + 1);
        let load_seq = if k == 0 { 0 } else { changes[k - 1].0 };
        let s = TestServer::start();
        let mut con = s.conn();
        let loaded: Vec<u64> = states[k].iter().copied().collect();
        let _: i64 = redis::cmd("IDSET.LOAD").arg("f").arg("SEQ").arg(load_seq).arg("PACKED").arg(packed(&loaded)).query(&mut con).unwrap();
        let mut arriving = changes.clone();
        if in_order {
            arriving.retain(|&(seq, _, _)| seq > load_seq);
        } else {
            arriving.shuffle(&mut rand::rngs::StdRng::seed_from_u64(arrival));
        }
        for (seq, add, id) in arriving {
            let mut c = redis::cmd(if add { "IDSET.ADD" } else { "IDSET.REM" });
            c.arg("f");
            if add {
                c.arg("XX");
            }
            let _: RV = c.arg("SEQ").arg(seq).arg(id).query(&mut con).unwrap();
        }
        let got: Option<Vec<u64>> = redis::cmd("IDSET.MEMBERS").arg("f").query(&mut con).unwrap();
        let want: Vec<u64> = state.iter().copied().collect();
        match got {
            Some(mut got) => {
                got.sort_unstable();
                prop_assert_eq!(got, want);
            }
            None => prop_assert!(!in_order, "changes in order never drop the set"),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Load(Vec<u64>),
    Add(Vec<u64>),
    Rem(Vec<u64>),
    Check(Vec<u64>),
    Members,
}

fn id() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..200,
        Just(0u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        any::<u64>()
    ]
}

fn ids() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(id(), 0..300)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => ids().prop_map(Op::Load),
        3 => proptest::collection::vec(id(), 1..300).prop_map(Op::Add),
        2 => proptest::collection::vec(id(), 1..100).prop_map(Op::Rem),
        3 => proptest::collection::vec(id(), 1..200).prop_map(Op::Check),
        1 => Just(Op::Members),
    ]
}

#[test]
fn info_idsets_and_memory_usage_report_real_figures() {
    let s = TestServer::start();
    let mut con = s.conn();
    let field =
        |con: &mut Connection, name: &str| -> f64 { harness::info_stat(con, "idsets", name) };
    assert_eq!(field(&mut con, "idset_tables"), 0.0);
    let a = Builder::new().build(&(1..=1000).collect::<Vec<u64>>());
    let () = redis::cmd("SET").arg("a").arg(&a).query(&mut con).unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg("b")
        .arg(&[1, 2, 3])
        .query(&mut con)
        .unwrap();
    assert_eq!(field(&mut con, "idset_tables"), 2.0);
    assert_eq!(field(&mut con, "idset_ids"), 1003.0);
    let bytes = field(&mut con, "idset_bytes");
    let b_len: Vec<u8> = redis::cmd("IDSET.TABLE").arg("b").query(&mut con).unwrap();
    assert_eq!(bytes as usize, a.len() + b_len.len());
    let load = field(&mut con, "idset_avg_load_factor");
    assert!(load > 0.5 && load <= 0.9, "load {load}");
    // In-place changes and deletes move the totals.
    let _: i64 = redis::cmd("IDSET.ADD")
        .arg("a")
        .arg(&[5000, 5001])
        .query(&mut con)
        .unwrap();
    assert_eq!(field(&mut con, "idset_ids"), 1005.0);
    let _: i64 = redis::cmd("DEL").arg("a").query(&mut con).unwrap();
    assert_eq!(field(&mut con, "idset_tables"), 1.0);
    assert_eq!(field(&mut con, "idset_ids"), 3.0);
    // MEMORY USAGE counts the whole table.
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert!(
        usage as usize >= b_len.len() && usage as usize <= b_len.len() + 256,
        "usage {usage}"
    );
}
