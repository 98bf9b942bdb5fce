//! The relation tier's handle on its cache: one node ([`Pool`]) or a Redis Cluster
//! of relcache nodes ([`ClusterPool`]). The service asks it for the node that holds
//! a user's set and works on that node's connections as before; calls that are
//! not tied to a node (a write-through, a replay, a batch of deletes) are routed
//! by key and follow redirects.
//!
//! Not here: what the service does about a node's health, restarts or a slot
//! that moved under a fill; `service` decides that per node (see its docs on
//! redirects).

use std::sync::Arc;

use bytes::Bytes;
use relcache_client::{ClusterPool, Cmd, Error, Pool, PoolConfig};

/// A single cache node, or a cluster of them.
#[derive(Clone, Debug)]
pub enum Cache {
    /// One relcache process holds every set.
    Node(Pool),
    /// The sets are spread over a cluster's nodes by hash slot.
    Cluster(ClusterPool),
}

impl From<Pool> for Cache {
    fn from(pool: Pool) -> Cache {
        Cache::Node(pool)
    }
}

impl From<ClusterPool> for Cache {
    fn from(cluster: ClusterPool) -> Cache {
        Cache::Cluster(cluster)
    }
}

impl Cache {
    /// How each node's connections are made and timed out.
    pub fn pool_config(&self) -> &PoolConfig {
        match self {
            Cache::Node(pool) => pool.config(),
            Cache::Cluster(cluster) => &cluster.config().pool,
        }
    }

    /// The node believed to hold `key` (its address) and its pool. On a cluster
    /// whose map has no owner for the key's slot, any node: its answer will be a
    /// redirect, which the caller reports with [`redirected`](Self::redirected).
    pub fn node_for(&self, key: &[u8]) -> (Arc<str>, Pool) {
        match self {
            Cache::Node(pool) => (pool.config().addr.as_str().into(), pool.clone()),
            Cache::Cluster(cluster) => {
                let addr = cluster
                    .node_for_key(key)
                    .or_else(|| cluster.primaries().into_iter().next())
                    .unwrap_or_else(|| cluster.config().seeds[0].as_str().into());
                let pool = cluster.node(&addr);
                (addr, pool)
            }
        }
    }

    /// Every node's pool: the one node, or each primary the cluster's map names
    /// (for a command every node must run, such as `FLUSHALL`).
    pub fn nodes(&self) -> Vec<Pool> {
        match self {
            Cache::Node(pool) => vec![pool.clone()],
            Cache::Cluster(cluster) => cluster
                .primaries()
                .iter()
                .map(|addr| cluster.node(addr))
                .collect(),
        }
    }

    /// Whether the sets are spread over a cluster (so commands over several users'
    /// keys must be split by slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Cache::Cluster(_))
    }

    /// A call pinned to a node failed with `e`: on a cluster, a `-MOVED` fixes the
    /// slot map and any redirect has it read again soon (see
    /// [`ClusterPool::redirected`]), so the next call goes to the right node.
    pub fn redirected(&self, e: &Error) {
        if let Cache::Cluster(cluster) = self {
            cluster.redirected(e);
        }
    }

    /// The key under `prefix` that records which process of the node at `node`
    /// was last caught up (see `service::restart`): it must live on that node. On
    /// one node, `<prefix>caught-up`; on a cluster, `<prefix>caught-up{n}` with the
    /// first `n` whose slot the node serves, or `None` if it serves none. (If the
    /// slot moves later, the marker moves with it and the next reader of its old
    /// node replays the log again: safe, only slower.)
    pub fn marker_key(&self, prefix: &str, node: &str) -> Option<Bytes> {
        match self {
            Cache::Node(_) => Some(format!("{prefix}caught-up").into()),
            Cache::Cluster(cluster) => (0..4 * relcache_protocol::slot::SLOTS)
                .map(|n| format!("{prefix}caught-up{{{n}}}"))
                .find(|key| cluster.node_for_key(key.as_bytes()).as_deref() == Some(node))
                .map(Bytes::from),
        }
    }

    /// Runs `cmd` on the node holding its key, following redirects.
    ///
    /// # Errors
    ///
    /// As [`Pool::run`] and [`ClusterPool::run`].
    pub async fn run<T>(&self, cmd: Cmd<T>) -> Result<T, Error> {
        match self {
            Cache::Node(pool) => pool.run(cmd).await,
            Cache::Cluster(cluster) => cluster.run(cmd).await,
        }
    }

    /// Runs `cmds` pipelined, per node on a cluster, answers in order.
    ///
    /// # Errors
    ///
    /// As [`Pool::run_pipeline`] and [`ClusterPool::run_pipeline`].
    pub async fn run_pipeline<T>(&self, cmds: Vec<Cmd<T>>) -> Result<Vec<Result<T, Error>>, Error> {
        match self {
            Cache::Node(pool) => pool.run_pipeline(cmds).await,
            Cache::Cluster(cluster) => cluster.run_pipeline(cmds).await,
        }
    }

    /// `DEL` of `keys`: one command on a node, one per key on a cluster (a
    /// multi-key DEL must keep to one slot there).
    ///
    /// # Errors
    ///
    /// The first failure; some keys may have been deleted.
    pub async fn del(&self, keys: &[Bytes]) -> Result<(), Error> {
        match self {
            Cache::Node(pool) => pool.run(Cmd::del(keys)).await.map(drop),
            Cache::Cluster(cluster) => {
                let dels = keys.iter().map(|k| Cmd::del(&[k])).collect();
                for reply in cluster.run_pipeline(dels).await? {
                    reply?;
                }
                Ok(())
            }
        }
    }
}
