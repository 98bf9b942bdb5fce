//! The relation service end to end: the real relcache-server as the cache in front
//! of a real MariaDB with eight logical shards. Every read against a model; the
//! fill/write race; a hundred concurrent misses; fills that fail or are abandoned
//! (their leases must be let go at once); MySQL dying mid-run; the cache going away.
//! The scenarios marked `on_both!` run on one node and again on a three-node
//! relcache cluster (more of the cluster in `relation_cluster.rs`).

mod harness;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::cluster::RelcacheCluster;
use harness::mariadb::{self, relation_store, MariaDb};
use harness::TestServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relcache_client::{build_table, Cmd, LeaseOpts, Leased, LoadOpts, Pool, PoolConfig};
use relcache_relation::service::{RelationError, Relations, RelationsConfig};
use relcache_relation::Cache;
use relcache_relation::{Cursor, Relation};

const SHARDS: u32 = 8;

/// Who follows whom: `(follower, followed)`.
type Model = BTreeSet<(u64, u64)>;

fn pool(server: &TestServer) -> Pool {
    Pool::new(PoolConfig {
        addr: server.addr(),
        max_connections: 64,
        command_timeout: Duration::from_secs(5),
        ..PoolConfig::default()
    })
}

/// Where a scenario's cache runs: those marked `on_both!` run once on each.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Node,
    Cluster,
}

/// Runs `scenario(kind)` as two tests, on one relcache node and on a three-node
/// relcache cluster.
macro_rules! on_both {
    ($scenario:ident) => {
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_one_node() {
                super::$scenario(super::Kind::Node).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_a_three_node_cluster() {
                super::$scenario(super::Kind::Cluster).await
            }
        }
    };
}

/// A scenario's cache servers, stopped on drop.
enum Caches {
    Node(TestServer),
    Cluster(RelcacheCluster),
}

impl Caches {
    fn start(kind: Kind) -> Caches {
        match kind {
            Kind::Node => Caches::Node(TestServer::start()),
            Kind::Cluster => Caches::Cluster(RelcacheCluster::start(3)),
        }
    }
}

/// The tier over `caches`, its MySQL databases named for `test` and the kind.
async fn tier_on(caches: &Caches, db: &MariaDb, test: &str) -> Relations {
    let (cache, test): (Cache, String) = match caches {
        Caches::Node(server) => (pool(server).into(), test.to_owned()),
        Caches::Cluster(cluster) => {
            let cache = cluster.pool().await;
            (cache.into(), format!("{test}_cluster"))
        }
    };
    let store = relation_store(db.url(), &test, SHARDS, |_| {}).await;
    Relations::new(cache, store, patient())
}

/// The tier's config in these tests: waits for a fill long enough for a slow host.
fn patient() -> RelationsConfig {
    RelationsConfig {
        lease_wait: Duration::from_secs(10),
        ..RelationsConfig::default()
    }
}

async fn tier(server: &TestServer, db: &MariaDb, test: &str) -> Relations {
    tier_with(server, db, test, |_| {}).await
}

async fn tier_with(
    server: &TestServer,
    db: &MariaDb,
    test: &str,
    configure: impl FnOnce(&mut relcache_relation::StoreConfig),
) -> Relations {
    let store = relation_store(db.url(), test, SHARDS, configure).await;
    Relations::new(pool(server), store, patient())
}

fn following_of(model: &Model, a: u64) -> Vec<u64> {
    model
        .iter()
        .filter(|(f, _)| *f == a)
        .map(|&(_, b)| b)
        .collect()
}

fn followers_of(model: &Model, a: u64) -> Vec<u64> {
    model
        .iter()
        .filter(|(_, b)| *b == a)
        .map(|&(f, _)| f)
        .collect()
}

