//! The server/admin family: INFO, CONFIG, DBSIZE, FLUSHDB / FLUSHALL, TIME,
//! SHUTDOWN, MEMORY, LASTSAVE, SAVE / BGSAVE, SWAPDB.
//!
//! Replies follow Redis 7.2 (field names, section order, error texts), so tools that
//! scrape `INFO` or probe `CONFIG GET` on connect work unchanged. What relcache does
//! not have, it reports truthfully rather than inventing: there is no persistence
//! (SAVE and BGSAVE are refused, `rdb_*` counters stay at zero), no replication
//! (`role:master`, no replicas) and a single database (SWAPDB 0 0 is the only swap).
//!
//! Nothing here holds a shard lock longer than a command needs: INFO and DBSIZE read
//! the lock-free key counts, and only FLUSHDB / FLUSHALL (keyspace-wide writes) and
//! MEMORY USAGE (one key) go through a [`View`](crate::db::View).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, registry, Ctx};
use crate::config::{split_args, Config, ConfigError, PARAMS};
use crate::db::{Entry, SHARDS};
use crate::error::{CmdError, CmdResult};
use crate::observe::info as observe;
use crate::server::Server;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "info",
        arity: -1,
        flags: spec::LOADING | spec::STALE,
        group: Group::Server,
        summary: "Returns information and statistics about the server.",
        handler: info,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config",
        arity: -2,
        group: Group::Server,
        since: "2.0.0",
        summary: "A container for server configuration commands.",
        complexity: "Depends on subcommand.",
        subcommands: CONFIG_SUBCOMMANDS,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "dbsize",
        arity: 1,
        flags: spec::READONLY | spec::FAST,
        // The key count is kept lock-free per shard: DBSIZE locks nothing.
        keys: Keys::None,
        group: Group::Server,
        summary: "Returns the number of keys in the database.",
        handler: dbsize,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "flushdb",
        arity: -1,
        flags: spec::WRITE,
        keys: Keys::All,
        group: Group::Server,
        summary: "Remove all keys from the current database.",
        complexity: "O(N) where N is the number of keys in the selected database",
        handler: flush,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "flushall",
        arity: -1,
        flags: spec::WRITE,
        keys: Keys::All,
        group: Group::Server,
        summary: "Removes all keys from all databases.",
        complexity: "O(N) where N is the total number of keys in all databases",
        handler: flush,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "time",
        arity: 1,
        flags: spec::LOADING | spec::STALE | spec::FAST,
        group: Group::Server,
        since: "2.6.0",
        summary: "Returns the server time.",
        handler: time,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "shutdown",
        arity: -1,
        flags: spec::ADMIN | spec::NOSCRIPT | spec::LOADING | spec::STALE | spec::NO_MULTI | spec::ALLOW_BUSY,
        group: Group::Server,
        summary: "Synchronously saves the database(s) to disk and shuts down the Redis server.",
        complexity:
            "O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)",
        handler: shutdown,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "memory",
        arity: -2,
        group: Group::Server,
        since: "4.0.0",
        summary: "A container for memory diagnostics commands.",
        complexity: "Depends on subcommand.",
        subcommands: MEMORY_SUBCOMMANDS,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "lastsave",
        arity: 1,
        flags: spec::LOADING | spec::STALE | spec::FAST,
        group: Group::Server,
        summary: "Returns the Unix timestamp of the last successful save to disk.",
        handler: lastsave,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "save",
        arity: 1,
        flags: spec::ADMIN | spec::NOSCRIPT | spec::NO_MULTI,
        group: Group::Server,
        summary: "Synchronously saves the database(s) to disk.",
        complexity: "O(N) where N is the total number of keys in all databases",
        handler: no_persistence,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "bgsave",
        arity: -1,
        flags: spec::ADMIN | spec::NOSCRIPT,
        group: Group::Server,
        summary: "Asynchronously saves the database(s) to disk.",
        handler: no_persistence,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "swapdb",
        arity: 3,
        flags: spec::WRITE | spec::FAST,
        group: Group::Server,
        since: "4.0.0",
        summary: "Swaps two Redis databases.",
        complexity: "O(N) where N is the count of clients watching or blocking on keys from both databases.",
        handler: swapdb,
        ..CommandSpec::DEFAULT
    },
];

const CONFIG_ADMIN: u32 = spec::ADMIN | spec::NOSCRIPT | spec::LOADING | spec::STALE;

const CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "config|get",
        arity: -3,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.0.0",
        summary: "Returns the effective values of configuration parameters.",
        complexity: "O(N) when N is the number of configuration parameters provided",
        handler: config_get,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|set",
        arity: -4,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.0.0",
        summary: "Sets configuration parameters in-flight.",
        complexity: "O(N) when N is the number of configuration parameters provided",
        handler: config_set,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|resetstat",
        arity: 2,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.0.0",
        summary: "Resets the server's statistics.",
        handler: config_resetstat,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|rewrite",
        arity: 2,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.8.0",
        summary: "Persists the effective configuration to file.",
        handler: config_rewrite,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Server,
        since: "5.0.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: config_help,
        ..CommandSpec::DEFAULT
    },
];

