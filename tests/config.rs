//! End-to-end tests of typed configuration against the real binary: every
//! parameter of the one table is a command-line flag, and the knobs that used to be
//! stored and ignored now act (`tcp-keepalive`, `loglevel`,
//! `lazyfree-lazy-user-del`) or refuse what relcache cannot do.

mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::{config_get, server_bin, TestServer};
use redis::Connection;

fn config_set(con: &mut Connection, name: &str, value: &str) -> redis::RedisResult<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
}

#[test]
fn every_parameter_is_a_command_line_flag() {
    // lease-max-count, lease-max-ttl, maxmemory-samples, client-query-buffer-limit
    // and tcp-keepalive had no flag while main.rs kept its own list.
    let srv = TestServer::start_with(&[
        "--lease-max-count",
        "5",
        "--lease-max-ttl",
        "7000",
        "--maxmemory-samples",
        "9",
        "--client-query-buffer-limit",
        "2mb",
        "--tcp-keepalive",
        "100",
    ]);
    let mut con = srv.conn();
    assert_eq!(config_get(&mut con, "lease-max-count"), "5");
    assert_eq!(config_get(&mut con, "lease-max-ttl"), "7000");
    assert_eq!(config_get(&mut con, "maxmemory-samples"), "9");
    assert_eq!(
        config_get(&mut con, "client-query-buffer-limit"),
        (2u64 << 20).to_string()
    );
    assert_eq!(config_get(&mut con, "tcp-keepalive"), "100");

    // And `--help` documents a flag for every parameter CONFIG GET knows.
    let help = Command::new(server_bin()).arg("--help").output().unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    let all: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query(&mut con)
        .unwrap();
    for name in all.iter().step_by(2) {
        assert!(
            help.contains(&format!("--{name} <")),
            "--help lacks --{name}"
        );
    }
}

#[test]
fn a_refused_flag_stops_the_server_with_the_reason() {
    for (args, why) in [
        (
            ["--lazyfree-lazy-user-del", "maybe"],
            "argument must be 'yes' or 'no'",
        ),
        (["--lease-max-count", "0"], "argument must be between 1"),
        (["--maxmemory-policy", "allkeys-lfu"], "must be one of"),
    ] {
        let out = Command::new(server_bin())
            .args(["--port", "0"])
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            stderr.contains(&format!("{}:", args[0])) && stderr.contains(why),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn lazyfree_lazy_user_del_reads_back_as_set() {
    let srv = TestServer::start_with(&["--lazyfree-lazy-user-del", "yes"]);
    let mut con = srv.conn();
    assert_eq!(config_get(&mut con, "lazyfree-lazy-user-del"), "yes");
    config_set(&mut con, "lazyfree-lazy-user-del", "no").unwrap();
    assert_eq!(config_get(&mut con, "lazyfree-lazy-user-del"), "no");
    assert!(config_set(&mut con, "lazyfree-lazy-user-del", "maybe").is_err());
    assert_eq!(config_get(&mut con, "lazyfree-lazy-user-del"), "no");
}

#[test]
fn maxmemory_policy_reads_back_as_set() {
    let srv = TestServer::start_with(&["--maxmemory-policy", "VOLATILE-TTL"]);
    let mut con = srv.conn();
    assert_eq!(config_get(&mut con, "maxmemory-policy"), "volatile-ttl");
    config_set(&mut con, "maxmemory-policy", "allkeys-random").unwrap();
    assert_eq!(config_get(&mut con, "maxmemory-policy"), "allkeys-random");
    let info: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    assert!(
        info.contains("maxmemory_policy:allkeys-random\r\n"),
        "{info}"
    );
}

/// The kernel's view of the server side of `client`'s connection to `port`:
/// (timer kind, ticks until it fires) from /proc/net/tcp, where kind 2 is the
/// keepalive timer and ticks are USER_HZ (1/100 s).
fn server_side_timer(port: u16, client: &TcpStream) -> (u8, u64) {
    let peer = client.local_addr().unwrap().port();
    let local = format!(":{port:04X} ");
    let remote = format!(":{peer:04X} ");
    let table = std::fs::read_to_string("/proc/net/tcp").expect("Linux /proc/net/tcp");
    let line = table
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 5
                && format!("{} ", f[1]).ends_with(&local)
                && format!("{} ", f[2]).ends_with(&remote)
        })
        .unwrap_or_else(|| panic!("no server socket {port} <- {peer} in\n{table}"));
    let timer = line.split_whitespace().nth(5).unwrap();
    let (kind, when) = timer.split_once(':').unwrap();
    (
        u8::from_str_radix(kind, 16).unwrap(),
        u64::from_str_radix(when, 16).unwrap(),
    )
}

