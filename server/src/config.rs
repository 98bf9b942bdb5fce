//! Configuration: the command line, redis.conf-style files, and CONFIG GET/SET.
//!
//! Every parameter is one row of [`PARAMS`] with a Redis name, a parser, a printer
//! and its `--help` line, so the config file, the `--name value` flags (the binary
//! builds them from this table) and `CONFIG SET` all go through the same
//! validation. Values the hot path reads (limits, timeouts) live in atomics, so a
//! `CONFIG SET` takes effect for every connection without a lock on the read side.
//!
//! No parameter is accepted and then ignored: each one either acts, or refuses the
//! values relcache cannot honour (`appendonly yes`),
//! so a client that probes them learns the truth.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::RwLock;
use relcache_protocol::idset::Check;

use crate::glob;

/// What to do at `maxmemory` (`maxmemory-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    NoEviction,
    AllKeysLru,
    VolatileLru,
    AllKeysRandom,
    VolatileRandom,
    VolatileTtl,
}

impl EvictionPolicy {
    /// Every policy, in the order Redis lists them.
    pub const ALL: [EvictionPolicy; 6] = [
        EvictionPolicy::NoEviction,
        EvictionPolicy::AllKeysLru,
        EvictionPolicy::VolatileLru,
        EvictionPolicy::AllKeysRandom,
        EvictionPolicy::VolatileRandom,
        EvictionPolicy::VolatileTtl,
    ];

    /// The `maxmemory-policy` spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            EvictionPolicy::NoEviction => "noeviction",
            EvictionPolicy::AllKeysLru => "allkeys-lru",
            EvictionPolicy::VolatileLru => "volatile-lru",
            EvictionPolicy::AllKeysRandom => "allkeys-random",
            EvictionPolicy::VolatileRandom => "volatile-random",
            EvictionPolicy::VolatileTtl => "volatile-ttl",
        }
    }
}

impl FromStr for EvictionPolicy {
    type Err = String;

    /// Case-insensitive, as Redis reads enum values; the error is Redis's text.
    fn from_str(s: &str) -> Result<Self, String> {
        EvictionPolicy::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                "argument(s) must be one of the following: noeviction, allkeys-lru, volatile-lru, allkeys-random, volatile-random, volatile-ttl".into()
            })
    }
}

impl fmt::Display for EvictionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Redis's log levels (`loglevel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Verbose,
    Notice,
    Warning,
    Nothing,
}

impl LogLevel {
    const ALL: [LogLevel; 5] = [
        LogLevel::Debug,
        LogLevel::Verbose,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Nothing,
    ];

    /// The `loglevel` spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Verbose => "verbose",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Nothing => "nothing",
        }
    }

    /// The `tracing` filter directive that logs what this level logs in Redis.
    /// relcache logs nothing between Redis's verbose and notice, so both are `info`.
    pub const fn tracing_filter(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Verbose | LogLevel::Notice => "info",
            LogLevel::Warning => "warn",
            LogLevel::Nothing => "off",
        }
    }
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        LogLevel::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                "argument(s) must be one of the following: debug, verbose, notice, warning, nothing"
                    .into()
            })
    }
}

/// Called with the new level whenever `loglevel` is set (see
/// [`Config::on_loglevel_change`]).
type LogHook = Box<dyn Fn(LogLevel) + Send + Sync>;

/// Output buffer limits of one client class (`client-output-buffer-limit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimit {
    /// Disconnect at once past this many pending reply bytes (0 = no limit).
    pub hard: u64,
    /// Disconnect when over this many bytes for `soft_seconds` in a row (0 = none).
    pub soft: u64,
    pub soft_seconds: u64,
}

