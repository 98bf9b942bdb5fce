//! End-to-end tests of the generic key family (DEL … OBJECT) against the real
//! server: replies, options, exact error bytes, SCAN's guarantee under concurrent
//! writes, lazy and active expiry, and WATCH interplay.

mod harness;

use std::collections::HashSet;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::{Raw, TestServer};
use redis::{Connection, FromRedisValue};
use relcache_protocol::resp::Frame;

// ---- helpers --------------------------------------------------------------------

/// Runs a command through the `redis` crate and converts the reply.
fn q<T: FromRedisValue>(con: &mut Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs a full SCAN with `opts`, returning every key and the number of calls.
fn scan_all(con: &mut Connection, opts: &[&str]) -> (Vec<String>, usize) {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    let mut calls = 0;
    loop {
        let mut args = vec!["SCAN", cursor.as_str()];
        args.extend_from_slice(opts);
        let (next, page): (String, Vec<String>) = q(con, &args);
        calls += 1;
        assert!(calls < 100_000, "SCAN does not terminate");
        keys.extend(page);
        if next == "0" {
            return (keys, calls);
        }
        cursor = next;
    }
}

fn set(con: &mut Connection, k: &str, v: &str) {
    let () = q(con, &["SET", k, v]);
}

// ---- DEL, UNLINK, EXISTS, TYPE, TOUCH -------------------------------------------

#[test]
fn del_counts_each_removed_key_once() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "a", "1");
    set(&mut con, "b", "2");
    let n: i64 = q(&mut con, &["DEL", "a", "b", "missing", "a"]);
    assert_eq!(n, 2, "a named twice counts once");
    let n: i64 = q(&mut con, &["EXISTS", "a", "b"]);
    assert_eq!(n, 0);
    let n: i64 = q(&mut con, &["DEL", "a"]);
    assert_eq!(n, 0);
}

#[test]
fn unlink_removes_like_del() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "a", "1");
    set(&mut con, "b", "2");
    let n: i64 = q(&mut con, &["UNLINK", "a", "b", "c"]);
    assert_eq!(n, 2);
    let v: Option<String> = q(&mut con, &["GET", "a"]);
    assert_eq!(v, None);
}

#[test]
fn arity_errors_name_the_command() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect_err(&["DEL"], "ERR wrong number of arguments for 'del' command");
    raw.expect_err(
        &["EXISTS"],
        "ERR wrong number of arguments for 'exists' command",
    );
    raw.expect_err(
        &["TYPE", "a", "b"],
        "ERR wrong number of arguments for 'type' command",
    );
    raw.expect_err(
        &["EXPIRE", "a"],
        "ERR wrong number of arguments for 'expire' command",
    );
    raw.expect_err(
        &["RENAME", "a"],
        "ERR wrong number of arguments for 'rename' command",
    );
    raw.expect_err(
        &["RANDOMKEY", "x"],
        "ERR wrong number of arguments for 'randomkey' command",
    );
    raw.expect_err(
        &["SCAN"],
        "ERR wrong number of arguments for 'scan' command",
    );
}

#[test]
fn exists_counts_repeated_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "a", "1");
    set(&mut con, "b", "1");
    let n: i64 = q(&mut con, &["EXISTS", "a", "a", "b", "nope", "a"]);
    assert_eq!(n, 4);
}

#[test]
fn type_is_a_status_reply_and_none_for_missing() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["TYPE", "k"], b"+string\r\n");
    raw.expect(&["TYPE", "missing"], b"+none\r\n");
    raw.call(&["IDSET.LOAD", "ids", "IDS", "1", "2"]);
    raw.expect(&["TYPE", "ids"], b"+set\r\n");
}

#[test]
fn touch_counts_existing_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "a", "1");
    set(&mut con, "b", "1");
    let n: i64 = q(&mut con, &["TOUCH", "a", "b", "c", "a"]);
    assert_eq!(n, 3);
}

// ---- KEYS ----------------------------------------------------------------------

/// Past 10k keys KEYS walks the keyspace off its worker: same answer.
#[test]
fn keys_over_a_big_keyspace_finds_every_match() {
    const N: usize = 30_000;
    let srv = TestServer::start();
    let mut con = srv.conn();
    for batch in (0..N).collect::<Vec<_>>().chunks(5_000) {
        let mut mset = redis::cmd("MSET");
        for i in batch {
            mset.arg(format!("k:{i}")).arg("v");
        }
        mset.query::<()>(&mut con).unwrap();
    }
    let all: HashSet<String> = q(&mut con, &["KEYS", "*"]);
    assert_eq!(all.len(), N);
    assert!(all.contains("k:0") && all.contains(&format!("k:{}", N - 1)));
    // k:2, k:20..k:29, k:200..k:299, k:2000..k:2999, k:20000..k:29999
    let twos: Vec<String> = q(&mut con, &["KEYS", "k:2*"]);
    assert_eq!(twos.len(), 1 + 10 + 100 + 1000 + 10_000);
}

