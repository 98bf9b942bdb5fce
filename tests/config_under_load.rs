//! CONFIG SET under load, as a property: worker connections keep writing and
//! reading their own strings, sets and tables while another connection sets every
//! parameter `CONFIG GET *` lists (but the password and the immutable ones) to
//! random values, valid and not.
//!
//! Invariants: the server stays up; a refused value gets Redis's `CONFIG SET failed`
//! error and changes nothing; an accepted one reads back with CONFIG GET; a worker's
//! request answers what its model says or `-OOM` (refused, nothing stored); and when
//! nothing was evicted, every worker's keys hold exactly what its model says.
mod harness;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;

use harness::{config_get, info_stat, TestServer};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use redis::{Connection, RedisResult, Value};
use relcache_protocol::idset::Builder;

const WORKERS: usize = 3;

/// Values tried for every parameter: each is valid for some and invalid for others.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "10",
    "65",
    "500",
    "501",
    "100000",
    "1mb",
    "64mb",
    "2gb",
    "1x",
    "abc",
    "",
    "yes",
    "no",
    "noeviction",
    "allkeys-lru",
    "volatile-ttl",
    "allkeys-lfu",
    "normal 0 64mb 60",
    "normal 4mb 2mb 10",
    "normal 1 2",
    "50 99",
    "101",
    "notice",
    "nothing",
    "warning",
];

/// Parameters this test leaves alone: the password would lock the workers out,
/// and the immutable ones are refused anyway (tested in tests/config.rs).
const SKIPPED: &[&str] = &["requirepass", "port", "bind", "tcp-backlog", "databases"];

/// Settings that would legitimately cut the workers off (an idle timeout shorter
/// than a case, fewer client slots than connections), so the test does not try them.
fn cuts_clients_off(param: &str, value: &str) -> bool {
    let n: i64 = value.parse().unwrap_or(-1);
    match param {
        "timeout" => (1..3600).contains(&n),
        "maxclients" => (0..100).contains(&n),
        // Any bound the test's own connections exceed evicts them (an idle one
        // holds 2.5 KB): only off (0) and 2gb leave them be.
        "maxmemory-clients" => !matches!(value, "0" | "2gb"),
        _ => false,
    }
}

fn all_params(con: &mut Connection) -> Vec<String> {
    let pairs: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("*").query(con).unwrap();
    pairs
        .chunks(2)
        .map(|p| p[0].clone())
        .filter(|p| !SKIPPED.contains(&p.as_str()))
        .collect()
}

