//! The relation tier's MySQL store against a real MariaDB: every read against an
//! in-memory model, paging, idempotence, concurrent follow-backs, and behaviour when
//! MySQL dies or hangs.

mod harness;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::mariadb::{self, relation_store, MariaDb, RawSql};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relcache_relation::{schema, Cursor, Page, Relation, ShardMap, Store, StoreConfig};

/// Eight logical shards on one server: enough that random users land both on
/// shared and on different shards.
const SHARDS: u32 = 8;

/// Who follows whom: `(follower, followed)`.
type Model = BTreeSet<(u64, u64)>;

/// Users on the same shard and on different ones, from the 16 ids `base..base+16`.
fn users(store: &Store, base: u64) -> Vec<u64> {
    let users: Vec<u64> = (base..base + 16).collect();
    let map = store.shards();
    let shards: BTreeSet<u32> = users.iter().map(|&u| map.shard_of(u)).collect();
    // 16 users on 8 shards: some share one, and they span several.
    assert!(shards.len() > 1 && shards.len() < users.len(), "{shards:?}");
    users
}

/// Every page of a list, checking order and cursor encoding on the way.
async fn walk(store: &Store, followers: bool, user: u64, limit: u32) -> Vec<(u64, u64, bool)> {
    let mut out = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page: Page = if followers {
            store.followers_page(user, cursor, limit).await.unwrap()
        } else {
            store.following_page(user, cursor, limit).await.unwrap()
        };
        assert!(page.entries.len() <= limit as usize);
        out.extend(page.entries.iter().map(|e| (e.id, e.since, e.mutual)));
        match page.next {
            None => break,
            Some(next) => {
                assert_eq!(
                    page.entries.len(),
                    limit as usize,
                    "a short page has no next"
                );
                // Cursors travel through an API as strings.
                cursor = Some(next.to_string().parse().unwrap());
            }
        }
    }
    // Newest first, ties broken by id, each entry once.
    for w in out.windows(2) {
        assert!((w[0].1, w[0].0) > (w[1].1, w[1].0), "order: {w:?}");
    }
    out
}

