//! The Redis set family (SADD, SISMEMBER, SINTER …), over idset tables.
//!
//! Every set is stored as one idset table ([`IdSet`]), the same value IDSET.LOAD
//! and a client's SET of a prebuilt table produce, so the two families share keys:
//! a set filled with SADD answers IDSET.MEXISTS, and a table written with SET
//! answers SMISMEMBER. Replies follow Redis 7.2: members are bulk strings of decimal
//! text, a missing key reads as an empty set, SREM/SPOP/SMOVE delete a key they
//! empty, and a `*STORE` with an empty result deletes its destination.
//!
//! What differs from Redis, on purpose: members must be canonical decimal `u64`s
//! (see [`super::ids`]); any other member is refused with an error, by every command
//! and before anything changes — never converted or silently answered "no".
//!
//! The writes and the scan pager it shares with the IDSET family are in
//! [`super::setcore`]; what is here is the S* commands' own parsing and replies.
//!
//! Locking: arguments are parsed before the shard lock is taken, and the expensive
//! part of an add — building or growing a table — runs outside it where it can
//! (see [`setcore::add`]). The multi-key commands run entirely under their keys'
//! locks, so they stay atomic, as in Redis.

use rand::seq::SliceRandom;
use rand::Rng;
use relcache_protocol::idset::{TableRef, MASK_IDS};
use relcache_protocol::resp::Frame;
use smallvec::SmallVec;

use super::ids::{id_frame, member_frames, parse_cursor, parse_id_opt, parse_ids};
use super::setcore::{self, scan_page, scan_reply, walked, Added, PageLimit, ScanOpts};
use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, parse_i64_opt, Ctx};
use crate::db::{self, Free, IdSet, Value, View};
use crate::error::{CmdError, CmdResult};
use crate::notify;
use crate::offload::step_aside_past;

/// Membership commands parse up to this many ids into a stack buffer.
const STACK_IDS: usize = 128;
/// The most members SRANDMEMBER with a negative count replies with. Redis streams
/// any number; relcache builds a reply in memory, so it refuses absurd counts.
const MAX_RANDOM_REPLY: u64 = 1 << 20;
/// SUNION deduplicates by probing the earlier sets up to this many sets; past it,
/// by sorting.
const UNION_PROBE_MAX_SETS: usize = 8;
/// Random slots tried before picking a random member by rank instead.
const RANDOM_SLOT_TRIES: u32 = 64;