#[test]
fn keys_matches_glob_patterns() {
    let s = TestServer::start();
    let mut con = s.conn();
    for k in [
        "user:1", "user:2", "user:10", "admin:1", "hello", "hallo", "hxllo", "a*b",
    ] {
        set(&mut con, k, "v");
    }
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let all: Vec<String> = q(&mut con, &["KEYS", "*"]);
    assert_eq!(all.len(), 8);
    let users: Vec<String> = q(&mut con, &["KEYS", "user:*"]);
    assert_eq!(sorted(users), ["user:1", "user:10", "user:2"]);
    let one: Vec<String> = q(&mut con, &["KEYS", "user:?"]);
    assert_eq!(sorted(one), ["user:1", "user:2"]);
    let class: Vec<String> = q(&mut con, &["KEYS", "h[ae]llo"]);
    assert_eq!(sorted(class), ["hallo", "hello"]);
    let negated: Vec<String> = q(&mut con, &["KEYS", "h[^e]llo"]);
    assert_eq!(sorted(negated), ["hallo", "hxllo"]);
    let escaped: Vec<String> = q(&mut con, &["KEYS", "a\\*b"]);
    assert_eq!(escaped, ["a*b"]);
    let mut raw = Raw::new(&s);
    raw.expect(&["KEYS", "nomatch*"], b"*0\r\n");
}

#[test]
fn keys_and_exists_skip_expired_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "live", "v");
    set(&mut con, "dying", "v");
    let n: i64 = q(&mut con, &["PEXPIRE", "dying", "20"]);
    assert_eq!(n, 1);
    sleep(Duration::from_millis(60));
    let all: Vec<String> = q(&mut con, &["KEYS", "*"]);
    assert_eq!(all, ["live"]);
    let n: i64 = q(&mut con, &["EXISTS", "dying"]);
    assert_eq!(n, 0);
    let t: String = q(&mut con, &["TYPE", "dying"]);
    assert_eq!(t, "none");
}

// ---- SCAN ----------------------------------------------------------------------

#[test]
fn scan_with_count_10_finds_all_1000_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("SET").arg(format!("key:{i}")).arg(i).ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    let mut calls = 0;
    loop {
        let (next, page): (String, Vec<String>) = q(&mut con, &["SCAN", &cursor, "COUNT", "10"]);
        calls += 1;
        assert!(
            page.len() <= 20,
            "COUNT is a hint, but a page of {} is far off",
            page.len()
        );
        seen.extend(page);
        if next == "0" {
            break;
        }
        assert!(
            next.parse::<u64>().is_ok(),
            "cursor {next} is a decimal u64"
        );
        cursor = next;
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), 1000, "every key is returned");
    assert!(seen.len() >= 1000);
    assert!(
        calls >= 50,
        "COUNT 10 over 1000 keys took only {calls} calls"
    );
    for i in 0..1000 {
        assert!(unique.contains(&format!("key:{i}")));
    }
}

#[test]
fn scan_default_count_is_small_and_large_count_is_one_page() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..200 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    let (first, page): (String, Vec<String>) = q(&mut con, &["SCAN", "0"]);
    assert_ne!(first, "0");
    assert!(
        !page.is_empty() && page.len() <= 10,
        "default COUNT is 10: got {}",
        page.len()
    );
    let (next, page): (String, Vec<String>) = q(&mut con, &["SCAN", "0", "COUNT", "1000"]);
    assert_eq!((next.as_str(), page.len()), ("0", 200));
}

#[test]
fn scan_match_filters_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    for i in 0..100 {
        set(&mut con, &format!("user:{i}"), "v");
        set(&mut con, &format!("post:{i}"), "v");
    }
    let (keys, _) = scan_all(&mut con, &["MATCH", "user:*", "COUNT", "7"]);
    let unique: HashSet<String> = keys.into_iter().collect();
    assert_eq!(unique.len(), 100);
    assert!(unique.iter().all(|k| k.starts_with("user:")));
    let (keys, _) = scan_all(&mut con, &["match", "user:1?"]);
    let unique: HashSet<String> = keys.into_iter().collect();
    assert_eq!(unique.len(), 10, "user:10 … user:19");
}

#[test]
fn scan_type_filters_by_type_name_case_insensitively() {
    let s = TestServer::start();
    let mut con = s.conn();
    for i in 0..20 {
        set(&mut con, &format!("s{i}"), "v");
    }
    let _: redis::Value = q(&mut con, &["IDSET.LOAD", "ids", "IDS", "1", "2", "3"]);
    let (strings, _) = scan_all(&mut con, &["TYPE", "string"]);
    assert_eq!(strings.iter().collect::<HashSet<_>>().len(), 20);
    assert!(!strings.contains(&"ids".to_string()));
    let (sets, _) = scan_all(&mut con, &["TYPE", "SET", "COUNT", "3"]);
    assert_eq!(sets, ["ids"]);
    let (both, _) = scan_all(&mut con, &["TYPE", "String", "MATCH", "s1*"]);
    assert_eq!(
        both.iter().collect::<HashSet<_>>().len(),
        11,
        "s1, s10 … s19"
    );
    // Redis 7.2 accepts an unknown type name and simply matches nothing.
    let (none, _) = scan_all(&mut con, &["TYPE", "nosuchtype"]);
    assert!(none.is_empty());
}

#[test]
fn scan_errors_match_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect_err(&["SCAN", "abc"], "ERR invalid cursor");
    // Redis 7 reads "-1" as ULONG_MAX (strtoul), a cursor it never issued: the scan
    // ends. (This asserted an error until SCAN took SSCAN's parser; see
    // `cursors_follow_redis_7_for_scan_sscan_and_idset_scan`.)
    raw.expect(&["SCAN", "-1"], b"*2\r\n$1\r\n0\r\n*0\r\n");
    raw.expect_err(&["SCAN", "1.5"], "ERR invalid cursor");
    raw.expect_err(&["SCAN", "18446744073709551616"], "ERR invalid cursor");
    raw.expect_err(&["SCAN", "0", "COUNT", "0"], "ERR syntax error");
    raw.expect_err(&["SCAN", "0", "COUNT", "-5"], "ERR syntax error");
    raw.expect_err(
        &["SCAN", "0", "COUNT", "x"],
        "ERR value is not an integer or out of range",
    );
    raw.expect_err(&["SCAN", "0", "MATCH"], "ERR syntax error");
    raw.expect_err(&["SCAN", "0", "TYPE"], "ERR syntax error");
    raw.expect_err(&["SCAN", "0", "BOGUS", "1"], "ERR syntax error");
    // The cursor is checked before the options.
    raw.expect_err(&["SCAN", "x", "BOGUS"], "ERR invalid cursor");
}

