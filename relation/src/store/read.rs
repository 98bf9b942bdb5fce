//! Reads: whole sets (what a cache miss loads), membership, relation, pages, counts.
//!
//! Every read is one statement on one shard, except the batch forms, which send one
//! statement per shard involved (concurrently). None takes a lock or opens a
//! transaction: each statement is its own consistent snapshot.
//!
//! Lists of the *followed* users come from `following`, the truth. Lists of
//! *followers* and "does b follow a" in [`Store::relation`] come from `followers`,
//! the twin on a's own shard, so they cost one shard instead of one per follower;
//! a twin whose commit failed is missing there until the repair job restores it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use mysql_async::{Params, Value};

use super::{Store, StoreError, Table};

/// The largest page [`Store::following_page`] returns; larger limits are clamped.
pub const MAX_PAGE: u32 = 1000;

/// Most ids bound in one `IN (…)` list; longer batches are split.
const MAX_IN: usize = 1024;

/// How two users relate, seen from the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Relation {
    /// Neither follows the other.
    None,
    /// The first follows the second, not back.
    Following,
    /// The second follows the first, not back.
    FollowedBy,
    /// Each follows the other.
    Mutual,
}

impl Relation {
    fn from_flags(following: bool, followed_by: bool) -> Relation {
        match (following, followed_by) {
            (false, false) => Relation::None,
            (true, false) => Relation::Following,
            (false, true) => Relation::FollowedBy,
            (true, true) => Relation::Mutual,
        }
    }
}

/// A user's whole following set as one snapshot of MySQL saw it: see
/// [`Store::following_snapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowingSnapshot {
    /// Everyone the user follows, in no particular order.
    pub ids: Vec<u64>,
    /// The newest change to the set the snapshot includes (`relation_log.seq`);
    /// 0 if none is logged.
    pub seq: u64,
}

/// One user in a list page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The other user.
    pub id: u64,
    /// When the follow happened (`auto_ts`, µs since the Unix epoch).
    pub since: u64,
    /// Whether the two follow each other (the stored flag).
    pub mutual: bool,
}

/// One page of a list, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// At most the requested limit.
    pub entries: Vec<Entry>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// A position in a newest-first list: the last entry returned, so the next page is
/// everything strictly older in `(auto_ts, id)` order. Keyset paging (no `OFFSET`)
/// costs the same on page 1000 as on page 1, and follows or unfollows between pages
/// neither repeat nor skip the entries that remain.
///
/// Opaque to API clients: [`Display`](fmt::Display) gives a 33-character string and
/// [`FromStr`] reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    auto_ts: u64,
    id: u64,
}

/// The version character that starts an encoded [`Cursor`].
const CURSOR_VERSION: char = '1';

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CURSOR_VERSION}{:016x}{:016x}", self.auto_ts, self.id)
    }
}

/// A string that is not an encoded [`Cursor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor")]
pub struct CursorError;

impl FromStr for Cursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix(CURSOR_VERSION).ok_or(CursorError)?;
        if rest.len() != 32 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CursorError);
        }
        let hex = |t: &str| u64::from_str_radix(t, 16).map_err(|_| CursorError);
        Ok(Cursor {
            auto_ts: hex(&rest[..16])?,
            id: hex(&rest[16..])?,
        })
    }
}

/// `?,?,…` for `n` values, and the values padded by repeating the last one up to
/// the next power of two. Padding keeps the number of distinct statement texts (each
/// a prepared statement per connection) logarithmic in the batch size; a repeated
/// value in an `IN` list changes nothing.
pub(crate) fn in_list(values: impl IntoIterator<Item = Value>) -> (String, Vec<Value>) {
    let mut values: Vec<Value> = values.into_iter().collect();
    let padded = values.len().next_power_of_two();
    if let Some(last) = values.last().cloned() {
        values.resize(padded, last);
    }
    let marks = vec!["?"; values.len()].join(",");
    (marks, values)
}

