//! Pub/sub: SUBSCRIBE, PSUBSCRIBE, their UNSUBSCRIBEs, PUBLISH and PUBSUB, and
//! the sharded SSUBSCRIBE / SUNSUBSCRIBE / SPUBLISH / PUBSUB SHARD*, byte for
//! byte against a real redis-server in RESP2 and RESP3 (subscribed mode, its
//! errors, PING in it); the `redis` crate receiving messages; the registry as
//! CLIENT LIST / INFO / CLIENT KILL see it; and the `pubsub` output limit closing
//! a subscriber that stops reading while everyone else is served.

mod harness;

use std::io::Read;
use std::time::{Duration, Instant};

use harness::fenced::{same_answers, Conn};
use harness::real_redis::RedisServer;
use harness::{info_stat, TestServer};

/// Requests compared in both protocols, in order, on one connection. In RESP2
/// the subscribed mode refuses most of them; in RESP3 they run.
const SCRIPT: &[&[&str]] = &[
    &["UNSUBSCRIBE"],
    &["PUNSUBSCRIBE"],
    &["UNSUBSCRIBE", "nope"],
    &["PUBSUB", "NUMPAT"],
    &["PUBSUB", "NUMSUB"],
    &["PUBSUB", "NUMSUB", "a", "b"],
    &["PUBSUB", "CHANNELS"],
    &["PUBSUB", "CHANNELS", "a", "b"],
    &["PUBSUB", "ChanNels", "x", "y"],
    &["PUBSUB", "NUMPAT", "x"],
    &["PUBSUB", "FOO"],
    &["PUBSUB"],
    &["PUBLISH", "a"],
    &["PUBLISH", "a", "nobody"],
    &["SUBSCRIBE"],
    &["PSUBSCRIBE"],
    &["SUBSCRIBE", "a", "b", "a"],
    &["PUBSUB", "NUMSUB", "a", "b", "c"],
    // One pattern matches what the client publishes to itself: Redis delivers
    // to several in its dict's order, which varies from run to run.
    &["PSUBSCRIBE", "h?llo", "z*"],
    &["PUBLISH", "hello", "x"],
    &[
        "EVAL",
        "return redis.call('publish', 'hello', 'from a script')",
        "0",
    ],
    &["GET", "x"],
    &["CLIENT", "GETNAME"],
    &["DBSIZE"],
    &["PING"],
    &["PING", "hi"],
    &["PING", "a", "b"],
    &["ECHO", "e"],
    &["SUBSCRIBE", "c"],
    // One channel and one pattern left, so UNSUBSCRIBE and PUNSUBSCRIBE with no
    // arguments answer in an order that does not depend on Redis's dict.
    &["UNSUBSCRIBE", "b", "c", "nope"],
    &["PUNSUBSCRIBE", "z*"],
    &["PUNSUBSCRIBE"],
    &["UNSUBSCRIBE"],
    &["UNSUBSCRIBE"],
    &["GET", "x"],
    &["PING"],
    &["PSUBSCRIBE", "x*"],
    &["RESET"],
    &["PING"],
];

/// The sharded forms, compared like [`SCRIPT`]: confirmations count shard
/// channels apart from channels and patterns, a shard subscription alone puts a
/// RESP2 client in subscribed mode, and patterns never see shard channels.
const SHARD_SCRIPT: &[&[&str]] = &[
    &["SUNSUBSCRIBE"],
    &["SUNSUBSCRIBE", "nope"],
    &["SSUBSCRIBE"],
    &["SPUBLISH", "a"],
    &["SPUBLISH", "a", "nobody"],
    &["PUBSUB", "SHARDCHANNELS"],
    &["PUBSUB", "SHARDNUMSUB"],
    &["PUBSUB", "SHARDCHANNELS", "a", "b"],
    &["SSUBSCRIBE", "a", "b", "a"],
    &["GET", "x"],
    &["SPUBLISH", "a", "to myself"],
    &["PUBSUB", "SHARDNUMSUB", "a", "b", "c"],
    &["PUBSUB", "SHARDCHANNELS", "[a]"],
    &["PUBSUB", "CHANNELS"],
    &["PUBSUB", "NUMSUB", "a"],
    &["PING"],
    &["SUBSCRIBE", "a"],
    &["PSUBSCRIBE", "*"],
    &["SPUBLISH", "a", "shard only"],
    &["PUBLISH", "a", "channel and pattern"],
    &["SSUBSCRIBE", "c"],
    &["PUNSUBSCRIBE"],
    &["UNSUBSCRIBE"],
    &["GET", "x"],
    &["SUNSUBSCRIBE", "b", "zz"],
    &["SUNSUBSCRIBE", "a"],
    &["SUNSUBSCRIBE", "c"],
    &["SUNSUBSCRIBE"],
    &["GET", "x"],
    &["SSUBSCRIBE", "x"],
    &["RESET"],
    &["SPUBLISH", "x", "after reset"],
];

