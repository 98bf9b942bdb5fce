//! DUMP, RESTORE, RESTORE-ASKING and MIGRATE (`server/src/cmd/migrate.rs`): values
//! round-trip with their TTLs; a damaged payload changes nothing; errors are a
//! real redis-server's byte for byte; MIGRATE moves keys between two relcache
//! servers (one key, KEYS, COPY, REPLACE, AUTH), reports a target that is down
//! or refuses, and moves a string into a real redis-server.

mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harness::real_redis::RedisServer;
use harness::{resp_cmd, TestServer};
use relcache_protocol::dump::{crc64, encode_string, FOOTER_LEN};
use relcache_protocol::idset::Builder;
use relcache_protocol::resp::{parse_frame, Frame, Limits};

/// A connection that sends binary arguments and returns each reply's exact bytes.
struct Wire {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Wire {
    fn new(port: u16) -> Wire {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Wire { s, buf: Vec::new() }
    }

    fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.s.write_all(&resp_cmd(args)).unwrap();
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            if let Some((_, n)) = parse_frame(&self.buf, &Limits::default()).unwrap() {
                return self.buf.drain(..n).collect();
            }
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(args[0]));
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn text(&mut self, args: &[&[u8]]) -> String {
        String::from_utf8_lossy(&self.call(args)).into_owned()
    }

    /// A bulk reply's bytes (`None` for nil).
    fn bulk(&mut self, args: &[&[u8]]) -> Option<Vec<u8>> {
        match parse_frame(&self.call(args), &Limits::default())
            .unwrap()
            .unwrap()
            .0
        {
            Frame::Bulk(b) => Some(b.to_vec()),
            Frame::Null => None,
            other => panic!("{other:?}"),
        }
    }

