//! The relation service end to end: Zipf-distributed users, 90% "does A follow B?"
//! checks and 10% follows, over sharded MySQL (8 logical shards on a private
//! MariaDB) with relcache in front — against the same workload on MySQL alone.
//!
//! ```sh
//! cargo bench --bench relation_vs_mysql
//! USERS=20000 FOLLOWS=60 SKEW=0.99 CONCURRENCY=32 WRITERS=16 DURATION=10 ROUNDS=3 \
//!     MODES=mysql,cached,local,cluster LOCAL_MB=16 cargo bench --bench relation_vs_mysql
//! ```
//!
//! Four modes: MySQL alone (`mysql`), relcache in front (`cached`), relcache in
//! front with the tier's in-process cache of hot users' sets on (`local`: tables
//! kept in process, invalidated by the server's `CLIENT TRACKING`; `LOCAL_MB` bounds
//! it, `ADMIT_AFTER` is how many misses fetch a user's table), and a three-node
//! relcache cluster in front (`cluster`: created with `redis-cli --cluster create`,
//! reached through the tier's slot-routing pool; on one machine this shows what
//! routing costs, not what more machines gain).
//!
//! `CONCURRENCY` tasks check and `WRITERS` tasks follow; whichever side gets ahead
//! of nine checks per follow waits, so both modes run the same 90/10 mix (the
//! achieved share is printed) at the highest rate the machine sustains it.
//!
//! Prints, per mode: checks per second, check p50/p99, follow p99, cache hit ratio,
//! MySQL statements per 1,000 checks (writes included, the same count in both
//! modes), cache-server requests per 1,000 checks (every command the server ran in
//! the measured part — reads, fills, the follows' write-throughs, the in-process
//! cache's fetches and heartbeats — from INFO's `total_commands_processed`), and
//! the in-process hit ratio. It does not measure what the in-process cache costs in
//! memory beyond its tables, nor invalidation traffic under a write-heavy mix. Rounds alternate between the modes and the summary takes medians. The
//! cache starts cold in every cache round and is measured after a warm-up, so the
//! hit ratio is what a running service would see, not a preloaded best case.

#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Zipf};
use relcache_client::{Client, ClusterConfig, ClusterPool, Pool, PoolConfig};
use relcache_relation::service::{LocalCacheConfig, Relations, RelationsConfig};
use relcache_relation::{schema, Cache, ShardMap, Store, StoreConfig};
use support::harness::mariadb::{MariaDb, RawSql};
use support::harness::{invoked_by_cargo_bench, TestServer};

const SHARDS: u32 = 8;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Params {
    users: u64,
    follows: f64,
    skew: f64,
    concurrency: usize,
    writers: usize,
    warmup: Duration,
    duration: Duration,
    rounds: usize,
    modes: Vec<Mode>,
    local_bytes: usize,
    admit_after: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    MySql,
    Cached,
    /// Cached, with the tier's in-process cache on.
    Local,
    /// Cached on a three-node relcache cluster (on this machine: the cost of
    /// routing, not the gain of more machines).
    Cluster,
}

impl Mode {
    fn parse(name: &str) -> Mode {
        match name.trim() {
            "mysql" => Mode::MySql,
            "cached" => Mode::Cached,
            "local" => Mode::Local,
            "cluster" => Mode::Cluster,
            other => panic!("MODES: unknown mode {other:?} (mysql, cached, local, cluster)"),
        }
    }

    fn title(self) -> &'static str {
        match self {
            Mode::MySql => "MySQL alone",
            Mode::Cached => "relcache in front",
            Mode::Local => "+ in-process cache",
            Mode::Cluster => "relcache cluster, 3 nodes",
        }
    }
}

struct RoundResult {
    checks_per_sec: f64,
    check_p50_us: u64,
    check_p99_us: u64,
    follow_p99_us: u64,
    /// Follows among all operations measured: 10% unless the writers fell behind.
    write_share: f64,
    hit_ratio: Option<f64>,
    /// Every statement sent to MySQL, writes included, per 1,000 checks.
    mysql_per_1000_checks: f64,
    /// Statements sent to answer checks, per 1,000 checks: one per check on MySQL
    /// alone; with the cache, one per fill, busy read or fallback (the tier's
    /// counters; each is one statement).
    check_reads_per_1000: f64,
    /// With the cache: sets dropped because a write-through arrived after a later
    /// change to the same set (INFO idset_late_changes), per 1,000 follows, over
    /// the whole round.
    late_per_1000_follows: Option<f64>,
    /// Commands the cache server ran in the measured part, per 1,000 checks.
    cache_requests_per_1000: Option<f64>,
    /// Checks answered by the in-process cache.
    local_hit_ratio: Option<f64>,
}

