//! The server's shared state: what every connection, command and background task
//! reaches through one `Arc<Server>`.
//!
//! It knows nothing of sockets or tasks, so command families can depend on it
//! without depending on the connection loop; serving ([`crate::listen`]) and the
//! background loop ([`crate::cron`]) are built on it, not in it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

use parking_lot::Mutex;
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
    pub over_limit: OverLimit,
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
    /// The client loops as INFO loops shows them: the connections on each and
    /// how many take connections now; set once the loops start.
    pub loops: OnceLock<crate::loops::View>,
}

/// How far a command goes to bring memory back under `maxmemory`
/// ([`Server::make_room`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Room {
    /// It may add this many bytes: evict until they fit, or refuse it with OOM.
    For(usize),
    /// It adds nothing: evict for at most `maxmemory-eviction-tenacity`'s time
    /// (`Config::eviction_slice_ns`, 500 µs by default; the clock is looked at
    /// every [`EVICT_BETWEEN_CLOCKS`] keys), as Redis bounds each command's
    /// eviction, and go on; the background loop evicts the rest
    /// (`crate::cron`). Before, every command, a PING among them, evicted until
    /// under: a PING waited 2.4 s while CONFIG SET maxmemory evicted 1M keys,
    /// evicting beside it.
    Moment,
    /// The background loop's eviction between commands: a [`Room::Moment`]
    /// that also ends within this many nanoseconds (the loop's next round),
    /// counted apart.
    Background(u64),
    /// Evict until under, refusing nothing: CONFIG SET maxmemory, which asked,
    /// and a command that refuses by itself if memory stays over (a script's
    /// first write, a lease granted on a miss), which must not be refused for
    /// memory a longer eviction would have made.
    All,
}

/// Where an eviction ([`Server::evict`]) left memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Evicted {
    /// Under the limit, with room for what the command brings.
    Under,
    /// Still over: the eviction's time ran out, or what is being freed was not
    /// waited for.
    Paused,
    /// Still over, with no key the policy may evict.
    Stuck,
}

/// Since when memory has stayed over `maxmemory` after evicting, and for how
/// long in all (INFO's `current_eviction_exceeded_time` and
/// `total_eviction_exceeded_time`): a limit that evictions keep failing to meet
/// shows here, as in Redis.
#[derive(Default)]
pub struct OverLimit {
    /// The counter's ticks when memory was last found over after evicting; 0
    /// while under. Kept apart so that a command under the limit looks at it
    /// without the lock.
    since: AtomicU64,
    /// Nanoseconds of the ended spells over the limit; changes of `since` are
    /// made under it too.
    total_ns: Mutex<u64>,
}

impl OverLimit {
    fn begin(&self) {
        if self.since.load(Relaxed) == 0 {
            let _total = self.total_ns.lock();
            if self.since.load(Relaxed) == 0 {
                self.since.store(Stamp::now().ticks().max(1), Relaxed);
            }
        }
    }

    /// One relaxed load on every command while under.
    fn end(&self) {
        if self.since.load(Relaxed) != 0 {
            let mut total = self.total_ns.lock();
            let since = self.since.swap(0, Relaxed);
            if since != 0 {
                *total += Stamp::from_ticks(since).elapsed_ns();
            }
        }
    }

    /// CONFIG RESETSTAT: a spell going on counts from now.
    pub fn reset(&self) {
        let mut total = self.total_ns.lock();
        *total = 0;
        if self.since.load(Relaxed) != 0 {
            self.since.store(Stamp::now().ticks().max(1), Relaxed);
        }
    }

    /// How long the spell going on now has lasted (0 if under), and the
    /// spells' total including it, in milliseconds.
    pub fn millis(&self) -> (u64, u64) {
        let total = self.total_ns.lock();
        let since = self.since.load(Relaxed);
        let now = if since == 0 {
            0
        } else {
            Stamp::from_ticks(since).elapsed_ns()
        };
        (now / 1_000_000, (*total + now) / 1_000_000)
    }
}