/// Every id of a paged list, checking newest-first order on the way.
async fn walk(t: &Relations, followers: bool, user: u64, limit: u32) -> Vec<u64> {
    let (mut ids, mut last, mut cursor): (Vec<u64>, Option<(u64, u64)>, Option<Cursor>) =
        (Vec::new(), None, None);
    loop {
        let page = if followers {
            t.followers(user, cursor, limit).await.unwrap()
        } else {
            t.following(user, cursor, limit).await.unwrap()
        };
        for e in &page.entries {
            if let Some(prev) = last {
                assert!(prev > (e.since, e.id), "newest first");
            }
            last = Some((e.since, e.id));
            ids.push(e.id);
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

async fn every_read_api_agrees_with_a_model_while_the_cache_churns(kind: Kind) {
    let caches = Caches::start(kind);
    let t = tier_on(&caches, mariadb::shared(), "model").await;
    let mut rng = StdRng::seed_from_u64(6);
    let users: Vec<u64> = (1..=24).map(|i| i * 1_000_003).collect();
    let pick = |rng: &mut StdRng| users[rng.gen_range(0..users.len())];
    let mut model = Model::new();
    for step in 0..400 {
        let (a, b) = (pick(&mut rng), pick(&mut rng));
        match rng.gen_range(0..100) {
            0..=39 if a != b => {
                let out = t.follow(a, b).await.unwrap();
                assert_eq!(out.created, model.insert((a, b)), "step {step}");
                assert_eq!(out.mutual, model.contains(&(b, a)));
            }
            40..=54 if a != b => {
                let out = t.unfollow(a, b).await.unwrap();
                assert_eq!(out.removed, model.remove(&(a, b)), "step {step}");
            }
            55..=64 => {
                let asked: Vec<u64> = (0..10).map(|_| pick(&mut rng)).collect();
                let want: Vec<bool> = asked.iter().map(|&x| model.contains(&(a, x))).collect();
                assert_eq!(t.which_followed(a, &asked).await.unwrap(), want);
                assert_eq!(t.is_following(a, b).await.unwrap(), model.contains(&(a, b)));
            }
            65..=69 => {
                let want = match (model.contains(&(a, b)), model.contains(&(b, a))) {
                    (true, true) => Relation::Mutual,
                    (true, false) => Relation::Following,
                    (false, true) => Relation::FollowedBy,
                    (false, false) => Relation::None,
                };
                assert_eq!(t.relation(a, b).await.unwrap(), want, "step {step}");
            }
            70..=74 => {
                assert_eq!(
                    t.following_count(a).await.unwrap(),
                    following_of(&model, a).len() as u64
                );
                assert_eq!(
                    t.followers_count(a).await.unwrap(),
                    followers_of(&model, a).len() as u64
                );
                assert_eq!(
                    sorted(t.following_set(a).await.unwrap()),
                    following_of(&model, a)
                );
            }
            75..=79 => {
                let fa: BTreeSet<u64> = following_of(&model, a).into_iter().collect();
                let want: Vec<u64> = following_of(&model, b)
                    .into_iter()
                    .filter(|x| fa.contains(x))
                    .collect();
                assert_eq!(t.common_following(a, b).await.unwrap(), want);
            }
            80..=84 => {
                let want: Vec<u64> = following_of(&model, a)
                    .into_iter()
                    .filter(|&f| model.contains(&(f, b)))
                    .collect();
                assert_eq!(t.followers_among(b, a).await.unwrap(), want, "step {step}");
            }
            85..=89 => {
                let limit = rng.gen_range(1..5);
                assert_eq!(
                    sorted(walk(&t, false, a, limit).await),
                    following_of(&model, a)
                );
                assert_eq!(
                    sorted(walk(&t, true, a, limit).await),
                    followers_of(&model, a)
                );
            }
            90..=95 => {
                // Eviction, as far as the tier can tell.
                t.cache().run(Cmd::del(&[t.cache_key(a)])).await.unwrap();
            }
            96 => {
                for node in t.cache().nodes() {
                    node.cmd(&["FLUSHALL"]).await.unwrap();
                }
            }
            _ => {}
        }
    }
    // Quiescent: every cached set is exactly MySQL's.
    for &u in &users {
        if let Some(cached) = t
            .cache()
            .run(Cmd::idset_members(t.cache_key(u)))
            .await
            .unwrap()
        {
            assert_eq!(sorted(cached), following_of(&model, u), "user {u}");
        }
    }
    let s = t.stats();
    assert!(s.cache_hits.load(std::sync::atomic::Ordering::Relaxed) > 100);
    assert!(s.cache_fills.load(std::sync::atomic::Ordering::Relaxed) > 10);
}
on_both!(every_read_api_agrees_with_a_model_while_the_cache_churns);

/// The race leases exist for, played step by step with the real parts: a filler
/// reads MySQL, then a follow commits (and writes through), then the fill arrives.
async fn a_fill_that_read_mysql_before_a_write_never_hides_the_write(kind: Kind) {
    let caches = Caches::start(kind);
    let t = tier_on(&caches, mariadb::shared(), "race").await;
    let (a, b, c) = (11, 22, 33);
    t.follow(a, c).await.unwrap();
    let key = t.cache_key(a);
    let opts = LeaseOpts {
        px: Some(Duration::from_secs(10)),
        wait: None,
    };
    for write_follows in [true, false] {
        t.cache()
            .run(Cmd::del(std::slice::from_ref(&key)))
            .await
            .unwrap();
        let Leased::Granted(token) = t
            .cache()
            .run(Cmd::idset_lease(key.clone(), opts))
            .await
            .unwrap()
        else {
            panic!("a miss is granted the lease");
        };
        let read_before = t.store().following_ids(a).await.unwrap();
        if write_follows {
            t.follow(a, b).await.unwrap();
        } else {
            t.unfollow(a, b).await.unwrap();
        }
        let fill = LoadOpts {
            ttl: None,
            lease: Some(token),
            seq: None,
        };
        let stored = t
            .cache()
            .run(Cmd::idset_load_table(
                key.clone(),
                build_table(&read_before),
                fill,
            ))
            .await
            .unwrap();
        assert!(!stored, "the stale fill is refused");
        assert_eq!(t.is_following(a, b).await.unwrap(), write_follows);
        let cached = t
            .cache()
            .run(Cmd::idset_exists(key.clone(), b))
            .await
            .unwrap();
        assert_eq!(cached, Some(write_follows), "the refill has the write");
    }
}
on_both!(a_fill_that_read_mysql_before_a_write_never_hides_the_write);

/// The race sequence numbers exist for, played step by step: a follow commits and
/// its write-through is held up; an unfollow of the same pair commits and writes
/// through; then the follow's write-through arrives. Applied as it comes it would
/// undo the unfollow; it must not.
async fn a_write_through_that_arrives_late_never_undoes_a_later_write(kind: Kind) {
    let caches = Caches::start(kind);
    let t = tier_on(&caches, mariadb::shared(), "reorder").await;
    let key = |u| t.cache_key(u);
    for (a, b, c) in [(41, 42, 43), (51, 52, 53)] {
        t.follow(a, c).await.unwrap();
        assert!(t.is_following(a, c).await.unwrap(), "a's set is cached now");
        // Process 1 follows b; its write-through is still on its way.
        let followed = t.store().follow(a, b).await.unwrap();
        let held_up = followed.seq.expect("a new follow has a sequence number");
        // Process 2 unfollows b, all the way through.
        let unfollowed = t.unfollow(a, b).await.unwrap();
        assert!(unfollowed.removed && unfollowed.seq > Some(held_up));
        assert_eq!(
            t.cache().run(Cmd::idset_exists(key(a), b)).await.unwrap(),
            Some(false)
        );
        // Process 1's write-through lands last: refused, and the set dropped.
        let late = Cmd::idset_add_xx_seq(key(a), held_up, &[b]);
        assert_eq!(t.cache().run(late).await.unwrap(), None);
        assert_eq!(t.cache().run(Cmd::idset_card(key(a))).await.unwrap(), None);
        assert!(!t.is_following(a, b).await.unwrap());
        assert!(t.is_following(a, c).await.unwrap());
        // Refilled as of the unfollow: its own write-through again is a no-op,
        // and the follow's is still late.
        let again = Cmd::idset_rem_seq(key(a), unfollowed.seq.unwrap(), &[b]);
        assert_eq!(t.cache().run(again).await.unwrap(), Some(0));
        let late = Cmd::idset_add_xx_seq(key(a), held_up, &[b]);
        assert_eq!(t.cache().run(late).await.unwrap(), None);
        assert!(!t.is_following(a, b).await.unwrap());
    }
}
on_both!(a_write_through_that_arrives_late_never_undoes_a_later_write);

/// A follow whose COMMIT was sent but never answered may or may not stand, and may
/// land any time. The cached set must not pretend to know — nor be refilled, while
/// the commit is pending, from the state before it. MariaDB's BACKUP STAGE
/// BLOCK_COMMIT holds the commit past the store's timeout (or past the moment the
/// caller gives up), and a read comes in before it is let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_outcome_is_unknown_leaves_no_stale_set() {
    use mysql_async::prelude::Queryable;
    let server = TestServer::start();
    let db = MariaDb::start();
    let t = tier_with(&server, &db, "unknown", |c| {
        c.query_timeout = Duration::from_millis(700);
    })
    .await;
    for (a, b, abandon) in [(61, 62, false), (63, 64, true)] {
        assert!(
            !t.is_following(a, b).await.unwrap(),
            "cached: follows nobody"
        );
        let mut blocker = mysql_async::Conn::from_url(db.url()).await.unwrap();
        blocker.query_drop("BACKUP STAGE START").await.unwrap();
        blocker
            .query_drop("BACKUP STAGE BLOCK_COMMIT")
            .await
            .unwrap();
        if abandon {
            let cut = tokio::time::timeout(Duration::from_millis(400), t.follow(a, b)).await;
            assert!(cut.is_err(), "the caller gave up while the commit was held");
        } else {
            let err = t.follow(a, b).await.unwrap_err();
            let relcache_relation::service::RelationError::Store(err) = err else {
                panic!("a store error")
            };
            assert!(err.is_outcome_unknown(), "{err}");
        }
        // A read while the commit is pending: from MySQL, as it stands.
        assert!(!t.is_following(a, b).await.unwrap());
        assert_eq!(t.suspect_sets(), 1, "not trusted, and not deleted yet");
        blocker.query_drop("BACKUP STAGE END").await.unwrap();
        // The commit lands; once the service has seen it settle, the set is
        // deleted and every read agrees with MySQL again.
        let deadline = Instant::now() + Duration::from_secs(20);
        while t.suspect_sets() > 0 {
            assert!(
                Instant::now() < deadline,
                "the write in doubt never settled"
            );
            // The commit may land during the read: its answer must be MySQL's
            // from just before or just after it.
            let before = t.store().is_following(a, b).await.unwrap();
            let read = t.is_following(a, b).await.unwrap();
            let after = t.store().is_following(a, b).await.unwrap();
            assert!(read == before || read == after, "{before} {read} {after}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            t.store().is_following(a, b).await.unwrap(),
            "the commit landed"
        );
        let cached = t
            .cache()
            .run(Cmd::idset_exists(t.cache_key(a), b))
            .await
            .unwrap();
        assert_ne!(cached, Some(false), "no set from before the commit");
        assert!(t.is_following(a, b).await.unwrap());
        assert!(
            t.stats()
                .writes_in_doubt
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        );
    }
}

/// A caller that gives up on a follow midway (a request timeout around it) may
/// leave a commit the cache never heard of: the set is not trusted until deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_abandoned_midway_leaves_no_stale_set() {
    let server = TestServer::start();
    let t = tier(&server, mariadb::shared(), "abandoned").await;
    let (a, b) = (71, 72);
    assert!(
        !t.is_following(a, b).await.unwrap(),
        "cached: follows nobody"
    );
    // Give up at every point of the call in turn, until one run completes.
    let mut gave_up = 0;
    for micros in (0..).map(|i| 200 * i) {
        let cut = Duration::from_micros(micros);
        match tokio::time::timeout(cut, t.follow(a, b)).await {
            Ok(done) => {
                done.unwrap();
                break;
            }
            Err(_) => {
                gave_up += 1;
                // Whatever MySQL holds now, the tier answers it.
                let truth = t.store().is_following(a, b).await.unwrap();
                assert_eq!(t.is_following(a, b).await.unwrap(), truth, "after {cut:?}");
                if truth {
                    t.store().unfollow(a, b).await.unwrap();
                    t.cache().run(Cmd::del(&[t.cache_key(a)])).await.unwrap();
                }
            }
        }
    }
    assert!(gave_up > 0, "the call was never cut short");
    assert!(t.is_following(a, b).await.unwrap());
}

/// A lease holder whose caller gives up while it reads MySQL lets the lease go,
/// so those waiting on it are not held up until it lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_abandoned_midway_releases_its_lease() {
    let server = TestServer::start();
    let mut db = MariaDb::start();
    let t = tier(&server, &db, "abandoned_fill").await;
    t.follow(81, 82).await.unwrap();
    t.cache().run(Cmd::del(&[t.cache_key(81)])).await.unwrap();
    db.pause();
    let cut = tokio::time::timeout(Duration::from_millis(300), t.is_following(81, 82)).await;
    assert!(cut.is_err(), "the read was still waiting on MySQL");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let info = server.cli_out(&["INFO", "leases"]);
        if info.contains("leases_out:0") {
            assert!(info.contains("lease_releases:1"), "{info}");
            break;
        }
        assert!(Instant::now() < deadline, "the lease was kept: {info}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    db.resume();
    assert!(t.is_following(81, 82).await.unwrap());
}

/// A fill the cache refuses gives its lease back at once. Memory fills up while
/// the lease holder reads MySQL, so its `IDSET.LOAD` (a denyoom command) gets
/// `-OOM`: a reader parked on that lease must be answered well before the lease
/// would lapse, and both readers get MySQL's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_refused_for_memory_releases_its_lease() {
    let server =
        TestServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let mut db = MariaDb::start();
    let t = patient_tier(pool(&server), &db, "oom_fill").await;
    let a = 91;
    // Enough ids that the table outgrows whatever room the filler leaves.
    for b in 1000..1100 {
        t.store().follow(a, b).await.unwrap();
    }
    let (filler, parked) = park_behind_a_filler(&server, &t, &mut db, a, 1000).await;
    let _filler = fill_memory(&server);
    db.resume();
    let resumed = Instant::now();
    assert!(filler.await.unwrap().unwrap(), "answered from MySQL");
    answered_promptly(parked, resumed, "the refused fill kept its lease").await;
    // The premise: the fill was refused for memory. (The parked reader, granted
    // the lease next, may fill or be refused in turn: used_memory counts
    // connection buffers, so a little room can come and go.)
    let stats = server.cli_out(&["INFO", "commandstats"]);
    let load = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_idset.load:"))
        .unwrap_or_else(|| panic!("no IDSET.LOAD ran: {stats}"));
    assert!(
        !load.contains("rejected_calls=0"),
        "no fill was refused: {load}"
    );
    let info = server.cli_out(&["INFO", "leases"]);
    assert!(info.contains("leases_out:0"), "{info}");
    assert!(!info.contains("lease_releases:0"), "{info}");
    assert_eq!(t.relation(a, 1000).await.unwrap(), Relation::Following);
}

/// The lease TTL of [`patient_tier`]: a reader parked on a lease that is never
/// settled waits this long.
const PATIENT_LEASE: Duration = Duration::from_secs(20);

/// A tier over `cache` and `db` whose leases last [`PATIENT_LEASE`], whose readers
/// wait longer than that for someone else's fill, and whose MySQL calls outlast a
/// short [`MariaDb::pause`]: whoever is parked on a lease is let go by its holder
/// or by its lapse, never by giving up.
async fn patient_tier(cache: Pool, db: &MariaDb, test: &str) -> Arc<Relations> {
    let store = relation_store(db.url(), test, SHARDS, |c| {
        c.connect_timeout = Duration::from_secs(30);
        c.query_timeout = Duration::from_secs(30);
    })
    .await;
    let config = RelationsConfig {
        lease_ttl: PATIENT_LEASE,
        lease_wait: PATIENT_LEASE + Duration::from_secs(10),
        ..RelationsConfig::default()
    };
    Arc::new(Relations::new(cache, store, config))
}

/// A caller that gives up with its fill sent and unanswered lets the lease go: the
/// cache sits behind a proxy that swallows the fill, the caller is cut off while
/// it waits for the reply, and a reader parked on the lease is answered well
/// before the lease would lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_abandoned_mid_send_releases_its_lease() {
    let server = TestServer::start();
    let proxy = StallingProxy::start(server.addr()).await;
    let mut db = MariaDb::start();
    let cache = Pool::new(PoolConfig {
        addr: proxy.addr.clone(),
        max_connections: 8,
        command_timeout: Duration::from_secs(60),
        ..PoolConfig::default()
    });
    let t = patient_tier(cache, &db, "abandoned_send").await;
    let a = 93;
    t.store().follow(a, 94).await.unwrap();
    let (filler, parked) = park_behind_a_filler(&server, &t, &mut db, a, 94).await;
    proxy.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    db.resume();
    proxy.stalled.notified().await;
    filler.abort();
    let gave_up = Instant::now();
    assert!(filler.await.unwrap_err().is_cancelled());
    answered_promptly(parked, gave_up, "the abandoned fill kept its lease").await;
    let info = server.cli_out(&["INFO", "leases"]);
    assert!(info.contains("lease_releases:1"), "{info}");
    assert!(info.contains("leases_out:0"), "{info}");
}

