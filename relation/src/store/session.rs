//! One call's time budget, and everything that runs within it: checking a
//! connection out of a host's pool and running statements on it.
//!
//! # Time bounds
//!
//! Every call has one budget, counted from its start, for everything it waits on:
//! connection checkouts (each also capped at `connect_timeout`), locks, statements,
//! deadlock retries, and for a batch read every shard's statement. A call finishes
//! or fails with [`StoreError::Timeout`] within `connect_timeout + query_timeout`;
//! a two-shard write, which checks out both connections before its first
//! statement, within `2 × connect_timeout + query_timeout`. A statement abandoned
//! by a timeout leaves its connection mid-reply; `mysql_async` then discards that
//! connection instead of returning it to the pool, and MySQL rolls back its
//! transaction when the socket closes. Server-side lock waits are capped near
//! `query_timeout` too (`innodb_lock_wait_timeout` per session), so a statement whose
//! caller has given up does not hold its place in a lock queue for InnoDB's default
//! 50 s.

use std::sync::atomic::Ordering;
use std::time::Duration;

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Params, Row};
use tokio::time::Instant;

use super::{Inner, StoreError};

/// One call's time budget: everything the call waits on — connection checkouts,
/// locks, statements, retries — ends by `at`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    start: Instant,
    pub(super) at: Instant,
}

impl Deadline {
    pub(super) fn new(budget: Duration) -> Deadline {
        let start = Instant::now();
        Deadline {
            start,
            at: start + budget,
        }
    }

    /// How long the call has run: what a timeout error reports.
    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// A connection or a transaction: what statements run on.
pub(crate) trait Session: Queryable {
    fn affected(&self) -> u64;
    fn inserted_id(&self) -> Option<u64>;
}

impl Session for Conn {
    fn affected(&self) -> u64 {
        self.affected_rows()
    }

    fn inserted_id(&self) -> Option<u64> {
        self.last_insert_id()
    }
}

impl Session for mysql_async::Transaction<'_> {
    fn affected(&self) -> u64 {
        self.affected_rows()
    }

    fn inserted_id(&self) -> Option<u64> {
        self.last_insert_id()
    }
}

impl Inner {
    fn host_label(&self, shard: u32) -> String {
        self.map.host(shard).label().to_string()
    }

    /// The budget of a call that checks out one connection at a time:
    /// `connect_timeout + query_timeout`.
    pub(crate) fn deadline(&self) -> Deadline {
        Deadline::new(self.connect_timeout + self.query_timeout)
    }

    fn mysql_error(
        &self,
        shard: u32,
        action: &'static str,
        source: mysql_async::Error,
    ) -> StoreError {
        StoreError::Mysql {
            shard,
            host: self.host_label(shard),
            action,
            source,
        }
    }

