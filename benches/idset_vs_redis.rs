//! relcache's idset tables against Redis's native sets, on the same data and the same
//! client code (issue 3's figures). Run by hand, never in CI:
//!
//!     cargo bench --bench idset_vs_redis            # BENCH_ROUNDS=5 for more rounds
//!
//! Prints, relcache and Redis side by side:
//! - bytes per stored id, from INFO used_memory before and after loading 2,000 users
//!   x 2,000 ids (relcache: one prebuilt table per user with SET; Redis: one SADD);
//! - SMISMEMBER with 100 ids, at -P 16 -c 50 and -P 1 -c 50, in ids checked per second,
//!   and relcache's binary batch form IDSET.MEXISTSBIN on the same probes;
//! - the time to load one 20,000-id set (relcache: one prebuilt SET and one SADD of
//!   decimal ids; Redis: one SADD), as the client waits for it and as server CPU
//!   time (from `/proc/PID/stat`, over hundreds to thousands of loads one at a time,
//!   into fresh keys and then replacing them), the prebuilt SET under both levels of
//!   `idset-table-check`;
//! - GET p99 from other clients while one client loads 20,000-id sets 50 times a
//!   second, against GET p99 on an idle server.
//!
//! Not measured: network cost (loopback), persistence (both off), and anything the
//! 2-core machine hides — the load generator shares the cores with the server, so
//! ratios mean more than absolute rates. Each figure is the median of the rounds,
//! with the two servers alternating.

mod support;

use std::time::{Duration, Instant};

use relcache_protocol::idset::Builder;
use support::{alternate, blast, encode, latency, machine, median, rounds, roundtrip, Target};

const USERS: u64 = 2_000;
const IDS_PER_USER: u64 = 2_000;
const BIG_SET: u64 = 20_000;

fn user_ids(user: u64) -> Vec<u64> {
    // Spread-out ids like real user ids; deterministic per user.
    (0..IDS_PER_USER)
        .map(|i| (user * 7_919 + i * 104_729) % 1_000_000_007 + 1)
        .collect()
}

fn decimal(ids: &[u64]) -> Vec<Vec<u8>> {
    ids.iter().map(|i| i.to_string().into_bytes()).collect()
}

fn load(t: &Target) {
    let mut s = t.connect();
    let mut batch = Vec::new();
    for u in 0..USERS {
        let key = format!("u:{u}");
        let ids = user_ids(u);
        let req = match t {
            Target::Relcache(_) => encode(&[b"SET", key.as_bytes(), &Builder::new().build(&ids)]),
            Target::Redis(_) => {
                let dec = decimal(&ids);
                let mut args: Vec<&[u8]> = vec![b"SADD", key.as_bytes()];
                args.extend(dec.iter().map(|d| d.as_slice()));
                encode(&args)
            }
        };
        batch.push(req);
        if batch.len() == 50 || u == USERS - 1 {
            let n = batch.len();
            std::io::Write::write_all(&mut s, &batch.concat()).unwrap();
            let replies = support::read_replies(&mut s, n, &mut Vec::new()).unwrap();
            assert!(
                replies.iter().all(|r| !r.is_error()),
                "load failed: {:?}",
                replies.iter().find(|r| r.is_error())
            );
            batch.clear();
        }
    }
}

/// 100 probe ids for user `u`: half members, half not.
fn probes(u: u64) -> Vec<u64> {
    let ids = user_ids(u);
    (0..50)
        .map(|i| ids[i * 37])
        .chain((0..50).map(|i| 2_000_000_000 + i))
        .collect()
}

fn smismember_requests() -> Vec<Vec<u8>> {
    (0..200)
        .map(|k| {
            let u = (k * 9) % USERS;
            let key = format!("u:{u}");
            let dec = decimal(&probes(u));
            let mut args: Vec<&[u8]> = vec![b"SMISMEMBER", key.as_bytes()];
            args.extend(dec.iter().map(|d| d.as_slice()));
            encode(&args)
        })
        .collect()
}

fn mexistsbin_requests() -> Vec<Vec<u8>> {
    (0..200)
        .map(|k| {
            let u = (k * 9) % USERS;
            let key = format!("u:{u}");
            let packed: Vec<u8> = probes(u).iter().flat_map(|i| i.to_le_bytes()).collect();
            encode(&[b"IDSET.MEXISTSBIN", key.as_bytes(), &packed])
        })
        .collect()
}

fn time_one(t: &Target, req: &[u8], reps: usize) -> f64 {
    let mut s = t.connect();
    let mut samples = Vec::new();
    for _ in 0..reps {
        roundtrip(&mut s, &[b"DEL", b"big"]).unwrap();
        let start = Instant::now();
        std::io::Write::write_all(&mut s, req).unwrap();
        let r = support::read_replies(&mut s, 1, &mut Vec::new()).unwrap();
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        assert!(!r[0].is_error(), "{:?}", r[0]);
    }
    median(samples)
}

