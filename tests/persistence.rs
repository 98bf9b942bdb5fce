//! Snapshots end to end, against the real binary: SAVE / BGSAVE / the save policy /
//! SHUTDOWN SAVE / SIGTERM write a snapshot, a restart (after SIGKILL) loads it
//! back with members, SEQ and TTLs; clients see -LOADING during a slow load; a
//! damaged file is refused with its offset and section and the server exits
//! non-zero (or starts empty when told to).

mod harness;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{info_stat, server_bin, Raw, TempDir, TestServer};
use relcache_protocol::snapshot::{ChunkBuilder, Encoder, Record, Snapshot};

fn start_in(dir: &TempDir, extra: &[&str]) -> TestServer {
    let mut args = vec!["--dir", dir.path()];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

fn q<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn persistence<T: std::str::FromStr>(con: &mut redis::Connection, name: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    info_stat(con, "persistence", name)
}

/// Polls `cond` every 20 ms for up to `secs` seconds.
fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a server on `dir` and waits until it has loaded its snapshot.
fn restart_loaded(dir: &TempDir) -> (TestServer, redis::Connection) {
    let srv = start_in(dir, &[]);
    let mut con = srv.conn();
    eventually(20, "the load", || {
        persistence::<u8>(&mut con, "loading") == 0
    });
    (srv, con)
}

#[test]
fn save_then_sigkill_and_restart_gives_back_strings_sets_seq_and_ttls() {
    let dir = TempDir::new("roundtrip");
    let srv = start_in(&dir, &[]);
    let mut con = srv.conn();
    for i in 0..500 {
        let _: () = q(
            &mut con,
            &["SET", &format!("str:{i}"), &format!("value-{i}")],
        );
    }
    let _: () = q(&mut con, &["SET", "binary", "\u{0}\u{1}\r\n"]);
    let _: i64 = q(
        &mut con,
        &["SADD", "plain", "1", "2", "18446744073709551615", "0"],
    );
    let _: i64 = q(
        &mut con,
        &[
            "IDSET.LOAD",
            "following:1",
            "SEQ",
            "7",
            "IDS",
            "10",
            "20",
            "30",
        ],
    );
    let big: Vec<String> = (1..=5000).map(|i| (i * 7919).to_string()).collect();
    let mut sadd = vec!["SADD", "big"];
    sadd.extend(big.iter().map(String::as_str));
    let _: i64 = q(&mut con, &sadd);
    let _: i64 = q(&mut con, &["IDSET.REM", "big", "7919"]);
    let _: () = q(&mut con, &["SET", "ttl", "v", "EX", "1000"]);
    let _: () = q(&mut con, &["SET", "short", "v", "PX", "300"]);
    assert!(persistence::<u64>(&mut con, "rdb_changes_since_last_save") >= 505);
    let table_before: Vec<u8> = q(&mut con, &["IDSET.TABLE", "big"]);

    let before = unix_ms();
    assert_eq!(q::<String>(&mut con, &["SAVE"]), "OK");
    let after = unix_ms();
    assert_eq!(
        persistence::<u64>(&mut con, "rdb_changes_since_last_save"),
        0
    );
    assert_eq!(persistence::<u64>(&mut con, "rdb_saves"), 1);
    let lastsave: u64 = q(&mut con, &["LASTSAVE"]);
    assert!((before / 1000..=after / 1000).contains(&lastsave));
    drop(con);
    drop(srv); // SIGKILL
               // "short" expires while the server is down.
    std::thread::sleep(Duration::from_millis(400));

    let (_srv, mut con) = restart_loaded(&dir);
    for i in (0..500).step_by(37) {
        let v: String = q(&mut con, &["GET", &format!("str:{i}")]);
        assert_eq!(v, format!("value-{i}"));
    }
    assert_eq!(q::<Vec<u8>>(&mut con, &["GET", "binary"]), b"\x00\x01\r\n");
    let mut plain: Vec<u64> = q(&mut con, &["SMEMBERS", "plain"]);
    plain.sort_unstable();
    assert_eq!(plain, [0, 1, 2, u64::MAX]);
    assert_eq!(q::<i64>(&mut con, &["SCARD", "big"]), 4999);
    assert_eq!(
        q::<Vec<u8>>(&mut con, &["IDSET.TABLE", "big"]),
        table_before,
        "verbatim"
    );
    let info: Vec<String> = q(&mut con, &["IDSET.INFO", "following:1"]);
    let seq_at = info
        .iter()
        .position(|v| v == "seq")
        .expect("seq in IDSET.INFO");
    assert_eq!(info[seq_at + 1], "7", "{info:?}");
    // The set still takes sequenced changes in order after the restart.
    assert_eq!(
        q::<i64>(
            &mut con,
            &["IDSET.ADD", "following:1", "XX", "SEQ", "8", "40"]
        ),
        1
    );
    let ttl: i64 = q(&mut con, &["TTL", "ttl"]);
    assert!((990..=1000).contains(&ttl), "{ttl}");
    assert!(
        !q::<bool>(&mut con, &["EXISTS", "short"]),
        "expired while down"
    );
    assert_eq!(q::<u64>(&mut con, &["DBSIZE"]), 505);
    assert_eq!(
        persistence::<u64>(&mut con, "rdb_last_load_keys_loaded"),
        505
    );
    assert_eq!(
        persistence::<u64>(&mut con, "rdb_last_load_keys_expired"),
        1
    );
    let ctime: u64 = persistence(&mut con, "rdb_last_load_ctime_ms");
    assert!(
        (before..=after).contains(&ctime),
        "{before} <= {ctime} <= {after}"
    );
    assert_eq!(
        persistence::<u64>(&mut con, "rdb_changes_since_last_save"),
        1
    );
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn a_server_that_started_empty_reports_ctime_zero() {
    let dir = TempDir::new("empty");
    let srv = start_in(&dir, &[]);
    let mut con = srv.conn();
    assert_eq!(persistence::<u64>(&mut con, "rdb_last_load_ctime_ms"), 0);
    assert_eq!(persistence::<u8>(&mut con, "aof_enabled"), 0);
    assert_eq!(
        persistence::<String>(&mut con, "rdb_last_bgsave_status"),
        "ok"
    );
    assert_eq!(
        q::<Vec<String>>(&mut con, &["CONFIG", "GET", "dbfilename"]),
        ["dbfilename", "dump.rcs"]
    );
    assert_eq!(
        q::<Vec<String>>(&mut con, &["CONFIG", "GET", "dir"]),
        [
            "dir",
            Path::new(dir.path())
                .canonicalize()
                .unwrap()
                .to_str()
                .unwrap()
        ]
    );
}

#[test]
fn bgsave_while_clients_write_completes_and_loads() {
    let dir = TempDir::new("bgsave");
    let srv = start_in(&dir, &[]);
    let mut con = srv.conn();
    for chunk in 0..20 {
        let mut mset = vec!["MSET".to_string()];
        for i in chunk * 1000..(chunk + 1) * 1000 {
            mset.push(format!("k{i}"));
            mset.push(format!("v{i}"));
        }
        let args: Vec<&str> = mset.iter().map(String::as_str).collect();
        let _: () = q(&mut con, &args);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, writes) = (stop.clone(), writes.clone());
        let mut w = srv.conn();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                let _: () = q(&mut w, &["SET", &format!("w{}", n % 5000), &n.to_string()]);
                let _: i64 = q(&mut w, &["SADD", "growing", &n.to_string()]);
                n += 1;
                writes.fetch_add(1, Relaxed);
            }
        })
    };
    eventually(10, "the writer", || writes.load(Relaxed) > 100);
    assert_eq!(
        q::<String>(&mut con, &["BGSAVE"]),
        "Background saving started"
    );
    eventually(60, "the background save", || {
        persistence::<u8>(&mut con, "rdb_bgsave_in_progress") == 0
            && persistence::<u64>(&mut con, "rdb_saves") == 1
    });
    let during = writes.load(Relaxed);
    stop.store(true, Relaxed);
    writer.join().unwrap();
    assert_eq!(
        persistence::<String>(&mut con, "rdb_last_bgsave_status"),
        "ok"
    );
    assert!(persistence::<i64>(&mut con, "rdb_last_bgsave_time_sec") >= 0);
    assert!(during > 100);
    drop(con);
    drop(srv);

    let (_srv, mut con) = restart_loaded(&dir);
    // Every key that existed before the save started and was not touched since.
    for i in (0..20_000).step_by(97) {
        assert_eq!(
            q::<String>(&mut con, &["GET", &format!("k{i}")]),
            format!("v{i}")
        );
    }
    assert!(q::<u64>(&mut con, &["SCARD", "growing"]) > 0);
}