const SET_READ_FAST: u32 = spec::READONLY | spec::FAST;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "sadd",
        arity: -3,
        flags: spec::WRITE | spec::DENYOOM | spec::FAST,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Adds one or more members to a set. Creates the key if it doesn't exist.",
        complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
        handler: sadd,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "srem",
        arity: -3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Removes one or more members from a set. Deletes the set if the last member was removed.",
        complexity: "O(N) where N is the number of members to be removed.",
        handler: srem,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sismember",
        arity: 3,
        flags: SET_READ_FAST,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Determines whether a member belongs to a set.",
        handler: sismember,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "smismember",
        arity: -3,
        flags: SET_READ_FAST,
        keys: Keys::ONE,
        group: Group::Set,
        since: "6.2.0",
        summary: "Determines whether multiple members belong to a set.",
        complexity: "O(N) where N is the number of elements being checked for membership",
        handler: smismember,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "scard",
        arity: 2,
        flags: SET_READ_FAST,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Returns the number of members in a set.",
        handler: scard,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "smembers",
        arity: 2,
        flags: spec::READONLY,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Returns all members of a set.",
        complexity: "O(N) where N is the set cardinality.",
        handler: smembers,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sscan",
        arity: -3,
        flags: spec::READONLY,
        keys: Keys::ONE,
        group: Group::Set,
        since: "2.8.0",
        summary: "Iterates over members of a set.",
        complexity: "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.",
        handler: sscan,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sinter",
        arity: -2,
        flags: spec::READONLY,
        keys: Keys::ALL_ARGS,
        group: Group::Set,
        summary: "Returns the intersect of multiple sets.",
        complexity: "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
        handler: sinter,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sintercard",
        arity: -3,
        flags: spec::READONLY | spec::MOVABLE_KEYS,
        keys: Keys::Counted { at: 1 },
        group: Group::Set,
        since: "7.0.0",
        summary: "Returns the number of members of the intersect of multiple sets.",
        complexity: "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
        handler: sintercard,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sinterstore",
        arity: -3,
        flags: spec::WRITE | spec::DENYOOM,
        keys: Keys::ALL_ARGS,
        group: Group::Set,
        summary: "Stores the intersect of multiple sets in a key.",
        complexity: "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
        handler: sinterstore,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sunion",
        arity: -2,
        flags: spec::READONLY,
        keys: Keys::ALL_ARGS,
        group: Group::Set,
        summary: "Returns the union of multiple sets.",
        complexity: "O(N) where N is the total number of elements in all given sets.",
        handler: sunion,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sunionstore",
        arity: -3,
        flags: spec::WRITE | spec::DENYOOM,
        keys: Keys::ALL_ARGS,
        group: Group::Set,
        summary: "Stores the union of multiple sets in a key.",
        complexity: "O(N) where N is the total number of elements in all given sets.",
        handler: sunionstore,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sdiff",
        arity: -2,
        flags: spec::READONLY,
        keys: Keys::ALL_ARGS,
        group: Group::Set,
        summary: "Returns the difference of multiple sets.",
        complexity: "O(N) where N is the total number of elements in all given sets.",
        handler: sdiff,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sdiffstore",
        arity: -3,
        flags: spec::WRITE | spec::DENYOOM,
        keys: Keys::ALL_ARGS,
        group: Group::Set,
        summary: "Stores the difference of multiple sets in a key.",
        complexity: "O(N) where N is the total number of elements in all given sets.",
        handler: sdiffstore,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "srandmember",
        arity: -2,
        flags: spec::READONLY,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Get one or multiple random members from a set",
        complexity: "Without the count argument O(1), otherwise O(N) where N is the absolute value of the passed count.",
        handler: srandmember,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "spop",
        arity: -2,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        group: Group::Set,
        summary: "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.",
        complexity: "Without the count argument O(1), otherwise O(N) where N is the value of the passed count.",
        handler: spop,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "smove",
        arity: 4,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::TWO,
        group: Group::Set,
        summary: "Moves a member from one set to another.",
        handler: smove,
        ..CommandSpec::DEFAULT
    },
];

/// Removes `ids` from the set at `key`, deleting the key when it becomes empty, as
/// Redis does. Returns how many were members, and whether the key went.
fn remove_ids(v: &mut View<'_>, key: &[u8], ids: &[u64]) -> (u64, bool) {
    remove_with(v, key, |set| set.remove_many(ids))
}

/// [`remove_ids`] for ids read out of the set itself (SPOP's picks), which must all
/// leave it: see [`IdSet::remove_members`](crate::db::IdSet::remove_members).
fn remove_members(v: &mut View<'_>, key: &[u8], ids: &[u64]) -> (u64, bool) {
    remove_with(v, key, |set| set.remove_members(ids))
}

/// Runs `remove` on the set at `key` and drops the key if that emptied it: how many
/// it removed, and whether the key went.
fn remove_with(
    v: &mut View<'_>,
    key: &[u8],
    remove: impl FnOnce(&mut crate::db::IdSet) -> u64,
) -> (u64, bool) {
    let Some(e) = v.get_mut(key) else {
        return (0, false);
    };
    let Value::IdSet(set) = e.value_mut() else {
        return (0, false);
    };
    let removed = remove(set);
    let emptied = set.is_empty();
    if emptied {
        v.delete(key, Free::Now);
    }
    (removed, emptied)
}

// ---- Single-key commands. ----

fn sadd(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let ids = parse_ids(&args[2..])?;
    let added = setcore::add(ctx, args[1], &ids, false, None)?.unwrap_or(Added::NOTHING);
    if added.n > 0 {
        ctx.notify_write(notify::SET, "sadd", args[1], added.created);
    }
    ctx.integer(added.n as i64)
}

