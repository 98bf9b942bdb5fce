//! Eviction quality and cost under maxmemory (issue 4's figures). By hand, not CI:
//!
//!     cargo bench --bench eviction_vs_redis
//!     USERS=1000000 LOOKUPS=2000000 MAXMEMORY=256mb cargo bench --bench eviction_vs_redis
//!
//! Replays one Zipf-distributed trace of user lookups (seeded; USERS users, skew
//! SKEW, each user a 200–2,000 id set) against relcache and a real redis-server with
//! the same maxmemory and allkeys-lru. A lookup is SCARD on the user's key; a miss is
//! followed by a load (relcache: one SET of a prebuilt table; Redis: one SADD). It
//! prints, for both, the hit ratio and loads per 1,000 lookups, and for relcache the
//! hit ratio an exact LRU reaches on the same trace with the same byte budget
//! (computed offline, with each key costing what relcache's MEMORY USAGE reports).
//!
//! Then it measures what eviction costs readers: IDSET.MEXISTS throughput on hot
//! keys while a writer loads new users at a fixed rate, with maxmemory off (memory
//! grows, nothing is evicted) and on (every load evicts).
//!
//! Not measured: the MySQL side of a miss (a load here is only the cache write), and
//! anything that depends on the network; client and servers share the machine.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};

use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use relcache_protocol::idset::Builder;
use relcache_protocol::resp::Frame;
use support::{blast, encode, machine, read_replies, roundtrip, Target};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A user's follow set: 200–2,000 ids, fixed per user.
fn follows(user: u64) -> Vec<u64> {
    let n = 200 + mix(user) % 1801;
    (0..n)
        .map(|i| mix(user.wrapping_mul(0x1_0000_0001) + i) >> 1 | 1)
        .collect()
}

fn load_request(t: &Target, key: &str, user: u64) -> Vec<u8> {
    let ids = follows(user);
    match t {
        Target::Relcache(_) => encode(&[b"SET", key.as_bytes(), &Builder::new().build(&ids)]),
        Target::Redis(_) => {
            let dec: Vec<Vec<u8>> = ids.iter().map(|i| i.to_string().into_bytes()).collect();
            let mut args: Vec<&[u8]> = vec![b"SADD", key.as_bytes()];
            args.extend(dec.iter().map(|d| d.as_slice()));
            encode(&args)
        }
    }
}

struct Replay {
    hits: u64,
    lookups: u64,
    secs: f64,
}

fn replay(t: &Target, trace: &[u64]) -> Replay {
    let mut s = t.connect();
    let mut buf = Vec::new();
    let mut hits = 0;
    let start = Instant::now();
    for &u in trace {
        let key = format!("user:{u}");
        // SCARD, not EXISTS: a lookup must count as an access for LRU on both servers
        // (EXISTS does not touch recency in Redis, nor in relcache), and every stored
        // set has at least 200 ids, so 0 means "not cached".
        s.write_all(&encode(&[b"SCARD", key.as_bytes()])).unwrap();
        match &read_replies(&mut s, 1, &mut buf).unwrap()[0] {
            Frame::Integer(n) if *n > 0 => hits += 1,
            Frame::Integer(0) => {
                s.write_all(&load_request(t, &key, u)).unwrap();
                let r = read_replies(&mut s, 1, &mut buf).unwrap();
                assert!(!r[0].is_error(), "{} load failed: {:?}", t.name(), r[0]);
            }
            other => panic!("SCARD replied {other:?}"),
        }
    }
    Replay {
        hits,
        lookups: trace.len() as u64,
        secs: start.elapsed().as_secs_f64(),
    }
}

/// Exact LRU over the trace with a byte budget; returns the hit count.
fn exact_lru(trace: &[u64], budget: u64, cost: impl Fn(u64) -> u64) -> u64 {
    let mut last_use: HashMap<u64, u64> = HashMap::new();
    let mut by_age: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut used, mut hits) = (0u64, 0u64);
    for (tick, &u) in trace.iter().enumerate() {
        let tick = tick as u64;
        if let Some(prev) = last_use.insert(u, tick) {
            by_age.remove(&prev);
            by_age.insert(tick, u);
            hits += 1;
            continue;
        }
        by_age.insert(tick, u);
        used += cost(u);
        while used > budget {
            let (&age, &victim) = by_age.iter().next().unwrap();
            by_age.remove(&age);
            last_use.remove(&victim);
            used -= cost(victim);
        }
    }
    hits
}

