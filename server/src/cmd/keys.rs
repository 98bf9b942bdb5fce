//! The generic key family: DEL, UNLINK, EXISTS, TYPE, KEYS, SCAN, RANDOMKEY, RENAME,
//! RENAMENX, TOUCH and OBJECT. The expiry commands are `expire.rs`'s.
//!
//! These commands work on keys whatever their type, so they only look at an entry's
//! expiry, recency and type name, never inside a value. Replies, options and error
//! texts follow Redis 7.2 (`src/db.c`, `src/expire.c`, `src/object.c`).
//!
//! Not here: DBSIZE / FLUSHDB / FLUSHALL (the server family), and the active expiry
//! sweep (`db::expire`); this file only implements lazy expiry's visible side (an
//! expired key reads as absent, and a write that meets one reaps it).

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use rand::Rng;
use relcache_protocol::resp::Frame;

use super::ids::parse_cursor;
use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, parse_i64_opt, Ctx};
use crate::db::{Entry, Free, ShardMap, View, SHARDS};
use crate::error::{CmdError, CmdResult};
use crate::glob;
use crate::notify;

/// Key at `args[2]` (the OBJECT subcommands).
const KEY_AT_2: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};

const OBJECT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "object|encoding",
        arity: 3,
        flags: spec::READONLY,
        keys: KEY_AT_2,
        since: "2.2.3",
        summary: "Returns the internal encoding of a Redis object.",
        handler: object_encoding,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "object|freq",
        arity: 3,
        flags: spec::READONLY,
        keys: KEY_AT_2,
        since: "4.0.0",
        summary: "Returns the logarithmic access frequency counter of a Redis object.",
        handler: object_freq,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "object|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        since: "6.2.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: object_help,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "object|idletime",
        arity: 3,
        flags: spec::READONLY,
        keys: KEY_AT_2,
        since: "2.2.3",
        summary: "Returns the time since the last access to a Redis object.",
        handler: object_idletime,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "object|refcount",
        arity: 3,
        flags: spec::READONLY,
        keys: KEY_AT_2,
        since: "2.2.3",
        summary: "Returns the reference count of a value of a key.",
        handler: object_refcount,
        ..CommandSpec::DEFAULT
    },
];

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "del",
        arity: -2,
        flags: spec::WRITE,
        keys: Keys::ALL_ARGS,
        summary: "Deletes one or more keys.",
        complexity: "O(N) where N is the number of keys that will be removed. When a key to remove holds a value other than a string, the individual complexity for this key is O(M) where M is the number of elements in the list, set, sorted set or hash. Removing a single key that holds a string value is O(1).",
        handler: del,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "unlink",
        arity: -2,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ALL_ARGS,
        since: "4.0.0",
        summary: "Asynchronously deletes one or more keys.",
        complexity: "O(1) for each key removed regardless of its size. Then the command does O(N) work in a different thread in order to reclaim memory, where N is the number of allocations the deleted objects where composed of.",
        handler: unlink,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "exists",
        arity: -2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ALL_ARGS,
        summary: "Determines whether one or more keys exist.",
        complexity: "O(N) where N is the number of keys to check.",
        handler: exists,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "type",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        summary: "Determines the type of value stored at a key.",
        handler: type_cmd,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "keys",
        arity: 2,
        flags: spec::READONLY,
        keys: Keys::All,
        summary: "Returns all key names that match a pattern.",
        complexity: "O(N) with N being the number of keys in the database, under the assumption that the key names in the database and the given pattern have limited length.",
        handler: keys,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "scan",
        arity: -2,
        flags: spec::READONLY,
        keys: Keys::All,
        since: "2.8.0",
        summary: "Iterates over the key names in the database.",
        complexity: "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.",
        handler: scan,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "randomkey",
        arity: 1,
        flags: spec::READONLY,
        keys: Keys::All,
        summary: "Returns a random key name from the database.",
        handler: randomkey,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "rename",
        arity: 3,
        flags: spec::WRITE,
        keys: Keys::TWO,
        summary: "Renames a key and overwrites the destination.",
        handler: rename,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "renamenx",
        arity: 3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::TWO,
        summary: "Renames a key only when the target key name doesn't exist.",
        handler: renamenx,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "touch",
        arity: -2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ALL_ARGS,
        since: "3.2.1",
        summary: "Returns the number of existing keys out of those specified after updating the time they were last accessed.",
        complexity: "O(N) where N is the number of keys that will be touched.",
        handler: touch,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "object",
        arity: -2,
        group: Group::Generic,
        since: "2.2.3",
        summary: "A container for object introspection commands.",
        complexity: "Depends on subcommand.",
        subcommands: OBJECT_SUBCOMMANDS,
        ..CommandSpec::DEFAULT
    },
];