/// The cursor rule SCAN, SSCAN and IDSET.SCAN share, pinned to what Redis 7.0.15's
/// `parseScanCursorOrReply` (C's `strtoul`) answers — checked against a real
/// `redis-server` for SCAN and SSCAN: leading whitespace, trailing garbage, a sign
/// alone and overflow are refused; the empty string is 0; a minus sign wraps modulo
/// 2^64, so "-1" is the largest cursor.
#[test]
fn cursors_follow_redis_7_for_scan_sscan_and_idset_scan() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SADD", "s", "1", "2", "3"], b":3\r\n");
    raw.expect(&["IDSET.LOAD", "i", "IDS", "1", "2", "3"], b":3\r\n");
    let refused = [
        " 1",
        "\t1",
        " ",
        "1 ",
        "0 ",
        "-",
        "+",
        "abc",
        "1.5",
        "18446744073709551616",
        "-18446744073709551616",
    ];
    // Cursor 0 by another spelling: a first page.
    let first_page = ["", "0", "+0", "-0", "000"];
    // Cursors past any table and any shard: the scan ends, with nothing.
    let past_the_end = ["-1", "18446744073709551615", "+18446744073709551615"];
    let done = b"*2\r\n$1\r\n0\r\n*0\r\n";
    for (cmd, key) in [
        ("SCAN", None),
        ("SSCAN", Some("s")),
        ("IDSET.SCAN", Some("i")),
    ] {
        let call = |cursor| -> Vec<&str> { [cmd].into_iter().chain(key).chain([cursor]).collect() };
        for cursor in refused {
            raw.expect_err(&call(cursor), "ERR invalid cursor");
        }
        for cursor in first_page {
            let Frame::Array(parts) = raw.frame(&call(cursor)) else {
                panic!("{cmd} {cursor:?}: not an array");
            };
            let Frame::Array(items) = &parts[1] else {
                panic!("{cmd} {cursor:?}: {parts:?}");
            };
            let mut got: Vec<String> = items
                .iter()
                .map(|f| match f {
                    Frame::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
                    other => panic!("{other:?}"),
                })
                .collect();
            got.sort();
            let want = if key.is_some() {
                vec!["1", "2", "3"]
            } else {
                vec!["i", "s"]
            };
            assert_eq!(got, want, "{cmd} {cursor:?}");
        }
        for cursor in past_the_end {
            raw.expect(&call(cursor), done);
        }
        // "+1" and "-18446744073709551615" (which wraps to 1) are cursor 1, wherever
        // the command's own encoding places it: a valid reply, no error.
        for cursor in ["+1", "-18446744073709551615"] {
            let reply = raw.frame(&call(cursor));
            assert!(
                matches!(reply, Frame::Array(_)),
                "{cmd} {cursor:?}: {reply:?}"
            );
        }
    }
    // The cursor is read before the key: a bad one is refused even for a missing key.
    raw.expect_err(&["SSCAN", "missing", " 0"], "ERR invalid cursor");
    raw.expect_err(&["IDSET.SCAN", "missing", " 0"], "ERR invalid cursor");
}

