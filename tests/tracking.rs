//! Client-side caching (CLIENT TRACKING): the commands' replies and errors, and
//! the invalidation messages, byte for byte against a real redis-server — default
//! mode, own writes (after the reply), NOLOOP, OPTIN, BCAST prefixes, FLUSHALL,
//! RESP2 redirection to a `__redis__:invalidate` subscriber and a broken
//! redirect; then what only relcache has or can show: IDSET writes, expiry and
//! eviction invalidate; the tracking table stays under `tracking-table-max-keys`;
//! and, under concurrent writes on every core, no tracking client is left
//! holding a value the server no longer has.

mod harness;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::fenced::{same_answers, Conn};
use harness::real_redis::RedisServer;
use harness::{info_stat, resp_cmd, TestServer};
use relcache_protocol::resp::{parse_frame, Frame, Limits};

/// Tracking commands on one connection, replies compared one by one (no fence:
/// CLIENT CACHING's flag lasts until the next command that is not CLIENT, and
/// a PING would end it).
const COMMANDS: &[&[&str]] = &[
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "CACHING", "yes"],
    &["CLIENT", "CACHING", "maybe"],
    &["CLIENT", "TRACKING", "on", "PREFIX", "a"],
    &["CLIENT", "TRACKING", "on", "BCAST", "OPTIN"],
    &["CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"],
    &["CLIENT", "TRACKING", "on", "REDIRECT", "987654"],
    &["CLIENT", "TRACKING", "on", "REDIRECT", "abc"],
    &["CLIENT", "TRACKING", "on", "FOO"],
    &["CLIENT", "TRACKING", "on", "PREFIX"],
    &["CLIENT", "TRACKING", "maybe"],
    &["CLIENT", "TRACKING"],
    &[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a", "PREFIX", "ab",
    ],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "OPTIN"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "CACHING", "no"],
    &["CLIENT", "CACHING", "yes"],
    &["CLIENT", "TRACKINGINFO"],
    &["GET", "k"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "OPTOUT"],
    &["CLIENT", "TRACKING", "on", "BCAST"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "TRACKING", "off"],
    &["CLIENT", "TRACKING", "on", "OPTOUT", "NOLOOP"],
    &["CLIENT", "CACHING", "yes"],
    &["CLIENT", "CACHING", "no"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "off"],
    &[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "PREFIX", "item:", "NOLOOP",
    ],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:1"],
    &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "off"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "TRACKING", "off"],
];

#[test]
fn tracking_commands_answer_as_redis_does() {
    let s = TestServer::start();
    let r = RedisServer::start();
    for proto in ["2", "3"] {
        let (mut ours, mut theirs) = (Conn::new(s.port), Conn::new(r.port));
        for c in [&mut ours, &mut theirs] {
            c.call(&["HELLO", proto]);
        }
        same_answers(
            &mut ours,
            &mut theirs,
            COMMANDS,
            &format!("RESP{proto}"),
            Conn::reply,
        );
    }
}

/// Runs `session` against relcache (`ours`) and Redis (`theirs`) and asserts the
/// two logs agree step by step; returns relcache's.
fn same_as_redis(session: fn(u16) -> Vec<String>, ours: u16, theirs: u16) -> Vec<String> {
    let (got, want) = (session(ours), session(theirs));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    assert_eq!(got.len(), want.len());
    got
}