/// A connection that has been accepted and served (a PING answered), with the
/// server side's timer once no retransmission is pending.
fn connect_and_read_timer(port: u16) -> (TcpStream, (u8, u64)) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+PONG\r\n");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = server_side_timer(port, &s);
        // Kind 1 is a retransmission or probe timer: the PONG not yet acknowledged.
        if t.0 != 1 || Instant::now() > deadline {
            return (s, t);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn tcp_keepalive_is_set_on_accepted_sockets() {
    let srv = TestServer::start_with(&["--tcp-keepalive", "100"]);
    let (_first, (kind, when)) = connect_and_read_timer(srv.port);
    assert_eq!(kind, 2, "keepalive timer armed");
    assert!(
        (5_000..=10_000).contains(&when),
        "first probe in ~100 s: {when}"
    );

    // CONFIG SET applies to connections accepted after it, as in Redis.
    let mut con = srv.conn();
    config_set(&mut con, "tcp-keepalive", "20").unwrap();
    let (_second, (kind, when)) = connect_and_read_timer(srv.port);
    assert_eq!(kind, 2);
    assert!(when <= 2_000, "first probe in ~20 s: {when}");

    config_set(&mut con, "tcp-keepalive", "0").unwrap();
    let (_third, (kind, _)) = connect_and_read_timer(srv.port);
    assert_eq!(kind, 0, "no keepalive when tcp-keepalive is 0");
}

/// Polls the server's log until `pred` holds.
/// Sends a malformed frame; the server logs the protocol error at debug level
/// before it closes the connection, so once the close is seen the line is written.
fn protocol_error(port: u16) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*1\r\n$x\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
}