/// An invented SCAN cursor decodes to a place (a shard and a position in it): the
/// scan resumes there and ends, never loops.
#[test]
fn an_invented_scan_cursor_resumes_and_ends() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.cmd("SET").arg(format!("k{i}")).arg("v").ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    // Shard index in bits 55.., position below: every shard from 1 on, a shard with
    // its position 0 (already finished), one past the last shard, and 2^63.
    for start in [1u64 << 55, (3u64 << 55) | 1, 256u64 << 55, 1 << 63, 12345] {
        let mut cursor = start.to_string();
        let mut calls = 0;
        loop {
            let (next, _): (String, Vec<String>) = q(&mut con, &["SCAN", &cursor, "COUNT", "100"]);
            calls += 1;
            assert!(calls < 1000, "SCAN from {start} does not end");
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
}

#[test]
fn scan_reply_shape_in_resp2_and_resp3() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SCAN", "0"], b"*2\r\n$1\r\n0\r\n*0\r\n");
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["SCAN", "0"], b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nk\r\n");
    // Any u64 is a cursor (Redis accepts what it never issued).
    raw.expect(
        &["SCAN", "18446744073709551615"],
        b"*2\r\n$1\r\n0\r\n*0\r\n",
    );
    let hello = raw.frame(&["HELLO", "3"]);
    assert!(matches!(hello, Frame::Map(_)), "{hello:?}");
    raw.expect(&["SCAN", "0"], b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nk\r\n");
}

#[test]
fn scan_returns_every_key_present_throughout_while_others_churn() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut writer = s.conn();
    let stable: Vec<String> = (0..500).map(|i| format!("stable:{i}")).collect();
    let churn: Vec<String> = (0..500).map(|i| format!("churn:{i}")).collect();
    let mut pipe = redis::pipe();
    for k in stable.iter().chain(&churn) {
        pipe.cmd("SET").arg(k).arg("v").ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    let mut seen = HashSet::new();
    let mut cursor = "0".to_string();
    let (mut deleted, mut added) = (0usize, 0usize);
    loop {
        let (next, page): (String, Vec<String>) = q(&mut con, &["SCAN", &cursor, "COUNT", "20"]);
        seen.extend(page);
        // Between pages another client deletes some keys and adds new ones, so
        // shards swap entries around and grow under the cursor.
        let mut pipe = redis::pipe();
        for _ in 0..4 {
            if deleted < churn.len() {
                pipe.cmd("DEL").arg(&churn[deleted]).ignore();
                deleted += 1;
            }
            pipe.cmd("SET")
                .arg(format!("new:{added}"))
                .arg("v")
                .ignore();
            added += 1;
        }
        let () = pipe.query(&mut writer).unwrap();
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert!(
        deleted > 100,
        "the scan ran alongside real churn ({deleted} deletions)"
    );
    let missed: Vec<&String> = stable.iter().filter(|k| !seen.contains(*k)).collect();
    assert!(
        missed.is_empty(),
        "SCAN missed {} stable keys, e.g. {:?}",
        missed.len(),
        &missed[..missed.len().min(5)]
    );
}

#[test]
fn scan_skips_expired_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    for i in 0..30 {
        set(&mut con, &format!("gone{i}"), "v");
        let _: i64 = q(&mut con, &["PEXPIRE", &format!("gone{i}"), "10"]);
    }
    set(&mut con, "kept", "v");
    sleep(Duration::from_millis(50));
    let (keys, _) = scan_all(&mut con, &["COUNT", "5"]);
    assert_eq!(keys, ["kept"]);
}

// ---- RANDOMKEY -----------------------------------------------------------------

#[test]
fn randomkey_is_nil_on_an_empty_keyspace() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["RANDOMKEY"], b"$-1\r\n");
    raw.frame(&["HELLO", "3"]);
    raw.expect(&["RANDOMKEY"], b"_\r\n");
}

#[test]
fn randomkey_returns_existing_keys_and_varies() {
    let s = TestServer::start();
    let mut con = s.conn();
    let keys: HashSet<String> = (0..20).map(|i| format!("r{i}")).collect();
    for k in &keys {
        set(&mut con, k, "v");
    }
    let mut got = HashSet::new();
    for _ in 0..200 {
        let k: String = q(&mut con, &["RANDOMKEY"]);
        assert!(keys.contains(&k), "{k} is not a key");
        got.insert(k);
    }
    assert!(
        got.len() >= 5,
        "200 draws over 20 keys gave only {} distinct",
        got.len()
    );
}

#[test]
fn randomkey_skips_expired_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    for i in 0..200 {
        set(&mut con, &format!("e{i}"), "v");
        let _: i64 = q(&mut con, &["PEXPIRE", &format!("e{i}"), "10"]);
    }
    set(&mut con, "live", "v");
    sleep(Duration::from_millis(50));
    for _ in 0..20 {
        let k: String = q(&mut con, &["RANDOMKEY"]);
        assert_eq!(k, "live");
    }
}

// ---- RENAME / RENAMENX ---------------------------------------------------------

#[test]
fn rename_moves_value_and_keeps_ttl() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "src", "hello");
    let _: i64 = q(&mut con, &["EXPIRE", "src", "100"]);
    let () = q(&mut con, &["RENAME", "src", "dst"]);
    let v: Option<String> = q(&mut con, &["GET", "dst"]);
    assert_eq!(v.as_deref(), Some("hello"));
    let n: i64 = q(&mut con, &["EXISTS", "src"]);
    assert_eq!(n, 0);
    let ttl: i64 = q(&mut con, &["TTL", "dst"]);
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
}

#[test]
fn rename_across_shards_keeps_value_and_ttl() {
    let s = TestServer::start();
    let mut con = s.conn();
    // 256 shards: among 40 pairs, almost all sit in different shards.
    for i in 0..40 {
        let (a, b) = (format!("from:{i}"), format!("to:{i}:{}", i * 7919));
        set(&mut con, &a, &format!("value-{i}"));
        let _: i64 = q(
            &mut con,
            &["PEXPIRE", &a, &(100_000 + i * 1000).to_string()],
        );
        let () = q(&mut con, &["RENAME", &a, &b]);
        let v: String = q(&mut con, &["GET", &b]);
        assert_eq!(v, format!("value-{i}"));
        let pttl: i64 = q(&mut con, &["PTTL", &b]);
        let want = 100_000 + i * 1000;
        assert!(
            pttl <= want && pttl > want - 2000,
            "pair {i}: pttl {pttl}, want ~{want}"
        );
        let gone: i64 = q(&mut con, &["EXISTS", &a]);
        assert_eq!(gone, 0);
    }
}

#[test]
fn rename_overwrites_destination_value_and_ttl() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "a", "new");
    set(&mut con, "b", "old");
    let _: i64 = q(&mut con, &["EXPIRE", "b", "100"]);
    let () = q(&mut con, &["RENAME", "a", "b"]);
    let v: String = q(&mut con, &["GET", "b"]);
    assert_eq!(v, "new");
    let ttl: i64 = q(&mut con, &["TTL", "b"]);
    assert_eq!(ttl, -1, "the destination takes the source's (absent) TTL");
}

#[test]
fn rename_of_missing_key_is_an_error() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect_err(&["RENAME", "nope", "x"], "ERR no such key");
    raw.expect_err(&["RENAMENX", "nope", "x"], "ERR no such key");
    raw.expect_err(&["RENAME", "nope", "nope"], "ERR no such key");
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["PEXPIRE", "k", "10"], b":1\r\n");
    sleep(Duration::from_millis(40));
    raw.expect_err(&["RENAME", "k", "x"], "ERR no such key");
}

