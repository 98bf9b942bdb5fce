//! maxmemory, eviction policies and the memory figures in INFO, against the real
//! server with the counting allocator installed.

mod harness;

use harness::fenced::{same_answers, Conn};
use harness::TestServer;
use relcache_protocol::idset::Builder;

fn info_field(con: &mut redis::Connection, field: &str) -> u64 {
    harness::info_stat(con, "default", field)
}

fn table(seed: u64, n: u64) -> Vec<u8> {
    let ids: Vec<u64> = (0..n)
        .map(|i| seed.wrapping_mul(1_000_003) ^ (i * 7 + 1))
        .collect();
    Builder::new().build(&ids)
}

/// Slack documented in the README: memory may exceed maxmemory by about one
/// request in flight per busy connection; these tests load one table at a time.
const SLACK: u64 = 2 * 1024 * 1024;

#[test]
fn loading_ten_times_maxmemory_evicts_cold_users_and_keeps_hot_ones() {
    let s = TestServer::start_with(&["--maxmemory", "64mb"]);
    let mut con = s.conn();
    let limit = 64 * 1024 * 1024;
    let t = table(1, 20_000); // ~213 KB
    let n = (10 * limit) / t.len() as u64;
    let hot: Vec<String> = (0..20).map(|i| format!("user:{i}")).collect();
    let mut peak = 0;
    for i in 0..n {
        let key = format!("user:{i}");
        let () = redis::cmd("SET").arg(&key).arg(&t).query(&mut con).unwrap();
        if i % 10 == 0 {
            // The hot users (those loaded so far) are asked about all the time.
            for k in hot.iter().take(i as usize + 1) {
                let _: Option<i64> = redis::cmd("IDSET.EXISTS")
                    .arg(k)
                    .arg(8)
                    .query(&mut con)
                    .unwrap();
            }
            peak = peak.max(info_field(&mut con, "used_memory"));
        }
    }
    let used = info_field(&mut con, "used_memory");
    assert!(used <= limit + SLACK, "used_memory {used} over limit");
    assert!(
        peak <= limit + SLACK,
        "peak sampled used_memory {peak} over limit"
    );
    let evicted = info_field(&mut con, "evicted_keys");
    assert!(evicted > n / 2, "evicted_keys {evicted} of {n}");
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(
        dbsize + evicted,
        n,
        "every key is either stored or counted as evicted"
    );
    for k in &hot {
        let exists: i64 = redis::cmd("EXISTS").arg(k).query(&mut con).unwrap();
        assert_eq!(exists, 1, "hot key {k} was evicted");
    }
    let cold_left = (20..n / 2).filter(|i| {
        redis::cmd("EXISTS")
            .arg(format!("user:{i}"))
            .query::<i64>(&mut con)
            .unwrap()
            == 1
    });
    assert_eq!(cold_left.count(), 0, "untouched early users should be gone");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn noeviction_refuses_writes_with_oom_and_keeps_serving_reads() {
    let s = TestServer::start_with(&["--maxmemory", "8mb", "--maxmemory-policy", "noeviction"]);
    let mut con = s.conn();
    let t = table(2, 20_000);
    let mut stored = 0;
    let err = loop {
        match redis::cmd("SET")
            .arg(format!("k{stored}"))
            .arg(&t)
            .query::<()>(&mut con)
        {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "never hit the limit");
    };
    assert!(stored > 10, "stored only {stored}");
    assert_eq!(err.code(), Some("OOM"), "{err}");
    assert!(
        err.to_string()
            .contains("command not allowed when used memory > 'maxmemory'"),
        "{err}"
    );
    let back: Vec<u8> = redis::cmd("IDSET.TABLE").arg("k0").query(&mut con).unwrap();
    assert_eq!(back, t, "reads still work");
    // A transaction of reads runs; one that would add data is refused whole.
    let (card,): (i64,) = redis::pipe()
        .atomic()
        .cmd("IDSET.CARD")
        .arg("k1")
        .query(&mut con)
        .unwrap();
    assert_eq!(card, 20_000);
    // Where the refused SET left memory is anywhere within one table of the limit,
    // and the server's own small allocations since (a connection, a command's first
    // latency histogram on a loop) may have crossed it. Deleting one table leaves
    // between one and two tables of room: the write queued next, over two tables,
    // queues (memory is under the limit) and cannot fit.
    let () = redis::cmd("DEL")
        .arg(format!("k{}", stored - 1))
        .query(&mut con)
        .unwrap();
    let big = table(3, 45_000);
    assert!(big.len() > 2 * t.len());
    let mut raw = s.raw();
    harness::roundtrip(&mut raw, &harness::resp_cmd(&[b"MULTI"]), b"+OK\r\n");
    harness::roundtrip(
        &mut raw,
        &harness::resp_cmd(&[b"SET", b"more", &big]),
        b"+QUEUED\r\n",
    );
    // Refused at EXEC, the transaction ends with EXECABORT and the reason, as a
    // refused EXEC does in Redis.
    harness::roundtrip(
        &mut raw,
        &harness::resp_cmd(&[b"EXEC"]),
        b"-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n",
    );
    harness::roundtrip(
        &mut raw,
        &harness::resp_cmd(&[b"DISCARD"]),
        b"-ERR DISCARD without MULTI\r\n",
    );
    // Over maxmemory now (it is lowered under what is stored), Redis 7.4 still
    // queues and runs a read-only transaction (7.2 refused every queued command);
    // a command that adds data is refused as it is queued, failing the EXEC.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1mb")
        .query(&mut con)
        .unwrap();
    let get_k1 = harness::resp_cmd(&[b"IDSET.CARD", b"k1"]);
    harness::roundtrip(&mut raw, &harness::resp_cmd(&[b"MULTI"]), b"+OK\r\n");
    harness::roundtrip(&mut raw, &get_k1, b"+QUEUED\r\n");
    harness::roundtrip(
        &mut raw,
        &harness::resp_cmd(&[b"EXEC"]),
        b"*1\r\n:20000\r\n",
    );
    harness::roundtrip(&mut raw, &harness::resp_cmd(&[b"MULTI"]), b"+OK\r\n");
    harness::roundtrip(&mut raw, &get_k1, b"+QUEUED\r\n");
    harness::roundtrip(
        &mut raw,
        &harness::resp_cmd(&[b"SET", b"more", b"x"]),
        b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
    );
    harness::roundtrip(
        &mut raw,
        &harness::resp_cmd(&[b"EXEC"]),
        b"-EXECABORT Transaction discarded because of previous errors.\r\n",
    );
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("8mb")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("more")
            .query::<i64>(&mut con)
            .unwrap(),
        0
    );
    let card: i64 = redis::cmd("IDSET.CARD").arg("k1").query(&mut con).unwrap();
    assert_eq!(card, 20_000);
    let deleted: i64 = redis::cmd("DEL")
        .arg("k0")
        .arg("k1")
        .arg("k2")
        .query(&mut con)
        .unwrap();
    // Deleting frees room: three tables, so the next one fits with margin.
    assert_eq!(deleted, 3, "deletes are not denied");
    let () = redis::cmd("SET")
        .arg("again")
        .arg(&t)
        .query(&mut con)
        .unwrap();
    assert_eq!(info_field(&mut con, "evicted_keys"), 0);
}

