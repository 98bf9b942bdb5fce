//! Keyspace notifications (`notify-keyspace-events`) with the real binary: the
//! events of every write family compared in order with a real redis-server,
//! RESP2 and RESP3 subscribers, `K` / `E` and class selection, relcache's own
//! IDSET events, `expired` from a write and from the background sweep,
//! `evicted` under `--maxmemory`, and the parameter's CONFIG SET / GET compared
//! with redis-server.

mod harness;

use std::time::{Duration, Instant};

use harness::real_redis::RedisServer;
use harness::{config_get, TestServer};

/// A subscriber to every keyspace and keyevent channel, plus a fence channel: a
/// publisher's `PUBLISH fence …` comes after every notification its earlier
/// commands caused, so reading up to it collects exactly those.
struct Listener {
    sub: redis::PubSub<'static>,
    fences: u64,
}

impl Listener {
    fn new(url: &str) -> Listener {
        let client = redis::Client::open(url).unwrap();
        // Leaked so the PubSub can borrow it for the whole test.
        let con: &'static mut redis::Connection =
            Box::leak(Box::new(client.get_connection().unwrap()));
        let mut sub = con.as_pubsub();
        sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        sub.psubscribe("__key*@0__:*").unwrap();
        sub.subscribe("fence").unwrap();
        Listener { sub, fences: 0 }
    }

    /// `(channel, message)` of every notification up to the next fence.
    fn collect(&mut self, con: &mut redis::Connection) -> Vec<(String, String)> {
        self.fences += 1;
        let fence = self.fences.to_string();
        let _: i64 = redis::cmd("PUBLISH")
            .arg("fence")
            .arg(&fence)
            .query(con)
            .unwrap();
        let mut got = Vec::new();
        loop {
            let m = self.sub.get_message().expect("a message before the fence");
            let channel = m.get_channel_name().to_string();
            let payload: String = m.get_payload().unwrap();
            if channel == "fence" {
                assert_eq!(payload, fence);
                return got;
            }
            got.push((channel, payload));
        }
    }
}

fn run(con: &mut redis::Connection, args: &[&str]) -> redis::Value {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn set_flags(con: &mut redis::Connection, flags: &str) {
    run(con, &["CONFIG", "SET", "notify-keyspace-events", flags]);
}

/// Writes of every family relcache shares with Redis, each with an outcome that
/// does not depend on randomness, so the two servers' events must be identical.
const WRITES: &[&[&str]] = &[
    &["SET", "s", "1"],
    &["SET", "s", "2", "EX", "100"],
    &["SET", "s", "3", "KEEPTTL", "GET"],
    &["SETEX", "t", "100", "v"],
    &["SETNX", "s", "x"],
    &["SETNX", "u", "1"],
    &["GETSET", "u", "2"],
    &["MSET", "m1", "a", "m2", "b"],
    &["MSETNX", "m3", "c", "m4", "d"],
    &["MSETNX", "m3", "c", "m5", "d"],
    &["APPEND", "s", "x"],
    &["APPEND", "a1", "x"],
    &["SETRANGE", "s", "0", "y"],
    &["SETRANGE", "r", "2", "z"],
    &["SETRANGE", "nothing", "0", ""],
    &["INCR", "n"],
    &["INCRBY", "n", "5"],
    &["DECR", "n"],
    &["DECRBY", "n", "2"],
    &["INCRBYFLOAT", "f", "1.5"],
    &["GETEX", "s", "PERSIST"],
    &["GETEX", "s", "EX", "50"],
    &["GETEX", "s"],
    &["GETDEL", "u"],
    &["GETDEL", "u"],
    &["EXPIRE", "t", "200"],
    &["PEXPIRE", "t", "200000"],
    &["EXPIREAT", "t", "9999999999"],
    &["PERSIST", "t"],
    &["PERSIST", "t"],
    &["EXPIRE", "t", "0"],
    &["RENAME", "m1", "m9"],
    &["RENAMENX", "m2", "m9"],
    &["RENAMENX", "m2", "m8"],
    &["DEL", "m9", "m8", "nokey"],
    &["UNLINK", "m3"],
    &["SADD", "set", "1", "2", "3"],
    &["SADD", "set", "3"],
    &["SREM", "set", "1"],
    &["SREM", "set", "99"],
    &["SMOVE", "set", "set2", "2"],
    &["SMOVE", "set", "set2", "3"],
    &["SADD", "a", "1", "2"],
    &["SADD", "b", "2", "3"],
    &["SINTERSTORE", "c", "a", "b"],
    &["SUNIONSTORE", "c", "a", "b"],
    &["SDIFFSTORE", "c", "a", "a"],
    &["SDIFFSTORE", "c", "a", "a"],
    &["SPOP", "a", "5"],
    &["SPOP", "b"],
    &["SPOP", "b"],
    &["MULTI"],
    &["SET", "in-multi", "1"],
    &["DEL", "in-multi"],
    &["EXEC"],
    &[
        "EVAL",
        "redis.call('set', KEYS[1], 'v') return redis.call('del', KEYS[1])",
        "1",
        "scripted",
    ],
    &["FLUSHALL"],
];

fn events_of(url: &str, flags: &str, writes: &[&[&str]]) -> Vec<(String, String)> {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_connection().unwrap();
    set_flags(&mut con, flags);
    let mut listener = Listener::new(url);
    for w in writes {
        run(&mut con, w);
    }
    listener.collect(&mut con)
}

#[test]
fn every_write_family_publishes_what_redis_publishes() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let redis_url = format!("redis://127.0.0.1:{}/", r.port);
    for flags in ["KEA", "KEAn", "Kg", "E$", "Es", "Exn"] {
        let theirs = events_of(&redis_url, flags, WRITES);
        let ours = events_of(&s.url(), flags, WRITES);
        assert_eq!(ours, theirs, "flags {flags}");
        if flags == "KEAn" {
            for want in [
                "new",
                "set",
                "expire",
                "del",
                "rename_from",
                "sadd",
                "spop",
                "sunionstore",
            ] {
                assert!(
                    ours.iter()
                        .any(|(c, _)| c == &format!("__keyevent@0__:{want}")),
                    "{want} in {ours:?}"
                );
            }
        }
    }
    assert!(events_of(&s.url(), "", WRITES).is_empty(), "off by default");
}