#[test]
fn rename_onto_itself_changes_nothing() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["EXPIRE", "k", "100"], b":1\r\n");
    raw.expect(&["RENAME", "k", "k"], b"+OK\r\n");
    raw.expect(&["RENAMENX", "k", "k"], b":0\r\n");
    raw.expect(&["GET", "k"], b"$1\r\nv\r\n");
    let ttl = raw.frame(&["TTL", "k"]);
    assert!(matches!(ttl, Frame::Integer(99..=100)), "{ttl:?}");
}

#[test]
fn renamenx_only_when_destination_is_free() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "a", "1"], b"+OK\r\n");
    raw.expect(&["SET", "b", "2"], b"+OK\r\n");
    raw.expect(&["RENAMENX", "a", "b"], b":0\r\n");
    raw.expect(&["GET", "a"], b"$1\r\n1\r\n");
    raw.expect(&["GET", "b"], b"$1\r\n2\r\n");
    raw.expect(&["RENAMENX", "a", "c"], b":1\r\n");
    raw.expect(&["GET", "c"], b"$1\r\n1\r\n");
    raw.expect(&["EXISTS", "a"], b":0\r\n");
}

// ---- EXPIRE family, TTL, PERSIST -------------------------------------------------

#[test]
fn expire_sets_a_ttl_that_ttl_and_pttl_report() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["EXPIRE", "missing", "100"], b":0\r\n");
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["EXPIRE", "k", "100"], b":1\r\n");
    let ttl = raw.frame(&["TTL", "k"]);
    assert!(matches!(ttl, Frame::Integer(99..=100)), "{ttl:?}");
    let pttl = raw.frame(&["PTTL", "k"]);
    assert!(matches!(pttl, Frame::Integer(98_000..=100_000)), "{pttl:?}");
    raw.expect(&["PEXPIRE", "k", "5500"], b":1\r\n");
    let ttl = raw.frame(&["TTL", "k"]);
    assert!(
        matches!(ttl, Frame::Integer(5..=6)),
        "TTL rounds to the nearest second: {ttl:?}"
    );
}

#[test]
fn ttl_and_expiretime_for_missing_and_persistent_keys() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["TTL", "missing"], b":-2\r\n");
    raw.expect(&["PTTL", "missing"], b":-2\r\n");
    raw.expect(&["EXPIRETIME", "missing"], b":-2\r\n");
    raw.expect(&["PEXPIRETIME", "missing"], b":-2\r\n");
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["TTL", "k"], b":-1\r\n");
    raw.expect(&["PTTL", "k"], b":-1\r\n");
    raw.expect(&["EXPIRETIME", "k"], b":-1\r\n");
    raw.expect(&["PEXPIRETIME", "k"], b":-1\r\n");
}

#[test]
fn expireat_and_pexpireat_set_absolute_deadlines() {
    let s = TestServer::start();
    let mut con = s.conn();
    set(&mut con, "a", "v");
    set(&mut con, "b", "v");
    let at = now_secs() + 1000;
    let n: i64 = q(&mut con, &["EXPIREAT", "a", &at.to_string()]);
    assert_eq!(n, 1);
    let t: i64 = q(&mut con, &["EXPIRETIME", "a"]);
    assert_eq!(t, at);
    let pt: i64 = q(&mut con, &["PEXPIRETIME", "a"]);
    assert_eq!(pt, at * 1000);
    let pat = now_ms() + 123_456;
    let n: i64 = q(&mut con, &["PEXPIREAT", "b", &pat.to_string()]);
    assert_eq!(n, 1);
    let pt: i64 = q(&mut con, &["PEXPIRETIME", "b"]);
    assert_eq!(pt, pat);
    let t: i64 = q(&mut con, &["EXPIRETIME", "b"]);
    assert_eq!(t, pat / 1000);
    let ttl: i64 = q(&mut con, &["TTL", "b"]);
    assert!((122..=124).contains(&ttl), "ttl {ttl}");
}

#[test]
fn expire_in_the_past_deletes_the_key_and_returns_1() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    for (cmd, when) in [
        ("EXPIRE", "-1"),
        ("PEXPIRE", "0"),
        ("EXPIREAT", "1"),
        ("PEXPIREAT", "1000"),
    ] {
        raw.expect(&["SET", "k", "v"], b"+OK\r\n");
        raw.expect(&[cmd, "k", when], b":1\r\n");
        raw.expect(&["EXISTS", "k"], b":0\r\n");
        raw.expect(&["GET", "k"], b"$-1\r\n");
    }
}