/// A tracking client and a writer on one server; what the tracker is sent is
/// returned as text, each step's bytes labelled, for comparison with Redis.
fn default_mode_session(port: u16) -> Vec<String> {
    let mut t = Conn::new(port);
    let mut w = Conn::new(port);
    let mut log = Vec::new();
    let mut step = |what: &str, text: String| log.push(format!("{what}: {text}"));
    t.call(&["HELLO", "3"]);
    w.text(&["MSET", "k2", "2", "k3", "3"]);
    step("on", t.text(&["CLIENT", "TRACKING", "on"]));
    step("get", t.text(&["GET", "k1"]));
    step("mget", t.text(&["MGET", "k2", "k3"]));
    w.text(&["SET", "k1", "v"]);
    step("after set", format!("{:?}", t.frame()));
    w.text(&["DEL", "k2", "k3"]);
    step("after del", format!("{:?} {:?}", t.frame(), t.frame()));
    // Its own write: the reply first, then the invalidation.
    step("get again", t.text(&["GET", "k1"]));
    step("own set", t.text(&["SET", "k1", "mine"]));
    // Re-reading tracks again; NOLOOP spares it news of its own writes.
    step("get", t.text(&["GET", "k1"]));
    step("noloop", t.text(&["CLIENT", "TRACKING", "on", "NOLOOP"]));
    step("own set, noloop", t.text(&["SET", "k1", "again"]));
    // Not read since: a write by another is nobody's news.
    w.text(&["SET", "k1", "other"]);
    step("untracked", t.text(&["PING"]));
    step("get", t.text(&["GET", "k1"]));
    // ON again without NOLOOP: the options are replaced, the table kept.
    step("loop again", t.text(&["CLIENT", "TRACKING", "on"]));
    // Inside MULTI a fence would be queued: these two are read one by one.
    t.call(&["MULTI"]);
    t.call(&["SET", "k1", "in-exec"]);
    step("exec", t.text(&["EXEC"]));
    step("get", t.text(&["GET", "k1"]));
    w.text(&["FLUSHALL"]);
    step("flush", format!("{:?}", t.frame()));
    // OPTIN: only a read after CLIENT CACHING yes is tracked.
    step("off", t.text(&["CLIENT", "TRACKING", "off"]));
    step("optin", t.text(&["CLIENT", "TRACKING", "on", "OPTIN"]));
    t.text(&["GET", "a"]);
    t.send(&["CLIENT", "CACHING", "yes"]);
    step("optin get", t.text(&["GET", "b"]));
    w.text(&["SET", "a", "1"]);
    w.text(&["SET", "b", "1"]);
    step("optin news", format!("{:?}", t.frame()));
    step("nothing more", t.text(&["PING"]));
    log
}

#[test]
fn default_mode_invalidations_match_redis_byte_for_byte() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let ours = same_as_redis(default_mode_session, s.port, r.port);
    assert!(
        ours.iter()
            .any(|l| l.starts_with("own set: +OK\r\n>2\r\n$10\r\ninvalidate")),
        "{ours:#?}"
    );
}

