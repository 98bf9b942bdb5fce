//! The tables on every logical shard, and the function that creates them.
//!
//! Each logical shard is one database holding four tables:
//!
//! - `following(user_id, friend_id, mutual, auto_ts)`: "user follows friend", on the
//!   follower's shard. The truth: written first, and what the repair job trusts.
//! - `followers(user_id, friend_id, mutual, auto_ts)`: "user is followed by friend",
//!   on the followed user's shard: the twin of `following(friend_id, user_id)`, so a
//!   user's followers are one index range on one shard.
//! - `relation_log(seq, user_id, friend_id, op, ts)`: one row per follow (`F`) or
//!   unfollow (`U`), on the follower's shard, written in the same transaction as the
//!   `following` change. The repair job's recent mode reads it to re-check just the
//!   pairs written lately; old rows are pruned. `seq` also numbers a user's changes
//!   in commit order for the cache (see `Store::following_snapshot`), which needs an
//!   `AUTO_INCREMENT` that survives a restart (MariaDB 10.2.4+, MySQL 8.0+).
//! - `repair_state`: the full scan's checkpoint, per shard, so a stopped scan resumes.
//!
//! `auto_ts` is the follow time in microseconds since the Unix epoch, chosen by the
//! tier (not `CURRENT_TIMESTAMP`) so that both twins carry the same value, which
//! keyset paging on `(auto_ts, friend_id)` and the repair job's comparisons rely on.
//!
//! Creation is idempotent (`IF NOT EXISTS` throughout) and never alters an existing
//! table: schema changes are a migration, not this function's business.

use super::store::{Store, StoreError, Table};

/// The `CREATE TABLE` statements for one shard, in `{table}` form.
const TABLES: [(Table, &str); 4] = [
    (
        Table::Following,
        "CREATE TABLE IF NOT EXISTS {table} (
            user_id   BIGINT UNSIGNED NOT NULL,
            friend_id BIGINT UNSIGNED NOT NULL,
            mutual    TINYINT NOT NULL DEFAULT 0,
            auto_ts   BIGINT UNSIGNED NOT NULL COMMENT 'follow time, µs since epoch, set by the tier so both twins carry the same value',
            PRIMARY KEY (user_id, friend_id),
            KEY by_time (user_id, auto_ts, friend_id)
        ) ENGINE=InnoDB",
    ),
    (
        Table::Followers,
        "CREATE TABLE IF NOT EXISTS {table} (
            user_id   BIGINT UNSIGNED NOT NULL COMMENT 'the followed user',
            friend_id BIGINT UNSIGNED NOT NULL COMMENT 'the follower',
            mutual    TINYINT NOT NULL DEFAULT 0,
            auto_ts   BIGINT UNSIGNED NOT NULL COMMENT 'equal to the twin following row''s',
            PRIMARY KEY (user_id, friend_id),
            KEY by_time (user_id, auto_ts, friend_id)
        ) ENGINE=InnoDB",
    ),
    (
        Table::RelationLog,
        "CREATE TABLE IF NOT EXISTS {table} (
            seq       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
            user_id   BIGINT UNSIGNED NOT NULL COMMENT 'the follower',
            friend_id BIGINT UNSIGNED NOT NULL,
            op        CHAR(1) CHARACTER SET ascii NOT NULL COMMENT 'F follow, U unfollow',
            ts        BIGINT UNSIGNED NOT NULL COMMENT 'µs since epoch',
            KEY by_ts (ts),
            KEY by_user (user_id, seq)
        ) ENGINE=InnoDB",
    ),
    (
        Table::RepairState,
        "CREATE TABLE IF NOT EXISTS {table} (
            job          VARCHAR(32) CHARACTER SET ascii NOT NULL PRIMARY KEY,
            phase        TINYINT UNSIGNED NOT NULL COMMENT '0 following, 1 followers, 2 done',
            after_user   BIGINT UNSIGNED NULL COMMENT 'last key scanned; NULL: from the start',
            after_friend BIGINT UNSIGNED NULL,
            updated_at   BIGINT UNSIGNED NOT NULL COMMENT 'µs since epoch'
        ) ENGINE=InnoDB",
    ),
];

/// Creates every logical shard's database and tables, where missing. Safe to run
/// any number of times, and concurrently with traffic.
///
/// # Errors
///
/// The first [`StoreError`]; shards before it are done, and running it again
/// completes the rest.
pub async fn create_all(store: &Store) -> Result<(), StoreError> {
    let inner = store.inner();
    for shard in 0..inner.map().len() {
        let d = inner.deadline();
        let mut conn = inner.checkout(d, shard).await?;
        // Identifiers cannot be bound parameters; ShardMap only admits database names
        // made of [A-Za-z0-9_$], so splicing them in is safe.
        let create_db = format!(
            "CREATE DATABASE IF NOT EXISTS `{}`",
            inner.map().database(shard)
        );
        inner
            .query_drop(d, shard, &mut conn, "create database", create_db)
            .await?;
        for (table, ddl) in TABLES {
            let sql = ddl.replace("{table}", inner.table(shard, table));
            inner
                .query_drop(d, shard, &mut conn, "create table", sql)
                .await?;
        }
    }
    Ok(())
}