/// The users whose sets a server holds now (SCAN over `user:*`).
fn held_users(t: &Target) -> Vec<u64> {
    let mut s = t.connect();
    let mut cursor = b"0".to_vec();
    let mut users = Vec::new();
    loop {
        let reply = roundtrip(
            &mut s,
            &[b"SCAN", &cursor, b"MATCH", b"user:*", b"COUNT", b"1000"],
        )
        .unwrap();
        let Frame::Array(parts) = reply else {
            panic!("SCAN replied {reply:?}")
        };
        let (Frame::Bulk(next), Frame::Array(keys)) = (&parts[0], &parts[1]) else {
            panic!("SCAN shape")
        };
        for k in keys {
            if let Frame::Bulk(k) = k {
                users.extend(
                    std::str::from_utf8(&k[5..])
                        .ok()
                        .and_then(|u| u.parse::<u64>().ok()),
                );
            }
        }
        if &next[..] == b"0" {
            return users;
        }
        cursor = next.to_vec();
    }
}

fn memory_usage(t: &Target, key: &str) -> u64 {
    let mut s = t.connect();
    match roundtrip(&mut s, &[b"MEMORY", b"USAGE", key.as_bytes()]).unwrap() {
        Frame::Integer(n) => n as u64,
        other => panic!("MEMORY USAGE replied {other:?}"),
    }
}

fn read_throughput(maxmemory: &str) -> f64 {
    let t = Target::relcache(&["--maxmemory", maxmemory]);
    let mut s = t.connect();
    for u in 0..200 {
        let key = format!("hot:{u}");
        s.write_all(&load_request(&t, &key, u)).unwrap();
        read_replies(&mut s, 1, &mut Vec::new()).unwrap();
    }
    let probes: Vec<Vec<u8>> = (0..200u64)
        .map(|u| {
            let key = format!("hot:{u}");
            let ids: Vec<Vec<u8>> = follows(u)
                .iter()
                .take(50)
                .chain(&[1, 2, 3])
                .map(|i| i.to_string().into_bytes())
                .collect();
            let mut args: Vec<&[u8]> = vec![b"IDSET.MEXISTS", key.as_bytes()];
            args.extend(ids.iter().map(|d| d.as_slice()));
            encode(&args)
        })
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (port, stop) = (t.port(), stop.clone());
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut next = Instant::now();
            let mut u = 1_000_000u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("cold:{u}");
                let table = Builder::new().build(&follows(u));
                s.write_all(&encode(&[b"SET", key.as_bytes(), &table]))
                    .unwrap();
                read_replies(&mut s, 1, &mut Vec::new()).unwrap();
                u += 1;
                next += Duration::from_millis(2); // 500 loads a second
                if let Some(w) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2)); // fill up to the limit first
    let rate = blast(t.port(), &probes, 8, 16, 4.0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let evicted = t.info_u64("evicted_keys");
    let mut s = t.connect();
    let hot_left = (0..200u64)
        .filter(|u| {
            let key = format!("hot:{u}");
            roundtrip(&mut s, &[b"EXISTS", key.as_bytes()]).unwrap() == Frame::Integer(1)
        })
        .count();
    assert_eq!(
        hot_left, 200,
        "hot users were evicted: the read figure would be meaningless"
    );
    println!(
        "  maxmemory {maxmemory}: {:.0} reads/s, {} errors, {evicted} keys evicted meanwhile",
        rate.requests_per_sec, rate.errors
    );
    rate.requests_per_sec
}