#[test]
fn expire_nx_xx_gt_lt_conditions() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    // No TTL yet: XX and GT refuse (no TTL is infinite), LT accepts.
    raw.expect(&["EXPIRE", "k", "100", "XX"], b":0\r\n");
    raw.expect(&["EXPIRE", "k", "100", "GT"], b":0\r\n");
    raw.expect(&["TTL", "k"], b":-1\r\n");
    raw.expect(&["EXPIRE", "k", "100", "NX"], b":1\r\n");
    raw.expect(&["EXPIRE", "k", "200", "nx"], b":0\r\n");
    raw.expect(&["EXPIRE", "k", "50", "GT"], b":0\r\n");
    // Not "100": time passes between commands, so a fresh 100 s is a little greater.
    raw.expect(&["EXPIRE", "k", "90", "GT"], b":0\r\n");
    raw.expect(&["EXPIRE", "k", "200", "GT"], b":1\r\n");
    raw.expect(&["EXPIRE", "k", "300", "LT"], b":0\r\n");
    raw.expect(&["EXPIRE", "k", "150", "lt"], b":1\r\n");
    raw.expect(&["EXPIRE", "k", "120", "XX"], b":1\r\n");
    raw.expect(&["EXPIRE", "k", "110", "XX", "LT"], b":1\r\n");
    raw.expect(&["EXPIRE", "k", "500", "XX", "GT"], b":1\r\n");
    let ttl = raw.frame(&["TTL", "k"]);
    assert!(matches!(ttl, Frame::Integer(499..=500)), "{ttl:?}");
    raw.expect(&["PERSIST", "k"], b":1\r\n");
    raw.expect(&["PEXPIRE", "k", "100000", "LT"], b":1\r\n");
    let pttl = raw.frame(&["PTTL", "k"]);
    assert!(matches!(pttl, Frame::Integer(99_000..=100_000)), "{pttl:?}");
}

#[test]
fn expire_option_errors_match_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    let nx = "ERR NX and XX, GT or LT options at the same time are not compatible";
    raw.expect_err(&["EXPIRE", "k", "10", "NX", "XX"], nx);
    raw.expect_err(&["EXPIRE", "k", "10", "NX", "GT"], nx);
    raw.expect_err(&["PEXPIRE", "k", "10", "lt", "nx"], nx);
    raw.expect_err(
        &["EXPIRE", "k", "10", "GT", "LT"],
        "ERR GT and LT options at the same time are not compatible",
    );
    raw.expect_err(
        &["EXPIRE", "k", "10", "XX", "GT", "LT"],
        "ERR GT and LT options at the same time are not compatible",
    );
    raw.expect_err(&["EXPIRE", "k", "10", "foo"], "ERR Unsupported option foo");
    // Options are checked before the number.
    raw.expect_err(&["EXPIRE", "k", "abc", "foo"], "ERR Unsupported option foo");
    raw.expect_err(
        &["EXPIRE", "k", "abc"],
        "ERR value is not an integer or out of range",
    );
    raw.expect_err(
        &["EXPIREAT", "k", "1.5"],
        "ERR value is not an integer or out of range",
    );
    raw.expect(&["TTL", "k"], b":-1\r\n");
}

#[test]
fn expire_overflow_is_an_invalid_expire_time() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    let max = i64::MAX.to_string();
    raw.expect_err(
        &["EXPIRE", "k", &max],
        "ERR invalid expire time in 'expire' command",
    );
    raw.expect_err(
        &["PEXPIRE", "k", &max],
        "ERR invalid expire time in 'pexpire' command",
    );
    raw.expect_err(
        &["EXPIREAT", "k", &max],
        "ERR invalid expire time in 'expireat' command",
    );
    raw.expect_err(
        &["expire", "k", "-9223372036854775808"],
        "ERR invalid expire time in 'expire' command",
    );
    // The overflow check runs even for a missing key.
    raw.expect_err(
        &["EXPIRE", "missing", &max],
        "ERR invalid expire time in 'expire' command",
    );
    raw.expect(&["TTL", "k"], b":-1\r\n");
    // PEXPIREAT at i64::MAX does not overflow: a deadline far in the future.
    raw.expect(&["PEXPIREAT", "k", &max], b":1\r\n");
    raw.expect(&["PEXPIRETIME", "k"], format!(":{max}\r\n").as_bytes());
}

#[test]
fn persist_removes_the_ttl() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["PERSIST", "missing"], b":0\r\n");
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["PERSIST", "k"], b":0\r\n");
    raw.expect(&["EXPIRE", "k", "100"], b":1\r\n");
    raw.expect(&["PERSIST", "k"], b":1\r\n");
    raw.expect(&["TTL", "k"], b":-1\r\n");
    raw.expect(&["PERSIST", "k"], b":0\r\n");
}

#[test]
fn lazy_expiry_hides_a_px_key_from_get_exists_and_ttl() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v", "PX", "50"], b"+OK\r\n");
    raw.expect(&["GET", "k"], b"$1\r\nv\r\n");
    sleep(Duration::from_millis(100));
    raw.expect(&["GET", "k"], b"$-1\r\n");
    raw.expect(&["EXISTS", "k"], b":0\r\n");
    raw.expect(&["TTL", "k"], b":-2\r\n");
    raw.expect(&["PTTL", "k"], b":-2\r\n");
    raw.expect(&["EXPIRE", "k", "100"], b":0\r\n");
    raw.expect(&["PERSIST", "k"], b":0\r\n");
}

#[test]
fn active_expiry_reclaims_keys_nobody_touches() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.cmd("SET")
            .arg(format!("t{i}"))
            .arg("v")
            .arg("PX")
            .arg(100)
            .ignore();
    }
    pipe.cmd("SET").arg("keep").arg("v").ignore();
    let () = pipe.query(&mut con).unwrap();
    let size: i64 = q(&mut con, &["DBSIZE"]);
    assert_eq!(size, 301);
    // DBSIZE counts expired keys until they are reclaimed, so it only drops if the
    // background sweep removes them: none of them is ever read again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let size: i64 = q(&mut con, &["DBSIZE"]);
        if size == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "active expiry left {size} keys after 5s"
        );
        sleep(Duration::from_millis(50));
    }
    let keys: Vec<String> = q(&mut con, &["KEYS", "*"]);
    assert_eq!(keys, ["keep"]);
}