/// `64mb` and friends as bytes, as CONFIG GET prints them (Redis's units).
fn memory(v: &str) -> Option<u64> {
    let lower = v.to_ascii_lowercase();
    let (digits, unit) = lower.split_at(lower.find(|c: char| !c.is_ascii_digit())?);
    let unit = match unit {
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    digits.parse::<u64>().ok().map(|n| n * unit)
}

/// Whether `got` (CONFIG GET) reads back `set` (CONFIG SET): word by word, as is
/// or as the bytes a memory value stands for.
fn reads_back(set: &str, got: &str) -> bool {
    let words: Vec<&str> = got.split(' ').collect();
    let same = |a: &str, b: &str| a == b || memory(a).is_some_and(|m| m.to_string() == b);
    let set_words: Vec<&str> = set.split(' ').collect();
    // client-output-buffer-limit reads back every class, the one set first.
    set_words.len() <= words.len() && set_words.iter().zip(&words).all(|(a, b)| same(a, b))
}

/// One worker's keys as they should be.
#[derive(Default, Debug)]
struct Model {
    string: Option<String>,
    set: Vec<u64>,
    table: Option<Vec<u64>>,
}

/// What a worker saw: requests answered, refused for memory, and wrong answers
/// (a read that disagreed with the model, which only eviction excuses).
#[derive(Default, Debug)]
struct Tally {
    requests: u64,
    oom: u64,
    wrong: Vec<String>,
}

fn is_oom<T>(r: &RedisResult<T>) -> bool {
    matches!(r, Err(e) if e.code() == Some("OOM"))
}

/// Writes and reads `w`'s own keys until `stop`; never fails on an answer, only
/// records it, so the main thread decides what eviction excuses.
fn work(mut con: Connection, w: usize, stop: Arc<AtomicBool>) -> (Model, Tally) {
    let (s_key, set_key, t_key) = (format!("w{w}:s"), format!("w{w}:set"), format!("w{w}:t"));
    let mut model = Model::default();
    let mut tally = Tally::default();
    let mut n = 0u64;
    while !stop.load(Relaxed) || n < 8 {
        n += 1;
        tally.requests += 1;
        match n % 4 {
            0 => {
                let v = format!("v{n}");
                let r: RedisResult<()> = redis::cmd("SET").arg(&s_key).arg(&v).query(&mut con);
                match r {
                    Ok(()) => model.string = Some(v),
                    Err(_) if is_oom(&r) => tally.oom += 1,
                    Err(e) => tally.wrong.push(format!("SET: {e}")),
                }
                let got: RedisResult<Option<String>> =
                    redis::cmd("GET").arg(&s_key).query(&mut con);
                if got.as_ref().ok() != Some(&model.string) {
                    tally
                        .wrong
                        .push(format!("GET {got:?}, model {:?}", model.string));
                }
            }
            1 => {
                let r: RedisResult<i64> = redis::cmd("SADD").arg(&set_key).arg(n).query(&mut con);
                match r {
                    Ok(1) => model.set.push(n),
                    Err(_) if is_oom(&r) => tally.oom += 1,
                    other => tally.wrong.push(format!("SADD {other:?}")),
                }
                let got: RedisResult<i64> = redis::cmd("SCARD").arg(&set_key).query(&mut con);
                if got.as_ref().ok() != Some(&(model.set.len() as i64)) {
                    tally
                        .wrong
                        .push(format!("SCARD {got:?}, model {}", model.set.len()));
                }
            }
            2 => {
                let ids: Vec<u64> = (n..n + 20).collect();
                let r: RedisResult<i64> = redis::cmd("IDSET.LOAD")
                    .arg(&t_key)
                    .arg("TABLE")
                    .arg(Builder::new().build(&ids))
                    .query(&mut con);
                match r {
                    Ok(20) => model.table = Some(ids),
                    Err(_) if is_oom(&r) => tally.oom += 1,
                    other => tally.wrong.push(format!("IDSET.LOAD {other:?}")),
                }
            }
            _ => {
                let probe = model.table.as_ref().map_or(1, |t| t[7]);
                let got: RedisResult<Value> = redis::cmd("IDSET.MEXISTS")
                    .arg(&t_key)
                    .arg(probe)
                    .arg(u64::MAX)
                    .query(&mut con);
                let want = match &model.table {
                    None => Value::Nil,
                    Some(_) => Value::Array(vec![Value::Int(1), Value::Int(0)]),
                };
                if got.as_ref().ok() != Some(&want) {
                    tally
                        .wrong
                        .push(format!("IDSET.MEXISTS {got:?}, model {want:?}"));
                }
            }
        }
    }
    (model, tally)
}

/// Puts back what the cases change, so each starts from the defaults that matter.
fn reset(con: &mut Connection) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .arg("client-output-buffer-limit")
        .arg("normal 0 64mb 60")
        .arg("proto-max-bulk-len")
        .arg("512mb")
        .arg("client-query-buffer-limit")
        .arg("1gb")
        .arg("timeout")
        .arg("0")
        .arg("maxmemory-clients")
        .arg("0")
        .query(con)
        .unwrap();
    let () = redis::cmd("FLUSHALL").query(con).unwrap();
}

/// How the CONFIG SETs of all cases went, so the test can tell it tried both kinds.
#[derive(Default)]
struct Seen {
    accepted: u64,
    refused: u64,
    oom: u64,
}