#[test]
fn config_set_loglevel_changes_what_is_logged() {
    let dir = std::env::temp_dir().join(format!("relcache-loglevel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("redis.conf");
    std::fs::write(&path, "maxclients 100\n").unwrap();
    // The harness sets RUST_LOG=info: CONFIG SET replaces that filter too.
    let srv = TestServer::start_with(&["--", path.to_str().unwrap()]);
    let mut con = srv.conn();
    const DEBUG_LINE: &str = "protocol error, closing";
    const INFO_LINE: &str = "CONFIG REWRITE executed with success";
    let count = |log: &str, line: &str| log.matches(line).count();
    let rewrite = |con: &mut Connection| {
        redis::cmd("CONFIG")
            .arg("REWRITE")
            .query::<()>(con)
            .unwrap()
    };

    config_set(&mut con, "loglevel", "debug").unwrap();
    assert_eq!(config_get(&mut con, "loglevel"), "debug");
    protocol_error(srv.port);
    srv.wait_log("debug is logged at loglevel debug", |l| {
        count(l, DEBUG_LINE) == 1
    });

    // warning: neither info nor debug lines; nothing: no lines at all.
    config_set(&mut con, "loglevel", "WARNING").unwrap();
    assert_eq!(config_get(&mut con, "loglevel"), "warning");
    rewrite(&mut con);
    protocol_error(srv.port);
    config_set(&mut con, "loglevel", "nothing").unwrap();
    rewrite(&mut con);

    // notice: info lines again, debug still not. Log lines are written in order, so
    // once this rewrite's line is there, any earlier one would be too.
    config_set(&mut con, "loglevel", "notice").unwrap();
    protocol_error(srv.port);
    rewrite(&mut con);
    let log = srv.wait_log("info is logged at loglevel notice", |l| {
        count(l, INFO_LINE) >= 1
    });
    assert_eq!(count(&log, INFO_LINE), 1, "{log}");
    assert_eq!(count(&log, DEBUG_LINE), 1, "{log}");

    assert!(config_set(&mut con, "loglevel", "loud").is_err());
    drop(srv);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// As with redis-server, a flag's value may be several words up to the next flag.
#[test]
fn a_flag_value_may_be_several_words() {
    let s = TestServer::start_with(&[
        "--client-output-buffer-limit",
        "normal",
        "0",
        "32mb",
        "10",
        "--maxmemory-samples",
        "7",
    ]);
    let mut con = s.conn();
    assert!(config_get(&mut con, "client-output-buffer-limit").starts_with("normal 0 33554432 10 "));
    assert_eq!(config_get(&mut con, "maxmemory-samples"), "7");
}

/// `tcp-backlog` (Redis's default 511) is the listen queue the kernel reports for
/// the listener (`ss`'s Send-Q column of a listening socket).
#[test]
fn tcp_backlog_sizes_the_listen_queue() {
    for (args, want) in [(&[][..], "511"), (&["--tcp-backlog", "777"][..], "777")] {
        let s = TestServer::start_with(args);
        let mut con = s.conn();
        assert_eq!(config_get(&mut con, "tcp-backlog"), want);
        let out = Command::new("ss")
            .args(["-ltnH", &format!("sport = :{}", s.port)])
            .output()
            .expect("run ss (apt-get install iproute2)");
        let text = String::from_utf8_lossy(&out.stdout);
        let queue = text.split_whitespace().nth(2);
        assert_eq!(queue, Some(want), "ss: {text}");
    }
}

#[test]
fn max_new_connections_per_cycle_is_redis_7_4s_knob_and_accepting_goes_on() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    assert_eq!(config_get(&mut con, "max-new-connections-per-cycle"), "10");
    for bad in ["0", "1001", "x"] {
        let e = config_set(&mut con, "max-new-connections-per-cycle", bad).unwrap_err();
        assert!(
            e.to_string().contains("max-new-connections-per-cycle"),
            "{bad}: {e}"
        );
    }
    assert_eq!(config_get(&mut con, "max-new-connections-per-cycle"), "10");
    // At the lowest cap the listener yields after every accept; a burst of
    // connects still all complete, and a connected client is served meanwhile.
    config_set(&mut con, "max-new-connections-per-cycle", "1").unwrap();
    assert_eq!(config_get(&mut con, "max-new-connections-per-cycle"), "1");
    let burst: Vec<_> = (0..100)
        .map(|_| {
            let port = srv.port;
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.write_all(b"PING\r\n").unwrap();
                let mut reply = [0u8; 7];
                s.read_exact(&mut reply).unwrap();
                reply
            })
        })
        .collect();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    for t in burst {
        assert_eq!(&t.join().unwrap(), b"+PONG\r\n");
    }

    let srv = TestServer::start_with(&["--max-new-connections-per-cycle", "1000"]);
    assert_eq!(
        config_get(&mut srv.conn(), "max-new-connections-per-cycle"),
        "1000"
    );
}

/// Sends `frame`, which the server refuses as a protocol error, and waits for
/// the close (the debug line is written before it).
fn send_bad_frame(port: u16, frame: &[u8]) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(frame).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
}

#[test]
fn hide_user_data_from_log_keeps_request_bytes_out_of_the_log() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    assert_eq!(config_get(&mut con, "hide-user-data-from-log"), "no");
    config_set(&mut con, "loglevel", "debug").unwrap();
    const LINE: &str = "protocol error, closing";
    send_bad_frame(srv.port, b"*1\r\n:1\r\n");
    srv.wait_log("the quoted byte is logged by default", |l| {
        l.contains("got ':'") && l.matches(LINE).count() == 1
    });
    config_set(&mut con, "hide-user-data-from-log", "yes").unwrap();
    assert_eq!(config_get(&mut con, "hide-user-data-from-log"), "yes");
    send_bad_frame(srv.port, b"*1\r\n#1\r\n");
    let log = srv.wait_log("the second protocol error", |l| {
        l.matches(LINE).count() == 2
    });
    assert!(!log.contains("got '#'"), "{log}");
    assert!(config_set(&mut con, "hide-user-data-from-log", "maybe").is_err());
}