fn compare(ours: &mut Conn, theirs: &mut Conn, proto: &str) {
    compare_script(ours, theirs, proto, SCRIPT);
}

fn compare_script(ours: &mut Conn, theirs: &mut Conn, proto: &str, script: &[&[&str]]) {
    for c in [&mut *ours, &mut *theirs] {
        c.text(&["HELLO", proto]);
    }
    same_answers(ours, theirs, script, &format!("RESP{proto}"), Conn::text);
}

#[test]
fn replies_and_errors_match_redis_byte_for_byte() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let (mut ours, mut theirs) = (Conn::new(s.port), Conn::new(r.port));
    compare(&mut ours, &mut theirs, "2");
    // RESET brought both back to RESP2; the same connection goes on in RESP3.
    compare(&mut ours, &mut theirs, "3");
}

#[test]
fn sharded_replies_and_errors_match_redis_byte_for_byte() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let (mut ours, mut theirs) = (Conn::new(s.port), Conn::new(r.port));
    compare_script(&mut ours, &mut theirs, "2", SHARD_SCRIPT);
    compare_script(&mut ours, &mut theirs, "3", SHARD_SCRIPT);
}

/// What a subscriber in `proto` hears after `subscribe`, as another client sends
/// `publish`: the publishers' replies, then `messages` messages. Redis delivers to
/// matching patterns in its dict's order, which varies from run to run, so the
/// messages are sorted (compared as a set).
fn heard(
    port: u16,
    proto: &str,
    subscribe: &[&[&str]],
    publish: &[&[&str]],
    messages: usize,
) -> String {
    let mut sub = Conn::new(port);
    let mut publisher = Conn::new(port);
    sub.text(&["HELLO", proto]);
    for req in subscribe {
        sub.text(req);
    }
    let replies: String = publish.iter().map(|req| publisher.text(req)).collect();
    let mut got: Vec<String> = (0..messages)
        .map(|_| format!("{:?}", sub.frame()))
        .collect();
    got.sort();
    format!("{replies}{got:?}")
}

/// `smessage` as another client publishes it, byte for byte, in both protocols;
/// SPUBLISH counts shard subscribers only, never a channel or pattern of the same
/// name.
#[test]
fn shard_messages_match_redis_byte_for_byte() {
    let s = TestServer::start();
    let r = RedisServer::start();
    for proto in ["2", "3"] {
        let subscribe: &[&[&str]] = &[
            &["SSUBSCRIBE", "orders"],
            &["SUBSCRIBE", "orders"],
            &["PSUBSCRIBE", "ord*"],
        ];
        let publish: &[&[&str]] = &[&["SPUBLISH", "orders", "o-1"]];
        let got: Vec<String> = [s.port, r.port]
            .map(|port| heard(port, proto, subscribe, publish, 1))
            .into();
        assert_eq!(got[0], got[1], "RESP{proto}");
        assert!(got[0].starts_with(":1\r\n"), "{}", got[0]);
        assert!(got[0].contains("smessage"), "{}", got[0]);
    }
}