fn one_case(
    server: &TestServer,
    params: &[String],
    sets: &[(usize, usize)],
    seen: &std::sync::Mutex<Seen>,
) -> Result<(), TestCaseError> {
    let mut admin = server.conn();
    reset(&mut admin);
    let evicted_before: u64 = info_stat(&mut admin, "stats", "evicted_keys");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let con = server.conn();
            let stop = stop.clone();
            thread::spawn(move || work(con, w, stop))
        })
        .collect();

    for &(p, v) in sets {
        let (param, value) = (params[p % params.len()].as_str(), VALUES[v % VALUES.len()]);
        if cuts_clients_off(param, value) {
            continue;
        }
        let before = config_get(&mut admin, param);
        let r: RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg(param)
            .arg(value)
            .query(&mut admin);
        let after = config_get(&mut admin, param);
        let mut seen = seen.lock().unwrap();
        match r {
            Ok(()) => {
                seen.accepted += 1;
                prop_assert!(
                    reads_back(value, &after),
                    "CONFIG SET {param} {value:?} accepted, reads back {after:?}"
                );
            }
            Err(e) => {
                seen.refused += 1;
                let detail = e.detail().unwrap_or_default();
                prop_assert_eq!(e.code(), Some("ERR"), "{}", e);
                prop_assert!(
                    detail.starts_with(&format!(
                        "CONFIG SET failed (possibly related to argument '{param}') - "
                    )),
                    "{}",
                    e
                );
                prop_assert_eq!(&before, &after, "a refused value changed {}", param);
            }
        }
    }
    // Let the workers run a little under the final settings too.
    let _: String = redis::cmd("PING").query(&mut admin).unwrap();
    stop.store(true, Relaxed);
    let results: Vec<(Model, Tally)> = workers.into_iter().map(|w| w.join().unwrap()).collect();

    reset_memory(&mut admin);
    let evicted = info_stat::<u64>(&mut admin, "stats", "evicted_keys") - evicted_before;
    for (w, (model, tally)) in results.iter().enumerate() {
        prop_assert!(tally.requests >= 8);
        seen.lock().unwrap().oom += tally.oom;
        if evicted > 0 {
            continue;
        }
        prop_assert!(tally.wrong.is_empty(), "worker {}: {:?}", w, tally.wrong);
        let got: Option<String> = redis::cmd("GET")
            .arg(format!("w{w}:s"))
            .query(&mut admin)
            .unwrap();
        prop_assert_eq!(&got, &model.string);
        let mut members: Vec<u64> = redis::cmd("SMEMBERS")
            .arg(format!("w{w}:set"))
            .query(&mut admin)
            .unwrap();
        members.sort_unstable();
        prop_assert_eq!(&members, &model.set);
        let card: Option<i64> = redis::cmd("IDSET.CARD")
            .arg(format!("w{w}:t"))
            .query(&mut admin)
            .unwrap();
        prop_assert_eq!(card, model.table.as_ref().map(|t| t.len() as i64));
    }
    Ok(())
}

/// Lifts the memory limit so the final reads cannot be refused.
fn reset_memory(con: &mut Connection) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(con)
        .unwrap();
}

#[test]
fn config_set_under_load_keeps_the_server_up_and_the_data_intact() {
    let server = TestServer::start();
    let params = all_params(&mut server.conn());
    for wanted in [
        "maxmemory",
        "maxmemory-policy",
        "hz",
        "timeout",
        "client-output-buffer-limit",
        "proto-max-bulk-len",
        "client-query-buffer-limit",
    ] {
        assert!(
            params.iter().any(|p| p == wanted),
            "CONFIG GET * lists {wanted}"
        );
    }
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    // Each case: a few CONFIG SETs, each a (parameter, value) pair of indices.
    let strategy = proptest::collection::vec((0..params.len(), 0..VALUES.len()), 1..12);
    let seen = std::sync::Mutex::new(Seen::default());
    runner
        .run(&strategy, |sets| one_case(&server, &params, &sets, &seen))
        .unwrap();
    let seen = seen.into_inner().unwrap();
    eprintln!(
        "CONFIG SET: {} accepted, {} refused; {} worker requests refused with -OOM",
        seen.accepted, seen.refused, seen.oom
    );
    assert!(seen.accepted > 0 && seen.refused > 0);

    // Still up, still answering.
    let mut con = server.conn();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}