/// The live configuration.
pub struct Config {
    pub port: AtomicU64,
    pub bind: RwLock<Vec<IpAddr>>,
    pub requirepass: RwLock<Option<String>>,
    pub maxclients: AtomicU64,
    /// The listen queue of each listener (`tcp-backlog`): connects beyond it wait
    /// for SYN retries, a second or more each.
    pub tcp_backlog: AtomicU64,
    /// Most threads an event loop has at once, polling, spare or running long
    /// work it handed the loop over for (`loop-max-threads`; read at start).
    pub loop_max_threads: AtomicU64,
    pub maxmemory: AtomicU64,
    /// Read only when memory is over the limit, so a lock costs nothing that matters.
    pub maxmemory_policy: RwLock<EvictionPolicy>,
    pub maxmemory_samples: AtomicU64,
    /// `maxmemory-eviction-tenacity` (0–100): how long a command that adds
    /// nothing evicts, and the background loop's slices ([`Config::eviction_slice_ns`]).
    pub maxmemory_eviction_tenacity: AtomicU64,
    /// `maxmemory-clients`: bytes, or a percentage of `maxmemory` when
    /// `maxmemory_clients_percent` is set (0 = no limit).
    maxmemory_clients: AtomicU64,
    maxmemory_clients_percent: AtomicBool,
    /// Idle client timeout in seconds (0 = never).
    pub timeout: AtomicU64,
    pub proto_max_bulk_len: AtomicU64,
    pub client_query_buffer_limit: AtomicU64,
    output_hard: AtomicU64,
    output_soft: AtomicU64,
    output_soft_seconds: AtomicU64,
    /// The `pubsub` class: subscribed clients, whose output is messages other
    /// clients publish, and which therefore can grow without the client asking.
    pubsub_hard: AtomicU64,
    pubsub_soft: AtomicU64,
    pubsub_soft_seconds: AtomicU64,
    pub hz: AtomicU64,
    /// Keyspace notification classes, read on every write (`crate::notify`).
    pub notify_keyspace_events: crate::notify::Flags,
    pub loglevel: RwLock<LogLevel>,
    /// How the process applies a new `loglevel` (installed by the binary, which owns
    /// the log subscriber); `None` in a library embedding, where the level is only
    /// recorded.
    log_hook: RwLock<Option<LogHook>>,
    /// Seconds of idle before keepalive probes on accepted sockets (0 = off).
    pub tcp_keepalive: AtomicU64,
    /// Connections a listener accepts in a row before it lets the other tasks of
    /// its worker thread run (Redis 7.4's accepts per event-loop cycle).
    pub max_new_connections_per_cycle: AtomicU64,
    /// How long a lease on a missing key lasts unless its command says (ms): the
    /// longest a crashed filler can make others wait.
    pub lease_timeout: AtomicU64,
    /// The longest lease a command may ask for (`PX`, ms): a lease covers one
    /// database read, and one asked for hours would hold its key's fills back.
    pub lease_max_ttl: AtomicU64,
    /// Most leases out at once: a client that asks for leases on ever new keys and
    /// never fills them is refused past this, instead of filling the memory.
    pub lease_max_count: AtomicU64,
    /// Whether a table a client stores is proven a set in full (`idset-table-check
    /// full`) or in its structure and a sample of its ids (`sample`, the default).
    pub idset_check_full: AtomicBool,
    /// The config file the server was started with (INFO `config_file`, CONFIG
    /// REWRITE); `None` when there was none.
    pub config_file: RwLock<Option<std::path::PathBuf>>,
    /// SLOWLOG records commands that take at least this many µs (-1: none, 0: all).
    pub slowlog_log_slower_than: AtomicI64,
    pub slowlog_max_len: AtomicU64,
    /// LATENCY records events that take at least this many ms (0: off).
    pub latency_monitor_threshold: AtomicU64,
    /// Per-command latency histograms (INFO latencystats, LATENCY HISTOGRAM).
    pub latency_tracking: AtomicBool,
    pub latency_tracking_info_percentiles: RwLock<Vec<f64>>,
    /// A script running longer than this (ms) gets other clients' commands on its
    /// shards answered `-BUSY` and becomes killable (`busy-reply-threshold`).
    pub busy_reply_threshold: AtomicU64,
    /// Keys the client-side caching table may hold (0: no bound); past it,
    /// keys are dropped and their readers told, as if they had changed.
    pub tracking_table_max_keys: AtomicU64,
    /// Scripts may touch keys they did not declare in KEYS, taking every shard.
    pub lua_allow_undeclared_keys: AtomicBool,
    /// A connection whose scripts keep waiting for other loops' scripts over the
    /// same keys moves to the loop those keys call home (`script-loop-affinity`).
    pub script_loop_affinity: AtomicBool,
    /// Percent of one loop's time: spread loops busy together less gather their
    /// connections on one; 0: never gather (`loop-gather-below`, see
    /// [`crate::gather`]).
    pub loop_gather_below: AtomicU64,
    /// Keep what clients send out of the log (Redis 7.4's
    /// `hide-user-data-from-log`).
    pub hide_user_data_from_log: AtomicBool,
    /// DEL as UNLINK (`lazyfree-lazy-user-del`).
    pub lazyfree_lazy_user_del: AtomicBool,
    /// Derived, not a parameter: see [`crate::observe::Gate`].
    pub observe_gate: crate::observe::Gate,
    /// `save`: (seconds, changes) pairs; empty for no automatic snapshots.
    pub save_policy: RwLock<Vec<(u64, u64)>>,
    /// `dir`, absolute.
    pub dir: RwLock<std::path::PathBuf>,
    pub dbfilename: RwLock<String>,
    /// `snapshot-load-corrupt start-empty`.
    pub snapshot_start_empty: AtomicBool,
    /// Cluster mode (`crate::cluster`); fixed at start, as in Redis.
    pub cluster_enabled: AtomicBool,
    /// The file the node keeps its cluster configuration in, relative to `dir`.
    pub cluster_config_file: RwLock<String>,
    /// The cluster bus port (0: the client port + 10000).
    pub cluster_port: AtomicU64,
    /// ms without an answer on the bus before a peer is shown as failing (`fail?`).
    pub cluster_node_timeout: AtomicU64,
    /// The address this node tells peers and clients to reach it at; empty: the
    /// address peers see it connect from.
    pub cluster_announce_ip: RwLock<String>,
    /// Refuse every key while any slot is unassigned (`CLUSTERDOWN`).
    pub cluster_require_full_coverage: AtomicBool,
    /// Serve reads of the slots this node owns while the cluster is down.
    pub cluster_allow_reads_when_down: AtomicBool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: AtomicU64::new(6379),
            bind: RwLock::new(vec![IpAddr::from([127, 0, 0, 1])]),
            requirepass: RwLock::new(None),
            maxclients: AtomicU64::new(10_000),
            tcp_backlog: AtomicU64::new(511),
            loop_max_threads: AtomicU64::new(64),
            maxmemory: AtomicU64::new(0),
            // A cache evicts by default.
            maxmemory_policy: RwLock::new(EvictionPolicy::AllKeysLru),
            maxmemory_samples: AtomicU64::new(5),
            maxmemory_eviction_tenacity: AtomicU64::new(10),
            maxmemory_clients: AtomicU64::new(0),
            maxmemory_clients_percent: AtomicBool::new(false),
            timeout: AtomicU64::new(0),
            proto_max_bulk_len: AtomicU64::new(512 * 1024 * 1024),
            client_query_buffer_limit: AtomicU64::new(1024 * 1024 * 1024),
            // No hard limit, as Redis: a client reading a 300 MB reply must get it.
            // The soft limit is relcache's own default: past it a client is held
            // back (no new requests are read) and cut off only if it takes none of
            // its output for `soft_seconds` (see `conn::output_over_limit`).
            output_hard: AtomicU64::new(0),
            output_soft: AtomicU64::new(64 * 1024 * 1024),
            output_soft_seconds: AtomicU64::new(60),
            // Redis's default for the class: `pubsub 32mb 8mb 60`.
            pubsub_hard: AtomicU64::new(32 * 1024 * 1024),
            pubsub_soft: AtomicU64::new(8 * 1024 * 1024),
            pubsub_soft_seconds: AtomicU64::new(60),
            hz: AtomicU64::new(10),
            notify_keyspace_events: crate::notify::Flags::default(),
            loglevel: RwLock::new(LogLevel::Notice),
            log_hook: RwLock::new(None),
            tcp_keepalive: AtomicU64::new(300),
            max_new_connections_per_cycle: AtomicU64::new(10),
            lease_timeout: AtomicU64::new(10_000),
            lease_max_ttl: AtomicU64::new(60_000),
            lease_max_count: AtomicU64::new(100_000),
            idset_check_full: AtomicBool::new(false),
            config_file: RwLock::new(None),
            slowlog_log_slower_than: AtomicI64::new(10_000),
            slowlog_max_len: AtomicU64::new(128),
            latency_monitor_threshold: AtomicU64::new(0),
            latency_tracking: AtomicBool::new(true),
            latency_tracking_info_percentiles: RwLock::new(vec![50.0, 99.0, 99.9]),
            busy_reply_threshold: AtomicU64::new(5000),
            tracking_table_max_keys: AtomicU64::new(1_000_000),
            lua_allow_undeclared_keys: AtomicBool::new(false),
            script_loop_affinity: AtomicBool::new(true),
            loop_gather_below: AtomicU64::new(crate::gather::DEFAULT_BELOW),
            hide_user_data_from_log: AtomicBool::new(false),
            lazyfree_lazy_user_del: AtomicBool::new(false),
            observe_gate: crate::observe::Gate::default(),
            save_policy: RwLock::new(Vec::new()),
            dir: RwLock::new(std::env::current_dir().unwrap_or_else(|_| ".".into())),
            dbfilename: RwLock::new("dump.rcs".into()),
            snapshot_start_empty: AtomicBool::new(false),
            cluster_enabled: AtomicBool::new(false),
            cluster_config_file: RwLock::new("nodes.conf".into()),
            cluster_port: AtomicU64::new(0),
            cluster_node_timeout: AtomicU64::new(15_000),
            cluster_announce_ip: RwLock::new(String::new()),
            cluster_require_full_coverage: AtomicBool::new(true),
            cluster_allow_reads_when_down: AtomicBool::new(false),
        }
    }
}