const MEMORY_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "memory|usage",
        arity: -3,
        flags: spec::READONLY,
        keys: Keys::Range {
            first: 2,
            last: 2,
            step: 1,
        },
        group: Group::Server,
        since: "4.0.0",
        summary: "Estimates the memory usage of a key.",
        complexity: "O(N) where N is the number of samples.",
        handler: memory_usage,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "memory|stats",
        arity: 2,
        group: Group::Server,
        since: "4.0.0",
        summary: "Returns details about memory usage.",
        handler: memory_stats,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "memory|doctor",
        arity: 2,
        group: Group::Server,
        since: "4.0.0",
        summary: "Outputs a memory problems report.",
        handler: memory_doctor,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "memory|malloc-stats",
        arity: 2,
        group: Group::Server,
        since: "4.0.0",
        summary: "Returns the allocator statistics.",
        complexity: "Depends on how much memory is allocated, could be slow",
        handler: memory_malloc_stats,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "memory|purge",
        arity: 2,
        group: Group::Server,
        since: "4.0.0",
        summary: "Asks the allocator to release memory.",
        complexity: "Depends on how much memory is allocated, could be slow",
        handler: memory_purge,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "memory|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Server,
        since: "4.0.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: memory_help,
        ..CommandSpec::DEFAULT
    },
];

// ---------------------------------------------------------------------------------
// Memory figures shared by INFO and MEMORY.

/// Bytes in use: the counting allocator's live heap. A process that does not
/// install it (a library embedding) falls back to the resident set size.
fn used_memory() -> u64 {
    let used = crate::alloc::allocated().unwrap_or_else(crate::alloc::rss) as u64;
    crate::alloc::note_peak(used);
    used
}

fn peak_memory(used: u64) -> u64 {
    crate::alloc::peak().max(used)
}

/// What one key costs beyond its key bytes and its value's heap: the shard map's
/// bucket (stored hash, key handle, entry) plus its hash-table index slot and
/// control byte. An estimate of the layout, not a measurement.
fn entry_overhead() -> usize {
    std::mem::size_of::<u64>()
        + std::mem::size_of::<Bytes>()
        + std::mem::size_of::<Entry>()
        + std::mem::size_of::<usize>()
        + 1
}

/// What a TTL adds: the key's handle in the shard's index of volatile keys.
fn expire_overhead() -> usize {
    std::mem::size_of::<u64>() + std::mem::size_of::<Bytes>() + std::mem::size_of::<usize>() + 1
}

/// Number of keys with a TTL. Outside EXEC nothing is locked and each shard is read
/// in turn. Inside EXEC the transaction already holds some shards: those are read
/// through its view, and the others only with a short `try_read` — waiting for them
/// would take locks out of order and could deadlock with a command that holds one of
/// them and waits for one of ours (such a shard is left out of the count).
fn volatile_keys(ctx: &mut Ctx<'_, '_>) -> usize {
    let db = &ctx.server.db;
    if !ctx.in_exec() {
        return db.volatile_len();
    }
    let view = ctx.view();
    let mut locked = vec![false; SHARDS];
    let mut n = 0;
    for (i, map) in view.shards() {
        locked[i] = true;
        n += map.volatile_len();
    }
    for (i, _) in locked.iter().enumerate().filter(|(_, l)| !**l) {
        if let Some(map) = db.shard(i).map.try_read_for(Duration::from_millis(1)) {
            n += map.volatile_len();
        }
    }
    n
}

/// Redis's `bytesToHuman`: `910.87K`, `64.00M`, `0B`.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    for unit in UNITS {
        if v < 1024.0 || unit == "P" {
            return format!("{v:.2}{unit}");
        }
        v /= 1024.0;
    }
    unreachable!("the loop returns at P")
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Unix time (seconds) the server started at.
fn start_unix_secs(server: &Server) -> u64 {
    unix_now()
        .as_secs()
        .saturating_sub(server.started.elapsed().as_secs())
}

// ---------------------------------------------------------------------------------
// INFO

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Server,
    Clients,
    Memory,
    Persistence,
    Stats,
    Replication,
    Cpu,
    Modules,
    Commandstats,
    Errorstats,
    Latencystats,
    Cluster,
    Keyspace,
    Idsets,
    Leases,
}

/// Every section in Redis's output order: (section, name as selected, header,
/// part of the default set). The reply follows this order whatever order the
/// client asked in.
const SECTIONS: [(Section, &str, &str, bool); 15] = [
    (Section::Server, "server", "Server", true),
    (Section::Clients, "clients", "Clients", true),
    (Section::Memory, "memory", "Memory", true),
    (Section::Persistence, "persistence", "Persistence", true),
    (Section::Stats, "stats", "Stats", true),
    (Section::Replication, "replication", "Replication", true),
    (Section::Cpu, "cpu", "CPU", true),
    (Section::Modules, "modules", "Modules", true),
    (Section::Commandstats, "commandstats", "Commandstats", false),
    (Section::Errorstats, "errorstats", "Errorstats", true),
    (Section::Latencystats, "latencystats", "Latencystats", false),
    (Section::Cluster, "cluster", "Cluster", true),
    (Section::Keyspace, "keyspace", "Keyspace", true),
    (Section::Idsets, "idsets", "Idsets", true),
    (Section::Leases, "leases", "Leases", true),
];

