//! Where real clients and the upstream Redis suite tripped (issue 13): answers that
//! must be Redis's, and output buffer limits that must cut off clients that stop
//! reading, never clients that read a large answer.

mod harness;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use harness::real_redis::RedisServer;
use harness::{info_stat, read_line, read_n, resp_cmd, roundtrip, Raw, TestServer};
use relcache_protocol::resp::{parse_frame, Frame, Limits};

/// A negative multibulk count is an empty request to Redis: skipped, and the
/// connection stays up (the upstream suite's `*-10` case).
#[test]
fn negative_multibulk_counts_are_skipped() {
    let s = TestServer::start();
    let mut c = s.raw();
    roundtrip(&mut c, b"*-10\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
    roundtrip(&mut c, b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
}

/// `CONFIG|GET` names a subcommand for COMMAND INFO, but as a request's command it
/// is unknown (Redis looks the first argument up among top-level commands only).
#[test]
fn a_subcommand_name_is_not_a_command() {
    let s = TestServer::start();
    let mut c = Raw::new(&s);
    c.expect_err(
        &["CONFIG|GET", "maxmemory"],
        "ERR unknown command 'CONFIG|GET', with args beginning with: 'maxmemory' ",
    );
    c.expect_err(
        &["client|id"],
        "ERR unknown command 'client|id', with args beginning with: ",
    );
    c.expect(&["PING"], b"+PONG\r\n");
}

/// FLUSHALL and FLUSHDB abort a transaction only if one of its watched keys was
/// there to be flushed, as in Redis 7.
#[test]
fn a_flush_aborts_only_transactions_whose_watched_keys_existed() {
    let s = TestServer::start();
    for flush in ["FLUSHALL", "FLUSHDB"] {
        let mut other = s.conn();
        // A watched key that never existed: the flush changed nothing for it.
        let mut c = Raw::new(&s);
        c.expect(&["WATCH", "nokey"], b"+OK\r\n");
        let () = redis::cmd(flush).query(&mut other).unwrap();
        c.expect(&["MULTI"], b"+OK\r\n");
        c.expect(&["SET", "x", "1"], b"+QUEUED\r\n");
        c.expect(&["EXEC"], b"*1\r\n+OK\r\n");

        // A watched key that was there: the flush deleted it.
        let () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query(&mut other)
            .unwrap();
        c.expect(&["WATCH", "k"], b"+OK\r\n");
        let () = redis::cmd(flush).query(&mut other).unwrap();
        c.expect(&["MULTI"], b"+OK\r\n");
        c.expect(&["SET", "x", "2"], b"+QUEUED\r\n");
        c.expect(&["EXEC"], b"*-1\r\n");
    }
}

/// Stores `len` bytes of `b'v'` at `key` over a raw connection.
fn set_big(s: &TestServer, key: &str, len: usize) {
    let mut c = s.raw();
    let mut req = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${len}\r\n", key.len()).into_bytes();
    req.resize(req.len() + len, b'v');
    req.extend_from_slice(b"\r\n");
    c.write_all(&req).unwrap();
    assert_eq!(read_n(&mut c, 5), b"+OK\r\n");
}

/// Reads one bulk reply of `len` bytes of `b'v'` without holding it whole.
fn read_big_bulk(c: &mut std::net::TcpStream, len: usize) {
    assert_eq!(read_line(c), format!("${len}\r\n").into_bytes());
    let mut left = len + 2;
    let mut buf = vec![0u8; 1 << 20];
    // Every byte is checked where it falls: a read may end anywhere, between the
    // CR and the LF included.
    while left > 0 {
        let n = c.read(&mut buf[..left.min(1 << 20)]).unwrap();
        assert!(n > 0, "EOF with {left} bytes of the reply left");
        for (i, &b) in buf[..n].iter().enumerate() {
            let from_end = left - i;
            let want = match from_end {
                2 => b'\r',
                1 => b'\n',
                _ => b'v',
            };
            assert_eq!(b, want, "byte {} of the reply", len + 2 - from_end);
        }
        left -= n;
    }
}

/// A 300 MB value that SET accepted is served by GET with the default limits (the
/// old default cut the client off at 256 MB every time).
#[test]
fn a_300mb_get_is_served_with_the_default_limits() {
    const LEN: usize = 300 << 20;
    let s = TestServer::start();
    set_big(&s, "huge", LEN);
    let mut c = s.raw();
    c.write_all(&resp_cmd(&[b"GET", b"huge"])).unwrap();
    read_big_bulk(&mut c, LEN);
    roundtrip(&mut c, b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
}

/// 8,000 pipelined GETs of 40 KB (320 MB of replies), written at once and read
/// afterwards as redis-py's pipeline does, and written while reading as ioredis's
/// auto-pipelining does: every reply arrives.
#[test]
fn a_deep_pipeline_of_large_gets_is_served_with_the_default_limits() {
    const VALUE: usize = 40 << 10;
    const DEPTH: usize = 8_000;
    let s = TestServer::start();
    set_big(&s, "v40k", VALUE);
    let requests = resp_cmd(&[b"GET", b"v40k"]).repeat(DEPTH);

    // Write everything, then read everything.
    let mut c = s.raw();
    c.write_all(&requests).unwrap();
    for _ in 0..DEPTH {
        read_big_bulk(&mut c, VALUE);
    }

    // Write and read at once.
    let mut c = s.raw();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for chunk in requests.chunks(4096) {
            w.write_all(chunk).unwrap();
        }
    });
    for _ in 0..DEPTH {
        read_big_bulk(&mut c, VALUE);
    }
    writer.join().unwrap();
    roundtrip(&mut c, b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
}

/// A pipeline written whole before any reply is read, whose early replies pass the
/// soft limit (80 MB of GETs) and whose later requests are more than the kernel
/// buffers hold (30 MB of SETs): the server keeps reading while it holds the
/// requests back, so the client finishes writing, then reads everything.
#[test]
fn a_pipeline_written_whole_before_reading_is_served() {
    const VALUE: usize = 40 << 10;
    const GETS: usize = 2_000;
    const SETS: usize = 3_000;
    let s = TestServer::start();
    set_big(&s, "v40k", VALUE);
    let mut requests = resp_cmd(&[b"GET", b"v40k"]).repeat(GETS);
    let value = vec![b'w'; 10 << 10];
    for i in 0..SETS {
        requests.extend(resp_cmd(&[b"SET", format!("s{i}").as_bytes(), &value]));
    }
    let mut c = s.raw();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        w.write_all(&requests).is_ok()
    });
    // Like redis-py: no reply is read until every request is written.
    assert!(
        writer.join().unwrap(),
        "the client could not finish writing"
    );
    for _ in 0..GETS {
        read_big_bulk(&mut c, VALUE);
    }
    assert_eq!(read_n(&mut c, 5 * SETS), b"+OK\r\n".repeat(SETS));
    roundtrip(&mut c, b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
}

/// A client that sends and never reads is held back at the soft limit (its
/// requests are no longer run, so its output stops growing) and disconnected once
/// it has taken nothing for `soft_seconds`; the reason is counted in INFO, and
/// everyone else is served throughout.
#[test]
fn a_client_that_never_reads_is_held_back_then_disconnected() {
    let s = TestServer::start();
    let mut admin = s.conn();
    // The default soft limit in bytes; a shorter wait than the default 60 s.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("normal 0 64mb 2")
        .query(&mut admin)
        .unwrap();
    set_big(&s, "big", 100 << 10);
    let before: u64 = info_stat(&mut admin, "memory", "used_memory");

    let victim = s.raw();
    let mut w = victim.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        // 20,000 GETs of 100 KB: 2 GB of replies it will never read. The write
        // blocks once the server stops reading; the disconnect ends it.
        let _ = w.write_all(&resp_cmd(&[b"GET", b"big"]).repeat(20_000));
    });

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut peak = before;
    loop {
        let used: u64 = info_stat(&mut admin, "memory", "used_memory");
        peak = peak.max(used);
        let cut: u64 = info_stat(
            &mut admin,
            "stats",
            "client_output_buffer_limit_disconnections",
        );
        if cut >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the client was never disconnected"
        );
        let v: String = redis::cmd("GET").arg("big").query(&mut admin).unwrap();
        assert_eq!(v.len(), 100 << 10);
        std::thread::sleep(Duration::from_millis(50));
    }
    writer.join().unwrap();
    // Held back: its pending output never grew far past the 64 MB soft limit
    // (one batch of replies beyond it at most), although it asked for 2 GB.
    assert!(
        peak - before < 160 << 20,
        "used_memory grew by {} MB",
        (peak - before) >> 20
    );
    s.wait_log("the reason is in the log", |l| {
        l.contains("output buffer limits")
    });
}

