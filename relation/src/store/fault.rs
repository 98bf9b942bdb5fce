//! Fault injection, for tests only (feature `fault-injection`): a commit made to
//! fail for real, by killing its connection server-side just before `COMMIT`.

use mysql_async::Conn;

use super::session::Deadline;
use super::transaction::{CommitPoint, Txn};
use super::{Inner, Store, StoreError};

/// A failure [`Store::inject`] can arm (feature `fault-injection`, for tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first commit of a write (the follower's shard, or the only one) fails.
    KillFirstCommit,
    /// The second commit of a two-shard write (the followed user's shard) fails.
    KillSecondCommit,
}

impl Store {
    /// Arms a one-shot fault: the next write that reaches the named commit has that
    /// commit fail for real (its connection is killed server-side with
    /// `KILL CONNECTION` just before `COMMIT` is sent). A write that touches only one
    /// shard has no second commit and leaves [`Fault::KillSecondCommit`] armed.
    pub fn inject(&self, fault: Fault) {
        *self.inner.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(fault);
    }
}

impl Inner {
    pub(super) async fn fire_fault(
        &self,
        d: Deadline,
        t: &Txn<'_>,
        point: CommitPoint,
    ) -> Result<(), StoreError> {
        let wanted = match point {
            CommitPoint::First => Fault::KillFirstCommit,
            CommitPoint::Second => Fault::KillSecondCommit,
        };
        let fired = self
            .fault
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_if(|f| *f == wanted)
            .is_some();
        if !fired {
            return Ok(());
        }
        // A connection outside the pool, so a pool of one cannot deadlock on it.
        let url = self.map.host(t.shard).url();
        let opts = mysql_async::Opts::from_url(url).expect("ShardMap validated the URL");
        let mut killer = self
            .run(d, t.shard, "connect (fault injection)", Conn::new(opts))
            .await?;
        // KILL cannot take a bound parameter; the id is the driver's own u32.
        let kill = format!("KILL CONNECTION {}", t.tx.id());
        self.query_drop(d, t.shard, &mut killer, "kill (fault injection)", kill)
            .await?;
        let _ = killer.disconnect().await;
        Ok(())
    }
}