/// Which sections `INFO args…` selects. Unknown names select nothing (Redis
/// replies with an empty string for `INFO nosuchsection`).
fn selected_sections(args: &[Bytes]) -> [bool; SECTIONS.len()] {
    let mut want = [false; SECTIONS.len()];
    if args.is_empty() {
        return SECTIONS.map(|s| s.3);
    }
    for arg in args {
        if eq_ic(arg, "all") || eq_ic(arg, "everything") {
            want = [true; SECTIONS.len()];
        } else if eq_ic(arg, "default") {
            for (w, s) in want.iter_mut().zip(SECTIONS) {
                *w |= s.3;
            }
        } else if let Some(i) = SECTIONS.iter().position(|s| eq_ic(arg, s.1)) {
            want[i] = true;
        }
    }
    want
}

/// Appends `name:value\r\n`.
fn field(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "{name}:{value}\r\n");
}

fn info(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let want = selected_sections(&args[1..]);
    let mut out = String::with_capacity(4096);
    for ((section, _, header, _), _) in SECTIONS.iter().zip(want).filter(|(_, w)| *w) {
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {header}\r\n");
        match section {
            Section::Server => info_server(ctx.server, &mut out),
            Section::Clients => info_clients(ctx.server, &mut out),
            Section::Memory => info_memory(ctx.server, &mut out),
            Section::Persistence => info_persistence(ctx.server, &mut out),
            Section::Stats => info_stats(ctx.server, &mut out),
            Section::Replication => info_replication(ctx.server, &mut out),
            Section::Cpu => info_cpu(&mut out),
            Section::Commandstats => info_commandstats(ctx.server, &mut out),
            Section::Cluster => field(&mut out, "cluster_enabled", 0),
            Section::Keyspace => {
                let keys = ctx.server.db.len();
                if keys > 0 {
                    let expires = volatile_keys(ctx);
                    let avg_ttl = observe::avg_ttl(ctx.server);
                    let _ = write!(
                        out,
                        "db0:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
                    );
                }
            }
            Section::Idsets => info_idsets(ctx.server, &mut out),
            Section::Leases => info_leases(ctx.server, &mut out),
            Section::Errorstats => observe::errorstats(ctx.server, &mut out),
            Section::Latencystats => observe::latencystats(ctx.server, &mut out),
            Section::Modules => {}
        }
    }
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from(out),
    })
}

/// relcache's own section: the read-through leases (see `db::lease`).
fn info_leases(server: &Server, out: &mut String) {
    let s = &server.stats;
    field(out, "leases_out", server.db.leases_out());
    field(out, "lease_grants", s.lease_grants.get());
    field(out, "lease_waits", s.lease_waits.get());
    field(out, "lease_busy", s.lease_busy.get());
    field(out, "lease_fills", s.lease_fills.get());
    field(out, "lease_fills_refused", s.lease_fills_refused.get());
    field(out, "lease_revocations", s.lease_revocations.get());
    field(out, "lease_releases", s.lease_releases.get());
    field(out, "lease_lapses", s.lease_lapses.get());
    field(out, "lease_refusals", s.lease_refusals.get());
}

