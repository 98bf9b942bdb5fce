//! The server's shared state: what every connection, command and background task
//! reaches through one `Arc<Server>`.
//!
//! It knows nothing of sockets or tasks, so command families can depend on it
//! without depending on the connection loop; serving ([`crate::listen`]) and the
//! background loop ([`crate::cron`]) are built on it, not in it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::clock::Stamp;
use crate::cmd::registry;
use crate::config::Config;
use crate::db::evict::Evictor;
use crate::db::{Db, View};
use crate::error::CmdError;
use crate::session::Clients;
use crate::stats::{CommandStats, Stats};

/// Everything connections share.
pub struct Server {
    pub db: Db,
    pub config: Config,
    pub stats: Stats,
    /// Slow log, latency events and histograms, error codes, rates, monitors.
    pub observe: crate::observe::Observe,
    /// Per command and subcommand, indexed like `cmd::registry().all`.
    pub cmdstats: Vec<CommandStats>,
    pub clients: Clients,
    /// Channels and patterns, and their subscribers.
    pub pubsub: crate::pubsub::PubSub,
    /// Clients that track keys for client-side caching (CLIENT TRACKING).
    pub tracking: crate::tracking::Registry,
    /// The Lua script cache and the scripts running now.
    pub scripts: crate::script::Scripts,
    pub evictor: Evictor,
    /// Cancelled to shut down: by the caller of [`crate::run`], or by SHUTDOWN.
    pub shutdown: CancellationToken,
    pub started: Instant,
    pub run_id: String,
    pub local_addr: SocketAddr,
    /// `used_memory` once the server was set up, before any client (INFO's
    /// `used_memory_startup`).
    pub startup_memory: usize,
    /// Snapshots: save state, load state, INFO persistence counters.
    pub persist: crate::persist::State,
    /// Cluster mode: this node's view of the cluster (inert when disabled).
    pub cluster: crate::cluster::Cluster,
    /// The connections living on each client loop now, by loop (INFO loops);
    /// set once the loops start.
    pub loop_connections: OnceLock<Box<[Arc<AtomicUsize>]>>,
}

/// How far a command goes to bring memory back under `maxmemory`
/// ([`Server::make_room`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Room {
    /// It may add this many bytes: evict until they fit, or refuse it with OOM.
    For(usize),
    /// It adds nothing: evict for at most [`EVICT_MOMENT_NS`], as Redis bounds
    /// each command's eviction in time, and go on. A limit lowered under a
    /// full keyspace is thus worked off a millisecond a command, where every
    /// command, a PING among them, evicted until under: a PING waited 2.4 s
    /// while CONFIG SET maxmemory evicted 1M keys, evicting beside it.
    Moment,
    /// Evict until under, refusing nothing: CONFIG SET maxmemory, which asked,
    /// and a command that refuses by itself if memory stays over (a script's
    /// first write, a lease granted on a miss), which must not be refused for
    /// memory a longer eviction would have made.
    All,
}

/// The most time a command that adds nothing spends evicting ([`Room::Moment`]).
const EVICT_MOMENT_NS: u64 = 1_000_000;

