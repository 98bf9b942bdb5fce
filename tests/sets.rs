//! End-to-end tests of the Redis set family (SADD … SMOVE) on idset tables, against
//! the real server: Redis 7.2's replies and exact error bytes (checked against a real
//! redis-server with the same integer members), RESP2/RESP3 reply shapes, relcache's
//! canonical-id rule, growth of big sets, SSCAN's guarantee, concurrent adds, and a
//! property test against a `HashSet<u64>` model.

mod harness;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use harness::{Raw, TestServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis::{Connection, FromRedisValue};
use relcache_protocol::resp::Frame;

const MAX: u64 = u64::MAX;
const MAX_TEXT: &str = "18446744073709551615";
const MAGIC: [u8; 6] = [0x89, b'R', b'C', b'I', b'D', b'S'];
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ---- helpers --------------------------------------------------------------------

/// Runs a command through the `redis` crate and converts the reply.
fn q<T: FromRedisValue>(con: &mut Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// A reply of members, sorted numerically.
fn members(con: &mut Connection, args: &[&str]) -> Vec<u64> {
    let texts: Vec<String> = q(con, args);
    let mut ids: Vec<u64> = texts.iter().map(|t| t.parse().unwrap()).collect();
    ids.sort_unstable();
    ids
}

/// The message the server gives for a member that is not a canonical decimal u64.
fn bad_id(member: &str) -> String {
    format!(
        "ERR member '{member}' is not a valid id: relcache sets hold unsigned 64-bit integers in canonical decimal form"
    )
}

/// The members of an aggregate frame of bulk strings, sorted numerically.
fn frame_ids(items: &[Frame]) -> Vec<u64> {
    let mut ids: Vec<u64> = items
        .iter()
        .map(|f| match f {
            Frame::Bulk(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
            other => panic!("member is not a bulk string: {other:?}"),
        })
        .collect();
    ids.sort_unstable();
    ids
}

// ---- single-key commands ---------------------------------------------------------

#[test]
fn sadd_srem_and_reads_follow_redis() {
    let s = TestServer::start();
    let mut con = s.conn();
    // A missing key is an empty set for every read.
    assert_eq!(q::<i64>(&mut con, &["SCARD", "s"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SISMEMBER", "s", "1"]), 0);
    assert_eq!(
        q::<Vec<i64>>(&mut con, &["SMISMEMBER", "s", "1", "2"]),
        vec![0, 0]
    );
    assert_eq!(members(&mut con, &["SMEMBERS", "s"]), Vec::<u64>::new());
    assert_eq!(q::<i64>(&mut con, &["SREM", "s", "1"]), 0);
    assert_eq!(
        q::<i64>(&mut con, &["EXISTS", "s"]),
        0,
        "SREM on a missing key creates nothing"
    );

    // Duplicates in one command count once; existing members are not new.
    assert_eq!(
        q::<i64>(&mut con, &["SADD", "s", "3", "1", "2", "3", "1"]),
        3
    );
    assert_eq!(q::<i64>(&mut con, &["SADD", "s", "2", "4", "4"]), 1);
    assert_eq!(q::<String>(&mut con, &["TYPE", "s"]), "set");
    assert_eq!(q::<i64>(&mut con, &["SCARD", "s"]), 4);
    assert_eq!(members(&mut con, &["SMEMBERS", "s"]), vec![1, 2, 3, 4]);
    assert_eq!(q::<i64>(&mut con, &["SISMEMBER", "s", "2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SISMEMBER", "s", "5"]), 0);
    assert_eq!(
        q::<Vec<i64>>(&mut con, &["SMISMEMBER", "s", "5", "4", "1", "5"]),
        vec![0, 1, 1, 0]
    );

    assert_eq!(q::<i64>(&mut con, &["SREM", "s", "1", "1", "9"]), 1);
    assert_eq!(members(&mut con, &["SMEMBERS", "s"]), vec![2, 3, 4]);
    // Removing the last members deletes the key, as Redis does.
    assert_eq!(q::<i64>(&mut con, &["SREM", "s", "2", "3", "4"]), 3);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "s"]), 0);
    assert_eq!(q::<String>(&mut con, &["TYPE", "s"]), "none");

    // A TTL survives in-place adds and removes (the key is updated, not replaced).
    assert_eq!(q::<i64>(&mut con, &["SADD", "t", "1", "2"]), 2);
    assert_eq!(q::<i64>(&mut con, &["EXPIRE", "t", "100"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SADD", "t", "3"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SREM", "t", "1"]), 1);
    let ttl: i64 = q(&mut con, &["TTL", "t"]);
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
}

#[test]
fn arity_errors_match_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    for (args, name) in [
        (&["SADD", "s"][..], "sadd"),
        (&["SREM", "s"], "srem"),
        (&["SISMEMBER", "s"], "sismember"),
        (&["SISMEMBER", "s", "1", "2"], "sismember"),
        (&["SMISMEMBER", "s"], "smismember"),
        (&["SCARD"], "scard"),
        (&["SMEMBERS", "s", "x"], "smembers"),
        (&["SSCAN", "s"], "sscan"),
        (&["SINTER"], "sinter"),
        (&["SINTERCARD", "1"], "sintercard"),
        (&["SINTERSTORE", "d"], "sinterstore"),
        (&["SMOVE", "a", "b"], "smove"),
        (&["SPOP"], "spop"),
        (&["SRANDMEMBER"], "srandmember"),
    ] {
        raw.expect_err(
            args,
            &format!("ERR wrong number of arguments for '{name}' command"),
        );
    }
}

#[test]
fn wrongtype_both_ways() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "str", "hello"], b"+OK\r\n");
    for args in [
        &["SADD", "str", "1"][..],
        &["SREM", "str", "1"],
        &["SISMEMBER", "str", "1"],
        &["SMISMEMBER", "str", "1"],
        &["SCARD", "str"],
        &["SMEMBERS", "str"],
        &["SSCAN", "str", "0"],
        &["SSCAN", "str", "0", "COUNT", "abc"],
        &["SINTER", "missing", "str"],
        &["SUNION", "str"],
        &["SDIFF", "missing", "str"],
        &["SINTERCARD", "2", "missing", "str"],
        &["SINTERSTORE", "d", "missing", "str"],
        &["SPOP", "str"],
        &["SPOP", "str", "0"],
        &["SRANDMEMBER", "str"],
        &["SRANDMEMBER", "str", "0"],
        &["SMOVE", "str", "x", "1"],
    ] {
        raw.expect_err(args, WRONGTYPE);
    }
    assert_eq!(
        q::<String>(&mut con, &["GET", "str"]),
        "hello",
        "the string is untouched"
    );
    assert_eq!(
        q::<i64>(&mut con, &["EXISTS", "d"]),
        0,
        "a failed store writes nothing"
    );

    // The other way: a set is not a string, to GET and its variants too, as in
    // Redis; its table bytes are IDSET.TABLE's (so a client can check locally).
    assert_eq!(q::<i64>(&mut con, &["SADD", "set", "1", "2", "3"]), 3);
    let table: Vec<u8> = q(&mut con, &["IDSET.TABLE", "set"]);
    assert!(
        table.starts_with(&MAGIC),
        "IDSET.TABLE of a set returns its table: {:?}",
        &table[..table.len().min(8)]
    );
    for args in [
        &["INCR", "set"][..],
        &["APPEND", "set", "x"],
        &["GET", "set"],
        &["GETDEL", "set"],
        &["GETEX", "set", "PERSIST"],
        &["GETSET", "set", "x"],
        &["SET", "set", "x", "GET"],
    ] {
        raw.expect_err(args, WRONGTYPE);
    }
    raw.expect(&["MGET", "set", "str"], b"*2\r\n$-1\r\n$5\r\nhello\r\n");
    raw.expect_err(&["IDSET.TABLE", "str"], WRONGTYPE);
    assert_eq!(
        q::<i64>(&mut con, &["SCARD", "set"]),
        3,
        "the set is untouched"
    );
}

