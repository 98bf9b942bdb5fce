//! INFO: Redis 7.4's sections, field names and order, so tools that scrape it work
//! unchanged, plus relcache's own `idsets`, `leases` and `loops` sections.
//!
//! What relcache does not have, it reports truthfully rather than inventing: no
//! append-only file (`aof_*` stay at zero), no replication (`role:master`, no
//! replicas). INFO locks nothing outside EXEC: it reads lock-free counters and
//! key counts.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::memory::{client_buffers, human, peak_memory, used_memory, volatile_keys};
use super::server::unix_now;
use super::spec::{self, CommandSpec, Group};
use super::{eq_ic, registry, Ctx};
use crate::error::CmdResult;
use crate::observe::info as observe;
use crate::server::Server;

pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "info",
    arity: -1,
    flags: spec::LOADING | spec::STALE,
    group: Group::Server,
    summary: "Returns information and statistics about the server.",
    handler: info,
    ..CommandSpec::DEFAULT
}];

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
    Loops,
}

/// Every section in Redis's output order: (section, name as selected, header,
/// part of the default set). The reply follows this order whatever order the
/// client asked in.
const SECTIONS: [(Section, &str, &str, bool); 16] = [
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
    (Section::Loops, "loops", "Loops", true),
];

/// Which sections `INFO args…` selects. Unknown names select nothing (Redis
/// replies with an empty string for `INFO nosuchsection`).
fn selected_sections(args: &[&[u8]]) -> [bool; SECTIONS.len()] {
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

fn info(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
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
            Section::Cluster => field(
                &mut out,
                "cluster_enabled",
                ctx.server.cluster.enabled() as u8,
            ),
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
            Section::Loops => info_loops(ctx.server, &mut out),
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

/// relcache's own section: the client loops, how many take connections now (1
/// while gathered, see `gather`), the connections on each, how many moved to
/// the loop their scripts' keys call home (see `script::affinity`) and how
/// many moved to gather or spread.
fn info_loops(server: &Server, out: &mut String) {
    let Some(view) = server.loops.get() else {
        field(out, "loops", 0);
        return;
    };
    let s = &server.stats;
    field(out, "loops", view.connections.len());
    field(out, "loops_active", view.active.load(Relaxed));
    field(out, "loop_gathers", s.loop_gathers.get());
    field(out, "loop_spreads", s.loop_spreads.get());
    field(out, "balance_moves", s.balance_moves.get());
    field(out, "connection_moves", s.connection_moves.get());
    for (i, conns) in view.connections.iter().enumerate() {
        let _ = write!(out, "loop{i}:connections={}\r\n", conns.load(Relaxed));
    }
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
    field(out, "tracking_clients", server.db.tracking.clients());
    field(out, "pubsub_clients", server.pubsub.clients());
    field(out, "watching_clients", server.clients.watching());
    field(out, "clients_in_timeout_table", 0);
    field(out, "total_watched_keys", server.db.watched_keys());
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
    let overhead = (startup + client_buffers(server)).min(used);
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
    // Each thread that has run a script has a Lua state of its own; relcache has
    // no FUNCTION libraries, and so no state for them.
    let lua = crate::script::runtime::vm_memory();
    let scripts = server.scripts.memory() as u64;
    field(out, "used_memory_lua", lua);
    field(out, "used_memory_vm_eval", lua);
    field(out, "used_memory_lua_human", human(lua));
    field(out, "used_memory_scripts_eval", scripts);
    field(out, "number_of_cached_scripts", server.scripts.count());
    field(out, "number_of_functions", 0);
    field(out, "number_of_libraries", 0);
    field(out, "used_memory_vm_functions", 0);
    field(out, "used_memory_vm_total", lua);
    field(out, "used_memory_vm_total_human", human(lua));
    field(out, "used_memory_functions", 0);
    field(out, "used_memory_scripts", scripts);
    field(out, "used_memory_scripts_human", human(scripts));
    field(out, "maxmemory", max);
    field(out, "maxmemory_human", human(max));
    field(out, "maxmemory_policy", server.config.policy());
    field(
        out,
        "mem_fragmentation_ratio",
        format!("{:.2}", rss as f64 / used.max(1) as f64),
    );
    field(out, "mem_fragmentation_bytes", rss as i64 - used as i64);
    // Client memory is left out of what maxmemory compares with (see
    // `client_memory`); Redis leaves out only replication and AOF buffers.
    let clients = server.clients.memory();
    field(out, "mem_not_counted_for_evict", clients);
    field(out, "mem_replication_backlog", 0);
    field(out, "mem_total_replication_buffers", 0);
    field(out, "mem_clients_slaves", 0);
    field(out, "mem_clients_normal", clients);
    field(out, "mem_cluster_links", 0);
    field(out, "mem_aof_buffer", 0);
    field(out, "mem_allocator", "libc");
    // Its maps grow all at once, never rehashing step by step as Redis's dicts.
    field(out, "mem_overhead_db_hashtable_rehashing", 0);
    field(
        out,
        "lazyfree_pending_objects",
        crate::offload::pending_frees(),
    );
    field(out, "lazyfreed_objects", crate::offload::lazyfreed());
}

fn info_persistence(server: &Server, out: &mut String) {
    let p = &server.persist;
    let now_ms = crate::db::now_ms();
    let loading = p.loading();
    field(out, "loading", u8::from(loading));
    field(out, "async_loading", 0);
    if loading {
        // Redis prints these only while loading.
        let started = p.loading_start_ms.load(Relaxed);
        field(out, "loading_start_time", started / 1000);
        field(
            out,
            "loading_total_bytes",
            p.loading_total_bytes.load(Relaxed),
        );
        field(
            out,
            "loading_loaded_keys",
            p.loading_loaded_keys.load(Relaxed),
        );
        field(out, "loading_elapsed_ms", now_ms.saturating_sub(started));
    }
    field(out, "current_cow_peak", 0);
    field(out, "current_cow_size", 0);
    field(out, "current_cow_size_age", 0);
    field(out, "current_fork_perc", "0.00");
    let started = p.current_started_ms.load(Relaxed);
    let (processed, total) = if started == 0 {
        (0, 0)
    } else {
        (
            p.current_keys_processed.load(Relaxed),
            p.current_keys_total.load(Relaxed),
        )
    };
    field(out, "current_save_keys_processed", processed);
    field(out, "current_save_keys_total", total);
    field(
        out,
        "rdb_changes_since_last_save",
        p.changes_since_save(server),
    );
    let bg = p.bgsave_in_progress();
    field(out, "rdb_bgsave_in_progress", u8::from(bg));
    field(out, "rdb_last_save_time", p.last_save_secs.load(Relaxed));
    field(
        out,
        "rdb_last_bgsave_status",
        if p.last_bgsave_ok() { "ok" } else { "err" },
    );
    field(out, "rdb_last_bgsave_time_sec", p.last_bgsave_secs());
    let current = if bg && started != 0 {
        (now_ms.saturating_sub(started) / 1000) as i64
    } else {
        -1
    };
    field(out, "rdb_current_bgsave_time_sec", current);
    field(out, "rdb_saves", p.saves.load(Relaxed));
    // No fork, so no copy-on-write pages: the value bytes one batch of the last
    // save held handles on, which writes during the save may have had to copy.
    field(out, "rdb_last_cow_size", p.last_pinned_bytes.load(Relaxed));
    field(
        out,
        "rdb_last_load_keys_expired",
        p.last_load_keys_expired.load(Relaxed),
    );
    field(
        out,
        "rdb_last_load_keys_loaded",
        p.last_load_keys_loaded.load(Relaxed),
    );
    // relcache's own: the recorded time of the snapshot loaded at start (every
    // change before it is in the data), 0 if the process started empty. The
    // relation tier replays its changes from here.
    field(
        out,
        "rdb_last_load_ctime_ms",
        p.last_load_ctime_ms.load(Relaxed),
    );
    field(out, "aof_enabled", 0);
    field(out, "aof_rewrite_in_progress", 0);
    field(out, "aof_rewrite_scheduled", 0);
    field(out, "aof_last_rewrite_time_sec", -1);
    field(out, "aof_current_rewrite_time_sec", -1);
    field(out, "aof_last_bgrewrite_status", "ok");
    field(out, "aof_rewrites", 0);
    field(out, "aof_rewrites_consecutive_failures", 0);
    field(out, "aof_last_write_status", "ok");
    field(out, "aof_last_cow_size", 0);
    field(out, "module_fork_in_progress", 0);
    field(out, "module_fork_last_cow_size", 0);
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
    // Hash fields' expiries (7.4); relcache has no hashes.
    field(out, "expired_subkeys", 0);
    field(out, "expired_keys", s.expired_keys.get());
    field(out, "expired_stale_perc", "0.00");
    field(out, "expired_time_cap_reached_count", 0);
    field(out, "expire_cycle_cpu_milliseconds", 0);
    field(out, "evicted_keys", s.evicted_keys.get());
    field(
        out,
        "evicted_keys_background",
        s.evicted_keys_background.get(),
    );
    field(out, "evicted_clients", s.evicted_clients.get());
    field(out, "evicted_scripts", s.evicted_scripts.get());
    let (current_over, total_over) = server.over_limit.millis();
    field(out, "total_eviction_exceeded_time", total_over);
    field(out, "current_eviction_exceeded_time", current_over);
    field(out, "keyspace_hits", s.keyspace_hits.get());
    field(out, "keyspace_misses", s.keyspace_misses.get());
    let (channels, patterns) = server.pubsub.counts();
    field(out, "pubsub_channels", channels);
    field(out, "pubsub_patterns", patterns);
    field(out, "pubsubshard_channels", server.pubsub.shard_count());
    field(out, "latest_fork_usec", 0);
    field(out, "total_forks", 0);
    field(out, "migrate_cached_sockets", 0);
    field(out, "slave_expires_tracked_keys", 0);
    let (keys, items) = server.db.tracking.totals();
    field(out, "tracking_total_keys", keys);
    field(out, "tracking_total_items", items);
    field(
        out,
        "tracking_total_prefixes",
        server.tracking.prefix_count(),
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

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
    fn proc_stat_parses() {
        let t = cpu_times("/proc/self/stat").expect("Linux /proc");
        assert!(t.iter().all(|v| *v >= 0.0));
    }
}
