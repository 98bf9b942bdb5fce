//! The relation tier: who follows whom, stored as twin rows on sharded MySQL (the
//! truth), with relcache in front.
//!
//! A crate of its own, over [`relcache_client`], so that a user of the RESP client
//! alone does not compile a MySQL driver.
//!
//! - [`shards`]: the shard map (logical shard → database → host) and the fixed hash
//!   that puts a user on a shard.
//! - [`schema`]: the tables every shard holds, and their creation.
//! - [`store`]: [`Store`], follow / unfollow with twin rows and mutual flags, and the
//!   reads a cache miss or an API page needs.
//! - [`repair`]: the job that finds half-committed follows and wrong mutual flags and
//!   fixes them, by full scan or from the recent-changes log.
//! - [`service`]: [`Relations`](service::Relations), what an application calls: the
//!   store behind the cache, filled under leases and written through.
//! - [`catchup`]: replays the changes a restarted cache missed while it was down.
//! - `guard`: the service's view of the cache's health and of the cached sets it
//!   may no longer trust.
//!
//! Only `service` and `catchup` talk to the cache; the rest is MySQL alone.

mod cache;
pub mod catchup;
mod guard;
pub mod repair;
pub mod schema;
pub mod service;
pub mod shards;
pub mod store;

pub use cache::Cache;
pub use shards::{ShardMap, ShardMapError};
#[cfg(feature = "fault-injection")]
pub use store::Fault;
pub use store::{
    Cursor, Entry, FollowOutcome, FollowingSnapshot, Page, Relation, Store, StoreConfig,
    StoreError, UnfollowOutcome,
};