    /// Checks a connection to `shard`'s host out of its pool, within
    /// `connect_timeout` and what is left of the call's budget.
    pub(crate) async fn checkout(&self, d: Deadline, shard: u32) -> Result<Conn, StoreError> {
        let pool = &self.pools[self.map.host_of(shard)];
        let until = d.at.min(Instant::now() + self.connect_timeout);
        match tokio::time::timeout_at(until, pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.mysql_error(shard, "connect", e)),
            Err(_) => Err(self.timeout(d, shard, "connect")),
        }
    }

    pub(super) fn timeout(&self, d: Deadline, shard: u32, action: &'static str) -> StoreError {
        StoreError::Timeout {
            shard,
            host: self.host_label(shard),
            action,
            after: d.elapsed(),
        }
    }

    /// Runs one statement's future within the call's deadline, counting it.
    pub(super) async fn run<T>(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        fut: impl std::future::Future<Output = mysql_async::Result<T>>,
    ) -> Result<T, StoreError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout_at(d.at, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.mysql_error(shard, action, e)),
            Err(_) => Err(self.timeout(d, shard, action)),
        }
    }

    /// Runs a statement and decodes every row as `T`.
    pub(crate) async fn exec<T: FromRow, Q: Session>(
        &self,
        d: Deadline,
        shard: u32,
        q: &mut Q,
        action: &'static str,
        sql: String,
        params: impl Into<Params> + Send,
    ) -> Result<Vec<T>, StoreError> {
        let rows: Vec<Row> = self.run(d, shard, action, q.exec(sql, params)).await?;
        rows.into_iter()
            .map(|row| {
                mysql_async::from_row_opt(row).map_err(|e| StoreError::Decode {
                    shard,
                    host: self.host_label(shard),
                    action,
                    detail: e.to_string(),
                })
            })
            .collect()
    }

    /// Runs a statement and decodes its first row, if any.
    pub(crate) async fn exec_first<T: FromRow, Q: Session>(
        &self,
        d: Deadline,
        shard: u32,
        q: &mut Q,
        action: &'static str,
        sql: String,
        params: impl Into<Params> + Send,
    ) -> Result<Option<T>, StoreError> {
        Ok(self
            .exec(d, shard, q, action, sql, params)
            .await?
            .into_iter()
            .next())
    }

    /// Runs a statement that returns no rows; answers the rows it affected.
    pub(crate) async fn exec_drop<Q: Session>(
        &self,
        d: Deadline,
        shard: u32,
        q: &mut Q,
        action: &'static str,
        sql: String,
        params: impl Into<Params> + Send,
    ) -> Result<u64, StoreError> {
        self.run(d, shard, action, q.exec_drop(sql, params)).await?;
        Ok(q.affected())
    }

    /// Runs DDL or another statement that cannot be prepared (text protocol).
    pub(crate) async fn query_drop(
        &self,
        d: Deadline,
        shard: u32,
        conn: &mut Conn,
        action: &'static str,
        sql: String,
    ) -> Result<(), StoreError> {
        self.run(d, shard, action, conn.query_drop(sql)).await
    }

    /// One statement on one shard, outside any transaction, within the call's
    /// deadline `d`; every row decoded as `T`.
    pub(crate) async fn read<T: FromRow>(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        sql: String,
        params: impl Into<Params>,
    ) -> Result<Vec<T>, StoreError> {
        Ok(self
            .autocommit(d, shard, action, sql, params.into())
            .await?
            .0)
    }

    /// One autocommitted statement that returns no rows; answers the rows affected.
    /// Like [`read`](Self::read) it may be sent twice, so only for statements that
    /// are harmless to repeat.
    pub(crate) async fn write(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        sql: String,
        params: impl Into<Params>,
    ) -> Result<u64, StoreError> {
        let (_, affected) = self
            .autocommit::<Row>(d, shard, action, sql, params.into())
            .await?;
        Ok(affected)
    }

    /// Runs `reads` (one per shard, say) concurrently, but no more at once than a
    /// pool has connections: more would only queue for one and risk
    /// `connect_timeout`. Answers in completion order.
    pub(crate) async fn concurrently<T>(
        &self,
        reads: impl IntoIterator<Item = impl std::future::Future<Output = Result<T, StoreError>>>,
    ) -> Result<Vec<T>, StoreError> {
        use futures_util::{StreamExt, TryStreamExt};
        futures_util::stream::iter(reads)
            .buffer_unordered(self.pool_size)
            .try_collect()
            .await
    }

    /// Runs one statement on its own connection: its rows and the rows it affected.
    ///
    /// A connection that turns out dead before the statement got anywhere — an idle
    /// pooled connection whose server restarted, say — is dropped and the statement
    /// sent again on the next one, up to the pool size, so a server restart costs
    /// failed attempts rather than failed calls.
    async fn autocommit<T: FromRow>(
        &self,
        d: Deadline,
        shard: u32,
        action: &'static str,
        sql: String,
        params: Params,
    ) -> Result<(Vec<T>, u64), StoreError> {
        let mut conn = self.checkout(d, shard).await?;
        let mut retries = 0;
        loop {
            match self
                .exec(d, shard, &mut conn, action, sql.clone(), params.clone())
                .await
            {
                Ok(rows) => return Ok((rows, conn.affected())),
                Err(e) if e.is_connection_lost() && retries < self.pool_size => {
                    retries += 1;
                    conn = self.checkout(d, shard).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