/// relcache's own section: the idset tables, from totals kept as they change.
fn info_idsets(server: &Server, out: &mut String) {
    let t = &crate::db::IDSET_TOTALS;
    let (tables, ids, slots, used, bytes) = (
        t.tables.get(),
        t.ids.get(),
        t.slots.get(),
        t.used_slots.get(),
        t.bytes.get(),
    );
    let _ = write!(
        out,
        "idset_tables:{tables}\r\nidset_ids:{ids}\r\nidset_bytes:{bytes}\r\n"
    );
    let per_id = if ids > 0 {
        bytes as f64 / ids as f64
    } else {
        0.0
    };
    let load = if slots > 0 {
        used as f64 / slots as f64
    } else {
        0.0
    };
    let _ = write!(
        out,
        "idset_bytes_per_id:{per_id:.2}\r\nidset_avg_load_factor:{load:.4}\r\n"
    );
    field(
        out,
        "idset_late_changes",
        server.stats.idset_late_changes.get(),
    );
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn info_server(server: &Server, out: &mut String) {
    let config = &server.config;
    let uptime = server.started.elapsed().as_secs();
    let os = format!(
        "{} {} {}",
        read_trimmed("/proc/sys/kernel/ostype").unwrap_or_else(|| std::env::consts::OS.to_string()),
        read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
        std::env::consts::ARCH
    );
    let hz = config.hz.load(Relaxed);
    let now = unix_now();
    let port = server.local_addr.port();
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config_file = config
        .config_file
        .read()
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let binds: Vec<String> = config
        .bind
        .read()
        .iter()
        .map(|a| format!("bind={a}"))
        .collect();
    field(out, "redis_version", crate::REDIS_VERSION);
    field(out, "redis_git_sha1", "00000000");
    field(out, "redis_git_dirty", 0);
    field(out, "redis_build_id", 0);
    field(out, "redis_mode", "standalone");
    field(out, "os", os);
    field(out, "arch_bits", usize::BITS);
    field(out, "monotonic_clock", "POSIX clock_gettime");
    field(out, "multiplexing_api", "epoll");
    field(out, "atomicvar_api", "c11-builtin");
    field(out, "process_id", std::process::id());
    field(out, "process_supervised", "no");
    field(out, "run_id", &server.run_id);
    field(out, "tcp_port", port);
    field(out, "server_time_usec", now.as_micros());
    field(out, "uptime_in_seconds", uptime);
    field(out, "uptime_in_days", uptime / 86400);
    field(out, "hz", hz);
    field(out, "configured_hz", hz);
    field(out, "lru_clock", now.as_secs() & ((1 << 24) - 1));
    field(out, "executable", exe);
    field(out, "config_file", config_file);
    field(out, "io_threads_active", 0);
    field(
        out,
        "listener0",
        format!("name=tcp,{},port={port}", binds.join(",")),
    );
    field(out, "relcache_version", crate::VERSION);
}

fn info_clients(server: &Server, out: &mut String) {
    field(out, "connected_clients", server.clients.len());
    field(out, "cluster_connections", 0);
    field(out, "maxclients", server.config.maxclients.load(Relaxed));
    field(out, "client_recent_max_input_buffer", 0);
    field(out, "client_recent_max_output_buffer", 0);
    field(out, "blocked_clients", server.stats.blocked_clients.get());
    field(out, "tracking_clients", 0);
    field(out, "pubsub_clients", 0);
    field(out, "watching_clients", 0);
    field(out, "clients_in_timeout_table", 0);
    field(out, "total_watched_keys", 0);
    field(out, "total_blocking_keys", 0);
    field(out, "total_blocking_keys_on_nokey", 0);
}

/// Total RAM, from /proc/meminfo (0 where unavailable).
fn total_system_memory() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn info_memory(server: &Server, out: &mut String) {
    let used = used_memory();
    let rss = crate::alloc::rss() as u64;
    let peak = peak_memory(used);
    let system = total_system_memory();
    let max = server.config.maxmemory.load(Relaxed);
    field(out, "used_memory", used);
    field(out, "used_memory_human", human(used));
    field(out, "used_memory_rss", rss);
    field(out, "used_memory_rss_human", human(rss));
    // Redis's split: the overhead is what the server needs with no data (measured
    // at start) plus the clients' buffers; the dataset is the rest.
    let startup = server.startup_memory as u64;
    let client_buffers: u64 = server
        .clients
        .all()
        .iter()
        .map(|c| c.qbuf.load(Relaxed) + c.obuf.load(Relaxed))
        .sum();
    let overhead = (startup + client_buffers).min(used);
    let dataset = used - overhead;
    field(out, "used_memory_startup", startup);
    field(out, "used_memory_overhead", overhead);
    field(out, "used_memory_dataset", dataset);
    field(
        out,
        "used_memory_dataset_perc",
        format!(
            "{:.2}%",
            dataset as f64 * 100.0 / (used - startup.min(used)).max(1) as f64
        ),
    );
    field(out, "used_memory_peak", peak);
    field(out, "used_memory_peak_human", human(peak));
    field(
        out,
        "used_memory_peak_perc",
        format!("{:.2}%", used as f64 * 100.0 / peak.max(1) as f64),
    );
    field(out, "total_system_memory", system);
    field(out, "total_system_memory_human", human(system));
    field(out, "maxmemory", max);
    field(out, "maxmemory_human", human(max));
    field(out, "maxmemory_policy", server.config.policy());
    field(
        out,
        "mem_fragmentation_ratio",
        format!("{:.2}", rss as f64 / used.max(1) as f64),
    );
    field(out, "mem_fragmentation_bytes", rss as i64 - used as i64);
    field(out, "mem_allocator", "libc");
    field(out, "lazyfree_pending_objects", 0);
    field(out, "lazyfreed_objects", 0);
}

fn info_persistence(server: &Server, out: &mut String) {
    field(out, "loading", 0);
    field(out, "async_loading", 0);
    field(out, "rdb_changes_since_last_save", 0);
    field(out, "rdb_bgsave_in_progress", 0);
    field(out, "rdb_last_save_time", start_unix_secs(server));
    field(out, "rdb_last_bgsave_status", "ok");
    field(out, "rdb_last_bgsave_time_sec", -1);
    field(out, "rdb_current_bgsave_time_sec", -1);
    field(out, "rdb_saves", 0);
    field(out, "aof_enabled", 0);
    field(out, "aof_rewrite_in_progress", 0);
    field(out, "aof_rewrite_scheduled", 0);
    field(out, "aof_last_rewrite_time_sec", -1);
    field(out, "aof_current_rewrite_time_sec", -1);
    field(out, "aof_last_bgrewrite_status", "ok");
    field(out, "aof_rewrites", 0);
    field(out, "aof_last_write_status", "ok");
}

fn info_stats(server: &Server, out: &mut String) {
    let s = &server.stats;
    field(
        out,
        "total_connections_received",
        s.total_connections_received.get(),
    );
    field(
        out,
        "total_commands_processed",
        s.total_commands_processed.get(),
    );
    field(
        out,
        "instantaneous_ops_per_sec",
        observe::instantaneous_ops_per_sec(server),
    );
    field(out, "total_net_input_bytes", s.total_net_input_bytes.get());
    field(
        out,
        "total_net_output_bytes",
        s.total_net_output_bytes.get(),
    );
    field(out, "total_net_repl_input_bytes", 0);
    field(out, "total_net_repl_output_bytes", 0);
    field(
        out,
        "instantaneous_input_kbps",
        observe::instantaneous_input_kbps(server),
    );
    field(
        out,
        "instantaneous_output_kbps",
        observe::instantaneous_output_kbps(server),
    );
    field(out, "instantaneous_input_repl_kbps", "0.00");
    field(out, "instantaneous_output_repl_kbps", "0.00");
    field(out, "rejected_connections", s.rejected_connections.get());
    field(out, "sync_full", 0);
    field(out, "sync_partial_ok", 0);
    field(out, "sync_partial_err", 0);
    field(out, "expired_keys", s.expired_keys.get());
    field(out, "expired_stale_perc", "0.00");
    field(out, "expired_time_cap_reached_count", 0);
    field(out, "expire_cycle_cpu_milliseconds", 0);
    field(out, "evicted_keys", s.evicted_keys.get());
    field(out, "evicted_clients", 0);
    field(out, "total_eviction_exceeded_time", 0);
    field(out, "current_eviction_exceeded_time", 0);
    field(out, "keyspace_hits", s.keyspace_hits.get());
    field(out, "keyspace_misses", s.keyspace_misses.get());
    field(out, "pubsub_channels", 0);
    field(out, "pubsub_patterns", 0);
    field(out, "pubsubshard_channels", 0);
    field(out, "latest_fork_usec", 0);
    field(out, "total_forks", 0);
    field(out, "migrate_cached_sockets", 0);
    field(out, "slave_expires_tracked_keys", 0);
    field(out, "tracking_total_keys", 0);
    field(out, "tracking_total_items", 0);
    field(out, "tracking_total_prefixes", 0);
    field(out, "unexpected_error_replies", 0);
    field(out, "total_error_replies", s.total_error_replies.get());
    field(out, "dump_payload_sanitizations", 0);
    field(out, "io_threaded_reads_processed", 0);
    field(out, "io_threaded_writes_processed", 0);
    field(
        out,
        "client_query_buffer_limit_disconnections",
        s.client_query_buffer_limit_disconnections.get(),
    );
    field(
        out,
        "client_output_buffer_limit_disconnections",
        s.client_output_buffer_limit_disconnections.get(),
    );
    field(out, "reply_buffer_shrinks", 0);
    field(out, "reply_buffer_expands", 0);
    field(out, "acl_access_denied_auth", 0);
    field(out, "acl_access_denied_cmd", 0);
    field(out, "acl_access_denied_key", 0);
    field(out, "acl_access_denied_channel", 0);
}

fn info_replication(server: &Server, out: &mut String) {
    field(out, "role", "master");
    field(out, "connected_slaves", 0);
    field(out, "master_failover_state", "no-failover");
    field(out, "master_replid", &server.run_id);
    field(out, "master_replid2", "0".repeat(40));
    field(out, "master_repl_offset", 0);
    field(out, "second_repl_offset", -1);
    field(out, "repl_backlog_active", 0);
    field(out, "repl_backlog_size", 1024 * 1024);
    field(out, "repl_backlog_first_byte_offset", 0);
    field(out, "repl_backlog_histlen", 0);
}

/// (user, system) CPU seconds of a `/proc/.../stat` file, and of its reaped
/// children. Linux reports them in clock ticks, which are 1/100 s on every
/// mainstream configuration (`USER_HZ`).
fn cpu_times(path: &str) -> Option<[f64; 4]> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may contain spaces: fields count from after it.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|t| t as f64 / 100.0)
    };
    // Field n of proc(5) is at index n - 3 here: utime 14, stime 15, cutime 16, cstime 17.
    Some([tick(11)?, tick(12)?, tick(13)?, tick(14)?])
}