fn main() {
    if !invoked_by_cargo_bench() {
        return;
    }
    let p = Params {
        users: env("USERS", 20_000),
        follows: env("FOLLOWS", 60.0),
        skew: env("SKEW", 0.99),
        concurrency: env("CONCURRENCY", 32),
        writers: env("WRITERS", 16),
        warmup: Duration::from_secs(env("WARMUP", 3)),
        duration: Duration::from_secs(env("DURATION", 10)),
        rounds: env("ROUNDS", 3),
        modes: env("MODES", "mysql,cached,local".to_string())
            .split(',')
            .map(Mode::parse)
            .collect(),
        local_bytes: env("LOCAL_MB", 16usize) << 20,
        admit_after: env("ADMIT_AFTER", 2),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = MariaDb::start();
    let map = ShardMap::single_host(db.url(), "bench_s", SHARDS).unwrap();
    let store = Store::new(StoreConfig {
        pool_size: 64,
        ..StoreConfig::new(map)
    });
    rt.block_on(async {
        schema::create_all(&store).await.unwrap();
        let rows = load(&store, &p).await;
        println!(
            "loaded {} users, {rows} follows on {SHARDS} shards (mean {:.0} per user)",
            p.users, p.follows
        );
    });

    let mut results: Vec<(Mode, RoundResult)> = Vec::new();
    for round in 0..p.rounds {
        for &mode in &p.modes {
            let r = rt.block_on(run(&store, &p, mode, round as u64));
            println!(
                "round {round} {mode:?}: {:.0} checks/s, check p50 {} µs p99 {} µs, follow p99 {} µs, follows {:.1}%, hit ratio {}, MySQL reads per 1,000 checks {:.0}, all statements {:.0}, sets dropped for late write-throughs per 1,000 follows {}, cache-server requests per 1,000 checks {}, in-process hit ratio {}",
                r.checks_per_sec,
                r.check_p50_us,
                r.check_p99_us,
                r.follow_p99_us,
                r.write_share * 100.0,
                r.hit_ratio.map_or("-".into(), |h| format!("{h:.3}")),
                r.check_reads_per_1000,
                r.mysql_per_1000_checks,
                r.late_per_1000_follows
                    .map_or("-".into(), |l| format!("{l:.2}")),
                r.cache_requests_per_1000
                    .map_or("-".into(), |n| format!("{n:.0}")),
                r.local_hit_ratio.map_or("-".into(), |h| format!("{h:.3}")),
            );
            results.push((mode, r));
        }
    }
    summary(&results, &p.modes);
}

/// Loads the follow graph straight into the tables (row-by-row follows would take
/// the benchmark's whole budget): log-normal out-degrees, Zipf-popular targets, both
/// twins, mutual flags set.
async fn load(store: &Store, p: &Params) -> u64 {
    let mut rng = StdRng::seed_from_u64(1);
    let degree = LogNormal::new(p.follows.ln() - 0.5, 1.0).unwrap();
    let popular = Zipf::new(p.users, 0.8).unwrap();
    let mut edges = std::collections::HashSet::new();
    for a in 0..p.users {
        let n = (degree.sample(&mut rng) as u64).min(p.users - 1);
        for _ in 0..n {
            let b = popular.sample(&mut rng) as u64 - 1;
            if b != a {
                edges.insert((a, b));
            }
        }
    }
    let raw = RawSql::new(store);
    let map = store.shards();
    let mut per_shard: Vec<(Vec<String>, Vec<String>)> = vec![Default::default(); SHARDS as usize];
    for &(a, b) in &edges {
        let mutual = edges.contains(&(b, a)) as u8;
        let ts = 1_700_000_000_000_000 + rng.gen_range(0..1_000_000_000u64);
        per_shard[map.shard_of(a) as usize]
            .0
            .push(format!("({a},{b},{mutual},{ts})"));
        per_shard[map.shard_of(b) as usize]
            .1
            .push(format!("({b},{a},{mutual},{ts})"));
    }
    for (shard, (following, followers)) in per_shard.iter().enumerate() {
        for (table, rows) in [("following", following), ("followers", followers)] {
            for chunk in rows.chunks(2000) {
                let sql = format!(
                    "INSERT IGNORE INTO {{db}}.{table} (user_id, friend_id, mutual, auto_ts) VALUES {}",
                    chunk.join(",")
                );
                raw.exec(shard as u32, &sql, ()).await;
            }
        }
    }
    edges.len() as u64
}

async fn run(store: &Store, p: &Params, mode: Mode, round: u64) -> RoundResult {
    // A fresh cache per round: each cached round starts cold.
    let (servers, cache): (Vec<TestServer>, Cache) = if mode == Mode::Cluster {
        let cluster = support::harness::cluster::RelcacheCluster::start(3);
        let pool = ClusterPool::connect(ClusterConfig {
            seeds: cluster.addrs(),
            pool: PoolConfig {
                max_connections: p.concurrency * 2,
                ..PoolConfig::default()
            },
            ..ClusterConfig::default()
        })
        .await
        .expect("connect to the cluster");
        (cluster.nodes, pool.into())
    } else {
        let server = TestServer::start();
        let pool = Pool::new(PoolConfig {
            addr: server.addr(),
            max_connections: p.concurrency * 2,
            ..PoolConfig::default()
        });
        (vec![server], pool.into())
    };
    let relations = Arc::new(Relations::new(
        cache,
        store.clone(),
        RelationsConfig {
            local_cache: (mode == Mode::Local).then(|| LocalCacheConfig {
                max_bytes: p.local_bytes,
                admit_after: p.admit_after,
                ..LocalCacheConfig::default()
            }),
            ..RelationsConfig::default()
        },
    ));
    let zipf = Zipf::new(p.users, p.skew).unwrap();
    let start = Instant::now();
    let measure_from = start + p.warmup;
    let end = measure_from + p.duration;
    let baseline = Arc::new(tokio::sync::Mutex::new(None::<Baseline>));
    let addrs: Vec<String> = servers.iter().map(|s| s.addr()).collect();
    // Readers check and writers follow, each side pausing while it is ahead, so
    // the run is exactly the 90/10 mix at whatever rate the system sustains it.
    // (One closed loop mixing both would make every task wait out MySQL's write
    // latency in turn and leave most of the machine idle.)
    let done_checks = Arc::new(AtomicU64::new(0));
    let done_follows = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..p.concurrency + p.writers)
        .map(|i| {
            let (relations, baseline) = (relations.clone(), baseline.clone());
            let (done_checks, done_follows) = (done_checks.clone(), done_follows.clone());
            let store = store.clone();
            let addrs = addrs.clone();
            let users = p.users;
            let writer = i >= p.concurrency;
            let slack = p.writers as u64;
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(round * 1000 + i as u64);
                let mut checks = Histogram::<u64>::new(3).unwrap();
                let mut follows = Histogram::<u64>::new(3).unwrap();
                loop {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    if now >= measure_from {
                        let mut b = baseline.lock().await;
                        if b.is_none() {
                            *b = Some(Baseline {
                                queries: store.queries(),
                                reads: check_reads(&relations),
                                local_hits: relations.stats().local_hits.load(Relaxed),
                                commands: commands_processed(&addrs).await,
                            });
                        }
                    }
                    // Hold the mix at nine checks per follow, whichever side is
                    // ahead waiting for the other (a little slack lets both start).
                    let (c, f) = (done_checks.load(Relaxed), done_follows.load(Relaxed));
                    let ahead = if writer {
                        f * 9 >= c + 9
                    } else {
                        c >= 9 * f + 9 * slack
                    };
                    if ahead {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                        continue;
                    }
                    let a = zipf.sample(&mut rng) as u64 - 1;
                    let b = rng.gen_range(0..users);
                    if writer && a == b {
                        continue;
                    }
                    let t0 = Instant::now();
                    match (mode, writer) {
                        (Mode::MySql, false) => drop(store.is_following(a, b).await.unwrap()),
                        (Mode::MySql, true) => drop(store.follow(a, b).await.unwrap()),
                        (_, false) => drop(relations.is_following(a, b).await.unwrap()),
                        (_, true) => drop(relations.follow(a, b).await.unwrap()),
                    }
                    let counter = if writer { &done_follows } else { &done_checks };
                    counter.fetch_add(1, Relaxed);
                    if t0 >= measure_from {
                        let us = t0.elapsed().as_micros() as u64;
                        if writer {
                            follows.record(us.max(1)).unwrap();
                        } else {
                            checks.record(us.max(1)).unwrap();
                        }
                    }
                }
                (checks, follows)
            })
        })
        .collect();
    let (mut checks, mut follows) = (
        Histogram::<u64>::new(3).unwrap(),
        Histogram::<u64>::new(3).unwrap(),
    );
    for t in tasks {
        let (c, f) = t.await.unwrap();
        checks.add(c).unwrap();
        follows.add(f).unwrap();
    }
    let commands = commands_processed(&addrs).await;
    let b = baseline
        .lock()
        .await
        .take()
        .expect("the run reached its measured part");
    let n = checks.len() as f64;
    let reads = (check_reads(&relations) - b.reads) as f64;
    let cached = mode != Mode::MySql;
    let local_hits = (relations.stats().local_hits.load(Relaxed) - b.local_hits) as f64;
    let late: f64 = servers
        .iter()
        .map(|s| harness_info(s, "idsets", "idset_late_changes"))
        .sum();
    let all_follows = done_follows.load(Relaxed).max(1) as f64;
    RoundResult {
        checks_per_sec: n / p.duration.as_secs_f64(),
        check_p50_us: checks.value_at_quantile(0.5),
        check_p99_us: checks.value_at_quantile(0.99),
        follow_p99_us: follows.value_at_quantile(0.99),
        write_share: follows.len() as f64 / (n + follows.len() as f64),
        hit_ratio: cached.then(|| 1.0 - reads / n),
        mysql_per_1000_checks: (store.queries() - b.queries) as f64 * 1000.0 / n,
        check_reads_per_1000: match mode {
            Mode::MySql => 1000.0,
            Mode::Cached | Mode::Local | Mode::Cluster => reads * 1000.0 / n,
        },
        late_per_1000_follows: cached.then(|| late * 1000.0 / all_follows),
        cache_requests_per_1000: cached
            .then(|| commands.saturating_sub(b.commands) as f64 * 1000.0 / n),
        local_hit_ratio: (mode == Mode::Local).then(|| local_hits / n),
    }
}