#[test]
fn non_integer_members_are_refused_by_writes_and_absent_for_reads() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut raw = Raw::new(&s);
    // Nothing is created by a refused SADD, even when the bad member comes last.
    raw.expect_err(&["SADD", "s", "1", "2", "x"], &bad_id("x"));
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "s"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SADD", "s", "1", "2"]), 2);
    // Other spellings of an integer are not converted: "007" is not 7 here.
    for bad in [
        "007",
        "+7",
        "-1",
        "7.0",
        " 7",
        "7 ",
        "",
        "18446744073709551616",
        "abc",
    ] {
        raw.expect_err(&["SADD", "s", "3", bad], &bad_id(bad));
        // Reads and removals only look: no id set holds a non-id, so it is absent
        // and the answer is Redis's for an absent member.
        raw.expect(&["SREM", "s", bad], b":0\r\n");
        raw.expect(&["SISMEMBER", "s", bad], b":0\r\n");
        raw.expect(&["SMISMEMBER", "s", "1", bad], b"*2\r\n:1\r\n:0\r\n");
        raw.expect(&["SMOVE", "s", "d", bad], b":0\r\n");
    }
    // The key's type is still checked first.
    assert_eq!(q::<String>(&mut con, &["SET", "str", "x"]), "OK");
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    raw.expect_err(&["SISMEMBER", "str", "abc"], wrongtype);
    raw.expect_err(&["SMISMEMBER", "str", "abc"], wrongtype);
    raw.expect_err(&["SREM", "str", "abc"], wrongtype);
    raw.expect_err(&["SMOVE", "str", "d", "abc"], wrongtype);
    raw.expect_err(&["SMOVE", "s", "str", "abc"], wrongtype);
    assert_eq!(
        members(&mut con, &["SMEMBERS", "s"]),
        vec![1, 2],
        "no partial change"
    );
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "d"]), 0);
    // A long bad member is shown truncated, never the whole argument.
    let long = "9".repeat(200);
    let err = String::from_utf8(raw.call(&["SADD", "s", &long])).unwrap();
    assert!(
        err.starts_with("-ERR member '") && !err.contains(&long),
        "{err}"
    );
}

#[test]
fn ids_zero_and_max_are_members_like_any_other() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(q::<i64>(&mut con, &["SADD", "s", "0", MAX_TEXT, "5"]), 3);
    assert_eq!(q::<i64>(&mut con, &["SADD", "s", "0", MAX_TEXT]), 0);
    assert_eq!(q::<i64>(&mut con, &["SCARD", "s"]), 3);
    assert_eq!(members(&mut con, &["SMEMBERS", "s"]), vec![0, 5, MAX]);
    assert_eq!(
        q::<Vec<i64>>(&mut con, &["SMISMEMBER", "s", "0", MAX_TEXT, "1"]),
        vec![1, 1, 0]
    );
    assert_eq!(q::<i64>(&mut con, &["SREM", "s", "0"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SISMEMBER", "s", "0"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SISMEMBER", "s", MAX_TEXT]), 1);
    assert_eq!(members(&mut con, &["SINTER", "s", "s"]), vec![5, MAX]);
    // A set of only the flag ids is still a set; removing them deletes it.
    assert_eq!(q::<i64>(&mut con, &["SADD", "f", "0", MAX_TEXT]), 2);
    assert_eq!(q::<i64>(&mut con, &["SCARD", "f"]), 2);
    assert_eq!(q::<i64>(&mut con, &["SREM", "f", "0", MAX_TEXT]), 2);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "f"]), 0);
}

#[test]
fn a_20000_member_sadd_then_reads() {
    let s = TestServer::start();
    let mut con = s.conn();
    let ids: Vec<u64> = (0..20_000u64).map(|i| i * 7919 + 1).collect();
    let mut cmd = redis::cmd("SADD");
    cmd.arg("big");
    for id in &ids {
        cmd.arg(*id);
    }
    assert_eq!(cmd.query::<i64>(&mut con).unwrap(), 20_000);
    assert_eq!(q::<i64>(&mut con, &["SCARD", "big"]), 20_000);
    for id in [ids[0], ids[9_999], ids[19_999]] {
        assert_eq!(
            q::<i64>(&mut con, &["SISMEMBER", "big", &id.to_string()]),
            1
        );
    }
    assert_eq!(q::<i64>(&mut con, &["SISMEMBER", "big", "2"]), 0);
    // One batch of 100 mixed probes, the relation service's hot path.
    let mut probe = redis::cmd("SMISMEMBER");
    probe.arg("big");
    for i in 0..100u64 {
        probe.arg(if i % 2 == 0 {
            ids[(i * 199) as usize]
        } else {
            i * 7919 + 2
        });
    }
    let hits: Vec<i64> = probe.query(&mut con).unwrap();
    assert_eq!(
        hits,
        (0..100).map(|i| i64::from(i % 2 == 0)).collect::<Vec<_>>()
    );

    // Growing it: half the next batch is already there, so 10,000 are new; the
    // table is rebuilt larger and every member is still found.
    let more: Vec<u64> = ids[10_000..]
        .iter()
        .copied()
        .chain((0..10_000u64).map(|i| i * 7919 + 3))
        .collect();
    let mut cmd = redis::cmd("SADD");
    cmd.arg("big");
    for id in &more {
        cmd.arg(*id);
    }
    assert_eq!(cmd.query::<i64>(&mut con).unwrap(), 10_000);
    assert_eq!(q::<i64>(&mut con, &["SCARD", "big"]), 30_000);
    let all = members(&mut con, &["SMEMBERS", "big"]);
    let mut want: Vec<u64> = ids
        .iter()
        .chain(&more)
        .copied()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    want.sort_unstable();
    assert_eq!(all, want);
}

