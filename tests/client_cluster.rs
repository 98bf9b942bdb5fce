//! The client's cluster routing against a real three-node `redis-server` cluster
//! (and the IDSET family over a relcache one):
//! every command reaches the node that serves its slot, pipelines and multi-key
//! commands are split by node and merged in order, a stale slot map is corrected
//! by `-MOVED`, and a slot migrated while the client reads and writes costs it no
//! error and no write (`-ASK` while the keys move, `-MOVED` after).

mod harness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use harness::cluster::{cli, move_slot, owner_and_another, RedisCluster, RelcacheCluster};
use relcache_client::{ClusterConfig, ClusterPool, Cmd, Error, Frame, LoadOpts, PoolConfig};
use relcache_protocol::slot::key_slot;

async fn connect(cluster: &RedisCluster) -> ClusterPool {
    ClusterPool::connect(ClusterConfig {
        // One seed is enough: the slot map names the rest.
        seeds: vec![cluster.addrs()[0].clone()],
        pool: PoolConfig {
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(10),
            ..PoolConfig::default()
        },
        ..ClusterConfig::default()
    })
    .await
    .expect("read the slot map")
}

fn int(frame: Frame) -> i64 {
    match frame {
        Frame::Integer(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn incr(key: &str) -> Cmd<i64> {
    Cmd::new(
        vec![Bytes::from("INCR"), Bytes::from(key.to_owned())],
        |f| Ok(int(f)),
    )
}

fn mget(keys: &[Bytes]) -> Cmd<Vec<Option<Bytes>>> {
    let mut args = vec![Bytes::from("MGET")];
    args.extend(keys.iter().cloned());
    Cmd::new(args, |f| match f {
        Frame::Array(items) => Ok(items
            .into_iter()
            .map(|i| match i {
                Frame::Bulk(b) => Some(b),
                _ => None,
            })
            .collect()),
        other => Err(Error::UnexpectedReply(format!("{other:?}"))),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_pipelines_and_multi_key_reads_reach_every_node() {
    let cluster = RedisCluster::start(3);
    let pool = connect(&cluster).await;
    assert_eq!(pool.primaries().len(), 3);
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        pool.run(Cmd::set(key, i.to_string())).await.unwrap();
    }
    // Each node holds exactly the keys the map routes to it.
    let mut total = 0;
    for port in cluster.ports() {
        let held: usize = cli(port, &["DBSIZE"]).parse().unwrap();
        let routed = keys
            .iter()
            .filter(|k| {
                pool.node_for_key(k.as_bytes())
                    .unwrap()
                    .ends_with(&format!(":{port}"))
            })
            .count();
        assert_eq!(held, routed, "node {port}");
        assert!(held > 50, "the keys spread over every node");
        total += held;
    }
    assert_eq!(total, keys.len());

    // A pipeline over every node answers in the caller's order.
    let cmds: Vec<Cmd<Option<Bytes>>> = keys.iter().map(Cmd::get).collect();
    let answers = pool.run_pipeline(cmds).await.unwrap();
    for (i, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer.unwrap(), Some(Bytes::from(i.to_string())));
    }

    // MGET over keys in many slots is split per slot and merged in order; a
    // missing key answers in its place.
    let mut asked: Vec<Bytes> = keys.iter().rev().map(|k| Bytes::from(k.clone())).collect();
    asked.insert(7, Bytes::from("no-such-key"));
    let values = pool.run_split(&asked, mget).await.unwrap();
    assert_eq!(values.len(), asked.len());
    for (key, value) in asked.iter().zip(values) {
        let expected = keys
            .iter()
            .position(|k| k.as_bytes() == key.as_ref())
            .map(|i| Bytes::from(i.to_string()));
        assert_eq!(value, expected, "{key:?}");
    }
    // Sent whole, the same MGET is refused as Redis refuses it.
    let err = pool.run(mget(&asked)).await.unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"));
    // A keyless command goes to any node.
    pool.run(Cmd::ping()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_slot_map_is_corrected_by_moved() {
    let cluster = RedisCluster::start(3);
    let pool = connect(&cluster).await;
    let key = "{moving}:counter";
    let slot = key_slot(key.as_bytes());
    assert_eq!(pool.run(incr(key)).await.unwrap(), 1);
    let (from, to) = owner_and_another(&cluster.ports(), slot);
    move_slot(slot, from, to, &cluster.ports(), || {});
    // The pool still routes to `from`, which answers MOVED.
    assert!(pool
        .node_for_key(key.as_bytes())
        .unwrap()
        .ends_with(&format!(":{from}")));
    assert_eq!(pool.run(incr(key)).await.unwrap(), 2);
    assert!(
        pool.node_for_key(key.as_bytes())
            .unwrap()
            .ends_with(&format!(":{to}")),
        "the moved slot's entry is fixed at once"
    );
    // A pipeline whose command is redirected still answers in place.
    let answers = pool
        .run_pipeline(vec![incr("a"), incr(key), incr("b")])
        .await
        .unwrap();
    assert_eq!(answers[1].as_ref().unwrap(), &3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_reads_and_writes_loses_nothing() {
    let cluster = RedisCluster::start(3);
    let pool = connect(&cluster).await;
    // Forty keys in the migrating slot, forty elsewhere.
    let moving: Vec<String> = (0..40).map(|i| format!("{{hot}}:{i}")).collect();
    let steady: Vec<String> = (0..40).map(|i| format!("steady:{i}")).collect();
    let slot = key_slot(b"{hot}");
    for key in moving.iter().chain(&steady) {
        pool.run(incr(key)).await.unwrap();
    }
    let (from, to) = owner_and_another(&cluster.ports(), slot);

    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (pool, done) = (pool.clone(), done.clone());
        let keys: Vec<String> = moving.iter().chain(&steady).cloned().collect();
        tokio::spawn(async move {
            // Every INCR that succeeds is counted; any error fails the test.
            let mut counts = vec![1i64; keys.len()];
            let mut round = 0;
            while !done.load(Ordering::Relaxed) || round < 2 {
                for (i, key) in keys.iter().enumerate() {
                    let now = pool.run(incr(key)).await.expect("no error during the move");
                    counts[i] += 1;
                    assert_eq!(now, counts[i], "{key}: no write lost or applied twice");
                }
                let batch = keys.iter().map(|k| incr(k)).collect();
                for (i, answer) in pool
                    .run_pipeline(batch)
                    .await
                    .unwrap()
                    .into_iter()
                    .enumerate()
                {
                    counts[i] += 1;
                    assert_eq!(answer.unwrap(), counts[i], "{}", keys[i]);
                }
                round += 1;
            }
            (keys, counts)
        })
    };
    let ports = cluster.ports();
    tokio::task::spawn_blocking(move || {
        // Slow enough that the writer goes round while the keys are split
        // between the two nodes, and so meets ASK.
        move_slot(slot, from, to, &ports, || {
            std::thread::sleep(Duration::from_millis(15))
        })
    })
    .await
    .unwrap();
    done.store(true, Ordering::Relaxed);
    let (keys, counts) = writer.await.unwrap();

    let asked = cli(to, &["INFO", "commandstats"]);
    assert!(
        asked.contains("cmdstat_asking:"),
        "the writer met ASK during the migration: {asked}"
    );
    let held: usize = cli(to, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
        .parse()
        .unwrap();
    assert_eq!(held, moving.len(), "every key of the slot moved");
    for (key, count) in keys.iter().zip(counts) {
        let value = pool.run(Cmd::get(key)).await.unwrap().unwrap();
        assert_eq!(value, Bytes::from(count.to_string()), "{key}");
    }
    assert!(pool
        .node_for_key(b"{hot}")
        .unwrap()
        .ends_with(&format!(":{to}")));
}

/// The same routing over relcache nodes in cluster mode, with the IDSET family:
/// `IDSET.WHICH` over users' sets on every node, split per slot and merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idset_which_is_split_over_a_relcache_cluster() {
    let cluster = RelcacheCluster::start(3);
    let pool = ClusterPool::connect(ClusterConfig {
        seeds: cluster.addrs(),
        ..ClusterConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(pool.primaries().len(), 3);
    let keys: Vec<Bytes> = (0..60)
        .map(|u| Bytes::from(format!("following:{{{u}}}")))
        .collect();
    // Even users follow 42; every third user's set is missing.
    let loads = keys
        .iter()
        .enumerate()
        .filter(|(u, _)| u % 3 != 0)
        .map(|(u, k)| {
            let ids: &[u64] = if u % 2 == 0 { &[1, 42] } else { &[1, 7] };
            Cmd::idset_load_ids(k.clone(), ids, LoadOpts::default())
        })
        .collect();
    for stored in pool.run_pipeline(loads).await.unwrap() {
        assert!(stored.unwrap());
    }
    let answers = pool
        .run_split(&keys, |keys| Cmd::idset_which(42, keys))
        .await
        .unwrap();
    for (u, answer) in answers.into_iter().enumerate() {
        let expected = (u % 3 != 0).then_some(u % 2 == 0);
        assert_eq!(answer, expected, "user {u}");
    }
    let err = pool.run(Cmd::idset_which(42, &keys)).await.unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"));

    // A slot moved behind the pool's back: MOVED is followed.
    let key = "following:{moved}";
    let slot = key_slot(key.as_bytes());
    let ports = cluster.ports();
    let (from, to) = owner_and_another(&ports, slot);
    move_slot(slot, from, to, &ports, || {});
    assert_eq!(
        pool.run(Cmd::idset_add(key, &[5])).await.unwrap(),
        1,
        "sent on to the new node"
    );
    assert!(pool
        .node_for_key(key.as_bytes())
        .unwrap()
        .ends_with(&format!(":{to}")));
}
