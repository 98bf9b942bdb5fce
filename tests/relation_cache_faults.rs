//! The relation service when the cache hangs: the real relcache-server behind a
//! proxy that can swallow traffic (a partition, not a refusal), in front of the
//! real MariaDB. A hung cache is skipped after a few failures and taken back when it
//! answers; a write-through the partition swallowed is never read back.

mod harness;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use harness::mariadb::{self, relation_store};
use harness::proxy::FaultProxy;
use harness::TestServer;
use relcache_client::{Cmd, Pool, PoolConfig};
use relcache_relation::service::{Relations, RelationsConfig};

const SHARDS: u32 = 8;
/// How long a cache call waits: short, since every hung call costs a test this.
const CACHE_TIMEOUT: Duration = Duration::from_millis(300);

/// A server, the proxy in front of it, and the tier over the proxy.
async fn behind_proxy(test: &str, config: RelationsConfig) -> (TestServer, FaultProxy, Relations) {
    let server = TestServer::start();
    let proxy = FaultProxy::start(&server.addr());
    let pool = Pool::new(PoolConfig {
        addr: proxy.addr(),
        max_connections: 8,
        connect_timeout: CACHE_TIMEOUT,
        command_timeout: CACHE_TIMEOUT,
        ..PoolConfig::default()
    });
    let store = relation_store(mariadb::shared().url(), test, SHARDS, |_| {}).await;
    (server, proxy, Relations::new(pool, store, config))
}

/// No breaker: every call tries the cache, so only the suspect rule stands between
/// a stale set and a reader.
fn no_breaker() -> RelationsConfig {
    RelationsConfig {
        cache_failure_limit: u32::MAX,
        ..RelationsConfig::default()
    }
}

