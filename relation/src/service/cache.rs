//! Every cache call goes through here: the guard decides whether the cache is asked
//! at all (it may be down, or the user's set suspect), suspect sets are deleted
//! ahead of the next call once the cache answers, and each call's outcome is
//! reported back to the guard. See [`guard`](crate::guard).

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::{Relations, CLEAR_BATCH};
use crate::guard::Guard;
use relcache_client::{Cmd, Error as CacheError, Pool, PooledConn};

/// A connection to the cache node believed to hold a user's set (on one node,
/// the node), with which node that is: a lease is the node's, and so is the
/// process a run id names.
#[derive(Debug)]
pub(super) struct NodeConn {
    /// The node's address.
    pub node: Arc<str>,
    /// The node's pool, for a call that must reach the same node later (the
    /// release of a lease this connection won, after it broke).
    pub pool: Pool,
    pub conn: PooledConn,
}

impl Deref for NodeConn {
    type Target = PooledConn;

    fn deref(&self) -> &PooledConn {
        &self.conn
    }
}

impl DerefMut for NodeConn {
    fn deref_mut(&mut self) -> &mut PooledConn {
        &mut self.conn
    }
}

impl Relations {
    /// A connection for reading `user`'s set, or `None` when the read must go to
    /// MySQL: the cache is down or failed, or the user's cached set is suspect.
    pub(super) async fn conn_for(&self, user: u64) -> Option<NodeConn> {
        let conn = self.read_conn(user).await?;
        if self.guard.is_suspect(user) {
            self.stats.cache_bypassed.fetch_add(1, Relaxed);
            return None;
        }
        Some(conn)
    }

    /// A connection for reading `user`'s set: as [`cache_conn`](Self::cache_conn),
    /// but `None` while the process it reaches is a restarted cache not yet caught
    /// up with the changes it missed (see `restart`).
    pub(super) async fn read_conn(&self, user: u64) -> Option<NodeConn> {
        let conn = self.cache_conn(user).await?;
        self.admitted(conn).await
    }

    /// `conn`, if the process it reaches may be read (see `restart`).
    pub(super) async fn admitted(&self, mut conn: NodeConn) -> Option<NodeConn> {
        let limit = self.cache.pool_config().command_timeout;
        let run_id = match tokio::time::timeout(limit, conn.server_run_id()).await {
            Ok(Ok(id)) => id,
            Ok(Err(e)) => {
                self.cache_failed(Some(&conn.node), &e);
                return None;
            }
            Err(_) => {
                // The connection is left mid-reply; dropping it discards it.
                self.cache_failed(Some(&conn.node), &CacheError::Timeout);
                return None;
            }
        };
        if self.admit(&mut conn, run_id).await {
            return Some(conn);
        }
        self.stats.cache_bypassed.fetch_add(1, Relaxed);
        None
    }

    /// A connection to the node holding `user`'s set, or `None` if the cache is
    /// down (skipped without asking) or cannot be reached. Suspect sets are
    /// deleted first, so a cache that answers again stops serving what it missed
    /// before anyone reads it here.
    pub(super) async fn cache_conn(&self, user: u64) -> Option<NodeConn> {
        self.try_cache_conn(user).await.ok()
    }

    /// [`cache_conn`](Self::cache_conn), saying why there is none.
    pub(super) async fn try_cache_conn(&self, user: u64) -> Result<NodeConn, NoConn> {
        let (node, pool) = self.cache.node_for(&self.cache_key(user));
        self.try_node_conn(node, pool).await
    }

