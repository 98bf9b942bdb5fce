//! End-to-end tests of the server/admin family: INFO, CONFIG, DBSIZE, FLUSHDB /
//! FLUSHALL, TIME, SHUTDOWN, MEMORY, LASTSAVE, SAVE, SWAPDB, against the real binary.

mod harness;

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::{config_get, read_n, read_to_end, resp_cmd, roundtrip, ReadEnd, TestServer};
use redis::{Connection, Value};

fn info(con: &mut Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(con).unwrap()
}

/// The value of `name:` in an INFO text.
fn info_field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::to_string))
}

fn stat(con: &mut Connection, name: &str) -> u64 {
    info_field(&info(con, "stats"), name)
        .unwrap_or_else(|| panic!("no {name} in INFO stats"))
        .parse()
        .unwrap()
}

fn err_text(r: redis::RedisResult<Value>) -> String {
    let e = r.expect_err("expected an error reply");
    // "ERR" is split off as the code; put the wire text back together.
    match e.code() {
        Some(code) => format!("{code} {}", e.detail().unwrap_or_default()),
        None => e.to_string(),
    }
}

fn query(con: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

/// Polls INFO keyspace until `pred` holds (expiry is asynchronous), with a deadline.
fn wait_keyspace(con: &mut Connection, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ks = info(con, "keyspace");
        if pred(&ks) {
            return ks;
        }
        assert!(
            Instant::now() < deadline,
            "keyspace never matched; last:\n{ks}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn info_reports_version_and_every_section() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let all = info(&mut con, "all");
    assert!(all.contains("redis_version:7."), "{all}");
    assert_eq!(
        info_field(&all, "redis_mode").as_deref(),
        Some("standalone")
    );
    assert_eq!(info_field(&all, "tcp_port"), Some(srv.port.to_string()));
    assert!(info_field(&all, "relcache_version").is_some_and(|v| !v.is_empty()));
    assert_eq!(info_field(&all, "run_id").map(|r| r.len()), Some(40));
    assert!(
        info_field(&all, "used_memory")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert!(
        info_field(&all, "used_memory_rss")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(info_field(&all, "role").as_deref(), Some("master"));
    assert_eq!(info_field(&all, "loading").as_deref(), Some("0"));
    assert!(info_field(&all, "used_cpu_user").is_some());
    let headers: Vec<&str> = all.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(
        headers,
        [
            "# Server",
            "# Clients",
            "# Memory",
            "# Persistence",
            "# Stats",
            "# Replication",
            "# CPU",
            "# Modules",
            "# Commandstats",
            "# Errorstats",
            "# Latencystats",
            "# Cluster",
            "# Keyspace",
            "# Idsets",
            "# Leases",
            "# Loops"
        ]
    );
    assert_eq!(
        info(&mut con, "everything")
            .lines()
            .filter(|l| l.starts_with("# "))
            .count(),
        headers.len()
    );

    // The default set leaves out commandstats and latencystats; order is Redis's, not
    // the request's; an unknown section gives an empty text.
    let default: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(default.contains("# Keyspace") && !default.contains("# Commandstats"));
    let two: String = redis::cmd("INFO")
        .arg("KEYSPACE")
        .arg("server")
        .query(&mut con)
        .unwrap();
    let h: Vec<&str> = two.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(h, ["# Server", "# Keyspace"]);
    assert_eq!(info(&mut con, "nosuchsection"), "");
    // The harness's readiness probe may not be unregistered yet: at least this one.
    let clients: u64 = info_field(&info(&mut con, "clients"), "connected_clients")
        .unwrap()
        .parse()
        .unwrap();
    assert!(clients >= 1);
}

#[test]
fn info_wire_format_is_crlf_lines_and_verbatim_in_resp3() {
    let srv = TestServer::start();
    let mut s = srv.raw();
    roundtrip(&mut s, &resp_cmd(&[b"SET", b"k", b"v"]), b"+OK\r\n");
    let expected = b"# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n";
    let mut want = format!("${}\r\n", expected.len()).into_bytes();
    want.extend_from_slice(expected);
    want.extend_from_slice(b"\r\n");
    roundtrip(&mut s, &resp_cmd(&[b"INFO", b"keyspace"]), &want);
    roundtrip(&mut s, &resp_cmd(&[b"INFO", b"nosuch"]), b"$0\r\n\r\n");
    // Two sections are separated by one empty line.
    s.write_all(&resp_cmd(&[b"INFO", b"cluster", b"keyspace"]))
        .unwrap();
    let body =
        b"# Cluster\r\ncluster_enabled:0\r\n\r\n# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n";
    let got = read_n(
        &mut s,
        format!("${}\r\n", body.len()).len() + body.len() + 2,
    );
    assert!(
        got.ends_with(&[&body[..], b"\r\n"].concat()),
        "{}",
        String::from_utf8_lossy(&got)
    );

    let mut s3 = srv.raw();
    s3.write_all(&resp_cmd(&[b"HELLO", b"3"])).unwrap();
    s3.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let _ = read_to_end(&mut s3);
    s3.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut want = format!("={}\r\ntxt:", expected.len() + 4).into_bytes();
    want.extend_from_slice(expected);
    want.extend_from_slice(b"\r\n");
    roundtrip(&mut s3, &resp_cmd(&[b"INFO", b"keyspace"]), &want);
}

#[test]
fn info_keyspace_follows_sets_deletes_and_expiries() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    assert!(
        !info(&mut con, "keyspace").contains("db0:"),
        "empty keyspace prints no db line"
    );
    query(&mut con, &["SET", "a", "1"]).unwrap();
    query(&mut con, &["SET", "b", "2", "EX", "100"]).unwrap();
    query(&mut con, &["SET", "c", "3", "PX", "50"]).unwrap();
    // avg_ttl is the expiry cycle's estimate (tests/observe.rs), any value here.
    assert!(info(&mut con, "keyspace").contains("db0:keys=3,expires=2,avg_ttl="));
    query(&mut con, &["DEL", "a"]).unwrap();
    // c expires on its own (active expiry): keys and expires both drop.
    wait_keyspace(&mut con, |ks| ks.contains("db0:keys=1,expires=1,avg_ttl="));
    assert!(stat(&mut con, "expired_keys") >= 1);
    query(&mut con, &["DEL", "b"]).unwrap();
    assert!(!info(&mut con, "keyspace").contains("db0:"));
}

#[test]
fn info_inside_multi_sees_the_transaction_without_deadlock() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let ((), (), (), keyspace, dbsize): ((), (), (), String, i64) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("x")
        .arg("1")
        .arg("EX")
        .arg("100")
        .cmd("FLUSHALL")
        .cmd("SET")
        .arg("y")
        .arg("1")
        .arg("EX")
        .arg("100")
        .cmd("INFO")
        .arg("keyspace")
        .cmd("DBSIZE")
        .query(&mut con)
        .unwrap();
    assert_eq!(dbsize, 1);
    assert!(keyspace.contains("db0:keys=1,expires=1"), "{keyspace}");
}

#[test]
fn commandstats_count_calls_and_reset_with_resetstat() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    query(&mut con, &["CONFIG", "RESETSTAT"]).unwrap();
    for i in 0..7 {
        query(&mut con, &["SET", &format!("k{i}"), "v"]).unwrap();
    }
    let _ = query(&mut con, &["CONFIG", "SET", "nosuch", "1"]);
    let stats = info(&mut con, "commandstats");
    let set = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_set:"))
        .expect(&stats);
    assert!(set.starts_with("cmdstat_set:calls=7,usec="), "{set}");
    assert!(
        set.contains(",usec_per_call=") && set.ends_with(",rejected_calls=0,failed_calls=0"),
        "{set}"
    );
    // Subcommands are named container|sub, as Redis 7 does.
    assert!(stats.contains("cmdstat_config|set:calls=1,"), "{stats}");
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("cmdstat_config|set:") && l.ends_with("failed_calls=1")),
        "{stats}"
    );

    query(&mut con, &["CONFIG", "RESETSTAT"]).unwrap();
    let stats = info(&mut con, "commandstats");
    assert!(!stats.contains("cmdstat_set:"), "{stats}");
    assert!(
        stats.contains("cmdstat_config|resetstat:calls=1,"),
        "{stats}"
    );
    assert_eq!(stat(&mut con, "total_error_replies"), 0);
}