fn srem(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    // A member that is not an id is in no id set: removing it removes nothing.
    let ids: Vec<u64> = args[2..].iter().filter_map(|a| parse_id_opt(a)).collect();
    let key = &args[1];
    let v = ctx.view();
    let Some(e) = v.peek(key) else {
        return ctx.integer(0);
    };
    let table = e.value().as_idset()?.table();
    // Removing no member changes nothing: leave the key (and its WATCHers) alone.
    if !ids.iter().any(|&id| table.contains(id)) {
        return ctx.integer(0);
    }
    let (removed, emptied) = remove_ids(v, key, &ids);
    ctx.notify(notify::SET, "srem", key);
    if emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
    ctx.integer(removed as i64)
}

fn sismember(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    // Not an id: not a member (0, as Redis answers for any absent member), but the
    // key's type is still checked.
    let id = parse_id_opt(args[2]);
    let found = match ctx.view().get(args[1]) {
        None => false,
        Some(e) => {
            let set = e.value().as_idset()?;
            id.is_some_and(|id| set.contains(id))
        }
    };
    ctx.integer(i64::from(found))
}

/// The relation service's hot path ("which of these 100 do I follow?"): the ids are
/// parsed before locking, onto the stack up to [`STACK_IDS`] of them, where the
/// reply is the only allocation.
fn smismember(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let members = &args[2..];
    // The ids, and a bit for each member that is one (bit i % 64 of word i / 64):
    // a member that is not an id is in no id set, and is looked up as 0 with its
    // answer dropped. Eight bytes a member rather than an `Option<u64>`'s sixteen,
    // and answers taken from whole masks rather than one at a time.
    let mut stack = [0u64; STACK_IDS];
    let mut heap = Vec::new();
    let ids: &mut [u64] = if members.len() <= STACK_IDS {
        &mut stack[..members.len()]
    } else {
        heap.resize(members.len(), 0);
        &mut heap
    };
    let mut valid: SmallVec<[u64; STACK_IDS / MASK_IDS]> = SmallVec::new();
    for (chunk, args) in ids.chunks_mut(MASK_IDS).zip(members.chunks(MASK_IDS)) {
        let mut bits = 0;
        for (i, (id, arg)) in chunk.iter_mut().zip(args).enumerate() {
            if let Some(parsed) = parse_id_opt(arg) {
                *id = parsed;
                bits |= 1 << i;
            }
        }
        valid.push(bits);
    }
    let v = ctx.view();
    let out = match v.get(args[1]) {
        None => vec![0; ids.len()],
        Some(e) => {
            let table = e.value().as_idset()?.table();
            let masks = table.contains_masks(ids.iter().copied());
            setcore::mask_flags(masks.zip(valid).map(|(hit, id)| hit & id), ids.len())
        }
    };
    Ok(Frame::Integers(out))
}

fn scard(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let n = match ctx.view().get(args[1]) {
        None => 0,
        Some(e) => e.value().as_idset()?.len(),
    };
    ctx.integer(n as i64)
}

fn smembers(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let v = ctx.view();
    let Some(e) = v.get(args[1]) else {
        return Ok(Frame::Set(Vec::new()));
    };
    let table = e.value().as_idset()?.table();
    step_aside_past(walked(&table));
    Ok(Frame::Set(member_frames(
        table.iter(),
        table.len() as usize,
    )))
}

// ---- SSCAN. ----

/// SSCAN key cursor [MATCH pattern] [COUNT count]: pages over slot positions (see
/// [`setcore::scan_page`]).
fn sscan(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(args[2])?;
    // Redis looks the key up before it reads the options, so a missing key or a
    // string answers the same whatever the options say: parse now, report later.
    let opts = ScanOpts::parse(&args[3..], true);
    let v = ctx.view();
    let Some(e) = v.get(args[1]) else {
        return Ok(scan_reply(0, Vec::new()));
    };
    let table = e.value().as_idset()?.table();
    let opts = opts?;
    let (next, mut ids) = scan_page(&table, cursor, PageLimit::members(opts.count));
    if let Some(pattern) = opts.pattern {
        let mut buf = itoa::Buffer::new();
        ids.retain(|&id| crate::glob::matches(pattern, buf.format(id).as_bytes(), false));
    }
    Ok(scan_reply(next, ids))
}

// ---- Multi-key commands. ----