/// Why a value was refused; the text follows Redis's CONFIG SET messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("Unknown option or number of arguments for CONFIG SET - '{0}'")]
    Unknown(String),
    #[error("CONFIG SET failed (possibly related to argument '{name}') - {why}")]
    Invalid { name: String, why: String },
}

type Getter = fn(&Config) -> String;
type Setter = fn(&Config, &str) -> Result<(), String>;

/// One configuration parameter.
pub struct Param {
    pub name: &'static str,
    /// Whether CONFIG SET may change it at run time.
    pub mutable: bool,
    /// Settable at start only, as Redis 7's protected configs with its default
    /// `enable-protected-configs no`: a client that may CONFIG SET `dir` and
    /// `dbfilename` could make SAVE write a file of its choosing anywhere the
    /// server can write (the classic attack on exposed Redis servers).
    pub protected: bool,
    /// One line for the binary's `--help`.
    pub help: &'static str,
    get: Getter,
    set: Setter,
}

fn get_u(a: &AtomicU64) -> String {
    a.load(Relaxed).to_string()
}

fn set_u(a: &AtomicU64, v: &str, min: u64, max: u64) -> Result<(), String> {
    let n: u64 = v
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    if n < min || n > max {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    a.store(n, Relaxed);
    Ok(())
}

fn set_mem(a: &AtomicU64, v: &str) -> Result<(), String> {
    a.store(
        parse_memory(v).ok_or("argument must be a memory value")?,
        Relaxed,
    );
    Ok(())
}

/// A memory value of at least `min` bytes (Redis refuses buffer limits under 1mb).
fn set_mem_min(a: &AtomicU64, v: &str, min: u64) -> Result<(), String> {
    let n = parse_memory(v).ok_or("argument must be a memory value")?;
    if n < min {
        return Err(format!(
            "argument must be a memory value of at least {}",
            min / (1024 * 1024)
        ) + "mb");
    }
    a.store(n, Relaxed);
    Ok(())
}

fn get_yes_no(a: &AtomicBool) -> String {
    if a.load(Relaxed) { "yes" } else { "no" }.into()
}

fn set_yes_no(a: &AtomicBool, v: &str) -> Result<(), String> {
    a.store(yes_no(v)?, Relaxed);
    Ok(())
}

fn yes_no(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

/// Every parameter relcache knows, in CONFIG GET order.
pub static PARAMS: &[Param] = &[
    Param {
        name: "port",
        mutable: false,
        protected: false,
        help: "TCP port to listen on (0 picks a free one; the log says which)",
        get: |c| get_u(&c.port),
        set: |c, v| set_u(&c.port, v, 0, 65535),
    },
    Param {
        name: "bind",
        mutable: false,
        protected: false,
        help: "Addresses to listen on, space-separated as in redis.conf (default 127.0.0.1)",
        get: |c| {
            let b = c.bind.read();
            b.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        },
        set: |c, v| {
            let addrs = v
                .split_whitespace()
                .map(|a| a.trim_start_matches('-').parse::<IpAddr>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("invalid bind address: {e}"))?;
            if addrs.is_empty() {
                return Err("bind needs at least one address".into());
            }
            *c.bind.write() = addrs;
            Ok(())
        },
    },
    Param {
        name: "requirepass",
        mutable: true,
        protected: false,
        help: "Password clients must give with AUTH or HELLO",
        get: |c| c.requirepass.read().clone().unwrap_or_default(),
        set: |c, v| {
            *c.requirepass.write() = (!v.is_empty()).then(|| v.to_string());
            Ok(())
        },
    },
    Param {
        name: "maxclients",
        mutable: true,
        protected: false,
        help: "Most simultaneous client connections",
        get: |c| get_u(&c.maxclients),
        set: |c, v| set_u(&c.maxclients, v, 1, u32::MAX as u64),
    },
    Param {
        name: "tcp-backlog",
        mutable: false,
        protected: false,
        help: "Listen queue length of each listener (capped by net.core.somaxconn)",
        get: |c| get_u(&c.tcp_backlog),
        set: |c, v| set_u(&c.tcp_backlog, v, 0, i32::MAX as u64),
    },
    Param {
        name: "loop-max-threads",
        mutable: false,
        protected: false,
        help: "Most threads an event loop has at once: past it, long work runs on the thread that polls and the loop's other clients wait, as in Redis",
        get: |c| get_u(&c.loop_max_threads),
        set: |c, v| set_u(&c.loop_max_threads, v, 2, 4096),
    },
    Param {
        name: "maxmemory",
        mutable: true,
        protected: false,
        help: "Memory limit for the dataset: bytes or 64mb, 2gb … (0 = none)",
        get: |c| get_u(&c.maxmemory),
        set: |c, v| set_mem(&c.maxmemory, v),
    },
    Param {
        name: "maxmemory-policy",
        mutable: true,
        protected: false,
        help: "What to do at maxmemory: noeviction, allkeys-lru, volatile-lru, allkeys-random, volatile-random, volatile-ttl",
        get: |c| c.policy().as_str().into(),
        set: |c, v| {
            *c.maxmemory_policy.write() = v.parse()?;
            Ok(())
        },
    },
    Param {
        name: "maxmemory-samples",
        mutable: true,
        protected: false,
        help: "Keys sampled per eviction round (1-64)",
        get: |c| get_u(&c.maxmemory_samples),
        set: |c, v| set_u(&c.maxmemory_samples, v, 1, 64),
    },
    Param {
        name: "maxmemory-eviction-tenacity",
        mutable: true,
        protected: false,
        help: "How long one eviction runs before the command goes on (0-100; 10 is 500 us, 100 is until under)",
        get: |c| get_u(&c.maxmemory_eviction_tenacity),
        set: |c, v| set_u(&c.maxmemory_eviction_tenacity, v, 0, 100),
    },
    Param {
        name: "tracking-table-max-keys",
        mutable: true,
        protected: false,
        help: "Keys the client-side caching table may track; past it, keys are dropped and their readers told (0 = no limit)",
        get: |c| get_u(&c.tracking_table_max_keys),
        set: |c, v| set_u(&c.tracking_table_max_keys, v, 0, i64::MAX as u64),
    },
    Param {
        name: "maxmemory-clients",
        mutable: true,
        protected: false,
        help: "Memory all clients' buffers may hold together, in bytes or as a percentage of maxmemory (10%); past it the clients using the most are closed (0 = no limit)",
        get: |c| {
            let n = c.maxmemory_clients.load(Relaxed);
            if c.maxmemory_clients_percent.load(Relaxed) && n > 0 {
                format!("{n}%")
            } else {
                n.to_string()
            }
        },
        set: |c, v| {
            let (n, percent) = match v.strip_suffix('%') {
                Some(p) => {
                    let n = p
                        .parse::<u64>()
                        .map_err(|_| "argument must be a memory or percent value")?;
                    if n > 100 {
                        return Err("percentage argument must be less or equal to 100".into());
                    }
                    (n, true)
                }
                None => (
                    parse_memory(v).ok_or("argument must be a memory or percent value")?,
                    false,
                ),
            };
            c.maxmemory_clients.store(n, Relaxed);
            c.maxmemory_clients_percent.store(percent, Relaxed);
            Ok(())
        },
    },
    Param {
        name: "timeout",
        mutable: true,
        protected: false,
        help: "Close clients idle for this many seconds (0 = never)",
        get: |c| get_u(&c.timeout),
        set: |c, v| set_u(&c.timeout, v, 0, i32::MAX as u64),
    },
    Param {
        name: "proto-max-bulk-len",
        mutable: true,
        protected: false,
        help: "Largest bulk string a client may send (e.g. 512mb)",
        get: |c| get_u(&c.proto_max_bulk_len),
        set: |c, v| set_mem_min(&c.proto_max_bulk_len, v, 1024 * 1024),
    },
    Param {
        name: "client-query-buffer-limit",
        mutable: true,
        protected: false,
        help: "Most unparsed request bytes one client may have buffered (e.g. 1gb)",
        get: |c| get_u(&c.client_query_buffer_limit),
        set: |c, v| set_mem_min(&c.client_query_buffer_limit, v, 1024 * 1024),
    },
    Param {
        name: "client-output-buffer-limit",
        mutable: true,
        protected: false,
        help: "`<class> <hard> <soft> <seconds>` (normal, pubsub): pending reply bytes before a client is closed",
        get: |c| {
            let (l, p) = (c.output_limit(), c.pubsub_output_limit());
            format!(
                "normal {} {} {} slave 268435456 67108864 60 pubsub {} {} {}",
                l.hard, l.soft, l.soft_seconds, p.hard, p.soft, p.soft_seconds
            )
        },
        set: |c, v| {
            let words: Vec<&str> = v.split_whitespace().collect();
            if words.is_empty() || !words.len().is_multiple_of(4) {
                return Err("Wrong number of arguments in buffer limit configuration.".into());
            }
            let (mut normal, mut pubsub) = (None, None);
            for w in words.chunks(4) {
                let hard = parse_memory(w[1]);
                let soft = parse_memory(w[2]);
                let secs = w[3].parse::<u64>().ok();
                let (Some(hard), Some(soft), Some(soft_seconds)) = (hard, soft, secs) else {
                    return Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into());
                };
                let limit = OutputLimit {
                    hard,
                    soft,
                    soft_seconds,
                };
                match w[0].to_ascii_lowercase().as_str() {
                    "normal" => normal = Some(limit),
                    "pubsub" => pubsub = Some(limit),
                    // Accepted for compatibility; relcache has no replicas.
                    "slave" | "replica" => {}
                    _ => {
                        return Err(
                            "Invalid client class specified in buffer limit configuration.".into(),
                        )
                    }
                }
            }
            if let Some(l) = normal {
                c.output_hard.store(l.hard, Relaxed);
                c.output_soft.store(l.soft, Relaxed);
                c.output_soft_seconds.store(l.soft_seconds, Relaxed);
            }
            if let Some(l) = pubsub {
                c.pubsub_hard.store(l.hard, Relaxed);
                c.pubsub_soft.store(l.soft, Relaxed);
                c.pubsub_soft_seconds.store(l.soft_seconds, Relaxed);
            }
            Ok(())
        },
    },
    Param {
        name: "hz",
        mutable: true,
        protected: false,
        help: "Background task frequency (expiry sweeps), per second",
        get: |c| get_u(&c.hz),
        set: |c, v| set_u(&c.hz, v, 1, 500),
    },
    Param {
        name: "notify-keyspace-events",
        mutable: true,
        protected: false,
        help: "Keyspace notification classes, Redis's letters (e.g. KEA; empty = off; see Pub/sub in the README)",
        get: |c| c.notify_keyspace_events.text(),
        set: |c, v| c.notify_keyspace_events.set(v),
    },
    Param {
        name: "loglevel",
        mutable: true,
        protected: false,
        help: "debug, verbose, notice, warning, nothing (RUST_LOG, when set, decides at start)",
        get: |c| c.loglevel.read().as_str().into(),
        set: |c, v| {
            let level = v.parse()?;
            *c.loglevel.write() = level;
            if let Some(hook) = &*c.log_hook.read() {
                hook(level);
            }
            Ok(())
        },
    },
    Param {
        name: "tcp-keepalive",
        mutable: true,
        protected: false,
        help: "Send TCP keepalive probes to clients idle this many seconds (0 = off)",
        get: |c| get_u(&c.tcp_keepalive),
        set: |c, v| set_u(&c.tcp_keepalive, v, 0, i32::MAX as u64),
    },
    Param {
        name: "max-new-connections-per-cycle",
        mutable: true,
        protected: false,
        help: "Connections a listener accepts in a row before it lets its worker's clients run",
        get: |c| get_u(&c.max_new_connections_per_cycle),
        set: |c, v| set_u(&c.max_new_connections_per_cycle, v, 1, 1000),
    },
    Param {
        name: "idset-table-check",
        mutable: true,
        protected: false,
        help: "How much of a table a client stores is proven: sample (its structure and the placement of the ids in 256 to 511 evenly spaced slots, the default) or full (every id's placement: ~13 ns an id)",
        get: |c| if c.idset_check_full.load(Relaxed) { "full" } else { "sample" }.into(),
        set: |c, v| {
            let full = match v.to_ascii_lowercase().as_str() {
                "full" => true,
                "sample" => false,
                _ => return Err("argument must be 'sample' or 'full'".into()),
            };
            c.idset_check_full.store(full, Relaxed);
            Ok(())
        },
    },
    Param {
        name: "lease-timeout",
        mutable: true,
        protected: false,
        help: "How long a lease on a missing key lasts, in milliseconds, unless the command asks for another time",
        get: |c| get_u(&c.lease_timeout),
        set: |c, v| set_u(&c.lease_timeout, v, 1, i32::MAX as u64),
    },
    Param {
        name: "lease-max-ttl",
        mutable: true,
        protected: false,
        help: "The longest lease a command may ask for, in milliseconds",
        get: |c| get_u(&c.lease_max_ttl),
        set: |c, v| set_u(&c.lease_max_ttl, v, 1, i32::MAX as u64),
    },
    Param {
        name: "lease-max-count",
        mutable: true,
        protected: false,
        help: "Most leases out at once; more are refused",
        get: |c| get_u(&c.lease_max_count),
        set: |c, v| set_u(&c.lease_max_count, v, 1, i64::MAX as u64),
    },
    Param {
        name: "lazyfree-lazy-user-del",
        mutable: true,
        protected: false,
        help: "Whether DEL frees big values in the background, as UNLINK does, instead of before it replies (yes/no)",
        get: |c| get_yes_no(&c.lazyfree_lazy_user_del),
        set: |c, v| set_yes_no(&c.lazyfree_lazy_user_del, v),
    },
    // Snapshots (see `crate::persist`). Off by default: a cache with no save policy
    // never writes to disk unless asked (SAVE, BGSAVE, SHUTDOWN SAVE).
    Param {
        name: "save",
        mutable: true,
        protected: false,
        help: "Snapshot policy: `<seconds> <changes>` pairs, a BGSAVE after that many changes in that many seconds (default \"\": none)",
        get: |c| {
            c.save_policy
                .read()
                .iter()
                .map(|(secs, changes)| format!("{secs} {changes}"))
                .collect::<Vec<_>>()
                .join(" ")
        },
        set: |c, v| {
            *c.save_policy.write() = parse_save_policy(v)?;
            Ok(())
        },
    },
    Param {
        name: "dir",
        mutable: true,
        protected: true,
        help: "Directory the snapshot is written to and loaded from (default: the working directory)",
        get: |c| c.dir.read().display().to_string(),
        set: |c, v| {
            let path = std::fs::canonicalize(v).map_err(|e| e.to_string())?;
            if !path.is_dir() {
                return Err("Not a directory".into());
            }
            *c.dir.write() = path;
            Ok(())
        },
    },
    Param {
        name: "dbfilename",
        mutable: true,
        protected: true,
        help: "Name of the snapshot file in `dir` (default dump.rcs; not an RDB file)",
        get: |c| c.dbfilename.read().clone(),
        set: |c, v| {
            if v.is_empty() || v.contains('/') || v == "." || v == ".." {
                return Err("dbfilename can't be a path, just a filename".into());
            }
            *c.dbfilename.write() = v.to_string();
            Ok(())
        },
    },
    Param {
        name: "cluster-enabled",
        mutable: false,
        protected: false,
        help: "Run as a Redis Cluster node (yes/no)",
        get: |c| get_yes_no(&c.cluster_enabled),
        set: |c, v| set_yes_no(&c.cluster_enabled, v),
    },
    Param {
        name: "cluster-config-file",
        mutable: false,
        protected: false,
        help: "File in `dir` where the node keeps its cluster configuration (default nodes.conf)",
        get: |c| c.cluster_config_file.read().clone(),
        set: |c, v| {
            if v.is_empty() || v.contains('/') || v == "." || v == ".." {
                return Err("cluster-config-file can't be a path, just a filename".into());
            }
            *c.cluster_config_file.write() = v.to_string();
            Ok(())
        },
    },
    Param {
        name: "cluster-port",
        mutable: false,
        protected: false,
        help: "Cluster bus port (0: the client port + 10000)",
        get: |c| get_u(&c.cluster_port),
        set: |c, v| set_u(&c.cluster_port, v, 0, 65535),
    },
    Param {
        name: "cluster-node-timeout",
        mutable: true,
        protected: false,
        help: "ms a peer may leave the bus unanswered before it is flagged fail?",
        get: |c| get_u(&c.cluster_node_timeout),
        set: |c, v| set_u(&c.cluster_node_timeout, v, 1, i64::MAX as u64),
    },
    Param {
        name: "cluster-announce-ip",
        mutable: true,
        protected: false,
        help: "Address announced to peers and in redirects (default: as peers see it)",
        get: |c| c.cluster_announce_ip.read().clone(),
        set: |c, v| {
            if !v.is_empty() && v.parse::<IpAddr>().is_err() {
                return Err("argument must be an IP address".into());
            }
            *c.cluster_announce_ip.write() = v.to_string();
            Ok(())
        },
    },
    Param {
        name: "cluster-require-full-coverage",
        mutable: true,
        protected: false,
        help: "Refuse every key while a slot is unassigned (yes/no)",
        get: |c| get_yes_no(&c.cluster_require_full_coverage),
        set: |c, v| set_yes_no(&c.cluster_require_full_coverage, v),
    },
    Param {
        name: "cluster-allow-reads-when-down",
        mutable: true,
        protected: false,
        help: "Serve reads of owned slots while the cluster is down (yes/no)",
        get: |c| get_yes_no(&c.cluster_allow_reads_when_down),
        set: |c, v| set_yes_no(&c.cluster_allow_reads_when_down, v),
    },
    Param {
        name: "snapshot-load-corrupt",
        mutable: true,
        protected: false,
        help: "At start, a snapshot that fails its checks: `refuse` (exit non-zero, the default) or `start-empty` (log it and serve an empty cache)",
        get: |c| {
            if c.snapshot_start_empty.load(Relaxed) { "start-empty" } else { "refuse" }.into()
        },
        set: |c, v| {
            let empty = match v.to_ascii_lowercase().as_str() {
                "refuse" => false,
                "start-empty" => true,
                _ => return Err("argument must be one of the following: refuse, start-empty".into()),
            };
            c.snapshot_start_empty.store(empty, Relaxed);
            Ok(())
        },
    },
    Param {
        name: "appendonly",
        mutable: true,
        protected: false,
        help: "Accepted for redis-server compatibility: must be `no`",
        get: |_| "no".into(),
        set: |_, v| {
            if yes_no(v)? {
                Err("relcache does not persist; appendonly is always no".into())
            } else {
                Ok(())
            }
        },
    },
    Param {
        name: "databases",
        mutable: false,
        protected: false,
        help: "Accepted for redis-server compatibility: must be 1",
        get: |_| "1".into(),
        set: |_, v| {
            if v == "1" {
                Ok(())
            } else {
                Err("relcache has a single database".into())
            }
        },
    },
    Param {
        name: "slowlog-log-slower-than",
        mutable: true,
        protected: false,
        help: "Log commands slower than this many microseconds in SLOWLOG (-1 = off, 0 = every command)",
        get: |c| c.slowlog_log_slower_than.load(Relaxed).to_string(),
        set: |c, v| {
            c.slowlog_log_slower_than
                .store(parse_at_least(v, -1)?, Relaxed);
            c.observe_gate.refresh(c);
            Ok(())
        },
    },
    Param {
        name: "slowlog-max-len",
        mutable: true,
        protected: false,
        help: "Entries SLOWLOG keeps",
        get: |c| get_u(&c.slowlog_max_len),
        set: |c, v| {
            let n = parse_at_least(v, 0)?;
            c.slowlog_max_len.store(n as u64, Relaxed);
            Ok(())
        },
    },
    Param {
        name: "latency-monitor-threshold",
        mutable: true,
        protected: false,
        help: "Record LATENCY events of at least this many milliseconds (0 = off)",
        get: |c| get_u(&c.latency_monitor_threshold),
        set: |c, v| {
            let n = parse_at_least(v, 0)?;
            c.latency_monitor_threshold.store(n as u64, Relaxed);
            c.observe_gate.refresh(c);
            Ok(())
        },
    },
    Param {
        name: "busy-reply-threshold",
        mutable: true,
        protected: false,
        help: "Milliseconds a script runs before other clients on its shards get -BUSY and SCRIPT KILL may stop it",
        get: |c| get_u(&c.busy_reply_threshold),
        set: |c, v| set_u(&c.busy_reply_threshold, v, 0, i64::MAX as u64),
    },
    Param {
        name: "lua-time-limit",
        mutable: true,
        protected: false,
        help: "The old name of busy-reply-threshold",
        get: |c| get_u(&c.busy_reply_threshold),
        set: |c, v| set_u(&c.busy_reply_threshold, v, 0, i64::MAX as u64),
    },
    Param {
        name: "lua-allow-undeclared-keys",
        mutable: true,
        protected: false,
        help: "Let scripts touch keys not declared in KEYS, locking every shard while they run (yes/no)",
        get: |c| get_yes_no(&c.lua_allow_undeclared_keys),
        set: |c, v| set_yes_no(&c.lua_allow_undeclared_keys, v),
    },
    Param {
        name: "script-loop-affinity",
        mutable: true,
        protected: false,
        help: "Move a connection whose scripts keep waiting for other loops' scripts on the same keys to the loop those keys call home (yes/no)",
        get: |c| get_yes_no(&c.script_loop_affinity),
        set: |c, v| set_yes_no(&c.script_loop_affinity, v),
    },
    Param {
        name: "loop-gather-below",
        mutable: true,
        protected: false,
        help: "Percent of one loop's time: loops busy together less gather their connections on one, which spread again once it is full (0: always spread)",
        get: |c| get_u(&c.loop_gather_below),
        set: |c, v| set_u(&c.loop_gather_below, v, 0, crate::gather::MAX_BELOW),
    },
    Param {
        name: "hide-user-data-from-log",
        mutable: true,
        protected: false,
        help: "Keep bytes clients sent out of the log: a protocol error is logged without the byte it quotes (yes/no)",
        get: |c| get_yes_no(&c.hide_user_data_from_log),
        set: |c, v| set_yes_no(&c.hide_user_data_from_log, v),
    },
    Param {
        name: "latency-tracking",
        mutable: true,
        protected: false,
        help: "Keep per-command latency histograms for INFO latencystats (yes/no)",
        get: |c| {
            if c.latency_tracking.load(Relaxed) {
                "yes"
            } else {
                "no"
            }
            .into()
        },
        set: |c, v| {
            c.latency_tracking.store(yes_no(v)?, Relaxed);
            c.observe_gate.refresh(c);
            Ok(())
        },
    },
    Param {
        name: "latency-tracking-info-percentiles",
        mutable: true,
        protected: false,
        help: "Percentiles INFO latencystats reports, space-separated",
        get: |c| {
            let p = c.latency_tracking_info_percentiles.read();
            p.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        },
        set: |c, v| {
            let p = v
                .split_whitespace()
                .map(|w| w.parse::<f64>().ok().filter(|x| x.is_finite()))
                .collect::<Option<Vec<f64>>>()
                .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
            if p.iter().any(|x| !(0.0..=100.0).contains(x)) {
                return Err(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                        .into(),
                );
            }
            *c.latency_tracking_info_percentiles.write() = p;
            Ok(())
        },
    },
];

/// An integer of at least `min`, parsed signed so a negative value gets Redis's
/// range message rather than a parse error.
fn parse_at_least(v: &str, min: i64) -> Result<i64, String> {
    let n: i64 = v
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    if n < min {
        return Err(format!(
            "argument must be between {min} and {} inclusive",
            i64::MAX
        ));
    }
    Ok(n)
}

/// `save` values: `""` or `<seconds> <changes>` pairs, Redis's syntax and errors.
fn parse_save_policy(v: &str) -> Result<Vec<(u64, u64)>, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    if !words.len().is_multiple_of(2) {
        return Err("Invalid save parameters".into());
    }
    words
        .chunks(2)
        .map(
            |pair| match (pair[0].parse::<u64>(), pair[1].parse::<u64>()) {
                (Ok(secs), Ok(changes))
                    if secs <= i32::MAX as u64 && changes <= i32::MAX as u64 =>
                {
                    Ok((secs, changes))
                }
                _ => Err("Invalid save parameters".into()),
            },
        )
        .collect()
}

