//! Filling missed sets: the lease holder's side of the read-through protocol. One
//! caller, holding the key's lease, reads the whole set from MySQL, builds the table
//! here and stores it with one command carrying the token — and the sequence number
//! of the newest change the read included, so later write-throughs apply in order —
//! on the connection that won the lease. A lease is held until the cache has
//! answered that load: if MySQL fails, the cache refuses the load or never answers
//! it, or the caller gives up first, the lease is given back at once.
//!
//! On a cluster a lease is its node's: the fill goes to that node or nowhere. A
//! fill answered with a redirect (the slot moved since the grant) is abandoned,
//! never sent on; the module docs of `service` say why.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use super::cache::NodeConn;
use super::{FilledSet, RelationError, Relations};
use relcache_client::{build_table, Cmd, LeaseOpts, Leased, LoadOpts, Pool, PooledConn};

/// Leases this caller holds, from the grant until the cache has answered the fill.
/// Each is settled one way or the other: filled (the load's reply is in), or
/// released. If the caller's future is dropped before that — while it reads MySQL,
/// or with the load sent and unanswered — the rest are released from a task of
/// their own, so the callers waiting on them are let go at once instead of when
/// they lapse. (Releasing a lease whose fill did land is harmless: the token no
/// longer matches, and the server answers 0.)
struct HeldLeases {
    /// The pool of the node that granted the leases: only it knows the tokens.
    cache: Pool,
    /// Keys and tokens not settled yet.
    leases: Vec<(Bytes, u64)>,
}

impl HeldLeases {
    /// The lease on `key` needs nothing more: its fill was answered.
    fn settled(&mut self, key: &[u8]) {
        self.leases.retain(|(k, _)| k != key);
    }

    /// Gives back every lease still held, on `conn` (the connection that won them)
    /// if it is still usable, else from a task of its own on another connection.
    /// A fill the cache refused for lack of memory (`-OOM`: `IDSET.LOAD` is a
    /// denyoom command) or lost to a broken connection ends here, and those parked
    /// on the lease are answered now.
    async fn release(mut self, relations: &Relations, conn: &mut PooledConn) {
        if self.leases.is_empty() || !conn.is_usable() {
            return;
        }
        // The leases count as held until the releases are answered: if this caller
        // gives up meanwhile, or the connection fails, `Drop` sends them again on
        // another connection.
        if relations.call_pipeline(conn, self.releases()).await.is_ok() {
            self.leases.clear();
        }
    }

    /// `IDSET.RELEASE` for every lease still held.
    fn releases(&self) -> Vec<Cmd<bool>> {
        self.leases
            .iter()
            .map(|(key, token)| Cmd::idset_release(key.clone(), *token))
            .collect()
    }
}

impl Drop for HeldLeases {
    fn drop(&mut self) {
        if self.leases.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cache = self.cache.clone();
        let release = self.releases();
        self.leases.clear();
        runtime.spawn(async move {
            let _ = cache.run_pipeline(release).await;
        });
    }
}