/// The sets at `keys` in order, `None` for a missing key (an empty set to Redis).
/// Every key is type-checked, even after a missing one, as Redis does.
fn read_sets<'v>(v: &'v View<'_>, keys: &[&[u8]]) -> Result<Vec<Option<TableRef<'v>>>, db::Error> {
    keys.iter()
        .map(|k| {
            v.get(k)
                .map(|e| e.value().as_idset().map(IdSet::table))
                .transpose()
        })
        .collect()
}

#[derive(Clone, Copy)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

impl SetOp {
    /// The keyspace event of the *STORE form.
    fn store_event(self) -> &'static str {
        match self {
            SetOp::Inter => "sinterstore",
            SetOp::Union => "sunionstore",
            SetOp::Diff => "sdiffstore",
        }
    }

    /// How many slots [`apply`](Self::apply) reads, at most: those of the
    /// sets it walks, and as many probes into the others.
    fn walk(self, sets: &[Option<TableRef<'_>>]) -> u64 {
        let n = sets.len() as u64;
        match self {
            // A missing key is an empty set: nothing to walk.
            SetOp::Inter if sets.iter().any(Option::is_none) => 0,
            SetOp::Inter => inter_walk(sets.iter().flatten()),
            SetOp::Union => n.saturating_mul(sets.iter().flatten().map(walked).sum()),
            SetOp::Diff => {
                n.saturating_mul(sets.first().and_then(Option::as_ref).map_or(0, walked))
            }
        }
    }

    /// The members of the result, each once.
    fn apply(self, sets: Vec<Option<TableRef<'_>>>) -> Vec<u64> {
        match self {
            SetOp::Inter => {
                let Some(mut tables) = sets.into_iter().collect::<Option<Vec<_>>>() else {
                    return Vec::new(); // a missing key is an empty set
                };
                let mut out = Vec::new();
                for_each_common(&mut tables, |id| {
                    out.push(id);
                    true
                });
                out
            }
            SetOp::Union => union(sets.into_iter().flatten().collect()),
            SetOp::Diff => {
                let mut sets = sets.into_iter();
                let Some(Some(first)) = sets.next() else {
                    return Vec::new();
                };
                let others: Vec<TableRef<'_>> = sets.flatten().collect();
                first
                    .iter()
                    .filter(|&id| !others.iter().any(|t| t.contains(id)))
                    .collect()
            }
        }
    }
}

/// How many slots an intersection of `tables` reads: the smallest set's,
/// each of its members probed in the others ([`for_each_common`]).
fn inter_walk<'t>(tables: impl Iterator<Item = &'t TableRef<'t>>) -> u64 {
    let (smallest, sets) = tables.fold((None::<&TableRef<'_>>, 0u64), |(s, n), t| {
        (Some(s.filter(|s| s.len() <= t.len()).unwrap_or(t)), n + 1)
    });
    smallest.map_or(0, |t| walked(t).saturating_mul(sets))
}

/// Calls `f` with each member common to all `tables`, iterating the smallest and
/// probing the others; stops early when `f` returns false.
fn for_each_common(tables: &mut [TableRef<'_>], mut f: impl FnMut(u64) -> bool) {
    tables.sort_unstable_by_key(TableRef::len);
    let Some((smallest, others)) = tables.split_first() else {
        return;
    };
    for id in smallest.iter() {
        if others.iter().all(|t| t.contains(id)) && !f(id) {
            return;
        }
    }
}

/// Every member of any of `tables`, once.
fn union(mut tables: Vec<TableRef<'_>>) -> Vec<u64> {
    if tables.len() > UNION_PROBE_MAX_SETS {
        let mut all: Vec<u64> = tables.iter().flat_map(|t| t.iter()).collect();
        all.sort_unstable();
        all.dedup();
        return all;
    }
    // Largest first: its members go out unprobed, and each later member is kept
    // only if no earlier set has it.
    tables.sort_unstable_by_key(|t| std::cmp::Reverse(t.len()));
    let mut out = Vec::with_capacity(tables.first().map_or(0, |t| t.len() as usize));
    for (j, t) in tables.iter().enumerate() {
        let earlier = &tables[..j];
        out.extend(
            t.iter()
                .filter(|&id| !earlier.iter().any(|p| p.contains(id))),
        );
    }
    out
}

/// SINTER / SUNION / SDIFF key …
fn set_op_reply(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], op: SetOp) -> CmdResult {
    let v = ctx.view();
    let sets = read_sets(v, &args[1..])?;
    step_aside_past(op.walk(&sets));
    let ids = op.apply(sets);
    let n = ids.len();
    Ok(Frame::Set(member_frames(ids.into_iter(), n)))
}

