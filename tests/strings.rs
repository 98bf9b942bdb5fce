//! End-to-end tests of the string family against the real binary: every command
//! and option, the exact error texts and reply shapes Redis 7.2 gives (the expected
//! values were checked against a real redis-server), TTL effects, transactions, and
//! the idset-table hook of the whole-value writes.

mod harness;

use std::net::TcpStream;
use std::time::Duration;

use harness::{resp_cmd, roundtrip, Raw, TestServer};
use redis::{Connection, Value};

/// Runs one command and returns its reply, or the error's exact wire text.
fn run(con: &mut Connection, args: &[&[u8]]) -> Result<Value, String> {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query::<Value>(con)
        .map_err(|e| match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_string(),
            _ => e.to_string(),
        })
}

/// `run` with string arguments.
fn q(con: &mut Connection, args: &[&str]) -> Result<Value, String> {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    run(con, &bytes)
}

/// The error text of a command that must fail.
fn err(con: &mut Connection, args: &[&str]) -> String {
    match q(con, args) {
        Ok(v) => panic!("{args:?} should fail, got {v:?}"),
        Err(e) => e,
    }
}

fn ok(con: &mut Connection, args: &[&str]) {
    assert_eq!(q(con, args), Ok(Value::Okay), "{args:?}");
}

fn int(con: &mut Connection, args: &[&str]) -> i64 {
    match q(con, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

/// A bulk reply's bytes, `None` for nil.
fn bulk(con: &mut Connection, args: &[&str]) -> Option<Vec<u8>> {
    match q(con, args) {
        Ok(Value::BulkString(b)) => Some(b),
        Ok(Value::Nil) => None,
        other => panic!("{args:?}: expected a bulk string or nil, got {other:?}"),
    }
}

/// A bulk reply as text.
fn text(con: &mut Connection, args: &[&str]) -> Option<String> {
    bulk(con, args).map(|b| String::from_utf8(b).unwrap())
}

fn exists(con: &mut Connection, key: &str) -> bool {
    int(con, &["EXISTS", key]) == 1
}

fn rt(stream: &mut TcpStream, args: &[&[u8]], expected: &[u8]) {
    roundtrip(stream, &resp_cmd(args), expected);
}

const SYNTAX: &str = "ERR syntax error";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ---------------------------------------------------------------- GET / SET

#[test]
fn get_and_set_round_trip_any_bytes() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(bulk(&mut con, &["GET", "missing"]), None);
    ok(&mut con, &["SET", "k", "v"]);
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("v"));
    for value in [
        &b""[..],
        b"\0",
        b"a\0b\r\nc\n\r",
        b"\r\n$3\r\nfoo\r\n",
        &[0xff, 0xfe, 0x00, 0x80],
    ] {
        assert_eq!(run(&mut con, &[b"SET", b"bin", value]), Ok(Value::Okay));
        assert_eq!(
            run(&mut con, &[b"GET", b"bin"]),
            Ok(Value::BulkString(value.to_vec()))
        );
        assert_eq!(
            run(&mut con, &[b"STRLEN", b"bin"]),
            Ok(Value::Int(value.len() as i64))
        );
    }
    // Binary keys too.
    assert_eq!(run(&mut con, &[b"SET", b"k\0\r\n", b"x"]), Ok(Value::Okay));
    assert_eq!(
        run(&mut con, &[b"GET", b"k\0\r\n"]),
        Ok(Value::BulkString(b"x".to_vec()))
    );
    assert_eq!(bulk(&mut con, &["GET", "k\0"]), None);
}

#[test]
fn large_values_survive_intact() {
    let s = TestServer::start();
    let mut con = s.conn();
    let big: Vec<u8> = (0..5 * 1024 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    assert_eq!(run(&mut con, &[b"SET", b"big", &big]), Ok(Value::Okay));
    assert_eq!(int(&mut con, &["STRLEN", "big"]), big.len() as i64);
    assert_eq!(
        run(&mut con, &[b"GET", b"big"]),
        Ok(Value::BulkString(big.clone()))
    );
    assert_eq!(
        bulk(&mut con, &["GETRANGE", "big", "1000", "1999"]).unwrap(),
        big[1000..2000].to_vec()
    );
}

/// A value of 32 KB or more is stored as the buffer the decoder gave it (the
/// decoder's own tests show that buffer is the argument's alone): pipelined or
/// one at a time, with options after it, inside MULTI, written to in place
/// afterwards, each value stays its own bytes, and the memory used is the
/// values', not that of read buffers they could have been slices of.
#[test]
fn big_arguments_are_stored_as_they_arrived() {
    let s = TestServer::start();
    let mut con = s.conn();
    let value = |i: usize, len: usize| -> Vec<u8> {
        (0..len).map(|j| ((i * 7 + j * 31) % 251) as u8).collect()
    };
    const N: usize = 64;
    const LEN: usize = 33 * 1024;
    let used = |con: &mut Connection| -> i64 { harness::info_stat(con, "memory", "used_memory") };
    let before = used(&mut con);

    // One write holding them all, each after a 210 KB DEL of 30,000 keys that
    // makes the server read far ahead, so the values arrive whole in read
    // buffers they would pin if kept as slices of them; then one at a time,
    // each gathered in a buffer of its own.
    let mut st = s.raw();
    let mut del: Vec<&[u8]> = vec![b"DEL"];
    del.resize(30_001, b"k");
    let (mut pipeline, mut replies) = (Vec::new(), Vec::new());
    for i in 0..N {
        let (key, v) = (format!("p{i}"), value(i, LEN));
        pipeline.extend(resp_cmd(&del));
        pipeline.extend(resp_cmd(&[b"SET", key.as_bytes(), &v, b"EX", b"1000"]));
        replies.extend_from_slice(b":0\r\n+OK\r\n");
    }
    roundtrip(&mut st, &pipeline, &replies);
    for i in 0..N {
        let (key, v) = (format!("s{i}"), value(N + i, LEN));
        roundtrip(
            &mut st,
            &resp_cmd(&[b"SET", key.as_bytes(), &v]),
            b"+OK\r\n",
        );
    }
    let grown = used(&mut con) - before;
    let values = (2 * N * LEN) as i64;
    assert!(
        grown >= values && grown < values + values / 4,
        "{grown} bytes used for {values} bytes of values"
    );

    // Transactions queue the same arguments; writes in place change only the key.
    let mut tx = resp_cmd(&[b"MULTI"]);
    tx.extend(resp_cmd(&[b"SET", b"t", &value(1000, 3 * LEN)]));
    tx.extend(resp_cmd(&[b"APPEND", b"t", b"tail"]));
    tx.extend(resp_cmd(&[b"SETRANGE", b"p0", b"0", b"XY"]));
    tx.extend(resp_cmd(&[b"EXEC"]));
    let len = 3 * LEN + 4;
    let exec = format!("+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n:{len}\r\n:{LEN}\r\n");
    roundtrip(&mut st, &tx, exec.as_bytes());
    let mut t = value(1000, 3 * LEN);
    t.extend_from_slice(b"tail");
    assert_eq!(run(&mut con, &[b"GET", b"t"]), Ok(Value::BulkString(t)));
    let mut p0 = value(0, LEN);
    p0[..2].copy_from_slice(b"XY");
    assert_eq!(run(&mut con, &[b"GET", b"p0"]), Ok(Value::BulkString(p0)));
    for i in 1..N {
        let got = run(&mut con, &[b"GET", format!("p{i}").as_bytes()]);
        assert_eq!(got, Ok(Value::BulkString(value(i, LEN))), "p{i}");
        let got = run(&mut con, &[b"GET", format!("s{i}").as_bytes()]);
        assert_eq!(got, Ok(Value::BulkString(value(N + i, LEN))), "s{i}");
    }
}

/// A long value is sent from the stored bytes, not copied into a reply buffer:
/// the bytes on the wire are still exactly Redis's, in order with the replies
/// around them (also in RESP3 and in EXEC's), and writes to the key after the
/// GET — APPEND, SETRANGE, DEL — do not change a reply already queued.
#[test]
fn long_replies_are_exact_and_unchanged_by_later_writes() {
    let s = TestServer::start();
    let mut con = s.conn();
    let big: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    assert_eq!(run(&mut con, &[b"SET", b"big", &big]), Ok(Value::Okay));
    ok(&mut con, &["SET", "small", "v"]);
    // Either side of the size up to which a GET copies its value straight into
    // the output, and the empty string.
    let (at_edge, past_edge) = (vec![b'e'; 512], vec![b'p'; 513]);
    assert_eq!(
        run(&mut con, &[b"SET", b"at-edge", &at_edge]),
        Ok(Value::Okay)
    );
    assert_eq!(
        run(&mut con, &[b"SET", b"past-edge", &past_edge]),
        Ok(Value::Okay)
    );
    ok(&mut con, &["SET", "empty", ""]);
    assert_eq!(int(&mut con, &["SADD", "aset", "1"]), 1);
    let bulk_of = |v: &[u8]| {
        let mut out = format!("${}\r\n", v.len()).into_bytes();
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
        out
    };
    let mut appended = big.clone();
    appended.extend_from_slice(b"tail");
    let mut changed = appended.clone();
    changed[..4].copy_from_slice(b"ZZZZ");

    let mut st = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    st.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = Vec::new();
    let mut expected = Vec::new();
    for (args, reply) in [
        (&[&b"GET"[..], b"small"][..], bulk_of(b"v")),
        (&[b"GET", b"at-edge"], bulk_of(&at_edge)),
        (&[b"GET", b"past-edge"], bulk_of(&past_edge)),
        (&[b"GET", b"empty"], bulk_of(b"")),
        (&[b"GET", b"missing"], b"$-1\r\n".to_vec()),
        (&[b"GET", b"aset"], format!("-{WRONGTYPE}\r\n").into_bytes()),
        (&[b"GET", b"big"], bulk_of(&big)),
        // Written into the output after a value queued by reference.
        (&[b"GET", b"small"], bulk_of(b"v")),
        (&[b"GET", b"big"], bulk_of(&big)),
        (
            &[b"APPEND", b"big", b"tail"],
            format!(":{}\r\n", appended.len()).into_bytes(),
        ),
        (&[b"GET", b"big"], bulk_of(&appended)),
        (
            &[b"SETRANGE", b"big", b"0", b"ZZZZ"],
            format!(":{}\r\n", changed.len()).into_bytes(),
        ),
        (&[b"MULTI"], b"+OK\r\n".to_vec()),
        (&[b"GET", b"big"], b"+QUEUED\r\n".to_vec()),
        (&[b"GET", b"small"], b"+QUEUED\r\n".to_vec()),
        (&[b"DEL", b"big"], b"+QUEUED\r\n".to_vec()),
        (
            &[b"EXEC"],
            [
                &b"*3\r\n"[..],
                &bulk_of(&changed),
                &bulk_of(b"v"),
                b":1\r\n",
            ]
            .concat(),
        ),
        (&[b"GET", b"big"], b"$-1\r\n".to_vec()),
        (&[b"PING"], b"+PONG\r\n".to_vec()),
    ] {
        req.extend(resp_cmd(args));
        expected.extend(reply);
    }
    std::io::Write::write_all(&mut st, &req).unwrap();
    let got = harness::read_n(&mut st, expected.len());
    assert!(
        got == expected,
        "pipelined replies differ from Redis's bytes"
    );

    // RESP3 sends a string the same way.
    assert_eq!(run(&mut con, &[b"SET", b"big", &big]), Ok(Value::Okay));
    let hello = resp_cmd(&[b"HELLO", b"3"]);
    std::io::Write::write_all(&mut st, &hello).unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(&mut st, &mut first).unwrap();
    assert_eq!(&first, b"%");
    // Skip the HELLO map: a PING after it marks its end.
    std::io::Write::write_all(&mut st, &resp_cmd(&[b"PING"])).unwrap();
    let mut seen = Vec::new();
    while !seen.ends_with(b"+PONG\r\n") {
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut st, &mut b).unwrap();
        seen.push(b[0]);
    }
    roundtrip(&mut st, &resp_cmd(&[b"GET", b"big"]), &bulk_of(&big));
}