#[test]
fn adds_one_at_a_time_grow_the_table() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut pipe = redis::pipe();
    for id in 1..=3000u64 {
        pipe.cmd("SADD").arg("g").arg(id).ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    assert_eq!(q::<i64>(&mut con, &["SCARD", "g"]), 3000);
    assert_eq!(
        members(&mut con, &["SMEMBERS", "g"]),
        (1..=3000).collect::<Vec<u64>>()
    );
}

#[test]
fn concurrent_adds_to_one_key_lose_nothing() {
    // Each add that needs a bigger table rebuilds it with the lock released; a
    // concurrent add that lands meanwhile must not be lost when the rebuilt table
    // is swapped in.
    let s = TestServer::start();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let mut con = s.conn();
            std::thread::spawn(move || {
                for batch in 0..100u64 {
                    let mut cmd = redis::cmd("SADD");
                    cmd.arg("shared");
                    for i in 0..50u64 {
                        cmd.arg(1 + t * 1_000_000 + batch * 50 + i);
                    }
                    assert_eq!(cmd.query::<i64>(&mut con).unwrap(), 50);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut con = s.conn();
    assert_eq!(q::<i64>(&mut con, &["SCARD", "shared"]), 20_000);
    let all = members(&mut con, &["SMEMBERS", "shared"]);
    let mut want: Vec<u64> = (0..4u64)
        .flat_map(|t| (1..=5000).map(move |i| t * 1_000_000 + i))
        .collect();
    want.sort_unstable();
    assert_eq!(all, want);
}

#[test]
fn adds_inside_multi_exec_grow_under_the_transaction() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut pipe = redis::pipe();
    pipe.atomic();
    for chunk in (1..=2000u64).collect::<Vec<_>>().chunks(100) {
        pipe.cmd("SADD").arg("m").arg(chunk);
    }
    pipe.cmd("SCARD").arg("m");
    let replies: Vec<i64> = pipe.query(&mut con).unwrap();
    assert_eq!(&replies[..20], &[100; 20]);
    assert_eq!(replies[20], 2000);
    assert_eq!(
        members(&mut con, &["SMEMBERS", "m"]),
        (1..=2000).collect::<Vec<u64>>()
    );
}

#[test]
fn watch_fires_only_when_the_set_changes() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut other = s.conn();
    assert_eq!(q::<i64>(&mut con, &["SADD", "w", "1", "2"]), 2);
    // Adding existing members or removing absent ones modifies nothing (Redis does
    // not signal the key), so the transaction runs.
    let () = q(&mut con, &["WATCH", "w"]);
    assert_eq!(q::<i64>(&mut other, &["SADD", "w", "1", "2"]), 0);
    assert_eq!(q::<i64>(&mut other, &["SREM", "w", "7"]), 0);
    let () = q(&mut con, &["MULTI"]);
    let _: String = q(&mut con, &["PING"]);
    let ran: Option<Vec<String>> = q(&mut con, &["EXEC"]);
    assert_eq!(ran, Some(vec!["PONG".to_string()]));
    // A real add aborts it.
    let () = q(&mut con, &["WATCH", "w"]);
    assert_eq!(q::<i64>(&mut other, &["SADD", "w", "3"]), 1);
    let () = q(&mut con, &["MULTI"]);
    let _: String = q(&mut con, &["PING"]);
    let ran: Option<Vec<String>> = q(&mut con, &["EXEC"]);
    assert_eq!(ran, None);
}

// ---- reply shapes ----------------------------------------------------------------

#[test]
fn reply_shapes_in_resp2_and_resp3() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SADD", "one", "5"], b":1\r\n");
    raw.expect(&["SADD", "two", "5", "6"], b":2\r\n");
    // RESP2: sets are arrays.
    raw.expect(&["SMEMBERS", "one"], b"*1\r\n$1\r\n5\r\n");
    raw.expect(&["SMEMBERS", "missing"], b"*0\r\n");
    raw.expect(&["SINTER", "one", "two"], b"*1\r\n$1\r\n5\r\n");
    raw.expect(&["SPOP", "missing"], b"$-1\r\n");
    raw.expect(&["SRANDMEMBER", "missing"], b"$-1\r\n");

    let hello = raw.frame(&["HELLO", "3"]);
    assert!(matches!(hello, Frame::Map(_)), "{hello:?}");
    raw.expect(&["SMEMBERS", "one"], b"~1\r\n$1\r\n5\r\n");
    raw.expect(&["SMEMBERS", "missing"], b"~0\r\n");
    for cmd in [
        &["SMEMBERS", "two"][..],
        &["SINTER", "two", "two"],
        &["SUNION", "one", "two"],
    ] {
        match raw.frame(cmd) {
            Frame::Set(items) => assert_eq!(frame_ids(&items), vec![5, 6], "{cmd:?}"),
            other => panic!("{cmd:?}: {other:?}"),
        }
    }
    raw.expect(&["SINTER", "one", "missing"], b"~0\r\n");
    raw.expect(&["SDIFF", "two", "one"], b"~1\r\n$1\r\n6\r\n");
    raw.expect(&["SMISMEMBER", "two", "6", "7"], b"*2\r\n:1\r\n:0\r\n");
    raw.expect(&["SMISMEMBER", "missing", "6"], b"*1\r\n:0\r\n");
    // Inside a transaction's reply too (an aggregate nested in EXEC's).
    raw.expect(&["MULTI"], b"+OK\r\n");
    raw.expect(&["SMISMEMBER", "two", "7", "6"], b"+QUEUED\r\n");
    raw.expect(&["EXEC"], b"*1\r\n*2\r\n:0\r\n:1\r\n");
    raw.expect(&["SISMEMBER", "missing", "6"], b":0\r\n");
    raw.expect(
        &["SSCAN", "one", "0"],
        b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\n5\r\n",
    );
    raw.expect(&["SSCAN", "missing", "0"], b"*2\r\n$1\r\n0\r\n*0\r\n");
    raw.expect(&["SRANDMEMBER", "one", "1"], b"*1\r\n$1\r\n5\r\n");
    raw.expect(
        &["SRANDMEMBER", "one", "-2"],
        b"*2\r\n$1\r\n5\r\n$1\r\n5\r\n",
    );
    raw.expect(&["SRANDMEMBER", "missing", "2"], b"*0\r\n");
    raw.expect(&["SRANDMEMBER", "missing"], b"_\r\n");
    raw.expect(&["SPOP", "missing"], b"_\r\n");
    raw.expect(&["SPOP", "missing", "2"], b"~0\r\n");
    raw.expect(&["SPOP", "one", "0"], b"~0\r\n");
    raw.expect(&["SPOP", "one", "5"], b"~1\r\n$1\r\n5\r\n");
    raw.expect(&["SINTERCARD", "1", "two"], b":2\r\n");
}

