//! End-to-end tests of leases (IDSET.LEASE, IDSET.RELEASE, IDSET.LOAD … LEASE and
//! IDSET.MEXISTSBIN … LEASE) against the real server: one test per rule of the
//! protocol described in `server/src/cmd/lease.rs` and the README.

mod harness;

use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use harness::{resp_cmd, Raw, TestServer};
use redis::{Connection, Value as RV};

fn packed(ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

/// Sends a command with binary-safe arguments and returns the raw reply value.
fn call(con: &mut Connection, args: &[&[u8]]) -> RV {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn lease(con: &mut Connection, key: &str, opts: &[&str]) -> RV {
    let mut args: Vec<&[u8]> = vec![b"IDSET.LEASE", key.as_bytes()];
    args.extend(opts.iter().map(|o| o.as_bytes()));
    call(con, &args)
}

fn token(v: RV) -> i64 {
    match v {
        RV::Int(t) if t > 0 => t,
        other => panic!("expected a lease token, got {other:?}"),
    }
}

fn fill(con: &mut Connection, key: &str, token: i64, ids: &[u64]) -> RV {
    let t = token.to_string();
    call(
        con,
        &[
            b"IDSET.LOAD",
            key.as_bytes(),
            b"LEASE",
            t.as_bytes(),
            b"PACKED",
            &packed(ids),
        ],
    )
}

fn info_field(con: &mut Connection, name: &str) -> i64 {
    harness::info_stat(con, "everything", name)
}

/// Polls until `blocked_clients` reaches `n` (parked commands are asynchronous to
/// the test), failing after a generous bound rather than hanging.
fn wait_blocked(con: &mut Connection, n: i64) {
    let start = Instant::now();
    while info_field(con, "blocked_clients") != n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "blocked_clients never reached {n}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// `IDSET.MEXISTSBIN key ids LEASE BLOCK ms` on its own connection, in a thread.
fn spawn_leased_read(
    s: &TestServer,
    key: &'static str,
    ids: Vec<u64>,
    block_ms: u64,
) -> thread::JoinHandle<RV> {
    let mut con = s.conn();
    thread::spawn(move || {
        let ms = block_ms.to_string();
        call(
            &mut con,
            &[
                b"IDSET.MEXISTSBIN",
                key.as_bytes(),
                &packed(&ids),
                b"LEASE",
                b"BLOCK",
                ms.as_bytes(),
            ],
        )
    })
}

#[test]
fn first_miss_gets_the_lease_the_next_is_told_busy_and_a_present_key_needs_none() {
    let s = TestServer::start();
    let (mut a, mut b) = (s.conn(), s.conn());
    let t = token(lease(&mut a, "u:1", &[]));
    assert_eq!(
        lease(&mut b, "u:1", &[]),
        RV::Nil,
        "another caller holds it"
    );
    assert_eq!(
        lease(&mut a, "u:1", &[]),
        RV::Nil,
        "even the holder asking again"
    );
    assert_eq!(fill(&mut a, "u:1", t, &[5, 6]), RV::Int(2));
    assert_eq!(
        lease(&mut b, "u:1", &[]),
        RV::Int(0),
        "present: nothing to fill"
    );
    assert_eq!(info_field(&mut a, "lease_grants"), 1);
    assert_eq!(info_field(&mut a, "lease_fills"), 1);
    assert_eq!(info_field(&mut a, "lease_busy"), 2);
    assert_eq!(info_field(&mut a, "leases_out"), 0);
}

#[test]
fn a_fill_is_stored_only_with_the_live_token_and_only_once() {
    let s = TestServer::start();
    let mut c = s.conn();
    assert_eq!(fill(&mut c, "u:1", 12345, &[1]), RV::Nil, "never granted");
    assert_eq!(call(&mut c, &[b"EXISTS", b"u:1"]), RV::Int(0));
    let t = token(lease(&mut c, "u:1", &[]));
    assert_eq!(
        fill(&mut c, "u:1", t + 1, &[1]),
        RV::Nil,
        "someone else's token"
    );
    assert_eq!(fill(&mut c, "u:1", t, &[1, 2, 3]), RV::Int(3));
    assert_eq!(fill(&mut c, "u:1", t, &[9]), RV::Nil, "the lease ended");
    let mut members: Vec<u64> = redis::cmd("SMEMBERS").arg("u:1").query(&mut c).unwrap();
    members.sort_unstable();
    assert_eq!(
        members,
        [1, 2, 3],
        "the first fill, untouched by the later one"
    );
    assert_eq!(info_field(&mut c, "lease_fills_refused"), 3);
}

#[test]
fn every_kind_of_write_revokes_the_lease_so_a_stale_fill_is_refused() {
    let s = TestServer::start();
    let mut c = s.conn();
    // Each of these writes the key while it is missing — what a write-through does
    // when a follow commits while a filler is reading the database.
    let writes: &[&[&str]] = &[
        &["IDSET.ADD", "K", "XX", "7"],
        &["IDSET.REM", "K", "7"],
        &["SREM", "K", "7"],
        &["DEL", "K"],
        &["UNLINK", "K"],
        &["EXPIRE", "K", "100"],
        &["SET", "K", "v"],
        &["SADD", "K", "7"],
        &["IDSET.LOAD", "K", "IDS", "7"],
        &["FLUSHALL"],
    ];
    for (i, w) in writes.iter().enumerate() {
        let key = format!("k{i}");
        let t = token(lease(&mut c, &key, &[]));
        let args: Vec<&[u8]> = w
            .iter()
            .map(|a| {
                if *a == "K" {
                    key.as_bytes()
                } else {
                    a.as_bytes()
                }
            })
            .collect();
        call(&mut c, &args);
        call(&mut c, &[b"DEL", key.as_bytes()]);
        assert_eq!(fill(&mut c, &key, t, &[1]), RV::Nil, "after {w:?}");
        assert_eq!(call(&mut c, &[b"EXISTS", key.as_bytes()]), RV::Int(0));
        // The next asker is granted a fresh lease, and its fill lands.
        let t2 = token(lease(&mut c, &key, &[]));
        assert!(t2 > t);
        assert_eq!(fill(&mut c, &key, t2, &[1, 7]), RV::Int(2), "after {w:?}");
    }
    assert!(info_field(&mut c, "lease_revocations") >= writes.len() as i64);
}

#[test]
fn a_write_inside_exec_revokes_too_and_reads_do_not() {
    let s = TestServer::start();
    let mut c = s.conn();
    let t = token(lease(&mut c, "u:1", &[]));
    for read in [
        &["IDSET.EXISTS", "u:1", "1"][..],
        &["EXISTS", "u:1"],
        &["TTL", "u:1"],
    ] {
        let args: Vec<&[u8]> = read.iter().map(|a| a.as_bytes()).collect();
        call(&mut c, &args);
    }
    let t_str = t.to_string();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("IDSET.ADD")
        .arg("u:1")
        .arg("XX")
        .arg(4)
        .cmd("IDSET.LOAD")
        .arg("u:1")
        .arg("LEASE")
        .arg(&t_str)
        .arg("IDS")
        .arg(1);
    let (added, filled): (Option<i64>, Option<i64>) = pipe.query(&mut c).unwrap();
    assert_eq!(
        (added, filled),
        (None, None),
        "the fill after the write is refused"
    );
}

#[test]
fn a_lapsed_lease_passes_to_the_next_caller_and_its_holder_can_no_longer_fill() {
    let s = TestServer::start();
    let (mut a, mut b) = (s.conn(), s.conn());
    let start = Instant::now();
    let t = token(lease(&mut a, "u:1", &["PX", "300"]));
    // Waiting rather than sleeping: the wait ends when the lease lapses.
    let t2 = token(lease(&mut b, "u:1", &["BLOCK", "0"]));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(290),
        "lapsed after {waited:?}"
    );
    assert!(t2 != t);
    assert_eq!(
        fill(&mut a, "u:1", t, &[1]),
        RV::Nil,
        "the crashed filler is late"
    );
    assert_eq!(fill(&mut b, "u:1", t2, &[2]), RV::Int(1));
    assert!(info_field(&mut a, "lease_lapses") >= 1);
}

#[test]
fn lease_timeout_is_configurable_and_applies_to_new_leases() {
    let s = TestServer::start_with(&["--lease-timeout", "250"]);
    let mut c = s.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lease-timeout")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["lease-timeout", "250"]);
    let start = Instant::now();
    token(lease(&mut c, "u:1", &[]));
    token(lease(&mut s.conn(), "u:1", &["BLOCK", "5000"]));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(240) && waited < Duration::from_millis(4000),
        "{waited:?}"
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lease-timeout")
        .arg("60000")
        .query(&mut c)
        .unwrap();
    token(lease(&mut c, "u:2", &[]));
    let start = Instant::now();
    assert_eq!(lease(&mut s.conn(), "u:2", &["BLOCK", "300"]), RV::Nil);
    assert!(
        start.elapsed() >= Duration::from_millis(290),
        "waited its BLOCK"
    );
}

#[test]
fn waiters_get_the_holders_result_when_the_fill_lands() {
    let s = TestServer::start();
    let mut holder = s.conn();
    let ids: Vec<u64> = (1..=1000).collect();
    let ask = vec![3, 2000, 999, 0];
    let first = call(
        &mut holder,
        &[b"IDSET.MEXISTSBIN", b"u:1", &packed(&ask), b"LEASE"],
    );
    let t = token(first);
    let waiters: Vec<_> = (0..20)
        .map(|_| spawn_leased_read(&s, "u:1", ask.clone(), 10_000))
        .collect();
    let mut admin = s.conn();
    wait_blocked(&mut admin, 20);
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    assert_eq!(list.matches("flags=b").count(), 20, "{list}");
    assert_eq!(fill(&mut holder, "u:1", t, &ids), RV::Int(1000));
    for w in waiters {
        assert_eq!(
            w.join().unwrap(),
            RV::BulkString(vec![0b0101]),
            "3 and 999 are members"
        );
    }
    wait_blocked(&mut admin, 0);
    assert_eq!(
        info_field(&mut admin, "lease_grants"),
        1,
        "one database read"
    );
    assert_eq!(info_field(&mut admin, "lease_waits"), 20);
}

#[test]
fn a_release_passes_the_lease_to_exactly_one_waiter() {
    let s = TestServer::start();
    let mut holder = s.conn();
    let t = token(lease(&mut holder, "u:1", &[]));
    let waiters: Vec<_> = (0..5)
        .map(|_| spawn_leased_read(&s, "u:1", vec![7], 10_000))
        .collect();
    let mut admin = s.conn();
    wait_blocked(&mut admin, 5);
    let released = call(
        &mut holder,
        &[b"IDSET.RELEASE", b"u:1", t.to_string().as_bytes()],
    );
    assert_eq!(released, RV::Int(1));
    assert_eq!(
        call(
            &mut holder,
            &[b"IDSET.RELEASE", b"u:1", t.to_string().as_bytes()]
        ),
        RV::Int(0),
        "already released"
    );
    // One waiter is granted the next lease; the others keep waiting for its fill.
    wait_blocked(&mut admin, 4);
    let mut results = Vec::new();
    let mut pending = waiters;
    // Find the finished thread (the new holder) without blocking on the others.
    let deadline = Instant::now() + Duration::from_secs(10);
    let new_token = loop {
        assert!(Instant::now() < deadline, "no waiter was granted the lease");
        if let Some(i) = pending.iter().position(|h| h.is_finished()) {
            let v = pending.swap_remove(i).join().unwrap();
            break token(v);
        }
        thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(fill(&mut holder, "u:1", new_token, &[7, 8]), RV::Int(2));
    for w in pending {
        results.push(w.join().unwrap());
    }
    assert_eq!(results, vec![RV::BulkString(vec![1]); 4]);
    assert_eq!(info_field(&mut admin, "lease_releases"), 1);
}

#[test]
fn a_write_wakes_waiters_and_one_of_them_rereads() {
    let s = TestServer::start();
    let mut holder = s.conn();
    let t = token(lease(&mut holder, "u:1", &[]));
    let waiter = spawn_leased_read(&s, "u:1", vec![1], 10_000);
    let mut admin = s.conn();
    wait_blocked(&mut admin, 1);
    assert_eq!(
        call(&mut admin, &[b"IDSET.ADD", b"u:1", b"XX", b"1"]),
        RV::Nil
    );
    let new_token = token(waiter.join().unwrap());
    assert_eq!(fill(&mut holder, "u:1", t, &[]), RV::Nil, "revoked");
    assert_eq!(fill(&mut admin, "u:1", new_token, &[1]), RV::Int(1));
}

#[test]
fn a_wait_times_out_with_nil_after_its_block_time() {
    let s = TestServer::start();
    let mut holder = s.conn();
    token(lease(&mut holder, "u:1", &[]));
    let mut c = s.conn();
    let start = Instant::now();
    assert_eq!(lease(&mut c, "u:1", &["BLOCK", "200"]), RV::Nil);
    assert!(start.elapsed() >= Duration::from_millis(195));
    let start = Instant::now();
    let v = call(
        &mut c,
        &[
            b"IDSET.MEXISTSBIN",
            b"u:1",
            &packed(&[1]),
            b"LEASE",
            b"BLOCK",
            b"150",
        ],
    );
    assert_eq!(v, RV::Nil);
    assert!(start.elapsed() >= Duration::from_millis(145));
    assert_eq!(info_field(&mut c, "blocked_clients"), 0);
    assert_eq!(info_field(&mut c, "lease_busy"), 2);
}

#[test]
fn requests_pipelined_behind_a_parked_command_wait_and_answer_in_order() {
    let s = TestServer::start();
    let mut holder = s.conn();
    let t = token(lease(&mut holder, "u:1", &[]));
    let mut raw = s.raw();
    let mut req = resp_cmd(&[b"IDSET.LEASE", b"u:1", b"BLOCK", b"0"]);
    req.extend(resp_cmd(&[b"PING"]));
    req.extend(resp_cmd(&[b"IDSET.CARD", b"u:1"]));
    raw.write_all(&req).unwrap();
    let mut admin = s.conn();
    wait_blocked(&mut admin, 1);
    raw.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(raw.read(&mut buf).is_err(), "nothing answered while parked");
    assert_eq!(fill(&mut holder, "u:1", t, &[4, 5]), RV::Int(2));
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let want = b":0\r\n+PONG\r\n:2\r\n";
    let got = harness::read_n(&mut raw, want.len());
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

#[test]
fn a_parked_client_that_hangs_up_is_forgotten() {
    let s = TestServer::start();
    let mut holder = s.conn();
    let t = token(lease(&mut holder, "u:1", &[]));
    {
        let mut raw = s.raw();
        raw.write_all(&resp_cmd(&[b"IDSET.LEASE", b"u:1", b"BLOCK", b"0"]))
            .unwrap();
        wait_blocked(&mut holder, 1);
    }
    wait_blocked(&mut holder, 0);
    assert_eq!(fill(&mut holder, "u:1", t, &[1]), RV::Int(1));
}

#[test]
fn inside_multi_a_lease_never_waits() {
    let s = TestServer::start();
    let mut holder = s.conn();
    token(lease(&mut holder, "u:1", &[]));
    let mut c = s.conn();
    let (v,): (Option<i64>,) = redis::pipe()
        .atomic()
        .cmd("IDSET.LEASE")
        .arg("u:1")
        .arg("BLOCK")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, None);
    let (v,): (Option<i64>,) = redis::pipe()
        .atomic()
        .cmd("IDSET.LEASE")
        .arg("u:2")
        .query(&mut c)
        .unwrap();
    assert!(v.is_some_and(|t| t > 0), "a free key is still granted");
}

#[test]
fn replies_in_resp2_and_resp3() {
    let s = TestServer::start();
    let mut r = Raw::new(&s);
    let t = match r.frame(&["IDSET.LEASE", "u:1"]) {
        relcache_protocol::resp::Frame::Integer(t) => t,
        f => panic!("{f:?}"),
    };
    r.expect(&["IDSET.LEASE", "u:1"], b"$-1\r\n");
    r.call(&["HELLO", "3"]);
    r.expect(&["IDSET.LEASE", "u:1"], b"_\r\n");
    r.expect(&["IDSET.MEXISTSBIN", "u:1", "", "LEASE"], b"_\r\n");
    r.expect(
        &["IDSET.LOAD", "u:1", "LEASE", &t.to_string(), "IDS", "1"],
        b":1\r\n",
    );
    r.expect(&["IDSET.LEASE", "u:1"], b":0\r\n");
    r.expect(&["IDSET.MEXISTSBIN", "u:1", "", "LEASE"], b"$0\r\n\r\n");
}

#[test]
fn bad_arguments_get_clear_errors() {
    let s = TestServer::start();
    let mut r = Raw::new(&s);
    r.expect_err(
        &["IDSET.LEASE", "k", "BLOCK", "-1"],
        "ERR timeout is negative",
    );
    r.expect_err(
        &["IDSET.LEASE", "k", "PX", "0"],
        "ERR invalid lease time in 'idset.lease' command",
    );
    r.expect_err(
        &["IDSET.LEASE", "k", "BLOCK", "x"],
        "ERR value is not an integer or out of range",
    );
    r.expect_err(&["IDSET.LEASE", "k", "PX"], "ERR syntax error");
    r.expect_err(&["IDSET.LEASE", "k", "NOPE", "1"], "ERR syntax error");
    r.expect_err(
        &["IDSET.MEXISTSBIN", "k", "", "PX", "5"],
        "ERR syntax error",
    );
    for bad in ["0", "-3", "abc", "01"] {
        r.expect_err(&["IDSET.RELEASE", "k", bad], "ERR invalid lease token");
        r.expect_err(
            &["IDSET.LOAD", "k", "LEASE", bad, "IDS", "1"],
            "ERR invalid lease token",
        );
    }
    r.expect_err(
        &["IDSET.RELEASE", "k"],
        "ERR wrong number of arguments for 'idset.release' command",
    );
    // Nothing above granted, filled or parked anything: the key's lease is free.
    assert!(matches!(
        r.frame(&["IDSET.LEASE", "k"]),
        relcache_protocol::resp::Frame::Integer(t) if t > 0
    ));
}

/// CLIENT UNBLOCK answers a parked command at once — nil, as when its wait runs
/// out, or with Redis's UNBLOCKED error — and the requests behind it go on.
#[test]
fn client_unblock_ends_a_wait_as_a_timeout_or_an_error() {
    let s = TestServer::start();
    let mut admin = s.conn();
    token(lease(&mut admin, "u:1", &[]));
    for (how, want) in [
        (None, "$-1\r\n"),
        (Some("TIMEOUT"), "$-1\r\n"),
        (
            Some("error"),
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n",
        ),
    ] {
        let mut raw = s.raw();
        raw.write_all(&resp_cmd(&[b"CLIENT", b"ID"])).unwrap();
        let id_line = String::from_utf8(harness::read_line(&mut raw)).unwrap();
        let id = id_line.trim_start_matches(':').trim().to_string();
        let mut req = resp_cmd(&[b"IDSET.LEASE", b"u:1", b"BLOCK", b"0"]);
        req.extend(resp_cmd(&[b"PING"]));
        raw.write_all(&req).unwrap();
        wait_blocked(&mut admin, 1);
        let mut args = vec!["UNBLOCK", id.as_str()];
        args.extend(how);
        let unblocked: i64 = redis::cmd("CLIENT").arg(&args).query(&mut admin).unwrap();
        assert_eq!(unblocked, 1, "{how:?}");
        let want = format!("{want}+PONG\r\n");
        let got = harness::read_n(&mut raw, want.len());
        assert_eq!(String::from_utf8_lossy(&got), want);
        wait_blocked(&mut admin, 0);
        // Not parked any more: nothing to unblock.
        let again: i64 = redis::cmd("CLIENT")
            .arg(&["UNBLOCK", id.as_str()])
            .query(&mut admin)
            .unwrap();
        assert_eq!(again, 0);
    }
    let err = redis::cmd("CLIENT")
        .arg(&["UNBLOCK", "1", "LATER"])
        .query::<i64>(&mut admin)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("reason should be TIMEOUT or ERROR"),
        "{err}"
    );
    let err = redis::cmd("CLIENT")
        .arg(&["UNBLOCK", "x"])
        .query::<i64>(&mut admin)
        .unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
    let none: i64 = redis::cmd("CLIENT")
        .arg(&["UNBLOCK", "999999"])
        .query(&mut admin)
        .unwrap();
    assert_eq!(none, 0);
}

/// A client that waited on a lease is not idle: once answered it has the whole
/// idle `timeout` again, as Redis counts a reply as interaction.
#[test]
fn an_answered_waiter_is_not_closed_as_idle() {
    let s = TestServer::start();
    let mut admin = s.conn();
    let () = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "1"])
        .query(&mut admin)
        .unwrap();
    let t = token(lease(&mut admin, "u:1", &["PX", "60000"]));
    let mut raw = s.raw();
    raw.write_all(&resp_cmd(&[b"IDSET.LEASE", b"u:1", b"BLOCK", b"0"]))
        .unwrap();
    wait_blocked(&mut admin, 1);
    thread::sleep(Duration::from_millis(1500));
    // (The admin connection itself sat idle meanwhile, and is gone.)
    let mut filler = s.conn();
    assert_eq!(fill(&mut filler, "u:1", t, &[1]), RV::Int(1));
    assert_eq!(harness::read_n(&mut raw, 4), b":0\r\n");
    raw.write_all(&resp_cmd(&[b"PING"])).unwrap();
    assert_eq!(harness::read_n(&mut raw, 7), b"+PONG\r\n");
}