/// Every SET form's reply, pipelined, byte for byte as Redis sends them: a plain
/// SET's `+OK` is written straight into the output, the others are returned as
/// replies, and both kinds stay in order; inside EXEC each is an element.
#[test]
fn set_replies_in_order_whichever_way_they_are_written() {
    let s = TestServer::start();
    Raw::new(&s).expect_pipeline(&[
        (&[&b"SET"[..], b"k", b"v1"][..], &b"+OK\r\n"[..]),
        (&[b"SET", b"k", b"v2", b"NX"], b"$-1\r\n"),
        (&[b"SET", b"k", b"v3", b"XX"], b"+OK\r\n"),
        (&[b"SET", b"k", b"v4", b"GET"], b"$2\r\nv3\r\n"),
        (&[b"SET", b"other", b"x", b"XX"], b"$-1\r\n"),
        (&[b"SETNX", b"k", b"v5"], b":0\r\n"),
        (&[b"SETEX", b"ex", b"100", b"v"], b"+OK\r\n"),
        (&[b"PSETEX", b"px", b"100000", b"v"], b"+OK\r\n"),
        (
            &[b"SETEX", b"ex", b"0", b"v"],
            b"-ERR invalid expire time in 'setex' command\r\n",
        ),
        (&[b"SET", b"k", b"v6", b"EX", b"100"], b"+OK\r\n"),
        (
            &[b"SET", b"k", b"v7", b"EX", b"0"],
            b"-ERR invalid expire time in 'set' command\r\n",
        ),
        (&[b"MULTI"], b"+OK\r\n"),
        (&[b"SET", b"k", b"v8"], b"+QUEUED\r\n"),
        (&[b"SET", b"k", b"v9", b"GET"], b"+QUEUED\r\n"),
        (&[b"EXEC"], b"*2\r\n+OK\r\n$2\r\nv8\r\n"),
        (&[b"GET", b"k"], b"$2\r\nv9\r\n"),
    ]);
}

/// Counters', DEL's and TTL's integer replies, pipelined, byte for byte as Redis
/// 7 sends them (checked against a real redis-server): written straight into the
/// output between errors and `+OK`s, and returned as elements inside EXEC.
#[test]
fn counter_del_and_ttl_replies_in_order_whichever_way_they_are_written() {
    let s = TestServer::start();
    Raw::new(&s).expect_pipeline(&[
        (&[&b"SET"[..], b"n", b"10"][..], &b"+OK\r\n"[..]),
        (&[b"INCR", b"n"], b":11\r\n"),
        (&[b"DECR", b"n"], b":10\r\n"),
        (&[b"INCRBY", b"n", b"5"], b":15\r\n"),
        (&[b"DECRBY", b"n", b"20"], b":-5\r\n"),
        (&[b"INCR", b"fresh"], b":1\r\n"),
        (&[b"SET", b"s", b"abc"], b"+OK\r\n"),
        (
            &[b"INCR", b"s"],
            b"-ERR value is not an integer or out of range\r\n",
        ),
        (&[b"SET", b"big", b"9223372036854775807"], b"+OK\r\n"),
        (
            &[b"INCR", b"big"],
            b"-ERR increment or decrement would overflow\r\n",
        ),
        (&[b"SADD", b"set", b"1"], b":1\r\n"),
        (
            &[b"INCR", b"set"],
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ),
        (&[b"TTL", b"n"], b":-1\r\n"),
        (&[b"PTTL", b"nokey"], b":-2\r\n"),
        (&[b"TTL", b"nokey"], b":-2\r\n"),
        (&[b"DEL", b"n", b"fresh", b"nokey", b"n"], b":2\r\n"),
        (&[b"UNLINK", b"s"], b":1\r\n"),
        (&[b"MULTI"], b"+OK\r\n"),
        (&[b"INCR", b"x"], b"+QUEUED\r\n"),
        (&[b"TTL", b"x"], b"+QUEUED\r\n"),
        (&[b"DEL", b"x"], b"+QUEUED\r\n"),
        (&[b"EXEC"], b"*3\r\n:1\r\n:-1\r\n:1\r\n"),
        (&[b"EXISTS", b"n", b"s", b"x"], b":0\r\n"),
    ]);
}

#[test]
fn set_nx_and_xx() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(q(&mut con, &["SET", "k", "1", "XX"]), Ok(Value::Nil));
    assert!(!exists(&mut con, "k"), "XX must not create the key");
    ok(&mut con, &["SET", "k", "1", "NX"]);
    assert_eq!(q(&mut con, &["SET", "k", "2", "nx"]), Ok(Value::Nil));
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("1"));
    ok(&mut con, &["SET", "k", "3", "xx"]);
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("3"));
    // Repeating the same flag is allowed, as in Redis.
    ok(&mut con, &["SET", "k", "4", "XX", "XX"]);
    assert_eq!(q(&mut con, &["SET", "k", "5", "NX", "NX"]), Ok(Value::Nil));
}