// ---------------------------------------------------------------------------------
// Existence, deletion, type.

/// DEL frees what it deletes before it replies, as Redis's does by default; with
/// `lazyfree-lazy-user-del yes` it is UNLINK. Either way a big value is freed off
/// the loop and outside the shard locks ([`Free`]), so only this client waits.
fn del(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let how = if ctx.server.config.lazyfree_lazy_user_del.load(Relaxed) {
        Free::Later
    } else {
        Free::Now
    };
    delete_keys(ctx, &args[1..], how)
}

/// UNLINK replies at once and leaves big values to the lazy-free thread.
fn unlink(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    delete_keys(ctx, &args[1..], Free::Later)
}

/// Counts the live keys removed (a key named twice counts once, as in Redis).
fn delete_keys(ctx: &mut Ctx<'_, '_>, keys: &[&[u8]], how: Free) -> CmdResult {
    let mut removed = 0;
    for key in keys {
        if ctx.view().delete(key, how) {
            removed += 1;
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
    ctx.integer(removed as i64)
}

/// EXISTS counts every argument that names a live key, repeats included.
fn exists(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let v = ctx.view();
    let n = args[1..]
        .iter()
        .filter(|k| v.get_notouch(k).is_some())
        .count();
    ctx.integer(n as i64)
}

/// TOUCH is EXISTS that also records an access.
fn touch(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let v = ctx.view();
    let n = args[1..].iter().filter(|k| v.get(k).is_some()).count();
    Ok(Frame::Integer(n as i64))
}

fn type_cmd(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let name = ctx
        .view()
        .get_notouch(args[1])
        .map_or("none", |e| e.value().type_name());
    Ok(Frame::Simple(Bytes::from_static(name.as_bytes())))
}

/// Whether `e` is logically gone at `now_ms` (the shard keeps it until reaped).
fn is_expired(e: &Entry, now_ms: u64) -> bool {
    e.expire_at().is_some_and(|at| at <= now_ms)
}

/// Removes `key` if it is present but expired, as Redis's write lookups do; a write
/// command calls this when its key reads as absent. No-op for a missing key.
pub(super) fn reap_if_expired(v: &mut View<'_>, key: &[u8]) {
    v.remove(key);
}

// ---------------------------------------------------------------------------------
// KEYS and RANDOMKEY.

/// Past this many keys, KEYS walks the keyspace off its worker: a walk of 1M keys
/// kept the worker's other clients waiting 100 ms; one of 10k takes about 1 ms,
/// not worth a thread wake-up.
const KEYS_OFFLOAD: usize = 10_000;

fn keys(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let pattern = args[1];
    let big = ctx.server.db.len() > KEYS_OFFLOAD;
    let v = ctx.view();
    let walk = || matching_keys(v, pattern);
    let out = if big {
        crate::offload::offload(walk)
    } else {
        walk()
    };
    Ok(Frame::Array(out))
}

fn matching_keys(v: &View<'_>, pattern: &[u8]) -> Vec<Frame> {
    let all = pattern == b"*";
    let now = v.now_ms();
    let mut out = Vec::new();
    for (_, map) in v.shards() {
        for (k, e) in map.iter() {
            if !is_expired(e, now) && (all || glob::matches(pattern, k, false)) {
                out.push(Frame::Bulk(k.to_bytes()));
            }
        }
    }
    out
}

/// Random picks tried before falling back to a full pass, which only happens when
/// almost every key has expired but not yet been reclaimed.
const RANDOMKEY_TRIES: usize = 100;

fn randomkey(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let v = ctx.view();
    let now = v.now_ms();
    let maps: Vec<&ShardMap> = v.shards().map(|(_, m)| m).collect();
    let total: usize = maps.iter().map(|m| m.len()).sum();
    if total == 0 {
        return Ok(Frame::Null);
    }
    // A uniform position over all shards' dense storage is a uniform key.
    let mut rng = rand::thread_rng();
    for _ in 0..RANDOMKEY_TRIES {
        let mut i = rng.gen_range(0..total);
        for m in &maps {
            if i < m.len() {
                if let Some((k, e)) = m.get_index(i) {
                    if !is_expired(e, now) {
                        return Ok(Frame::Bulk(k.to_bytes()));
                    }
                }
                break;
            }
            i -= m.len();
        }
    }
    // Nearly everything is expired: pick uniformly among the live keys, if any.
    let live: Vec<&crate::db::Key> = maps
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(_, e)| !is_expired(e, now))
        .map(|(k, _)| k)
        .collect();
    if live.is_empty() {
        return Ok(Frame::Null);
    }
    Ok(Frame::Bulk(live[rng.gen_range(0..live.len())].to_bytes()))
}

// ---------------------------------------------------------------------------------
// SCAN.
//
// The cursor names a place in the keyspace's *dense storage*: shard by shard, and in
// each shard by position in its `IndexMap`. The guarantee SCAN must keep is Redis's:
// every key present from the first call to the last is returned at least once, even
// while other clients add and remove keys between calls (duplicates are allowed).
//
// Each shard is walked from its HIGH end down to position 0, and the cursor stores
// `remaining`: positions `[0, remaining)` of the current shard are still to visit,
// everything at or above it has been visited. The shard only changes shape in two
// ways (ShardMap never shifts or reorders entries otherwise):
//
// - An insertion of a new key appends at position `len`, which is at or above
//   `remaining`: the key is not returned, but it was not present for the whole scan
//   either. (Overwriting an existing key keeps its position.)
// - A removal is a `swap_remove`: the hole at `i` is filled by the entry at the last
//   position `len - 1`. If `i >= remaining`, then `len - 1 >= remaining` too: the moved
//   entry was in the visited part and stays there. If `i < remaining`, the moved entry
//   lands in the unvisited part, where it will be visited (perhaps a second time).
//   Entries below `remaining` never move above it, since only the last one ever
//   moves and only downwards.
//
// So the invariant "every entry at or above `remaining` that has been present since
// the scan began has been returned" holds across any interleaving, and when a shard
// is finished (`remaining == 0`) every such key in it has been returned. A forward
// walk would not have this property: a swap_remove would move the last, not yet
// visited, entry into an already visited hole and the scan would miss it.
//
// A shard's length may drop below `remaining` between calls; the walk resumes from
// `min(remaining, len)`. Shards' key placement is a fixed hash for the process's
// lifetime, so a key never changes shard. A new shard is entered with `remaining` =
// FROM_END ("everything"), so the cursor never has to snapshot a length in advance.
//
// Layout of the u64 cursor: bits 55..63 hold the shard index and bits 0..54 hold
// `remaining`. With 256 shards the top bit stays clear, so the cursor also fits an
// i64 for clients that parse it as one. Cursor 0 starts a scan (shard 0, FROM_END)
// and a reply of 0 ends it; a non-final cursor is never 0, because `remaining` is
// positive while a shard is unfinished and a finished shard moves to the next one
// with FROM_END. Any other number a client invents decodes to some place (a shard
// index past the last means "done"), as Redis accepts any cursor: `-1`, which the
// cursor parser (shared with SSCAN and IDSET.SCAN, see `ids::parse_cursor`) reads as
// u64::MAX, names shard 511 and ends the scan at once with cursor 0; a huge cursor
// below SHARDS << POS_BITS resumes in its shard from min(remaining, len).

/// Bits of the cursor that hold `remaining`.
const POS_BITS: u32 = 55;
const POS_MASK: u64 = (1 << POS_BITS) - 1;
/// `remaining` for a shard not entered yet: visit it from its current end.
const FROM_END: u64 = POS_MASK;

// The shard index must fit above the position bits without touching the sign bit.
const _: () = assert!(SHARDS <= 1 << (63 - POS_BITS));

/// A decoded SCAN cursor: positions `[0, remaining)` of `shard` are still to visit,
/// and every shard after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ScanPos {
    shard: usize,
    remaining: u64,
}