#[test]
fn policy_and_limit_are_settable_at_run_time_and_volatile_lru_spares_persistent_keys() {
    let s = TestServer::start();
    let mut con = s.conn();
    let t = table(3, 20_000);
    for i in 0..20 {
        let () = redis::cmd("SET")
            .arg(format!("persistent{i}"))
            .arg(&t)
            .query(&mut con)
            .unwrap();
    }
    let used = info_field(&mut con, "used_memory");
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("volatile-lru")
        .query(&mut con)
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used + 4 * 1024 * 1024)
        .query(&mut con)
        .unwrap();
    for i in 0..100 {
        let r = redis::cmd("SET")
            .arg(format!("volatile{i}"))
            .arg(&t)
            .arg("EX")
            .arg(1000)
            .query::<()>(&mut con);
        r.unwrap();
    }
    for i in 0..20 {
        let e: i64 = redis::cmd("EXISTS")
            .arg(format!("persistent{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(e, 1, "volatile-lru must not evict keys without a TTL");
    }
    assert!(info_field(&mut con, "evicted_keys") >= 70);
}

/// After FLUSHALL ASYNC the old keyspace is still being freed in the background:
/// a write that finds memory over the limit waits for it, neither evicting the
/// keys written since nor refusing with OOM.
#[test]
fn writes_after_flushall_async_wait_for_the_memory_instead_of_evicting() {
    let s = TestServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"]);
    let mut con = s.conn();
    let value = vec![b'v'; 1000];
    let mut i = 0;
    // Fill to the limit: noeviction refuses the write that would pass it.
    loop {
        let mut p = redis::pipe();
        for _ in 0..1000 {
            p.cmd("SET").arg(format!("k:{i}")).arg(&value);
            i += 1;
        }
        let replies: Vec<redis::RedisResult<redis::Value>> = match p.query(&mut con) {
            Ok(v) => v,
            Err(_) => break,
        };
        if replies.iter().any(|r| r.is_err()) {
            break;
        }
    }
    let () = redis::cmd("FLUSHALL").arg("ASYNC").query(&mut con).unwrap();
    for j in 0..1000 {
        let () = redis::cmd("SET")
            .arg(format!("after:{j}"))
            .arg(&value)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("SET after:{j} right after FLUSHALL ASYNC: {e}"));
    }
    let n: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(n, 1000);
    assert_eq!(info_field(&mut con, "evicted_keys"), 0);
}