/// SINTERSTORE / SUNIONSTORE / SDIFFSTORE destination key …: the result replaces the
/// destination (whatever its type, dropping its TTL); an empty one deletes it.
/// Runs wholly under the lock so the command stays atomic; the table build is O(N),
/// like computing the result.
fn set_op_store(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], op: SetOp) -> CmdResult {
    let v = ctx.view();
    let sets = read_sets(v, &args[2..])?;
    step_aside_past(op.walk(&sets));
    let ids = op.apply(sets);
    let dst = &args[1];
    if ids.is_empty() {
        if v.delete(dst, Free::Now) {
            ctx.notify(notify::GENERIC, "del", dst);
        }
        return Ok(Frame::Integer(0));
    }
    let (n, created) = setcore::create(v, dst, IdSet::build(&ids));
    ctx.notify_write(notify::SET, op.store_event(), dst, created);
    Ok(Frame::Integer(n as i64))
}

fn sinter(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_op_reply(ctx, args, SetOp::Inter)
}

fn sunion(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_op_reply(ctx, args, SetOp::Union)
}

fn sdiff(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_op_reply(ctx, args, SetOp::Diff)
}

fn sinterstore(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_op_store(ctx, args, SetOp::Inter)
}

fn sunionstore(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_op_store(ctx, args, SetOp::Union)
}

fn sdiffstore(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_op_store(ctx, args, SetOp::Diff)
}

/// SINTERCARD numkeys key … [LIMIT limit]
fn sintercard(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let numkeys = parse_i64_opt(args[1])
        .filter(|&n| n > 0)
        .ok_or_else(|| CmdError::err("numkeys should be greater than 0"))? as u64;
    if numkeys > (args.len() - 2) as u64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let keys_end = 2 + numkeys as usize;
    let mut limit = 0u64;
    let mut i = keys_end;
    while i < args.len() {
        match args.get(i + 1) {
            Some(value) if eq_ic(args[i], "LIMIT") => {
                limit = parse_i64_opt(value)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| CmdError::err("LIMIT can't be negative"))?;
            }
            _ => return Err(CmdError::Syntax),
        }
        i += 2;
    }
    let v = ctx.view();
    let Some(mut tables) = read_sets(v, &args[2..keys_end])?
        .into_iter()
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(Frame::Integer(0));
    };
    step_aside_past(inter_walk(tables.iter()));
    let mut n = 0u64;
    for_each_common(&mut tables, |_| {
        n += 1;
        limit == 0 || n < limit
    });
    Ok(Frame::Integer(n as i64))
}

/// SMOVE source destination member
fn smove(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (src, dst) = (&args[1], &args[2]);
    let v = ctx.view();
    let Some(e) = v.peek(src) else {
        return Ok(Frame::Integer(0));
    };
    // A member that is not an id is in no id set: there is nothing to move (and so
    // nothing that would have to be stored).
    let set = e.value().as_idset()?;
    let present = parse_id_opt(args[3]).filter(|&id| set.contains(id));
    if let Some(d) = v.peek(dst) {
        d.value().as_idset()?;
    }
    let Some(id) = present else {
        return Ok(Frame::Integer(0));
    };
    if src == dst {
        return Ok(Frame::Integer(1));
    }
    let (_, emptied) = remove_ids(v, src, &[id]);
    let added = setcore::insert(v, dst, &[id], false, None)?;
    ctx.notify(notify::SET, "srem", src);
    if emptied {
        ctx.notify(notify::GENERIC, "del", src);
    }
    if let Some(added) = added.filter(|a| a.n > 0) {
        ctx.notify_write(notify::SET, "sadd", dst, added.created);
    }
    Ok(Frame::Integer(1))
}