/// A TCP proxy in front of the cache. Once `armed`, it swallows the next bytes a
/// client sends and forwards nothing more on that connection (a request sent and
/// never answered), then says so through `stalled`; other connections go on.
struct StallingProxy {
    addr: String,
    armed: Arc<std::sync::atomic::AtomicBool>,
    stalled: Arc<tokio::sync::Notify>,
}

impl StallingProxy {
    async fn start(target: String) -> StallingProxy {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::{TcpListener, TcpStream};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = StallingProxy {
            addr: listener.local_addr().unwrap().to_string(),
            armed: Arc::default(),
            stalled: Arc::default(),
        };
        let (armed, stalled) = (proxy.armed.clone(), proxy.stalled.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&target).await.unwrap();
                let (armed, stalled) = (armed.clone(), stalled.clone());
                tokio::spawn(async move {
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let up = async {
                        let mut buf = vec![0; 64 * 1024];
                        loop {
                            let n = match from_client.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if armed.swap(false, SeqCst) {
                                stalled.notify_one();
                                return std::future::pending().await;
                            }
                            if to_server.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let down = tokio::io::copy(&mut from_server, &mut to_client);
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                    }
                });
            }
        });
        proxy
    }
}

/// With MySQL paused: a `filler` that asks whether `a` follows `b`, wins the lease
/// on `a`'s set and waits on MySQL; and a reader `parked` on that lease, asking
/// about `b` and 5, which reports when it was answered. MySQL is left paused.
async fn park_behind_a_filler(
    server: &TestServer,
    t: &Arc<Relations>,
    db: &mut MariaDb,
    a: u64,
    b: u64,
) -> (
    tokio::task::JoinHandle<Result<bool, RelationError>>,
    tokio::task::JoinHandle<(Result<Vec<bool>, RelationError>, Instant)>,
) {
    db.pause();
    let filler = tokio::spawn({
        let t = t.clone();
        async move { t.is_following(a, b).await }
    });
    wait_for_info(server, "leases_out:1").await;
    let parked = tokio::spawn({
        let t = t.clone();
        async move {
            let answer = t.which_followed(a, &[b, 5]).await;
            (answer, Instant::now())
        }
    });
    wait_for_info(server, "lease_waits:1").await;
    (filler, parked)
}