#[test]
fn shard_subscribers_show_in_client_list_and_info() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut sub = Conn::new(s.port);
    let id = sub.text(&["CLIENT", "ID"]);
    let id = id[1..].split("\r\n").next().unwrap().to_string();
    sub.text(&["SSUBSCRIBE", "a", "b", "c"]);
    sub.text(&["SUBSCRIBE", "a"]);
    let all = client_list(&mut con, &[]);
    let line = all
        .lines()
        .find(|l| l.starts_with(&format!("id={id} ")))
        .unwrap_or_else(|| panic!("the subscriber is listed:\n{all}"));
    assert!(line.contains(" flags=P "), "{line}");
    assert!(line.contains(" sub=1 psub=0 ssub=3 "), "{line}");
    assert_eq!(
        info_stat::<u64>(&mut con, "stats", "pubsubshard_channels"),
        3
    );
    assert_eq!(info_stat::<u64>(&mut con, "stats", "pubsub_channels"), 1);
    sub.text(&["SUNSUBSCRIBE", "a"]);
    assert_eq!(
        info_stat::<u64>(&mut con, "stats", "pubsubshard_channels"),
        2
    );
    drop(sub);
    eventually("a closed shard subscriber left its channels", || {
        info_stat::<u64>(&mut con, "stats", "pubsubshard_channels") == 0
            && info_stat::<u64>(&mut con, "clients", "pubsub_clients") == 0
    });
}

/// COMMAND INFO declares shard channels as keys, as Redis's table does, so a
/// cluster-aware client routes them; compared with redis-server.
#[test]
fn sharded_commands_are_described_as_redis_describes_them() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let (mut ours, mut theirs) = (Conn::new(s.port), Conn::new(r.port));
    for req in [
        &["COMMAND", "INFO", "ssubscribe", "sunsubscribe", "spublish"][..],
        &["COMMAND", "GETKEYS", "SPUBLISH", "ch", "msg"],
        &["COMMAND", "GETKEYS", "SSUBSCRIBE", "a", "b"],
        &["PUBSUB", "HELP"],
    ] {
        assert_eq!(ours.text(req), theirs.text(req), "{req:?}");
    }
    // DOCS: the argument names (the summaries are 7.2's, the server here 7.0's).
    let docs = ours.text(&["COMMAND", "DOCS", "spublish", "ssubscribe", "sunsubscribe"]);
    for arg in ["$12\r\nshardchannel\r\n", "$7\r\nmessage\r\n", "multiple"] {
        assert!(docs.contains(arg), "{arg:?} in {docs}");
    }
}

/// Messages as another client publishes them, byte for byte: `message` and
/// `pmessage` arrays in RESP2, pushes in RESP3; PUBLISH counts every receiver.
#[test]
fn messages_match_redis_byte_for_byte() {
    let s = TestServer::start();
    let r = RedisServer::start();
    for proto in ["2", "3"] {
        let subscribe: &[&[&str]] = &[&["SUBSCRIBE", "news"], &["PSUBSCRIBE", "n*", "*s"]];
        let publish: &[&[&str]] = &[&["PUBLISH", "news", "hot"], &["PUBLISH", "nope", "cold"]];
        let got: Vec<String> = [s.port, r.port]
            .map(|port| heard(port, proto, subscribe, publish, 4))
            .into();
        assert_eq!(got[0], got[1], "RESP{proto}");
        assert!(got[0].starts_with(":3\r\n"), "{}", got[0]);
    }
}

#[test]
fn the_redis_crate_receives_messages_in_resp2_and_resp3() {
    let s = TestServer::start();
    for url in [s.url(), format!("{}?protocol=resp3", s.url())] {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut con = client.get_connection().unwrap();
        let mut publisher = s.conn();
        let mut sub = con.as_pubsub();
        sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        sub.subscribe("news").unwrap();
        sub.psubscribe("n?ws").unwrap();
        let n: i64 = redis::cmd("PUBLISH")
            .arg("news")
            .arg("hello")
            .query(&mut publisher)
            .unwrap();
        assert_eq!(n, 2, "{url}");
        let first = sub.get_message().unwrap();
        assert_eq!(first.get_channel_name(), "news");
        assert_eq!(first.get_payload::<String>().unwrap(), "hello");
        assert!(!first.from_pattern());
        let second = sub.get_message().unwrap();
        assert_eq!(second.get_channel_name(), "news");
        assert_eq!(second.get_pattern::<String>().unwrap(), "n?ws");
        assert_eq!(second.get_payload::<String>().unwrap(), "hello");
        sub.unsubscribe("news").unwrap();
        sub.punsubscribe("n?ws").unwrap();
        let n: i64 = redis::cmd("PUBLISH")
            .arg("news")
            .arg("again")
            .query(&mut publisher)
            .unwrap();
        assert_eq!(n, 0, "{url}: nobody listens any more");
    }
}