/// Inside MULTI a leased read gets the lease on a miss, as it would outside.
#[test]
fn a_leased_read_inside_exec_is_granted_the_lease() {
    let s = TestServer::start();
    let mut c = s.conn();
    let (bits,): (RV,) = redis::pipe()
        .atomic()
        .cmd("IDSET.MEXISTSBIN")
        .arg("u:1")
        .arg(packed(&[7]))
        .arg("LEASE")
        .query(&mut c)
        .unwrap();
    assert!(matches!(bits, RV::Int(t) if t > 0), "{bits:?}");
    assert_eq!(info_field(&mut c, "leases_out"), 1);
}

/// Leases are bounded: in number (lease-max-count), in length (lease-max-ttl),
/// and by maxmemory; a flood of them is refused and costs no one their data.
#[test]
fn leases_are_bounded_in_number_length_and_memory() {
    let s = TestServer::start();
    let mut c = s.conn();
    let set = |c: &mut Connection, k: &str, v: &str| {
        let () = redis::cmd("CONFIG").arg(&["SET", k, v]).query(c).unwrap();
    };
    set(&mut c, "lease-max-count", "3");
    for i in 0..3 {
        token(lease(&mut c, &format!("k{i}"), &[]));
    }
    let err = redis::cmd("IDSET.LEASE")
        .arg("k9")
        .query::<RV>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("too many leases out"), "{err}");
    // A present key needs no lease, and a held one answers as before.
    let () = redis::cmd("SET")
        .arg("present")
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert_eq!(lease(&mut c, "present", &[]), RV::Int(0));
    assert_eq!(lease(&mut c, "k0", &[]), RV::Nil);
    assert_eq!(info_field(&mut c, "lease_refusals"), 1);

    set(&mut c, "lease-max-count", "100000");
    set(&mut c, "lease-max-ttl", "5000");
    token(lease(&mut c, "ok", &["PX", "5000"]));
    let err = redis::cmd("IDSET.LEASE")
        .arg(&["long", "PX", "5001"])
        .query::<RV>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("lease-max-ttl"), "{err}");

    // Over maxmemory with nothing to evict: refused with Redis's OOM error.
    set(&mut c, "maxmemory-policy", "noeviction");
    set(&mut c, "maxmemory", "1");
    let err = redis::cmd("IDSET.LEASE")
        .arg("m")
        .query::<RV>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("OOM"), "{err}");
    set(&mut c, "maxmemory", "0");
    token(lease(&mut c, "m", &[]));
}

