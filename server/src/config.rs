//! Configuration: the command line, redis.conf-style files, and CONFIG GET/SET.
//!
//! Every parameter is one row of [`PARAMS`] with a Redis name, a parser and a
//! printer, so the config file, `--name value` flags and `CONFIG SET` all go through
//! the same validation. Values the hot path reads (limits, timeouts) live in atomics,
//! so a `CONFIG SET` takes effect for every connection without a lock on the read
//! side.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

use parking_lot::RwLock;

use crate::glob;

/// Eviction policy names, in `maxmemory-policy` spelling.
pub const POLICIES: &[&str] = &[
    "noeviction",
    "allkeys-lru",
    "volatile-lru",
    "allkeys-random",
    "volatile-random",
    "volatile-ttl",
];

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
    pub maxmemory: AtomicU64,
    /// Index into [`POLICIES`].
    pub maxmemory_policy: AtomicU64,
    pub maxmemory_samples: AtomicU64,
    /// Idle client timeout in seconds (0 = never).
    pub timeout: AtomicU64,
    pub proto_max_bulk_len: AtomicU64,
    pub client_query_buffer_limit: AtomicU64,
    output_hard: AtomicU64,
    output_soft: AtomicU64,
    output_soft_seconds: AtomicU64,
    pub hz: AtomicU64,
    pub loglevel: RwLock<String>,
    pub tcp_keepalive: AtomicU64,
    pub lazyfree_lazy_user_del: AtomicBool,
    /// How long a lease on a missing key lasts unless its command says (ms): the
    /// longest a crashed filler can make others wait.
    pub lease_timeout: AtomicU64,
    /// The longest lease a command may ask for (`PX`, ms): a lease covers one
    /// database read, and one asked for hours would hold its key's fills back.
    pub lease_max_ttl: AtomicU64,
    /// Most leases out at once: a client that asks for leases on ever new keys and
    /// never fills them is refused past this, instead of filling the memory.
    pub lease_max_count: AtomicU64,
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
    /// Derived, not a parameter: see [`crate::observe::Gate`].
    pub observe_gate: crate::observe::Gate,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: AtomicU64::new(6379),
            bind: RwLock::new(vec![IpAddr::from([127, 0, 0, 1])]),
            requirepass: RwLock::new(None),
            maxclients: AtomicU64::new(10_000),
            maxmemory: AtomicU64::new(0),
            maxmemory_policy: AtomicU64::new(1), // allkeys-lru: a cache evicts by default
            maxmemory_samples: AtomicU64::new(5),
            timeout: AtomicU64::new(0),
            proto_max_bulk_len: AtomicU64::new(512 * 1024 * 1024),
            client_query_buffer_limit: AtomicU64::new(1024 * 1024 * 1024),
            // Redis leaves normal clients unlimited; a cache server protects itself
            // from clients that pipeline without reading, so the default is finite.
            output_hard: AtomicU64::new(256 * 1024 * 1024),
            output_soft: AtomicU64::new(64 * 1024 * 1024),
            output_soft_seconds: AtomicU64::new(60),
            hz: AtomicU64::new(10),
            loglevel: RwLock::new("notice".into()),
            tcp_keepalive: AtomicU64::new(300),
            lazyfree_lazy_user_del: AtomicBool::new(false),
            lease_timeout: AtomicU64::new(10_000),
            lease_max_ttl: AtomicU64::new(60_000),
            lease_max_count: AtomicU64::new(100_000),
            config_file: RwLock::new(None),
            slowlog_log_slower_than: AtomicI64::new(10_000),
            slowlog_max_len: AtomicU64::new(128),
            latency_monitor_threshold: AtomicU64::new(0),
            latency_tracking: AtomicBool::new(true),
            latency_tracking_info_percentiles: RwLock::new(vec![50.0, 99.0, 99.9]),
            observe_gate: crate::observe::Gate::default(),
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
        get: |c| get_u(&c.port),
        set: |c, v| set_u(&c.port, v, 0, 65535),
    },
    Param {
        name: "bind",
        mutable: false,
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
        get: |c| c.requirepass.read().clone().unwrap_or_default(),
        set: |c, v| {
            *c.requirepass.write() = (!v.is_empty()).then(|| v.to_string());
            Ok(())
        },
    },
    Param {
        name: "maxclients",
        mutable: true,
        get: |c| get_u(&c.maxclients),
        set: |c, v| set_u(&c.maxclients, v, 1, u32::MAX as u64),
    },
    Param {
        name: "maxmemory",
        mutable: true,
        get: |c| get_u(&c.maxmemory),
        set: |c, v| set_mem(&c.maxmemory, v),
    },
    Param {
        name: "maxmemory-policy",
        mutable: true,
        get: |c| POLICIES[c.maxmemory_policy.load(Relaxed) as usize].to_string(),
        set: |c, v| {
            let lower = v.to_ascii_lowercase();
            let i = POLICIES
                .iter()
                .position(|p| *p == lower)
                .ok_or("argument(s) must be one of the following: noeviction, allkeys-lru, volatile-lru, allkeys-random, volatile-random, volatile-ttl")?;
            c.maxmemory_policy.store(i as u64, Relaxed);
            Ok(())
        },
    },
    Param {
        name: "maxmemory-samples",
        mutable: true,
        get: |c| get_u(&c.maxmemory_samples),
        set: |c, v| set_u(&c.maxmemory_samples, v, 1, 64),
    },
    Param {
        name: "timeout",
        mutable: true,
        get: |c| get_u(&c.timeout),
        set: |c, v| set_u(&c.timeout, v, 0, i32::MAX as u64),
    },
    Param {
        name: "proto-max-bulk-len",
        mutable: true,
        get: |c| get_u(&c.proto_max_bulk_len),
        set: |c, v| set_mem_min(&c.proto_max_bulk_len, v, 1024 * 1024),
    },
    Param {
        name: "client-query-buffer-limit",
        mutable: true,
        get: |c| get_u(&c.client_query_buffer_limit),
        set: |c, v| set_mem_min(&c.client_query_buffer_limit, v, 1024 * 1024),
    },
    Param {
        name: "client-output-buffer-limit",
        mutable: true,
        get: |c| {
            let l = c.output_limit();
            format!(
                "normal {} {} {} slave 268435456 67108864 60 pubsub 33554432 8388608 60",
                l.hard, l.soft, l.soft_seconds
            )
        },
        set: |c, v| {
            let words: Vec<&str> = v.split_whitespace().collect();
            if words.is_empty() || !words.len().is_multiple_of(4) {
                return Err("Wrong number of arguments in buffer limit configuration.".into());
            }
            let mut normal = None;
            for w in words.chunks(4) {
                let hard = parse_memory(w[1]);
                let soft = parse_memory(w[2]);
                let secs = w[3].parse::<u64>().ok();
                let (Some(hard), Some(soft), Some(soft_seconds)) = (hard, soft, secs) else {
                    return Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into());
                };
                match w[0].to_ascii_lowercase().as_str() {
                    "normal" => {
                        normal = Some(OutputLimit {
                            hard,
                            soft,
                            soft_seconds,
                        })
                    }
                    // Accepted for compatibility; relcache has no replicas or pub/sub.
                    "slave" | "replica" | "pubsub" => {}
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
            Ok(())
        },
    },
    Param {
        name: "hz",
        mutable: true,
        get: |c| get_u(&c.hz),
        set: |c, v| set_u(&c.hz, v, 1, 500),
    },
    Param {
        name: "loglevel",
        mutable: true,
        get: |c| c.loglevel.read().clone(),
        set: |c, v| {
            let v = v.to_ascii_lowercase();
            if !["debug", "verbose", "notice", "warning", "nothing"].contains(&v.as_str()) {
                return Err("argument(s) must be one of the following: debug, verbose, notice, warning, nothing".into());
            }
            *c.loglevel.write() = v;
            Ok(())
        },
    },
    Param {
        name: "tcp-keepalive",
        mutable: true,
        get: |c| get_u(&c.tcp_keepalive),
        set: |c, v| set_u(&c.tcp_keepalive, v, 0, i32::MAX as u64),
    },
    Param {
        name: "lease-timeout",
        mutable: true,
        get: |c| get_u(&c.lease_timeout),
        set: |c, v| set_u(&c.lease_timeout, v, 1, i32::MAX as u64),
    },
    Param {
        name: "lease-max-ttl",
        mutable: true,
        get: |c| get_u(&c.lease_max_ttl),
        set: |c, v| set_u(&c.lease_max_ttl, v, 1, i32::MAX as u64),
    },
    Param {
        name: "lease-max-count",
        mutable: true,
        get: |c| get_u(&c.lease_max_count),
        set: |c, v| set_u(&c.lease_max_count, v, 1, i64::MAX as u64),
    },
    Param {
        name: "lazyfree-lazy-user-del",
        mutable: true,
        get: |c| {
            if c.lazyfree_lazy_user_del.load(Relaxed) {
                "yes"
            } else {
                "no"
            }
            .into()
        },
        set: |c, v| {
            c.lazyfree_lazy_user_del.store(yes_no(v)?, Relaxed);
            Ok(())
        },
    },
    // Persistence does not exist in a cache; clients probe these on connect, and a
    // fixed, truthful answer keeps them from trying to configure it.
    Param {
        name: "save",
        mutable: true,
        get: |_| String::new(),
        set: |_, v| {
            if v.trim().is_empty() {
                Ok(())
            } else {
                Err("relcache does not persist; only save \"\" is accepted".into())
            }
        },
    },
    Param {
        name: "appendonly",
        mutable: true,
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
        get: |c| get_u(&c.latency_monitor_threshold),
        set: |c, v| {
            let n = parse_at_least(v, 0)?;
            c.latency_monitor_threshold.store(n as u64, Relaxed);
            c.observe_gate.refresh(c);
            Ok(())
        },
    },
    Param {
        name: "latency-tracking",
        mutable: true,
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

    /// The policy name in force.
    pub fn policy(&self) -> &'static str {
        POLICIES[self.maxmemory_policy.load(Relaxed) as usize]
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
    fn memory_units() {
        assert_eq!(parse_memory("64mb"), Some(64 << 20));
        assert_eq!(parse_memory("2GB"), Some(2 << 30));
        assert_eq!(parse_memory("1k"), Some(1000));
        assert_eq!(parse_memory("100"), Some(100));
        assert_eq!(parse_memory("12xb"), None);
        assert_eq!(parse_memory(""), None);
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
        assert_eq!(c.policy(), "noeviction");
        assert!(c.set("port", "1", false).is_err(), "immutable at run time");
        c.set("client-output-buffer-limit", "normal 1mb 0 0", false)
            .unwrap();
        assert_eq!(c.output_limit().hard, 1 << 20);
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
}