fn info_cpu(out: &mut String) {
    let [user, sys, cuser, csys] = cpu_times("/proc/self/stat").unwrap_or_default();
    let main = format!("/proc/self/task/{}/stat", std::process::id());
    let [muser, msys, ..] = cpu_times(&main).unwrap_or_default();
    field(out, "used_cpu_sys", format!("{sys:.6}"));
    field(out, "used_cpu_user", format!("{user:.6}"));
    field(out, "used_cpu_sys_children", format!("{csys:.6}"));
    field(out, "used_cpu_user_children", format!("{cuser:.6}"));
    field(out, "used_cpu_sys_main_thread", format!("{msys:.6}"));
    field(out, "used_cpu_user_main_thread", format!("{muser:.6}"));
}

fn info_commandstats(server: &Server, out: &mut String) {
    let mut rows: Vec<(&str, u64, u64, u64, u64)> = registry()
        .all
        .iter()
        .zip(&server.cmdstats)
        .map(|(spec, s)| {
            (
                spec.name,
                s.calls.get(),
                s.nanos.get() / 1000,
                s.rejected_calls.get(),
                s.failed_calls.get(),
            )
        })
        .filter(|&(_, calls, _, rejected, failed)| calls > 0 || rejected > 0 || failed > 0)
        .collect();
    rows.sort_unstable_by_key(|r| r.0);
    for (name, calls, usec, rejected, failed) in rows {
        let per_call = if calls > 0 {
            usec as f64 / calls as f64
        } else {
            0.0
        };
        let _ = write!(
            out,
            "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}\r\n"
        );
    }
}