impl ScanPos {
    const START: ScanPos = ScanPos {
        shard: 0,
        remaining: FROM_END,
    };

    fn decode(cursor: u64) -> ScanPos {
        if cursor == 0 {
            return ScanPos::START;
        }
        ScanPos {
            shard: (cursor >> POS_BITS) as usize,
            remaining: cursor & POS_MASK,
        }
    }

    /// The cursor to send back; 0 when the scan is complete.
    fn encode(self) -> u64 {
        if self.shard >= SHARDS {
            return 0;
        }
        debug_assert!(self.remaining > 0, "an unfinished shard has positions left");
        ((self.shard as u64) << POS_BITS) | (self.remaining & POS_MASK)
    }
}

/// What a SCAN call keeps of the entries it visits.
struct ScanFilter<'p> {
    pattern: Option<&'p [u8]>,
    type_name: Option<&'p [u8]>,
    now_ms: u64,
}

impl ScanFilter<'_> {
    fn keeps(&self, key: &[u8], e: &Entry) -> bool {
        !is_expired(e, self.now_ms)
            && self.pattern.is_none_or(|p| glob::matches(p, key, false))
            && self
                .type_name
                .is_none_or(|t| t.eq_ignore_ascii_case(e.value().type_name().as_bytes()))
    }
}