/// Server CPU time per load, µs: `loads` loads one at a time, each into a fresh key
/// (`req` names key "big:0000", whose digits are replaced), then the same loads again
/// over those keys, the keys dropped after. Returns both passes: into fresh memory
/// (the kernel faulting in every new page) and replacing a key's value (memory the
/// allocator reuses, as a full cache's loads do). Clock ticks are 10 ms, so a pass
/// must take a second or so of server time for a figure good to a percent or two.
fn load_cpu(t: &Target, req: &[u8], loads: usize) -> (f64, f64) {
    assert!(loads <= 10_000, "four digits of key");
    let at = req
        .windows(8)
        .position(|w| w == b"big:0000")
        .expect("a request with key big:0000");
    let reqs: Vec<Vec<u8>> = (0..loads)
        .map(|i| {
            let mut r = req.to_vec();
            r[at + 4..at + 8].copy_from_slice(format!("{i:04}").as_bytes());
            r
        })
        .collect();
    let mut s = t.connect();
    let mut pass = || {
        let before = support::harness::cpu_ns(t.pid());
        for r in &reqs {
            std::io::Write::write_all(&mut s, r).unwrap();
            let reply = support::read_replies(&mut s, 1, &mut Vec::new()).unwrap();
            assert!(!reply[0].is_error(), "{:?}", reply[0]);
        }
        (support::harness::cpu_ns(t.pid()) - before) as f64 / loads as f64 / 1e3
    };
    let (fresh, replace) = (pass(), pass());
    roundtrip(&mut t.connect(), &[b"FLUSHALL"]).unwrap();
    (fresh, replace)
}

fn get_p99_under_load(t: &Target, loading: bool) -> f64 {
    let mut s = t.connect();
    roundtrip(&mut s, &[b"SET", b"g", b"value"]).unwrap();
    let ids: Vec<u64> = (1..=BIG_SET).map(|i| i * 31).collect();
    let req = match t {
        Target::Relcache(_) => encode(&[b"SET", b"bigload", &Builder::new().build(&ids)]),
        Target::Redis(_) => {
            let dec = decimal(&ids);
            let mut args: Vec<&[u8]> = vec![b"SADD", b"bigload"];
            args.extend(dec.iter().map(|d| d.as_slice()));
            encode(&args)
        }
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loader = loading.then(|| {
        let (port, stop) = (t.port(), stop.clone());
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut next = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // DEL then load, so Redis really inserts 20,000 members every time.
                roundtrip(&mut s, &[b"DEL", b"bigload"]).unwrap();
                std::io::Write::write_all(&mut s, &req).unwrap();
                support::read_replies(&mut s, 1, &mut Vec::new()).unwrap();
                next += Duration::from_millis(20); // 50 loads a second
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        })
    });
    let h = latency(t.port(), &encode(&[b"GET", b"g"]), 4, 3.0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(l) = loader {
        l.join().unwrap();
    }
    h.value_at_quantile(0.99) as f64
}