/// Reads until the tier has taken the cache back, within `limit`.
async fn until_cache_is_back(t: &Relations, limit: Duration) {
    let deadline = Instant::now() + limit;
    while t.cache_down() {
        assert!(Instant::now() < deadline, "the cache was never taken back");
        t.is_following(1, 2).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_cache_is_skipped_after_a_few_failures_and_taken_back_when_it_answers() {
    let limit = 2;
    let retry = Duration::from_millis(500);
    let config = RelationsConfig {
        cache_failure_limit: limit,
        cache_retry_interval: retry,
        ..RelationsConfig::default()
    };
    let (_server, proxy, t) = behind_proxy("hung", config).await;
    t.follow(1, 2).await.unwrap();
    assert!(t.is_following(1, 2).await.unwrap(), "now cached");

    proxy.blackhole();
    let (accepted, started) = (proxy.accepted(), Instant::now());
    for _ in 0..25 {
        assert!(t.is_following(1, 2).await.unwrap());
        assert!(!t.is_following(1, 3).await.unwrap());
    }
    let outage = started.elapsed();
    assert!(t.cache_down());
    let s = t.stats();
    let (errors, bypassed) = (s.cache_errors.load(Relaxed), s.cache_bypassed.load(Relaxed));
    // The limit's failures, then one probe per interval at most: nearly every read
    // skips the cache. (A bound from the outage's length alone would be no test:
    // without the breaker each read's timeout stretches the outage.)
    assert!(errors >= u64::from(limit), "{errors} failed calls");
    assert!(
        bypassed >= 40,
        "{bypassed} of 50 reads skipped the cache, {errors} waited for it, in {outage:?}"
    );
    assert_eq!(
        errors + bypassed,
        50,
        "every read tried the cache or skipped it"
    );
    // The first failure was on a connection opened before the outage; each later
    // attempt is a new one.
    assert!(
        proxy.accepted() - accepted < errors,
        "only failed attempts reached the cache"
    );

    // A follow while the cache is down commits, and is read back from MySQL.
    t.follow(1, 3).await.unwrap();
    assert!(t.is_following(1, 3).await.unwrap());
    assert_eq!(t.suspect_sets(), 1, "its write-through could not be sent");

    proxy.pass();
    until_cache_is_back(&t, retry * 20).await;
    let hits = s.cache_hits.load(Relaxed);
    assert!(
        t.is_following(1, 3).await.unwrap(),
        "the follow made in the outage"
    );
    assert!(t.is_following(1, 2).await.unwrap());
    assert!(
        s.cache_hits.load(Relaxed) > hits,
        "answered by the cache again"
    );
    assert_eq!(t.suspect_sets(), 0);
    assert_eq!(s.suspects_cleared.load(Relaxed), 1);
    let cached = t
        .cache()
        .run(Cmd::idset_members(t.cache_key(1)))
        .await
        .unwrap();
    let mut cached = cached.expect("refilled after the stale set was deleted");
    cached.sort_unstable();
    assert_eq!(cached, [2, 3]);
}

/// The partition swallows the write-through and the delete meant to replace it; the
/// cache comes back still holding the old set. This process must not read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_the_partition_swallowed_is_never_read_back() {
    let (server, proxy, t) = behind_proxy("swallowed", no_breaker()).await;
    t.follow(1, 2).await.unwrap();
    assert!(!t.is_following(1, 3).await.unwrap(), "cached without 3");

    proxy.blackhole();
    let swallowed = proxy.swallowed();
    let out = t.follow(1, 3).await.unwrap();
    assert!(out.created);
    assert!(
        proxy.swallowed() > swallowed,
        "the write-through was sent and lost"
    );
    assert_eq!(t.stats().write_through_failures.load(Relaxed), 1);
    assert!(
        t.is_following(1, 3).await.unwrap(),
        "from MySQL during the outage"
    );

    proxy.pass();
    // The cache still holds the set without 3: nothing of the write arrived.
    // Asked of the server directly, past the proxy and the tier.
    let mut direct = server.conn();
    let mut cached_has_3 = || -> Option<bool> {
        redis::cmd("IDSET.EXISTS")
            .arg(t.cache_key(1).as_ref())
            .arg(3)
            .query(&mut direct)
            .unwrap()
    };
    assert_eq!(cached_has_3(), Some(false), "the cache missed the write");
    assert_eq!(t.suspect_sets(), 1);

    assert!(
        t.is_following(1, 3).await.unwrap(),
        "never the stale answer"
    );
    assert_eq!(
        t.relation(1, 3).await.unwrap(),
        relcache_relation::Relation::Following
    );
    assert_eq!(t.following_count(1).await.unwrap(), 2);
    assert_eq!(t.suspect_sets(), 0, "deleted once the cache answered");
    assert_eq!(cached_has_3(), Some(true), "refilled from MySQL");
}

/// Suspect sets are read from MySQL by every read API, not only by membership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_skips_a_suspect_set() {
    let (_server, proxy, t) = behind_proxy("suspectreads", no_breaker()).await;
    // 1 and 5 follow 2 and 4; everyone's set is cached.
    for (a, b) in [(1, 2), (1, 4), (5, 2), (5, 4), (4, 9)] {
        t.follow(a, b).await.unwrap();
    }
    for u in [1, 2, 4, 5] {
        t.following_count(u).await.unwrap();
    }
    // 1 follows 5 and 2 follows 9, but the cache never hears of either.
    proxy.blackhole();
    t.follow(1, 5).await.unwrap();
    t.follow(2, 9).await.unwrap();
    assert_eq!(t.suspect_sets(), 2);

    // Reads while the suspects are still in the cache: answered from MySQL.
    assert_eq!(t.following_set(1).await.unwrap().len(), 3);
    assert_eq!(t.common_following(1, 5).await.unwrap(), [2, 4]);
    assert_eq!(t.followers_among(9, 1).await.unwrap(), [2, 4]);
    assert_eq!(
        t.which_followed(1, &[2, 4, 5, 6]).await.unwrap(),
        [true, true, true, false]
    );
    proxy.pass();
    assert_eq!(t.followers_among(9, 1).await.unwrap(), [2, 4]);
    assert_eq!(t.suspect_sets(), 0);
    assert!(t.stats().cache_bypassed.load(Relaxed) > 0);
}