/// The counters at the start of the measured part.
struct Baseline {
    queries: u64,
    reads: u64,
    local_hits: u64,
    commands: u64,
}

/// INFO's `total_commands_processed` summed over the cache servers at `addrs`
/// (0 when the mode runs without them: nothing listens there that it uses).
async fn commands_processed(addrs: &[String]) -> u64 {
    let mut total = 0;
    for addr in addrs {
        let Ok(mut c) = Client::connect(addr.as_str()).await else {
            continue;
        };
        let fields = c
            .run(relcache_client::Cmd::info("stats"))
            .await
            .unwrap_or_default();
        total += fields
            .iter()
            .find(|(k, _)| k == "total_commands_processed")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// One INFO field of the relcache under test.
fn harness_info(server: &TestServer, section: &str, name: &str) -> f64 {
    support::harness::info_value(&server.cli_out(&["INFO", section]), name)
}

/// Checks the tier answered from MySQL: each one statement. (The last two are zero
/// while the cache is healthy; a follow that hits either is counted too.)
fn check_reads(r: &Relations) -> u64 {
    let s = r.stats();
    s.cache_fills.load(Relaxed)
        + s.fills_refused.load(Relaxed)
        + s.busy_reads.load(Relaxed)
        + s.cache_errors.load(Relaxed)
        + s.cache_bypassed.load(Relaxed)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn summary(results: &[(Mode, RoundResult)], modes: &[Mode]) {
    let pick = |mode: Mode, f: &dyn Fn(&RoundResult) -> f64| {
        median(
            results
                .iter()
                .filter(|(m, _)| *m == mode)
                .map(|(_, r)| f(r))
                .collect(),
        )
    };
    println!("\nmedians over rounds:");
    let titles: Vec<&str> = modes.iter().map(|m| m.title()).collect();
    println!("| measure | {} |", titles.join(" | "));
    println!("|---|{}", "---:|".repeat(modes.len()));
    type Getter = fn(&RoundResult) -> Option<f64>;
    let rows: [(&str, usize, Getter); 11] = [
        ("checks/s", 0, |r| Some(r.checks_per_sec)),
        ("check p50 (µs)", 0, |r| Some(r.check_p50_us as f64)),
        ("check p99 (µs)", 0, |r| Some(r.check_p99_us as f64)),
        ("follow p99 (µs)", 0, |r| Some(r.follow_p99_us as f64)),
        ("follows, % of operations", 1, |r| {
            Some(r.write_share * 100.0)
        }),
        ("cache-server requests per 1,000 checks", 0, |r| {
            r.cache_requests_per_1000
        }),
        ("MySQL reads per 1,000 checks", 0, |r| {
            Some(r.check_reads_per_1000)
        }),
        (
            "MySQL statements per 1,000 checks, writes included",
            0,
            |r| Some(r.mysql_per_1000_checks),
        ),
        ("cache hit ratio (not MySQL)", 3, |r| r.hit_ratio),
        ("in-process hit ratio", 3, |r| r.local_hit_ratio),
        (
            "sets dropped for late write-throughs, per 1,000 follows",
            2,
            |r| r.late_per_1000_follows,
        ),
    ];
    for (name, digits, f) in rows {
        let cells: Vec<String> = modes
            .iter()
            .map(|&m| {
                let has = results.iter().any(|(rm, r)| *rm == m && f(r).is_some());
                if !has {
                    return "–".to_string();
                }
                let v = pick(m, &|r| f(r).unwrap_or(0.0));
                format!("{v:.digits$}")
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}