fn main() {
    if !support::harness::invoked_by_cargo_bench() {
        return;
    }
    let rounds = rounds();
    println!(
        "# idset vs Redis sets — {} — {rounds} rounds, medians",
        machine()
    );
    let relcache = Target::relcache(&[]);
    let redis = Target::redis(&[]);
    let targets = [&relcache, &redis];

    // Memory per id.
    let mut per_id = Vec::new();
    for t in targets {
        let before = t.info_u64("used_memory");
        let start = Instant::now();
        load(t);
        let secs = start.elapsed().as_secs_f64();
        let after = t.info_u64("used_memory");
        let b = (after - before) as f64 / (USERS * IDS_PER_USER) as f64;
        per_id.push(b);
        println!(
            "load {USERS} users x {IDS_PER_USER} ids into {}: {secs:.2}s, {b:.2} bytes/id",
            t.name()
        );
    }
    println!("\n| measure | relcache | redis | ratio |\n|---|---|---|---|");
    println!(
        "| bytes per stored id | {:.2} | {:.2} | {:.1}x smaller |",
        per_id[0],
        per_id[1],
        per_id[1] / per_id[0]
    );

    // Ids checked per second, and the server CPU each id cost (from /proc): with
    // the client on the same two cores, the rate is partly the client's, and at
    // `-P 1` its 50 threads' wake-ups are most of the work; the CPU per id is
    // the servers' own.
    let checks = |reqs: &[Vec<u8>], targets: &[&Target], p: usize, c: usize| {
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
        let rates = alternate(targets, rounds, |t| {
            let before = support::harness::cpu_ns(t.pid());
            let rate = blast(t.port(), reqs, c, p, 3.0);
            let spent = support::harness::cpu_ns(t.pid()) - before;
            assert_eq!(rate.errors, 0, "{} errors", t.name());
            let i = targets.iter().position(|x| x.pid() == t.pid()).unwrap();
            cpu[i].push(spent as f64 / (rate.requests * 100) as f64);
            rate.requests_per_sec * 100.0
        });
        let cpu: Vec<f64> = cpu.into_iter().map(median).collect();
        (rates, cpu)
    };
    let smis = smismember_requests();
    let mut smis_cpu = Vec::new();
    for (p, c) in [(16, 50), (1, 50)] {
        let (r, cpu) = checks(&smis, &targets, p, c);
        println!(
            "| SMISMEMBER 100 ids, -P {p} -c {c}: ids checked/s | {:.0} | {:.0} | {:.2}x |",
            r[0],
            r[1],
            r[0] / r[1]
        );
        println!(
            "| same, server CPU per id checked, ns | {:.1} | {:.1} | {:.2}x less |",
            cpu[0],
            cpu[1],
            cpu[1] / cpu[0]
        );
        smis_cpu.push(cpu[1]);
    }
    let bin = mexistsbin_requests();
    for ((p, c), redis_cpu) in [(16, 50), (1, 50)].into_iter().zip(smis_cpu) {
        let (r, cpu) = checks(&bin, &[&relcache], p, c);
        println!(
            "| IDSET.MEXISTSBIN 100 ids, -P {p} -c {c}: ids checked/s | {:.0} | – | – |",
            r[0]
        );
        println!(
            "| same, server CPU per id checked, ns (redis: SMISMEMBER) | {:.1} | {redis_cpu:.1} | {:.2}x less |",
            cpu[0],
            redis_cpu / cpu[0]
        );
    }

    let big: Vec<u64> = (1..=BIG_SET).map(|i| i * 13).collect();
    let table = encode(&[b"SET", b"big", &Builder::new().build(&big)]);
    let dec = decimal(&big);
    let mut sadd_args: Vec<&[u8]> = vec![b"SADD", b"big"];
    sadd_args.extend(dec.iter().map(|d| d.as_slice()));
    let sadd = encode(&sadd_args);
    let reps = 21;
    let rel_set = time_one(&relcache, &table, reps);
    let rel_sadd = time_one(&relcache, &sadd, reps);
    let red_sadd = time_one(&redis, &sadd, reps);
    println!("| load one {BIG_SET}-id set, µs (relcache: prebuilt SET; redis: SADD) | {rel_set:.0} | {red_sadd:.0} | {:.1}x faster |", red_sadd / rel_set);
    println!("| load one {BIG_SET}-id set with SADD of decimal ids, µs | {rel_sadd:.0} | {red_sadd:.0} | {:.1}x faster |", red_sadd / rel_sadd);

    // Server CPU per load, rounds alternating between the servers (and, for
    // relcache's prebuilt table, between the two check levels).
    let keyed = |args: &[&[u8]]| {
        let mut a = args.to_vec();
        a[1] = b"big:0000";
        encode(&a)
    };
    let table_req = keyed(&[b"SET", b"big", &Builder::new().build(&big)]);
    let sadd_req = keyed(&sadd_args);
    let check_level = |level: &[u8]| {
        roundtrip(
            &mut relcache.connect(),
            &[b"CONFIG", b"SET", b"idset-table-check", level],
        )
        .unwrap();
    };
    let (mut sample, mut full, mut rel_dec, mut red_dec) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        // About a second of server time a pass (a prebuilt load is ~0.1 ms replacing
        // a key, Redis's SADD several ms).
        check_level(b"sample");
        sample.push(load_cpu(&relcache, &table_req, 5_000));
        check_level(b"full");
        full.push(load_cpu(&relcache, &table_req, 2_000));
        check_level(b"sample");
        rel_dec.push(load_cpu(&relcache, &sadd_req, 600).0);
        // The second pass would add nothing to Redis's sets: only the first counts.
        red_dec.push(load_cpu(&redis, &sadd_req, 200).0);
    }
    let fresh = |v: &[(f64, f64)]| median(v.iter().map(|p| p.0).collect());
    let replace = |v: &[(f64, f64)]| median(v.iter().map(|p| p.1).collect());
    let (rel_dec, red_dec) = (median(rel_dec), median(red_dec));
    for (what, v) in [
        ("idset-table-check sample", &sample),
        ("idset-table-check full", &full),
    ] {
        for (into, cpu) in [("a fresh key", fresh(v)), ("a key it replaces", replace(v))] {
            println!("| server CPU per {BIG_SET}-id load, µs (relcache: prebuilt SET into {into}, {what}; redis: SADD into a fresh key) | {cpu:.0} | {red_dec:.0} | {:.1}x less |", red_dec / cpu);
        }
    }
    println!("| same, both SADD of decimal ids into a fresh key | {rel_dec:.0} | {red_dec:.0} | {:.1}x less |", red_dec / rel_dec);

    let idle = alternate(&targets, rounds, |t| get_p99_under_load(t, false));
    let loaded = alternate(&targets, rounds, |t| get_p99_under_load(t, true));
    println!("| GET p99 idle, µs | {:.0} | {:.0} | |", idle[0], idle[1]);
    println!(
        "| GET p99 while loading {BIG_SET}-id sets 50/s, µs | {:.0} | {:.0} | |",
        loaded[0], loaded[1]
    );
    println!(
        "| GET p99 loaded / idle | {:.2}x | {:.2}x | |",
        loaded[0] / idle[0],
        loaded[1] / idle[1]
    );
}