#[test]
fn set_get_returns_the_old_value() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(q(&mut con, &["SET", "k", "v1", "GET"]), Ok(Value::Nil));
    assert_eq!(
        text(&mut con, &["SET", "k", "v2", "GET"]).as_deref(),
        Some("v1")
    );
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("v2"));
    // With NX on an existing key: the old value, and nothing written.
    assert_eq!(
        text(&mut con, &["SET", "k", "v3", "NX", "GET"]).as_deref(),
        Some("v2")
    );
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("v2"));
    // With XX on a missing key: nil, and nothing created.
    assert_eq!(
        q(&mut con, &["SET", "nokey", "v", "XX", "GET"]),
        Ok(Value::Nil)
    );
    assert!(!exists(&mut con, "nokey"));
    // With NX on a missing key: nil, and the key is set.
    assert_eq!(
        q(&mut con, &["SET", "new", "v", "get", "nx"]),
        Ok(Value::Nil)
    );
    assert_eq!(text(&mut con, &["GET", "new"]).as_deref(), Some("v"));
}

#[test]
fn set_option_combinations_redis_rejects() {
    let s = TestServer::start();
    let mut con = s.conn();
    for args in [
        &["SET", "k", "v", "NX", "XX"][..],
        &["SET", "k", "v", "XX", "NX"],
        &["SET", "k", "v", "EX", "10", "PX", "100"],
        &["SET", "k", "v", "PX", "100", "EX", "10"],
        &["SET", "k", "v", "EXAT", "10", "PXAT", "100"],
        &["SET", "k", "v", "EX", "10", "EXAT", "100"],
        &["SET", "k", "v", "KEEPTTL", "EX", "10"],
        &["SET", "k", "v", "PX", "100", "KEEPTTL"],
        &["SET", "k", "v", "EX"],
        &["SET", "k", "v", "NX", "PXAT"],
        &["SET", "k", "v", "PERSIST"],
        &["SET", "k", "v", "BOGUS"],
        &["SET", "k", "v", "10"],
        &["SET", "k", "v", "GET", "GET", "EX"],
    ] {
        assert_eq!(err(&mut con, args), SYNTAX, "{args:?}");
    }
    assert!(!exists(&mut con, "k"), "a rejected SET writes nothing");
    // Accepted: the same expiry twice (last wins), KEEPTTL twice, any case.
    ok(&mut con, &["set", "k", "v", "ex", "10", "Ex", "20"]);
    let ttl = int(&mut con, &["TTL", "k"]);
    assert!((19..=20).contains(&ttl), "ttl {ttl}");
    ok(&mut con, &["SET", "k", "v", "keepttl", "KeepTTL"]);
}

#[test]
fn set_invalid_expire_times() {
    let s = TestServer::start();
    let mut con = s.conn();
    let invalid = "ERR invalid expire time in 'set' command";
    for (opt, value) in [
        ("EX", "0"),
        ("EX", "-1"),
        ("PX", "0"),
        ("PX", "-100"),
        ("EXAT", "0"),
        ("PXAT", "-1"),
        ("EX", "9223372036854775807"),
        ("PX", "9223372036854775807"),
        ("EXAT", "9223372036854776"),
    ] {
        assert_eq!(
            err(&mut con, &["SET", "k", "v", opt, value]),
            invalid,
            "{opt} {value}"
        );
    }
    for value in ["abc", "1.5", " 1", "", "9223372036854775808"] {
        assert_eq!(
            err(&mut con, &["SET", "k", "v", "EX", value]),
            NOT_INT,
            "{value:?}"
        );
    }
    assert!(!exists(&mut con, "k"));
    // The largest EXAT that fits in ms is fine.
    ok(&mut con, &["SET", "k", "v", "EXAT", "9223372036854775"]);
    assert!(int(&mut con, &["TTL", "k"]) > 1_000_000_000);
}

#[test]
fn set_expiry_options_set_the_ttl() {
    let s = TestServer::start();
    let mut con = s.conn();
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    ok(&mut con, &["SET", "ex", "v", "EX", "100"]);
    ok(&mut con, &["SET", "px", "v", "PX", "5000"]);
    ok(
        &mut con,
        &["SET", "exat", "v", "EXAT", &(now_s + 100).to_string()],
    );
    ok(
        &mut con,
        &[
            "SET",
            "pxat",
            "v",
            "PXAT",
            &((now_s + 100) * 1000).to_string(),
        ],
    );
    let ttl = int(&mut con, &["TTL", "ex"]);
    assert!((99..=100).contains(&ttl), "{ttl}");
    let pttl = int(&mut con, &["PTTL", "px"]);
    assert!(pttl > 3_500 && pttl <= 5_000, "{pttl}");
    for k in ["exat", "pxat"] {
        let ttl = int(&mut con, &["TTL", k]);
        assert!((98..=101).contains(&ttl), "{k} {ttl}");
    }
    // A plain SET clears the TTL; KEEPTTL keeps it.
    ok(&mut con, &["SET", "ex", "v2", "KEEPTTL"]);
    let ttl = int(&mut con, &["TTL", "ex"]);
    assert!((98..=100).contains(&ttl), "KEEPTTL kept {ttl}");
    assert_eq!(text(&mut con, &["GET", "ex"]).as_deref(), Some("v2"));
    ok(&mut con, &["SET", "ex", "v3"]);
    assert_eq!(int(&mut con, &["TTL", "ex"]), -1);
    // KEEPTTL on a key without a TTL, or a new key, sets none.
    ok(&mut con, &["SET", "fresh", "v", "KEEPTTL"]);
    assert_eq!(int(&mut con, &["TTL", "fresh"]), -1);
}

#[test]
fn set_with_a_time_already_past_leaves_no_key() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SET", "k", "old"]);
    ok(&mut con, &["SET", "k", "v", "PXAT", "1"]);
    assert!(!exists(&mut con, "k"));
    assert_eq!(bulk(&mut con, &["GET", "k"]), None);
    ok(&mut con, &["SET", "k", "old"]);
    assert_eq!(
        text(&mut con, &["SET", "k", "v", "EXAT", "1", "GET"]).as_deref(),
        Some("old")
    );
    assert!(!exists(&mut con, "k"));
    assert_eq!(int(&mut con, &["DBSIZE"]), 0);
}

#[test]
fn short_expiries_really_expire() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SET", "a", "1", "PX", "100"]);
    ok(&mut con, &["PSETEX", "b", "100", "1"]);
    ok(&mut con, &["SET", "c", "10", "PX", "100"]);
    ok(&mut con, &["SET", "d", "abc", "PX", "100"]);
    assert_eq!(text(&mut con, &["GET", "a"]).as_deref(), Some("1"));
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(bulk(&mut con, &["GET", "a"]), None);
    assert_eq!(bulk(&mut con, &["GET", "b"]), None);
    // An expired key reads as missing for every command.
    assert_eq!(int(&mut con, &["INCR", "c"]), 1);
    assert_eq!(int(&mut con, &["SETNX", "d", "x"]), 1);
    assert_eq!(int(&mut con, &["TTL", "d"]), -1);
}

#[test]
fn setnx_setex_psetex() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(int(&mut con, &["SETNX", "k", "a"]), 1);
    assert_eq!(int(&mut con, &["SETNX", "k", "b"]), 0);
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("a"));

    ok(&mut con, &["SETEX", "k", "100", "v"]);
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("v"));
    let ttl = int(&mut con, &["TTL", "k"]);
    assert!((99..=100).contains(&ttl), "{ttl}");
    ok(&mut con, &["PSETEX", "p", "100000", "v"]);
    let pttl = int(&mut con, &["PTTL", "p"]);
    assert!(pttl > 98_000 && pttl <= 100_000, "{pttl}");

    for (cmd, name) in [("SETEX", "setex"), ("PSETEX", "psetex")] {
        let invalid = format!("ERR invalid expire time in '{name}' command");
        assert_eq!(err(&mut con, &[cmd, "x", "0", "v"]), invalid);
        assert_eq!(err(&mut con, &[cmd, "x", "-5", "v"]), invalid);
        assert_eq!(
            err(&mut con, &[cmd, "x", "9223372036854775807", "v"]),
            invalid
        );
        assert_eq!(err(&mut con, &[cmd, "x", "ten", "v"]), NOT_INT);
        assert_eq!(
            err(&mut con, &[cmd, "x", "10"]),
            format!("ERR wrong number of arguments for '{name}' command")
        );
    }
    assert!(!exists(&mut con, "x"));
}