fn main() {
    if !support::harness::invoked_by_cargo_bench() {
        return;
    }
    let users: u64 = env("USERS", 200_000);
    let lookups: usize = env("LOOKUPS", 400_000);
    let skew: f64 = env("SKEW", 0.99);
    let maxmemory: String = env("MAXMEMORY", "64mb".to_string());
    println!("# eviction under maxmemory {maxmemory} — {} — {users} users, {lookups} lookups, Zipf skew {skew}", machine());

    let mut rng = StdRng::seed_from_u64(42);
    let zipf = Zipf::new(users, skew).unwrap();
    let trace: Vec<u64> = (0..lookups).map(|_| zipf.sample(&mut rng) as u64).collect();

    let relcache = Target::relcache(&[
        "--maxmemory",
        &maxmemory,
        "--maxmemory-policy",
        "allkeys-lru",
    ]);
    let redis = Target::redis(&[
        "--maxmemory",
        &maxmemory,
        "--maxmemory-policy",
        "allkeys-lru",
    ]);
    let samples: u64 = env("SAMPLES", 0);
    if samples > 0 {
        let mut s = relcache.connect();
        let n = samples.to_string();
        let r = roundtrip(
            &mut s,
            &[b"CONFIG", b"SET", b"maxmemory-samples", n.as_bytes()],
        )
        .unwrap();
        assert!(!r.is_error(), "{r:?}");
    }
    // SKIP_REDIS=1 replays relcache only (Redis's replay is the slow half).
    let skip_redis = env("SKIP_REDIS", 0u8) == 1;
    let mut results = Vec::new();
    for t in [&relcache, &redis] {
        if skip_redis && t.name() == "redis" {
            results.push(f64::NAN);
            continue;
        }
        let r = replay(t, &trace);
        let ratio = r.hits as f64 / r.lookups as f64;
        println!(
            "{}: hit ratio {:.4}, loads per 1,000 lookups {:.1}, {} keys held, {:.1}s",
            t.name(),
            ratio,
            1000.0 * (1.0 - ratio),
            {
                let mut s = t.connect();
                match roundtrip(&mut s, &[b"DBSIZE"]).unwrap() {
                    Frame::Integer(n) => n,
                    _ => -1,
                }
            },
            r.secs
        );
        results.push(ratio);
    }

    // Exact LRU on the same trace with the same capacity: the byte cost (table +
    // per-key overhead, as MEMORY USAGE reports it) of the keys relcache holds at the
    // end. That compares the eviction policy alone, not relcache's bookkeeping.
    let probe_user = trace[0];
    let probe_key = format!("user:{probe_user}");
    let mut s = relcache.connect();
    s.write_all(&load_request(&relcache, &probe_key, probe_user))
        .unwrap();
    read_replies(&mut s, 1, &mut Vec::new()).unwrap();
    let table_len = |u: u64| Builder::new().build(&follows(u)).len() as u64;
    let overhead = memory_usage(&relcache, &probe_key) - table_len(probe_user);
    let cost = |u: u64| table_len(u) + overhead;
    let held = held_users(&relcache);
    let budget: u64 = held.iter().map(|&u| cost(u)).sum();
    let exact = exact_lru(&trace, budget, cost) as f64 / trace.len() as f64;
    let compulsory = {
        let mut seen = std::collections::HashSet::new();
        trace.iter().filter(|u| seen.insert(**u)).count() as f64 / trace.len() as f64
    };

    println!("\n| measure | relcache | redis | exact LRU (relcache's budget) |\n|---|---|---|---|");
    println!(
        "| hit ratio | {:.4} | {:.4} | {:.4} |",
        results[0], results[1], exact
    );
    println!(
        "| loads per 1,000 lookups | {:.1} | {:.1} | {:.1} |",
        1000.0 * (1.0 - results[0]),
        1000.0 * (1.0 - results[1]),
        1000.0 * (1.0 - exact)
    );
    println!(
        "| relcache vs exact LRU | {:+.2} points | | |",
        100.0 * (results[0] - exact)
    );
    println!(
        "| Redis loads / relcache loads | {:.2}x | | |",
        (1.0 - results[1]) / (1.0 - results[0])
    );
    println!(
        "| first-touch (compulsory) loads per 1,000 lookups, same for all | {:.1} | {:.1} | {:.1} |",
        1000.0 * compulsory,
        1000.0 * compulsory,
        1000.0 * compulsory
    );
    let capacity_loads = |hit: f64| 1000.0 * (1.0 - hit - compulsory).max(0.0);
    println!(
        "| loads beyond first touch per 1,000 lookups | {:.1} | {:.1} | {:.1} |",
        capacity_loads(results[0]),
        capacity_loads(results[1]),
        capacity_loads(exact)
    );
    println!(
        "| Redis / relcache loads beyond first touch | {:.2}x | | |",
        capacity_loads(results[1]) / capacity_loads(results[0]).max(1e-9)
    );
    println!(
        "| keys held by relcache at the end (exact LRU's capacity) | {} | | |",
        held.len()
    );

    println!("\nread throughput while a writer loads 500 new users/s:");
    let off = read_throughput("0");
    // A limit the hot users fit in but the writer's stream does not, so the writer's
    // loads evict throughout the measurement.
    let on = read_throughput("24mb");
    println!("| reads/s, eviction off | reads/s, eviction on | ratio |\n|---|---|---|\n| {off:.0} | {on:.0} | {:.3} |", on / off);
}