    /// [`try_cache_conn`](Self::try_cache_conn) to a given node.
    pub(super) async fn try_node_conn(
        &self,
        node: Arc<str>,
        pool: Pool,
    ) -> Result<NodeConn, NoConn> {
        if !self.health(Some(&node)).admit(Instant::now()) {
            self.stats.cache_bypassed.fetch_add(1, Relaxed);
            return Err(NoConn::Skipped);
        }
        let conn = match pool.get().await {
            Ok(conn) => conn,
            Err(e) => {
                self.stats.cache_errors.fetch_add(1, Relaxed);
                // Every connection busy says nothing about the cache's health. Any
                // other failure to check one out is the cache's: refused, timed
                // out, or accepted only to be turned away (maxclients).
                if matches!(e, CacheError::PoolBusy) {
                    tracing::warn!(error = %e, "no free cache connection");
                    return Err(NoConn::Busy);
                }
                self.transport_failed(Some(&node), &e);
                return Err(NoConn::Failed);
            }
        };
        if let Some(batch) = self.guard.clearing(CLEAR_BATCH) {
            let keys: Vec<Bytes> = batch.users().map(|u| self.cache_key(u)).collect();
            // Routed by key: on a cluster the sets are on many nodes.
            let deleted = self.cache.del(&keys).await;
            self.report(None, deleted.as_ref().err());
            if deleted.is_err() {
                // The batch stays suspect; the cache is failing.
                return Err(NoConn::Failed);
            }
            self.restarts
                .mended(batch.users(), self.config.max_suspects);
            let cleared = batch.done();
            self.stats
                .suspects_cleared
                .fetch_add(cleared as u64, Relaxed);
            tracing::info!(cleared, "suspect sets deleted from the cache");
        }
        Ok(NodeConn { node, pool, conn })
    }

    /// Runs `cmd` on `conn`, reporting the outcome to the guard.
    pub(super) async fn call<T>(
        &self,
        conn: &mut PooledConn,
        cmd: Cmd<T>,
    ) -> Result<T, CacheError> {
        let reply = conn.run(cmd).await;
        self.report(Some(conn.addr()), reply.as_ref().err());
        reply
    }

    /// Runs a pipeline on `conn`, reporting the outcome to the guard.
    pub(super) async fn call_pipeline<T>(
        &self,
        conn: &mut PooledConn,
        cmds: Vec<Cmd<T>>,
    ) -> Result<Vec<Result<T, CacheError>>, CacheError> {
        let replies = conn.run_pipeline(cmds).await;
        self.report(Some(conn.addr()), replies.as_ref().err());
        replies
    }

    /// Reports a call's outcome to the health of `node` (`None`: a call routed by
    /// key, whose node is not known here; on one node, that node).
    pub(super) fn report(&self, node: Option<&str>, error: Option<&CacheError>) {
        match error {
            None => self.health(node).succeeded(),
            Some(e) => {
                if e.is_redirect() {
                    // The slot moved: the next call goes to its new node.
                    self.cache.redirected(e);
                }
                self.cache_failed(node, e)
            }
        }
    }

    /// The guard whose health (down, probed) rules calls to `node`: on one node,
    /// the service's guard; on a cluster, one per node, so that a node that is
    /// down is skipped while the others are asked as usual, and successes on the
    /// others do not keep resetting its failure count. (Suspect sets are the
    /// service's guard's on either: a user is suspect wherever their set lives.)
    /// A routed call's outcome (`None`) goes to the service's guard, which no
    /// cluster call consults for health.
    pub(super) fn health(&self, node: Option<&str>) -> Arc<Guard> {
        let Some(node) = node.filter(|_| self.cache.is_cluster()) else {
            return self.guard.clone();
        };
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(guard) = health.get(node) {
            return guard.clone();
        }
        let guard = Arc::new(Guard::new(
            self.config.cache_failure_limit,
            self.config.cache_retry_interval,
            0,
        ));
        health.insert(node.into(), guard.clone());
        guard
    }

    /// Counts a failed cache call. Only a transport failure counts against the
    /// cache's health; an error reply is an answer, and a busy pool says nothing
    /// about the cache either way.
    fn cache_failed(&self, node: Option<&str>, e: &CacheError) {
        self.stats.cache_errors.fetch_add(1, Relaxed);
        if e.is_connection_lost() {
            self.transport_failed(node, e);
            return;
        }
        if e.is_server() || e.is_unexpected_reply() {
            self.health(node).succeeded();
        }
        tracing::warn!(error = %e, "cache call failed; answering from MySQL");
    }

    /// Reports a failure to reach the cache to the guard, which may take it down.
    fn transport_failed(&self, node: Option<&str>, e: &CacheError) {
        if self.health(node).failed(Instant::now()) {
            tracing::warn!(error = %e, retry_in = ?self.config.cache_retry_interval, "cache down; answering from MySQL");
        } else {
            tracing::warn!(error = %e, "cache unreachable; answering from MySQL");
        }
    }
}

/// Why a call gets no cache connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoConn {
    /// The cache is down: not asked.
    Skipped,
    /// Every pooled connection stayed busy.
    Busy,
    /// The cache could not be reached, or failed to delete suspect sets.
    Failed,
}