fn find(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

impl Config {
    /// Sets one parameter, as `CONFIG SET` does (`startup` allows immutable ones).
    pub fn set(&self, name: &str, value: &str, startup: bool) -> Result<(), ConfigError> {
        let p = find(name).ok_or_else(|| ConfigError::Unknown(name.to_string()))?;
        if !p.mutable && !startup {
            return Err(ConfigError::Invalid {
                name: p.name.into(),
                why: "can't set immutable config".into(),
            });
        }
        (p.set)(self, value).map_err(|why| ConfigError::Invalid {
            name: p.name.into(),
            why,
        })
    }

    /// Current value of one parameter.
    pub fn get(&self, name: &str) -> Option<String> {
        find(name).map(|p| (p.get)(self))
    }

    /// Every (name, value) whose name matches one of the glob `patterns`.
    pub fn get_matching(&self, patterns: &[&[u8]]) -> Vec<(&'static str, String)> {
        PARAMS
            .iter()
            .filter(|p| {
                patterns
                    .iter()
                    .any(|pat| glob::matches(pat, p.name.as_bytes(), true))
            })
            .map(|p| (p.name, (p.get)(self)))
            .collect()
    }

    /// Applies a redis.conf-style file: `name value …` per line, `#` comments, values
    /// split like Redis's own parser (quotes allowed).
    pub fn load_file(&self, text: &str) -> Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words =
                split_args(line).ok_or_else(|| format!("line {}: unbalanced quotes", n + 1))?;
            let (name, values) = words.split_first().expect("non-empty line has a word");
            self.set(name, &values.join(" "), true)
                .map_err(|e| format!("line {}: {e}", n + 1))?;
        }
        Ok(())
    }

    /// The normal-class `client-output-buffer-limit` (read on every batch, hence
    /// atomics rather than a lock).
    pub fn output_limit(&self) -> OutputLimit {
        OutputLimit {
            hard: self.output_hard.load(Relaxed),
            soft: self.output_soft.load(Relaxed),
            soft_seconds: self.output_soft_seconds.load(Relaxed),
        }
    }

    /// The pubsub-class `client-output-buffer-limit`, which holds subscribed
    /// clients (checked on every delivery, hence atomics).
    pub fn pubsub_output_limit(&self) -> OutputLimit {
        OutputLimit {
            hard: self.pubsub_hard.load(Relaxed),
            soft: self.pubsub_soft.load(Relaxed),
            soft_seconds: self.pubsub_soft_seconds.load(Relaxed),
        }
    }

    /// The bound on client memory `maxmemory-clients` sets now, in bytes (`None`:
    /// no bound, which a percentage of an unlimited `maxmemory` also means).
    pub fn maxmemory_clients(&self) -> Option<u64> {
        let n = self.maxmemory_clients.load(Relaxed);
        let bytes = if self.maxmemory_clients_percent.load(Relaxed) {
            self.maxmemory.load(Relaxed).saturating_mul(n) / 100
        } else {
            n
        };
        (bytes > 0).then_some(bytes)
    }

    /// How deeply a table a client stores is checked (`idset-table-check`).
    pub fn table_check(&self) -> Check {
        if self.idset_check_full.load(Relaxed) {
            Check::Full
        } else {
            Check::Sample
        }
    }

    /// The eviction policy in force.
    pub fn policy(&self) -> EvictionPolicy {
        *self.maxmemory_policy.read()
    }

    /// How long a command that adds nothing evicts before it runs, and how long
    /// each of the background loop's evictions lasts, by
    /// `maxmemory-eviction-tenacity` as Redis maps it: 50 µs a step up to 10
    /// (the default, 500 µs), then 15% more a step, unbounded at 100.
    pub fn eviction_slice_ns(&self) -> u64 {
        match self.maxmemory_eviction_tenacity.load(Relaxed) {
            t @ 0..=10 => 50_000 * t,
            t @ 11..=99 => (500_000.0 * 1.15f64.powi(t as i32 - 10)) as u64,
            _ => u64::MAX,
        }
    }

    /// Has `hook` applied every later change of `loglevel` (the binary installs one
    /// that reloads its log filter), so `CONFIG SET loglevel` changes what is logged.
    pub fn on_loglevel_change(&self, hook: impl Fn(LogLevel) + Send + Sync + 'static) {
        *self.log_hook.write() = Some(Box::new(hook));
    }

    /// The keepalive settings for accepted sockets under the current `tcp-keepalive`
    /// (`None` when 0), as Redis's `anetKeepAlive` sets them: the first probe after
    /// that many idle seconds, then every third of it, and the peer is dropped after
    /// three unanswered probes — so a dead client goes in about twice the interval.
    pub fn keepalive(&self) -> Option<socket2::TcpKeepalive> {
        let secs = self.tcp_keepalive.load(Relaxed);
        (secs > 0).then(|| {
            socket2::TcpKeepalive::new()
                .with_time(Duration::from_secs(secs))
                .with_interval(Duration::from_secs((secs / 3).max(1)))
                .with_retries(3)
        })
    }
}