fn client_list(con: &mut redis::Connection, args: &[&str]) -> String {
    redis::cmd("CLIENT")
        .arg("LIST")
        .arg(args)
        .query(con)
        .unwrap()
}

fn numsub(con: &mut redis::Connection, channel: &str) -> i64 {
    let v: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(con)
        .unwrap();
    v.1
}

/// Polls until `f` holds, for up to five seconds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn subscribers_show_in_client_list_info_and_pubsub_and_can_be_killed_by_type() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut sub = Conn::new(s.port);
    let id = sub.text(&["CLIENT", "ID"]);
    let id = id[1..].split("\r\n").next().unwrap();
    sub.text(&["SUBSCRIBE", "a", "b"]);
    sub.text(&["PSUBSCRIBE", "h*"]);

    let all = client_list(&mut con, &[]);
    let line = all
        .lines()
        .find(|l| l.starts_with(&format!("id={id} ")))
        .unwrap_or_else(|| panic!("the subscriber is listed:\n{all}"));
    assert!(line.contains(" flags=P "), "{line}");
    assert!(line.contains(" sub=2 psub=1 ssub=0 "), "{line}");
    let pubsub = client_list(&mut con, &["TYPE", "pubsub"]);
    assert_eq!(pubsub.lines().count(), 1, "{pubsub}");
    assert!(!client_list(&mut con, &["TYPE", "normal"]).contains("flags=P"));

    assert_eq!(info_stat::<u64>(&mut con, "stats", "pubsub_channels"), 2);
    assert_eq!(info_stat::<u64>(&mut con, "stats", "pubsub_patterns"), 1);
    assert_eq!(info_stat::<u64>(&mut con, "clients", "pubsub_clients"), 1);
    let mut channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut con)
        .unwrap();
    channels.sort();
    assert_eq!(channels, ["a", "b"]);
    let matching: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("[a]")
        .query(&mut con)
        .unwrap();
    assert_eq!(matching, ["a"]);

    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut con)
        .unwrap();
    assert_eq!(killed, 1);
    let mut rest = Vec::new();
    let _ = sub.s.read_to_end(&mut rest);
    eventually("the killed subscriber left its channels", || {
        numsub(&mut con, "a") == 0
            && info_stat::<u64>(&mut con, "stats", "pubsub_patterns") == 0
            && info_stat::<u64>(&mut con, "clients", "pubsub_clients") == 0
    });
}

#[test]
fn reset_and_disconnect_unsubscribe_everything() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut sub = Conn::new(s.port);
    sub.text(&["SUBSCRIBE", "a"]);
    sub.text(&["PSUBSCRIBE", "*"]);
    let publish = |con: &mut redis::Connection| -> i64 {
        redis::cmd("PUBLISH").arg("a").arg("m").query(con).unwrap()
    };
    assert_eq!(publish(&mut con), 2);
    sub.text(&["RESET"]);
    assert_eq!(publish(&mut con), 0);
    assert_eq!(numsub(&mut con, "a"), 0);
    // After RESET every command is allowed again.
    assert_eq!(sub.text(&["ECHO", "x"]), "$1\r\nx\r\n$7\r\nfence-4\r\n");

    sub.text(&["SUBSCRIBE", "a"]);
    assert_eq!(publish(&mut con), 1);
    drop(sub);
    eventually("a closed subscriber left its channel", || {
        numsub(&mut con, "a") == 0
    });
    assert_eq!(publish(&mut con), 0);
}