// ---------------------------------------------------------------- GETEX / GETDEL / GETSET

#[test]
fn getex_options() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(q(&mut con, &["GETEX", "missing"]), Ok(Value::Nil));
    ok(&mut con, &["SET", "k", "v"]);
    assert_eq!(text(&mut con, &["GETEX", "k"]).as_deref(), Some("v"));
    assert_eq!(int(&mut con, &["TTL", "k"]), -1);
    assert_eq!(
        text(&mut con, &["GETEX", "k", "EX", "100"]).as_deref(),
        Some("v")
    );
    let ttl = int(&mut con, &["TTL", "k"]);
    assert!((99..=100).contains(&ttl), "{ttl}");
    // No option leaves the TTL alone.
    text(&mut con, &["GETEX", "k"]);
    assert!(int(&mut con, &["TTL", "k"]) > 90);
    assert_eq!(
        text(&mut con, &["GETEX", "k", "PX", "50000"]).as_deref(),
        Some("v")
    );
    let pttl = int(&mut con, &["PTTL", "k"]);
    assert!(pttl > 48_000 && pttl <= 50_000, "{pttl}");
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 200;
    text(&mut con, &["GETEX", "k", "EXAT", &at.to_string()]);
    let ttl = int(&mut con, &["TTL", "k"]);
    assert!((198..=201).contains(&ttl), "{ttl}");
    text(
        &mut con,
        &["GETEX", "k", "PXAT", &(at * 1000 + 100_000).to_string()],
    );
    assert!(int(&mut con, &["TTL", "k"]) > 290);
    assert_eq!(
        text(&mut con, &["GETEX", "k", "PERSIST"]).as_deref(),
        Some("v")
    );
    assert_eq!(int(&mut con, &["TTL", "k"]), -1);
    // PERSIST twice is fine.
    text(&mut con, &["GETEX", "k", "persist", "PERSIST"]);
    // A time already past: the value is returned and the key is gone.
    assert_eq!(
        text(&mut con, &["GETEX", "k", "PXAT", "1"]).as_deref(),
        Some("v")
    );
    assert!(!exists(&mut con, "k"));
}

#[test]
fn getex_errors_in_redis_order() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SET", "k", "v"]);
    for args in [
        &["GETEX", "k", "NX"][..],
        &["GETEX", "k", "XX"],
        &["GETEX", "k", "GET"],
        &["GETEX", "k", "KEEPTTL"],
        &["GETEX", "k", "PERSIST", "EX", "10"],
        &["GETEX", "k", "EX", "10", "PERSIST"],
        &["GETEX", "k", "EX", "10", "PX", "10"],
        &["GETEX", "k", "EX"],
        &["GETEX", "missing", "PX"],
    ] {
        assert_eq!(err(&mut con, args), SYNTAX, "{args:?}");
    }
    let invalid = "ERR invalid expire time in 'getex' command";
    assert_eq!(err(&mut con, &["GETEX", "k", "EX", "0"]), invalid);
    assert_eq!(
        err(&mut con, &["GETEX", "k", "PX", "9223372036854775807"]),
        invalid
    );
    assert_eq!(
        err(&mut con, &["GETEX", "k", "EXAT", "9223372036854775807"]),
        invalid
    );
    assert_eq!(err(&mut con, &["GETEX", "k", "EX", "soon"]), NOT_INT);
    assert_eq!(
        int(&mut con, &["TTL", "k"]),
        -1,
        "a failed GETEX changes nothing"
    );
    // The expiry value is only checked once a string is found: a missing key is nil.
    assert_eq!(
        q(&mut con, &["GETEX", "missing", "EX", "0"]),
        Ok(Value::Nil)
    );
    assert_eq!(
        q(&mut con, &["GETEX", "missing", "EX", "soon"]),
        Ok(Value::Nil)
    );
    assert_eq!(
        err(&mut con, &["GETEX"]),
        "ERR wrong number of arguments for 'getex' command"
    );
}

#[test]
fn getdel_and_getset() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(q(&mut con, &["GETDEL", "missing"]), Ok(Value::Nil));
    ok(&mut con, &["SET", "k", "v"]);
    assert_eq!(text(&mut con, &["GETDEL", "k"]).as_deref(), Some("v"));
    assert!(!exists(&mut con, "k"));

    assert_eq!(q(&mut con, &["GETSET", "k", "a"]), Ok(Value::Nil));
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("a"));
    ok(&mut con, &["SETEX", "k", "100", "b"]);
    assert_eq!(text(&mut con, &["GETSET", "k", "c"]).as_deref(), Some("b"));
    assert_eq!(
        int(&mut con, &["TTL", "k"]),
        -1,
        "GETSET clears the TTL like SET"
    );
    assert_eq!(text(&mut con, &["GET", "k"]).as_deref(), Some("c"));
}

// ---------------------------------------------------------------- MGET / MSET / MSETNX

#[test]
fn mget_returns_nil_for_missing_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SET", "a", "1"]);
    ok(&mut con, &["SET", "c", ""]);
    assert_eq!(
        q(&mut con, &["MGET", "a", "b", "c", "a"]),
        Ok(Value::Array(vec![
            Value::BulkString(b"1".to_vec()),
            Value::Nil,
            Value::BulkString(Vec::new()),
            Value::BulkString(b"1".to_vec()),
        ]))
    );
    assert_eq!(
        err(&mut con, &["MGET"]),
        "ERR wrong number of arguments for 'mget' command"
    );
    // Many keys spread over many shards.
    let keys: Vec<String> = (0..500).map(|i| format!("key:{i}")).collect();
    let mut mset = vec!["MSET".to_string()];
    for k in &keys {
        mset.push(k.clone());
        mset.push(format!("v{k}"));
    }
    let mset: Vec<&str> = mset.iter().map(String::as_str).collect();
    ok(&mut con, &mset);
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let Ok(Value::Array(values)) = q(&mut con, &mget) else {
        panic!("MGET")
    };
    for (k, v) in keys.iter().zip(values) {
        assert_eq!(v, Value::BulkString(format!("v{k}").into_bytes()));
    }
}

#[test]
fn mset_overwrites_and_clears_ttls() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SETEX", "a", "100", "old"]);
    ok(&mut con, &["MSET", "a", "1", "b", "2", "a", "3"]);
    assert_eq!(
        text(&mut con, &["GET", "a"]).as_deref(),
        Some("3"),
        "the last pair wins"
    );
    assert_eq!(text(&mut con, &["GET", "b"]).as_deref(), Some("2"));
    assert_eq!(int(&mut con, &["TTL", "a"]), -1);
    let arity = "ERR wrong number of arguments for 'mset' command";
    assert_eq!(err(&mut con, &["MSET", "a"]), arity);
    assert_eq!(err(&mut con, &["MSET", "a", "1", "b"]), arity);
    assert_eq!(
        text(&mut con, &["GET", "a"]).as_deref(),
        Some("3"),
        "a rejected MSET writes nothing"
    );
}

#[test]
fn msetnx_is_all_or_nothing() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(int(&mut con, &["MSETNX", "a", "1", "b", "2"]), 1);
    assert_eq!(int(&mut con, &["MSETNX", "c", "3", "b", "x", "d", "4"]), 0);
    assert!(
        !exists(&mut con, "c") && !exists(&mut con, "d"),
        "nothing set when one key exists"
    );
    assert_eq!(text(&mut con, &["GET", "b"]).as_deref(), Some("2"));
    // The same new key twice: both pairs apply, the last wins.
    assert_eq!(int(&mut con, &["MSETNX", "e", "1", "e", "2"]), 1);
    assert_eq!(text(&mut con, &["GET", "e"]).as_deref(), Some("2"));
    assert_eq!(
        err(&mut con, &["MSETNX", "x", "1", "y"]),
        "ERR wrong number of arguments for 'msetnx' command"
    );
}