// ---- Random members: SRANDMEMBER and SPOP. ----

/// A uniformly random member of a non-empty table: the flag ids by their share of
/// the members, slot ids by sampling random slots (falling back to a random rank on
/// a table so sparse that sampling keeps missing: a walk over the whole table, so
/// callers that draw many use [`sample_member`] and gather the members once).
fn random_member(table: &TableRef<'_>, rng: &mut impl Rng) -> u64 {
    sample_member(table, rng).unwrap_or_else(|| {
        let rank = rng.gen_range(0..u64::from(table.count()));
        table
            .slots(0)
            .flatten()
            .nth(rank as usize)
            .expect("count ids in slots")
    })
}

/// [`random_member`] without the fallback: `None` when every sampled slot missed,
/// which a table at the density the server keeps (an eighth at least) almost never
/// does, and a sparse one (`IDSET.LOAD … RESERVE`, a client's table) often does.
fn sample_member(table: &TableRef<'_>, rng: &mut impl Rng) -> Option<u64> {
    let n = table.len();
    let in_slots = u64::from(table.count());
    let r = rng.gen_range(0..n);
    if r >= in_slots {
        let mut flags = [0, u64::MAX].into_iter().filter(|&id| table.contains(id));
        return Some(
            flags
                .nth((r - in_slots) as usize)
                .expect("flag ids counted in len"),
        );
    }
    let cap = table.capacity();
    (0..RANDOM_SLOT_TRIES).find_map(|_| table.slot(u64::from(rng.gen_range(0..cap))))
}

/// `count` distinct random members (`count` < the set's size).
fn random_distinct(table: &TableRef<'_>, count: usize, rng: &mut impl Rng) -> Vec<u64> {
    let n = table.len() as usize;
    if count.saturating_mul(4) < n {
        // Few: draw until enough distinct ones, at most 4/3 draws each on average.
        // The bound is for a table that holds an id twice (a client's table whose
        // placement was checked only in part): it may not have `count` distinct ids
        // at all, and drawing would never end.
        let mut seen = ahash::AHashSet::with_capacity(count);
        let mut out = Vec::with_capacity(count);
        for _ in 0..count.saturating_mul(8).saturating_add(64) {
            // A sparse table: one walk gathering the members beats one per draw.
            let Some(id) = sample_member(table, rng) else {
                break;
            };
            if seen.insert(id) {
                out.push(id);
                if out.len() == count {
                    return out;
                }
            }
        }
    }
    // Many of them (or drawing ran long): shuffle the start of the member list.
    let mut all: Vec<u64> = table.iter().collect();
    let chosen = all.partial_shuffle(rng, count).0.to_vec();
    let mut seen = ahash::AHashSet::with_capacity(chosen.len());
    if chosen.iter().all(|&id| seen.insert(id)) {
        return chosen;
    }
    // The same id twice: shuffle the distinct ones instead.
    all.sort_unstable();
    all.dedup();
    all.partial_shuffle(rng, count).0.to_vec()
}

/// How many slots drawing `count` members of `table` reads, at most (as
/// SRANDMEMBER counts: negative for draws that may repeat): the draws, or the
/// whole table when they gather its members instead ([`random_distinct`], and
/// the many draws of a negative count).
fn random_walk(table: &TableRef<'_>, count: i64) -> u64 {
    let draws = count.unsigned_abs();
    let gathers = if count < 0 {
        draws >= u64::from(table.capacity()) / 8
    } else {
        draws.saturating_mul(4) >= table.len()
    };
    if gathers {
        walked(table).max(draws)
    } else {
        draws
    }
}