    fn int(&mut self, args: &[&[u8]]) -> i64 {
        match parse_frame(&self.call(args), &Limits::default())
            .unwrap()
            .unwrap()
            .0
        {
            Frame::Integer(n) => n,
            other => panic!("{other:?}"),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `payload` with its CRC made right again.
fn recrc(mut p: Vec<u8>) -> Vec<u8> {
    let at = p.len() - 8;
    let crc = crc64(&p[..at]);
    p[at..].copy_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn values_round_trip_with_their_ttls() {
    let s = TestServer::start();
    let mut c = Wire::new(s.port);
    let big_string = vec![b'x'; 300_000];
    c.call(&[b"SET", b"s", b"hello"]);
    c.call(&[b"SET", b"big", &big_string]);
    c.call(&[
        b"IDSET.LOAD",
        b"set",
        b"SEQ",
        b"7",
        b"IDS",
        b"1",
        b"2",
        b"3",
    ]);
    let ids: Vec<u64> = (0..400_000u64).map(|i| i * 7919 + 3).collect();
    let table = Builder::new().build(&ids);
    c.call(&[b"SET", b"bigset", &table]);
    for key in [&b"s"[..], b"big", b"set", b"bigset"] {
        let p = c.bulk(&[b"DUMP", key]).expect("dumped");
        let copy = [key, b"-copy"].concat();
        assert_eq!(c.text(&[b"RESTORE", &copy, b"0", &p]), "+OK\r\n");
        assert_eq!(c.bulk(&[b"DUMP", &copy]).as_ref(), Some(&p), "same value");
        assert_eq!(c.text(&[b"TYPE", &copy]), c.text(&[b"TYPE", key]));
        assert_eq!(c.int(&[b"PTTL", &copy]), -1);
    }
    assert_eq!(c.int(&[b"SCARD", b"bigset-copy"]), ids.len() as i64);
    assert_eq!(c.int(&[b"SISMEMBER", b"bigset-copy", b"7922"]), 1);
    assert_eq!(c.bulk(&[b"GET", b"big-copy"]), Some(big_string));
    // The sequence number moves with the set: change 7 is the one it is as of.
    assert_eq!(
        c.int(&[b"IDSET.ADD", b"set-copy", b"XX", b"SEQ", b"7", b"2"]),
        0
    );
    assert_eq!(c.bulk(&[b"DUMP", b"nosuch"]), None);

    // TTLs: relative, absolute, already past.
    let p = c.bulk(&[b"DUMP", b"s"]).unwrap();
    assert_eq!(c.text(&[b"RESTORE", b"t", b"5000", &p]), "+OK\r\n");
    let pttl = c.int(&[b"PTTL", b"t"]);
    assert!((4000..=5000).contains(&pttl), "{pttl}");
    let at = (now_ms() + 20_000).to_string();
    assert_eq!(
        c.text(&[b"RESTORE", b"t", at.as_bytes(), &p, b"REPLACE", b"ABSTTL"]),
        "+OK\r\n"
    );
    let pttl = c.int(&[b"PTTL", b"t"]);
    assert!((15_000..=20_000).contains(&pttl), "{pttl}");
    // A TTL already past: OK, nothing created, and a replaced key is deleted.
    assert_eq!(
        c.text(&[b"RESTORE", b"gone", b"1", &p, b"ABSTTL"]),
        "+OK\r\n"
    );
    assert_eq!(c.int(&[b"EXISTS", b"gone"]), 0);
    assert_eq!(
        c.text(&[b"RESTORE", b"t", b"1", &p, b"ABSTTL", b"REPLACE"]),
        "+OK\r\n"
    );
    assert_eq!(c.int(&[b"EXISTS", b"t"]), 0);

    // BUSYKEY, then REPLACE over a key of another type.
    let sp = c.bulk(&[b"DUMP", b"set"]).unwrap();
    assert_eq!(
        c.text(&[b"RESTORE", b"s", b"0", &sp]),
        "-BUSYKEY Target key name already exists.\r\n"
    );
    assert_eq!(
        c.text(&[b"RESTORE", b"s", b"0", &sp, b"REPLACE"]),
        "+OK\r\n"
    );
    assert_eq!(c.text(&[b"TYPE", b"s"]), "+set\r\n");

    // IDLETIME sets the recency.
    assert_eq!(
        c.text(&[b"RESTORE", b"idle", b"0", &p, b"IDLETIME", b"1000"]),
        "+OK\r\n"
    );
    assert!(c.int(&[b"OBJECT", b"IDLETIME", b"idle"]) >= 1000);
}

#[test]
fn a_damaged_payload_changes_nothing() {
    let s = TestServer::start();
    let mut c = Wire::new(s.port);
    let table = Builder::new().build(&(1..=1000).collect::<Vec<u64>>());
    c.call(&[b"SET", b"k", &table]);
    let good = c.bulk(&[b"DUMP", b"k"]).unwrap();
    let before = good.clone();

    let mut flipped = good.clone();
    flipped[40] ^= 1;
    // A slot made a tombstone with the CRC fixed up: the table's structure check
    // (which is what a payload gets by default) refuses it.
    let mut slot = good.clone();
    let n = slot.len();
    slot[n - FOOTER_LEN - 8..n - FOOTER_LEN].fill(0xff);
    let slot = recrc(slot);
    // An id changed instead: the structure holds, the placement does not, which
    // `idset-table-check full` proves for every id.
    let last_id = (1..)
        .map(|k| n - FOOTER_LEN - 8 * k)
        .find(|&at| good[at..at + 8] != [0; 8])
        .unwrap();
    let mut moved = good.clone();
    moved[last_id] ^= 0x55;
    let moved = recrc(moved);
    let mut newer = good.clone();
    newer[n - FOOTER_LEN] = 13;
    let newer = recrc(newer);
    for (bad, why) in [
        (&flipped, "ERR DUMP payload version or checksum are wrong"),
        (&newer, "ERR DUMP payload version or checksum are wrong"),
        (&slot, "ERR Bad data format"),
        (
            &good[..5].to_vec(),
            "ERR DUMP payload version or checksum are wrong",
        ),
    ] {
        for key in [&b"k"[..], b"new"] {
            assert_eq!(
                c.text(&[b"RESTORE", key, b"0", bad, b"REPLACE"]),
                format!("-{why}\r\n")
            );
        }
    }
    assert_eq!(
        c.text(&[b"CONFIG", b"SET", b"idset-table-check", b"full"]),
        "+OK\r\n"
    );
    assert_eq!(
        c.text(&[b"RESTORE", b"new", b"0", &moved]),
        "-ERR Bad data format\r\n"
    );
    assert_eq!(c.bulk(&[b"DUMP", b"k"]), Some(before));
    assert_eq!(c.int(&[b"EXISTS", b"new"]), 0);
    // A string that starts like a table but is not one is refused too.
    let fake = encode_string(&table[..40]);
    assert_eq!(
        c.text(&[b"RESTORE", b"new", b"0", &fake]),
        "-ERR Bad data format\r\n"
    );
}

/// The same requests to relcache and to redis-server answer the same bytes. The
/// payloads are relcache's, which Redis takes (strings) or refuses as relcache
/// refuses a damaged one.
#[test]
fn errors_are_redis_s() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port().to_string();
    drop(dead);
    let p = encode_string(b"hello");
    let bad_crc = [&p[..p.len() - 1], b"x"].concat();
    // Redis reads a string's bytes on into the footer, so the bad body is a type
    // neither knows (relcache is stricter: a length past the value is refused).
    let bad_body = recrc([&[99u8, 1, b'a'][..], &p[p.len() - FOOTER_LEN..]].concat());
    let future = (now_ms() + 100_000).to_string();
    let d = dead_port.as_bytes();
    let requests: &[&[&[u8]]] = &[
        &[b"SET", b"k", b"v"],
        &[b"RESTORE", b"k", b"0", &p],
        &[b"RESTORE", b"k", b"-1", &p],
        &[b"RESTORE", b"n", b"-1", &p],
        &[b"RESTORE", b"n", b"x", &p],
        &[b"RESTORE", b"n", b"0", &p, b"FOO"],
        &[b"RESTORE", b"n", b"0", &p, b"IDLETIME"],
        &[b"RESTORE", b"n", b"0", &p, b"IDLETIME", b"-1"],
        &[b"RESTORE", b"n", b"0", &p, b"IDLETIME", b"x"],
        &[b"RESTORE", b"n", b"0", &p, b"FREQ", b"256"],
        &[b"RESTORE", b"n", b"0", &p, b"FREQ", b"1", b"IDLETIME", b"1"],
        &[b"RESTORE", b"n", b"0", &bad_crc],
        &[b"RESTORE", b"n", b"0", b"short"],
        &[b"RESTORE", b"n", b"0", &bad_body],
        &[b"EXISTS", b"n"],
        &[b"RESTORE", b"n", b"0", &p, b"FREQ", b"5"],
        &[b"GET", b"n"],
        &[
            b"RESTORE",
            b"n",
            future.as_bytes(),
            &p,
            b"ABSTTL",
            b"REPLACE",
        ],
        &[b"RESTORE", b"n", b"1", &p, b"ABSTTL", b"REPLACE"],
        &[b"EXISTS", b"n"],
        &[b"RESTORE-ASKING", b"n", b"0", &p],
        &[b"RESTORE-ASKING", b"n", b"0", &p],
        &[b"DUMP", b"nosuch"],
        &[b"DUMP"],
        &[b"RESTORE", b"n", b"0"],
        &[b"MIGRATE", b"127.0.0.1", d, b"k", b"0"],
        &[b"MIGRATE", b"127.0.0.1", d, b"nosuch", b"0", b"100"],
        &[
            b"MIGRATE",
            b"127.0.0.1",
            d,
            b"",
            b"0",
            b"100",
            b"KEYS",
            b"x",
            b"y",
        ],
        &[
            b"MIGRATE",
            b"127.0.0.1",
            d,
            b"k",
            b"0",
            b"100",
            b"KEYS",
            b"k",
        ],
        &[b"MIGRATE", b"127.0.0.1", d, b"k", b"0", b"100", b"AUTH"],
        &[
            b"MIGRATE",
            b"127.0.0.1",
            d,
            b"k",
            b"0",
            b"100",
            b"AUTH2",
            b"u",
        ],
        &[b"MIGRATE", b"127.0.0.1", d, b"k", b"0", b"100", b"NOPE"],
        &[b"MIGRATE", b"127.0.0.1", d, b"k", b"x", b"100"],
        &[b"MIGRATE", b"127.0.0.1", d, b"k", b"0", b"x"],
        &[b"MIGRATE", b"127.0.0.1", d, b"k", b"0", b"100"],
        &[
            b"MIGRATE",
            b"127.0.0.1",
            d,
            b"k",
            b"0",
            b"100",
            b"COPY",
            b"REPLACE",
        ],
        &[b"EXISTS", b"k"],
    ];
    let (mut ours, mut theirs) = (Wire::new(s.port), Wire::new(r.port));
    for req in requests {
        let want = theirs.text(req);
        let got = ours.text(req);
        let shown: Vec<_> = req.iter().map(|a| String::from_utf8_lossy(a)).collect();
        assert_eq!(got, want, "answer to {shown:?}");
    }
}

/// What COMMAND INFO and COMMAND DOCS say of these commands is what a real
/// redis-server says (sets compared in any order; relcache leaves out `since`,
/// `history` and `doc_flags`, and its summaries are 7.4's).
#[test]
fn command_metadata_is_redis_s() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let (mut ours, mut theirs) = (Wire::new(s.port), Wire::new(r.port));
    fn canonical(f: Frame) -> Frame {
        match f {
            Frame::Array(v) | Frame::Set(v) => {
                let mut v: Vec<Frame> = v.into_iter().map(canonical).collect();
                v.sort_by_key(|f| format!("{f:?}"));
                Frame::Array(v)
            }
            Frame::Map(kv) => {
                let mut kv: Vec<(Frame, Frame)> = kv
                    .into_iter()
                    .filter(|(k, _)| {
                        !matches!(k, Frame::Bulk(k) if [&b"since"[..], b"history", b"doc_flags", b"summary"].contains(&&k[..]))
                    })
                    .map(|(k, v)| (k, canonical(v)))
                    .collect();
                kv.sort_by_key(|(k, _)| format!("{k:?}"));
                Frame::Map(kv)
            }
            Frame::Simple(b) => Frame::Bulk(b),
            other => other,
        }
    }
    let frame = |w: &mut Wire, args: &[&[u8]]| {
        canonical(
            parse_frame(&w.call(args), &Limits::default())
                .unwrap()
                .unwrap()
                .0,
        )
    };
    for c in [&mut ours, &mut theirs] {
        c.call(&[b"HELLO", b"3"]);
    }
    for name in [&b"dump"[..], b"restore", b"restore-asking", b"migrate"] {
        for sub in [&b"INFO"[..], b"DOCS"] {
            let want = frame(&mut theirs, &[b"COMMAND", sub, name]);
            let got = frame(&mut ours, &[b"COMMAND", sub, name]);
            assert_eq!(
                got,
                want,
                "COMMAND {sub:?} {}",
                String::from_utf8_lossy(name)
            );
        }
    }
    let getkeys: &[&[&[u8]]] = &[
        &[b"MIGRATE", b"h", b"1", b"k", b"0", b"5"],
        &[
            b"MIGRATE", b"h", b"1", b"", b"0", b"5", b"AUTH", b"KEYS", b"KEYS", b"a", b"b",
        ],
        &[b"RESTORE", b"k", b"0", b"p"],
    ];
    for req in getkeys {
        let mut args: Vec<&[u8]> = vec![b"COMMAND", b"GETKEYS"];
        args.extend_from_slice(req);
        assert_eq!(ours.text(&args), theirs.text(&args));
    }
}

/// Two relcache servers, one pair of connections.
struct Pair {
    src: TestServer,
    dst: TestServer,
    a: Wire,
    b: Wire,
}

impl Pair {
    fn start(dst_args: &[&str]) -> Pair {
        let src = TestServer::start();
        let dst = TestServer::start_with(dst_args);
        let (a, b) = (Wire::new(src.port), Wire::new(dst.port));
        Pair { src, dst, a, b }
    }

    fn port(&self) -> String {
        self.dst.port.to_string()
    }
}

#[test]
fn migrate_moves_keys_between_relcache_servers() {
    let mut p = Pair::start(&[]);
    let port = p.port();
    let port = port.as_bytes();
    let table = Builder::new().build(&(0..200_000u64).collect::<Vec<u64>>());
    p.a.call(&[b"SET", b"big", &table]);
    p.a.call(&[b"SET", b"s", b"v", b"PX", b"60000"]);
    p.a.call(&[b"SET", b"x", b"1"]);
    p.a.call(&[b"SET", b"y", b"2"]);

    // One key, with its TTL; gone from the source.
    let m = |a: &mut Wire, rest: &[&[u8]]| {
        let mut args: Vec<&[u8]> = vec![b"MIGRATE", b"127.0.0.1", port];
        args.extend_from_slice(rest);
        a.text(&args)
    };
    assert_eq!(m(&mut p.a, &[b"s", b"0", b"5000"]), "+OK\r\n");
    assert_eq!(p.a.int(&[b"EXISTS", b"s"]), 0);
    assert_eq!(p.b.bulk(&[b"GET", b"s"]), Some(b"v".to_vec()));
    let pttl = p.b.int(&[b"PTTL", b"s"]);
    assert!((50_000..=60_000).contains(&pttl), "{pttl}");

    // KEYS, with a missing key among them; the big set moves whole.
    assert_eq!(
        m(
            &mut p.a,
            &[b"", b"0", b"5000", b"KEYS", b"big", b"x", b"missing"]
        ),
        "+OK\r\n"
    );
    assert_eq!(p.a.int(&[b"EXISTS", b"big", b"x"]), 0);
    assert_eq!(p.b.bulk(&[b"IDSET.TABLE", b"big"]), Some(table.clone()));
    assert_eq!(
        m(&mut p.a, &[b"", b"0", b"5000", b"KEYS", b"missing"]),
        "+NOKEY\r\n"
    );

    // COPY keeps the source; the target has the key now, so without REPLACE the
    // next one is refused and the source keeps its key.
    assert_eq!(m(&mut p.a, &[b"y", b"0", b"5000", b"COPY"]), "+OK\r\n");
    assert_eq!(p.a.int(&[b"EXISTS", b"y"]), 1);
    assert_eq!(
        m(&mut p.a, &[b"y", b"0", b"5000"]),
        "-ERR Target instance replied with error: BUSYKEY Target key name already exists.\r\n"
    );
    assert_eq!(p.a.int(&[b"EXISTS", b"y"]), 1);
    p.a.call(&[b"SET", b"y", b"3"]);
    assert_eq!(m(&mut p.a, &[b"y", b"0", b"5000", b"REPLACE"]), "+OK\r\n");
    assert_eq!(p.a.int(&[b"EXISTS", b"y"]), 0);
    assert_eq!(p.b.bulk(&[b"GET", b"y"]), Some(b"3".to_vec()));

    // The target goes away: IOERR, and the source keeps its key.
    p.a.call(&[b"SET", b"z", b"4"]);
    p.dst.terminate();
    let reply = m(&mut p.a, &[b"z", b"0", b"1000"]);
    assert!(reply.starts_with("-IOERR error or timeout"), "{reply}");
    assert_eq!(p.a.int(&[b"EXISTS", b"z"]), 1);
    drop(p.src);
}

#[test]
fn migrate_authenticates_to_a_target_with_a_password() {
    let mut p = Pair::start(&["--requirepass", "s3cret"]);
    let port = p.port();
    let port = port.as_bytes();
    p.a.call(&[b"SET", b"k", b"v"]);
    let mig = |extra: &[&[u8]]| {
        let mut args: Vec<&[u8]> = vec![b"MIGRATE", b"127.0.0.1", port, b"k", b"0", b"5000"];
        args.extend_from_slice(extra);
        args.into_iter().map(|a| a.to_vec()).collect::<Vec<_>>()
    };
    let run = |a: &mut Wire, args: Vec<Vec<u8>>| {
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        a.text(&args)
    };
    let reply = run(&mut p.a, mig(&[]));
    assert!(
        reply.starts_with("-ERR Target instance replied with error: NOAUTH"),
        "{reply}"
    );
    let reply = run(&mut p.a, mig(&[b"AUTH", b"wrong"]));
    assert!(
        reply.starts_with("-ERR Target instance replied with error: WRONGPASS"),
        "{reply}"
    );
    assert_eq!(p.a.int(&[b"EXISTS", b"k"]), 1);
    assert_eq!(
        run(&mut p.a, mig(&[b"AUTH2", b"default", b"s3cret"])),
        "+OK\r\n"
    );
    assert_eq!(p.a.int(&[b"EXISTS", b"k"]), 0);
    p.b.call(&[b"AUTH", b"s3cret"]);
    assert_eq!(p.b.bulk(&[b"GET", b"k"]), Some(b"v".to_vec()));
}

/// A relcache string payload is a Redis payload: MIGRATE moves a string into a
/// real redis-server, TTL included, and a set is refused there as Redis refuses
/// what it cannot read.
#[test]
fn migrate_moves_a_string_into_redis() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let mut c = Wire::new(s.port);
    let mut redis = Wire::new(r.port);
    let port = r.port.to_string();
    let long = vec![b'q'; 100_000];
    c.call(&[b"SET", b"s", &long, b"EX", b"100"]);
    c.call(&[b"SADD", b"set", b"1", b"2"]);
    assert_eq!(
        c.text(&[
            b"MIGRATE",
            b"127.0.0.1",
            port.as_bytes(),
            b"s",
            b"0",
            b"5000"
        ]),
        "+OK\r\n"
    );
    assert_eq!(redis.bulk(&[b"GET", b"s"]), Some(long));
    let ttl = redis.int(&[b"TTL", b"s"]);
    assert!((90..=100).contains(&ttl), "{ttl}");
    assert_eq!(
        c.text(&[
            b"MIGRATE",
            b"127.0.0.1",
            port.as_bytes(),
            b"set",
            b"0",
            b"5000"
        ]),
        "-ERR Target instance replied with error: ERR Bad data format\r\n"
    );
    assert_eq!(c.int(&[b"EXISTS", b"set"]), 1);
    // And back: Redis's own payload of a long string (LZF) restores here.
    redis.call(&[b"SET", b"r", &vec![b'z'; 5000]]);
    let theirs = redis.bulk(&[b"DUMP", b"r"]).unwrap();
    assert_eq!(c.text(&[b"RESTORE", b"r", b"0", &theirs]), "+OK\r\n");
    assert_eq!(c.bulk(&[b"GET", b"r"]), Some(vec![b'z'; 5000]));
}

/// A target played by the test: takes MIGRATE's connection and reads until
/// `until` has arrived. The socket, and what came.
fn target_reads(listener: &std::net::TcpListener, until: &str) -> (TcpStream, String) {
    let (mut target, _) = listener.accept().unwrap();
    target
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(until) {
        let n = target.read(&mut chunk).unwrap();
        assert!(n > 0, "MIGRATE closed before sending {until:?}");
        got.extend_from_slice(&chunk[..n]);
    }
    (target, String::from_utf8_lossy(&got).into_owned())
}

/// `MIGRATE 127.0.0.1 <target> <rest…>` on a connection of its own, in a thread
/// (it waits on the test's target): its reply, and how long it took.
fn migrate_in_thread(
    server: &TestServer,
    target: &std::net::TcpListener,
    rest: &[&[u8]],
) -> std::thread::JoinHandle<(String, Duration)> {
    let port = target.local_addr().unwrap().port().to_string();
    let mut args: Vec<Vec<u8>> = vec![b"MIGRATE".to_vec(), b"127.0.0.1".to_vec(), port.into()];
    args.extend(rest.iter().map(|a| a.to_vec()));
    let mut m = Wire::new(server.port);
    std::thread::spawn(move || {
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let started = std::time::Instant::now();
        let reply = m.text(&args);
        (reply, started.elapsed())
    })
}

/// A MIGRATE waiting on a target that never answers holds only its keys' shard
/// (as Redis holds everything): other keys are answered meanwhile, a read of the
/// migrating key waits for the MIGRATE, which ends with IOERR at its timeout,
/// keeping the key.
#[test]
fn a_slow_target_stalls_only_the_migrating_keys() {
    let s = TestServer::start();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = Wire::new(s.port);
    c.call(&[b"SET", b"k", b"v"]);
    let migrating = migrate_in_thread(&s, &silent, &[b"k", b"0", b"1500"]);
    // The RESTORE has arrived: the MIGRATE now waits for its reply.
    let _target = target_reads(&silent, "RESTORE");
    let reader = {
        let mut r = Wire::new(s.port);
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            (r.bulk(&[b"GET", b"k"]), t.elapsed())
        })
    };
    for _ in 0..20 {
        let t = std::time::Instant::now();
        assert_eq!(c.text(&[b"SET", b"other", b"1"]), "+OK\r\n");
        assert_eq!(c.text(&[b"PING"]), "+PONG\r\n");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }
    let (reply, took) = migrating.join().unwrap();
    assert_eq!(
        reply,
        "-IOERR error or timeout reading to target instance\r\n"
    );
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    let (read, waited) = reader.join().unwrap();
    assert_eq!(
        read,
        Some(b"v".to_vec()),
        "the key stays after a failed MIGRATE"
    );
    assert!(
        waited >= Duration::from_millis(1000),
        "the read waited for MIGRATE: {waited:?}"
    );
}