#[test]
fn concurrent_msetnx_with_a_shared_key_lets_exactly_one_win() {
    let s = TestServer::start();
    for round in 0..5 {
        let winners: i64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let s = &s;
                    scope.spawn(move || {
                        let mut con = s.conn();
                        let own = format!("own:{round}:{t}");
                        let shared = format!("shared:{round}");
                        int(
                            &mut con,
                            &[
                                "MSETNX",
                                &own,
                                "x",
                                &shared,
                                &t.to_string(),
                                &format!("{own}b"),
                                "y",
                            ],
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(winners, 1, "round {round}");
        let mut con = s.conn();
        let winner = text(&mut con, &["GET", &format!("shared:{round}")]).unwrap();
        for t in 0..8 {
            let own_exists = exists(&mut con, &format!("own:{round}:{t}"));
            assert_eq!(
                own_exists,
                winner == t.to_string(),
                "round {round} thread {t}"
            );
        }
    }
}

// ---------------------------------------------------------------- APPEND / STRLEN / ranges

#[test]
fn append_creates_extends_and_keeps_ttl() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(int(&mut con, &["APPEND", "k", "Hello"]), 5);
    assert_eq!(int(&mut con, &["APPEND", "k", " World"]), 11);
    assert_eq!(
        text(&mut con, &["GET", "k"]).as_deref(),
        Some("Hello World")
    );
    assert_eq!(int(&mut con, &["APPEND", "k", ""]), 11);
    assert_eq!(int(&mut con, &["APPEND", "empty", ""]), 0);
    assert!(
        exists(&mut con, "empty"),
        "APPEND of nothing still creates the key"
    );
    assert_eq!(
        run(&mut con, &[b"APPEND", b"k", b"\0\r\n"]),
        Ok(Value::Int(14))
    );
    assert_eq!(
        bulk(&mut con, &["GET", "k"]).unwrap(),
        b"Hello World\0\r\n".to_vec()
    );
    ok(&mut con, &["SETEX", "t", "100", "a"]);
    assert_eq!(int(&mut con, &["APPEND", "t", "b"]), 2);
    assert!(int(&mut con, &["TTL", "t"]) > 90, "APPEND keeps the TTL");
}

#[test]
fn many_appends_build_the_right_string() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut model = Vec::new();
    for i in 0..2000u32 {
        let piece = format!("<{i}>");
        model.extend_from_slice(piece.as_bytes());
        // Read it back now and then, so a reply shares the buffer during the next APPEND.
        if i % 97 == 0 {
            assert_eq!(
                bulk(&mut con, &["GET", "log"]).unwrap_or_default(),
                model[..model.len() - piece.len()].to_vec()
            );
        }
        assert_eq!(
            int(&mut con, &["APPEND", "log", &piece]),
            model.len() as i64
        );
    }
    assert_eq!(bulk(&mut con, &["GET", "log"]).unwrap(), model);
}

#[test]
fn strlen_counts_bytes() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(int(&mut con, &["STRLEN", "missing"]), 0);
    ok(&mut con, &["SET", "k", "héllo"]);
    assert_eq!(int(&mut con, &["STRLEN", "k"]), 6);
    assert_eq!(int(&mut con, &["INCRBY", "n", "-12345"]), -12345);
    assert_eq!(int(&mut con, &["STRLEN", "n"]), 6);
}

#[test]
fn getrange_and_substr() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SET", "s", "Hello World"]);
    for (start, end, want) in [
        ("0", "-1", "Hello World"),
        ("0", "4", "Hello"),
        ("-3", "-1", "rld"),
        ("-1", "-5", ""),
        ("5", "3", ""),
        ("-100", "100", "Hello World"),
        ("100", "200", ""),
        ("3", "-100", ""),
        ("10", "10", "d"),
        ("-9223372036854775808", "9223372036854775807", "Hello World"),
    ] {
        assert_eq!(
            text(&mut con, &["GETRANGE", "s", start, end]).as_deref(),
            Some(want),
            "{start} {end}"
        );
        assert_eq!(
            text(&mut con, &["SUBSTR", "s", start, end]).as_deref(),
            Some(want),
            "{start} {end}"
        );
    }
    // A missing key and an empty string give an empty string, not nil.
    assert_eq!(
        text(&mut con, &["GETRANGE", "missing", "0", "-1"]).as_deref(),
        Some("")
    );
    ok(&mut con, &["SET", "e", ""]);
    assert_eq!(
        text(&mut con, &["GETRANGE", "e", "0", "-1"]).as_deref(),
        Some("")
    );
    assert_eq!(err(&mut con, &["GETRANGE", "s", "0", "x"]), NOT_INT);
    assert_eq!(err(&mut con, &["GETRANGE", "s", "1.5", "2"]), NOT_INT);
    assert_eq!(
        err(&mut con, &["GETRANGE", "s", "0"]),
        "ERR wrong number of arguments for 'getrange' command"
    );
    // Integers are strings too.
    assert_eq!(int(&mut con, &["INCRBY", "n", "12345"]), 12345);
    assert_eq!(
        text(&mut con, &["GETRANGE", "n", "1", "2"]).as_deref(),
        Some("23")
    );
}

#[test]
fn setrange_pads_extends_and_keeps_ttl() {
    let s = TestServer::start();
    let mut con = s.conn();
    ok(&mut con, &["SET", "k", "Hello World"]);
    assert_eq!(int(&mut con, &["SETRANGE", "k", "6", "Redis"]), 11);
    assert_eq!(
        text(&mut con, &["GET", "k"]).as_deref(),
        Some("Hello Redis")
    );
    assert_eq!(int(&mut con, &["SETRANGE", "k", "11", "!!"]), 13);
    assert_eq!(
        text(&mut con, &["GET", "k"]).as_deref(),
        Some("Hello Redis!!")
    );
    assert_eq!(int(&mut con, &["SETRANGE", "k", "15", "x"]), 16);
    assert_eq!(
        bulk(&mut con, &["GET", "k"]).unwrap(),
        b"Hello Redis!!\0\0x".to_vec()
    );
    // A missing key is zero-padded.
    assert_eq!(int(&mut con, &["SETRANGE", "pad", "3", "ab"]), 5);
    assert_eq!(
        bulk(&mut con, &["GET", "pad"]).unwrap(),
        b"\0\0\0ab".to_vec()
    );
    // Writing nothing: 0 and no key for a missing one, the length for an existing one.
    assert_eq!(int(&mut con, &["SETRANGE", "nokey", "100", ""]), 0);
    assert!(!exists(&mut con, "nokey"));
    assert_eq!(
        int(&mut con, &["SETRANGE", "k", "9223372036854775807", ""]),
        16
    );
    // Errors.
    assert_eq!(
        err(&mut con, &["SETRANGE", "k", "-1", "x"]),
        "ERR offset is out of range"
    );
    assert_eq!(err(&mut con, &["SETRANGE", "k", "x", "x"]), NOT_INT);
    let too_big = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
    assert_eq!(err(&mut con, &["SETRANGE", "k", "536870912", "x"]), too_big);
    assert_eq!(
        err(&mut con, &["SETRANGE", "new", "536870912", "x"]),
        too_big
    );
    assert_eq!(
        err(&mut con, &["SETRANGE", "k", "9223372036854775807", "x"]),
        too_big
    );
    assert!(!exists(&mut con, "new"));
    // The TTL stays.
    ok(&mut con, &["SETEX", "t", "100", "abc"]);
    assert_eq!(int(&mut con, &["SETRANGE", "t", "1", "X"]), 3);
    assert_eq!(text(&mut con, &["GET", "t"]).as_deref(), Some("aXc"));
    assert!(int(&mut con, &["TTL", "t"]) > 90);
}

#[test]
fn string_length_limit_follows_proto_max_bulk_len() {
    let s = TestServer::start_with(&["--proto-max-bulk-len", "1mb"]);
    let mut con = s.conn();
    let mb: i64 = 1024 * 1024;
    let too_big = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
    assert_eq!(
        int(&mut con, &["SETRANGE", "k", &(mb - 1).to_string(), "x"]),
        mb
    );
    assert_eq!(
        err(&mut con, &["SETRANGE", "k2", &mb.to_string(), "x"]),
        too_big
    );
    assert_eq!(err(&mut con, &["APPEND", "k", "x"]), too_big);
    assert_eq!(
        int(&mut con, &["STRLEN", "k"]),
        mb,
        "a refused APPEND changes nothing"
    );
    assert_eq!(
        int(&mut con, &["SETRANGE", "k", "0", "y"]),
        mb,
        "overwriting within the limit is fine"
    );
}

// ---------------------------------------------------------------- counters

