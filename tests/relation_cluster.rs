//! The relation service over a three-node relcache cluster in front of the real
//! MariaDB: every read against a model with the sets spread over the nodes
//! (`followers_among` split by node), write-throughs reaching whichever node
//! holds the set, and a slot moved between a lease and its fill: the fill is
//! refused by the old node, never stored, and the next read fills the new one.
//! The single-node scenarios are in `relation_tier.rs`.

mod harness;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use harness::cluster::{move_slot, owner_and_another, RelcacheCluster};
use harness::mariadb::{self, relation_store, MariaDb};
use relcache_client::PoolConfig;
use relcache_client::{build_table, Cmd, LeaseOpts, Leased, LoadOpts};
use relcache_protocol::slot::key_slot;
use relcache_relation::service::{Relations, RelationsConfig};
use relcache_relation::Relation;

async fn tier(cluster: &RelcacheCluster, test: &str) -> Relations {
    let store = relation_store(mariadb::shared().url(), test, 8, |_| {}).await;
    let config = RelationsConfig {
        lease_wait: Duration::from_secs(10),
        ..RelationsConfig::default()
    };
    Relations::new(cluster.pool().await, store, config)
}

fn following_of(model: &BTreeSet<(u64, u64)>, a: u64) -> Vec<u64> {
    model
        .iter()
        .filter(|(f, _)| *f == a)
        .map(|&(_, b)| b)
        .collect()
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_over_three_nodes_answers_as_mysql() {
    let cluster = RelcacheCluster::start(3);
    let t = tier(&cluster, "cluster_reads").await;
    assert_eq!(&t.cache_key(42)[..], b"following:{42}");
    let users: Vec<u64> = (1..=40).collect();
    let nodes: BTreeSet<u16> = users.iter().map(|&u| key_slot(&t.cache_key(u))).collect();
    assert!(nodes.len() > 30, "the users' sets are spread over slots");

    let mut model = BTreeSet::new();
    for &a in &users {
        for &b in &users {
            if a != b && (a * 7 + b * 3) % 5 == 0 {
                t.follow(a, b).await.unwrap();
                model.insert((a, b));
            }
        }
    }
    // Twice: the first reads fill, the second are hits, on whichever node.
    for round in 0..2 {
        for &a in &users {
            assert_eq!(
                sorted(t.following_set(a).await.unwrap()),
                following_of(&model, a),
                "user {a}, round {round}"
            );
            let probe: Vec<u64> = users.iter().copied().step_by(3).collect();
            let expected: Vec<bool> = probe.iter().map(|&b| model.contains(&(a, b))).collect();
            assert_eq!(t.which_followed(a, &probe).await.unwrap(), expected);
            assert_eq!(
                t.following_count(a).await.unwrap(),
                following_of(&model, a).len() as u64
            );
        }
    }
    let s = t.stats();
    assert!(s.cache_fills.load(Relaxed) >= users.len() as u64);
    assert!(s.cache_hits.load(Relaxed) > users.len() as u64);
    assert_eq!(s.cache_errors.load(Relaxed), 0);

    // Which of the people a follows follow x: their sets are on every node.
    for &(a, x) in &[(5, 10), (10, 35), (3, 1)] {
        let expected: Vec<u64> = following_of(&model, a)
            .into_iter()
            .filter(|&f| model.contains(&(f, x)))
            .collect();
        assert_eq!(t.followers_among(x, a).await.unwrap(), expected, "{a} {x}");
    }
    let common: Vec<u64> = following_of(&model, 5)
        .into_iter()
        .filter(|&f| model.contains(&(10, f)))
        .collect();
    assert_eq!(t.common_following(5, 10).await.unwrap(), common);

    // Writes reach the node holding the set.
    let (a, b) = (1, 2);
    let was = model.contains(&(a, b));
    if was {
        t.unfollow(a, b).await.unwrap();
    } else {
        t.follow(a, b).await.unwrap();
    }
    let cached = t
        .cache()
        .run(Cmd::idset_exists(t.cache_key(a), b))
        .await
        .unwrap();
    assert_eq!(
        cached,
        Some(!was),
        "the write-through reached the cached set"
    );
    if was {
        model.remove(&(a, b));
    } else {
        model.insert((a, b));
    }
    let expected = match (model.contains(&(a, b)), model.contains(&(b, a))) {
        (true, true) => Relation::Mutual,
        (true, false) => Relation::Following,
        (false, true) => Relation::FollowedBy,
        (false, false) => Relation::None,
    };
    assert_eq!(t.relation(a, b).await.unwrap(), expected);
    assert_eq!(t.stats().write_through_failures.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_whose_slot_moved_is_refused_and_the_next_read_fills_the_new_node() {
    let cluster = RelcacheCluster::start(3);
    let t = tier(&cluster, "cluster_moves").await;
    // A second service whose slot map will be stale when it writes.
    let stale = tier(&cluster, "cluster_moves").await;
    let (a, b, c, d) = (7001, 7002, 7003, 7004);
    t.follow(a, b).await.unwrap();
    let key = t.cache_key(a);
    let slot = key_slot(&key);
    let ports = cluster.ports();
    let (from, to) = owner_and_another(&ports, slot);

    // A caller takes the lease on the old node and reads MySQL...
    let Leased::Granted(token) = t
        .cache()
        .run(Cmd::idset_lease(key.clone(), LeaseOpts::default()))
        .await
        .unwrap()
    else {
        panic!("a miss is granted the lease");
    };
    let read = t.store().following_snapshot(a).await.unwrap();
    // ...the slot moves (it holds no key: the set was never filled)...
    move_slot(slot, from, to, &ports, || {});
    // ...and the fill, sent where the lease was granted, is refused.
    let old = t.cache().nodes();
    let old = old
        .iter()
        .find(|p| p.config().addr.ends_with(&format!(":{from}")))
        .expect("the old node's pool");
    let fill = LoadOpts {
        ttl: None,
        lease: Some(token),
        seq: Some(read.seq),
    };
    let err = old
        .run(Cmd::idset_load_table(
            key.clone(),
            build_table(&read.ids),
            fill,
        ))
        .await
        .unwrap_err();
    assert!(err.is_redirect(), "{err}");

    // The service's next read finds the set missing on the new node, fills it there.
    let fills = t.stats().cache_fills.load(Relaxed);
    assert!(t.is_following(a, b).await.unwrap());
    assert_eq!(t.stats().cache_fills.load(Relaxed), fills + 1);
    let on_new = relcache_client::Pool::new(PoolConfig {
        addr: format!("127.0.0.1:{to}"),
        ..PoolConfig::default()
    });
    assert_eq!(
        on_new.run(Cmd::idset_members(key.clone())).await.unwrap(),
        Some(vec![b])
    );

    // A write-through from a service whose map still names the old node is
    // answered MOVED there and sent on to the new one.
    stale.follow(a, c).await.unwrap();
    assert_eq!(stale.stats().write_through_failures.load(Relaxed), 0);
    assert_eq!(
        on_new
            .run(Cmd::idset_members(key.clone()))
            .await
            .unwrap()
            .map(sorted),
        Some(vec![b, c])
    );
    t.follow(a, d).await.unwrap();
    assert_eq!(
        sorted(t.following_set(a).await.unwrap()),
        vec![b, c, d],
        "answered from the new node's set, which has every write"
    );
    assert_eq!(t.stats().write_through_failures.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_dies_is_skipped_while_the_others_are_read() {
    let mut cluster = RelcacheCluster::start(3);
    let t = tier(&cluster, "cluster_down").await;
    let users: Vec<u64> = (100..130).collect();
    for &u in &users {
        t.follow(u, u + 1).await.unwrap();
    }
    for &u in &users {
        assert!(t.is_following(u, u + 1).await.unwrap(), "fills");
    }
    let dead = cluster.nodes.remove(0);
    let dead_port = format!(":{}", dead.port);
    drop(dead);
    let (on_dead, on_live): (Vec<u64>, Vec<u64>) = users
        .iter()
        .partition(|&&u| t.cache().node_for(&t.cache_key(u)).0.ends_with(&dead_port));
    assert!(!on_dead.is_empty() && !on_live.is_empty());
    // The dead node's users are answered from MySQL until it is taken for down…
    for _ in 0..3 {
        for &u in &on_dead {
            assert!(t.is_following(u, u + 1).await.unwrap());
        }
    }
    assert!(t.cache_down(), "the dead node is down");
    // …and the live nodes' users are still answered by their nodes, unhindered.
    let hits = t.stats().cache_hits.load(Relaxed);
    for &u in &on_live {
        assert!(t.is_following(u, u + 1).await.unwrap());
        assert!(!t.is_following(u, u + 2).await.unwrap());
    }
    assert_eq!(
        t.stats().cache_hits.load(Relaxed),
        hits + 2 * on_live.len() as u64,
        "one node down does not take the others down"
    );
}

/// The service's own fill, caught between its lease and its load by a slot move:
/// MySQL is paused while the filler reads it, the slot moves, MySQL resumes. The
/// load is answered MOVED by the old node and abandoned — stored nowhere, never
/// sent on with its token — the caller still gets MySQL's answer, and the next read
/// fills the new node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_under_way_when_its_slot_moves_is_abandoned() {
    let cluster = RelcacheCluster::start(3);
    let mut db = MariaDb::start();
    let store = relation_store(db.url(), "cluster_midfill", 8, |c| {
        c.query_timeout = Duration::from_secs(30);
    })
    .await;
    let config = RelationsConfig {
        lease_wait: Duration::from_secs(10),
        lease_ttl: Duration::from_secs(30),
        ..RelationsConfig::default()
    };
    let t = Arc::new(Relations::new(cluster.pool().await, store, config));
    let (a, b) = (9001, 9002);
    t.follow(a, b).await.unwrap();
    let key = t.cache_key(a);
    let slot = key_slot(&key);
    let ports = cluster.ports();
    let (from, to) = owner_and_another(&ports, slot);
    let node = |port: u16| {
        relcache_client::Pool::new(PoolConfig {
            addr: format!("127.0.0.1:{port}"),
            ..PoolConfig::default()
        })
    };
    let (old, new) = (node(from), node(to));

    db.pause();
    let reader = tokio::spawn({
        let t = t.clone();
        async move { t.is_following(a, b).await }
    });
    // The reader holds the lease once another asker is told it is busy.
    let no_wait = LeaseOpts {
        px: Some(Duration::from_millis(1)),
        wait: None,
    };
    loop {
        match old
            .run(Cmd::idset_lease(key.clone(), no_wait))
            .await
            .unwrap()
        {
            Leased::Busy => break,
            // Ours, before the reader asked: let it lapse and ask again.
            Leased::Granted(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            Leased::Hit(()) => panic!("the set was never filled"),
        }
    }
    let all = ports.clone();
    tokio::task::spawn_blocking(move || move_slot(slot, from, to, &all, || {}))
        .await
        .unwrap();
    db.resume();

    assert!(reader.await.unwrap().unwrap(), "answered from MySQL");
    let s = t.stats();
    assert_eq!(
        s.fills_redirected.load(Relaxed),
        1,
        "the fill was abandoned"
    );
    assert_eq!(s.cache_fills.load(Relaxed), 0);
    let err = old.run(Cmd::idset_members(key.clone())).await.unwrap_err();
    assert!(err.is_redirect(), "the old node no longer serves the slot");
    assert_eq!(
        new.run(Cmd::idset_members(key.clone())).await.unwrap(),
        None,
        "nothing stored on the new node either"
    );
    assert!(t.is_following(a, b).await.unwrap());
    assert_eq!(
        s.cache_fills.load(Relaxed),
        1,
        "the next read fills the new node"
    );
    assert_eq!(
        new.run(Cmd::idset_members(key)).await.unwrap(),
        Some(vec![b])
    );
}