/// One SCAN step over `maps` (every shard, indexed by shard number): visits up to
/// `count` stored entries (expired and filtered ones included, so a call's work is
/// bounded and every call makes progress) and returns the next cursor and the keys
/// kept. Empty shards are skipped without counting.
fn scan_step(
    maps: &[&ShardMap],
    cursor: u64,
    count: usize,
    filter: &ScanFilter<'_>,
) -> (u64, Vec<Bytes>) {
    let mut pos = ScanPos::decode(cursor);
    let mut visited = 0usize;
    let mut out = Vec::new();
    while pos.shard < maps.len().min(SHARDS) && visited < count {
        let map = maps[pos.shard];
        let mut r = pos.remaining.min(map.len() as u64);
        while r > 0 && visited < count {
            r -= 1;
            visited += 1;
            if let Some((k, e)) = map.get_index(r as usize) {
                if filter.keeps(k, e) {
                    out.push(k.to_bytes());
                }
            }
        }
        pos = if r == 0 {
            ScanPos {
                shard: pos.shard + 1,
                remaining: FROM_END,
            }
        } else {
            ScanPos {
                shard: pos.shard,
                remaining: r,
            }
        };
    }
    // Trailing empty shards would only cost the client one more empty round trip.
    while pos.shard < maps.len() && pos.remaining.min(maps[pos.shard].len() as u64) == 0 {
        pos = ScanPos {
            shard: pos.shard + 1,
            remaining: FROM_END,
        };
    }
    if pos.shard >= maps.len() {
        return (0, out);
    }
    (pos.encode(), out)
}

fn scan(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(args[1])?;
    let mut count: i64 = 10;
    let mut pattern: Option<&[u8]> = None;
    let mut type_name: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let has_value = i + 1 < args.len();
        if eq_ic(args[i], "COUNT") && has_value {
            count = parse_i64(args[i + 1])?;
            if count < 1 {
                return Err(CmdError::Syntax);
            }
        } else if eq_ic(args[i], "MATCH") && has_value {
            // "*" matches everything: skip the matcher.
            pattern = (args[i + 1] != b"*").then_some(args[i + 1]);
        } else if eq_ic(args[i], "TYPE") && has_value {
            // Redis 7.2 accepts any name; an unknown one simply matches nothing.
            type_name = Some(args[i + 1]);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let v = ctx.view();
    let filter = ScanFilter {
        pattern,
        type_name,
        now_ms: v.now_ms(),
    };
    let maps: Vec<&ShardMap> = v.shards().map(|(_, m)| m).collect();
    debug_assert_eq!(
        maps.len(),
        SHARDS,
        "SCAN is keyspace-wide and locks every shard"
    );
    // A COUNT of millions walks the whole keyspace in one call, as KEYS does.
    let keys: u64 = maps.iter().map(|m| m.len() as u64).sum();
    crate::offload::step_aside_past((count as u64).min(keys));
    let (next, found) = scan_step(&maps, cursor, count as usize, &filter);
    let mut buf = itoa::Buffer::new();
    Ok(Frame::Array(vec![
        Frame::Bulk(Bytes::copy_from_slice(buf.format(next).as_bytes())),
        Frame::Array(found.into_iter().map(Frame::Bulk).collect()),
    ]))
}

// ---------------------------------------------------------------------------------
// RENAME.

fn rename(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    rename_generic(ctx, args, false)
}

fn renamenx(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    rename_generic(ctx, args, true)
}

/// Moves the value and its expiry; both keys' shards are write-locked by the view,
/// so the move is atomic even when they live in different shards.
fn rename_generic(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], nx: bool) -> CmdResult {
    let (src, dst) = (args[1], args[2]);
    let v = ctx.view();
    if !v.contains(src) {
        reap_if_expired(v, src);
        return Err(CmdError::NoSuchKey);
    }
    if src == dst {
        // Nothing moves and nothing changes (watchers are not told).
        return Ok(if nx { Frame::Integer(0) } else { Frame::ok() });
    }
    if nx && v.contains(dst) {
        return Ok(Frame::Integer(0));
    }
    let entry = v
        .remove(src)
        .expect("source checked live under the same lock");
    let expire_at = entry.expire_at().unwrap_or(0);
    v.insert(dst, entry.into_value(), expire_at);
    // Redis re-adds the destination, so it reports it new even over an old key.
    ctx.notify(notify::NEW, "new", dst);
    ctx.notify(notify::GENERIC, "rename_from", src);
    ctx.notify(notify::GENERIC, "rename_to", dst);
    Ok(if nx { Frame::Integer(1) } else { Frame::ok() })
}