/// BCAST with prefixes, and RESP2 redirection to a subscriber, on one server.
fn bcast_and_redirect_session(port: u16) -> Vec<String> {
    let mut log = Vec::new();
    let mut b = Conn::new(port);
    let mut w = Conn::new(port);
    b.call(&["HELLO", "3"]);
    b.text(&[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "PREFIX", "item:",
    ]);
    w.text(&["SET", "user:1", "a"]);
    w.text(&["SET", "other", "b"]);
    w.text(&["SET", "item:9", "c"]);
    log.push(format!("bcast {:?} {:?}", b.frame(), b.frame()));
    log.push(format!("bcast then {}", b.text(&["PING"])));

    // RESP2: invalidations go to a connection subscribed to __redis__:invalidate.
    let mut sub = Conn::new(port);
    let sub_id = String::from_utf8_lossy(&sub.call(&["CLIENT", "ID"]))
        .trim_start_matches(':')
        .trim()
        .to_string();
    log.push(format!(
        "subscribe {}",
        sub.text(&["SUBSCRIBE", "__redis__:invalidate"])
    ));
    let mut t = Conn::new(port);
    let on = t.text(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id]);
    log.push(format!("redirect on {on}"));
    log.push(format!(
        "getredir is the subscriber {}",
        String::from_utf8_lossy(&t.call(&["CLIENT", "GETREDIR"])).trim() == format!(":{sub_id}")
    ));
    t.text(&["GET", "rk"]);
    w.text(&["SET", "rk", "1"]);
    log.push(format!("redirected {:?}", sub.frame()));
    log.push(format!("tracker hears nothing {}", t.text(&["PING"])));
    t.text(&["GET", "rk"]);
    w.text(&["FLUSHALL"]);
    log.push(format!("redirected flush {:?}", sub.frame()));
    // The subscriber goes: the tracker's redirect is broken.
    drop(sub);
    std::thread::sleep(Duration::from_millis(200));
    t.text(&["GET", "rk"]);
    w.text(&["SET", "rk", "2"]);
    let info = String::from_utf8_lossy(&t.call(&["CLIENT", "TRACKINGINFO"])).into_owned();
    log.push(format!("broken {}", info.contains("broken_redirect")));
    let me = String::from_utf8_lossy(&t.call(&["CLIENT", "INFO"])).into_owned();
    log.push(format!("flags {}", me.contains("flags=tR ")));
    // In RESP3 the tracker is told its redirect is broken.
    let mut t3 = Conn::new(port);
    let mut gone = Conn::new(port);
    let gone_id = String::from_utf8_lossy(&gone.call(&["CLIENT", "ID"]))
        .trim_start_matches(':')
        .trim()
        .to_string();
    t3.call(&["HELLO", "3"]);
    t3.text(&["CLIENT", "TRACKING", "on", "REDIRECT", &gone_id]);
    t3.text(&["GET", "gk"]);
    drop(gone);
    std::thread::sleep(Duration::from_millis(200));
    w.text(&["SET", "gk", "1"]);
    let broken = format!("{:?}", t3.frame());
    log.push(format!(
        "redir-broken push {}",
        broken.replace(&gone_id, "<id>")
    ));
    log
}

#[test]
fn bcast_and_redirect_match_redis() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let ours = same_as_redis(bcast_and_redirect_session, s.port, r.port);
    assert!(ours.iter().any(|l| l == "broken true"), "{ours:#?}");
}

/// A RESP3 connection that neither subscribes nor tracks is sent the
/// invalidations another client redirects to it while it sends nothing, also
/// after HELLO 3, RESET and HELLO 3 in one write have replaced its queue
/// between two waits.
fn resp3_redirect_target_session(port: u16) -> Vec<String> {
    let mut log = Vec::new();
    let mut target = Conn::new(port);
    target.set_timeout(Duration::from_secs(10));
    let id = String::from_utf8_lossy(&target.call(&["CLIENT", "ID"]))
        .trim_start_matches(':')
        .trim()
        .to_string();
    let mut w = Conn::new(port);
    let mut t = Conn::new(port);
    target.call(&["HELLO", "3"]);
    t.text(&["CLIENT", "TRACKING", "on", "REDIRECT", &id]);
    t.text(&["GET", "rk"]);
    w.text(&["SET", "rk", "1"]);
    log.push(format!("unasked {:?}", target.frame()));
    log.push(format!("then {}", target.text(&["PING", "p"])));
    let mut three = Vec::new();
    for args in [&["HELLO", "3"][..], &["RESET"], &["HELLO", "3"]] {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        three.extend(resp_cmd(&args));
    }
    target.s.write_all(&three).unwrap();
    // The replies: HELLO's map (with versions that differ), +RESET, the map.
    let replies: Vec<Frame> = (0..3).map(|_| target.frame()).collect();
    log.push(format!("reset between {:?}", replies[1]));
    t.text(&["GET", "rk"]);
    w.text(&["SET", "rk", "2"]);
    log.push(format!("new queue {:?}", target.frame()));
    log
}

#[test]
fn a_resp3_connection_is_sent_redirected_invalidations_unasked() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let ours = same_as_redis(resp3_redirect_target_session, s.port, r.port);
    assert!(ours[0].starts_with("unasked Push("), "{ours:#?}");
}