/// The integer replies of the checks and changes a relation service sends, in one
/// pipeline, byte for byte: where nothing has to go out before them they are
/// written straight into the output, otherwise returned as frames (inside EXEC,
/// for a RESP3 client, which has a push queue, and for a tracking one), and every
/// kind stays in order with the replies around it (errors, nulls, `+OK`).
#[test]
fn integer_replies_in_order_whichever_way_they_are_written() {
    let s = TestServer::start();
    const WRONG: &[u8] = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    for (setup, null) in [
        (&[][..], &b"$-1\r\n"[..]),
        (&[&["CLIENT", "TRACKING", "ON"][..]][..], b"$-1\r\n"),
        (&[&["HELLO", "3"][..]][..], b"_\r\n"),
        (
            &[&["HELLO", "3"][..], &["CLIENT", "TRACKING", "ON", "NOLOOP"]][..],
            b"_\r\n",
        ),
    ] {
        let mut raw = Raw::new(&s);
        raw.call(&["FLUSHALL"]);
        // NOLOOP for the RESP3 tracker: its own writes would send invalidations
        // between the replies (tests/client_tracking.rs has those).
        for cmd in setup {
            raw.frame(cmd);
        }
        // Shown with the failure, which says only what differed.
        eprintln!("after {setup:?}");
        raw.expect_pipeline(&[
            (&["SADD", "s", "1", "2", "3"][..], &b":3\r\n"[..]),
            (&["SADD", "s", "3", "4"], b":1\r\n"),
            (&["SISMEMBER", "s", "2"], b":1\r\n"),
            (&["SISMEMBER", "s", "9"], b":0\r\n"),
            (&["SISMEMBER", "s", "abc"], b":0\r\n"),
            (&["SISMEMBER", "nokey", "1"], b":0\r\n"),
            (&["SCARD", "s"], b":4\r\n"),
            (&["SCARD", "nokey"], b":0\r\n"),
            (&["EXISTS", "s", "nokey", "s"], b":2\r\n"),
            (&["SET", "str", "v"], b"+OK\r\n"),
            (&["SISMEMBER", "str", "1"], WRONG),
            (&["IDSET.EXISTS", "s", "4"], b":1\r\n"),
            (&["IDSET.EXISTS", "s", "5"], b":0\r\n"),
            (&["IDSET.EXISTS", "nokey", "1"], null),
            (&["IDSET.EXISTS", "str", "1"], WRONG),
            (&["IDSET.ADD", "s", "5"], b":1\r\n"),
            (&["IDSET.ADD", "nokey", "XX", "5"], null),
            (&["IDSET.REM", "s", "5", "6"], b":1\r\n"),
            (&["SREM", "s", "1", "9"], b":1\r\n"),
            (&["SREM", "s", "9"], b":0\r\n"),
            (&["SREM", "nokey", "1"], b":0\r\n"),
            (&["SADD", "s", "12345678901234"], b":1\r\n"),
            (&["SCARD", "s"], b":4\r\n"),
            (&["MULTI"], b"+OK\r\n"),
            (&["SISMEMBER", "s", "2"], b"+QUEUED\r\n"),
            (&["SADD", "s", "7"], b"+QUEUED\r\n"),
            (&["IDSET.EXISTS", "s", "7"], b"+QUEUED\r\n"),
            (&["EXISTS", "s"], b"+QUEUED\r\n"),
            (&["SCARD", "s"], b"+QUEUED\r\n"),
            (&["EXEC"], b"*5\r\n:1\r\n:1\r\n:1\r\n:1\r\n:5\r\n"),
            (&["SISMEMBER", "s", "7"], b":1\r\n"),
            // Counts of two digits.
            (
                &[
                    "SADD", "big", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12",
                ],
                b":12\r\n",
            ),
            (&["SCARD", "big"], b":12\r\n"),
            (
                &[
                    "SREM", "big", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11",
                ],
                b":11\r\n",
            ),
            (
                &[
                    "EXISTS", "big", "big", "big", "big", "big", "big", "big", "big", "big", "big",
                ],
                b":10\r\n",
            ),
        ]);
    }
}

// ---- SSCAN -----------------------------------------------------------------------

#[test]
fn sscan_returns_every_member_exactly_once() {
    let s = TestServer::start();
    let mut con = s.conn();
    let ids: Vec<u64> = (1..=2000u64).map(|i| i * 31).chain([0, MAX]).collect();
    let mut cmd = redis::cmd("SADD");
    cmd.arg("s").arg(&ids);
    assert_eq!(cmd.query::<i64>(&mut con).unwrap(), 2002);
    for count in ["1", "7", "10", "500", "100000"] {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let (next, page): (String, Vec<String>) =
                q(&mut con, &["SSCAN", "s", &cursor, "COUNT", count]);
            for m in page {
                *seen.entry(m.parse().unwrap()).or_default() += 1;
            }
            calls += 1;
            if next == "0" {
                break;
            }
            cursor = next;
        }
        assert_eq!(seen.len(), ids.len(), "COUNT {count}: every member");
        assert!(
            seen.values().all(|&n| n == 1),
            "COUNT {count}: each exactly once"
        );
        if count == "1" {
            assert!(calls > 100, "COUNT is honoured: {calls} calls");
        }
    }
    // MATCH filters on the decimal text.
    let mut matched = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, page): (String, Vec<String>) = q(
            &mut con,
            &["SSCAN", "s", &cursor, "MATCH", "1*5", "COUNT", "50"],
        );
        matched.extend(page.into_iter().map(|m| m.parse::<u64>().unwrap()));
        if next == "0" {
            break;
        }
        cursor = next;
    }
    matched.sort_unstable();
    let mut want: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|id| {
            let t = id.to_string();
            t.starts_with('1') && t.ends_with('5')
        })
        .collect();
    want.sort_unstable();
    assert!(want.contains(&MAX), "the pattern covers a flag id");
    assert_eq!(matched, want);
}