// ---------------------------------------------------------------------------------
// OBJECT.

/// The encoding Redis would report for a string value as SET stores it.
fn string_encoding(s: &[u8]) -> &'static str {
    if s.len() <= 20 && parse_i64_opt(s).is_some() {
        "int"
    } else if s.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

fn object_encoding(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let Some(e) = ctx.view().get_notouch(args[2]) else {
        return Ok(Frame::Null);
    };
    // Every non-string type relcache has is a hash table of some kind.
    let enc = e
        .value()
        .as_str()
        .map_or("hashtable", |s| string_encoding(s));
    Ok(Frame::Bulk(Bytes::from_static(enc.as_bytes())))
}

/// OBJECT IDLETIME reads the key without counting as an access. The LRU clock is
/// in milliseconds; the reply is whole seconds, as Redis's.
fn object_idletime(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let v = ctx.view();
    let Some(e) = v.get_notouch(args[2]) else {
        return Ok(Frame::Null);
    };
    // A concurrent reader may have just stored a newer access time: idle_ms reads
    // it as 0, not as a wrapped 49 days.
    let idle_ms = e.idle_ms(v.db().lru_clock());
    Ok(Frame::Integer((idle_ms / 1000) as i64))
}

fn object_freq(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    if ctx.view().get_notouch(args[2]).is_none() {
        return Ok(Frame::Null);
    }
    // relcache has no LFU policy, so access frequency is never tracked.
    Err(CmdError::err(
        "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
    ))
}

/// Values are never shared between keys, so every live value has one reference.
fn object_refcount(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    Ok(match ctx.view().get_notouch(args[2]) {
        Some(_) => Frame::Integer(1),
        None => Frame::Null,
    })
}