impl Server {
    pub fn new(config: Config, local_addr: SocketAddr, shutdown: CancellationToken) -> Server {
        let run_id: String = {
            use rand::Rng;
            let mut rng = rand::thread_rng();
            (0..40)
                .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap())
                .collect()
        };
        Server {
            // In cluster mode a slot's keys share a shard (see `db::Placement`).
            db: Db::placed(
                if config
                    .cluster_enabled
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    crate::db::Placement::BySlot
                } else {
                    crate::db::Placement::Hash
                },
            ),
            config,
            stats: Stats::default(),
            observe: crate::observe::Observe::default(),
            cmdstats: registry()
                .all
                .iter()
                .map(|_| CommandStats::default())
                .collect(),
            clients: Clients::default(),
            pubsub: crate::pubsub::PubSub::default(),
            tracking: crate::tracking::Registry::default(),
            scripts: crate::script::Scripts::default(),
            evictor: Evictor::default(),
            shutdown,
            started: Instant::now(),
            run_id,
            local_addr,
            startup_memory: crate::alloc::allocated().unwrap_or(0),
            persist: crate::persist::State::default(),
            cluster: crate::cluster::Cluster::default(),
            loop_connections: OnceLock::new(),
        }
    }

    /// Bytes in use as the maxmemory limit sees them: the counting allocator's live
    /// heap, or 0 where it is not installed (the limit is then not enforced).
    pub fn used_memory(&self) -> usize {
        crate::alloc::allocated().unwrap_or(0)
    }

    /// What `maxmemory` is compared with: used memory less what clients hold
    /// (their buffers and connection state, `crate::client_memory`), so idle
    /// connections and a request still arriving never evict data. A request's
    /// bytes count once a command has stored them.
    pub fn data_memory(&self) -> usize {
        self.used_memory()
            .saturating_sub(self.clients.memory() as usize)
    }

    /// Makes room under `maxmemory` as `room` asks, evicting by the configured
    /// policy. Called before the command takes any lock. `Err(Oom)` when memory
    /// stays over the limit for a command that would add data; commands that
    /// only read or delete always proceed.
    pub fn make_room(&self, room: Room) -> Result<(), CmdError> {
        let max = self.config.maxmemory.load(Relaxed) as usize;
        let (incoming, denyoom) = match room {
            Room::For(bytes) => (bytes, true),
            Room::Moment | Room::All => (0, false),
        };
        if max == 0 || self.data_memory() + incoming <= max {
            return Ok(());
        }
        let policy = self.config.policy();
        let samples = self.config.maxmemory_samples.load(Relaxed) as usize;
        // What is still being freed (a FLUSHALL ASYNC's keyspace, UNLINKed or
        // expired values, before or during the eviction) is waited for, off the
        // worker, before another key goes or the write is refused with OOM: the
        // keys written since are not evicted for memory that is coming back
        // (Redis's eviction also waits for its lazy-free jobs).
        // A limit lowered under a full keyspace evicts a million keys in one
        // call (CONFIG SET maxmemory held its loop's other clients for 3.3 s):
        // past a millisecond, the loop goes on without this client.
        let mut aside = crate::offload::StepAside::start();
        let started = Stamp::now();
        let over = || {
            if room == Room::Moment && started.elapsed_ns() >= EVICT_MOMENT_NS {
                return false;
            }
            aside.check();
            if self.data_memory() + incoming <= max {
                return false;
            }
            if crate::offload::pending_frees() > 0 {
                // A command that adds nothing does not wait for it either.
                if room == Room::Moment {
                    return false;
                }
                crate::offload::offload(crate::offload::wait_freed);
            }
            self.data_memory() + incoming > max
        };
        let (evicted, still_over) = self.evictor.evict(&self.db, policy, samples, over, |key| {
            crate::notify::event(self, crate::notify::EVICTED, "evicted", key)
        });
        if evicted > 0 {
            self.stats.evicted_keys.add(evicted);
        }
        if still_over && denyoom {
            return Err(CmdError::Oom);
        }
        Ok(())
    }

    /// Whether data memory is over `maxmemory` now (never without a limit).
    pub fn over_maxmemory(&self) -> bool {
        let max = self.config.maxmemory.load(Relaxed) as usize;
        max > 0 && self.data_memory() > max
    }

    /// Adds what a command's view counted (hits, misses, lazily expired keys).
    pub fn absorb_view_stats(&self, v: &View<'_>) {
        let (hits, misses) = v.hits_misses();
        if hits > 0 {
            self.stats.keyspace_hits.add(hits);
        }
        if misses > 0 {
            self.stats.keyspace_misses.add(misses);
        }
        if v.expired > 0 {
            self.stats.expired_keys.add(v.expired);
        }
        if !v.expired_keys.is_empty() {
            let keys = v.expired_keys.iter().map(|k| &k[..]);
            crate::notify::events(self, crate::notify::EXPIRED, "expired", keys);
        }
    }
}
