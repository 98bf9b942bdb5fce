//! The relation tier across a cache restart from a snapshot, with the real parts: a
//! real relcache-server saving to and loading from a real file, a real MariaDB.
//! The snapshot is older than MySQL (follows and unfollows commit while the cache
//! is down), and no read may ever answer what MySQL contradicts.

mod harness;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use harness::mariadb::{self, relation_store};
use harness::proxy::FaultProxy;
use harness::{TempDir, TestServer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relcache_client::{Cmd, Pool, PoolConfig};
use relcache_relation::service::{Relations, RelationsConfig};
use relcache_relation::Store;

const SHARDS: u32 = 8;

/// Who follows whom: `(follower, followed)`.
type Model = BTreeSet<(u64, u64)>;

fn start_cache(dir: &TempDir, port: u16) -> TestServer {
    let port = port.to_string();
    TestServer::start_with(&["--dir", dir.path(), "--port", &port])
}

fn relations(addr: &str, store: Store) -> Relations {
    let pool = Pool::new(PoolConfig {
        addr: addr.into(),
        max_connections: 16,
        command_timeout: Duration::from_secs(5),
        ..PoolConfig::default()
    });
    let config = RelationsConfig {
        // Down means down at once: the test kills the cache on purpose.
        cache_failure_limit: 1,
        cache_retry_interval: Duration::from_millis(50),
        ..RelationsConfig::default()
    };
    Relations::new(pool, store, config)
}

/// A free port for the cache, kept across its restart.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Follows and unfollows at random among `users`, through `t`, kept in `model`.
async fn churn(t: &Relations, rng: &mut StdRng, users: &[u64], model: &mut Model, steps: usize) {
    for _ in 0..steps {
        let a = users[rng.gen_range(0..users.len())];
        let b = users[rng.gen_range(0..users.len())];
        if a == b {
            continue;
        }
        if rng.gen_bool(0.6) {
            t.follow(a, b).await.unwrap();
            model.insert((a, b));
        } else {
            t.unfollow(a, b).await.unwrap();
            model.remove(&(a, b));
        }
    }
}

/// Every read API the cache answers, for every user, against the model.
async fn check_reads(t: &Relations, users: &[u64], model: &Model) {
    for &a in users {
        let want: Vec<bool> = users.iter().map(|&x| model.contains(&(a, x))).collect();
        assert_eq!(
            t.which_followed(a, users).await.unwrap(),
            want,
            "which_followed {a}"
        );
        for &b in users {
            assert_eq!(
                t.is_following(a, b).await.unwrap(),
                model.contains(&(a, b)),
                "is_following {a} {b}"
            );
        }
        let x = users[(a as usize) % users.len()];
        let want: Vec<u64> = users
            .iter()
            .copied()
            .filter(|&f| model.contains(&(a, f)) && model.contains(&(f, x)))
            .collect();
        assert_eq!(
            t.followers_among(x, a).await.unwrap(),
            want,
            "followers_among {x} {a}"
        );
    }
}

/// Reads every user's set through `t` so that all are cached.
async fn warm(t: &Relations, users: &[u64]) {
    for &a in users {
        t.is_following(a, a).await.unwrap();
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scenario: sets cached and saved, more changes after the save, the cache
/// killed, changes while it is down, the cache back from the snapshot. Returns
/// the new cache, the model and the users.
async fn restart_behind_mysql(
    test: &str,
    dir: &TempDir,
    port: u16,
) -> (TestServer, Store, Model, Vec<u64>) {
    let store = relation_store(mariadb::shared().url(), test, SHARDS, |_| {}).await;
    let users: Vec<u64> = (1..=16).map(|i| i * 7_000_003).collect();
    let mut rng = StdRng::seed_from_u64(16);
    let mut model = Model::new();

    let cache = start_cache(dir, port);
    let before = relations(&cache.addr(), store.clone());
    churn(&before, &mut rng, &users, &mut model, 120).await;
    warm(&before, &users).await;
    let () = redis::cmd("SAVE").query(&mut cache.conn()).unwrap();
    // Committed after the snapshot, while the cache still runs: written through
    // to the old process only.
    churn(&before, &mut rng, &users, &mut model, 40).await;
    drop(cache); // SIGKILL
                 // Committed while the cache is down: written through nowhere.
    churn(&before, &mut rng, &users, &mut model, 40).await;
    (start_cache(dir, port), store, model, users)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_restarted_from_an_old_snapshot_never_answers_what_mysql_contradicts() {
    let dir = TempDir::new("restart");
    let port = free_port();
    let (cache, store, model, users) = restart_behind_mysql("restart", &dir, port).await;

    let after = relations(&cache.addr(), store);
    // From the first read on, answers are MySQL's: while the catch-up runs, from
    // MySQL itself; after, from caught-up sets.
    check_reads(&after, &users, &model).await;
    wait_for("the catch-up", || after.stats().catchups.load(Relaxed) == 1).await;
    assert!(after.stats().catchup_changes.load(Relaxed) >= 80);
    let hits = after.stats().cache_hits.load(Relaxed);
    check_reads(&after, &users, &model).await;
    assert!(
        after.stats().cache_hits.load(Relaxed) > hits,
        "caught-up sets are read again"
    );
    // Every set still cached is exactly MySQL's.
    for &u in &users {
        let cached = after
            .cache()
            .run(Cmd::idset_members(after.cache_key(u)))
            .await
            .unwrap();
        if let Some(mut ids) = cached {
            ids.sort_unstable();
            let want: Vec<u64> = model.iter().filter(|p| p.0 == u).map(|p| p.1).collect();
            assert_eq!(ids, want, "user {u}");
        }
    }
    // A second service meeting the same process trusts the first one's catch-up.
    let other = relations(&cache.addr(), after.store().clone());
    check_reads(&other, &users, &model).await;
    assert_eq!(other.stats().catchups.load(Relaxed), 0);
    assert!(other.stats().cache_hits.load(Relaxed) > 0);
}

/// The same scenario with the catch-up skipped (the marker that says "caught up"
/// forged): the snapshot does answer stale, so the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_catch_up_the_snapshot_would_answer_stale() {
    let dir = TempDir::new("restart-stale");
    let port = free_port();
    let (cache, store, model, users) = restart_behind_mysql("restart_stale", &dir, port).await;
    let mut con = cache.conn();
    while harness::info_stat::<u8>(&mut con, "persistence", "loading") == 1 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    let run_id: String = harness::info_value(&info, "run_id");
    let () = redis::cmd("SET")
        .arg("following:caught-up")
        .arg(&run_id)
        .query(&mut con)
        .unwrap();
    let t = relations(&cache.addr(), store);
    let mut wrong = 0;
    for &a in &users {
        for &b in &users {
            wrong += usize::from(t.is_following(a, b).await.unwrap() != model.contains(&(a, b)));
        }
    }
    assert!(
        wrong > 0,
        "the snapshot missed nothing: the scenario tests nothing"
    );
}

/// The replay's blind spot: a write-through lost to an unreachable cache is mended
/// by deleting the set once the cache answers; a snapshot taken between the loss and
/// that delete holds the stale set, and the change is older than the replay's
/// window. The service that mended it deletes it again before reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_mended_after_the_snapshot_is_not_brought_back_stale() {
    let dir = TempDir::new("restart-mended");
    let port = free_port();
    let store = relation_store(mariadb::shared().url(), "restart_mended", SHARDS, |_| {}).await;
    let (a, b) = (11_000_001u64, 11_000_002u64);
    let cache = start_cache(&dir, port);
    // Bytes into a black hole are lost for good, as in a partition; a paused
    // server would run the write-through when it woke.
    let proxy = FaultProxy::start(&cache.addr());
    let pool = Pool::new(PoolConfig {
        addr: proxy.addr(),
        max_connections: 4,
        command_timeout: Duration::from_millis(300),
        ..PoolConfig::default()
    });
    let config = RelationsConfig {
        cache_failure_limit: 1,
        cache_retry_interval: Duration::from_millis(50),
        catchup_margin: Duration::from_millis(500),
        ..RelationsConfig::default()
    };
    let t = Relations::new(pool, store, config);
    assert!(!t.is_following(a, b).await.unwrap()); // a's empty set is cached
    proxy.blackhole();
    t.follow(a, b).await.unwrap(); // the write-through is lost: a is suspect
    proxy.pass();
    assert_eq!(t.suspect_sets(), 1);
    // The snapshot, well past the replay's margin after the follow, still holds
    // a's set without b.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let () = redis::cmd("SAVE").query(&mut cache.conn()).unwrap();
    // The service deletes a's set on its next call, and trusts it again.
    assert!(t.is_following(a, b).await.unwrap());
    wait_for("the mend", || t.suspect_sets() == 0).await;
    drop(cache);
    let _cache = start_cache(&dir, port);
    for _ in 0..50 {
        assert!(t.is_following(a, b).await.unwrap(), "stale set read back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(t.stats().catchups.load(Relaxed), 1);
}