/// Checks every read API against the model.
async fn check_all(store: &Store, users: &[u64], model: &Model) {
    let following = |u: u64| -> Vec<u64> {
        model
            .range((u, 0)..=(u, u64::MAX))
            .map(|&(_, v)| v)
            .collect()
    };
    let followers = |u: u64| -> Vec<u64> {
        model
            .iter()
            .filter(|&&(_, v)| v == u)
            .map(|&(f, _)| f)
            .collect()
    };

    let many = store.following_ids_many(users).await.unwrap();
    assert_eq!(many.len(), users.len());
    let mut since: HashMap<(u64, u64), u64> = HashMap::new();
    for &u in users {
        let mut ids = store.following_ids(u).await.unwrap();
        ids.sort_unstable();
        assert_eq!(ids, following(u), "following_ids({u})");
        let mut batch = many[&u].clone();
        batch.sort_unstable();
        assert_eq!(batch, ids, "following_ids_many[{u}]");
        assert_eq!(store.following_count(u).await.unwrap(), ids.len() as u64);
        assert_eq!(
            store.followers_count(u).await.unwrap(),
            followers(u).len() as u64
        );

        let want: Vec<bool> = users.iter().map(|&v| model.contains(&(u, v))).collect();
        assert_eq!(store.which_followed(u, users).await.unwrap(), want);

        for &v in users {
            let expected = match (model.contains(&(u, v)), model.contains(&(v, u))) {
                (false, false) => Relation::None,
                (true, false) => Relation::Following,
                (false, true) => Relation::FollowedBy,
                (true, true) => Relation::Mutual,
            };
            assert_eq!(
                store.relation(u, v).await.unwrap(),
                expected,
                "relation({u}, {v})"
            );
            assert_eq!(
                store.is_following(u, v).await.unwrap(),
                model.contains(&(u, v))
            );
        }

        let pages = walk(store, false, u, 3).await;
        let mut ids: Vec<u64> = pages.iter().map(|e| e.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, following(u), "following pages of {u}");
        for &(v, ts, mutual) in &pages {
            assert_eq!(mutual, model.contains(&(v, u)), "mutual flag of {u} -> {v}");
            since.insert((u, v), ts);
        }
    }
    // Followers pages, whose twins carry the follow time of their truth rows.
    for &u in users {
        let pages = walk(store, true, u, 4).await;
        let mut ids: Vec<u64> = pages.iter().map(|e| e.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, followers(u), "followers pages of {u}");
        for &(f, ts, mutual) in &pages {
            assert_eq!(Some(&ts), since.get(&(f, u)), "twin auto_ts of {f} -> {u}");
            assert_eq!(mutual, model.contains(&(u, f)));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_matches_a_model_under_random_writes() {
    let store = relation_store(mariadb::shared().url(), "model", SHARDS, |_| {}).await;
    let users = users(&store, 1);
    let mut model = Model::new();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for step in 0..600 {
        let a = users[rng.gen_range(0..users.len())];
        let b = users[rng.gen_range(0..users.len())];
        if a == b {
            assert!(store.follow(a, b).await.is_err(), "self-follow refused");
            continue;
        }
        if rng.gen_bool(0.65) {
            let out = store.follow(a, b).await.unwrap();
            assert_eq!(
                out.created,
                model.insert((a, b)),
                "follow({a}, {b}) created"
            );
            assert_eq!(out.mutual, model.contains(&(b, a)));
            assert!(!out.twin_pending);
        } else {
            let out = store.unfollow(a, b).await.unwrap();
            assert_eq!(
                out.removed,
                model.remove(&(a, b)),
                "unfollow({a}, {b}) removed"
            );
            assert_eq!(out.followed_back, model.contains(&(b, a)));
            assert!(!out.twin_pending);
        }
        if step % 150 == 149 {
            check_all(&store, &users, &model).await;
        }
    }
    check_all(&store, &users, &model).await;
    assert!(model.len() > 20, "the walk built a graph worth checking");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_cost_one_statement_per_shard() {
    let store = relation_store(mariadb::shared().url(), "cost", SHARDS, |_| {}).await;
    let users = users(&store, 100);
    for &u in &users[1..] {
        store.follow(users[0], u).await.unwrap();
    }
    let shards: BTreeSet<u32> = users.iter().map(|&u| store.shards().shard_of(u)).collect();

    let before = store.queries();
    assert_eq!(
        store.following_ids(users[0]).await.unwrap().len(),
        users.len() - 1
    );
    assert_eq!(store.queries() - before, 1, "a cache fill is one query");

    let before = store.queries();
    store.following_ids_many(&users).await.unwrap();
    assert_eq!(
        store.queries() - before,
        shards.len() as u64,
        "one query per shard"
    );

    let before = store.queries();
    store.which_followed(users[0], &users).await.unwrap();
    store.relation(users[0], users[1]).await.unwrap();
    assert_eq!(store.queries() - before, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_is_newest_first_without_gaps_or_repeats() {
    let store = relation_store(mariadb::shared().url(), "paging", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let user = 7u64;
    let shard = store.shards().shard_of(user);
    // 40 follows in groups of four sharing a timestamp, so ties are broken by id.
    for friend in 1000..1040u64 {
        raw.exec(
            shard,
            "INSERT INTO {db}.following (user_id, friend_id, mutual, auto_ts) VALUES (?, ?, 0, ?)",
            (user, friend, 5_000 + (friend - 1000) / 4),
        )
        .await;
    }
    let mut expected: Vec<(u64, u64)> = (1000..1040u64)
        .map(|f| (5_000 + (f - 1000) / 4, f))
        .collect();
    expected.sort_unstable_by(|x, y| y.cmp(x));
    for limit in [1, 3, 4, 7, 40, 1000] {
        let got: Vec<(u64, u64)> = walk(&store, false, user, limit)
            .await
            .into_iter()
            .map(|(id, ts, _)| (ts, id))
            .collect();
        assert_eq!(got, expected, "page size {limit}");
    }

    // Changes between pages: an unseen entry removed is not returned, a new (newer)
    // follow is not on later pages, and nothing repeats.
    let first = store.following_page(user, None, 10).await.unwrap();
    let seen: Vec<u64> = first.entries.iter().map(|e| e.id).collect();
    assert_eq!(seen, expected[..10].iter().map(|e| e.1).collect::<Vec<_>>());
    let removed = expected[20].1;
    assert!(store.unfollow(user, removed).await.unwrap().removed);
    assert!(store.follow(user, 9999).await.unwrap().created);
    let mut rest = Vec::new();
    let mut cursor = first.next;
    while let Some(c) = cursor {
        let page = store.following_page(user, Some(c), 10).await.unwrap();
        rest.extend(page.entries.iter().map(|e| e.id));
        cursor = page.next;
    }
    let want: Vec<u64> = expected[10..]
        .iter()
        .map(|e| e.1)
        .filter(|&f| f != removed)
        .collect();
    assert_eq!(rest, want);
    // The new follow is the newest of all.
    let top = store.following_page(user, None, 1).await.unwrap();
    assert_eq!(top.entries[0].id, 9999);
    assert!(top.next.is_some());

    // An empty list is one empty page.
    let empty = store.following_page(123_456, None, 10).await.unwrap();
    assert!(empty.entries.is_empty() && empty.next.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_uses_the_time_index() {
    let store = relation_store(mariadb::shared().url(), "explain", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let shard = store.shards().shard_of(1);
    for friend in 2..200u64 {
        raw.exec(
            shard,
            "INSERT INTO {db}.following (user_id, friend_id, mutual, auto_ts) VALUES (1, ?, 0, ?)",
            (friend, friend * 10),
        )
        .await;
    }
    raw.exec(shard, "ANALYZE TABLE {db}.following", ()).await;
    let plan: Vec<mysql_async::Row> = raw
        .query(
            shard,
            "EXPLAIN SELECT friend_id, auto_ts, mutual FROM {db}.following WHERE user_id = ? \
             AND (auto_ts < ? OR (auto_ts = ? AND friend_id < ?)) \
             ORDER BY auto_ts DESC, friend_id DESC LIMIT ?",
            (1u64, 1000u64, 1000u64, 50u64, 11u64),
        )
        .await;
    let key: Option<String> = plan[0].get("key").unwrap();
    assert_eq!(key.as_deref(), Some("by_time"), "plan: {plan:?}");
    let extra: Option<String> = plan[0].get("Extra").unwrap();
    assert!(
        !extra.unwrap_or_default().contains("filesort"),
        "no sort: {plan:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_follow_changes_nothing() {
    let store = relation_store(mariadb::shared().url(), "retry", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let (a, b) = (11u64, 12u64);
    let first = store.follow(a, b).await.unwrap();
    assert!(first.created && !first.mutual && !first.twin_pending);
    let [truth, twin, ..] = raw.pair(a, b).await;
    let (_, ts) = truth.expect("following row");
    assert_eq!(twin, Some((false, ts)), "the twin carries the same auto_ts");

    tokio::time::sleep(Duration::from_millis(2)).await; // a later clock, visibly
    let again = store.follow(a, b).await.unwrap();
    assert!(!again.created && !again.mutual && !again.twin_pending);
    assert_eq!(
        raw.pair(a, b).await[..2],
        [Some((false, ts)), Some((false, ts))]
    );
    let logged: Vec<u64> = raw
        .query(
            store.shards().shard_of(a),
            "SELECT COUNT(*) FROM {db}.relation_log WHERE user_id = ? AND friend_id = ?",
            (a, b),
        )
        .await;
    assert_eq!(logged, [1], "a no-op follow is not logged");

    // Unfollow twice: the second removes nothing. Following again is a new follow.
    assert!(store.unfollow(a, b).await.unwrap().removed);
    assert!(!store.unfollow(a, b).await.unwrap().removed);
    assert_eq!(raw.pair(a, b).await, [None; 4]);
    assert!(store.follow(a, b).await.unwrap().created);
    let (_, ts2) = raw.row("following", a, b).await.unwrap();
    assert!(ts2 > ts, "a new follow has a new time");
}

/// Pairs of fresh users for one round: some on one shard, some across shards.
fn pairs(store: &Store, base: u64, n: usize) -> Vec<(u64, u64)> {
    let map = store.shards();
    let mut same = Vec::new();
    let mut cross = Vec::new();
    let mut next = base;
    while same.len() < n / 2 || cross.len() < n - n / 2 {
        let (a, b) = (next, next + 1);
        next += 2;
        if map.shard_of(a) == map.shard_of(b) {
            if same.len() < n / 2 {
                same.push((a, b));
            }
        } else if cross.len() < n - n / 2 {
            cross.push((a, b));
        }
    }
    same.into_iter().chain(cross).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_follow_backs_always_end_mutual() {
    let store = relation_store(mariadb::shared().url(), "race", SHARDS, |c| {
        c.pool_size = 32
    })
    .await;
    let raw = RawSql::new(&store);
    for round in 0..8u64 {
        let pairs = pairs(&store, 1_000_000 * (round + 1), 24);
        let barrier = Arc::new(tokio::sync::Barrier::new(pairs.len() * 2));
        let mut tasks = tokio::task::JoinSet::new();
        for &(a, b) in &pairs {
            for (x, y) in [(a, b), (b, a)] {
                let (store, barrier) = (store.clone(), barrier.clone());
                tasks.spawn(async move {
                    barrier.wait().await;
                    store.follow(x, y).await
                });
            }
        }
        let mut saw_mutual = 0;
        while let Some(out) = tasks.join_next().await {
            let out = out.unwrap().expect("follow");
            assert!(out.created && !out.twin_pending);
            saw_mutual += usize::from(out.mutual);
        }
        // Exactly one of each pair's two follows came second and saw the other.
        assert_eq!(saw_mutual, pairs.len(), "round {round}");
        for &(a, b) in &pairs {
            let rows = raw.pair(a, b).await;
            assert!(
                rows.iter().all(|r| matches!(r, Some((true, _)))),
                "round {round}: pair ({a}, {b}) rows {rows:?}"
            );
        }

        // Now race, on each mutual pair, a's unfollow against b's (retried) follow:
        // whichever runs second must still leave b's rows flagged not mutual.
        let mut tasks = tokio::task::JoinSet::new();
        for &(a, b) in &pairs {
            let store = store.clone();
            tasks.spawn(async move {
                let (u, f) = tokio::join!(store.unfollow(a, b), store.follow(b, a));
                (u.unwrap(), f.unwrap())
            });
        }
        while let Some(out) = tasks.join_next().await {
            let (u, f) = out.unwrap();
            assert!(u.removed && !f.created);
        }
        for &(a, b) in &pairs {
            let [ab, ba_twin, ba, ab_twin] = raw.pair(a, b).await;
            assert_eq!((ab, ba_twin), (None, None), "round {round}: ({a}, {b})");
            assert!(matches!(ba, Some((false, _))), "round {round}: {ba:?}");
            assert!(
                matches!(ab_twin, Some((false, _))),
                "round {round}: {ab_twin:?}"
            );
        }
    }
    eprintln!("deadlock retries under contention: {}", store.retries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_creation_is_idempotent() {
    let store = relation_store(mariadb::shared().url(), "schema", 4, |_| {}).await;
    store.follow(1, 2).await.unwrap();
    schema::create_all(&store).await.unwrap();
    schema::create_all(&store).await.unwrap();
    assert!(
        store.is_following(1, 2).await.unwrap(),
        "data survives re-creation"
    );
    let raw = RawSql::new(&store);
    for shard in 0..4 {
        let tables: Vec<String> = raw
            .query(
                shard,
                "SELECT table_name FROM information_schema.tables WHERE table_schema = ? \
                 ORDER BY table_name",
                (store.shards().database(shard),),
            )
            .await;
        assert_eq!(
            tables,
            ["followers", "following", "relation_log", "repair_state"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_or_hung_mysql_fails_within_the_timeouts() {
    let mut db = MariaDb::start();
    let connect = Duration::from_millis(500);
    let query = Duration::from_millis(1000);
    let store = relation_store(db.url(), "outage", SHARDS, |c| {
        c.connect_timeout = connect;
        c.query_timeout = query;
        c.pool_size = 4;
    })
    .await;
    // Cross-shard users, so writes need two connections.
    let (a, b) = pairs(&store, 10, 2)[1];
    store.follow(a, b).await.unwrap();
    let bound = connect + query + Duration::from_millis(500);

    // Hung: every call gives up by its deadline, with a timeout naming the shard.
    db.pause();
    for _ in 0..2 {
        let t = Instant::now();
        let err = store.following_ids(a).await.unwrap_err();
        assert!(t.elapsed() < bound, "read took {:?}", t.elapsed());
        assert!(err.is_timeout(), "{err}");
        let shard = store.shards().shard_of(a);
        assert!(
            err.to_string()
                .contains(&format!("shard {shard} on 127.0.0.1:")),
            "{err}"
        );
        let t = Instant::now();
        let err = store.follow(b, a).await.unwrap_err();
        assert!(t.elapsed() < bound, "write took {:?}", t.elapsed());
        assert!(err.is_timeout(), "{err}");
    }
    db.resume();
    assert!(
        store.follow(b, a).await.unwrap().mutual,
        "works again once resumed"
    );

    // Dead: calls fail fast, with a connection error.
    db.kill();
    for _ in 0..3 {
        let t = Instant::now();
        let err = store.is_following(a, b).await.unwrap_err();
        assert!(t.elapsed() < bound, "read took {:?}", t.elapsed());
        assert!(!err.is_timeout(), "a dead server refuses at once: {err}");
        let t = Instant::now();
        store.unfollow(a, b).await.unwrap_err();
        assert!(t.elapsed() < bound, "write took {:?}", t.elapsed());
    }

    // Restarted: the first calls succeed (stale pooled connections are replaced),
    // and the committed follows survived the crash.
    db.restart();
    assert!(store.is_following(a, b).await.unwrap());
    assert_eq!(store.relation(b, a).await.unwrap(), Relation::Mutual);
    assert!(store.unfollow(a, b).await.unwrap().removed);
    let rows: BTreeMap<u64, Vec<u64>> = store
        .following_ids_many(&[a, b])
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(rows, BTreeMap::from([(a, vec![]), (b, vec![a])]));
}

/// A shard map URL may carry any `mysql_async` parameter, but not one that changes
/// what the writes read from MySQL: with `client_found_rows`, a follow that found
/// its row already there would count it as inserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_parameters_cannot_make_a_retried_follow_look_new() {
    let url = format!("{}?client_found_rows=true", mariadb::shared().url());
    let store = relation_store(&url, "found_rows", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let (a, b) = (21u64, 22u64);
    assert!(store.follow(a, b).await.unwrap().created);
    let before = raw.pair(a, b).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert!(!store.follow(a, b).await.unwrap().created);
    assert_eq!(raw.pair(a, b).await, before, "the twin kept its time");
}

/// One call, one budget: a batch read over many shards gives up by its deadline
/// however many statements it has to queue, instead of giving each its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_shares_one_deadline() {
    let mut db = MariaDb::start();
    let (connect, query) = (Duration::from_millis(300), Duration::from_millis(500));
    let store = relation_store(db.url(), "batch_deadline", 32, |c| {
        c.connect_timeout = connect;
        c.query_timeout = query;
        c.pool_size = 2;
    })
    .await;
    // A user on every shard, and a warm pool.
    let mut users = Vec::new();
    let mut shards = BTreeSet::new();
    for u in 0.. {
        if shards.insert(store.shards().shard_of(u)) {
            users.push(u);
        }
        if shards.len() == 32 {
            break;
        }
    }
    assert_eq!(store.following_ids_many(&users).await.unwrap().len(), 32);
    db.pause();
    let t = Instant::now();
    let err = store.following_ids_many(&users).await.unwrap_err();
    let took = t.elapsed();
    db.resume();
    assert!(err.is_timeout(), "{err}");
    // Sixteen rounds of two statements would take 8 s with a budget each.
    assert!(
        took < connect + query + Duration::from_millis(700),
        "took {took:?}"
    );
}

/// A host that hangs holds up only the writes that touch it: two-shard writes
/// between healthy shards go through while writes to the hung host queue for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_host_holds_up_only_the_writes_that_touch_it() {
    // Accepts connections and never says a word: a host whose MySQL is wedged.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let held = held.clone();
        std::thread::spawn(move || {
            for socket in hung.incoming().flatten() {
                held.lock().unwrap().push(socket);
            }
        });
    }
    let healthy = mariadb::shared().url();
    let prefix = mariadb::db_prefix("hung_host");
    // Shards 0-3 on the real server (their schema created through a map of
    // those four alone), 4-7 on the hung one.
    let four = ShardMap::parse(&format!("shards 4\n0-3 {healthy} {prefix}{{shard}}\n")).unwrap();
    schema::create_all(&Store::new(StoreConfig::new(four)))
        .await
        .unwrap();
    let map = ShardMap::parse(&format!(
        "shards 8\n0-3 {healthy} {prefix}{{shard}}\n4-7 mysql://root@127.0.0.1:{hung_port} {prefix}{{shard}}\n"
    ))
    .unwrap();
    let connect = Duration::from_millis(800);
    let store = Store::new(StoreConfig {
        connect_timeout: connect,
        query_timeout: Duration::from_secs(1),
        ..StoreConfig::new(map)
    });
    let on = |range: std::ops::Range<u32>, skip: usize| {
        (1u64..)
            .filter(|&u| range.contains(&store.shards().shard_of(u)))
            .nth(skip)
            .unwrap()
    };
    let stuck: Vec<_> = (0..6)
        .map(|i| {
            let (store, a, b) = (store.clone(), on(0..4, i), on(4..8, i));
            tokio::spawn(async move { store.follow(a, b).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Two healthy users on different shards of the healthy host.
    let a = on(0..4, 10);
    let b = (1u64..)
        .find(|&u| {
            let s = store.shards().shard_of(u);
            s < 4 && s != store.shards().shard_of(a)
        })
        .unwrap();
    let t = Instant::now();
    assert!(store.follow(a, b).await.unwrap().created);
    assert!(
        t.elapsed() < connect,
        "waited {:?} behind the hung host",
        t.elapsed()
    );
    for write in stuck {
        let err = write.await.unwrap().unwrap_err();
        assert!(err.is_timeout(), "{err}");
    }
    assert!(!held.lock().unwrap().is_empty(), "the hung host was asked");
}

/// Every follow or unfollow that changes something gets a sequence number, larger
/// than any earlier change of the same user's set, and a snapshot of the set
/// carries the newest one it includes: what the cache orders write-throughs by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_numbered_in_commit_order_and_snapshots_carry_the_newest() {
    let store = relation_store(mariadb::shared().url(), "seq", SHARDS, |_| {}).await;
    let (a, b, c) = (31u64, 32u64, 33u64);
    assert_eq!(store.following_snapshot(a).await.unwrap().seq, 0);
    let mut last = 0;
    // (follow?, whom): each one changes the set.
    let steps = [(true, b), (true, c), (false, b), (true, b), (false, b)];
    for (step, (follow, whom)) in steps.into_iter().enumerate() {
        let seq = if follow {
            store.follow(a, whom).await.unwrap().seq
        } else {
            store.unfollow(a, whom).await.unwrap().seq
        }
        .expect("a change that happened is numbered");
        assert!(seq > last, "step {step}: {seq} after {last}");
        last = seq;
        let snapshot = store.following_snapshot(a).await.unwrap();
        assert_eq!(snapshot.seq, seq);
    }
    // Changes that change nothing have no number, and move nothing.
    assert_eq!(store.follow(a, c).await.unwrap().seq, None);
    assert_eq!(store.unfollow(a, b).await.unwrap().seq, None);
    let snapshot = store.following_snapshot(a).await.unwrap();
    assert_eq!((snapshot.ids, snapshot.seq), (vec![c], last));
    // Batched, users with and without changes.
    let many = store.following_snapshots(&[a, b, a]).await.unwrap();
    assert_eq!(many.len(), 2);
    assert_eq!(many[&a].seq, last);
    assert_eq!(many[&b], Default::default());
}