/// Parses Redis memory values: `1024`, `64mb`, `2gb`, `10k` (k/m/g are powers of
/// 1000, kb/mb/gb powers of 1024, case-insensitive).
pub fn parse_memory(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(digits);
    let n: u64 = num.parse().ok()?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mul)
}

/// Splits a config line into words the way Redis reads redis.conf (its
/// `sdssplitargs`, which the protocol crate implements for inline commands); `None`
/// on unbalanced quotes.
pub fn split_args(line: &str) -> Option<Vec<String>> {
    let words = relcache_protocol::resp::split_args(line.as_bytes())?;
    Some(
        words
            .into_iter()
            .map(|w| String::from_utf8_lossy(&w).into_owned())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maxmemory_clients_is_bytes_or_a_share_of_maxmemory() {
        let c = Config::default();
        assert_eq!(c.maxmemory_clients(), None);
        c.set("maxmemory-clients", "10%", false).unwrap();
        assert_eq!(c.get("maxmemory-clients").unwrap(), "10%");
        // A share of no limit is no limit.
        assert_eq!(c.maxmemory_clients(), None);
        c.set("maxmemory", "100mb", false).unwrap();
        assert_eq!(c.maxmemory_clients(), Some(10 * 1024 * 1024));
        c.set("maxmemory-clients", "1mb", false).unwrap();
        assert_eq!(c.get("maxmemory-clients").unwrap(), "1048576");
        assert_eq!(c.maxmemory_clients(), Some(1024 * 1024));
        assert!(c.set("maxmemory-clients", "101%", false).is_err());
        assert!(c.set("maxmemory-clients", "-1", false).is_err());
        c.set("maxmemory-clients", "0%", false).unwrap();
        assert_eq!(c.get("maxmemory-clients").unwrap(), "0");
        assert_eq!(c.maxmemory_clients(), None);
    }

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("64mb"), Some(64 << 20));
        assert_eq!(parse_memory("2GB"), Some(2 << 30));
        assert_eq!(parse_memory("1k"), Some(1000));
        assert_eq!(parse_memory("100"), Some(100));
        assert_eq!(parse_memory("12xb"), None);
        assert_eq!(parse_memory(""), None);
    }

    #[test]
    fn eviction_tenacity_maps_as_redis_maps_it() {
        let c = Config::default();
        let slice = |t: &str| {
            c.set("maxmemory-eviction-tenacity", t, false).unwrap();
            c.eviction_slice_ns()
        };
        assert_eq!(slice("0"), 0);
        assert_eq!(slice("1"), 50_000);
        assert_eq!(slice("10"), 500_000, "the default");
        assert_eq!(slice("11"), 575_000);
        // About two minutes at 99, as Redis's comment has it.
        assert!((100_000_000_000..150_000_000_000).contains(&slice("99")));
        assert_eq!(slice("100"), u64::MAX);
        assert!(c.set("maxmemory-eviction-tenacity", "101", false).is_err());
        assert_eq!(Config::default().eviction_slice_ns(), 500_000);
    }

    #[test]
    fn set_get_and_errors() {
        let c = Config::default();
        c.set("maxmemory", "64mb", false).unwrap();
        assert_eq!(c.get("maxmemory").unwrap(), (64u64 << 20).to_string());
        assert_eq!(
            c.set("nope", "1", false).unwrap_err().to_string(),
            "Unknown option or number of arguments for CONFIG SET - 'nope'"
        );
        assert!(c.set("maxmemory-policy", "sometimes", false).is_err());
        c.set("maxmemory-policy", "NOEVICTION", false).unwrap();
        assert_eq!(c.policy(), EvictionPolicy::NoEviction);
        assert_eq!(c.get("maxmemory-policy").unwrap(), "noeviction");
        assert!(c.set("port", "1", false).is_err(), "immutable at run time");
        c.set("client-output-buffer-limit", "normal 1mb 0 0", false)
            .unwrap();
        assert_eq!(c.output_limit().hard, 1 << 20);
        c.set("client-output-buffer-limit", "pubsub 1mb 256kb 1", false)
            .unwrap();
        let p = c.pubsub_output_limit();
        assert_eq!((p.hard, p.soft, p.soft_seconds), (1 << 20, 256 << 10, 1));
        assert_eq!(c.output_limit().hard, 1 << 20, "the normal class kept");
        assert!(c
            .get("client-output-buffer-limit")
            .unwrap()
            .ends_with("pubsub 1048576 262144 1"));
    }

    #[test]
    fn config_file_syntax() {
        let c = Config::default();
        c.load_file("# comment\nmaxclients 7\n\nrequirepass \"a b\"\nsave \"\"\n")
            .unwrap();
        assert_eq!(c.maxclients.load(Relaxed), 7);
        assert_eq!(c.requirepass.read().as_deref(), Some("a b"));
        assert!(c.load_file("maxclients \"7").is_err());
    }

    #[test]
    fn policies_and_levels_round_trip_their_names() {
        for p in EvictionPolicy::ALL {
            assert_eq!(p.as_str().to_uppercase().parse::<EvictionPolicy>(), Ok(p));
        }
        assert!("allkeys-lfu".parse::<EvictionPolicy>().is_err());
        for l in LogLevel::ALL {
            assert_eq!(l.as_str().parse::<LogLevel>(), Ok(l));
        }
        assert_eq!(LogLevel::Warning.tracing_filter(), "warn");
        assert_eq!(LogLevel::Nothing.tracing_filter(), "off");
    }

    #[test]
    fn loglevel_changes_reach_the_hook() {
        use std::sync::{Arc, Mutex};
        let c = Config::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        c.on_loglevel_change(move |l| s.lock().unwrap().push(l));
        c.set("loglevel", "debug", false).unwrap();
        assert!(c.set("loglevel", "loud", false).is_err());
        c.set("loglevel", "Nothing", false).unwrap();
        assert_eq!(*seen.lock().unwrap(), [LogLevel::Debug, LogLevel::Nothing]);
        assert_eq!(c.get("loglevel").unwrap(), "nothing");
    }

    #[test]
    fn keepalive_is_off_at_zero() {
        let c = Config::default();
        c.set("tcp-keepalive", "0", false).unwrap();
        assert!(c.keepalive().is_none());
        c.set("tcp-keepalive", "2", false).unwrap();
        assert!(c.keepalive().is_some());
    }
}