/// SRANDMEMBER key [count]
fn srandmember(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => {
            let n = parse_i64(args[2])?;
            if n == i64::MIN {
                return Err(CmdError::err(
                    "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                ));
            }
            Some(n)
        }
        _ => return Err(CmdError::Syntax),
    };
    let v = ctx.view();
    let entry = v.get(args[1]);
    // An empty set (IDSET.REM keeps one; Redis never has one) answers as a missing key.
    let table = match entry {
        Some(e) => Some(e.value().as_idset()?.table()).filter(|t| !t.is_empty()),
        None => None,
    };
    let Some(count) = count else {
        return Ok(match table {
            None => Frame::Null,
            Some(t) => id_frame(random_member(&t, &mut rand::thread_rng())),
        });
    };
    let Some(table) = table else {
        return Ok(Frame::Array(Vec::new()));
    };
    if count == 0 {
        return Ok(Frame::Array(Vec::new()));
    }
    let n = table.len();
    let draws = count.unsigned_abs();
    if count < 0 && draws > MAX_RANDOM_REPLY {
        return Err(CmdError::err(format!(
            "count is out of range: relcache replies with at most {MAX_RANDOM_REPLY} random members"
        )));
    }
    step_aside_past(random_walk(&table, count));
    let mut rng = rand::thread_rng();
    let ids: Vec<u64> = if count < 0 {
        // Repetitions allowed: |count| independent draws.
        // Sampling slots, until the table proves too sparse for it; then (or for
        // draws enough to cost a walk anyway) from the members gathered once.
        let mut ids = Vec::with_capacity(draws as usize);
        if draws < u64::from(table.capacity()) / 8 {
            ids.extend((0..draws).map_while(|_| sample_member(&table, &mut rng)));
        }
        if (ids.len() as u64) < draws {
            let all: Vec<u64> = table.iter().collect();
            let left = draws - ids.len() as u64;
            ids.extend((0..left).map(|_| all[rng.gen_range(0..all.len())]));
        }
        ids
    } else if count as u64 >= n {
        table.iter().collect()
    } else {
        random_distinct(&table, count as usize, &mut rng)
    };
    let len = ids.len();
    Ok(Frame::Array(member_frames(ids.into_iter(), len)))
}

/// SPOP key [count]
fn spop(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => Some(
            parse_i64_opt(args[2])
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| CmdError::err("value is out of range, must be positive"))?,
        ),
        _ => return Err(CmdError::Syntax),
    };
    let key = &args[1];
    let v = ctx.view();
    let Some(e) = v.peek(key) else {
        return Ok(if count.is_some() {
            Frame::Set(Vec::new())
        } else {
            Frame::Null
        });
    };
    let table = e.value().as_idset()?.table();
    if table.is_empty() {
        return Ok(if count.is_some() {
            Frame::Set(Vec::new())
        } else {
            Frame::Null
        });
    }
    step_aside_past(count.map_or(1, |c| random_walk(&table, c.min(i64::MAX as u64) as i64)));
    let mut rng = rand::thread_rng();
    let popped = match count {
        None => vec![random_member(&table, &mut rng)],
        Some(0) => return Ok(Frame::Set(Vec::new())),
        Some(c) if c >= table.len() => {
            let all: Vec<u64> = table.iter().collect();
            v.delete(key, Free::Now);
            ctx.notify(notify::SET, "spop", key);
            ctx.notify(notify::GENERIC, "del", key);
            return Ok(Frame::Set(member_frames(all.iter().copied(), all.len())));
        }
        Some(c) => random_distinct(&table, c as usize, &mut rng),
    };
    let (_, emptied) = remove_members(v, key, &popped);
    ctx.notify(notify::SET, "spop", key);
    if emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
    Ok(match count {
        None => id_frame(popped[0]),
        Some(_) => Frame::Set(member_frames(popped.iter().copied(), popped.len())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use relcache_protocol::idset::Builder;

    #[test]
    fn random_members_come_from_the_set_and_cover_it() {
        let mut rng = rand::thread_rng();
        for ids in [
            vec![0u64],
            vec![u64::MAX],
            vec![0, u64::MAX, 5],
            (1..=50).collect::<Vec<u64>>(),
        ] {
            let bytes = Builder::new().build(&ids);
            let t = TableRef::open(&bytes).unwrap();
            let mut seen = std::collections::HashSet::new();
            for _ in 0..2000 {
                let id = random_member(&t, &mut rng);
                assert!(ids.contains(&id));
                seen.insert(id);
            }
            assert_eq!(
                seen.len(),
                ids.len(),
                "every member drawn at some point: {ids:?}"
            );
            for count in 1..ids.len() {
                let mut d = random_distinct(&t, count, &mut rng);
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), count);
                assert!(d.iter().all(|id| ids.contains(id)));
            }
        }
    }

    #[test]
    fn random_member_survives_a_sparse_table() {
        // Below the shrink threshold, so the table keeps its slots: one live id in
        // hundreds of slots, where sampling random slots mostly misses.
        let mut set = IdSet::build(&(1..=700).collect::<Vec<u64>>());
        set.remove_many(&(2..=700).collect::<Vec<u64>>());
        let t = set.table();
        assert_eq!(t.len(), 1);
        assert!(t.capacity() > 500, "capacity {}", t.capacity());
        let mut rng = rand::thread_rng();
        assert!((0..100).all(|_| random_member(&t, &mut rng) == 1));
    }

    /// The walk a command declares before it decides to step aside counts the
    /// slots it reads, which a sparse table has many more of than members.
    #[test]
    fn walks_count_the_slots_read() {
        // One id in tens of thousands of slots, as `IDSET.LOAD … RESERVE` makes.
        let sparse_bytes = Builder::new().reserve(70_000).build(&[1]);
        let sparse = TableRef::open(&sparse_bytes).unwrap();
        let small_bytes = Builder::new().build(&(1..=1_000).collect::<Vec<u64>>());
        let small = TableRef::open(&small_bytes).unwrap();
        assert_eq!(sparse.len(), 1);
        let slots = u64::from(sparse.capacity());
        assert!(slots > 70_000, "capacity {slots}");
        assert_eq!(walked(&sparse), slots);
        // An intersection walks the set with fewer members, the sparse one.
        assert_eq!(inter_walk([&small, &sparse].into_iter()), 2 * slots);
        assert_eq!(inter_walk(std::iter::empty()), 0);
        let sets = [Some(small), Some(sparse), None];
        assert_eq!(
            SetOp::Inter.walk(&sets),
            0,
            "a missing key: nothing to walk"
        );
        assert_eq!(
            SetOp::Union.walk(&sets),
            3 * (walked(&small) + slots),
            "each member probed in the sets before it"
        );
        assert_eq!(SetOp::Diff.walk(&sets), 3 * walked(&small));
        // A few draws sample; a count near the size gathers the set.
        let big_bytes = Builder::new().build(&(1..=100_000).collect::<Vec<u64>>());
        let big = TableRef::open(&big_bytes).unwrap();
        assert_eq!(random_walk(&big, 10), 10);
        assert_eq!(random_walk(&big, 30_000), walked(&big));
        assert_eq!(random_walk(&big, -10), 10);
        assert_eq!(random_walk(&big, -1_000_000), 1_000_000);
        assert_eq!(random_walk(&sparse, 1), slots, "one member: gathered");
    }

    #[test]
    fn set_ops_on_tables() {
        let a = Builder::new().build(&[0, 1, 2, 3, u64::MAX]);
        let b = Builder::new().build(&[2, 3, 4, u64::MAX]);
        let (ta, tb) = (TableRef::open(&a).unwrap(), TableRef::open(&b).unwrap());
        let sorted = |mut v: Vec<u64>| {
            v.sort_unstable();
            v
        };
        assert_eq!(
            sorted(SetOp::Inter.apply(vec![Some(ta), Some(tb)])),
            vec![2, 3, u64::MAX]
        );
        assert_eq!(SetOp::Inter.apply(vec![Some(ta), None]), Vec::<u64>::new());
        assert_eq!(
            sorted(SetOp::Union.apply(vec![Some(ta), None, Some(tb)])),
            vec![0, 1, 2, 3, 4, u64::MAX]
        );
        assert_eq!(
            sorted(SetOp::Diff.apply(vec![Some(ta), Some(tb)])),
            vec![0, 1]
        );
        assert_eq!(SetOp::Diff.apply(vec![None, Some(tb)]), Vec::<u64>::new());
        let many: Vec<Option<TableRef<'_>>> = (0..10)
            .map(|i| Some(if i % 2 == 0 { ta } else { tb }))
            .collect();
        assert_eq!(
            sorted(SetOp::Union.apply(many)),
            vec![0, 1, 2, 3, 4, u64::MAX]
        );
    }
}
