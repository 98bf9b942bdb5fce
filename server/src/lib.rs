//! relcache-server: an in-memory relation cache that speaks the Redis protocol.
//!
//! Layers, each in its own module: [`conn`] reads and writes sockets and parses
//! frames (with `relcache_protocol`); [`cmd`] turns requests into commands and runs
//! them, one family per file; [`db`] stores keys in independently locked shards.
//! The `relcache-server` binary (the root package's `src/main.rs`) only reads the
//! command line and calls [`run`], which tests and benches can call too.

pub mod alloc;
pub mod blocking;
pub mod cmd;
pub mod config;
pub mod conn;
mod cron;
pub mod db;
pub mod error;
pub mod glob;
pub mod listen;
pub mod observe;
pub mod offload;
pub mod server;
pub mod session;
pub mod stats;

pub use config::Config;
pub use listen::run;
pub use server::Server;

/// The Redis version relcache reports (HELLO, INFO): clients gate features on it,
/// and relcache implements the 7.2 command surface they expect.
pub const REDIS_VERSION: &str = "7.2.4";
/// relcache's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