// ---- WATCH and MULTI -------------------------------------------------------------

#[test]
fn watched_key_changed_by_expire_makes_exec_fail() {
    let s = TestServer::start();
    let mut a = Raw::new(&s);
    let mut b = s.conn();
    a.expect(&["SET", "k", "v"], b"+OK\r\n");
    a.expect(&["WATCH", "k"], b"+OK\r\n");
    let n: i64 = q(&mut b, &["EXPIRE", "k", "100"]);
    assert_eq!(n, 1);
    a.expect(&["MULTI"], b"+OK\r\n");
    a.expect(&["SET", "k", "mine"], b"+QUEUED\r\n");
    a.expect(&["EXEC"], b"*-1\r\n");
    a.expect(&["GET", "k"], b"$1\r\nv\r\n");
}

#[test]
fn watched_key_untouched_by_a_refused_expire_lets_exec_run() {
    let s = TestServer::start();
    let mut a = Raw::new(&s);
    let mut b = s.conn();
    a.expect(&["SET", "k", "v"], b"+OK\r\n");
    a.expect(&["WATCH", "k", "missing"], b"+OK\r\n");
    // Nothing changes: a refused condition, a PERSIST without TTL, an EXPIRE of a
    // missing key, and a rename onto itself.
    let n: i64 = q(&mut b, &["EXPIRE", "k", "100", "XX"]);
    assert_eq!(n, 0);
    let n: i64 = q(&mut b, &["PERSIST", "k"]);
    assert_eq!(n, 0);
    let n: i64 = q(&mut b, &["EXPIRE", "missing", "100"]);
    assert_eq!(n, 0);
    let () = q(&mut b, &["RENAME", "k", "k"]);
    a.expect(&["MULTI"], b"+OK\r\n");
    a.expect(&["SET", "k", "mine"], b"+QUEUED\r\n");
    a.expect(&["EXEC"], b"*1\r\n+OK\r\n");
}

#[test]
fn watched_keys_changed_by_rename_persist_and_del_make_exec_fail() {
    let s = TestServer::start();
    let mut b = s.conn();
    let cases: &[(&str, &[&str])] = &[
        ("dst", &["RENAME", "src", "dst"]),
        ("src", &["RENAME", "src", "dst"]),
        ("src", &["PERSIST", "src"]),
        ("src", &["DEL", "src"]),
        ("src", &["PEXPIRE", "src", "-1"]),
    ];
    for (watched, change) in cases {
        let mut a = Raw::new(&s);
        let () = q(&mut b, &["SET", "src", "v", "EX", "100"]);
        let _: i64 = q(&mut b, &["DEL", "dst"]);
        a.expect(&["WATCH", watched], b"+OK\r\n");
        let _: redis::Value = q(&mut b, change);
        a.expect(&["MULTI"], b"+OK\r\n");
        a.expect(&["PING"], b"+QUEUED\r\n");
        a.expect(&["EXEC"], b"*-1\r\n");
    }
}

#[test]
fn key_commands_run_inside_multi_exec() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "a", "1"], b"+OK\r\n");
    raw.expect(&["MULTI"], b"+OK\r\n");
    for c in [
        &["RENAME", "a", "b"][..],
        &["EXPIRE", "b", "100"],
        &["SCAN", "0", "COUNT", "1000"],
        &["KEYS", "*"],
        &["RANDOMKEY"],
        &["EXISTS", "a", "b"],
    ] {
        raw.expect(c, b"+QUEUED\r\n");
    }
    raw.expect(
        &["EXEC"],
        b"*6\r\n+OK\r\n:1\r\n*2\r\n$1\r\n0\r\n*1\r\n$1\r\nb\r\n*1\r\n$1\r\nb\r\n$1\r\nb\r\n:1\r\n",
    );
}

// ---- OBJECT --------------------------------------------------------------------

#[test]
fn object_encoding_follows_redis_string_rules() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    let long = "x".repeat(45);
    let at_limit = "y".repeat(44);
    for (v, enc) in [
        ("12345", "int"),
        ("-42", "int"),
        ("9223372036854775807", "int"),
        ("9223372036854775808", "embstr"),
        ("007", "embstr"),
        ("hello", "embstr"),
        (at_limit.as_str(), "embstr"),
        (long.as_str(), "raw"),
    ] {
        raw.expect(&["SET", "k", v], b"+OK\r\n");
        raw.expect(
            &["OBJECT", "ENCODING", "k"],
            format!("${}\r\n{enc}\r\n", enc.len()).as_bytes(),
        );
    }
    raw.call(&["IDSET.LOAD", "ids", "IDS", "1", "2"]);
    raw.expect(&["OBJECT", "encoding", "ids"], b"$9\r\nhashtable\r\n");
    raw.expect(&["OBJECT", "ENCODING", "missing"], b"$-1\r\n");
    raw.frame(&["HELLO", "3"]);
    raw.expect(&["OBJECT", "ENCODING", "missing"], b"_\r\n");
}