/// The reader [`park_behind_a_filler`] parked gets MySQL's answer well before
/// the lease would have lapsed, counting from `since`.
async fn answered_promptly(
    parked: tokio::task::JoinHandle<(Result<Vec<bool>, RelationError>, Instant)>,
    since: Instant,
    why_not: &str,
) {
    let (answer, answered) = parked.await.unwrap();
    assert_eq!(answer.unwrap(), [true, false]);
    let waited = answered - since;
    assert!(
        waited < PATIENT_LEASE / 4,
        "the parked reader waited {waited:?}: {why_not}"
    );
}

/// Polls `INFO leases` until it shows `field` (as `name:value`).
async fn wait_for_info(server: &TestServer, field: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = server.cli_out(&["INFO", "leases"]);
        if info.lines().any(|l| l.trim() == field) {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {field}: {info}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Stores filler values until the server (under `noeviction`) refuses even a
/// small one: what room is left is far less than a table of a hundred ids. The
/// connection is returned to be kept open: closing it would free its buffers.
///
/// `used_memory` counts connection buffers too, so a client that is still going
/// away (the `redis-cli` of an INFO poll just before) frees room after the first
/// refusal: the fill goes on until a small value has stayed refused for a while.
fn fill_memory(server: &TestServer) -> redis::Connection {
    let mut con = server.conn();
    let mut n = 0;
    for size in [64 * 1024, 4 * 1024, 256] {
        fill_until_refused(&mut con, size, &mut n);
    }
    let mut quiet = 0;
    while quiet < 3 {
        std::thread::sleep(Duration::from_millis(50));
        let stored = fill_until_refused(&mut con, 256, &mut n);
        quiet = if stored == 0 { quiet + 1 } else { 0 };
    }
    con
}

/// Stores values of `size` bytes (keys `filler:<n>`) until one gets `-OOM`;
/// returns how many were stored.
fn fill_until_refused(con: &mut redis::Connection, size: usize, n: &mut usize) -> usize {
    let mut stored = 0;
    loop {
        let reply = redis::cmd("SET")
            .arg(format!("filler:{n}"))
            .arg(vec![b'x'; size])
            .query::<()>(con);
        *n += 1;
        match reply {
            Ok(()) => stored += 1,
            Err(e) if e.code() == Some("OOM") => return stored,
            Err(e) => panic!("{e}"),
        }
        assert!(*n < 10_000, "never reached maxmemory");
    }
}

async fn concurrent_reads_writes_and_evictions_leave_the_cache_equal_to_mysql(kind: Kind) {
    let caches = Caches::start(kind);
    let t = Arc::new(tier_on(&caches, mariadb::shared(), "churn").await);
    let users: Vec<u64> = (100..110).collect();
    let mut tasks = Vec::new();
    for seed in 0..8 {
        let (t, users) = (t.clone(), users.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            for _ in 0..150 {
                let a = users[rng.gen_range(0..users.len())];
                let b = users[rng.gen_range(0..users.len())];
                match rng.gen_range(0..10) {
                    0..=2 if a != b => drop(t.follow(a, b).await.unwrap()),
                    3 if a != b => drop(t.unfollow(a, b).await.unwrap()),
                    4 => drop(t.cache().run(Cmd::del(&[t.cache_key(a)])).await.unwrap()),
                    _ => drop(t.which_followed(a, &users).await.unwrap()),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut cached_users = 0;
    for &u in &users {
        let truth = sorted(t.store().following_ids(u).await.unwrap());
        if let Some(cached) = t
            .cache()
            .run(Cmd::idset_members(t.cache_key(u)))
            .await
            .unwrap()
        {
            assert_eq!(
                sorted(cached),
                truth,
                "user {u}: the cache disagrees with MySQL"
            );
            cached_users += 1;
        }
    }
    assert!(cached_users > 0, "the run ended with something cached");
}
on_both!(concurrent_reads_writes_and_evictions_leave_the_cache_equal_to_mysql);

async fn a_hundred_concurrent_misses_on_one_cold_user_cost_one_mysql_read(kind: Kind) {
    let caches = Caches::start(kind);
    let t = Arc::new(tier_on(&caches, mariadb::shared(), "herd").await);
    let celebrity_fan = 7;
    for b in 1000..1300 {
        t.store().follow(celebrity_fan, b).await.unwrap();
    }
    let before = t.store().queries();
    let start = Arc::new(tokio::sync::Barrier::new(100));
    let tasks: Vec<_> = (0..100u64)
        .map(|i| {
            let (t, start) = (t.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                t.is_following(celebrity_fan, 1000 + i * 5).await.unwrap()
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(
            task.await.unwrap(),
            1000 + i as u64 * 5 < 1300,
            "answer {i}"
        );
    }
    assert_eq!(t.store().queries() - before, 1, "exactly one MySQL read");
    let s = t.stats();
    assert_eq!(s.cache_fills.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(s.busy_reads.load(std::sync::atomic::Ordering::Relaxed), 0);
}
on_both!(a_hundred_concurrent_misses_on_one_cold_user_cost_one_mysql_read);

async fn a_user_who_follows_nobody_is_cached_as_an_empty_set(kind: Kind) {
    let caches = Caches::start(kind);
    let t = tier_on(&caches, mariadb::shared(), "empty").await;
    let before = t.store().queries();
    assert!(!t.is_following(4242, 1).await.unwrap());
    assert!(!t.is_following(4242, 2).await.unwrap());
    assert_eq!(t.following_count(4242).await.unwrap(), 0);
    assert_eq!(
        t.store().queries() - before,
        1,
        "read once, then from the cache"
    );
    assert_eq!(
        t.cache()
            .run(Cmd::idset_card(t.cache_key(4242)))
            .await
            .unwrap(),
        Some(0)
    );
}
on_both!(a_user_who_follows_nobody_is_cached_as_an_empty_set);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cache_down_reads_and_writes_go_to_mysql() {
    let server = TestServer::start();
    let t = tier(&server, mariadb::shared(), "cachedown").await;
    t.follow(1, 2).await.unwrap();
    assert!(t.is_following(1, 2).await.unwrap(), "cached now");
    drop(server);
    assert!(t.is_following(1, 2).await.unwrap());
    assert!(!t.is_following(1, 3).await.unwrap());
    t.follow(1, 3).await.unwrap();
    assert!(t.is_following(1, 3).await.unwrap());
    assert_eq!(t.relation(2, 1).await.unwrap(), Relation::FollowedBy);
    assert_eq!(t.following_count(1).await.unwrap(), 2);
    assert_eq!(t.followers_among(3, 1).await.unwrap(), Vec::<u64>::new());
    let s = t.stats();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    // Refused three times in a row (the default limit), the cache is skipped but
    // for a probe a second.
    assert!(t.cache_down());
    assert!(load(&s.cache_errors) >= 3);
    assert!(load(&s.cache_bypassed) >= 5, "later calls skipped it");
    assert_eq!(load(&s.write_through_failures), 1);
    assert_eq!(
        t.suspect_sets(),
        1,
        "1's set, if cached, misses the follow of 3"
    );
}

/// MySQL dies under load: calls fail within their timeout, cached users are still
/// answered, every answer given is right, nothing partial is cached, no lease is
/// left behind; after a restart everything works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_mid_run_gives_errors_not_wrong_answers() {
    let server = TestServer::start();
    let mut db = MariaDb::start();
    let timeout = Duration::from_secs(1);
    let t = Arc::new(
        tier_with(&server, &db, "killed", |c| {
            c.query_timeout = timeout;
            c.connect_timeout = timeout;
        })
        .await,
    );
    let mut model = Model::new();
    for a in 1..=20u64 {
        for b in 1..=20u64 {
            if a != b && (a * b) % 3 == 0 {
                t.follow(a, b).await.unwrap();
                model.insert((a, b));
            }
        }
    }
    // Users 1..=10 are cached; 11..=20 are not.
    for a in 1..=10 {
        t.is_following(a, 1).await.unwrap();
    }
    for a in 11..=20 {
        t.cache().run(Cmd::del(&[t.cache_key(a)])).await.unwrap();
    }
    let model = Arc::new(model);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..4u64)
        .map(|seed| {
            let (t, model, stop) = (t.clone(), model.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                let (mut ok, mut failed, mut slowest) = (0, 0, Duration::ZERO);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let a = rng.gen_range(1..=20u64);
                    let asked: Vec<u64> = (1..=20).collect();
                    let started = Instant::now();
                    let result = t.which_followed(a, &asked).await;
                    slowest = slowest.max(started.elapsed());
                    match result {
                        Ok(bits) => {
                            let want: Vec<bool> =
                                asked.iter().map(|&b| model.contains(&(a, b))).collect();
                            assert_eq!(bits, want, "a wrong answer for {a}");
                            ok += 1;
                        }
                        Err(_) => {
                            assert!(a > 10, "cached user {a} must be answered");
                            failed += 1;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (ok, failed, slowest)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    db.kill();
    // Misses on uncached users now fail; the evictions keep some of them missing.
    for _ in 0..20 {
        for a in 11..=20 {
            let _ = t.cache().run(Cmd::del(&[t.cache_key(a)])).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let follow_started = Instant::now();
    assert!(
        t.follow(1, 2).await.is_err(),
        "a write with MySQL down fails"
    );
    assert!(follow_started.elapsed() < timeout * 3, "within its timeout");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for r in readers {
        let (o, f, slowest) = r.await.unwrap();
        ok += o;
        failed += f;
        assert!(
            slowest < timeout * 3 + Duration::from_secs(1),
            "a call took {slowest:?}"
        );
    }
    assert!(ok > 0 && failed > 0, "ok {ok}, failed {failed}");
    // Nothing partial was cached, and the failed fillers let their leases go.
    for a in 11..=20 {
        let cached = t
            .cache()
            .run(Cmd::idset_members(t.cache_key(a)))
            .await
            .unwrap();
        if let Some(ids) = cached {
            assert_eq!(sorted(ids), following_of(&model, a), "user {a}");
        }
    }
    let info = server.cli_out(&["INFO", "leases"]);
    assert!(info.contains("leases_out:0"), "{info}");
    assert!(
        !info.contains("lease_releases:0"),
        "failed fills released: {info}"
    );

    db.restart();
    let everyone: Vec<u64> = (1..=20).collect();
    for a in 11..=20 {
        let want: Vec<bool> = everyone.iter().map(|&b| model.contains(&(a, b))).collect();
        let got = retry(|| t.which_followed(a, &everyone)).await;
        assert_eq!(got, want);
    }
    assert!(
        !t.is_following(1, 2).await.unwrap(),
        "the failed follow left nothing"
    );
}

/// Retries a call for a while after a restart (pools notice dead connections on use).
async fn retry<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, relcache_relation::service::RelationError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match call().await {
            Ok(v) => return v,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("still failing after restart: {e}"),
        }
    }
}