#[test]
fn object_idletime_reports_recency() {
    let s = TestServer::start();
    let mut con = s.conn();
    let () = redis::cmd("SET").arg("a").arg("1").query(&mut con).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert!((2..=3).contains(&idle), "idle {idle}");
    let _: String = redis::cmd("GET").arg("a").query(&mut con).unwrap();
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(idle, 0);
}

/// INFO's stats once, as numbers: several fields from one INFO, which as a
/// command evicts too.
fn stats(con: &mut redis::Connection, fields: &[&str]) -> Vec<u64> {
    let info: String = redis::cmd("INFO").arg("default").query(con).unwrap();
    fields
        .iter()
        .map(|f| harness::info_value(&info, f))
        .collect()
}

fn config_set(con: &mut redis::Connection, name: &str, value: &str) {
    redis::cmd("CONFIG")
        .arg(&["SET", name, value])
        .query::<()>(con)
        .unwrap();
}

/// Fills the server with `n` keys of 100 bytes and lowers `maxmemory` to two
/// thirds of the memory they took, inside a transaction, where CONFIG SET
/// evicts nothing itself (the transaction holds shard locks the evictor
/// needs). Returns the limit.
fn fill_and_lower_the_limit(con: &mut redis::Connection, n: u64) -> u64 {
    // The Lua state is made before the baseline is read.
    let one: i64 = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query(con)
        .unwrap();
    assert_eq!(one, 1);
    let base = info_field(con, "used_memory");
    let pairs: Vec<(String, String)> = (0..n)
        .map(|i| (format!("k:{i}"), "v".repeat(100)))
        .collect();
    for chunk in pairs.chunks(10_000) {
        redis::cmd("MSET").arg(chunk).query::<()>(con).unwrap();
    }
    config_set(con, "maxmemory-policy", "allkeys-random");
    let full = info_field(con, "used_memory");
    let limit = base + (full - base) * 2 / 3;
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("CONFIG")
        .arg(&["SET", "maxmemory", &limit.to_string()])
        .query(con)
        .unwrap();
    limit
}

/// Keys evicted by commands (all evicted less the background loop's), and all.
fn evicted_by_commands(con: &mut redis::Connection) -> (u64, u64) {
    let v = stats(con, &["evicted_keys", "evicted_keys_background"]);
    (v[0].saturating_sub(v[1]), v[0])
}

