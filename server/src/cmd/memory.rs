//! MEMORY (USAGE, STATS, DOCTOR, MALLOC-STATS, PURGE, HELP), and the memory
//! figures INFO's `memory` section shares with it.
//!
//! relcache counts its own heap (`crate::alloc`), so `used_memory` is exact; what a
//! key costs beyond its bytes is an estimate of the shard map's layout, not a
//! measurement. Only MEMORY USAGE (one key) goes through a [`View`](crate::db::View).

use std::time::Duration;

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, Ctx};
use crate::db::{Entry, SHARDS};
use crate::error::{CmdError, CmdResult};
use crate::server::Server;

pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "memory",
    arity: -2,
    group: Group::Server,
    since: "4.0.0",
    summary: "A container for memory diagnostics commands.",
    complexity: "Depends on subcommand.",
    subcommands: MEMORY_SUBCOMMANDS,
    ..CommandSpec::DEFAULT
}];

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
pub(super) fn used_memory() -> u64 {
    let used = crate::alloc::allocated().unwrap_or_else(crate::alloc::rss) as u64;
    crate::alloc::note_peak(used);
    used
}

pub(super) fn peak_memory(used: u64) -> u64 {
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
pub(super) fn volatile_keys(ctx: &mut Ctx<'_, '_>) -> usize {
    let db = &ctx.server.db;
    if !ctx.in_exec() {
        if ctx.server.scripts.running.any() {
            // A script may hold a shard for as long as it runs: wait off the worker.
            return crate::offload::offload(|| db.volatile_len());
        }
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

/// Bytes the clients hold: their buffers and per-connection state
/// (`crate::client_memory`).
pub(super) fn client_buffers(server: &Server) -> u64 {
    server.clients.memory()
}

/// Redis's `bytesToHuman`: `910.87K`, `64.00M`, `0B`.
pub(super) fn human(n: u64) -> String {
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

// ---------------------------------------------------------------------------------
// MEMORY

/// MEMORY USAGE key [SAMPLES count]: the key's bytes, its value's heap and the
/// fixed per-entry overhead of [`entry_overhead`] (plus [`expire_overhead`] for a
/// key with a TTL). Values are measured whole, so SAMPLES is validated and ignored.
fn memory_usage(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let mut i = 3;
    while i < args.len() {
        if eq_ic(args[i], "samples") && i + 1 < args.len() {
            if parse_i64(args[i + 1])? < 0 {
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

fn memory_stats(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let server = ctx.server;
    let used = used_memory();
    let peak = peak_memory(used);
    let rss = crate::alloc::rss() as u64;
    let keys = server.db.len() as u64;
    let expires = volatile_keys(ctx) as u64;
    let clients = client_buffers(server);
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

fn memory_doctor(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
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

fn memory_malloc_stats(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from_static(b"Stats not supported for the current allocator"),
    })
}

/// Gives the memory freed so far back to the OS, as Redis purges jemalloc's
/// dirty pages: glibc keeps what small allocations free in its arenas, so after
/// a FLUSHALL the process stays as big as it was. Frees still queued for the
/// lazy-free thread are waited for first; both off the loop, since trimming a
/// heap of gigabytes takes a while.
fn memory_purge(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    crate::offload::offload(|| {
        crate::offload::wait_freed();
        crate::alloc::purge();
    });
    Ok(Frame::ok())
}

fn memory_help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
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

    #[test]
    fn human_sizes_match_redis() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(932_728), "910.87K");
        assert_eq!(human(64 << 20), "64.00M");
        assert_eq!(human(3 << 30), "3.00G");
    }
}
