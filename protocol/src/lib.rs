//! Wire formats shared by the relcache server and its clients.
//!
//! - [`resp`]: RESP2 and RESP3 frames — the reply value type, its encoder, and the
//!   incremental, size-limited parsers for requests (server side) and replies
//!   (client side).
//! - [`idset`]: the idset table, the fixed-length open-addressing array of `u64` ids
//!   that a relation service builds and stores with one SET (see `FORMAT.md`).
//! - [`dump`]: the DUMP / RESTORE payload of one value (see `DUMP.md`).
//! - [`slot`]: Redis Cluster's key → hash slot mapping (CRC16, hash tags).
//! - [`snapshot`]: the snapshot file SAVE writes and a restart loads (see
//!   `SNAPSHOT.md`).
//!
//! This crate knows nothing of sockets or async runtimes: everything here works on
//! byte slices and `bytes` buffers, so it can be fuzzed and property-tested alone.

pub mod dump;
pub mod idset;
pub mod resp;
pub mod slot;
pub mod snapshot;
