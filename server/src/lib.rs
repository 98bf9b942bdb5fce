//! relcache-server: an in-memory relation cache that speaks the Redis protocol.
//!
//! Layers, each in its own module: `conn` reads and writes sockets and parses
//! frames (with `relcache_protocol`); `cmd` turns requests into commands and runs
//! them, one family per file; `db` stores keys in independently locked shards.
//! The `relcache-server` binary (the root package's `src/main.rs`) only reads the
//! command line and calls [`run`]. `docs/ARCHITECTURE.md` walks a request through.

// Only what the binary needs is public, so the compiler reports dead code.
pub mod alloc;
mod blocking;
mod client_memory;
mod clock;
mod cluster;
mod cmd;
pub mod config;
mod conn;
mod cron;
mod db;
mod error;
mod evloop;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gather;
mod glob;
mod listen;
mod longdouble;
mod loops;
mod notify;
mod observe;
mod offload;
mod outbound;
mod output;
mod persist;
mod pubsub;
mod script;
mod server;
mod session;
mod spare;
mod stats;
mod tracking;

pub use config::Config;
pub use listen::run;

/// The Redis version relcache reports (HELLO, INFO, `redis.REDIS_VERSION`):
/// clients gate features on it, so it names the release whose changes to
/// relcache's command families are all implemented — 7.4's (README,
/// "Compatibility").
pub const REDIS_VERSION: &str = "7.4.0";
/// relcache's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