#[test]
fn sscan_arguments_follow_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SADD", "s", "1", "2", "3"], b":3\r\n");
    raw.expect(&["SET", "str", "x"], b"+OK\r\n");
    raw.expect_err(&["SSCAN", "s", "abc"], "ERR invalid cursor");
    raw.expect_err(&["SSCAN", "s", " 0"], "ERR invalid cursor");
    raw.expect_err(&["SSCAN", "s", "-"], "ERR invalid cursor");
    raw.expect_err(
        &["SSCAN", "s", "18446744073709551616"],
        "ERR invalid cursor",
    );
    raw.expect_err(&["SSCAN", "missing", "x"], "ERR invalid cursor");
    // strtoul spellings Redis accepts.
    for cursor in ["", "+0", "-0", "000"] {
        match raw.frame(&["SSCAN", "s", cursor]) {
            Frame::Array(parts) => match &parts[1] {
                Frame::Array(items) => {
                    assert_eq!(frame_ids(items), vec![1, 2, 3], "cursor {cursor:?}")
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
    // A cursor past the end just ends.
    raw.expect(&["SSCAN", "s", "-1"], b"*2\r\n$1\r\n0\r\n*0\r\n");
    raw.expect_err(&["SSCAN", "s", "0", "COUNT", "0"], "ERR syntax error");
    raw.expect_err(&["SSCAN", "s", "0", "COUNT", "-1"], "ERR syntax error");
    raw.expect_err(
        &["SSCAN", "s", "0", "COUNT", "abc"],
        "ERR value is not an integer or out of range",
    );
    raw.expect_err(&["SSCAN", "s", "0", "MATCH"], "ERR syntax error");
    raw.expect_err(&["SSCAN", "s", "0", "TYPE", "string"], "ERR syntax error");
    raw.expect_err(&["SSCAN", "s", "0", "BOGUS", "1"], "ERR syntax error");
    // Redis looks up the key before reading the options.
    raw.expect(
        &["SSCAN", "missing", "0", "COUNT", "abc"],
        b"*2\r\n$1\r\n0\r\n*0\r\n",
    );
    raw.expect_err(&["SSCAN", "str", "0", "COUNT", "0"], WRONGTYPE);
    raw.expect(
        &[
            "SSCAN", "s", "0", "MATCH", "2", "COUNT", "5", "COUNT", "100",
        ],
        b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\n2\r\n",
    );
}

// ---- multi-key commands ----------------------------------------------------------

#[test]
fn sinter_sunion_sdiff_and_their_stores() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(
        q::<i64>(&mut con, &["SADD", "a", "1", "2", "3", "4", "0"]),
        5
    );
    assert_eq!(q::<i64>(&mut con, &["SADD", "b", "2", "3", "5", "0"]), 4);
    assert_eq!(
        q::<i64>(&mut con, &["SADD", "c", "3", "4", "5", "0", MAX_TEXT]),
        5
    );

    assert_eq!(members(&mut con, &["SINTER", "a"]), vec![0, 1, 2, 3, 4]);
    assert_eq!(members(&mut con, &["SINTER", "a", "b"]), vec![0, 2, 3]);
    assert_eq!(members(&mut con, &["SINTER", "a", "b", "c"]), vec![0, 3]);
    assert_eq!(
        members(&mut con, &["SINTER", "a", "b", "missing"]),
        Vec::<u64>::new()
    );
    assert_eq!(
        members(&mut con, &["SUNION", "a", "b", "missing", "c"]),
        vec![0, 1, 2, 3, 4, 5, MAX]
    );
    assert_eq!(members(&mut con, &["SUNION", "missing"]), Vec::<u64>::new());
    assert_eq!(members(&mut con, &["SDIFF", "a", "b"]), vec![1, 4]);
    assert_eq!(members(&mut con, &["SDIFF", "a", "b", "c"]), vec![1]);
    assert_eq!(
        members(&mut con, &["SDIFF", "a", "missing"]),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        members(&mut con, &["SDIFF", "missing", "a"]),
        Vec::<u64>::new()
    );
    assert_eq!(members(&mut con, &["SDIFF", "a", "a"]), Vec::<u64>::new());
    // Many sets (the sort-based union).
    let many: Vec<&str> = ["SUNION"]
        .into_iter()
        .chain(["a", "b", "c"].iter().cycle().take(12).copied())
        .collect();
    assert_eq!(members(&mut con, &many), vec![0, 1, 2, 3, 4, 5, MAX]);

    assert_eq!(q::<i64>(&mut con, &["SINTERSTORE", "d", "a", "b"]), 3);
    assert_eq!(members(&mut con, &["SMEMBERS", "d"]), vec![0, 2, 3]);
    assert_eq!(q::<i64>(&mut con, &["SUNIONSTORE", "d", "a", "c"]), 7);
    assert_eq!(
        members(&mut con, &["SMEMBERS", "d"]),
        vec![0, 1, 2, 3, 4, 5, MAX]
    );
    assert_eq!(
        q::<i64>(&mut con, &["SDIFFSTORE", "d", "d", "a"]),
        2,
        "the destination may be a source"
    );
    assert_eq!(members(&mut con, &["SMEMBERS", "d"]), vec![5, MAX]);
    // An empty result deletes the destination.
    assert_eq!(q::<i64>(&mut con, &["SINTERSTORE", "d", "a", "missing"]), 0);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "d"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SUNIONSTORE", "d", "b"]), 4);
    assert_eq!(q::<i64>(&mut con, &["SDIFFSTORE", "d", "a", "a"]), 0);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "d"]), 0);
    // A store replaces a string destination and drops its TTL, as SET would.
    let () = q(&mut con, &["SET", "d", "text", "EX", "100"]);
    assert_eq!(q::<i64>(&mut con, &["SUNIONSTORE", "d", "a"]), 5);
    assert_eq!(q::<String>(&mut con, &["TYPE", "d"]), "set");
    assert_eq!(q::<i64>(&mut con, &["TTL", "d"]), -1);
    // Sources are not changed.
    assert_eq!(members(&mut con, &["SMEMBERS", "a"]), vec![0, 1, 2, 3, 4]);
}