fn object_help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "OBJECT",
        &[
            "ENCODING <key>",
            "    Return the kind of internal representation used to store the value of",
            "    <key>.",
            "FREQ <key>",
            "    Return the access frequency index of <key>; needs an LFU maxmemory policy,",
            "    which relcache does not offer.",
            "IDLETIME <key>",
            "    Return the idle time of <key>: the approximate number of seconds since it",
            "    was last accessed.",
            "REFCOUNT <key>",
            "    Return the number of references to the value stored at <key>.",
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Value;
    use rand::{rngs::StdRng, SeedableRng};
    use std::collections::HashSet;

    fn val() -> Value {
        Value::Str(Bytes::from_static(b"v"))
    }

    fn all_pass(now_ms: u64) -> ScanFilter<'static> {
        ScanFilter {
            pattern: None,
            type_name: None,
            now_ms,
        }
    }

    #[test]
    fn cursor_zero_starts_and_round_trips() {
        assert_eq!(ScanPos::decode(0), ScanPos::START);
        for pos in [
            ScanPos {
                shard: 0,
                remaining: 1,
            },
            ScanPos {
                shard: 0,
                remaining: FROM_END,
            },
            ScanPos {
                shard: 7,
                remaining: 12345,
            },
            ScanPos {
                shard: SHARDS - 1,
                remaining: FROM_END,
            },
        ] {
            let c = pos.encode();
            assert_ne!(c, 0, "{pos:?} must not look like the end");
            assert!(c <= i64::MAX as u64, "cursor {c} must fit an i64");
            assert_eq!(ScanPos::decode(c), pos);
        }
        assert_eq!(
            ScanPos {
                shard: SHARDS,
                remaining: 5
            }
            .encode(),
            0,
            "past the last shard is done"
        );
    }

    #[test]
    fn invented_cursors_decode_to_a_place() {
        assert_eq!(
            ScanPos::decode(u64::MAX).shard,
            (u64::MAX >> POS_BITS) as usize
        );
        let maps: Vec<ShardMap> = (0..SHARDS).map(|_| ShardMap::default()).collect();
        let refs: Vec<&ShardMap> = maps.iter().collect();
        let (next, keys) = scan_step(&refs, u64::MAX, 10, &all_pass(0));
        assert_eq!((next, keys.len()), (0, 0));
    }

    /// Runs a full scan over `maps` with `count`, calling `mutate` between calls.
    fn full_scan(
        maps: &mut [ShardMap],
        count: usize,
        mut mutate: impl FnMut(&mut [ShardMap]),
    ) -> HashSet<Bytes> {
        let mut seen = HashSet::new();
        let mut cursor = 0;
        for calls in 0.. {
            assert!(calls < 1_000_000, "scan does not terminate");
            let refs: Vec<&ShardMap> = maps.iter().collect();
            let (next, keys) = scan_step(&refs, cursor, count, &all_pass(0));
            seen.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
            mutate(maps);
        }
        seen
    }

    fn shard_of(key: &[u8]) -> usize {
        // Any fixed placement works for the walk; spread keys over a few shards.
        key.iter().map(|&b| b as usize).sum::<usize>() % 4
    }

    #[test]
    fn scan_returns_every_key_once_without_changes() {
        let mut maps: Vec<ShardMap> = (0..SHARDS).map(|_| ShardMap::default()).collect();
        for i in 0..1000 {
            let k = format!("key:{i}");
            maps[shard_of(k.as_bytes())].insert(k.as_bytes(), val(), 0, 0);
        }
        let refs: Vec<&ShardMap> = maps.iter().collect();
        let mut cursor = 0;
        let mut all = Vec::new();
        loop {
            let (next, keys) = scan_step(&refs, cursor, 7, &all_pass(0));
            assert!(keys.len() <= 7);
            all.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert_eq!(all.len(), 1000, "no duplicates when nothing changes");
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), 1000);
    }

    #[test]
    fn scan_survives_concurrent_removals_and_inserts() {
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..20 {
            let mut maps: Vec<ShardMap> = (0..SHARDS).map(|_| ShardMap::default()).collect();
            let stable: Vec<String> = (0..300).map(|i| format!("stable:{i}")).collect();
            let churn: Vec<String> = (0..300).map(|i| format!("churn:{i}")).collect();
            for k in stable.iter().chain(&churn) {
                maps[shard_of(k.as_bytes())].insert(k.as_bytes(), val(), 0, 0);
            }
            let mut next_new = 0;
            let seen = full_scan(&mut maps, 1 + round % 13, |maps| {
                // Between calls: remove a few churn keys, add a few new ones.
                for _ in 0..5 {
                    let k = &churn[rng.gen_range(0..churn.len())];
                    maps[shard_of(k.as_bytes())].remove(k.as_bytes());
                    let n = format!("new:{next_new}");
                    next_new += 1;
                    maps[shard_of(n.as_bytes())].insert(n.as_bytes(), val(), 0, 0);
                }
            });
            for k in &stable {
                assert!(seen.contains(k.as_bytes()), "round {round}: {k} missed");
            }
        }
    }

    #[test]
    fn scan_skips_expired_and_filters() {
        let mut maps: Vec<ShardMap> = (0..SHARDS).map(|_| ShardMap::default()).collect();
        maps[3].insert(b"user:1", val(), 0, 0);
        maps[3].insert(b"user:2", val(), 50, 0);
        maps[9].insert(b"other", val(), 0, 0);
        let refs: Vec<&ShardMap> = maps.iter().collect();
        let f = ScanFilter {
            pattern: Some(b"user:*"),
            type_name: None,
            now_ms: 100,
        };
        let (next, keys) = scan_step(&refs, 0, 100, &f);
        assert_eq!(next, 0);
        assert_eq!(keys, vec![Bytes::from_static(b"user:1")]);
        let f = ScanFilter {
            pattern: None,
            type_name: Some(b"STRING"),
            now_ms: 0,
        };
        assert_eq!(scan_step(&refs, 0, 100, &f).1.len(), 3);
        let f = ScanFilter {
            pattern: None,
            type_name: Some(b"hash"),
            now_ms: 0,
        };
        assert!(scan_step(&refs, 0, 100, &f).1.is_empty());
    }

    #[test]
    fn string_encodings() {
        assert_eq!(string_encoding(b"12345"), "int");
        assert_eq!(string_encoding(b"-9223372036854775808"), "int");
        assert_eq!(string_encoding(b"012"), "embstr");
        assert_eq!(string_encoding(b""), "embstr");
        assert_eq!(string_encoding(&[b'a'; 44]), "embstr");
        assert_eq!(string_encoding(&[b'a'; 45]), "raw");
    }
}