#[test]
fn incr_family_basics() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(int(&mut con, &["INCR", "n"]), 1);
    assert_eq!(int(&mut con, &["INCRBY", "n", "41"]), 42);
    assert_eq!(int(&mut con, &["DECR", "n"]), 41);
    assert_eq!(int(&mut con, &["DECRBY", "n", "50"]), -9);
    assert_eq!(int(&mut con, &["INCRBY", "n", "-1"]), -10);
    assert_eq!(int(&mut con, &["DECRBY", "n", "-10"]), 0);
    assert_eq!(text(&mut con, &["GET", "n"]).as_deref(), Some("0"));
    assert_eq!(int(&mut con, &["DECR", "fresh"]), -1);
    ok(&mut con, &["SET", "s", "100"]);
    assert_eq!(int(&mut con, &["INCR", "s"]), 101);
    ok(&mut con, &["SETEX", "t", "100", "5"]);
    assert_eq!(int(&mut con, &["INCR", "t"]), 6);
    assert!(int(&mut con, &["TTL", "t"]) > 90, "INCR keeps the TTL");
}

#[test]
fn incr_rejects_what_is_not_an_integer() {
    let s = TestServer::start();
    let mut con = s.conn();
    for stored in [
        "abc",
        "",
        " 1",
        "1 ",
        "01",
        "-0",
        "+1",
        "1.5",
        "1e3",
        "9223372036854775808",
        "0x10",
    ] {
        ok(&mut con, &["SET", "k", stored]);
        for cmd in [
            &["INCR", "k"][..],
            &["DECR", "k"],
            &["INCRBY", "k", "1"],
            &["DECRBY", "k", "1"],
        ] {
            assert_eq!(err(&mut con, cmd), NOT_INT, "{stored:?} {cmd:?}");
        }
        assert_eq!(
            text(&mut con, &["GET", "k"]).as_deref(),
            Some(stored),
            "unchanged"
        );
    }
    for by in ["abc", "1.0", "", "99999999999999999999", " 1"] {
        assert_eq!(err(&mut con, &["INCRBY", "n", by]), NOT_INT, "{by:?}");
        assert_eq!(err(&mut con, &["DECRBY", "n", by]), NOT_INT, "{by:?}");
    }
    assert!(!exists(&mut con, "n"));
}

#[test]
fn incr_overflow_at_the_i64_limits() {
    let s = TestServer::start();
    let mut con = s.conn();
    let overflow = "ERR increment or decrement would overflow";
    ok(&mut con, &["SET", "n", "9223372036854775806"]);
    assert_eq!(int(&mut con, &["INCR", "n"]), i64::MAX);
    assert_eq!(err(&mut con, &["INCR", "n"]), overflow);
    assert_eq!(err(&mut con, &["DECRBY", "n", "-1"]), overflow);
    assert_eq!(
        text(&mut con, &["GET", "n"]).as_deref(),
        Some("9223372036854775807")
    );
    ok(&mut con, &["SET", "m", "-9223372036854775807"]);
    assert_eq!(int(&mut con, &["DECR", "m"]), i64::MIN);
    assert_eq!(err(&mut con, &["DECR", "m"]), overflow);
    assert_eq!(err(&mut con, &["INCRBY", "m", "-1"]), overflow);
    assert_eq!(int(&mut con, &["INCRBY", "m", "9223372036854775807"]), -1);
    assert_eq!(
        err(&mut con, &["DECRBY", "m", "-9223372036854775808"]),
        "ERR decrement would overflow"
    );
    assert_eq!(
        int(&mut con, &["DECRBY", "z", "9223372036854775807"]),
        -i64::MAX
    );
    assert_eq!(int(&mut con, &["DECRBY", "z", "1"]), i64::MIN);
}

#[test]
fn concurrent_incr_loses_no_update() {
    let s = TestServer::start();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let s = &s;
            scope.spawn(move || {
                let mut con = s.conn();
                for _ in 0..250 {
                    int(&mut con, &["INCR", "counter"]);
                }
            });
        }
    });
    let mut con = s.conn();
    assert_eq!(text(&mut con, &["GET", "counter"]).as_deref(), Some("2000"));
}

#[test]
fn incrbyfloat_formats_like_redis() {
    let s = TestServer::start();
    let mut con = s.conn();
    // Every expected reply below is what Redis 7 on x86-64 gives.
    ok(&mut con, &["SET", "f", "10.50"]);
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "f", "0.1"]).as_deref(),
        Some("10.6")
    );
    ok(&mut con, &["SET", "f", "5.0e3"]);
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "f", "0"]).as_deref(),
        Some("5000")
    );
    assert_eq!(
        text(&mut con, &["GET", "f"]).as_deref(),
        Some("5000"),
        "the formatted value is stored"
    );
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "f", "2.0e2"]).as_deref(),
        Some("5200")
    );
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "three", "3.0"]).as_deref(),
        Some("3")
    );
    for want in ["0.1", "0.2", "0.3"] {
        assert_eq!(
            text(&mut con, &["INCRBYFLOAT", "tenth", "0.1"]).as_deref(),
            Some(want)
        );
    }
    // Redis computes in 80-bit long double and prints 17 decimals: the noise shows.
    ok(&mut con, &["SET", "k", "1000"]);
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "k", "0.1"]).as_deref(),
        Some("1000.09999999999999998")
    );
    ok(&mut con, &["SET", "k", "123456789.123"]);
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "k", "0.001"]).as_deref(),
        Some("123456789.12399999999615829")
    );
    for (by, want) in [
        ("-1.5", "-1.5"),
        ("0x10", "16"),
        ("1e-18", "0"),
        ("-0.0", "0"),
        ("+1.5", "1.5"),
        (".5", "0.5"),
        ("5.", "5"),
        ("1E5", "100000"),
        ("0.000003814697265625", "0.00000381469726562"),
        (
            "123456789012345678901234567890",
            "123456789012345678899921813504",
        ),
    ] {
        let key = format!("fresh:{by}");
        assert_eq!(
            text(&mut con, &["INCRBYFLOAT", &key, by]).as_deref(),
            Some(want),
            "{by}"
        );
    }
    // Integers stay integers, and INCR works on the result again.
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "i", "41"]).as_deref(),
        Some("41")
    );
    assert_eq!(int(&mut con, &["INCR", "i"]), 42);
    // Past f64's range is still finite for a long double.
    let big = text(&mut con, &["INCRBYFLOAT", "big", "1e400"]).unwrap();
    assert_eq!(big.len(), 401);
    assert!(
        big.starts_with("1000000000000000000028188068394758651458645343362905203862591069353968553400862986203936399484832416"),
        "{big}"
    );
    ok(&mut con, &["SETEX", "t", "100", "1.5"]);
    assert_eq!(
        text(&mut con, &["INCRBYFLOAT", "t", "1"]).as_deref(),
        Some("2.5")
    );
    assert!(
        int(&mut con, &["TTL", "t"]) > 90,
        "INCRBYFLOAT keeps the TTL"
    );
}

#[test]
fn incrbyfloat_errors() {
    let s = TestServer::start();
    let mut con = s.conn();
    let nan_inf = "ERR increment would produce NaN or Infinity";
    for by in [
        "abc", "", " 1", "1 ", "1e", "0x", "nan", "NaN", "1e5000", "1e-5000", "1,5", "--1",
    ] {
        assert_eq!(
            err(&mut con, &["INCRBYFLOAT", "f", by]),
            NOT_FLOAT,
            "{by:?}"
        );
    }
    for by in ["inf", "-inf", "+Infinity"] {
        assert_eq!(err(&mut con, &["INCRBYFLOAT", "f", by]), nan_inf, "{by:?}");
    }
    assert!(!exists(&mut con, "f"));
    ok(&mut con, &["SET", "f", "1.18973149535723176502e+4932"]);
    assert_eq!(
        err(
            &mut con,
            &["INCRBYFLOAT", "f", "1.18973149535723176502e+4932"]
        ),
        nan_inf
    );
    ok(&mut con, &["SET", "f", "inf"]);
    assert_eq!(err(&mut con, &["INCRBYFLOAT", "f", "1"]), nan_inf);
    for stored in ["abc", "", "1.5 ", " 1"] {
        ok(&mut con, &["SET", "f", stored]);
        assert_eq!(
            err(&mut con, &["INCRBYFLOAT", "f", "1"]),
            NOT_FLOAT,
            "{stored:?}"
        );
        assert_eq!(text(&mut con, &["GET", "f"]).as_deref(), Some(stored));
    }
    assert_eq!(
        run(&mut con, &[b"INCRBYFLOAT", b"g", b"1.5\0"]),
        Err(NOT_FLOAT.to_string())
    );
}