/// A command that adds nothing evicts for a moment when memory is over the
/// limit, as Redis bounds each command's eviction in time, and goes on; one
/// that adds data, or may write from a script, evicts until under first.
/// (Every command evicted until under: an INFO after a lowered limit evicted
/// 200,000 keys, and held its loop as long.)
#[test]
fn a_command_that_adds_nothing_evicts_for_a_moment_only() {
    let s = TestServer::start();
    let mut con = s.conn();
    let n = 200_000;
    // A moment of nothing: the clock is looked at after 16 keys, as Redis's.
    config_set(&mut con, "maxmemory-eviction-tenacity", "0");
    let limit = fill_and_lower_the_limit(&mut con, n);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    // PING and INFO: 16 keys each at most, whatever the background loop
    // evicts beside them.
    let (by_commands, _) = evicted_by_commands(&mut con);
    assert!(
        by_commands <= 2 * 16,
        "{by_commands} keys evicted by PING and INFO"
    );
    // A script may write only if memory is under when it starts, or can be
    // made so: it evicts until under before it runs, and its own compilation
    // and Lua stack are not held against it.
    let set: String = redis::cmd("EVAL")
        .arg("return redis.call('set', KEYS[1], 'v')")
        .arg(1)
        .arg("scripted")
        .query(&mut con)
        .unwrap();
    assert_eq!(set, "OK");
    let v = stats(&mut con, &["used_memory", "evicted_keys"]);
    assert!(v[1] > n / 10, "{} evicted in all", v[1]);
    assert!(v[0] <= limit + SLACK, "used_memory {} over {limit}", v[0]);
    // At tenacity 100 a moment lasts until memory is under.
    config_set(&mut con, "maxmemory-eviction-tenacity", "100");
    // 2 MB less: some 20,000 keys to go. (Not much lower: the tables keep
    // their room until they are under a tenth full.)
    let lower = limit - 2 * 1024 * 1024;
    let (before, _) = evicted_by_commands(&mut con);
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("CONFIG")
        .arg(&["SET", "maxmemory", &lower.to_string()])
        .query(&mut con)
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let v = stats(
        &mut con,
        &[
            "used_memory",
            "evicted_keys",
            "evicted_keys_background",
            "mem_not_counted_for_evict",
        ],
    );
    let data = v[0] - v[3];
    assert!(data <= lower + 64 * 1024, "{data} bytes of data after PING");
    // Most of it by the PING, whatever the background loop did meanwhile.
    let by_commands = (v[1] - v[2]) - before;
    assert!(
        by_commands > 1_000,
        "{by_commands} keys evicted by the PING"
    );
}

/// A transaction that queued a script evicts until under before it runs, as
/// the script would alone: the script's writes are not refused for memory a
/// longer eviction would have made, nor made while memory stays over.
#[test]
fn a_transaction_that_queued_a_script_evicts_until_under() {
    let s = TestServer::start();
    let mut con = s.conn();
    config_set(&mut con, "maxmemory-eviction-tenacity", "0");
    let limit = fill_and_lower_the_limit(&mut con, 200_000);
    let (before, _) = evicted_by_commands(&mut con);
    let (set,): (String,) = redis::pipe()
        .atomic()
        .cmd("EVAL")
        .arg("return redis.call('set', KEYS[1], 'v')")
        .arg(1)
        .arg("scripted")
        .query(&mut con)
        .unwrap();
    assert_eq!(set, "OK");
    let v = stats(
        &mut con,
        &[
            "used_memory",
            "mem_not_counted_for_evict",
            "evicted_keys",
            "evicted_keys_background",
        ],
    );
    // What the script compiled and cached came after the eviction.
    let data = v[0] - v[1];
    assert!(data <= limit + SLACK, "{data} bytes of data, limit {limit}");
    let by_exec = (v[2] - v[3]) - before;
    assert!(by_exec > 1_000, "{by_exec} keys evicted by EXEC");
}