/// How many keys a bounded eviction takes between looks at the time, as
/// Redis's: `maxmemory-eviction-tenacity 0` evicts this many a command.
const EVICT_BETWEEN_CLOCKS: u32 = 16;

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
            over_limit: OverLimit::default(),
            shutdown,
            started: Instant::now(),
            run_id,
            local_addr,
            startup_memory: crate::alloc::allocated().unwrap_or(0),
            persist: crate::persist::State::default(),
            cluster: crate::cluster::Cluster::default(),
            loops: OnceLock::new(),
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
    /// only read or delete always proceed, told where memory was left.
    pub fn make_room(&self, room: Room) -> Result<Evicted, CmdError> {
        match (self.evict(room).0, room) {
            (Evicted::Paused | Evicted::Stuck, Room::For(_)) => Err(CmdError::Oom),
            (ended, _) => Ok(ended),
        }
    }

    /// Evicts by the configured policy as `room` asks: where that left memory,
    /// and how many keys it took. Used before commands ([`Server::make_room`])
    /// and, for memory left over the limit with no command coming, by the
    /// background loop.
    pub fn evict(&self, room: Room) -> (Evicted, u64) {
        let max = self.config.maxmemory.load(Relaxed) as usize;
        let incoming = match room {
            Room::For(bytes) => bytes,
            Room::Moment | Room::Background(_) | Room::All => 0,
        };
        let fits = || self.data_memory() + incoming <= max;
        if max == 0 || fits() {
            self.over_limit.end();
            return (Evicted::Under, 0);
        }
        let policy = self.config.policy();
        let samples = self.config.maxmemory_samples.load(Relaxed) as usize;
        // What is still being freed (a FLUSHALL ASYNC's keyspace, UNLINKed or
        // expired values, before or during the eviction) is waited for, off the
        // worker, before another key goes or the write is refused with OOM: the
        // keys written since are not evicted for memory that is coming back.
        // (Redis evicts on and waits for its lazy frees only once it has nothing
        // left to evict.) A bounded eviction waits for nothing: it stops.
        // A limit lowered under a full keyspace evicts a million keys in one
        // call (CONFIG SET maxmemory held its loop's other clients for 3.3 s):
        // past a millisecond, the loop goes on without this client.
        let mut aside = crate::offload::StepAside::start();
        let slice = match room {
            Room::Moment => Some(self.config.eviction_slice_ns()),
            Room::Background(within) => Some(self.config.eviction_slice_ns().min(within)),
            Room::For(_) | Room::All => None,
        };
        let started = Stamp::now();
        let mut tries = 0u32;
        let over = || {
            if let Some(slice) = slice {
                // After every EVICT_BETWEEN_CLOCKS keys (or rounds that found none).
                tries += 1;
                if tries > EVICT_BETWEEN_CLOCKS
                    && tries % EVICT_BETWEEN_CLOCKS == 1
                    && started.elapsed_ns() >= slice
                {
                    return false;
                }
            }
            aside.check();
            if fits() {
                return false;
            }
            if crate::offload::pending_frees() > 0 {
                if slice.is_some() {
                    return false;
                }
                crate::offload::offload(crate::offload::wait_freed);
            }
            !fits()
        };
        let (evicted, stuck) = self.evictor.evict(&self.db, policy, samples, over, |key| {
            crate::notify::event(self, crate::notify::EVICTED, "evicted", key)
        });
        if evicted > 0 {
            // The part first, so that INFO never shows more evicted by
            // commands than were.
            if matches!(room, Room::Background(_)) {
                self.stats.evicted_keys_background.add(evicted);
            }
            self.stats.evicted_keys.add(evicted);
        }
        // An unbounded eviction ends only under the limit or stuck: what other
        // threads allocate after it does not turn its success into a refusal.
        // Under `noeviction` memory over is stuck whatever is being freed, as
        // Redis's eviction fails there.
        let stuck = stuck || (policy == crate::config::EvictionPolicy::NoEviction && !fits());
        let ended = if stuck {
            Evicted::Stuck
        } else if slice.is_none() || fits() {
            Evicted::Under
        } else {
            Evicted::Paused
        };
        match ended {
            Evicted::Under => self.over_limit.end(),
            _ => self.over_limit.begin(),
        }
        (ended, evicted)
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