// ---------------------------------------------------------------- types

#[test]
fn wrong_type_errors_for_an_idset_key() {
    let s = TestServer::start();
    let mut con = s.conn();
    assert_eq!(
        int(&mut con, &["IDSET.LOAD", "set", "IDS", "1", "2", "3"]),
        3
    );
    for args in [
        &["APPEND", "set", "x"][..],
        &["STRLEN", "set"],
        &["GETRANGE", "set", "0", "-1"],
        &["SUBSTR", "set", "0", "-1"],
        &["SETRANGE", "set", "0", "x"],
        &["SETRANGE", "set", "0", ""],
        &["INCR", "set"],
        &["DECR", "set"],
        &["INCRBY", "set", "1"],
        &["DECRBY", "set", "1"],
        &["INCRBYFLOAT", "set", "1"],
    ] {
        assert_eq!(err(&mut con, args), WRONGTYPE, "{args:?}");
    }
    // Redis checks INCRBY's increment before the key, and INCRBYFLOAT's after it.
    assert_eq!(err(&mut con, &["INCRBY", "set", "x"]), NOT_INT);
    assert_eq!(err(&mut con, &["INCRBYFLOAT", "set", "x"]), WRONGTYPE);
    assert_eq!(
        int(&mut con, &["IDSET.CARD", "set"]),
        3,
        "the set is untouched"
    );
    // SET (without GET) replaces a value of any type, SETNX sees the key exists.
    assert_eq!(int(&mut con, &["SETNX", "set", "x"]), 0);
    ok(&mut con, &["SET", "set", "now a string"]);
    assert_eq!(
        q(&mut con, &["TYPE", "set"]),
        Ok(Value::SimpleString("string".into()))
    );
}

#[test]
fn whole_value_writes_of_a_table_store_an_idset() {
    let s = TestServer::start();
    let mut con = s.conn();
    let table = relcache_protocol::idset::Builder::new().build(&[7, 8, 9]);
    // SETEX and MSET take tables like SET does; the bytes read back with IDSET.TABLE,
    // while GET and its variants say WRONGTYPE and MGET reads nil, as in Redis.
    assert_eq!(
        run(&mut con, &[b"SETEX", b"a", b"100", &table]),
        Ok(Value::Okay)
    );
    assert_eq!(
        run(&mut con, &[b"MSET", b"b", &table, b"c", b"plain"]),
        Ok(Value::Okay)
    );
    for key in ["a", "b"] {
        assert_eq!(
            q(&mut con, &["TYPE", key]),
            Ok(Value::SimpleString("set".into()))
        );
        assert_eq!(int(&mut con, &["IDSET.EXISTS", key, "8"]), 1);
        assert_eq!(bulk(&mut con, &["IDSET.TABLE", key]).unwrap(), table);
        assert_eq!(err(&mut con, &["GET", key]), WRONGTYPE);
    }
    assert!(int(&mut con, &["TTL", "a"]) > 90);
    assert_eq!(
        q(&mut con, &["MGET", "a", "c"]),
        Ok(Value::Array(vec![
            Value::Nil,
            Value::BulkString(b"plain".to_vec())
        ]))
    );
    assert_eq!(err(&mut con, &["GETDEL", "b"]), WRONGTYPE);
    assert!(exists(&mut con, "b"), "a refused GETDEL deletes nothing");
    // An invalid table is refused and nothing of the command is written.
    let mut bad = table.clone();
    bad.truncate(bad.len() - 1);
    let e = run(&mut con, &[b"MSET", b"x", b"1", b"y", &bad]).unwrap_err();
    assert!(e.starts_with("ERR invalid idset table"), "{e}");
    assert!(!exists(&mut con, "x") && !exists(&mut con, "y"));
    let e = run(&mut con, &[b"GETSET", b"c", &bad]).unwrap_err();
    assert!(e.starts_with("ERR invalid idset table"), "{e}");
    assert_eq!(text(&mut con, &["GET", "c"]).as_deref(), Some("plain"));
    // APPEND builds strings, never tables.
    assert_eq!(
        run(&mut con, &[b"APPEND", b"z", &table]),
        Ok(Value::Int(table.len() as i64))
    );
    assert_eq!(
        q(&mut con, &["TYPE", "z"]),
        Ok(Value::SimpleString("string".into()))
    );
}

// ---------------------------------------------------------------- wire shapes

#[test]
fn resp2_replies_on_the_wire() {
    let s = TestServer::start();
    let mut c = s.raw();
    rt(&mut c, &[b"GET", b"k"], b"$-1\r\n");
    rt(&mut c, &[b"SET", b"k", b"1", b"NX"], b"+OK\r\n");
    rt(&mut c, &[b"SET", b"k", b"1", b"NX"], b"$-1\r\n");
    rt(&mut c, &[b"SETNX", b"k", b"1"], b":0\r\n");
    rt(
        &mut c,
        &[b"MGET", b"k", b"nope"],
        b"*2\r\n$1\r\n1\r\n$-1\r\n",
    );
    rt(&mut c, &[b"INCRBYFLOAT", b"k", b"1.5"], b"$3\r\n2.5\r\n");
    rt(&mut c, &[b"GETRANGE", b"nope", b"0", b"1"], b"$0\r\n\r\n");
    rt(
        &mut c,
        &[b"SET", b"k", b"v", b"EX", b"0"],
        b"-ERR invalid expire time in 'set' command\r\n",
    );
    rt(
        &mut c,
        &[b"SET", b"k", b"v", b"NX", b"XX"],
        b"-ERR syntax error\r\n",
    );
    rt(
        &mut c,
        &[b"INCR", b"k"],
        b"-ERR value is not an integer or out of range\r\n",
    );
    rt(
        &mut c,
        &[b"MSET", b"a", b"1", b"b"],
        b"-ERR wrong number of arguments for 'mset' command\r\n",
    );
    rt(&mut c, &[b"GET", b"k"], b"$3\r\n2.5\r\n");
}

#[test]
fn resp3_replies_on_the_wire() {
    let s = TestServer::start();
    let mut c = s.raw();
    hello3(&mut c);
    rt(&mut c, &[b"GET", b"k"], b"_\r\n");
    rt(&mut c, &[b"SET", b"k", b"1", b"NX"], b"+OK\r\n");
    rt(&mut c, &[b"SET", b"k", b"1", b"NX"], b"_\r\n");
    rt(&mut c, &[b"SET", b"nope", b"1", b"XX", b"GET"], b"_\r\n");
    rt(&mut c, &[b"MGET", b"k", b"nope"], b"*2\r\n$1\r\n1\r\n_\r\n");
    // INCRBYFLOAT replies with a bulk string in RESP3 too, not a double.
    rt(&mut c, &[b"INCRBYFLOAT", b"k", b"1.5"], b"$3\r\n2.5\r\n");
    rt(&mut c, &[b"GETDEL", b"nope"], b"_\r\n");
    rt(&mut c, &[b"GETEX", b"nope"], b"_\r\n");
    rt(&mut c, &[b"INCR", b"n"], b":1\r\n");
}

/// Switches a raw connection to RESP3, reading HELLO's reply (a map) whole.
fn hello3(c: &mut TcpStream) {
    use relcache_protocol::resp::{parse_frame, Frame, Limits};
    use std::io::{Read, Write};
    c.write_all(&resp_cmd(&[b"HELLO", b"3"])).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some((frame, used)) = parse_frame(&got, &Limits::default()).unwrap() {
            assert!(
                matches!(frame, Frame::Map(_)),
                "HELLO 3 replies with a map: {frame:?}"
            );
            assert_eq!(used, got.len(), "nothing after HELLO's reply");
            return;
        }
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "EOF during HELLO");
        got.extend_from_slice(&buf[..n]);
    }
}

// ---------------------------------------------------------------- transactions