/// The next `n` frames on a raw connection, as bytes.
fn frames(s: &mut std::net::TcpStream, buf: &mut Vec<u8>, n: usize) -> String {
    use std::io::Read;
    let mut out = Vec::new();
    for _ in 0..n {
        loop {
            let limits = relcache_protocol::resp::Limits::default();
            if let Some((_, len)) = relcache_protocol::resp::parse_frame(buf, &limits).unwrap() {
                out.extend(buf.drain(..len));
                break;
            }
            let mut chunk = [0u8; 16 * 1024];
            let got = s.read(&mut chunk).expect("a frame");
            assert!(got > 0, "connection closed");
            buf.extend_from_slice(&chunk[..got]);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_resp3_subscriber_gets_pushes_and_k_e_choose_the_channels() {
    use std::io::Write;
    let s = TestServer::start();
    let mut con = s.conn();
    set_flags(&mut con, "K$");
    let mut sub = s.raw();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let send = |sub: &mut std::net::TcpStream, args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        sub.write_all(&harness::resp_cmd(&args)).unwrap();
    };
    send(&mut sub, &["HELLO", "3"]);
    frames(&mut sub, &mut buf, 1);
    send(
        &mut sub,
        &["SUBSCRIBE", "__keyspace@0__:k", "__keyevent@0__:set"],
    );
    frames(&mut sub, &mut buf, 2);

    run(&mut con, &["SET", "k", "v"]);
    send(&mut sub, &["PING"]);
    assert_eq!(
        frames(&mut sub, &mut buf, 2),
        ">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n+PONG\r\n",
        "K without E: the keyspace channel only"
    );
    set_flags(&mut con, "E$");
    run(&mut con, &["SET", "k", "v"]);
    send(&mut sub, &["PING"]);
    assert_eq!(
        frames(&mut sub, &mut buf, 2),
        ">3\r\n$7\r\nmessage\r\n$18\r\n__keyevent@0__:set\r\n$1\r\nk\r\n+PONG\r\n",
        "E without K: the keyevent channel only"
    );
    // A class not selected publishes nothing.
    run(&mut con, &["DEL", "k"]);
    send(&mut sub, &["PING"]);
    assert_eq!(frames(&mut sub, &mut buf, 1), "+PONG\r\n");
}

#[test]
fn idset_writes_publish_idset_events_in_the_set_class() {
    let s = TestServer::start();
    let mut con = s.conn();
    set_flags(&mut con, "KEsgn");
    let mut l = Listener::new(&s.url());
    run(
        &mut con,
        &["IDSET.LOAD", "f:1", "SEQ", "5", "IDS", "1", "2"],
    );
    run(&mut con, &["IDSET.ADD", "f:1", "XX", "SEQ", "6", "3"]);
    run(&mut con, &["IDSET.ADD", "f:1", "3"]);
    run(&mut con, &["IDSET.REM", "f:1", "SEQ", "7", "1"]);
    run(&mut con, &["IDSET.REM", "f:1", "99"]);
    run(&mut con, &["IDSET.ADD", "f:2", "1"]);
    run(&mut con, &["IDSET.ADD", "nope", "XX", "1"]);
    // A change older than the set (it arrived after change 7): the set can no
    // longer be trusted and is dropped.
    run(&mut con, &["IDSET.ADD", "f:1", "XX", "SEQ", "6", "4"]);
    run(&mut con, &["IDSET.LOAD", "f:3", "EX", "100", "IDS", "1"]);
    let got: Vec<String> = l
        .collect(&mut con)
        .into_iter()
        .filter(|(c, _)| c.starts_with("__keyevent@0__:"))
        .map(|(c, key)| format!("{} {key}", &c["__keyevent@0__:".len()..]))
        .collect();
    assert_eq!(
        got,
        [
            "new f:1",
            "idset.load f:1",
            "idset.add f:1",
            "idset.rem f:1",
            "new f:2",
            "idset.add f:2",
            "idset.drop f:1",
            "new f:3",
            "idset.load f:3",
            "expire f:3",
        ]
    );
    run(&mut con, &["IDSET.ADD", "f:2", "7"]);
    set_flags(&mut con, "KE$");
    run(&mut con, &["IDSET.ADD", "f:2", "8"]);
    let got = l.collect(&mut con);
    assert_eq!(got.len(), 2, "only the add made while s was on: {got:?}");
}

/// A key that expired is reported `expired` when a write finds it, before that
/// write's own events, and when the background sweep removes it.
#[test]
fn expired_keys_are_published_from_writes_and_from_the_sweep() {
    let s = TestServer::start();
    let mut con = s.conn();
    set_flags(&mut con, "Exn$");
    let mut l = Listener::new(&s.url());
    run(&mut con, &["SET", "lazy", "1", "PX", "1"]);
    // Read only after it has surely expired; the sweep may get there first.
    std::thread::sleep(Duration::from_millis(5));
    run(&mut con, &["SET", "lazy", "2"]);
    let got = l.collect(&mut con);
    let names: Vec<&str> = got
        .iter()
        .map(|(c, _)| &c["__keyevent@0__:".len()..])
        .collect();
    assert_eq!(names, ["new", "set", "expired", "new", "set"], "{got:?}");
    assert!(got.iter().all(|(_, k)| k == "lazy"));

    // Nobody touches these again: only the background sweep can report them.
    for i in 0..20 {
        run(&mut con, &["SET", &format!("swept:{i}"), "v", "PX", "50"]);
    }
    let mut expired = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while expired.len() < 20 {
        assert!(Instant::now() < deadline, "swept so far: {expired:?}");
        for (c, k) in l.collect(&mut con) {
            if c == "__keyevent@0__:expired" {
                expired.insert(k);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        expired.iter().all(|k| k.starts_with("swept:")),
        "{expired:?}"
    );
}

#[test]
fn evicted_keys_are_published_under_maxmemory() {
    let s = TestServer::start_with(&[
        "--maxmemory",
        "20mb",
        "--maxmemory-policy",
        "allkeys-random",
    ]);
    let mut con = s.conn();
    set_flags(&mut con, "Ee");
    let mut l = Listener::new(&s.url());
    let value = "x".repeat(100_000);
    for i in 0..400 {
        run(&mut con, &["SET", &format!("big:{i}"), &value]);
    }
    let evicted: Vec<String> = l
        .collect(&mut con)
        .into_iter()
        .map(|(c, k)| {
            assert_eq!(c, "__keyevent@0__:evicted");
            k
        })
        .collect();
    assert!(!evicted.is_empty(), "40 MB written under a 20 MB limit");
    let n: i64 = harness::info_stat(&mut con, "stats", "evicted_keys");
    assert_eq!(evicted.len() as i64, n, "one event per evicted key");
    let gone: i64 = redis::cmd("EXISTS").arg(&evicted).query(&mut con).unwrap();
    assert_eq!(gone, 0, "each reported key is gone");
}

#[test]
fn the_parameter_reads_back_as_redis_prints_it() {
    let s = TestServer::start_with(&["--notify-keyspace-events", "Kx"]);
    let r = RedisServer::start();
    let mut ours = s.conn();
    let mut theirs = redis::Client::open(format!("redis://127.0.0.1:{}/", r.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(
        config_get(&mut ours, "notify-keyspace-events"),
        "xK",
        "from the command line"
    );
    let dir = harness::TempDir::new("notify-conf");
    let conf = format!("{}/redis.conf", dir.path());
    std::fs::write(&conf, "notify-keyspace-events s$gE\n").unwrap();
    let from_file = TestServer::start_with(&["--", &conf]);
    assert_eq!(
        config_get(&mut from_file.conn(), "notify-keyspace-events"),
        "g$sE",
        "from a config file"
    );
    for flags in [
        "KEA",
        "Ex",
        "AKEm",
        "gs$",
        "nd",
        "Kgg",
        "",
        "KA",
        "lhzt",
        "Ag$lshzxeKEtmdn",
        "xyz",
        "K E",
    ] {
        let set = |con: &mut redis::Connection| -> String {
            match redis::cmd("CONFIG")
                .arg("SET")
                .arg("notify-keyspace-events")
                .arg(flags)
                .query::<String>(con)
            {
                Ok(ok) => ok,
                Err(e) => e.to_string(),
            }
        };
        assert_eq!(set(&mut ours), set(&mut theirs), "CONFIG SET {flags:?}");
        assert_eq!(
            config_get(&mut ours, "notify-keyspace-events"),
            config_get(&mut theirs, "notify-keyspace-events"),
            "CONFIG GET after {flags:?}"
        );
    }
}