#[test]
fn memory_left_over_the_limit_comes_back_with_no_command() {
    let s = TestServer::start();
    let mut con = s.conn();
    // Commands evict 16 keys each at most, so what comes back is the background's.
    config_set(&mut con, "maxmemory-eviction-tenacity", "0");
    let limit = fill_and_lower_the_limit(&mut con, 200_000);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut polls = 0;
    let v = loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        polls += 1;
        let v = stats(
            &mut con,
            &[
                "used_memory",
                "evicted_keys",
                "evicted_keys_background",
                "current_eviction_exceeded_time",
                "total_eviction_exceeded_time",
            ],
        );
        // Over for a while, and no longer: the spell has ended.
        if (v[3] == 0 && v[4] > 0) || std::time::Instant::now() > deadline {
            break v;
        }
    };
    let [used, evicted, background, current, total] = v[..] else {
        unreachable!()
    };
    // INFO's used_memory counts the connection too, which eviction does not.
    assert!(
        used <= limit + SLACK,
        "used_memory {used} still over {limit}"
    );
    assert!(
        // An INFO evicts 16 keys at most at tenacity 0.
        background + 16 * polls >= evicted && background > 20_000,
        "{background} of {evicted} keys evicted in the background, {polls} INFOs"
    );
    assert_eq!(current, 0, "still over, {total} ms in all");
    assert!(total > 0, "total_eviction_exceeded_time {total}");
}