#[test]
fn sintercard_follows_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SADD", "a", "1", "2", "3", "4"], b":4\r\n");
    raw.expect(&["SADD", "b", "2", "3", "4", "5"], b":4\r\n");
    raw.expect(&["SET", "str", "x"], b"+OK\r\n");
    raw.expect(&["SINTERCARD", "2", "a", "b"], b":3\r\n");
    raw.expect(&["SINTERCARD", "1", "a"], b":4\r\n");
    raw.expect(&["SINTERCARD", "2", "a", "b", "LIMIT", "2"], b":2\r\n");
    raw.expect(&["SINTERCARD", "2", "a", "b", "limit", "0"], b":3\r\n");
    raw.expect(&["SINTERCARD", "2", "a", "b", "LIMIT", "10"], b":3\r\n");
    raw.expect(
        &["SINTERCARD", "1", "a", "LIMIT", "1", "LIMIT", "3"],
        b":3\r\n",
    );
    raw.expect(&["SINTERCARD", "2", "a", "missing"], b":0\r\n");
    for numkeys in ["0", "-1", "abc", "01"] {
        raw.expect_err(
            &["SINTERCARD", numkeys, "a"],
            "ERR numkeys should be greater than 0",
        );
    }
    raw.expect_err(
        &["SINTERCARD", "3", "a", "b"],
        "ERR Number of keys can't be greater than number of args",
    );
    raw.expect_err(
        &["SINTERCARD", "2", "a", "b", "LIMIT", "-1"],
        "ERR LIMIT can't be negative",
    );
    raw.expect_err(
        &["SINTERCARD", "2", "a", "b", "LIMIT", "abc"],
        "ERR LIMIT can't be negative",
    );
    raw.expect_err(&["SINTERCARD", "2", "a", "b", "LIMIT"], "ERR syntax error");
    raw.expect_err(
        &["SINTERCARD", "2", "a", "b", "FOO", "1"],
        "ERR syntax error",
    );
    raw.expect_err(&["SINTERCARD", "2", "missing", "str"], WRONGTYPE);
    raw.expect_err(&["SINTERCARD", "2", "str", "missing"], WRONGTYPE);
}

#[test]
fn smove_follows_redis() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut raw = Raw::new(&s);
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "missing", "dst", "1"]), 0);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "dst"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SADD", "src", "1", "2"]), 2);
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "src", "dst", "1"]), 1);
    assert_eq!(members(&mut con, &["SMEMBERS", "src"]), vec![2]);
    assert_eq!(members(&mut con, &["SMEMBERS", "dst"]), vec![1]);
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "src", "dst", "9"]), 0);
    // Same key: a membership test that changes nothing.
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "src", "src", "2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "src", "src", "9"]), 0);
    // Moving a member the destination already has still removes it from the source;
    // moving the last member deletes the source.
    assert_eq!(q::<i64>(&mut con, &["SADD", "dst", "2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "src", "dst", "2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "src"]), 0);
    assert_eq!(members(&mut con, &["SMEMBERS", "dst"]), vec![1, 2]);
    // Type errors leave both keys alone.
    raw.expect(&["SET", "str", "x"], b"+OK\r\n");
    raw.expect_err(&["SMOVE", "dst", "str", "1"], WRONGTYPE);
    raw.expect_err(&["SMOVE", "str", "dst", "1"], WRONGTYPE);
    raw.expect(&["SMOVE", "missing", "str", "1"], b":0\r\n");
    assert_eq!(members(&mut con, &["SMEMBERS", "dst"]), vec![1, 2]);
    // Flag ids move too.
    assert_eq!(q::<i64>(&mut con, &["SADD", "f", MAX_TEXT]), 1);
    assert_eq!(q::<i64>(&mut con, &["SMOVE", "f", "dst", MAX_TEXT]), 1);
    assert_eq!(members(&mut con, &["SMEMBERS", "dst"]), vec![1, 2, MAX]);
}

// ---- random members --------------------------------------------------------------

#[test]
fn srandmember_follows_redis() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut raw = Raw::new(&s);
    let ids: Vec<u64> = (1..=20).chain([0, MAX]).collect();
    let mut cmd = redis::cmd("SADD");
    cmd.arg("s").arg(&ids);
    assert_eq!(cmd.query::<i64>(&mut con).unwrap(), 22);

    let mut seen = HashSet::new();
    for _ in 0..500 {
        let m: u64 = q::<String>(&mut con, &["SRANDMEMBER", "s"])
            .parse()
            .unwrap();
        assert!(ids.contains(&m));
        seen.insert(m);
    }
    assert_eq!(
        seen.len(),
        ids.len(),
        "every member turns up, flag ids included"
    );
    // Positive count: distinct members, at most the whole set.
    for count in [1usize, 5, 21] {
        let got = members(&mut con, &["SRANDMEMBER", "s", &count.to_string()]);
        assert_eq!(got.len(), count);
        assert_eq!(got.iter().collect::<HashSet<_>>().len(), count, "distinct");
        assert!(got.iter().all(|m| ids.contains(m)));
    }
    let mut all = ids.clone();
    all.sort_unstable();
    assert_eq!(members(&mut con, &["SRANDMEMBER", "s", "22"]), all);
    assert_eq!(members(&mut con, &["SRANDMEMBER", "s", "1000"]), all);
    // Negative count: exactly |count| members, repeats allowed.
    let got = members(&mut con, &["SRANDMEMBER", "s", "-100"]);
    assert_eq!(got.len(), 100);
    assert!(got.iter().all(|m| ids.contains(m)));
    assert!(
        got.windows(2).any(|w| w[0] == w[1]),
        "100 draws from 22 repeat"
    );
    assert_eq!(
        q::<Vec<String>>(&mut con, &["SRANDMEMBER", "s", "0"]),
        Vec::<String>::new()
    );
    assert_eq!(
        q::<i64>(&mut con, &["SCARD", "s"]),
        22,
        "SRANDMEMBER changes nothing"
    );

    raw.expect_err(
        &["SRANDMEMBER", "s", "abc"],
        "ERR value is not an integer or out of range",
    );
    raw.expect_err(
        &["SRANDMEMBER", "s", "-9223372036854775808"],
        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
    );
    raw.expect_err(&["SRANDMEMBER", "s", "1", "2"], "ERR syntax error");
    raw.expect(&["SRANDMEMBER", "missing", "-5"], b"*0\r\n");
}