#[test]
fn bgsave_replies_match_redis() {
    let dir = TempDir::new("replies");
    let srv = start_in(&dir, &[]);
    let mut raw = Raw::new(&srv);
    raw.expect_err(&["BGSAVE", "NOW"], "ERR syntax error");
    raw.expect(&["MULTI"], b"+OK\r\n");
    raw.expect(&["BGSAVE"], b"+QUEUED\r\n");
    raw.expect(&["BGSAVE", "SCHEDULE"], b"+QUEUED\r\n");
    let exec = raw.call(&["EXEC"]);
    let text = String::from_utf8_lossy(&exec);
    assert!(
        text.contains("-ERR Another child process is active (AOF?): can't BGSAVE right now."),
        "{text}"
    );
    assert!(text.contains("+Background saving scheduled"), "{text}");
    let mut con = srv.conn();
    eventually(20, "the scheduled save", || {
        persistence::<u64>(&mut con, "rdb_saves") == 1
    });
    raw.expect(&["MULTI"], b"+OK\r\n");
    raw.expect_err(&["SAVE"], "ERR Command not allowed inside a transaction");
    raw.expect(&["DISCARD"], b"+OK\r\n");
    assert!(dir.file().exists());
}

/// Starts the binary on a directory holding a damaged snapshot; returns its exit
/// status and log (it must exit on its own).
fn start_expecting_exit(dir: &TempDir, extra: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new(server_bin())
        .args(["--port", "0", "--dir", dir.path()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let out = out.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(60));
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A small snapshot made by the server itself: strings, a small set, a paged set.
fn saved_snapshot(dir: &TempDir) -> Vec<u8> {
    let srv = start_in(dir, &[]);
    let mut con = srv.conn();
    let _: () = q(&mut con, &["SET", "a", "1"]);
    let _: i64 = q(&mut con, &["SADD", "small", "1", "2"]);
    let ids: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
    let mut sadd = vec!["SADD", "paged"];
    sadd.extend(ids.iter().map(String::as_str));
    let _: i64 = q(&mut con, &sadd);
    assert_eq!(q::<String>(&mut con, &["SAVE"]), "OK");
    std::fs::read(dir.file()).unwrap()
}

#[test]
fn damaged_snapshots_are_refused_with_offset_and_section() {
    let dir = TempDir::new("corrupt");
    let good = saved_snapshot(&dir);
    assert!(good.len() > 8192, "the paged table is there");
    let chunk_records = 32 + 32 + 3;
    let paged_table = {
        let snap = Snapshot::open(&good).unwrap();
        let mut found = None;
        for span in snap.chunks() {
            for r in snap.records(span).unwrap() {
                if let Record::Set {
                    table,
                    table_offset,
                    ..
                } = r.unwrap()
                {
                    if table.len() >= 4096 {
                        found = Some(table_offset as usize);
                    }
                }
            }
        }
        found.expect("a paged table")
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", good[..good.len() - 7].to_vec(), "trailer"),
        ("half", good[..good.len() / 2].to_vec(), "byte"),
        ("header", flip(&good, 17), "(header)"),
        ("records", flip(&good, chunk_records), "records"),
        ("table", flip(&good, paged_table + 100), "tables"),
        ("trailer", flip(&good, good.len() - 5), "(trailer)"),
        ("empty", Vec::new(), "(header)"),
    ];
    for (name, bytes, section) in cases {
        std::fs::write(dir.file(), &bytes).unwrap();
        let (status, log) = start_expecting_exit(&dir, &[]);
        assert!(!status.success(), "{name}: started from a damaged file");
        assert!(log.contains("snapshot refused at byte "), "{name}: {log}");
        assert!(log.contains(section), "{name}: no {section} in {log}");
        assert!(!log.contains("panicked"), "{name}: {log}");
    }
}

fn flip(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] ^= 0x04;
    b
}

#[test]
fn start_empty_serves_an_empty_cache_from_a_damaged_file() {
    let dir = TempDir::new("start-empty");
    let good = saved_snapshot(&dir);
    std::fs::write(dir.file(), flip(&good, 20)).unwrap();
    let srv = start_in(&dir, &["--snapshot-load-corrupt", "start-empty"]);
    let mut con = srv.conn();
    eventually(20, "the refused load", || {
        persistence::<u8>(&mut con, "loading") == 0
    });
    assert_eq!(q::<u64>(&mut con, &["DBSIZE"]), 0);
    assert_eq!(persistence::<u64>(&mut con, "rdb_last_load_keys_loaded"), 0);
    srv.wait_log("the refusal is logged", |l| l.contains("starting empty"));
}

#[test]
fn shutdown_save_saves_and_nosave_does_not() {
    let dir = TempDir::new("shutdown");
    let mut srv = start_in(&dir, &["--save", "3600 1"]);
    let mut con = srv.conn();
    let _: () = q(&mut con, &["SET", "k", "v"]);
    let _ = q::<redis::Value>(&mut con, &["PING"]);
    assert!(redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query::<()>(&mut con)
        .is_err());
    assert!(srv.wait_exit(Duration::from_secs(20)).success());
    assert!(!dir.file().exists(), "NOSAVE wrote a snapshot");

    let mut srv = start_in(&dir, &[]);
    let mut con = srv.conn();
    let _: () = q(&mut con, &["SET", "k", "v"]);
    assert!(redis::cmd("SHUTDOWN")
        .arg("SAVE")
        .query::<()>(&mut con)
        .is_err());
    assert!(srv.wait_exit(Duration::from_secs(20)).success());
    assert!(dir.file().exists());
    let (_srv, mut con) = restart_loaded(&dir);
    assert_eq!(q::<String>(&mut con, &["GET", "k"]), "v");
}

#[test]
fn sigterm_saves_when_a_policy_is_set_and_not_otherwise() {
    let dir = TempDir::new("sigterm");
    let srv = start_in(&dir, &[]);
    let _: () = q(&mut srv.conn(), &["SET", "k", "v"]);
    assert!(srv.terminate().success());
    assert!(!dir.file().exists(), "no policy, no snapshot");

    let srv = start_in(&dir, &["--save", "3600 1"]);
    let _: () = q(&mut srv.conn(), &["SET", "k", "v"]);
    assert!(srv.terminate().success());
    assert!(dir.file().exists());
    let (_srv, mut con) = restart_loaded(&dir);
    assert_eq!(q::<String>(&mut con, &["GET", "k"]), "v");
}

#[test]
fn the_save_policy_fires_and_config_set_changes_it() {
    let dir = TempDir::new("policy");
    let srv = start_in(&dir, &[]);
    let mut con = srv.conn();
    assert_eq!(
        q::<Vec<String>>(&mut con, &["CONFIG", "GET", "save"]),
        ["save", ""]
    );
    let _: () = q(&mut con, &["CONFIG", "SET", "save", "1 2"]);
    assert_eq!(
        q::<Vec<String>>(&mut con, &["CONFIG", "GET", "save"]),
        ["save", "1 2"]
    );
    let e = redis::cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("1 2 3")
        .query::<()>(&mut con);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("Invalid save parameters"));
    let _: () = q(&mut con, &["SET", "a", "1"]);
    let _: () = q(&mut con, &["SET", "b", "2"]);
    eventually(30, "the policy's save", || {
        persistence::<u64>(&mut con, "rdb_saves") >= 1
    });
    assert!(dir.file().exists());
    assert_eq!(
        persistence::<String>(&mut con, "rdb_last_bgsave_status"),
        "ok"
    );
}

