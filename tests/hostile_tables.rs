//! End-to-end: tables laid out to make lookups slow, against the real server.
//!
//! An audit found tables that passed validation yet made one lookup walk the whole
//! capacity (a 10M-slot table with one EMPTY slot: 80 ms per absent id, seconds per
//! IDSET.MEXISTS, and other clients' PINGs queued behind it). The format now bounds
//! every lookup by `MAX_PROBE` reads (FORMAT.md §5): those tables are refused, and the
//! most hostile table the rule still accepts answers lookups in time proportional to
//! the ids asked about. Where a test needs time, the bound is one only the old
//! behaviour crosses, by orders of magnitude; the work itself is asserted from the
//! probe arithmetic.

mod harness;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{resp_cmd, TestServer};
use redis::Connection;
use relcache_protocol::idset::{
    hash, start_and_step, validate, Builder, Header, TableMut, DEFAULT_SEED, DELETED, EMPTY,
    MAX_PROBE,
};

/// What every refusal of a table past the bound says.
const PAST_BOUND: &str = "slots of its probe sequence; rebuild the table with a lower load";

/// Slot `depth` of `id`'s probe sequence.
fn slot_at(id: u64, seed: u64, capacity: u32, depth: u64) -> usize {
    let (start, step) = start_and_step(hash(id, seed), capacity);
    ((u64::from(start) + depth * u64::from(step)) % u64::from(capacity)) as usize
}

/// How far into `id`'s probe sequence `slot` lies: `(slot - start) / step` modulo the
/// prime capacity, the division by Fermat's inverse.
fn depth_of(id: u64, seed: u64, capacity: u32, slot: usize) -> u64 {
    let (start, step) = start_and_step(hash(id, seed), capacity);
    let p = u128::from(capacity);
    let mut inverse = 1u128;
    let (mut base, mut exp) = (u128::from(step), p - 2);
    while exp > 0 {
        if exp & 1 == 1 {
            inverse = inverse * base % p;
        }
        base = base * base % p;
        exp >>= 1;
    }
    let diff = (slot as u128 + p - u128::from(start)) % p;
    (diff * inverse % p) as u64
}