#[test]
fn string_commands_in_multi_exec() {
    let s = TestServer::start();
    let mut con = s.conn();
    let (set, incr, append, get, mget, msetnx, getdel): (
        String,
        i64,
        i64,
        String,
        Vec<Option<String>>,
        i64,
        String,
    ) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("n")
        .arg("10")
        .cmd("INCRBY")
        .arg("n")
        .arg(5)
        .cmd("APPEND")
        .arg("n")
        .arg("0")
        .cmd("GET")
        .arg("n")
        .cmd("MGET")
        .arg("n")
        .arg("missing")
        .cmd("MSETNX")
        .arg("x")
        .arg("1")
        .arg("n")
        .arg("2")
        .cmd("GETDEL")
        .arg("n")
        .query(&mut con)
        .unwrap();
    assert_eq!(set, "OK");
    assert_eq!((incr, append), (15, 3));
    assert_eq!(get, "150");
    assert_eq!(mget, vec![Some("150".to_string()), None]);
    assert_eq!(msetnx, 0);
    assert_eq!(getdel, "150");
    assert!(!exists(&mut con, "n") && !exists(&mut con, "x"));
}

#[test]
fn an_error_inside_exec_does_not_stop_the_rest() {
    let s = TestServer::start();
    let mut c = s.raw();
    rt(&mut c, &[b"MULTI"], b"+OK\r\n");
    rt(&mut c, &[b"SET", b"a", b"x"], b"+QUEUED\r\n");
    rt(&mut c, &[b"INCR", b"a"], b"+QUEUED\r\n");
    rt(&mut c, &[b"SET", b"b", b"1", b"EX", b"0"], b"+QUEUED\r\n");
    rt(&mut c, &[b"INCRBYFLOAT", b"c", b"0.5"], b"+QUEUED\r\n");
    rt(
        &mut c,
        &[b"EXEC"],
        b"*4\r\n+OK\r\n-ERR value is not an integer or out of range\r\n-ERR invalid expire time in 'set' command\r\n$3\r\n0.5\r\n",
    );
    rt(&mut c, &[b"GET", b"a"], b"$1\r\nx\r\n");
}

#[test]
fn watch_sees_string_writes_but_not_refused_ones() {
    let s = TestServer::start();
    let mut a = s.conn();
    let mut b = s.conn();
    ok(&mut a, &["SET", "k", "1"]);
    // A write that changes nothing (SET NX on an existing key, SETRANGE of nothing)
    // does not touch the key, so EXEC runs.
    ok(&mut a, &["WATCH", "k"]);
    assert_eq!(q(&mut b, &["SET", "k", "2", "NX"]), Ok(Value::Nil));
    assert_eq!(int(&mut b, &["SETRANGE", "k", "0", ""]), 1);
    text(&mut b, &["GET", "k"]);
    let r: Option<(i64,)> = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("k")
        .query(&mut a)
        .unwrap();
    assert_eq!(r, Some((2,)));
    // A real write aborts it.
    for write in [
        &["INCR", "k"][..],
        &["APPEND", "k", "x"],
        &["SET", "k", "9", "XX"],
        &["GETDEL", "k"],
    ] {
        ok(&mut a, &["WATCH", "k"]);
        assert!(q(&mut b, write).is_ok(), "{write:?}");
        let r: Option<(String,)> = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("k")
            .arg("from-a")
            .query(&mut a)
            .unwrap();
        assert_eq!(r, None, "EXEC after {write:?} must abort");
        ok(&mut b, &["SET", "k", "1"]);
    }
}

// ---------------------------------------------------------------- introspection

/// `keyspace_hits` and `keyspace_misses` from INFO stats.
fn hits_misses(con: &mut Connection) -> (i64, i64) {
    let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("{name} in INFO stats"))
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    (field("keyspace_hits"), field("keyspace_misses"))
}

#[test]
fn keyspace_hits_and_misses_count_reads_not_writes() {
    let s = TestServer::start();
    let mut con = s.conn();
    let before = hits_misses(&mut con);
    // The same sequence gives 7 hits and 4 misses on Redis 7: writes that look a
    // key up to change it (INCR, SETNX, SET NX, APPEND, SETRANGE, MSETNX …) are not
    // reads; everything that returns a value is.
    for args in [
        &["SET", "a", "1"][..],
        &["GET", "a"],
        &["GET", "nope"],
        &["MGET", "a", "nope", "nope2"],
        &["INCR", "n"],
        &["SETNX", "a", "2"],
        &["SET", "a", "3", "NX"],
        &["APPEND", "a", "x"],
        &["SETRANGE", "a", "0", "y"],
        &["SET", "a", "4", "GET"],
        &["STRLEN", "a"],
        &["GETRANGE", "a", "0", "1"],
        &["GETEX", "a"],
        &["GETDEL", "a"],
        &["GETSET", "a", "5"],
        &["INCRBYFLOAT", "f", "1"],
        &["MSETNX", "q", "1", "a", "1"],
    ] {
        assert!(q(&mut con, args).is_ok(), "{args:?}");
    }
    let after = hits_misses(&mut con);
    assert_eq!((after.0 - before.0, after.1 - before.1), (7, 4));
}

/// (name, arity, flags, first key, last key, step), as Redis 7's COMMAND INFO says.
type Info = (&'static str, i64, &'static [&'static str], i64, i64, i64);

#[test]
fn command_info_matches_redis() {
    let s = TestServer::start();
    let mut con = s.conn();
    let want: &[Info] = &[
        ("get", 2, &["readonly", "fast"], 1, 1, 1),
        ("set", -3, &["write", "denyoom"], 1, 1, 1),
        ("setnx", 3, &["write", "denyoom", "fast"], 1, 1, 1),
        ("setex", 4, &["write", "denyoom"], 1, 1, 1),
        ("psetex", 4, &["write", "denyoom"], 1, 1, 1),
        ("getex", -2, &["write", "fast"], 1, 1, 1),
        ("getdel", 2, &["write", "fast"], 1, 1, 1),
        ("getset", 3, &["write", "denyoom", "fast"], 1, 1, 1),
        ("mget", -2, &["readonly", "fast"], 1, -1, 1),
        ("mset", -3, &["write", "denyoom"], 1, -1, 2),
        ("msetnx", -3, &["write", "denyoom"], 1, -1, 2),
        ("append", 3, &["write", "denyoom", "fast"], 1, 1, 1),
        ("strlen", 2, &["readonly", "fast"], 1, 1, 1),
        ("getrange", 4, &["readonly"], 1, 1, 1),
        ("substr", 4, &["readonly"], 1, 1, 1),
        ("setrange", 4, &["write", "denyoom"], 1, 1, 1),
        ("incr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
        ("decr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
        ("incrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
        ("decrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
        ("incrbyfloat", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ];
    for &(name, arity, flags, first, last, step) in want {
        let Ok(Value::Array(infos)) = q(&mut con, &["COMMAND", "INFO", name]) else {
            panic!("COMMAND INFO {name}")
        };
        let Value::Array(info) = &infos[0] else {
            panic!("{name}: {infos:?}")
        };
        assert_eq!(info[0], Value::BulkString(name.as_bytes().to_vec()));
        assert_eq!(info[1], Value::Int(arity), "{name} arity");
        let Value::Array(got_flags) = &info[2] else {
            panic!("{name} flags")
        };
        let got_flags: Vec<String> = got_flags
            .iter()
            .map(|f| match f {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got_flags, flags, "{name} flags");
        assert_eq!(
            &info[3..6],
            &[Value::Int(first), Value::Int(last), Value::Int(step)],
            "{name} keys"
        );
    }
    let Ok(Value::Array(keys)) = q(
        &mut con,
        &["COMMAND", "GETKEYS", "MSETNX", "a", "1", "b", "2"],
    ) else {
        panic!("GETKEYS")
    };
    assert_eq!(
        keys,
        vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"b".to_vec())
        ]
    );
}

// ---------------------------------------------------------------- tools

#[test]
fn redis_cli_drives_the_string_family() {
    let s = TestServer::start();
    assert_eq!(s.cli_out(&["SET", "k", "v", "EX", "100"]), "OK");
    assert_eq!(s.cli_out(&["GETEX", "k", "PERSIST"]), "v");
    assert_eq!(s.cli_out(&["INCRBYFLOAT", "f", "10.5"]), "10.5");
    assert_eq!(s.cli_out(&["INCRBYFLOAT", "f", "0.1"]), "10.6");
    assert_eq!(s.cli_out(&["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(
        s.cli_out(&["--no-raw", "MGET", "a", "b", "c"]),
        "1) \"1\"\n2) \"2\"\n3) (nil)"
    );
    assert_eq!(
        s.cli_out(&["--no-raw", "SET", "k", "v", "NX", "XX"]),
        "(error) ERR syntax error"
    );
}