/// A parked command counts once in the command statistics, when it answers; and
/// a lease that had lapsed before a write removed it counts as lapsed, not revoked.
#[test]
fn parked_runs_and_lapsed_leases_are_counted_once_and_rightly() {
    let s = TestServer::start();
    let mut c = s.conn();
    let () = redis::cmd("CONFIG")
        .arg(&["SET", "hz", "1"])
        .query(&mut c)
        .unwrap();
    let () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let t = token(lease(&mut c, "u:1", &["PX", "60000"]));
    let (granted, grants) = std::sync::mpsc::channel();
    for _ in 0..3 {
        let (mut w, granted) = (s.conn(), granted.clone());
        thread::spawn(move || granted.send(lease(&mut w, "u:1", &["BLOCK", "0"])).unwrap());
    }
    wait_blocked(&mut c, 3);
    let release =
        |c: &mut Connection, t: i64| call(c, &[b"IDSET.RELEASE", b"u:1", t.to_string().as_bytes()]);
    assert_eq!(release(&mut c, t), RV::Int(1));
    // One waiter is granted the lease; it releases, and so on down the line.
    for _ in 0..3 {
        let t = token(grants.recv_timeout(Duration::from_secs(10)).unwrap());
        assert_eq!(release(&mut c, t), RV::Int(1));
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_idset.lease:"))
        .unwrap_or_else(|| panic!("{stats}"));
    assert!(line.starts_with("cmdstat_idset.lease:calls=4,"), "{line}");

    let () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    for i in 0..5 {
        token(lease(&mut c, &format!("short{i}"), &["PX", "1"]));
    }
    thread::sleep(Duration::from_millis(20));
    let () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "lease_lapses"), 5);
    assert_eq!(info_field(&mut c, "lease_revocations"), 0);
}