/// Table bytes from slot values: header counts as the slots say.
fn table(seed: u64, slots: &[u64]) -> Vec<u8> {
    let header = Header {
        version: 1,
        flags: 0,
        seed,
        capacity: slots.len() as u32,
        count: slots
            .iter()
            .filter(|&&v| v != EMPTY && v != DELETED)
            .count() as u32,
        deleted: slots.iter().filter(|&&v| v == DELETED).count() as u32,
    };
    let mut bytes = header.to_bytes().to_vec();
    bytes.reserve(8 * slots.len());
    for v in slots {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

/// Every slot DELETED but `empty`, and each of `ids` at `depth` of its probe sequence
/// (skipped if that slot is taken or is the EMPTY one). Returns the bytes and the ids
/// placed.
fn all_deleted(capacity: u32, empty: usize, ids: &[u64], depth: u64) -> (Vec<u8>, Vec<u64>) {
    let mut slots = vec![DELETED; capacity as usize];
    slots[empty] = EMPTY;
    let mut placed = Vec::new();
    for &id in ids {
        let s = slot_at(id, DEFAULT_SEED, capacity, depth);
        // Reachable only if the EMPTY slot is not earlier on the path.
        if slots[s] == DELETED && depth_of(id, DEFAULT_SEED, capacity, empty) > depth {
            slots[s] = id;
            placed.push(id);
        }
    }
    (table(DEFAULT_SEED, &slots), placed)
}

fn set_table(con: &mut Connection, key: &str, bytes: &[u8]) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg(bytes).query(con)
}

fn load_table(con: &mut Connection, key: &str, bytes: &[u8]) -> redis::RedisResult<i64> {
    redis::cmd("IDSET.LOAD")
        .arg(key)
        .arg("TABLE")
        .arg(bytes)
        .query(con)
}

fn assert_refused(con: &mut Connection, key: &str, bytes: &[u8]) {
    for err in [
        set_table(con, key, bytes).unwrap_err(),
        load_table(con, key, bytes).unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(text.contains("invalid idset table"), "{text}");
        assert!(text.contains(PAST_BOUND), "{text}");
    }
    let exists: i64 = redis::cmd("EXISTS").arg(key).query(con).unwrap();
    assert_eq!(
        exists, 0,
        "a refused table is not stored, as a set or a string"
    );
}

/// The audit's first table: 1,000,003 slots, all DELETED but one EMPTY, and 100 ids
/// each 5,000 slots into its probe sequence.
fn one_empty_audit_table() -> (Vec<u8>, Vec<u64>) {
    let ids: Vec<u64> = (1..=100).map(|i| i << 32).collect();
    all_deleted(1_000_003, 0, &ids, 5_000)
}

#[test]
fn under_the_default_sample_the_audits_table_is_bounded_all_the_same() {
    // The sample proves the placement of about 256 of the million slots, which the
    // 100 ids all miss: the table is stored. What kept it harmless under the full
    // check keeps it harmless here: no lookup reads past 128 slots, so each of its
    // ids is simply not found, at once, and other clients are not held up.
    let s = TestServer::start();
    let mut con = s.conn();
    let (bytes, placed) = one_empty_audit_table();
    set_table(&mut con, "audit", &bytes).unwrap();
    let card: i64 = redis::cmd("SCARD").arg("audit").query(&mut con).unwrap();
    assert_eq!(card, placed.len() as i64, "counted as laid out");
    // Its ids, 5,000 slots in, are past the bound: not found.
    let found: Vec<i64> = redis::cmd("IDSET.MEXISTS")
        .arg("audit")
        .arg(&placed)
        .query(&mut con)
        .unwrap();
    assert_eq!(found, vec![0; placed.len()]);
    // 1,000 absent ids: unbounded, each would walk to the one EMPTY slot.
    let absent: Vec<u64> = (1..=1_000u64).map(|i| (i << 40) | 7).collect();
    let unbounded: u64 = absent
        .iter()
        .map(|&id| depth_of(id, DEFAULT_SEED, 1_000_003, 0) + 1)
        .sum();
    assert!(
        unbounded > 1_000 * 1_000 * u64::from(MAX_PROBE),
        "{unbounded}"
    );
    let started = Instant::now();
    let found: Vec<i64> = redis::cmd("IDSET.MEXISTS")
        .arg("audit")
        .arg(&absent)
        .query(&mut con)
        .unwrap();
    assert_eq!(found, vec![0; absent.len()]);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let pong: String = redis::cmd("PING").query(&mut s.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn the_audits_degenerate_tables_are_refused() {
    // Every id's placement proven, as before `idset-table-check sample` existed.
    let s = TestServer::start_with(&["--idset-table-check", "full"]);
    let mut con = s.conn();

    // 1,000,003 slots, one EMPTY, and ids placed 5,000 slots into their sequences:
    // reachable, and within the old total budget, so it validated before.
    let (bytes, placed) = one_empty_audit_table();
    assert!(placed.len() > 90, "{} placed", placed.len());
    assert_refused(&mut con, "audit:one-empty", &bytes);

    // 200,002 ids in 200,003 slots, each at the first EMPTY slot of its whole
    // sequence: what a builder without the bound makes at a load near 1.
    let cap = 200_003u32;
    let mut slots = vec![EMPTY; cap as usize];
    for id in 1..=200_002u64 {
        let mut depth = 0;
        while slots[slot_at(id, DEFAULT_SEED, cap, depth)] != EMPTY {
            depth += 1;
        }
        slots[slot_at(id, DEFAULT_SEED, cap, depth)] = id;
    }
    let bytes = table(DEFAULT_SEED, &slots);
    assert_refused(&mut con, "audit:dense", &bytes);

    // The same ids built by the rules of FORMAT.md §7 are stored and answered.
    let ids: Vec<u64> = (1..=200_002).collect();
    set_table(&mut con, "audit:dense", &Builder::new().build(&ids)).unwrap();
    let card: i64 = redis::cmd("SCARD")
        .arg("audit:dense")
        .query(&mut con)
        .unwrap();
    assert_eq!(card, 200_002);
}

/// Sends `n` copies of one request on a raw socket and reads the `n` replies; returns
/// the time from the first byte sent to the last byte read, and the first reply.
fn pipeline(s: &TestServer, req: &[u8], reply_len: usize, n: usize) -> (Duration, Vec<u8>) {
    let mut sock = s.raw();
    sock.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let started = Instant::now();
    let writer = {
        let mut sock = sock.try_clone().unwrap();
        let req = req.repeat(n);
        std::thread::spawn(move || sock.write_all(&req).unwrap())
    };
    let mut got = vec![0u8; reply_len * n];
    sock.read_exact(&mut got).unwrap();
    let elapsed = started.elapsed();
    writer.join().unwrap();
    got.truncate(reply_len);
    (elapsed, got)
}

#[test]
fn the_most_hostile_valid_table_answers_in_time_proportional_to_the_ids() {
    let s = TestServer::start();
    let mut con = s.conn();

    // 2,000,003 slots, all DELETED but one EMPTY, and 10,000 ids each at the last
    // slot the bound allows: valid, and as slow as a valid table can be.
    let cap = 2_000_003u32;
    let empty = 1_234_567;
    let ids: Vec<u64> = (1..=10_000).map(|i| i * 0x1_0000_0001).collect();
    let (bytes, placed) = all_deleted(cap, empty, &ids, u64::from(MAX_PROBE) - 1);
    assert!(placed.len() > 9_900, "{} placed", placed.len());
    let t = validate(&bytes).expect("valid under the bound");
    assert!(placed.iter().all(|&id| t.contains(id)));
    set_table(&mut con, "hostile", &bytes).unwrap();

    // 1,000 absent ids: each lookup reads 128 slots now. Without the bound each
    // would walk to the one EMPTY slot: count those reads from the arithmetic.
    let absent: Vec<u64> = (1..=1_000u64).map(|i| (i << 40) | 7).collect();
    let unbounded: u64 = absent
        .iter()
        .map(|&id| depth_of(id, DEFAULT_SEED, cap, empty) + 1)
        .sum();
    assert!(
        unbounded > 500_000_000,
        "the unbounded lookups would read {unbounded} slots"
    );
    let bounded = absent.len() as u64 * u64::from(MAX_PROBE);
    assert!(unbounded > 1_000 * bounded);

    let mut args: Vec<Vec<u8>> = vec![b"IDSET.MEXISTS".to_vec(), b"hostile".to_vec()];
    args.extend(absent.iter().map(|id| id.to_string().into_bytes()));
    args.push(placed[0].to_string().into_bytes());
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let req = resp_cmd(&refs);
    let mut want = format!("*{}\r\n", absent.len() + 1).into_bytes();
    want.extend(b":0\r\n".repeat(absent.len()));
    want.extend(b":1\r\n");

    // One MEXISTS: well under a second (the unbounded walk took seconds).
    let (one, reply) = pipeline(&s, &req, want.len(), 1);
    assert_eq!(reply, want);
    assert!(one < Duration::from_secs(1), "one MEXISTS took {one:?}");

    // Fifty in a pipeline, while another client PINGs: every PING is answered
    // promptly, and the pipeline ends in seconds where it took many minutes before.
    let done = Arc::new(AtomicBool::new(false));
    let pinger = {
        let done = done.clone();
        let mut ping = s.conn();
        std::thread::spawn(move || {
            let (mut answered, mut slowest) = (0u32, Duration::ZERO);
            loop {
                let at = Instant::now();
                let pong: String = redis::cmd("PING").query(&mut ping).unwrap();
                assert_eq!(pong, "PONG");
                slowest = slowest.max(at.elapsed());
                answered += 1;
                if done.load(Ordering::Acquire) {
                    return (answered, slowest);
                }
            }
        })
    };
    let (fifty, reply) = pipeline(&s, &req, want.len(), 50);
    done.store(true, Ordering::Release);
    let (answered, slowest) = pinger.join().unwrap();
    assert_eq!(reply, want);
    assert!(
        fifty < Duration::from_secs(20),
        "fifty MEXISTS took {fifty:?}"
    );
    assert!(answered >= 1);
    assert!(
        slowest < Duration::from_secs(1),
        "a PING waited {slowest:?}"
    );
}

#[test]
fn an_add_whose_slot_would_lie_past_the_bound_rebuilds_the_set() {
    let s = TestServer::start();
    let mut con = s.conn();

    // A table with plenty of room, in which every one of the first MAX_PROBE slots of
    // x's probe sequence holds an id that starts there.
    let mut bytes = Builder::new().reserve(700).build(&[]);
    let cap = validate(&bytes).unwrap().capacity();
    let x = 1u64 << 50;
    let blockers: Vec<u64> = (0..u64::from(MAX_PROBE))
        .map(|depth| {
            let slot = slot_at(x, DEFAULT_SEED, cap, depth);
            (1u64..)
                .find(|&id| slot_at(id, DEFAULT_SEED, cap, 0) == slot)
                .unwrap()
        })
        .collect();
    let mut t = TableMut::open(&mut bytes).unwrap();
    for &id in &blockers {
        assert_eq!(t.insert(id), Ok(true));
    }
    assert!(
        t.insert(x).is_err(),
        "x's slot would lie past the bound, in place"
    );
    set_table(&mut con, "u:1", &bytes).unwrap();

    let added: i64 = redis::cmd("IDSET.ADD")
        .arg("u:1")
        .arg(x)
        .arg(x + 1)
        .query(&mut con)
        .unwrap();
    assert_eq!(added, 2);
    let after: Vec<u8> = redis::cmd("IDSET.TABLE")
        .arg("u:1")
        .query(&mut con)
        .unwrap();
    assert_ne!(after, bytes, "the set was rebuilt");
    let t = validate(&after).expect("the rebuilt table is valid");
    assert_eq!(t.len(), blockers.len() as u64 + 2);
    for id in blockers.iter().copied().chain([x, x + 1]) {
        assert!(t.contains(id), "{id}");
        let member: i64 = redis::cmd("SISMEMBER")
            .arg("u:1")
            .arg(id)
            .query(&mut con)
            .unwrap();
        assert_eq!(member, 1, "{id}");
    }
    let card: i64 = redis::cmd("SCARD").arg("u:1").query(&mut con).unwrap();
    assert_eq!(card, blockers.len() as i64 + 2);
}