#[test]
fn time_spent_over_the_limit_shows_in_info_until_the_limit_is_lifted() {
    let s = TestServer::start();
    let mut con = s.conn();
    for i in 0..100 {
        let () = redis::cmd("SET").arg(i).arg("v").query(&mut con).unwrap();
    }
    config_set(&mut con, "maxmemory-policy", "noeviction");
    config_set(&mut con, "maxmemory", "1");
    let refused = redis::cmd("SET").arg("x").arg("y").query::<()>(&mut con);
    assert!(refused.unwrap_err().to_string().contains("OOM"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let fields = [
        "current_eviction_exceeded_time",
        "total_eviction_exceeded_time",
    ];
    let v = stats(&mut con, &fields);
    assert!(v[0] >= 250 && v[1] >= v[0], "{v:?} ms over");
    // No limit: the spell ends (Redis's goes on counting until a command
    // finds memory under a limit again).
    config_set(&mut con, "maxmemory", "0");
    let v = stats(&mut con, &fields);
    assert!(v[0] == 0 && v[1] >= 250, "{v:?} ms over");
    // CONFIG RESETSTAT clears it, as Redis's.
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    assert_eq!(stats(&mut con, &fields), [0, 0]);
}

/// A script finds out whether memory is over once, before it runs, and then
/// only its first write can be refused; a script with flags is refused whole,
/// unless it writes nothing or allows it. The answers are Redis's, byte for byte.
#[test]
fn scripts_under_a_full_memory_are_refused_as_redis_refuses_them() {
    let ours = TestServer::start();
    let theirs = harness::real_redis::RedisServer::start();
    let (mut a, mut b) = (Conn::new(ours.port), Conn::new(theirs.port));
    let flagged = "#!lua\nreturn redis.call('set',KEYS[1],'1')";
    let allowed = "#!lua flags=allow-oom\nreturn redis.call('set',KEYS[1],'1')";
    let reads = "#!lua flags=no-writes\nreturn 1";
    let requests: &[&[&str]] = &[
        &["SET", "a", "1"],
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        &["CONFIG", "SET", "maxmemory", "1"],
        &["SET", "b", "1"],
        // A delete first: the write after it is not refused.
        &[
            "EVAL",
            "redis.call('del',KEYS[1]); return redis.call('set',KEYS[2],'1')",
            "2",
            "a",
            "c",
        ],
        &["EVAL", "return redis.call('set',KEYS[1],'1')", "1", "c"],
        &["EVAL", "return redis.pcall('set',KEYS[1],'1')", "1", "c"],
        &[
            "EVAL",
            "redis.pcall('set',KEYS[1],'1'); redis.call('del',KEYS[2]); return redis.call('set',KEYS[3],'1')",
            "3",
            "c",
            "zz",
            "d",
        ],
        &["EVAL", allowed, "1", "e"],
        &["EVAL", flagged, "1", "e"],
        // Loaded, not run; run by name, refused the same ways.
        &["SCRIPT", "LOAD", flagged],
        &["EVALSHA", "2151481cfdcaa0ac1d453104bce267da9b041e86", "1", "e"],
        &["EVALSHA", "caeeee01384f6b04384c56d69c27aa65287fb306", "1", "c"],
        &["EVALSHA_RO", "caeeee01384f6b04384c56d69c27aa65287fb306", "1", "c"],
        // Refused before its arguments are looked at.
        &["EVAL", flagged, "-1"],
        &["EVAL_RO", "#!lua\nreturn 1", "0"],
        &["EVAL", reads, "0"],
        &["EVAL", "return 1", "0"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["EVAL", flagged, "1", "e"],
        &["MGET", "a", "b", "c", "d", "e"],
    ];
    same_answers(&mut a, &mut b, requests, "under maxmemory", Conn::reply);
}

/// Tables emptied by DEL give their room back within a few background rounds,
/// as Redis shrinks a dict under a tenth full: 200,000 keys deleted left 26 MB
/// of empty tables in use.
#[test]
fn emptied_tables_give_their_memory_back() {
    let s = TestServer::start();
    let mut con = s.conn();
    let base = info_field(&mut con, "used_memory");
    let keys: Vec<String> = (0..200_000).map(|i| format!("k:{i}")).collect();
    for chunk in keys.chunks(10_000) {
        let pairs: Vec<(&String, &str)> = chunk.iter().map(|k| (k, "v")).collect();
        redis::cmd("MSET")
            .arg(&pairs)
            .query::<()>(&mut con)
            .unwrap();
    }
    let full = info_field(&mut con, "used_memory");
    for chunk in keys.chunks(10_000) {
        let _: u64 = redis::cmd("DEL").arg(chunk).query(&mut con).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut used = info_field(&mut con, "used_memory");
    while used > base + (full - base) / 10 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        used = info_field(&mut con, "used_memory");
    }
    assert!(
        used <= base + (full - base) / 10,
        "used_memory {used}: {base} before 200,000 keys, {full} with them"
    );
    // The shrunk tables still serve.
    let () = redis::cmd("SET")
        .arg("k:1")
        .arg("w")
        .query(&mut con)
        .unwrap();
    let v: String = redis::cmd("GET").arg("k:1").query(&mut con).unwrap();
    assert_eq!(v, "w");
}

/// Server CPU time so far (user + system, all threads), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Memory over a limit that no eviction can meet (a volatile policy, no key
/// with a TTL) is given up on until the next background round (the eviction
/// ends stuck), not evicted for in a loop that finds nothing: the server stays
/// idle.
#[test]
fn a_limit_nothing_can_meet_costs_no_cpu_while_idle() {
    let s = TestServer::start_with(&["--hz", "100"]);
    let mut con = s.conn();
    let pairs: Vec<(String, String)> = (0..20_000)
        .map(|i| (format!("k:{i}"), "v".repeat(100)))
        .collect();
    redis::cmd("MSET")
        .arg(&pairs)
        .query::<()>(&mut con)
        .unwrap();
    config_set(&mut con, "maxmemory-policy", "volatile-lru");
    config_set(&mut con, "maxmemory-eviction-tenacity", "0");
    config_set(&mut con, "maxmemory", "1mb");
    let over: u64 = stats(&mut con, &["current_eviction_exceeded_time"])[0];
    let before = cpu_ticks(s.pid());
    std::thread::sleep(std::time::Duration::from_secs(2));
    let used = cpu_ticks(s.pid()) - before;
    // 2 s are 200 ticks; a thread spinning on the eviction would take most of
    // a core.
    assert!(used < 50, "{used} ticks of CPU in 2 s idle");
    let v = stats(
        &mut con,
        &["evicted_keys", "current_eviction_exceeded_time"],
    );
    assert_eq!(v[0], 0, "nothing a volatile policy may evict");
    assert!(
        v[1] >= over + 1_500,
        "still over: {} ms, {over} before",
        v[1]
    );
}