/// Subscribers that wait with nothing to send, spread over the event loops,
/// each hear every message of a burst, in order: a publish signals each of them
/// (the first signal since a loop last looked wakes it, and it serves them all);
/// a lone subscriber hears a lone message.
#[test]
fn every_waiting_subscriber_hears_a_burst_in_order() {
    const SUBSCRIBERS: usize = 200;
    const MESSAGES: usize = 50;
    let s = TestServer::start();
    let mut lone = Conn::new(s.port);
    lone.call(&["SUBSCRIBE", "lone"]);
    lone.set_timeout(Duration::from_secs(10));
    let mut con = s.conn();
    let heard: usize = redis::cmd("PUBLISH")
        .arg("lone")
        .arg("only")
        .query(&mut con)
        .unwrap();
    assert_eq!(heard, 1);
    let frame = format!("{:?}", lone.frame());
    assert!(frame.contains("only"), "{frame}");

    let mut subs: Vec<Conn> = (0..SUBSCRIBERS)
        .map(|i| {
            let mut c = Conn::new(s.port);
            if i % 2 == 1 {
                c.call(&["HELLO", "3"]);
            }
            c.call(&["SUBSCRIBE", "burst"]);
            c.set_timeout(Duration::from_secs(10));
            c
        })
        .collect();
    for m in 0..MESSAGES {
        let heard: usize = redis::cmd("PUBLISH")
            .arg("burst")
            .arg(format!("m{m}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(heard, SUBSCRIBERS);
    }
    for (i, sub) in subs.iter_mut().enumerate() {
        for m in 0..MESSAGES {
            let frame = format!("{:?}", sub.frame());
            assert!(
                frame.contains(&format!("m{m}\"")) && frame.contains("message"),
                "subscriber {i}, message {m}: {frame}"
            );
        }
    }
}

/// A subscriber that never reads is closed once what waits for it passes the
/// `pubsub` class's hard limit: the server does not hold its backlog, the
/// publisher is never blocked, and other clients are served throughout.
#[test]
fn a_subscriber_that_never_reads_is_closed_at_the_pubsub_limit() {
    let s = TestServer::start();
    let mut con = s.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("pubsub 1mb 256kb 1")
        .query(&mut con)
        .unwrap();
    // A normal client may still hold far more than the pubsub class allows.
    let limits = harness::config_get(&mut con, "client-output-buffer-limit");
    assert!(limits.ends_with("pubsub 1048576 262144 1"), "{limits}");

    let mut sleeper = Conn::new(s.port);
    sleeper.text(&["SUBSCRIBE", "firehose"]);
    let mut reader = s.conn();
    let mut listening = reader.as_pubsub();
    listening.subscribe("quiet").unwrap();

    let payload = vec![b'x'; 64 * 1024];
    let before = info_stat::<u64>(&mut con, "memory", "used_memory");
    let start = Instant::now();
    let mut receivers = Vec::new();
    // 64 MB in all, far past what the kernel's socket buffers absorb.
    for _ in 0..1024 {
        let n: i64 = redis::cmd("PUBLISH")
            .arg("firehose")
            .arg(&payload[..])
            .query(&mut con)
            .unwrap();
        receivers.push(n);
        if n == 0 {
            break;
        }
    }
    assert_eq!(
        receivers.last(),
        Some(&0),
        "the subscriber was never closed: {} publishes reached it",
        receivers.len()
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the publisher was held up"
    );
    assert!(
        info_stat::<u64>(
            &mut con,
            "stats",
            "client_output_buffer_limit_disconnections"
        ) >= 1
    );
    let after = info_stat::<u64>(&mut con, "memory", "used_memory");
    assert!(
        after < before + 16 * 1024 * 1024,
        "the server grew from {before} to {after} bytes"
    );
    // The closed subscriber finds its connection gone once it reads.
    sleeper
        .s
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sink = vec![0u8; 1 << 20];
    loop {
        match sleeper.s.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // Everyone else is served: a reading subscriber still gets its messages.
    let n: i64 = redis::cmd("PUBLISH")
        .arg("quiet")
        .arg("still here")
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 1);
    listening
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let msg = listening.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "still here");
    let pong: String = redis::cmd("PING").query(&mut s.conn()).unwrap();
    assert_eq!(pong, "PONG");
}