// ---------------------------------------------------------------------------------
// CONFIG

fn config_get(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let patterns: Vec<&[u8]> = args[2..].iter().map(|a| &a[..]).collect();
    let pairs = ctx.server.config.get_matching(&patterns);
    Ok(Frame::Map(
        pairs
            .into_iter()
            .map(|(name, value)| (Frame::bulk(name), Frame::bulk(value)))
            .collect(),
    ))
}

/// `CONFIG SET name value [name value …]`: every name is checked (known, mutable,
/// not repeated) and every value validated before anything changes; if applying one
/// still fails, the ones already applied are restored, so the command takes effect
/// entirely or not at all.
fn config_set(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let pairs: Vec<(String, String)> = args[2..]
        .chunks(2)
        .map(|p| {
            (
                String::from_utf8_lossy(&p[0]).into_owned(),
                String::from_utf8_lossy(&p[1]).into_owned(),
            )
        })
        .collect();

    // Names first, as Redis: the first problem found wins, but an unknown name is
    // reported only if nothing before it was already wrong.
    let mut params = Vec::with_capacity(pairs.len());
    let mut problem: Option<ConfigError> = None;
    for (name, _) in &pairs {
        let Some(p) = PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(name)) else {
            problem.get_or_insert_with(|| ConfigError::Unknown(name.clone()));
            continue;
        };
        if problem.is_some() {
            continue;
        }
        let why = if !p.mutable {
            "can't set immutable config"
        } else if params
            .iter()
            .any(|q: &&crate::config::Param| q.name == p.name)
        {
            "duplicate parameter"
        } else {
            params.push(p);
            continue;
        };
        problem = Some(ConfigError::Invalid {
            name: name.clone(),
            why: why.into(),
        });
    }
    if let Some(e) = problem {
        return Err(CmdError::err(e.to_string()));
    }

    // Values: validated on a scratch configuration, so a bad value changes nothing.
    let scratch = Config::default();
    for (p, (_, value)) in params.iter().zip(&pairs) {
        scratch
            .set(p.name, value, false)
            .map_err(|e| CmdError::err(e.to_string()))?;
    }

    let config = &ctx.server.config;
    let backup: Vec<String> = params
        .iter()
        .map(|p| config.get(p.name).unwrap_or_default())
        .collect();
    for (i, (p, (_, value))) in params.iter().zip(&pairs).enumerate() {
        if let Err(e) = config.set(p.name, value, false) {
            for (q, old) in params[..i].iter().zip(&backup) {
                let _ = config.set(q.name, old, true);
            }
            return Err(CmdError::err(e.to_string()));
        }
    }

    // A lower maxmemory takes effect now, as in Redis, not at the next write. Inside
    // EXEC the transaction holds shard locks the evictor would need: the next
    // write after it evicts instead.
    if params.iter().any(|p| p.name == "maxmemory") && !ctx.in_exec() {
        let _ = ctx.server.make_room(0, false);
    }
    Ok(Frame::ok())
}

fn config_resetstat(ctx: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    let server = ctx.server;
    server.stats.reset();
    server.cmdstats.iter().for_each(|s| s.reset());
    server.observe.reset_stats();
    crate::alloc::reset_peak();
    used_memory();
    Ok(Frame::ok())
}

fn config_rewrite(ctx: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    let path = ctx.server.config.config_file.read().clone();
    let Some(path) = path else {
        return Err(CmdError::err("The server is running without a config file"));
    };
    rewrite_config_file(&ctx.server.config, &path).map_err(|e| {
        tracing::warn!(path = %path.display(), error = %e, "CONFIG REWRITE failed");
        CmdError::err(format!("Rewriting config file: {e}"))
    })?;
    tracing::info!(path = %path.display(), "CONFIG REWRITE executed with success");
    Ok(Frame::ok())
}

