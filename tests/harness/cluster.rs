//! Clusters for tests: N nodes started in cluster mode, joined with
//! `redis-cli --cluster create`, and a hand-driven slot migration (the steps
//! `redis-cli --cluster reshard` takes, one key at a time) that a test can run
//! while its client reads and writes.
//!
//! [`create_cluster`] and [`move_slot`] speak only the cluster commands, so they
//! serve a cluster of `redis-server`s ([`RedisCluster`]) and, once relcache runs
//! in cluster mode, one of `relcache-server`s alike.

use std::process::Command;
use std::time::{Duration, Instant};

use super::real_redis::RedisServer;
use super::{tool, TempDir, TestServer};

/// Runs `redis-cli -p <port> <args>` and returns its standard output, trimmed;
/// panics if it could not run or exited with a failure.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(tool("redis-cli"))
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A free TCP port on 127.0.0.1 (released before it is returned: a process
/// started on it may race another for it, and is restarted if it loses).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("find a free port")
        .port()
}

/// Joins the nodes listening on `ports` into one cluster, the slots split evenly
/// and no replicas, and waits until every node reports the cluster ok with all
/// nodes known.
pub fn create_cluster(ports: &[u16]) {
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new(tool("redis-cli"))
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("run redis-cli --cluster create");
    assert!(out.status.success(), "cluster create failed: {out:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let known = format!("cluster_known_nodes:{}", ports.len());
    while !ports.iter().all(|&p| {
        let info = cli(p, &["CLUSTER", "INFO"]);
        info.contains("cluster_state:ok") && info.contains(&known)
    }) {
        assert!(Instant::now() < deadline, "the cluster never became ok");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The cluster node id of the node on `port`.
pub fn node_id(port: u16) -> String {
    cli(port, &["CLUSTER", "MYID"])
}

/// Moves `slot` from the node on `from` to the node on `to` as a resharding does:
/// marks it importing and migrating, `MIGRATE`s its keys one at a time (calling
/// `between` after each, so a test can let its client run into `-ASK` meanwhile),
/// then assigns it to `to` on every node in `all`.
pub fn move_slot(slot: u16, from: u16, to: u16, all: &[u16], mut between: impl FnMut()) {
    let (from_id, to_id) = (node_id(from), node_id(to));
    let slot = slot.to_string();
    cli(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    cli(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    loop {
        let key = cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1"]);
        if key.is_empty() {
            break;
        }
        let to_port = to.to_string();
        let moved = cli(
            from,
            &[
                "MIGRATE",
                "127.0.0.1",
                &to_port,
                "",
                "0",
                "5000",
                "KEYS",
                &key,
            ],
        );
        assert!(moved == "OK" || moved == "NOKEY", "MIGRATE {key}: {moved}");
        between();
    }
    // The importing node first, as Redis does: the slot is never left without an
    // owner that will take its commands.
    cli(to, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    cli(from, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    for &p in all.iter().filter(|&&p| p != from && p != to) {
        cli(p, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
}

/// `redis-server`s in one cluster, killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    _dirs: Vec<TempDir>,
}

impl RedisCluster {
    /// Starts `n` (at least 3, as `redis-cli --cluster create` requires) and joins
    /// them.
    pub fn start(n: usize) -> RedisCluster {
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..n {
            let dir = TempDir::new("redis-cluster");
            // The bus port must be given: the default, port + 10000, may not exist.
            let bus = free_port().to_string();
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus,
                "--dir",
                dir.path(),
            ]));
            dirs.push(dir);
        }
        create_cluster(&nodes.iter().map(|n| n.port).collect::<Vec<_>>());
        RedisCluster { nodes, _dirs: dirs }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    pub fn addrs(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// The port of the node that serves `slot`.
    pub fn owner(&self, slot: u16) -> u16 {
        owner(self.nodes[0].port, slot)
    }
}

/// The node on `ports` that serves `slot`, and another one to move it to.
pub fn owner_and_another(ports: &[u16], slot: u16) -> (u16, u16) {
    let from = owner(ports[0], slot);
    let to = *ports.iter().find(|&&p| p != from).expect("two nodes");
    (from, to)
}

/// The port of the node that serves `slot`, as the node on `port` sees it, from
/// `CLUSTER NODES`: a line per node, `id host:port@bus flags master ping pong
/// epoch link slot-ranges…`.
pub fn owner(port: u16, slot: u16) -> u16 {
    let nodes = cli(port, &["CLUSTER", "NODES"]);
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let serves = fields.iter().skip(8).any(|range| {
                let (start, end) = range.split_once('-').unwrap_or((range, range));
                matches!((start.parse::<u16>(), end.parse::<u16>()), (Ok(s), Ok(e)) if (s..=e).contains(&slot))
            });
        if serves {
            let addr = fields[1].split('@').next().unwrap();
            return addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    }
    panic!("no node serves slot {slot}: {nodes}");
}

/// `relcache-server`s in one cluster, stopped on drop.
pub struct RelcacheCluster {
    pub nodes: Vec<TestServer>,
}

impl RelcacheCluster {
    /// Starts `n` (at least 3) in cluster mode and joins them.
    pub fn start(n: usize) -> RelcacheCluster {
        let nodes: Vec<TestServer> = (0..n)
            .map(|_| TestServer::start_with(&["--cluster-enabled", "yes"]))
            .collect();
        create_cluster(&nodes.iter().map(|n| n.port).collect::<Vec<_>>());
        RelcacheCluster { nodes }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr()).collect()
    }

    /// A routing pool over the cluster with the timeouts and size the relation
    /// tier's tests use.
    pub async fn pool(&self) -> relcache_client::ClusterPool {
        relcache_client::ClusterPool::connect(relcache_client::ClusterConfig {
            seeds: self.addrs(),
            pool: relcache_client::PoolConfig {
                max_connections: 64,
                command_timeout: Duration::from_secs(5),
                ..relcache_client::PoolConfig::default()
            },
            ..relcache_client::ClusterConfig::default()
        })
        .await
        .expect("read the slot map")
    }
}