#[test]
fn spop_follows_redis() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut raw = Raw::new(&s);
    let ids: Vec<u64> = (1..=30).chain([0, MAX]).collect();
    let mut cmd = redis::cmd("SADD");
    cmd.arg("s").arg(&ids);
    assert_eq!(cmd.query::<i64>(&mut con).unwrap(), 32);

    let mut left: HashSet<u64> = ids.iter().copied().collect();
    let one: u64 = q::<String>(&mut con, &["SPOP", "s"]).parse().unwrap();
    assert!(left.remove(&one), "popped a member");
    assert_eq!(
        q::<i64>(&mut con, &["SISMEMBER", "s", &one.to_string()]),
        0,
        "and removed it"
    );
    let some = members(&mut con, &["SPOP", "s", "10"]);
    assert_eq!(some.len(), 10);
    for m in &some {
        assert!(left.remove(m), "{m} popped twice or never there");
    }
    let mut rest: Vec<u64> = left.iter().copied().collect();
    rest.sort_unstable();
    assert_eq!(members(&mut con, &["SMEMBERS", "s"]), rest);
    // Popping at least the whole set returns it and deletes the key.
    assert_eq!(members(&mut con, &["SPOP", "s", "100"]), rest);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "s"]), 0);
    // Popping the last member one at a time deletes the key too.
    assert_eq!(q::<i64>(&mut con, &["SADD", "t", "7"]), 1);
    assert_eq!(q::<String>(&mut con, &["SPOP", "t"]), "7");
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "t"]), 0);

    raw.expect(&["SADD", "u", "1"], b":1\r\n");
    raw.expect_err(
        &["SPOP", "u", "-1"],
        "ERR value is out of range, must be positive",
    );
    raw.expect_err(
        &["SPOP", "u", "abc"],
        "ERR value is out of range, must be positive",
    );
    raw.expect_err(
        &["SPOP", "missing", "-1"],
        "ERR value is out of range, must be positive",
    );
    raw.expect_err(&["SPOP", "u", "1", "2"], "ERR syntax error");
    raw.expect(&["SPOP", "u", "0"], b"*0\r\n");
    raw.expect(&["SCARD", "u"], b":1\r\n");
}

// ---- metadata --------------------------------------------------------------------

/// (name, arity, flags, first key, last key, step), as COMMAND INFO reports them.
type CommandRow = (&'static str, i64, &'static [&'static str], i64, i64, i64);

/// A command over big sets holds up nobody else: once it knows it walks more
/// than a few tens of thousands of members, the loop goes on without it. With
/// one loop, a PING sent while each of these works on two sets of 1M ids is
/// answered before it replies (they held the loop for 60–250 ms before); so
/// is one sent while SCAN walks 300,000 keys at once.
#[test]
fn commands_over_big_sets_hold_up_no_other_client() {
    let srv = TestServer::start_with(&["--threads", "1"]);
    let mut con = srv.conn();
    let ids = 1_000_000u64;
    for (key, step) in [("a", 2u64), ("b", 3)] {
        let members: Vec<u64> = (0..ids).map(|i| i * step).collect();
        let added: u64 = redis::cmd("SADD")
            .arg(key)
            .arg(&members)
            .query(&mut con)
            .unwrap();
        assert_eq!(added, ids);
    }
    // And a keyspace for SCAN to walk.
    let keys: Vec<(String, u8)> = (0..300_000).map(|i| (format!("k:{i}"), 1)).collect();
    redis::cmd("MSET").arg(&keys).query::<()>(&mut con).unwrap();
    let heavy: [&[&str]; 8] = [
        &["SUNIONSTORE", "dst", "a", "b"],
        &["SINTERSTORE", "dst", "a", "b"],
        &["SUNION", "a", "b"],
        &["SINTERCARD", "2", "a", "b"],
        &["SMEMBERS", "a"],
        &["SRANDMEMBER", "a", "-1000000"],
        &["SSCAN", "a", "0", "COUNT", "10000000"],
        &["SCAN", "0", "COUNT", "10000000"],
    ];
    for cmd in heavy {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        // The reply of up to 2M members is not read: the connection is dropped.
        let mut heavy = harness::ping_answered_during(srv.port, &args, Duration::from_millis(5));
        // Read where it is small, so it is done before the next starts.
        let count = match cmd[0] {
            "SUNIONSTORE" => 2 * ids - (2 * ids).div_ceil(6),
            "SINTERSTORE" | "SINTERCARD" => (2 * ids).div_ceil(6),
            _ => continue,
        };
        assert_eq!(
            harness::read_line(&mut heavy),
            format!(":{count}\r\n").as_bytes()
        );
    }
    // Ids in both: the multiples of 6 below 2M.
    assert_eq!(q::<u64>(&mut con, &["SCARD", "dst"]), (2 * ids).div_ceil(6));
}

#[test]
fn command_table_matches_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    // (name, arity, flags, first key, last key, step) as Redis 7 reports them.
    let want: &[CommandRow] = &[
        ("sadd", -3, &["write", "denyoom", "fast"], 1, 1, 1),
        ("srem", -3, &["write", "fast"], 1, 1, 1),
        ("sismember", 3, &["readonly", "fast"], 1, 1, 1),
        ("smismember", -3, &["readonly", "fast"], 1, 1, 1),
        ("scard", 2, &["readonly", "fast"], 1, 1, 1),
        ("smembers", 2, &["readonly"], 1, 1, 1),
        ("sscan", -3, &["readonly"], 1, 1, 1),
        ("sinter", -2, &["readonly"], 1, -1, 1),
        ("sintercard", -3, &["readonly", "movablekeys"], 0, 0, 0),
        ("sinterstore", -3, &["write", "denyoom"], 1, -1, 1),
        ("sunion", -2, &["readonly"], 1, -1, 1),
        ("sunionstore", -3, &["write", "denyoom"], 1, -1, 1),
        ("sdiff", -2, &["readonly"], 1, -1, 1),
        ("sdiffstore", -3, &["write", "denyoom"], 1, -1, 1),
        ("srandmember", -2, &["readonly"], 1, 1, 1),
        ("spop", -2, &["write", "fast"], 1, 1, 1),
        ("smove", 4, &["write", "fast"], 1, 2, 1),
    ];
    for &(name, arity, flags, first, last, step) in want {
        let Frame::Array(outer) = raw.frame(&["COMMAND", "INFO", name]) else {
            panic!("{name}")
        };
        let Frame::Array(info) = &outer[0] else {
            panic!("{name}: {:?}", outer[0])
        };
        assert_eq!(info[1], Frame::Integer(arity), "{name} arity");
        let got_flags: Vec<String> = match &info[2] {
            Frame::Array(f) | Frame::Set(f) => f
                .iter()
                .map(|f| match f {
                    Frame::Simple(b) | Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(got_flags, flags, "{name} flags");
        assert_eq!(
            info[3..6],
            [
                Frame::Integer(first),
                Frame::Integer(last),
                Frame::Integer(step)
            ],
            "{name} keys"
        );
    }
    let mut con = s.conn();
    let keys: Vec<String> = q(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "SINTERCARD",
            "2",
            "a",
            "b",
            "LIMIT",
            "1",
        ],
    );
    assert_eq!(keys, ["a", "b"]);
    let keys: Vec<String> = q(&mut con, &["COMMAND", "GETKEYS", "SMOVE", "a", "b", "1"]);
    assert_eq!(keys, ["a", "b"]);
    let keys: Vec<String> = q(
        &mut con,
        &["COMMAND", "GETKEYS", "SDIFFSTORE", "d", "a", "b"],
    );
    assert_eq!(keys, ["d", "a", "b"]);
}

// ---- the model ---------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Add(Vec<u64>),
    Rem(Vec<u64>),
    IsMember(u64),
    MIsMember(Vec<u64>),
    Card,
    Members,
}

/// Mostly a small range, so adds collide and removes hit; the flag ids often.
fn id() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 1u64..40, 1 => Just(0u64), 1 => Just(MAX)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => proptest::collection::vec(id(), 1..8).prop_map(Op::Add),
        // Big batches: built before locking when they create the key, and make the
        // table grow when they do not.
        1 => proptest::collection::vec(prop_oneof![1u64..400, Just(0u64), Just(MAX)], 65..150).prop_map(Op::Add),
        3 => proptest::collection::vec(id(), 1..8).prop_map(Op::Rem),
        2 => id().prop_map(Op::IsMember),
        2 => proptest::collection::vec(id(), 1..12).prop_map(Op::MIsMember),
        1 => Just(Op::Card),
        1 => Just(Op::Members),
    ]
}