/// Sends one request over RESP3 and returns its reply.
fn call3(s: &mut std::net::TcpStream, args: &[&str]) -> Frame {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    s.write_all(&resp_cmd(&args)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if let Some((frame, _)) = parse_frame(&buf, &Limits::default()).unwrap() {
            return frame;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// What COMMAND DOCS says of a command's arguments, without the prose fields
/// (`since`, `summary`, `display_text`, `deprecated_since`) relcache leaves out;
/// sets in a canonical order.
fn argument_tree(frame: &Frame) -> Frame {
    match frame {
        Frame::Map(fields) => Frame::Map(
            fields
                .iter()
                .filter(|(k, _)| {
                    !matches!(k, Frame::Bulk(k) | Frame::Simple(k)
                        if [&b"since"[..], b"summary", b"display_text", b"deprecated_since"].contains(&&k[..]))
                })
                .map(|(k, v)| (k.clone(), argument_tree(v)))
                .collect(),
        ),
        Frame::Array(items) => Frame::Array(items.iter().map(argument_tree).collect()),
        Frame::Set(items) => {
            let mut items: Vec<Frame> = items.iter().map(argument_tree).collect();
            items.sort_by_key(|f| format!("{f:?}"));
            Frame::Set(items)
        }
        other => other.clone(),
    }
}

/// The `arguments` of `name` in a COMMAND DOCS reply (`Null` when there are none).
fn arguments_in(docs: &Frame, name: &str) -> Frame {
    let Frame::Map(entries) = docs else {
        panic!("COMMAND DOCS {name}: {docs:?}")
    };
    let Some((_, Frame::Map(fields))) = entries.first() else {
        panic!("COMMAND DOCS {name}: {docs:?}")
    };
    fields
        .iter()
        .find(|(k, _)| matches!(k, Frame::Bulk(k) if &k[..] == b"arguments"))
        .map_or(Frame::Null, |(_, v)| argument_tree(v))
}

/// Removes, anywhere in an argument tree, the argument introduced by `token`;
/// whether there was one.
fn drop_token(tree: &mut Frame, token: &str) -> bool {
    let is_it = |f: &Frame| {
        matches!(f, Frame::Map(fields) if fields.iter().any(|(k, v)| {
            matches!(k, Frame::Bulk(k) if &k[..] == b"token")
                && matches!(v, Frame::Bulk(v) | Frame::Simple(v) if &v[..] == token.as_bytes())
        }))
    };
    match tree {
        Frame::Array(items) => {
            let before = items.len();
            items.retain(|f| !is_it(f));
            let mut dropped = items.len() != before;
            for item in items.iter_mut() {
                dropped |= drop_token(item, token);
            }
            dropped
        }
        Frame::Map(fields) => {
            let mut dropped = false;
            for (_, v) in fields.iter_mut() {
                dropped |= drop_token(v, token);
            }
            dropped
        }
        _ => false,
    }
}

/// COMMAND DOCS describes every command's arguments as a real redis-server does,
/// for every command the two share (what redis-cli builds its hints from).
#[test]
fn command_docs_arguments_match_redis() {
    let s = TestServer::start();
    let redis = RedisServer::start();
    let mut ours = s.raw();
    let mut theirs = redis.raw();
    call3(&mut ours, &["HELLO", "3"]);
    call3(&mut theirs, &["HELLO", "3"]);
    let Frame::Array(names) = call3(&mut ours, &["COMMAND", "LIST"]) else {
        panic!("COMMAND LIST")
    };
    let mut compared = 0;
    for name in names {
        let Frame::Bulk(name) = name else {
            panic!("COMMAND LIST entry {name:?}")
        };
        let name = String::from_utf8(name.to_vec()).unwrap();
        let reference = call3(&mut theirs, &["COMMAND", "DOCS", &name]);
        if matches!(&reference, Frame::Map(e) if e.is_empty()) {
            continue; // Redis 7.0 has no such command (IDSET.*, CLIENT SETINFO …)
        }
        let mine = call3(&mut ours, &["COMMAND", "DOCS", &name]);
        let mut mine = arguments_in(&mine, &name);
        // Redis 7.4's CLIENT KILL MAXAGE, which the 7.0 reference lacks.
        if name == "client|kill" {
            assert!(
                drop_token(&mut mine, "MAXAGE"),
                "CLIENT KILL's docs lack MAXAGE"
            );
        }
        assert_eq!(
            mine,
            arguments_in(&reference, &name),
            "COMMAND DOCS {name}: arguments differ from redis-server's"
        );
        compared += 1;
    }
    assert!(compared > 100, "compared only {compared} commands");
    // relcache's own commands are described too.
    let load = call3(&mut ours, &["COMMAND", "DOCS", "idset.load"]);
    assert_ne!(arguments_in(&load, "idset.load"), Frame::Null);
}

/// IDSET.INFO gives the seed unsigned, as FORMAT.md specifies (the default seed is
/// past 2^63, and a RESP integer printed it negative).
#[test]
fn idset_info_prints_the_seed_unsigned() {
    let s = TestServer::start();
    let mut c = s.raw();
    call3(&mut c, &["HELLO", "3"]);
    call3(&mut c, &["IDSET.LOAD", "k", "IDS", "1", "2", "3"]);
    let Frame::Map(fields) = call3(&mut c, &["IDSET.INFO", "k"]) else {
        panic!("IDSET.INFO is a map")
    };
    let seed = fields
        .iter()
        .find(|(k, _)| matches!(k, Frame::Bulk(k) | Frame::Simple(k) if &k[..] == b"seed"))
        .map(|(_, v)| v.clone())
        .expect("IDSET.INFO has a seed");
    let want = relcache_protocol::idset::DEFAULT_SEED.to_string();
    assert_eq!(seed, Frame::Bulk(want.into_bytes().into()));
}

/// redis-py, as Python users run it (decode_responses=True, RESP2 and RESP3):
/// WRONGTYPE from GET of a set, 0 from SISMEMBER of a non-id, and a pipeline of
/// 270 GETs of 1 MB served whole (tests/python/clients.py).
#[test]
fn redis_py_sees_redis_answers() {
    let s = TestServer::start();
    harness::python_checks("clients.py", s.port);
}

/// WATCH's promise under contention: clients that each do WATCH, GET, MULTI, SET
/// (the value + 1), EXEC on one counter never lose an update, so the counter ends
/// equal to the number of transactions that committed. (EXEC used to check the
/// watch before locking the keys, leaving a window for another client's SET.)
#[test]
fn watch_loses_no_update_under_contention() {
    const CLIENTS: usize = 4;
    const ATTEMPTS: usize = 1_500;
    let s = TestServer::start();
    let mut admin = s.conn();
    let () = redis::cmd("SET").arg("n").arg(0).query(&mut admin).unwrap();
    let committed: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let mut con = s.conn();
                scope.spawn(move || {
                    let mut won = 0;
                    for _ in 0..ATTEMPTS {
                        let () = redis::cmd("WATCH").arg("n").query(&mut con).unwrap();
                        let n: i64 = redis::cmd("GET").arg("n").query(&mut con).unwrap();
                        let done: Option<((),)> = redis::pipe()
                            .atomic()
                            .cmd("SET")
                            .arg("n")
                            .arg(n + 1)
                            .query(&mut con)
                            .unwrap();
                        won += usize::from(done.is_some());
                    }
                    won
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let n: usize = redis::cmd("GET").arg("n").query(&mut admin).unwrap();
    assert!(committed > 0);
    assert_eq!(n, committed, "updates lost despite WATCH");
}