fn push_keys(f: &Frame) -> Vec<String> {
    match f {
        Frame::Push(items) if items.len() == 2 => match &items[1] {
            Frame::Array(keys) => keys
                .iter()
                .map(|k| match k {
                    Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("key {other:?}"),
                })
                .collect(),
            other => panic!("invalidation payload {other:?}"),
        },
        other => panic!("not an invalidation: {other:?}"),
    }
}

/// Everything relcache changes without a client naming a key the ordinary
/// way: IDSET writes, set commands, expiry (active, with nobody reading) and
/// eviction all reach the client that read the key.
#[test]
fn idset_writes_expiry_and_eviction_invalidate() {
    let s = TestServer::start_with(&["--maxmemory", "20mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut t = Conn::new(s.port);
    let mut w = Conn::new(s.port);
    t.call(&["HELLO", "3"]);
    t.text(&["CLIENT", "TRACKING", "on"]);
    w.text(&["IDSET.ADD", "u:1:following", "5", "6"]);
    w.text(&["SADD", "plain", "1"]);
    t.text(&["IDSET.EXISTS", "u:1:following", "5"]);
    t.text(&["SISMEMBER", "plain", "1"]);
    w.text(&["IDSET.ADD", "u:1:following", "7"]);
    assert_eq!(push_keys(&t.frame()), ["u:1:following"]);
    w.text(&["SREM", "plain", "1"]);
    assert_eq!(push_keys(&t.frame()), ["plain"]);

    w.text(&["SET", "short", "v", "PX", "300"]);
    let read = t.text(&["GET", "short"]);
    // On a loaded machine the key may already have expired when read: then the
    // read itself is followed by its invalidation.
    if !read.contains("invalidate") {
        t.set_timeout(Duration::from_secs(10));
        assert_eq!(push_keys(&t.frame()), ["short"], "active expiry");
    }

    t.text(&["GET", "cold"]);
    w.text(&["SET", "cold", "x"]);
    assert_eq!(push_keys(&t.frame()), ["cold"]);
    t.text(&["GET", "cold"]);
    // Fill past maxmemory: "cold" is the least recently used key, and goes.
    let value = "v".repeat(64 * 1024);
    let mut evicted = false;
    for i in 0..2000 {
        w.text(&["SET", &format!("fill:{i}"), &value]);
        if t.has_frame_within(Duration::from_millis(1)) {
            assert_eq!(push_keys(&t.frame()), ["cold"], "eviction");
            evicted = true;
            break;
        }
    }
    assert!(
        evicted,
        "filling 128 MB past a 20 MB maxmemory evicted the tracked key"
    );
    let mut con = s.conn();
    assert!(info_stat::<u64>(&mut con, "stats", "evicted_keys") > 0);
}

#[test]
fn the_tracking_table_stays_under_its_bound() {
    let s = TestServer::start();
    let mut con = s.conn();
    redis::cmd("CONFIG")
        .arg(&["SET", "tracking-table-max-keys", "10"])
        .query::<()>(&mut con)
        .unwrap();
    let mut t = Conn::new(s.port);
    t.call(&["HELLO", "3"]);
    t.text(&["CLIENT", "TRACKING", "on"]);
    for i in 0..50 {
        t.text(&["GET", &format!("key:{i}")]);
    }
    // The keys dropped from the table are invalidated: the client must not go
    // on trusting copies the server no longer watches for it.
    t.set_timeout(Duration::from_secs(10));
    let mut told = Vec::new();
    while told.len() < 40 {
        told.extend(push_keys(&t.frame()));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys: u64 = info_stat(&mut con, "stats", "tracking_total_keys");
        if keys <= 10 {
            break;
        }
        assert!(Instant::now() < deadline, "{keys} keys tracked, bound 10");
        std::thread::sleep(Duration::from_millis(50));
    }
    told.sort();
    told.dedup();
    assert!(told.len() >= 40, "{told:?}");
    assert_eq!(info_stat::<u64>(&mut con, "clients", "tracking_clients"), 1);
}

/// A client-side cache as a real client keeps one: RESP3 on one connection,
/// pushes applied as they come, values cached from replies.
struct CachingClient {
    s: TcpStream,
    buf: Vec<u8>,
    cache: HashMap<String, Option<String>>,
}

impl CachingClient {
    fn new(port: u16) -> CachingClient {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut c = CachingClient {
            s,
            buf: Vec::new(),
            cache: HashMap::new(),
        };
        c.call(&["HELLO", "3"]);
        c.call(&["CLIENT", "TRACKING", "on"]);
        c
    }

    /// Sends `args` and returns its reply, applying every invalidation that
    /// comes before it.
    fn call(&mut self, args: &[&str]) -> Frame {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.s.write_all(&resp_cmd(&args)).unwrap();
        loop {
            while let Some((frame, n)) = parse_frame(&self.buf, &Limits::default()).unwrap() {
                self.buf.drain(..n);
                match frame {
                    Frame::Push(items) if matches!(&items[0], Frame::Bulk(b) if &b[..] == b"invalidate") => {
                        match &items[1] {
                            Frame::Array(keys) => {
                                for k in keys {
                                    if let Frame::Bulk(k) = k {
                                        self.cache.remove(&*String::from_utf8_lossy(k));
                                    }
                                }
                            }
                            _ => self.cache.clear(),
                        }
                    }
                    reply => return reply,
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn get(&mut self, key: &str) -> Option<String> {
        if let Some(v) = self.cache.get(key) {
            return v.clone();
        }
        let v = match self.call(&["GET", key]) {
            Frame::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Frame::Null => None,
            other => panic!("GET answered {other:?}"),
        };
        self.cache.insert(key.to_string(), v.clone());
        v
    }
}

/// Readers and writers on every core: however a write and a read of the same
/// key interleave, once the writes are done and each reader has had one more
/// reply (so every invalidation sent before it has arrived), no reader's cache
/// holds a value the server no longer has. A read that registered its key only
/// after letting go of the key's lock would fail this.
#[test]
fn no_tracking_client_keeps_a_stale_value_under_concurrent_writes() {
    let s = TestServer::start();
    let port = s.port;
    let keys: Vec<String> = (0..8).map(|i| format!("hot:{i}")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (keys, stop) = (keys.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = CachingClient::new(port);
                let mut i = r;
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    c.get(&keys[i % keys.len()]);
                    i += 1;
                    reads += 1;
                    // Now and then a reply, so pushes are applied mid-run too.
                    if reads.is_multiple_of(50) {
                        c.call(&["PING"]);
                    }
                }
                c
            })
        })
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|wn| {
            let keys = keys.clone();
            std::thread::spawn(move || {
                let mut w = Conn::new(port);
                for n in 0..3000 {
                    let k = &keys[(n * 7 + wn) % keys.len()];
                    w.call(&["SET", k, &format!("{wn}-{n}")]);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let mut server = s.conn();
    let mut checked = 0;
    for r in readers {
        let mut c = r.join().unwrap();
        c.call(&["PING"]);
        for (k, cached) in c.cache.clone() {
            let now: Option<String> = redis::cmd("GET").arg(&k).query(&mut server).unwrap();
            assert_eq!(cached, now, "a reader kept a stale copy of {k}");
            checked += 1;
        }
    }
    assert!(checked > 0, "the readers cached something");
}

/// A read that finds its key expired but not yet removed must not leave the
/// reader trusting the nil it got: whatever invalidation that read causes
/// comes after its reply, so the next write is seen either way.
#[test]
fn a_read_of_an_expired_key_leaves_no_stale_nil() {
    let s = TestServer::start_with(&["--hz", "1"]);
    let mut w = Conn::new(s.port);
    let mut c = CachingClient::new(s.port);
    for round in 0..20 {
        let k = format!("lazy:{round}");
        w.call(&["SET", &k, "old", "PX", "20"]);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get(&k), None);
        w.call(&["SET", &k, "new"]);
        c.call(&["PING"]);
        assert_eq!(c.get(&k).as_deref(), Some("new"), "round {round}");
    }
}