/// A parked command takes its connection off the event loop to a task, which
/// hands it back once it has answered: round after round, the connection keeps
/// its identity and its order, and the requests behind each wait are answered
/// from the event loop again. `connected_clients` shows none is lost or doubled.
#[test]
fn a_connection_parked_again_and_again_keeps_its_place_and_its_order() {
    let s = TestServer::start();
    let mut holder = s.conn();
    let mut raw = s.raw();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&resp_cmd(&[b"CLIENT", b"ID"])).unwrap();
    let id = String::from_utf8(harness::read_line(&mut raw)).unwrap();
    for round in 0..20 {
        let key = format!("u:{round}");
        let t = token(lease(&mut holder, &key, &[]));
        let value = format!("v{round}");
        let mut req = resp_cmd(&[b"IDSET.LEASE", key.as_bytes(), b"BLOCK", b"0"]);
        req.extend(resp_cmd(&[b"CLIENT", b"ID"]));
        req.extend(resp_cmd(&[b"SET", b"x", value.as_bytes()]));
        for _ in 0..50 {
            req.extend(resp_cmd(&[b"GET", b"x"]));
        }
        raw.write_all(&req).unwrap();
        wait_blocked(&mut holder, 1);
        assert_eq!(fill(&mut holder, &key, t, &[1, 2, 3]), RV::Int(3));
        let mut want = format!(":0\r\n{id}+OK\r\n").into_bytes();
        for _ in 0..50 {
            want.extend(format!("${}\r\n{value}\r\n", value.len()).bytes());
        }
        let got = harness::read_n(&mut raw, want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "round {round}"
        );
    }
    assert_eq!(info_field(&mut holder, "connected_clients"), 2);
    assert_eq!(info_field(&mut holder, "blocked_clients"), 0);
}