#[test]
fn keyspace_hits_and_misses_count_reads() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    query(&mut con, &["SET", "k", "v"]).unwrap();
    query(&mut con, &["CONFIG", "RESETSTAT"]).unwrap();
    for _ in 0..2 {
        query(&mut con, &["GET", "k"]).unwrap();
    }
    for _ in 0..3 {
        query(&mut con, &["GET", "missing"]).unwrap();
    }
    assert_eq!(stat(&mut con, "keyspace_hits"), 2);
    assert_eq!(stat(&mut con, "keyspace_misses"), 3);
    assert!(stat(&mut con, "total_commands_processed") >= 5);
    assert!(stat(&mut con, "total_net_input_bytes") > 0);
}

#[test]
fn config_get_shapes_and_fixed_persistence_answers() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut con)
        .unwrap();
    assert_eq!(v, ["maxmemory", "0"]);
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("max*")
        .query(&mut con)
        .unwrap();
    assert!(v.len() >= 8 && v.len().is_multiple_of(2), "{v:?}");
    for name in [
        "maxmemory",
        "maxclients",
        "maxmemory-policy",
        "maxmemory-samples",
    ] {
        assert!(
            v.chunks(2).any(|p| p[0] == name),
            "{name} missing from {v:?}"
        );
    }
    // Several patterns; a parameter matched twice is listed once; case-insensitive.
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("SAVE")
        .arg("appendonly")
        .arg("save")
        .query(&mut con)
        .unwrap();
    let mut pairs: Vec<(&str, &str)> = v
        .chunks(2)
        .map(|p| (p[0].as_str(), p[1].as_str()))
        .collect();
    pairs.sort();
    assert_eq!(pairs, [("appendonly", "no"), ("save", "")]);
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("nosuch*")
        .query(&mut con)
        .unwrap();
    assert!(v.is_empty());
    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "GET"])),
        "ERR wrong number of arguments for 'config|get' command"
    );

    // RESP3: a map.
    let mut s = srv.raw();
    s.write_all(&resp_cmd(&[b"HELLO", b"3"])).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let _ = read_to_end(&mut s);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    roundtrip(
        &mut s,
        &resp_cmd(&[b"CONFIG", b"GET", b"maxmemory"]),
        b"%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n",
    );
    roundtrip(
        &mut s,
        &resp_cmd(&[b"CONFIG", b"GET", b"appendonly"]),
        b"%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n",
    );
}