/// A write to a key while its MIGRATE waits for the target waits for the
/// MIGRATE: it lands after the key is gone from here, never between the send and
/// the delete (where it would be deleted unseen, or, kept, leave the key on both
/// nodes). The target is played by the test, which also sees what MIGRATE sends:
/// SELECT, then RESTORE with the TTL left.
#[test]
fn a_write_during_its_migrate_waits_for_it() {
    let s = TestServer::start();
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = Wire::new(s.port);
    c.call(&[b"SET", b"k", b"old", b"EX", b"100"]);
    c.call(&[b"SET", b"j", b"1"]);
    let migrating = migrate_in_thread(&s, &fake, &[b"", b"0", b"5000", b"KEYS", b"k", b"j"]);
    // Both RESTOREs are in once the second key's name has arrived with its TTL.
    let (mut target, sent) = target_reads(&fake, "$1\r\nj\r\n$1\r\n0\r\n");
    assert!(sent.starts_with("*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*4\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n"));
    let ttl: u64 = sent.split("\r\n").nth(11).unwrap().parse().unwrap();
    assert!((90_000..=100_000).contains(&ttl), "{ttl}");
    let writer = {
        let mut w = Wire::new(s.port);
        std::thread::spawn(move || w.text(&[b"SET", b"k", b"new"]))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !writer.is_finished(),
        "the write waits for the MIGRATE of its key"
    );
    target.write_all(b"+OK\r\n+OK\r\n+OK\r\n").unwrap();
    assert_eq!(migrating.join().unwrap().0, "+OK\r\n");
    assert_eq!(writer.join().unwrap(), "+OK\r\n");
    assert_eq!(c.bulk(&[b"GET", b"k"]), Some(b"new".to_vec()));
    assert_eq!(
        c.int(&[b"TTL", b"k"]),
        -1,
        "a new key, not the migrated one"
    );
    assert_eq!(c.int(&[b"EXISTS", b"j"]), 0, "the other key moved");
}