/// Quotes a config value the way `split_args` reads it back.
fn quote_config_value(v: &str) -> String {
    let plain = !v.is_empty()
        && !v
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\');
    if plain {
        return v.to_string();
    }
    let mut q = String::with_capacity(v.len() + 2);
    q.push('"');
    for c in v.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Rewrites the config file as Redis does: lines of known parameters get their
/// current value in place (repeats of a parameter are dropped), every other line
/// (comments, unknown directives) stays as it was, and parameters that differ from
/// their default and are not in the file yet are appended under a marker. The new
/// file replaces the old one with a rename, so a crash never leaves half a file.
fn rewrite_config_file(config: &Config, path: &Path) -> std::io::Result<()> {
    const MARKER: &str = "# Generated by CONFIG REWRITE";
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let line_for = |name: &str| {
        format!(
            "{name} {}\n",
            quote_config_value(&config.get(name).unwrap_or_default())
        )
    };
    let mut seen = HashSet::new();
    let mut marked = false;
    let mut out = String::with_capacity(old.len() + 256);
    for line in old.lines() {
        let trimmed = line.trim();
        // The marker is kept where it is, and written only once.
        marked |= trimmed == MARKER;
        let first = if trimmed.starts_with('#') {
            None
        } else {
            split_args(trimmed).and_then(|w| w.into_iter().next())
        };
        match first.and_then(|n| PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(&n))) {
            Some(p) => {
                if seen.insert(p.name) {
                    out.push_str(&line_for(p.name));
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let defaults = Config::default();
    for p in PARAMS.iter().filter(|p| !seen.contains(p.name)) {
        if config.get(p.name) == defaults.get(p.name) {
            continue;
        }
        if !marked {
            out.push_str(MARKER);
            out.push('\n');
            marked = true;
        }
        out.push_str(&line_for(p.name));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, path)
}

/// A HELP reply: one status line each, as Redis's `addReplyHelp`.
fn help(command: &str, lines: &[&str]) -> Frame {
    let mut out = Vec::with_capacity(lines.len() + 3);
    out.push(Frame::simple(format!(
        "{command} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    )));
    out.extend(lines.iter().map(|l| Frame::simple(l.to_string())));
    out.push(Frame::simple("HELP"));
    out.push(Frame::simple("    Prints this help."));
    Frame::Array(out)
}

fn config_help(_: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    Ok(help(
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    ))
}

// ---------------------------------------------------------------------------------
// Keyspace-wide and time commands

fn dbsize(ctx: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    Ok(Frame::Integer(ctx.server.db.len() as i64))
}

/// FLUSHDB and FLUSHALL (one database: the same thing). `ASYNC` is accepted and
/// runs synchronously: the shards are cleared under their write locks either way.
fn flush(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    match args {
        [_] => {}
        [_, mode] if eq_ic(mode, "async") || eq_ic(mode, "sync") => {}
        _ => return Err(CmdError::Syntax),
    }
    ctx.view().clear_all();
    Ok(Frame::ok())
}

fn time(_: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    let now = unix_now();
    Ok(Frame::Array(vec![
        Frame::bulk(now.as_secs().to_string()),
        Frame::bulk(now.subsec_micros().to_string()),
    ]))
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]. There is nothing to save and no
/// replica to wait for, so every accepted form shuts down at once: the server stops
/// accepting, every connection is closed, and the process exits with status 0. Like
/// Redis, the client gets no reply — the connection just closes.
fn shutdown(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let (mut save, mut nosave, mut abort) = (false, false, false);
    let mut other_flags = false;
    for arg in &args[1..] {
        if eq_ic(arg, "nosave") {
            nosave = true;
        } else if eq_ic(arg, "save") {
            save = true;
        } else if eq_ic(arg, "now") || eq_ic(arg, "force") {
            other_flags = true;
        } else if eq_ic(arg, "abort") {
            abort = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if (abort && (save || nosave || other_flags)) || (save && nosave) {
        return Err(CmdError::Syntax);
    }
    if abort {
        // A shutdown never waits for anything here, so none is ever in progress.
        return Err(CmdError::err("No shutdown in progress."));
    }
    if ctx.in_exec() {
        // SHUTDOWN is no_multi; this only guards a transaction that queued it anyway.
        return Err(CmdError::err("Command not allowed inside a transaction"));
    }
    tracing::warn!(client = ctx.session.id(), "user requested shutdown");
    ctx.server.shutdown.cancel();
    ctx.close_without_reply();
    Ok(Frame::ok())
}

fn lastsave(ctx: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    // Nothing is ever saved: the dataset is exactly as durable as at start.
    Ok(Frame::Integer(start_unix_secs(ctx.server) as i64))
}

/// SAVE and BGSAVE: refused rather than acknowledged, so nobody believes a cache
/// that never writes to disk has made a snapshot.
fn no_persistence(_: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    Err(CmdError::err("relcache does not persist data"))
}

fn swapdb(_: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let index = |arg: &[u8], which: &str| {
        super::parse_i64_opt(arg)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| CmdError::err(format!("invalid {which} DB index")))
    };
    let a = index(&args[1], "first")?;
    let b = index(&args[2], "second")?;
    if a != 0 || b != 0 {
        return Err(CmdError::err("DB index is out of range"));
    }
    Ok(Frame::ok())
}

// ---------------------------------------------------------------------------------
// MEMORY

/// MEMORY USAGE key [SAMPLES count]: the key's bytes, its value's heap and the
/// fixed per-entry overhead of [`entry_overhead`] (plus [`expire_overhead`] for a
/// key with a TTL). Values are measured whole, so SAMPLES is validated and ignored.
fn memory_usage(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let mut i = 3;
    while i < args.len() {
        if eq_ic(&args[i], "samples") && i + 1 < args.len() {
            if parse_i64(&args[i + 1])? < 0 {
                return Err(CmdError::Syntax);
            }
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = &args[2];
    Ok(match ctx.view().peek(key) {
        None => Frame::Null,
        Some(e) => {
            let ttl = if e.expire_at().is_some() {
                expire_overhead()
            } else {
                0
            };
            Frame::Integer((key.len() + e.value().heap_size() + entry_overhead() + ttl) as i64)
        }
    })
}

fn memory_stats(ctx: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    let server = ctx.server;
    let used = used_memory();
    let peak = peak_memory(used);
    let rss = crate::alloc::rss() as u64;
    let keys = server.db.len() as u64;
    let expires = volatile_keys(ctx) as u64;
    let clients: u64 = server
        .clients
        .all()
        .iter()
        .map(|c| c.qbuf.load(Relaxed) + c.obuf.load(Relaxed))
        .sum();
    let main = keys * entry_overhead() as u64;
    let expires_overhead = expires * expire_overhead() as u64;
    let overhead = main + expires_overhead + clients;
    let dataset = used.saturating_sub(overhead);
    let int = |n: u64| Frame::Integer(n as i64);
    let key = |k: &'static str| Frame::bulk(k);
    let mut m = vec![
        (key("peak.allocated"), int(peak)),
        (key("total.allocated"), int(used)),
        (key("startup.allocated"), int(0)),
        (key("replication.backlog"), int(0)),
        (key("clients.slaves"), int(0)),
        (key("clients.normal"), int(clients)),
        (key("cluster.links"), int(0)),
        (key("aof.buffer"), int(0)),
        (key("lua.caches"), int(0)),
        (key("functions.caches"), int(0)),
    ];
    if keys > 0 {
        m.push((
            key("db.0"),
            Frame::Map(vec![
                (key("overhead.hashtable.main"), int(main)),
                (key("overhead.hashtable.expires"), int(expires_overhead)),
            ]),
        ));
    }
    m.extend([
        (key("overhead.total"), int(overhead)),
        (key("keys.count"), int(keys)),
        (
            key("keys.bytes-per-key"),
            int(used.checked_div(keys).unwrap_or(0)),
        ),
        (key("dataset.bytes"), int(dataset)),
        (
            key("dataset.percentage"),
            Frame::Double(dataset as f64 * 100.0 / used.max(1) as f64),
        ),
        (
            key("peak.percentage"),
            Frame::Double(used as f64 * 100.0 / peak.max(1) as f64),
        ),
        (
            key("fragmentation"),
            Frame::Double(rss as f64 / used.max(1) as f64),
        ),
        (
            key("fragmentation.bytes"),
            Frame::Integer(rss as i64 - used as i64),
        ),
    ]);
    Ok(Frame::Map(m))
}

fn memory_doctor(ctx: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    let used = used_memory();
    let text = if used < 5 * 1024 * 1024 || ctx.server.db.is_empty() {
        "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting."
    } else {
        "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base."
    };
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from_static(text.as_bytes()),
    })
}

fn memory_malloc_stats(_: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from_static(b"Stats not supported for the current allocator"),
    })
}

fn memory_purge(_: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    // The system allocator has no purge call; freed memory is returned as it goes.
    Ok(Frame::ok())
}

fn memory_help(_: &mut Ctx<'_, '_>, _: &[Bytes]) -> CmdResult {
    Ok(help(
        "MEMORY",
        &[
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    #[test]
    fn human_sizes_match_redis() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(932_728), "910.87K");
        assert_eq!(human(64 << 20), "64.00M");
        assert_eq!(human(3 << 30), "3.00G");
    }

    #[test]
    fn section_selection() {
        let names = |w: [bool; SECTIONS.len()]| {
            SECTIONS
                .iter()
                .zip(w)
                .filter(|(_, w)| *w)
                .map(|(s, _)| s.1)
                .collect::<Vec<_>>()
        };
        let default = names(selected_sections(&[]));
        assert!(default.contains(&"keyspace") && !default.contains(&"commandstats"));
        assert_eq!(names(selected_sections(&args(&["default"]))), default);
        assert_eq!(
            names(selected_sections(&args(&["ALL"]))).len(),
            SECTIONS.len()
        );
        assert_eq!(
            names(selected_sections(&args(&["keyspace", "CPU"]))),
            ["cpu", "keyspace"]
        );
        assert!(names(selected_sections(&args(&["nosuch"]))).is_empty());
    }

    #[test]
    fn config_values_round_trip_through_quoting() {
        for v in ["", "plain", "a b", "say \"hi\"", "back\\slash", "new\nline"] {
            let line = format!("requirepass {}", quote_config_value(v));
            assert_eq!(split_args(&line).unwrap(), ["requirepass", v], "{line}");
        }
    }

    #[test]
    fn rewrite_keeps_comments_and_updates_values() {
        let dir = std::env::temp_dir().join(format!("relcache-rewrite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("redis.conf");
        std::fs::write(
            &path,
            "# my cache\nmaxclients 7\nunknown-directive 1\nmaxclients 8\n",
        )
        .unwrap();
        let c = Config::default();
        c.set("maxclients", "9", false).unwrap();
        c.set("requirepass", "p w", false).unwrap();
        rewrite_config_file(&c, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "# my cache\nmaxclients 9\nunknown-directive 1\n# Generated by CONFIG REWRITE\nrequirepass \"p w\"\n"
        );
        // Rewriting again is stable, and the file loads back to the same values.
        rewrite_config_file(&c, &path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn proc_stat_parses() {
        let t = cpu_times("/proc/self/stat").expect("Linux /proc");
        assert!(t.iter().all(|v| *v >= 0.0));
    }
}