#[test]
fn config_set_validates_everything_before_changing_anything() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    query(&mut con, &["CONFIG", "SET", "maxmemory", "64mb"]).unwrap();
    assert_eq!(config_get(&mut con, "maxmemory"), "67108864");
    query(&mut con, &["CONFIG", "SET", "MAXMEMORY", "0", "hz", "20"]).unwrap();
    assert_eq!(
        (
            config_get(&mut con, "maxmemory").as_str(),
            config_get(&mut con, "hz").as_str()
        ),
        ("0", "20")
    );

    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "SET", "nosuch", "1"])),
        "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'"
    );
    assert_eq!(
        err_text(query(
            &mut con,
            &["CONFIG", "SET", "maxmemory", "1mb", "MaxMemory", "2mb"]
        )),
        "ERR CONFIG SET failed (possibly related to argument 'MaxMemory') - duplicate parameter"
    );
    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "SET", "port", "1"])),
        "ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config"
    );
    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "SET", "MAXMEMORY", "lots"])),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value"
    );
    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "SET", "maxmemory", "1", "hz"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "SET", "hz"])),
        "ERR wrong number of arguments for 'config|set' command"
    );
    // One bad value: nothing changes, not even the good ones before it.
    assert!(query(
        &mut con,
        &["CONFIG", "SET", "maxmemory", "5mb", "hz", "100000"]
    )
    .is_err());
    assert_eq!(config_get(&mut con, "maxmemory"), "0");
    assert_eq!(config_get(&mut con, "hz"), "20");

    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "REWRITE"])),
        "ERR The server is running without a config file"
    );
    assert_eq!(
        err_text(query(&mut con, &["CONFIG", "NOSUCH"])),
        "ERR unknown subcommand 'NOSUCH'. Try CONFIG HELP."
    );
    let help: Vec<String> = redis::cmd("CONFIG").arg("HELP").query(&mut con).unwrap();
    assert!(
        help[0].starts_with("CONFIG <subcommand>") && help.iter().any(|l| l == "RESETSTAT"),
        "{help:?}"
    );
}

#[test]
fn proto_max_bulk_len_applies_to_new_requests() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let big = vec![b'x'; 2 * 1024 * 1024];
    let mut s = srv.raw();
    roundtrip(&mut s, &resp_cmd(&[b"SET", b"big", &big]), b"+OK\r\n");

    query(&mut con, &["CONFIG", "SET", "proto-max-bulk-len", "1mb"]).unwrap();
    assert_eq!(config_get(&mut con, "proto-max-bulk-len"), "1048576");
    let mut s = srv.raw();
    s.write_all(&resp_cmd(&[b"SET", b"big", &big])).unwrap();
    let (got, end) = read_to_end(&mut s);
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    assert_ne!(
        end,
        ReadEnd::Timeout,
        "the connection is closed after a framing error"
    );
    // Others are unaffected and the old value is intact.
    let len: i64 = redis::cmd("STRLEN").arg("big").query(&mut con).unwrap();
    assert_eq!(len, big.len() as i64);
}