/// A snapshot of `n` short strings, written with the protocol crate.
fn write_big_snapshot(path: &Path, n: usize) {
    let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut enc = Encoder::new(file, 1_234_567).unwrap();
    for part in keys.chunks(10_000) {
        let mut chunk = ChunkBuilder::new();
        for k in part {
            chunk.string(k.as_bytes(), b"some value", 0);
        }
        enc.write_chunk(&chunk).unwrap();
    }
    enc.finish().unwrap();
}

#[test]
fn clients_get_loading_during_a_slow_load() {
    let dir = TempDir::new("loading");
    write_big_snapshot(&dir.file(), 3_000_000);
    let srv = start_in(&dir, &[]);
    let mut raw = Raw::new(&srv);
    // The harness saw the server answer PING; the load of 3M keys is still going.
    raw.expect_err(
        &["GET", "key:1"],
        "LOADING Redis is loading the dataset in memory",
    );
    raw.expect_err(
        &["SET", "x", "1"],
        "LOADING Redis is loading the dataset in memory",
    );
    let info = String::from_utf8_lossy(&raw.call(&["INFO", "persistence"])).into_owned();
    assert!(info.contains("loading:1"), "{info}");
    assert!(info.contains("loading_total_bytes:"), "{info}");
    eventually(120, "the load", || {
        raw.call(&["GET", "key:1"]) == b"$10\r\nsome value\r\n"
    });
    let mut con = srv.conn();
    assert_eq!(q::<u64>(&mut con, &["DBSIZE"]), 3_000_000);
    assert_eq!(
        persistence::<u64>(&mut con, "rdb_last_load_ctime_ms"),
        1_234_567
    );
    assert_eq!(
        persistence::<u64>(&mut con, "rdb_changes_since_last_save"),
        0
    );
}

/// `dir` and `dbfilename` are protected as in Redis 7 (`enable-protected-configs no`):
/// a client that could set them could make SAVE write a file of its choosing.
#[test]
fn dir_and_dbfilename_are_protected_configs() {
    let dir = TempDir::new("protected");
    let srv = start_in(&dir, &[]);
    let mut raw = Raw::new(&srv);
    for (name, value) in [("dir", "/tmp"), ("dbfilename", "x.rcs")] {
        raw.expect_err(
            &["CONFIG", "SET", name, value],
            &format!("ERR CONFIG SET failed (possibly related to argument '{name}') - can't set protected config"),
        );
    }
    let mut con = srv.conn();
    assert_eq!(
        q::<Vec<String>>(&mut con, &["CONFIG", "GET", "dbfilename"]),
        ["dbfilename", "dump.rcs"]
    );
}