impl Relations {
    /// Reads `user`'s set from MySQL and stores it under the lease `token`, on the
    /// connection that won the lease (see [`PooledConn::run`]). The lease is
    /// released unless the fill was answered: on a MySQL failure, on a load the
    /// cache refused with an error or never answered, and if the caller gives up
    /// on the call before the load's reply is in — so waiters need not sit out its
    /// TTL.
    pub(super) async fn fill(
        &self,
        conn: &mut NodeConn,
        user: u64,
        token: u64,
    ) -> Result<FilledSet, RelationError> {
        let key = self.cache_key(user);
        let mut held = HeldLeases {
            cache: conn.pool.clone(),
            leases: vec![(key.clone(), token)],
        };
        let snapshot = match self.store.following_snapshot(user).await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                held.release(self, conn).await;
                return Err(e.into());
            }
        };
        let opts = LoadOpts {
            ttl: self.config.cache_ttl,
            lease: Some(token),
            seq: Some(snapshot.seq),
        };
        let ids = snapshot.ids;
        let table = Bytes::from(build_table(&ids));
        // Whether the cache took the fill changes nothing for this caller, whose
        // answer comes from `ids` either way.
        let load = Cmd::idset_load_table(key.clone(), table.clone(), opts);
        match self.call(conn, load).await {
            Ok(stored) => {
                held.settled(&key);
                let counter = match stored {
                    true => &self.stats.cache_fills,
                    false => &self.stats.fills_refused,
                };
                counter.fetch_add(1, Relaxed);
            }
            Err(e) => {
                if e.is_redirect() {
                    // The slot left this node since the grant: abandoned, not sent
                    // on (see the module docs). The release below is refused or
                    // lands; either way this node's lease is over.
                    self.stats.fills_redirected.fetch_add(1, Relaxed);
                }
                held.release(self, conn).await
            }
        }
        Ok(FilledSet { ids, table })
    }

    /// Fills many missing sets at once: leases asked for in one pipeline, the sets
    /// granted read in one MySQL query per shard and stored in one pipeline. Returns
    /// the sets read, and the users someone else holds a lease for or filled
    /// meanwhile (ask the cache again).
    ///
    /// On a cluster, the users are grouped by node and each node's are filled as
    /// above, the nodes in parallel.
    pub(super) async fn fill_many(
        &self,
        users: &[u64],
    ) -> Result<(HashMap<u64, Vec<u64>>, Vec<u64>), RelationError> {
        let fills = self
            .by_node(users)
            .into_iter()
            .map(|(node, pool, users)| async move { self.fill_on_node(node, pool, &users).await });
        let (mut sets, mut later) = (HashMap::new(), Vec::new());
        for filled in futures_util::future::join_all(fills).await {
            let (s, mut l) = filled?;
            sets.extend(s);
            later.append(&mut l);
        }
        Ok((sets, later))
    }

    /// [`fill_many`](Self::fill_many) for users whose sets are on one node.
    async fn fill_on_node(
        &self,
        node: Arc<str>,
        pool: Pool,
        users: &[u64],
    ) -> Result<(HashMap<u64, Vec<u64>>, Vec<u64>), RelationError> {
        let opts = LeaseOpts {
            px: Some(self.config.lease_ttl),
            wait: None,
        };
        // One connection for the leases and the fills (see [`PooledConn::run`]).
        let leases = match self.try_node_conn(node, pool).await.ok() {
            Some(mut conn) => {
                let leases = users
                    .iter()
                    .map(|&u| Cmd::idset_lease(self.cache_key(u), opts))
                    .collect();
                self.call_pipeline(&mut conn, leases)
                    .await
                    .ok()
                    .map(|leases| (conn, leases))
            }
            None => None,
        };
        let Some((mut conn, leases)) = leases else {
            return Ok((self.store.following_ids_many(users).await?, Vec::new()));
        };
        let (mut granted, mut later) = (Vec::new(), Vec::new());
        for (&u, lease) in users.iter().zip(leases) {
            match lease {
                Ok(Leased::Granted(token)) => granted.push((u, token)),
                _ => later.push(u),
            }
        }
        let ids: Vec<u64> = granted.iter().map(|&(u, _)| u).collect();
        let mut held = HeldLeases {
            cache: conn.pool.clone(),
            leases: granted
                .iter()
                .map(|&(u, token)| (self.cache_key(u), token))
                .collect(),
        };
        let snapshots = match self.store.following_snapshots(&ids).await {
            Ok(snapshots) => snapshots,
            Err(e) => {
                held.release(self, &mut conn).await;
                return Err(e.into());
            }
        };
        let fills = granted
            .iter()
            .map(|&(u, token)| {
                let snapshot = &snapshots[&u];
                let opts = LoadOpts {
                    ttl: self.config.cache_ttl,
                    lease: Some(token),
                    seq: Some(snapshot.seq),
                };
                Cmd::idset_load_table(self.cache_key(u), build_table(&snapshot.ids), opts)
            })
            .collect();
        if let Ok(results) = self.call_pipeline(&mut conn, fills).await {
            for (&(u, _), r) in granted.iter().zip(results) {
                let counter = match &r {
                    Ok(true) => &self.stats.cache_fills,
                    Err(e) if e.is_redirect() => &self.stats.fills_redirected,
                    _ => &self.stats.fills_refused,
                };
                counter.fetch_add(1, Relaxed);
                // A load answered with an error keeps its lease, released below.
                if r.is_ok() {
                    held.settled(&self.cache_key(u));
                }
            }
        }
        held.release(self, &mut conn).await;
        let sets = snapshots.into_iter().map(|(u, s)| (u, s.ids)).collect();
        Ok((sets, later))
    }
}