#[test]
fn dbsize_flushdb_flushall() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let n: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(n, 0);
    for k in ["a", "b", "c"] {
        query(&mut con, &["SET", k, "v"]).unwrap();
    }
    let n: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(n, 3);
    assert_eq!(query(&mut con, &["FLUSHALL"]).unwrap(), Value::Okay);
    let n: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(n, 0);
    query(&mut con, &["SET", "a", "v"]).unwrap();
    assert_eq!(query(&mut con, &["FLUSHDB", "async"]).unwrap(), Value::Okay);
    assert_eq!(query(&mut con, &["GET", "a"]).unwrap(), Value::Nil);
    assert_eq!(query(&mut con, &["FLUSHALL", "SYNC"]).unwrap(), Value::Okay);
    assert_eq!(
        err_text(query(&mut con, &["FLUSHALL", "now"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(&mut con, &["FLUSHDB", "async", "sync"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(&mut con, &["DBSIZE", "x"])),
        "ERR wrong number of arguments for 'dbsize' command"
    );
}

fn memory_field(con: &mut Connection, name: &str) -> u64 {
    info_field(&info(con, "memory"), name)
        .unwrap_or_else(|| panic!("no {name} in INFO memory"))
        .parse()
        .unwrap()
}

/// MEMORY PURGE gives what a FLUSHALL freed back to the OS: glibc keeps the
/// freed small allocations in its arenas, so without it the process stays about
/// as big as it was loaded (71.7 of 103.6 MB of RSS, by hand, with the trim left
/// out). Should glibc ever give most of it back by itself at the free, the test
/// checks that instead, since PURGE then has little left to do.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn memory_purge_gives_flushed_memory_back_to_the_os() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let before = memory_field(&mut con, "used_memory_rss");
    fill(&mut con, 400_000);
    let loaded = memory_field(&mut con, "used_memory_rss");
    let grown = loaded.saturating_sub(before);
    assert!(
        grown > 40 << 20,
        "400,000 keys grew the process by {grown} bytes"
    );
    assert_eq!(query(&mut con, &["FLUSHALL"]).unwrap(), Value::Okay);
    let flushed = memory_field(&mut con, "used_memory_rss");
    assert_eq!(query(&mut con, &["MEMORY", "PURGE"]).unwrap(), Value::Okay);
    let purged = memory_field(&mut con, "used_memory_rss");
    let kept = flushed.saturating_sub(before);
    let rss = format!("RSS {before} before, {loaded} loaded, {flushed} flushed, {purged} purged");
    if kept > grown / 2 {
        assert!(purged < before + kept / 2, "{rss}");
    } else {
        eprintln!("glibc gave the flushed memory back by itself: {rss}");
        assert!(purged <= flushed + (1 << 20), "{rss}");
    }
}

/// A load frees its blocks (the request, the parsed ids, the table it replaces) a few
/// hundred KB at a time. With glibc's default thresholds those pages went back to
/// the OS and the next load faulted them in again: about 290 page faults a
/// 20,000-id SADD, by hand. With the thresholds fixed at start
/// (`alloc::tune_system_allocator`) they are reused, and a hundred loads fault in
/// next to nothing. Gated as the tuning is: 64-bit glibc only.
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
#[test]
fn repeated_big_loads_reuse_freed_memory() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let ids: Vec<u64> = (1..=20_000).map(|i| i * 31).collect();
    let mut load = || {
        let _: i64 = redis::cmd("DEL").arg("big").query(&mut con).unwrap();
        let added: u64 = redis::cmd("SADD")
            .arg("big")
            .arg(&ids)
            .query(&mut con)
            .unwrap();
        assert_eq!(added, 20_000);
    };
    // The arenas grow to the loads' working size first.
    for _ in 0..20 {
        load();
    }
    let before = harness::minor_faults(srv.pid());
    for _ in 0..100 {
        load();
    }
    let faults = harness::minor_faults(srv.pid()) - before;
    assert!(faults < 1_000, "{faults} page faults over 100 loads");
}

/// Stores `n` keys of 100-byte values, pipelined.
fn fill(con: &mut Connection, n: usize) {
    for batch in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let mut p = redis::pipe();
        for i in batch {
            p.cmd("SET")
                .arg(format!("k:{i}"))
                .arg(&[b'v'; 100][..])
                .ignore();
        }
        p.query::<()>(con).unwrap();
    }
}