#[test]
fn object_idletime_grows_and_resets_on_access_but_not_on_itself() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["SET", "t", "v"], b"+OK\r\n");
    raw.expect(&["OBJECT", "IDLETIME", "k"], b":0\r\n");
    raw.expect(&["OBJECT", "IDLETIME", "missing"], b"$-1\r\n");
    // Idle time is in whole seconds, so letting it grow takes a real second.
    sleep(Duration::from_millis(1100));
    // At least a second, and asking again (or TTL, TYPE, EXISTS) is not an access.
    let idle = |raw: &mut Raw| match raw.frame(&["OBJECT", "IDLETIME", "k"]) {
        Frame::Integer(n) => n,
        other => panic!("IDLETIME replies an integer: {other:?}"),
    };
    assert!(idle(&mut raw) >= 1);
    assert!(idle(&mut raw) >= 1);
    raw.call(&["TTL", "k"]);
    raw.call(&["TYPE", "k"]);
    raw.call(&["EXISTS", "k"]);
    assert!(idle(&mut raw) >= 1);
    raw.expect(&["GET", "k"], b"$1\r\nv\r\n");
    raw.expect(&["OBJECT", "IDLETIME", "k"], b":0\r\n");
    raw.expect(&["TOUCH", "t"], b":1\r\n");
    raw.expect(&["OBJECT", "IDLETIME", "t"], b":0\r\n");
}

#[test]
fn object_refcount_freq_and_help() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect(&["SET", "k", "v"], b"+OK\r\n");
    raw.expect(&["OBJECT", "REFCOUNT", "k"], b":1\r\n");
    raw.expect(&["OBJECT", "REFCOUNT", "missing"], b"$-1\r\n");
    raw.expect(&["OBJECT", "FREQ", "missing"], b"$-1\r\n");
    raw.expect_err(
        &["OBJECT", "FREQ", "k"],
        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
    );
    let Frame::Array(lines) = raw.frame(&["OBJECT", "HELP"]) else {
        panic!("HELP is an array")
    };
    let text: Vec<String> = lines
        .iter()
        .map(|l| match l {
            Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("help lines are status replies: {other:?}"),
        })
        .collect();
    assert!(text[0].starts_with("OBJECT <subcommand>"), "{text:?}");
    for sub in [
        "ENCODING <key>",
        "FREQ <key>",
        "IDLETIME <key>",
        "REFCOUNT <key>",
        "HELP",
    ] {
        assert!(text.iter().any(|l| l == sub), "help lists {sub}");
    }
}

#[test]
fn object_subcommand_errors_match_redis() {
    let s = TestServer::start();
    let mut raw = Raw::new(&s);
    raw.expect_err(
        &["OBJECT"],
        "ERR wrong number of arguments for 'object' command",
    );
    raw.expect_err(
        &["OBJECT", "foo", "k"],
        "ERR unknown subcommand 'foo'. Try OBJECT HELP.",
    );
    raw.expect_err(
        &["OBJECT", "ENCODING"],
        "ERR wrong number of arguments for 'object|encoding' command",
    );
    raw.expect_err(
        &["OBJECT", "IDLETIME", "a", "b"],
        "ERR wrong number of arguments for 'object|idletime' command",
    );
    raw.expect_err(
        &["OBJECT", "HELP", "x"],
        "ERR wrong number of arguments for 'object|help' command",
    );
}

#[test]
fn redis_cli_drives_scan_and_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    for i in 0..150 {
        set(&mut con, &format!("cli:{i}"), "v");
    }
    // redis-cli --scan loops on the cursor until it returns 0.
    let out = s.cli_out(&["--scan", "--pattern", "cli:1*"]);
    let found: HashSet<&str> = out.lines().collect();
    let want: HashSet<String> = (0..150)
        .map(|i| format!("cli:{i}"))
        .filter(|k| k.starts_with("cli:1"))
        .collect();
    assert_eq!(found.len(), want.len());
    assert!(want.iter().all(|k| found.contains(k.as_str())));
    assert_eq!(s.cli_out(&["TYPE", "cli:1"]), "string");
    assert_eq!(s.cli_out(&["TTL", "cli:1"]), "-1");
}

#[test]
fn command_table_reports_key_positions_and_flags() {
    let s = TestServer::start();
    let mut con = s.conn();
    let getkeys = |con: &mut Connection, args: &[&str]| -> Vec<String> {
        let mut full = vec!["COMMAND", "GETKEYS"];
        full.extend_from_slice(args);
        q(con, &full)
    };
    assert_eq!(getkeys(&mut con, &["RENAME", "a", "b"]), ["a", "b"]);
    assert_eq!(getkeys(&mut con, &["DEL", "a", "b", "c"]), ["a", "b", "c"]);
    assert_eq!(getkeys(&mut con, &["EXPIRE", "k", "10", "NX"]), ["k"]);
    assert_eq!(getkeys(&mut con, &["OBJECT", "ENCODING", "k"]), ["k"]);
    // COMMAND INFO: name, arity, flags, first, last, step.
    let info: Vec<redis::Value> = q(
        &mut con,
        &["COMMAND", "INFO", "unlink", "pexpireat", "scan"],
    );
    let summary: Vec<(String, i64, Vec<String>, i64, i64, i64)> = info
        .iter()
        .map(|v| {
            let redis::Value::Array(f) = v else {
                panic!("{v:?}")
            };
            let s = |i: usize| -> String { redis::from_redis_value_ref(&f[i]).unwrap() };
            let n = |i: usize| -> i64 { redis::from_redis_value_ref(&f[i]).unwrap() };
            let flags: Vec<String> = redis::from_redis_value_ref(&f[2]).unwrap();
            (s(0), n(1), flags, n(3), n(4), n(5))
        })
        .collect();
    let flags = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        summary[0],
        ("unlink".into(), -2, flags(&["write", "fast"]), 1, -1, 1)
    );
    assert_eq!(
        summary[1],
        ("pexpireat".into(), -3, flags(&["write", "fast"]), 1, 1, 1)
    );
    assert_eq!(
        summary[2],
        ("scan".into(), -2, flags(&["readonly"]), 0, 0, 0)
    );
}