impl Store {
    /// Every user `user` follows, in id order: one query, the whole set. This is
    /// what the relation service loads into the cache on a miss.
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `user`'s shard.
    pub async fn following_ids(&self, user: u64) -> Result<Vec<u64>, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(user);
        let sql = format!(
            "SELECT friend_id FROM {} WHERE user_id = ?",
            inner.table(shard, Table::Following)
        );
        inner.read(d, shard, "read following", sql, (user,)).await
    }

    /// [`following_ids`](Self::following_ids) for many users: one query per shard
    /// involved (`IN (…)`, split past 1024 users), run concurrently. Every requested
    /// user is a key of the answer, with an empty list if they follow nobody.
    ///
    /// # Errors
    ///
    /// The first [`StoreError`] from any shard; then nothing is returned.
    pub async fn following_ids_many(
        &self,
        users: &[u64],
    ) -> Result<HashMap<u64, Vec<u64>>, StoreError> {
        Ok(self
            .following_snapshots(users)
            .await?
            .into_iter()
            .map(|(user, s)| (user, s.ids))
            .collect())
    }

    /// Everyone `user` follows, and the sequence number of the newest change to
    /// that set the answer includes: what a cache fill stores (`IDSET.LOAD … SEQ`).
    /// One statement, so the ids and the number come from one snapshot.
    ///
    /// The number is the largest `relation_log.seq` of `user`'s changes, which
    /// orders the changes to one pair as they committed: a follow and an unfollow
    /// of one pair serialise on the pair's locks and each writes its log row last,
    /// under them. Changes to different pairs may take their numbers in another
    /// order than they commit, but they touch different ids and commute. So the
    /// cache applies a write-through only if it is newer than what the set
    /// reflects, and drops the set if it is older (see the server's IDSET docs);
    /// the answer here is never older than a change it includes.
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `user`'s shard.
    pub async fn following_snapshot(&self, user: u64) -> Result<FollowingSnapshot, StoreError> {
        let mut all = self.following_snapshots(&[user]).await?;
        Ok(all.remove(&user).unwrap_or_default())
    }

    /// [`following_snapshot`](Self::following_snapshot) for many users, batched
    /// as [`following_ids_many`](Self::following_ids_many).
    ///
    /// # Errors
    ///
    /// The first [`StoreError`] from any shard; then nothing is returned.
    pub async fn following_snapshots(
        &self,
        users: &[u64],
    ) -> Result<HashMap<u64, FollowingSnapshot>, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let mut by_shard: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut out: HashMap<u64, FollowingSnapshot> = HashMap::with_capacity(users.len());
        for &u in users {
            if out.insert(u, FollowingSnapshot::default()).is_none() {
                by_shard.entry(inner.map().shard_of(u)).or_default().push(u);
            }
        }
        // Statements are built first, so the futures below borrow nothing but the
        // store: a closure over borrowed map entries would make the whole call's
        // future fail `Send` checks "for all lifetimes" once spawned.
        let mut statements = Vec::new();
        for (&shard, users) in &by_shard {
            for chunk in users.chunks(MAX_IN) {
                let (marks, values) = in_list(chunk.iter().map(|&u| Value::from(u)));
                // Rows of kind 0 are follows; one row of kind 1 per user with any
                // logged change carries the newest change's number.
                let sql = format!(
                    "SELECT 0, user_id, friend_id FROM {} WHERE user_id IN ({marks}) \
                     UNION ALL \
                     SELECT 1, user_id, MAX(seq) FROM {} WHERE user_id IN ({marks}) \
                     GROUP BY user_id",
                    inner.table(shard, Table::Following),
                    inner.table(shard, Table::RelationLog),
                );
                let params: Vec<Value> = values.iter().chain(&values).cloned().collect();
                statements.push((shard, sql, params));
            }
        }
        let queries = statements.into_iter().map(|(shard, sql, params)| {
            inner.read::<(u8, u64, u64)>(
                d,
                shard,
                "read following (snapshot)",
                sql,
                Params::Positional(params),
            )
        });
        for rows in inner.concurrently(queries).await? {
            for (kind, user, value) in rows {
                let snapshot = out.entry(user).or_default();
                match kind {
                    0 => snapshot.ids.push(value),
                    _ => snapshot.seq = value,
                }
            }
        }
        Ok(out)
    }

    /// Waits until no transaction holds a write lock on the pair's truth row,
    /// `following(a, b)`: a follow or unfollow of the pair whose `COMMIT` is in
    /// doubt has then landed or rolled back. A locking read in share mode queues
    /// behind the writer's lock and takes none that outlives the statement.
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `a`'s shard; a lock wait that ran out is
    /// [retryable](StoreError::is_retryable).
    pub async fn await_settled(&self, a: u64, b: u64) -> Result<(), StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(a);
        let sql = format!(
            "SELECT 1 FROM {} WHERE user_id = ? AND friend_id = ? LOCK IN SHARE MODE",
            inner.table(shard, Table::Following)
        );
        let _: Vec<u8> = inner.read(d, shard, "await commit", sql, (a, b)).await?;
        Ok(())
    }

    /// Whether `a` follows `b`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `a`'s shard.
    pub async fn is_following(&self, a: u64, b: u64) -> Result<bool, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(a);
        let sql = format!(
            "SELECT 1 FROM {} WHERE user_id = ? AND friend_id = ?",
            inner.table(shard, Table::Following)
        );
        let rows: Vec<u8> = inner.read(d, shard, "read following", sql, (a, b)).await?;
        Ok(!rows.is_empty())
    }

    /// For each of `candidates`, whether `a` follows them, in the same order: one
    /// query (split past 1024 candidates).
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `a`'s shard.
    pub async fn which_followed(
        &self,
        a: u64,
        candidates: &[u64],
    ) -> Result<Vec<bool>, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(a);
        let mut found = std::collections::HashSet::new();
        for chunk in candidates.chunks(MAX_IN) {
            let (marks, values) = in_list(chunk.iter().map(|&b| Value::from(b)));
            let sql = format!(
                "SELECT friend_id FROM {} WHERE user_id = ? AND friend_id IN ({marks})",
                inner.table(shard, Table::Following)
            );
            let mut params = vec![Value::from(a)];
            params.extend(values);
            let rows: Vec<u64> = inner
                .read(
                    d,
                    shard,
                    "read following (batch)",
                    sql,
                    Params::Positional(params),
                )
                .await?;
            found.extend(rows);
        }
        Ok(candidates.iter().map(|b| found.contains(b)).collect())
    }

    /// How `a` and `b` relate, from one query on `a`'s shard (`following(a, b)` and
    /// the twin `followers(a, b)`, "b follows a").
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `a`'s shard.
    pub async fn relation(&self, a: u64, b: u64) -> Result<Relation, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(a);
        let sql = format!(
            "SELECT EXISTS(SELECT 1 FROM {} WHERE user_id = ? AND friend_id = ?), \
                    EXISTS(SELECT 1 FROM {} WHERE user_id = ? AND friend_id = ?)",
            inner.table(shard, Table::Following),
            inner.table(shard, Table::Followers),
        );
        let rows: Vec<(bool, bool)> = inner
            .read(d, shard, "read relation", sql, (a, b, a, b))
            .await?;
        let (following, followed_by) = rows.first().copied().unwrap_or_default();
        Ok(Relation::from_flags(following, followed_by))
    }

    /// The users `user` follows, newest first, `limit` (clamped to `1..=MAX_PAGE`)
    /// at a time, starting after `cursor` (`None`: from the newest).
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `user`'s shard.
    pub async fn following_page(
        &self,
        user: u64,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<Page, StoreError> {
        self.page(Table::Following, user, cursor, limit).await
    }

    /// The users who follow `user`, newest first; as
    /// [`following_page`](Self::following_page).
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `user`'s shard.
    pub async fn followers_page(
        &self,
        user: u64,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<Page, StoreError> {
        self.page(Table::Followers, user, cursor, limit).await
    }

    async fn page(
        &self,
        table: Table,
        user: u64,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<Page, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(user);
        let limit = limit.clamp(1, MAX_PAGE);
        let t = inner.table(shard, table);
        // One row more than asked says whether there is a next page, so the last page
        // is known to be last without a further, empty request. The by_time index
        // (user_id, auto_ts, friend_id) serves both forms as a backward range scan.
        let fetch = u64::from(limit) + 1;
        let rows: Vec<(u64, u64, bool)> = match cursor {
            None => {
                let sql = format!(
                    "SELECT friend_id, auto_ts, mutual FROM {t} WHERE user_id = ? \
                     ORDER BY auto_ts DESC, friend_id DESC LIMIT ?"
                );
                inner
                    .read(d, shard, "read page", sql, (user, fetch))
                    .await?
            }
            Some(c) => {
                let sql = format!(
                    "SELECT friend_id, auto_ts, mutual FROM {t} WHERE user_id = ? \
                     AND (auto_ts < ? OR (auto_ts = ? AND friend_id < ?)) \
                     ORDER BY auto_ts DESC, friend_id DESC LIMIT ?"
                );
                let params = (user, c.auto_ts, c.auto_ts, c.id, fetch);
                inner.read(d, shard, "read page", sql, params).await?
            }
        };
        let mut entries: Vec<Entry> = rows
            .into_iter()
            .map(|(id, since, mutual)| Entry { id, since, mutual })
            .collect();
        let next = if entries.len() > limit as usize {
            entries.truncate(limit as usize);
            entries.last().map(|e| Cursor {
                auto_ts: e.since,
                id: e.id,
            })
        } else {
            None
        };
        Ok(Page { entries, next })
    }

    /// How many users `user` follows.
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `user`'s shard.
    pub async fn following_count(&self, user: u64) -> Result<u64, StoreError> {
        self.count(Table::Following, user).await
    }

    /// How many users follow `user` (from the twins on `user`'s shard).
    ///
    /// # Errors
    ///
    /// [`StoreError`] naming `user`'s shard.
    pub async fn followers_count(&self, user: u64) -> Result<u64, StoreError> {
        self.count(Table::Followers, user).await
    }

    /// `COUNT(*)` over the user's index range: linear in the list, fine for the
    /// thousands a typical user has. Very large accounts would want a counter table.
    async fn count(&self, table: Table, user: u64) -> Result<u64, StoreError> {
        let inner = self.inner();
        let d = inner.deadline();
        let shard = inner.map().shard_of(user);
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE user_id = ?",
            inner.table(shard, table)
        );
        let rows: Vec<u64> = inner.read(d, shard, "count", sql, (user,)).await?;
        Ok(rows.first().copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips() {
        for c in [
            Cursor { auto_ts: 0, id: 0 },
            Cursor {
                auto_ts: 1_700_000_000_123_456,
                id: u64::MAX,
            },
        ] {
            let s = c.to_string();
            assert_eq!(s.len(), 33);
            assert_eq!(s.parse::<Cursor>(), Ok(c));
        }
        for bad in [
            "",
            "1",
            "2000000000000000000000000000000000",
            "1zz",
            "1+000000000000000000000000000000f",
        ] {
            assert_eq!(bad.parse::<Cursor>(), Err(CursorError), "{bad:?}");
        }
    }

    #[test]
    fn in_list_pads_to_power_of_two() {
        let (marks, values) = in_list([1u64, 2, 3].map(Value::from));
        assert_eq!(marks, "?,?,?,?");
        assert_eq!(values, [1u64, 2, 3, 3].map(Value::from));
        let (marks, values) = in_list([7u64].map(Value::from));
        assert_eq!((marks.as_str(), values.len()), ("?", 1));
    }
}
