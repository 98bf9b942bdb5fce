//! The relation tier's in-process cache (`RelationsConfig::local_cache`) end to
//! end: the real relcache-server (its `CLIENT TRACKING`) in front of a real
//! MariaDB. A hot user's set answers without a server request; a change made by
//! another client or another service instance reaches this one as an invalidation
//! and the next answer is right; this instance's own writes are read back at once;
//! a flush and a server restart drop everything held in process.

mod harness;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use harness::mariadb::{self, relation_store};
use harness::{TempDir, TestServer};
use relcache_client::{Client, Pool, PoolConfig};
use relcache_relation::service::{LocalCacheConfig, Relations, RelationsConfig};
use relcache_relation::Store;

const SHARDS: u32 = 8;

fn tier(addr: &str, store: Store) -> Relations {
    let pool = Pool::new(PoolConfig {
        addr: addr.into(),
        max_connections: 16,
        command_timeout: Duration::from_secs(5),
        ..PoolConfig::default()
    });
    let config = RelationsConfig {
        cache_failure_limit: 1,
        cache_retry_interval: Duration::from_millis(50),
        // The default heartbeat (1 s): a shorter one can be missed on a loaded
        // machine, and a new session would turn a test's hits into fetches.
        local_cache: Some(LocalCacheConfig {
            admit_after: 1,
            ..LocalCacheConfig::default()
        }),
        ..RelationsConfig::default()
    };
    Relations::new(pool, store, config)
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Requests the server ran, other than INFO itself and the listener's heartbeats.
async fn requests(server: &TestServer) -> u64 {
    let mut c = Client::connect(server.addr()).await.unwrap();
    let text = match c.cmd(&["INFO", "commandstats"]).await.unwrap() {
        relcache_client::Frame::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
        f => panic!("INFO: {f:?}"),
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("info:") && !l.starts_with("ping:"))
        .map(|l| {
            let calls = l.split_once("calls=").expect("a calls field").1;
            let digits = calls.split(',').next().unwrap();
            digits.parse::<u64>().unwrap()
        })
        .sum()
}

/// Reads `a`'s set until a read is answered in process: the first read meets the
/// server process and fills the set, the next fetches the table.
async fn make_local(t: &Relations, a: u64) {
    wait_for("the listener", || t.local_cache_listening() == Some(true)).await;
    for _ in 0..5 {
        let hits = t.stats().local_hits.load(Relaxed);
        t.is_following(a, 1).await.unwrap();
        if t.stats().local_hits.load(Relaxed) > hits {
            return;
        }
    }
    panic!("user {a}'s set never became local");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_users_set_answers_in_process_without_a_server_request() {
    let server = TestServer::start();
    let store = relation_store(mariadb::shared().url(), "local_hit", SHARDS, |_| {}).await;
    let t = tier(&server.addr(), store);
    let a = 21_000_001;
    for b in [5, 6, 7] {
        t.follow(a, b).await.unwrap();
    }
    make_local(&t, a).await;
    let (hits, before) = (t.stats().local_hits.load(Relaxed), requests(&server).await);
    for _ in 0..50 {
        assert!(t.is_following(a, 6).await.unwrap());
        assert!(!t.is_following(a, 8).await.unwrap());
        assert_eq!(
            t.which_followed(a, &[5, 8, 7]).await.unwrap(),
            [true, false, true]
        );
    }
    assert_eq!(t.following_count(a).await.unwrap(), 3);
    let mut set = t.following_set(a).await.unwrap();
    set.sort_unstable();
    assert_eq!(set, [5, 6, 7]);
    assert_eq!(
        requests(&server).await,
        before,
        "a local hit must not ask the server"
    );
    assert_eq!(t.stats().local_hits.load(Relaxed) - hits, 152);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_change_reaches_the_next_answer() {
    let server = TestServer::start();
    let store = relation_store(mariadb::shared().url(), "local_other", SHARDS, |_| {}).await;
    let t = tier(&server.addr(), store.clone());
    let a = 22_000_001;
    t.follow(a, 5).await.unwrap();
    make_local(&t, a).await;
    let key = String::from_utf8(t.cache_key(a).to_vec()).unwrap();
    let mut other = Client::connect(server.addr()).await.unwrap();
    // Straight to the cache, as another writer would: each change is invalidated,
    // the table fetched again on the next read, and the answer follows the change.
    for round in 0..10u64 {
        let id = 100 + round;
        for (cmd, want) in [("IDSET.ADD", true), ("IDSET.REM", false)] {
            let seen = t.stats().local_invalidations.load(Relaxed);
            other
                .cmd(&[cmd, key.as_str(), &id.to_string()])
                .await
                .unwrap();
            wait_for("the invalidation", || {
                t.stats().local_invalidations.load(Relaxed) > seen
            })
            .await;
            assert_eq!(t.is_following(a, id).await.unwrap(), want, "{cmd} {id}");
        }
    }
    assert!(t.stats().local_fetches.load(Relaxed) >= 10);

    // A follow through another service instance: its write-through invalidates.
    let u = tier(&server.addr(), store);
    let seen = t.stats().local_invalidations.load(Relaxed);
    assert!(!t.is_following(a, 9).await.unwrap());
    u.follow(a, 9).await.unwrap();
    wait_for("the invalidation", || {
        t.stats().local_invalidations.load(Relaxed) > seen
    })
    .await;
    assert!(t.is_following(a, 9).await.unwrap());
    assert_eq!(t.following_count(a).await.unwrap(), 2);
    u.unfollow(a, 5).await.unwrap();
    wait_for("the invalidation", || {
        t.stats().local_invalidations.load(Relaxed) > seen + 1
    })
    .await;
    assert_eq!(t.which_followed(a, &[5, 9]).await.unwrap(), [false, true]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_instances_own_write_is_read_back_at_once() {
    let server = TestServer::start();
    let store = relation_store(mariadb::shared().url(), "local_own", SHARDS, |_| {}).await;
    let t = tier(&server.addr(), store);
    let a = 23_000_001;
    t.follow(a, 5).await.unwrap();
    for b in 10..30 {
        make_local(&t, a).await;
        t.follow(a, b).await.unwrap();
        assert!(t.is_following(a, b).await.unwrap(), "follow {b}");
        make_local(&t, a).await;
        t.unfollow(a, b).await.unwrap();
        assert!(!t.is_following(a, b).await.unwrap(), "unfollow {b}");
    }
    assert!(t.is_following(a, 5).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_drops_everything_held_in_process() {
    let server = TestServer::start();
    let store = relation_store(mariadb::shared().url(), "local_flush", SHARDS, |_| {}).await;
    let t = tier(&server.addr(), store);
    let (a, b) = (24_000_001, 24_000_002);
    t.follow(a, 5).await.unwrap();
    t.follow(b, 6).await.unwrap();
    make_local(&t, a).await;
    make_local(&t, b).await;
    assert_eq!(t.local_cache_size().unwrap().0, 2);
    let flushes = t.stats().local_flushes.load(Relaxed);
    let mut other = Client::connect(server.addr()).await.unwrap();
    other.cmd(&["FLUSHALL"]).await.unwrap();
    wait_for("the flush", || {
        t.stats().local_flushes.load(Relaxed) > flushes
    })
    .await;
    assert_eq!(t.local_cache_size(), Some((0, 0)));
    // Answers come from MySQL and fill again.
    assert!(t.is_following(a, 5).await.unwrap());
    assert!(t.is_following(b, 6).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_drops_everything_held_in_process() {
    let dir = TempDir::new("local-restart");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = || TestServer::start_with(&["--dir", dir.path(), "--port", &port.to_string()]);
    let server = start();
    let store = relation_store(mariadb::shared().url(), "local_restart", SHARDS, |_| {}).await;
    let t = tier(&server.addr(), store.clone());
    let a = 25_000_001;
    t.follow(a, 5).await.unwrap();
    make_local(&t, a).await;
    let flushes = t.stats().local_flushes.load(Relaxed);
    drop(server);
    wait_for("the listener to notice", || {
        t.stats().local_flushes.load(Relaxed) > flushes
    })
    .await;
    assert_eq!(t.local_cache_size(), Some((0, 0)));
    // Changed while the server is down: never written through.
    store.follow(a, 6).await.unwrap();
    let server = start();
    let addr = server.addr();
    assert_eq!(addr, format!("127.0.0.1:{port}"));
    wait_for("a new listener", || t.local_cache_listening() == Some(true)).await;
    make_local(&t, a).await;
    assert_eq!(t.which_followed(a, &[5, 6]).await.unwrap(), [true, true]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_local_read_agrees_with_a_model_under_churn_from_two_instances() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    let server = TestServer::start();
    let store = relation_store(mariadb::shared().url(), "local_model", SHARDS, |_| {}).await;
    // `t` reads and writes; `u`, another instance, writes too: its changes reach
    // `t` only as invalidations, so after each of them `t` waits for one.
    let t = tier(&server.addr(), store.clone());
    let u = tier(&server.addr(), store);
    let users: Vec<u64> = (1..=8).map(|i| i * 26_000_003).collect();
    let mut rng = StdRng::seed_from_u64(26);
    let mut model: BTreeSet<(u64, u64)> = BTreeSet::new();
    wait_for("the listener", || t.local_cache_listening() == Some(true)).await;
    for step in 0..300 {
        let a = users[rng.gen_range(0..users.len())];
        let b = users[rng.gen_range(0..users.len())];
        match rng.gen_range(0..10) {
            0..=2 if a != b => {
                let writer = if rng.gen_bool(0.5) { &t } else { &u };
                let seen = t.stats().local_invalidations.load(Relaxed);
                // A table `t` holds was fetched on a tracked connection, so a
                // change by `u` is bound to reach `t` as an invalidation.
                let held = t.local_cache_holds(a);
                let changed = if rng.gen_bool(0.6) {
                    model.insert((a, b));
                    writer.follow(a, b).await.unwrap().created
                } else {
                    model.remove(&(a, b));
                    writer.unfollow(a, b).await.unwrap().removed
                };
                if changed && std::ptr::eq(writer, &u) && held {
                    wait_for("the invalidation", || {
                        t.stats().local_invalidations.load(Relaxed) > seen
                    })
                    .await;
                }
            }
            _ => {
                let want: Vec<bool> = users.iter().map(|&x| model.contains(&(a, x))).collect();
                assert_eq!(
                    t.which_followed(a, &users).await.unwrap(),
                    want,
                    "step {step}"
                );
                let mut set = t.following_set(a).await.unwrap();
                set.sort_unstable();
                let want: Vec<u64> = model.iter().filter(|p| p.0 == a).map(|p| p.1).collect();
                assert_eq!(set, want, "step {step}");
                let among: Vec<u64> = want
                    .iter()
                    .copied()
                    .filter(|&f| model.contains(&(f, b)))
                    .collect();
                assert_eq!(t.followers_among(b, a).await.unwrap(), among, "step {step}");
            }
        }
    }
    assert!(t.stats().local_hits.load(Relaxed) > 100);
    assert!(t.stats().local_invalidations.load(Relaxed) > 0);
}