/// The flushed keyspace is freed on the lazy-free thread: FLUSHALL (SYNC, the
/// default) still replies only once the memory is back, as Redis 7's; ASYNC
/// replies at once, the keyspace already empty, and the memory comes back soon.
#[test]
fn flush_frees_sync_before_reply_async_after() {
    const N: usize = 200_000;
    let srv = TestServer::start();
    let mut con = srv.conn();
    let base = memory_field(&mut con, "used_memory");
    fill(&mut con, N);
    let full = memory_field(&mut con, "used_memory");
    assert!(full > base + (N * 100) as u64, "{base} -> {full}");
    let near_base = |used: u64| used < base + (full - base) / 10;

    assert_eq!(query(&mut con, &["FLUSHALL"]).unwrap(), Value::Okay);
    let used = memory_field(&mut con, "used_memory");
    assert!(
        near_base(used),
        "after FLUSHALL: {base} -> {full} -> {used}"
    );
    assert_eq!(memory_field(&mut con, "lazyfree_pending_objects"), 0);
    let freed = memory_field(&mut con, "lazyfreed_objects");
    assert!(freed > 0, "the keyspace was not freed in the background");

    fill(&mut con, N);
    assert_eq!(query(&mut con, &["FLUSHDB", "ASYNC"]).unwrap(), Value::Okay);
    let n: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(n, 0);
    query(&mut con, &["SET", "after", "v"]).unwrap();
    assert_eq!(
        query(&mut con, &["GET", "after"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let used = memory_field(&mut con, "used_memory");
        if near_base(used) && memory_field(&mut con, "lazyfree_pending_objects") == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "FLUSHDB ASYNC never freed: {used}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(memory_field(&mut con, "lazyfreed_objects") > freed);

    // Inside a transaction the shards stay locked while FLUSHALL SYNC waits.
    fill(&mut con, 1000);
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("FLUSHALL")
        .arg("SYNC")
        .cmd("SET")
        .arg("x")
        .arg("1")
        .cmd("DBSIZE")
        .query(&mut con)
        .unwrap();
    assert_eq!(replies, vec![Value::Okay, Value::Okay, Value::Int(1)]);
}

/// A big value is never freed under its shard's lock or on its client's loop.
/// DEL (and an overwrite) still replies once the memory is back, as Redis's does
/// by default; UNLINK, DEL with `lazyfree-lazy-user-del yes` and expiry leave it
/// to the lazy-free thread, which INFO counts.
#[test]
fn big_values_freed_before_del_replies_and_after_unlink() {
    const BIG: u64 = 32 << 20;
    let srv = TestServer::start();
    let mut con = srv.conn();
    let base = memory_field(&mut con, "used_memory");
    let make_big = |con: &mut Connection, key: &str| {
        query(con, &["SETRANGE", key, &(BIG - 1).to_string(), "x"]).unwrap();
        let used = memory_field(con, "used_memory");
        assert!(used > base + BIG / 4 * 3, "{key}: {base} -> {used}");
    };
    let back = |con: &mut Connection| memory_field(con, "used_memory") < base + BIG / 4;
    let lazyfreed = |con: &mut Connection| memory_field(con, "lazyfreed_objects");
    // Freed by the time its reply is read.
    let synchronous = |con: &mut Connection, cmd: &[&str], reply: Value| {
        let before = lazyfreed(con);
        assert_eq!(query(con, cmd).unwrap(), reply, "{cmd:?}");
        assert!(back(con), "{cmd:?} replied before the memory was back");
        assert_eq!(
            lazyfreed(con),
            before,
            "{cmd:?} went to the lazy-free thread"
        );
    };
    // Handed to the lazy-free thread, which frees it soon.
    let in_background = |con: &mut Connection, cmd: &[&str], reply: Value| {
        let before = lazyfreed(con);
        assert_eq!(query(con, cmd).unwrap(), reply, "{cmd:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while lazyfreed(con) == before || !back(con) {
            assert!(
                Instant::now() < deadline,
                "{cmd:?}: never freed in the background"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    make_big(&mut con, "a");
    synchronous(&mut con, &["DEL", "a", "missing"], Value::Int(1));
    make_big(&mut con, "b");
    synchronous(&mut con, &["SET", "b", "small"], Value::Okay);
    assert_eq!(
        query(&mut con, &["GET", "b"]).unwrap(),
        Value::BulkString(b"small".to_vec())
    );
    make_big(&mut con, "c");
    in_background(&mut con, &["UNLINK", "c"], Value::Int(1));
    query(
        &mut con,
        &["CONFIG", "SET", "lazyfree-lazy-user-del", "yes"],
    )
    .unwrap();
    make_big(&mut con, "d");
    in_background(&mut con, &["DEL", "d"], Value::Int(1));
    make_big(&mut con, "e");
    in_background(&mut con, &["PEXPIRE", "e", "1"], Value::Int(1));
    assert_eq!(
        query(&mut con, &["EXISTS", "a", "b", "c", "d", "e"]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(memory_field(&mut con, "lazyfree_pending_objects"), 0);
}

/// Freeing a big value holds up nobody else: with one loop, a PING sent while a
/// DEL (or an overwrite) of 256 MB is freeing it is answered before the DEL, which
/// replies once the memory is back. (Freeing it on the loop, as before, answers
/// the DEL first: the PING waits ~40 ms behind it.)
#[test]
fn freeing_a_big_value_holds_up_no_other_client() {
    use std::io::Read;
    // Written out in full: a value made by SETRANGE is untouched zero pages,
    // which cost nothing to free.
    let value: Vec<u8> = (0..256u32 << 20).map(|i| (i % 251) as u8).collect();
    let srv = TestServer::start_with(&["--threads", "1"]);
    let mut con = srv.conn();
    for cmd in [&["DEL", "big"][..], &["SET", "big", "small"]] {
        redis::cmd("SET")
            .arg("big")
            .arg(&value)
            .query::<()>(&mut con)
            .unwrap();
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        // The free takes tens of ms.
        let mut heavy = harness::ping_answered_during(srv.port, &args, Duration::from_millis(2));
        let mut reply = [0u8; 8];
        let expected: &[u8] = if cmd[0] == "DEL" {
            b":1\r\n"
        } else {
            b"+OK\r\n"
        };
        heavy.read_exact(&mut reply[..expected.len()]).unwrap();
        assert_eq!(&reply[..expected.len()], expected, "{cmd:?}");
    }
}

/// Stores two sets of 10,000 ids whose SINTERCARD takes about a third of a
/// millisecond, and returns that command and its reply. Small enough that the
/// command does not step aside by itself (its walk is within offload's
/// `LARGE_WALK`): what lets the loop go on is what the test is about.
fn two_big_sets(con: &mut Connection) -> (Vec<u8>, String) {
    let ids = 10_000u64;
    for (key, step) in [("a", 7u64), ("b", 3)] {
        let members: Vec<u64> = (0..ids).map(|i| i * step).collect();
        let added: u64 = redis::cmd("SADD")
            .arg(key)
            .arg(&members)
            .query(con)
            .unwrap();
        assert_eq!(added, ids);
    }
    // The walk (the smaller set's slots, once for each set) stays within
    // offload's LARGE_WALK, 32,768.
    let info: Vec<String> = redis::cmd("IDSET.INFO").arg("a").query(con).unwrap();
    let capacity: u64 = info[info.iter().position(|f| f == "capacity").unwrap() + 1]
        .parse()
        .unwrap();
    assert!(
        2 * capacity <= 32_768,
        "capacity {capacity}: SINTERCARD would step aside"
    );
    // Multiples of 21 below 3 × 10,000.
    let reply = format!(":{}\r\n", (3 * ids).div_ceil(21));
    (resp_cmd(&[b"SINTERCARD", b"2", b"a", b"b"]), reply)
}

/// A pipeline of heavy commands shares its loop: a connection's pass stops
/// once its commands have run a millisecond, so another client's PING, sent
/// while 300 SINTERCARDs (a third of a millisecond each) wait on the same loop, is
/// answered after a few of them. Run whole, as Redis runs what one read
/// brought, the pipeline answered all 300 first.
#[test]
fn a_pipeline_of_heavy_commands_shares_its_loop() {
    let srv = TestServer::start_with(&["--threads", "1"]);
    let (request, reply) = two_big_sets(&mut srv.conn());
    let n = 300;
    let mut heavy = srv.raw();
    let mut other = srv.raw();
    heavy.write_all(&request.repeat(n)).unwrap();
    // Its first reply: the pipeline's work is under way.
    assert_eq!(read_n(&mut heavy, reply.len()), reply.as_bytes());
    roundtrip(&mut other, b"PING\r\n", b"+PONG\r\n");
    heavy.set_nonblocking(true).unwrap();
    // What came before the PONG's was read: replies were still owed.
    let (early, _) = read_to_end(&mut heavy);
    let owed = (n - 1) * reply.len() - early.len();
    assert!(owed > 0, "the PING waited for all {n} pipelined commands");
    heavy.set_nonblocking(false).unwrap();
    let rest = read_n(&mut heavy, owed);
    assert_eq!([early, rest].concat(), reply.repeat(n - 1).into_bytes());
}

/// A long transaction lets its loop go on: past a millisecond, EXEC hands the
/// loop's other clients to another thread, as a long script does, so a PING
/// sent while 300 queued SINTERCARDs run is answered before EXEC's reply (it
/// waited for all of them before).
#[test]
fn a_long_transaction_lets_its_loop_go_on() {
    use std::io::Read;
    let srv = TestServer::start_with(&["--threads", "1"]);
    let (request, reply) = two_big_sets(&mut srv.conn());
    let n = 300;
    let mut heavy = srv.raw();
    let queued = b"+QUEUED\r\n".repeat(n);
    let mut multi = resp_cmd(&[b"MULTI"]);
    multi.extend(request.repeat(n));
    roundtrip(&mut heavy, &multi, &[&b"+OK\r\n"[..], &queued].concat());
    let mut other = srv.raw();
    // Served once before EXEC, so its PING is read as it comes.
    roundtrip(&mut other, b"PING\r\n", b"+PONG\r\n");
    heavy.write_all(&resp_cmd(&[b"EXEC"])).unwrap();
    // Long enough for EXEC to be read and under way.
    std::thread::sleep(Duration::from_millis(5));
    roundtrip(&mut other, b"PING\r\n", b"+PONG\r\n");
    heavy.set_nonblocking(true).unwrap();
    match heavy.read(&mut [0u8; 1]) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        r => panic!("EXEC replied before the PING was answered: {r:?}"),
    }
    heavy.set_nonblocking(false).unwrap();
    let want = format!("*{n}\r\n{}", reply.repeat(n));
    assert_eq!(read_n(&mut heavy, want.len()), want.as_bytes());
}

#[test]
fn time_lastsave_save_swapdb() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let t: Vec<String> = redis::cmd("TIME").query(&mut con).unwrap();
    assert_eq!(t.len(), 2);
    let (secs, micros): (i64, i64) = (t[0].parse().unwrap(), t[1].parse().unwrap());
    assert!((secs - now).abs() <= 2, "{secs} vs {now}");
    assert!((0..1_000_000).contains(&micros));
    let last: i64 = redis::cmd("LASTSAVE").query(&mut con).unwrap();
    assert!(last <= secs && secs - last < 60, "{last}");
    // SAVE and BGSAVE write a snapshot: tests/persistence.rs.
    assert_eq!(query(&mut con, &["SWAPDB", "0", "0"]).unwrap(), Value::Okay);
    assert_eq!(
        err_text(query(&mut con, &["SWAPDB", "0", "1"])),
        "ERR DB index is out of range"
    );
    assert_eq!(
        err_text(query(&mut con, &["SWAPDB", "x", "0"])),
        "ERR invalid first DB index"
    );
    assert_eq!(
        err_text(query(&mut con, &["SWAPDB", "0", "y"])),
        "ERR invalid second DB index"
    );
}

#[test]
fn memory_usage_and_friends() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let value = "v".repeat(1000);
    query(&mut con, &["SET", "key", &value]).unwrap();
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("key")
        .query(&mut con)
        .unwrap();
    assert!((1003..1003 + 512).contains(&usage), "{usage}");
    let sampled: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("key")
        .arg("SAMPLES")
        .arg("0")
        .query(&mut con)
        .unwrap();
    assert_eq!(sampled, usage);
    query(&mut con, &["SET", "small", "v"]).unwrap();
    let small: i64 = redis::cmd("MEMORY")
        .arg("usage")
        .arg("small")
        .query(&mut con)
        .unwrap();
    // ("key", 1000 bytes) against ("small", 1 byte): key and value bytes count exactly.
    assert_eq!(usage - small, (3 + 1000) - (5 + 1));
    assert_eq!(
        query(&mut con, &["MEMORY", "USAGE", "missing"]).unwrap(),
        Value::Nil
    );
    assert_eq!(
        err_text(query(&mut con, &["MEMORY", "USAGE", "key", "SAMPLES"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(
            &mut con,
            &["MEMORY", "USAGE", "key", "SAMPLES", "-1"]
        )),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(&mut con, &["MEMORY", "USAGE", "key", "SAMPLES", "x"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err_text(query(&mut con, &["MEMORY", "USAGE"])),
        "ERR wrong number of arguments for 'memory|usage' command"
    );

    let doctor: String = redis::cmd("MEMORY").arg("DOCTOR").query(&mut con).unwrap();
    assert!(doctor.starts_with("Hi Sam"), "{doctor}");
    let help: Vec<String> = redis::cmd("MEMORY").arg("HELP").query(&mut con).unwrap();
    assert!(
        help[0].starts_with("MEMORY <subcommand>")
            && help.iter().any(|l| l.starts_with("USAGE <key>"))
    );
    let stats: Vec<Value> = redis::cmd("MEMORY").arg("STATS").query(&mut con).unwrap();
    let keys: Vec<String> = stats
        .chunks(2)
        .filter_map(|p| match &p[0] {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect();
    for k in [
        "peak.allocated",
        "total.allocated",
        "keys.count",
        "dataset.bytes",
        "db.0",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
    let pos = keys.iter().position(|k| k == "keys.count").unwrap();
    assert_eq!(stats[pos * 2 + 1], Value::Int(2));
    assert_eq!(query(&mut con, &["MEMORY", "PURGE"]).unwrap(), Value::Okay);
}

#[test]
fn shutdown_closes_without_reply_and_exits_zero() {
    let mut srv = TestServer::start();
    let mut con = srv.conn();
    assert_eq!(
        err_text(query(&mut con, &["SHUTDOWN", "ABORT"])),
        "ERR No shutdown in progress."
    );
    assert_eq!(
        err_text(query(&mut con, &["SHUTDOWN", "NOW", "ABORT"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(&mut con, &["SHUTDOWN", "SAVE", "NOSAVE"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(query(&mut con, &["SHUTDOWN", "later"])),
        "ERR syntax error"
    );
    assert!(srv.alive());

    let mut s = srv.raw();
    s.write_all(&resp_cmd(&[b"SHUTDOWN", b"NOSAVE"])).unwrap();
    let (got, end) = read_to_end(&mut s);
    assert!(
        got.is_empty(),
        "no reply to SHUTDOWN, got {:?}",
        String::from_utf8_lossy(&got)
    );
    assert_ne!(end, ReadEnd::Timeout);
    let status = srv.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[test]
fn shutdown_from_redis_cli() {
    let mut srv = TestServer::start();
    let out = srv.cli(&["SHUTDOWN"]);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(srv.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn sigterm_exits_cleanly() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    query(&mut con, &["SET", "k", "v"]).unwrap();
    assert!(srv.terminate().success());
}

#[test]
fn config_file_is_applied() {
    let dir = std::env::temp_dir().join(format!("relcache-server-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("redis.conf");
    std::fs::write(
        &path,
        "# a relcache config\nmaxclients 7\nrequirepass \"pw\"\nmaxmemory 32mb\n",
    )
    .unwrap();
    // `--` ends the harness's multi-valued --bind, so the path is the positional file.
    let srv = TestServer::start_with(&["--", path.to_str().unwrap()]);
    let mut anon = srv.conn();
    assert!(err_text(query(&mut anon, &["CONFIG", "GET", "maxclients"])).starts_with("NOAUTH"));
    let client = redis::Client::open(format!("redis://:pw@127.0.0.1:{}/", srv.port)).unwrap();
    let mut con = client.get_connection().unwrap();
    assert_eq!(config_get(&mut con, "maxclients"), "7");
    assert_eq!(config_get(&mut con, "requirepass"), "pw");
    assert_eq!(config_get(&mut con, "maxmemory"), (32u64 << 20).to_string());
    assert_eq!(
        info_field(&info(&mut con, "clients"), "maxclients").as_deref(),
        Some("7")
    );
    drop(srv);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_bind_address_gets_a_listener() {
    let srv = TestServer::start_with(&["--bind", "127.0.0.1 ::1"]);
    for host in ["127.0.0.1", "::1"] {
        let client = redis::Client::open(format!(
            "redis://{}:{}/",
            if host == "::1" { "[::1]" } else { host },
            srv.port
        ))
        .unwrap();
        let mut con = client
            .get_connection()
            .unwrap_or_else(|e| panic!("connect to {host}: {e}"));
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG", "{host}");
    }
    let bind: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("bind")
        .query(&mut srv.conn())
        .unwrap();
    assert_eq!(bind, vec!["bind".to_string(), "127.0.0.1 ::1".to_string()]);
}

#[test]
fn every_help_reply_has_redis_shape() {
    // Redis 7's addReplyHelp: a header naming the command, the subcommand lines, then
    // HELP and its description, every line a status reply.
    let srv = TestServer::start();
    let mut con = srv.conn();
    for cmd in ["CONFIG", "MEMORY", "OBJECT", "CLIENT", "COMMAND"] {
        let help = query(&mut con, &[cmd, "HELP"]).unwrap();
        let Value::Array(lines) = help else {
            panic!("{cmd} HELP: {help:?}")
        };
        let lines: Vec<String> = lines
            .iter()
            .map(|l| match l {
                Value::SimpleString(s) => s.clone(),
                other => panic!("{cmd} HELP line is not a status reply: {other:?}"),
            })
            .collect();
        assert_eq!(
            lines[0],
            format!("{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
        );
        assert_eq!(lines[lines.len() - 2..], ["HELP", "    Prints this help."]);
        assert_eq!(
            lines.iter().filter(|l| *l == "HELP").count(),
            1,
            "{lines:?}"
        );
    }
}