fn args_of(cmd: &str, key: &str, ids: &[u64]) -> redis::Cmd {
    let mut c = redis::cmd(cmd);
    c.arg(key).arg(ids);
    c
}

#[test]
fn server_matches_a_hashset_model() {
    let s = TestServer::start();
    let con = RefCell::new(s.conn());
    let case = Cell::new(0u32);
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..60), |ops| {
        let con = &mut *con.borrow_mut();
        case.set(case.get() + 1);
        let key = format!("model:{}", case.get());
        let mut model: HashSet<u64> = HashSet::new();
        for (step, op) in ops.iter().enumerate() {
            match op {
                Op::Add(ids) => {
                    let want = ids
                        .iter()
                        .collect::<HashSet<_>>()
                        .into_iter()
                        .filter(|&&id| model.insert(id))
                        .count();
                    let got: i64 = args_of("SADD", &key, ids).query(con).unwrap();
                    prop_assert_eq!(got as usize, want, "step {}: {:?}", step, op);
                }
                Op::Rem(ids) => {
                    let want = ids
                        .iter()
                        .collect::<HashSet<_>>()
                        .into_iter()
                        .filter(|&&id| model.remove(&id))
                        .count();
                    let got: i64 = args_of("SREM", &key, ids).query(con).unwrap();
                    prop_assert_eq!(got as usize, want, "step {}: {:?}", step, op);
                }
                Op::IsMember(id) => {
                    let got: i64 = redis::cmd("SISMEMBER")
                        .arg(&key)
                        .arg(*id)
                        .query(con)
                        .unwrap();
                    prop_assert_eq!(
                        got,
                        i64::from(model.contains(id)),
                        "step {}: {:?}",
                        step,
                        op
                    );
                }
                Op::MIsMember(ids) => {
                    let got: Vec<i64> = args_of("SMISMEMBER", &key, ids).query(con).unwrap();
                    let want: Vec<i64> =
                        ids.iter().map(|id| i64::from(model.contains(id))).collect();
                    prop_assert_eq!(got, want, "step {}: {:?}", step, op);
                }
                Op::Card => {
                    let got: i64 = redis::cmd("SCARD").arg(&key).query(con).unwrap();
                    prop_assert_eq!(got as usize, model.len(), "step {}", step);
                }
                Op::Members => {
                    let texts: Vec<String> = redis::cmd("SMEMBERS").arg(&key).query(con).unwrap();
                    let mut got: Vec<u64> = texts.iter().map(|t| t.parse().unwrap()).collect();
                    got.sort_unstable();
                    let mut want: Vec<u64> = model.iter().copied().collect();
                    want.sort_unstable();
                    prop_assert_eq!(got, want, "step {}", step);
                }
            }
            // An emptied set is deleted; a non-empty one exists.
            let exists: i64 = redis::cmd("EXISTS").arg(&key).query(con).unwrap();
            prop_assert_eq!(
                exists,
                i64::from(!model.is_empty()),
                "step {}: key existence",
                step
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A set of 100 ids in a table reserved for two million: every 64 random slots a
/// draw samples miss, and each draw used to fall back to a walk over all 2.7M slots,
/// so SRANDMEMBER -2000 took seconds under the shard lock (3.4 s in a release build).
/// Now a command gathers the members once when sampling fails.
#[test]
fn random_members_of_a_sparse_set_cost_one_walk() {
    let s = TestServer::start();
    let mut con = s.conn();
    con.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let ids: Vec<String> = (1..=100).map(|i| i.to_string()).collect();
    let mut args = vec!["IDSET.LOAD", "sp", "RESERVE", "2000000", "IDS"];
    args.extend(ids.iter().map(String::as_str));
    assert_eq!(q::<i64>(&mut con, &args), 100);
    let started = std::time::Instant::now();
    for (args, want) in [
        (&["SRANDMEMBER", "sp", "-20000"][..], 20_000),
        (&["SRANDMEMBER", "sp", "20"], 20),
        (&["SPOP", "sp", "20"], 20),
    ] {
        let got = members(&mut con, args);
        assert_eq!(got.len(), want, "{args:?}");
        assert!(got.iter().all(|id| (1..=100).contains(id)), "{args:?}");
    }
    // A walk of 2.7M slots is a few milliseconds even unoptimised; 20,000 of them
    // (what the negative count cost before) would be minutes.
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    assert_eq!(q::<i64>(&mut con, &["SCARD", "sp"]), 80);
}
