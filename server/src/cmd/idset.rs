//! The IDSET family: relcache's own commands on idset tables (named like
//! RedisBloom's `BF.*`).
//!
//! What a relation service needs that the SET family cannot say:
//! - load a whole follow set in one command, from a prebuilt table, packed ids or
//!   decimal ids (`IDSET.LOAD`), built and checked before any lock is taken;
//! - tell a cache miss from a "no": every read here replies nil for a missing key,
//!   where SISMEMBER would say 0 and send the caller to MySQL for nothing — or worse,
//!   not send it;
//! - batch membership in decimal (`IDSET.MEXISTS`) or binary (`IDSET.MEXISTSBIN`:
//!   packed little-endian ids in, a bitmap out, nothing to parse on either side);
//! - write-through updates that never create a partial set (`IDSET.ADD … XX`), and
//!   that are applied in the order the source of truth committed them however they
//!   arrive (`SEQ`: see below);
//! - one id against many keys (`IDSET.WHICH`): "which of the people I follow follow X?".
//!
//! Unlike SREM, removing the last id keeps an empty set: an empty set is a cached
//! answer ("follows nobody"), not a miss.
//!
//! The writes and the scan pager this family shares with the SET family (adds that
//! grow a table outside the lock, the drop of a set a late change reached) are in
//! [`super::setcore`]; what is here is the IDSET commands' own parsing and replies.
//!
//! # Sequenced changes
//!
//! Two writers that follow and unfollow the same user one after the other in MySQL
//! send their cache updates afterwards, and nothing makes those arrive in commit
//! order: an `IDSET.ADD` held up on the network can land after the `IDSET.REM` that
//! committed later, and leave the set saying "follows" for good. So a set carries
//! the sequence number of the newest change it reflects (`IDSET.LOAD … SEQ n`: the
//! newest change the loaded ids include), and a write-through says which change it
//! is (`IDSET.ADD key XX SEQ n id`, `IDSET.REM key SEQ n id`). A change newer than
//! the set is applied and moves the set on; the same change again does nothing; an
//! older one arrived out of order — after a later change, or after a load that may
//! or may not include it — and the set can no longer be trusted, so the key is
//! dropped (answered nil, as a missing key) and the next read reloads it. Changes to
//! different ids commute, so only arrival out of sequence order costs a reload, and
//! that is rare: it takes two writes to one user within a network delay.

use std::sync::atomic::Ordering::Relaxed;

use bytes::{BufMut, Bytes, BytesMut};
use relcache_protocol::idset::{self, Packed, TableRef};
use relcache_protocol::resp::Frame;

use super::ids::{id_frame, parse_cursor, parse_id, parse_ids};
use super::lease::{self, LeaseOpts};
use super::setcore::{self, scan_page, scan_reply, Applied, PageLimit, ScanOpts};
use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, Ctx};
use crate::db::{Change, IdSet, Value};
use crate::error::{CmdError, CmdResult};
use crate::notify;

const ONE_KEY_READ: u32 = spec::READONLY | spec::FAST;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "idset.load",
        arity: -4,
        flags: spec::WRITE | spec::DENYOOM,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Replaces a key with a whole id set: a prebuilt table, packed ids, or decimal ids; with SEQ, as of that change of its source.",
        complexity: "O(N) with N the number of ids",
        handler: load,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.exists",
        arity: 3,
        flags: ONE_KEY_READ,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Whether an id is in the set: 1 or 0, nil if the key is missing.",
        handler: exists,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.mexists",
        arity: -3,
        flags: ONE_KEY_READ,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Membership of many ids, one 1/0 per id in order; nil if the key is missing.",
        complexity: "O(N) with N the number of ids",
        handler: mexists,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.mexistsbin",
        arity: -3,
        flags: ONE_KEY_READ | spec::BLOCKING,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Membership of packed little-endian u64 ids, as a bitmap (bit i of byte i/8, LSB first); nil if the key is missing. With LEASE, a miss asks for the lease to fill the key (see IDSET.LEASE).",
        complexity: "O(N) with N the number of ids",
        handler: mexistsbin,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.add",
        arity: -3,
        flags: spec::WRITE | spec::DENYOOM | spec::FAST,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Adds ids; with XX only if the key exists (nil otherwise); with SEQ only in sequence (a late change drops the key: nil). Returns the number added.",
        complexity: "O(N) amortized with N the number of ids",
        handler: add,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.rem",
        arity: -3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Removes ids, keeping an empty set; with SEQ only in sequence (a late change drops the key: nil). Returns the number removed; nil if the key is missing.",
        complexity: "O(N) with N the number of ids",
        handler: rem,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.card",
        arity: 2,
        flags: ONE_KEY_READ,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Number of ids in the set; nil if the key is missing.",
        handler: card,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.table",
        arity: 2,
        flags: ONE_KEY_READ,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "The set's table bytes (protocol/FORMAT.md), for membership checks in the client; nil if the key is missing.",
        complexity: "O(1): the table is shared, not copied",
        handler: table,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.members",
        arity: -2,
        flags: spec::READONLY,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "All ids (decimal, or one packed string with PACKED); nil if the key is missing.",
        complexity: "O(N) with N the capacity of the table",
        handler: members,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.scan",
        arity: -3,
        flags: spec::READONLY,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Iterates the ids of a set by slot position: [next cursor, ids]; nil if the key is missing.",
        complexity: "O(1) for every call. O(N) for a complete iteration.",
        handler: scan,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.info",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Table facts: capacity, ids, deleted slots, load factor, bytes, seed; nil if the key is missing.",
        handler: info,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.which",
        arity: -3,
        flags: spec::READONLY,
        keys: Keys::Range { first: 2, last: -1, step: 1 },
        group: Group::Idset,
        since: "0.1.0",
        summary: "Whether one id is in each of many sets: 1, 0, or nil for a missing key, per key in order.",
        complexity: "O(N) with N the number of keys",
        handler: which,
        ..CommandSpec::DEFAULT
    },
];

/// Packed little-endian u64s (see [`idset::unpack`]).
fn unpack(blob: &[u8]) -> Result<Packed<'_>, CmdError> {
    idset::unpack(blob).map_err(|e| CmdError::err(e.to_string()))
}

/// IDSET.LOAD key [EX seconds | PX milliseconds] [RESERVE n] [LEASE token] [SEQ n] (TABLE blob | PACKED blob | IDS id …)
fn load(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let mut expire_ms: Option<i64> = None;
    let mut reserve = 0usize;
    let mut lease_token = None;
    let mut seq = None;
    let mut i = 2;
    let set = loop {
        let Some(opt) = args.get(i) else {
            return Err(CmdError::Syntax);
        };
        let value = args.get(i + 1).ok_or(CmdError::Syntax)?;
        if eq_ic(opt, "EX") || eq_ic(opt, "PX") {
            if expire_ms.is_some() {
                return Err(CmdError::Syntax);
            }
            let n = parse_i64(value)?;
            let ms = if eq_ic(opt, "EX") {
                n.checked_mul(1000)
            } else {
                Some(n)
            };
            match ms {
                Some(ms) if ms > 0 => expire_ms = Some(ms),
                _ => return Err(CmdError::err("invalid expire time in 'idset.load' command")),
            }
            i += 2;
        } else if eq_ic(opt, "RESERVE") {
            reserve = usize::try_from(parse_i64(value)?).map_err(|_| CmdError::NotInteger)?;
            check_reserve(ctx, reserve)?;
            i += 2;
        } else if eq_ic(opt, "LEASE") {
            lease_token = Some(lease::parse_token(value)?);
            i += 2;
        } else if eq_ic(opt, "SEQ") {
            if seq.is_some() {
                return Err(CmdError::Syntax);
            }
            seq = Some(parse_seq(value, 0)?);
            i += 2;
        } else if eq_ic(opt, "TABLE") {
            if args.len() != i + 2 {
                return Err(CmdError::Syntax);
            }
            break IdSet::from_client(ctx.stored(value), ctx.server.config.table_check())?
                .reserved(reserve);
        } else if eq_ic(opt, "PACKED") {
            if args.len() != i + 2 {
                return Err(CmdError::Syntax);
            }
            break IdSet::with_reserve(&unpack(value)?.collect::<Vec<_>>(), reserve)?;
        } else if eq_ic(opt, "IDS") {
            break IdSet::with_reserve(&parse_ids(&args[i + 1..])?, reserve)?;
        } else {
            return Err(CmdError::Syntax);
        }
    };
    let set = set.with_seq(seq.unwrap_or(0));
    let len = set.len();
    let key = &args[1];
    let v = match lease_token {
        None => ctx.view(),
        Some(token) => {
            // A fill: stored only while its lease is out, which also means the key is
            // still missing and nobody wrote it since the filler read the database.
            let stats = &ctx.server.stats;
            let v = ctx.view_keeping_leases();
            if !v.end_lease(key, token) {
                stats.lease_fills_refused.incr();
                return Ok(Frame::Null);
            }
            stats.lease_fills.incr();
            v
        }
    };
    let expire_at = expire_ms.map_or(0, |ms| v.now_ms().saturating_add(ms as u64));
    let created = !v.insert(key, Value::IdSet(set), expire_at);
    ctx.notify_write(notify::SET, "idset.load", key, created);
    if expire_at != 0 {
        ctx.notify(notify::GENERIC, "expire", key);
    }
    Ok(Frame::Integer(len as i64))
}

/// RESERVE may not make a table larger than a client may send one
/// (`proto-max-bulk-len`, as SETRANGE and APPEND are bounded): otherwise a short
/// command could ask for any amount of memory, and a failed allocation aborts.
fn check_reserve(ctx: &Ctx<'_, '_>, reserve: usize) -> Result<(), CmdError> {
    let max = ctx.server.config.proto_max_bulk_len.load(Relaxed);
    match idset::Builder::new().capacity_for(reserve as u64) {
        Ok(capacity) if idset::table_len(capacity) <= max => Ok(()),
        _ => Err(CmdError::err(
            "RESERVE makes the table exceed the maximum allowed size (proto-max-bulk-len)",
        )),
    }
}

fn exists(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let id = parse_id(args[2])?;
    let found = match ctx.view().get(args[1]) {
        None => return Ok(Frame::Null),
        Some(e) => e.value().as_idset()?.contains(id),
    };
    ctx.integer(i64::from(found))
}

fn mexists(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let ids = parse_ids(&args[2..])?;
    let v = ctx.view();
    let Some(e) = v.get(args[1]) else {
        return Ok(Frame::NullArray);
    };
    let table = e.value().as_idset()?.table();
    Ok(Frame::Integers(setcore::mask_flags(
        table.contains_masks(ids.iter().copied()),
        ids.len(),
    )))
}

/// IDSET.MEXISTSBIN key packed-ids [LEASE [PX ms] [BLOCK ms]]
fn mexistsbin(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (key, packed) = (&args[1], unpack(args[2])?);
    let lease = match args.get(3) {
        None => None,
        Some(opt) if eq_ic(opt, "LEASE") => Some(LeaseOpts::parse(ctx, &args[4..])?),
        Some(_) => return Err(CmdError::Syntax),
    };
    if let Some(e) = ctx.view().get(key) {
        return bitmap(e.value().as_idset()?.table(), packed);
    }
    let Some(opts) = lease else {
        return Ok(Frame::Null);
    };
    // A miss that asks for a lease: look again under exclusive locks, since the key
    // may have been filled while the shared ones were let go.
    if !ctx.lock_exclusive() {
        return Ok(Frame::Null);
    }
    if let Some(e) = ctx.view().get(key) {
        return bitmap(e.value().as_idset()?.table(), packed);
    }
    lease::on_miss(ctx, key, opts)
}

/// Bit i (byte i/8, least significant bit first) says whether the i-th packed id
/// is in `table`.
fn bitmap(table: TableRef<'_>, packed: Packed<'_>) -> CmdResult {
    let mut bitmap = vec![0u8; packed.len().div_ceil(8)];
    // A mask's bit i is byte i / 8's bit i % 8 in little-endian order.
    for (out, mask) in bitmap.chunks_mut(8).zip(table.contains_masks(packed)) {
        out.copy_from_slice(&mask.to_le_bytes()[..out.len()]);
    }
    Ok(Frame::Bulk(bitmap.into()))
}

/// A sequence number: a canonical decimal in `min..=i64::MAX` (what IDSET.INFO can
/// report). A change is numbered from 1; a load may be as of change 0 (none).
fn parse_seq(arg: &[u8], min: u64) -> Result<u64, CmdError> {
    super::ids::parse_id_opt(arg)
        .filter(|&n| n >= min && n <= i64::MAX as u64)
        .ok_or_else(|| CmdError::err("invalid sequence number"))
}

/// The options of a write-through, `[XX] [SEQ n]` in any order (XX only where
/// `xx_allowed`), and where the ids start.
fn change_opts(args: &[&[u8]], xx_allowed: bool) -> Result<(bool, Option<u64>, usize), CmdError> {
    let (mut xx, mut seq, mut i) = (false, None, 2);
    loop {
        match args.get(i) {
            Some(a) if xx_allowed && !xx && eq_ic(a, "XX") => {
                xx = true;
                i += 1;
            }
            Some(a) if seq.is_none() && eq_ic(a, "SEQ") => {
                seq = Some(parse_seq(args.get(i + 1).ok_or(CmdError::Syntax)?, 1)?);
                i += 2;
            }
            // A numbered change applies to a set that is cached whole; created
            // from one change, a set would claim to be complete as of it.
            _ if seq.is_some() && xx_allowed && !xx => {
                return Err(CmdError::err(
                    "SEQ needs XX: a numbered change applies to a cached set, never creates one",
                ))
            }
            _ => return Ok((xx, seq, i)),
        }
    }
}

/// IDSET.ADD key [XX] [SEQ n] id …
fn add(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (xx, seq, first) = change_opts(args, true)?;
    if args.len() <= first {
        return Err(CmdError::WrongArity(ctx.spec.name.into()));
    }
    let ids = parse_ids(&args[first..])?;
    let key = &args[1];
    match setcore::add(ctx, key, &ids, xx, seq)? {
        Some(added) if added.dropped => {
            ctx.notify(notify::SET, "idset.drop", key);
            Ok(Frame::Null)
        }
        Some(added) => {
            if added.n > 0 {
                ctx.notify_write(notify::SET, "idset.add", key, added.created);
            }
            ctx.integer(added.n as i64)
        }
        None => Ok(Frame::Null),
    }
}

/// IDSET.REM key [SEQ n] id …
fn rem(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (_, seq, first) = change_opts(args, false)?;
    if args.len() <= first {
        return Err(CmdError::WrongArity(ctx.spec.name.into()));
    }
    let ids = parse_ids(&args[first..])?;
    let late = &ctx.server.stats.idset_late_changes;
    let v = ctx.view();
    let key = &args[1];
    match setcore::apply(v, key, Change::Remove(&ids), seq.map(|s| (s, late)))? {
        Applied::Changed(removed) => {
            if removed > 0 {
                ctx.notify(notify::SET, "idset.rem", key);
            }
            ctx.integer(removed as i64)
        }
        Applied::DroppedLate => {
            ctx.notify(notify::SET, "idset.drop", key);
            Ok(Frame::Null)
        }
        Applied::Missing => Ok(Frame::Null),
    }
}

fn card(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    match ctx.view().get(args[1]) {
        None => Ok(Frame::Null),
        Some(e) => Ok(Frame::Integer(e.value().as_idset()?.len() as i64)),
    }
}

/// IDSET.TABLE key: the stored table, byte for byte, so a client can check
/// membership locally with any reader of FORMAT.md (GET answers WRONGTYPE for a
/// set, as Redis does).
fn table(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    match ctx.view().get(args[1]) {
        None => Ok(Frame::Null),
        Some(e) => Ok(Frame::Bulk(e.value().as_idset()?.bytes().clone())),
    }
}

fn members(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let packed = match args.get(2) {
        None => false,
        Some(a) if eq_ic(a, "PACKED") && args.len() == 3 => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    let v = ctx.view();
    let Some(e) = v.get(args[1]) else {
        return Ok(if packed {
            Frame::Null
        } else {
            Frame::NullArray
        });
    };
    let table = e.value().as_idset()?.table();
    crate::offload::step_aside_past(setcore::walked(&table));
    if packed {
        let mut out = BytesMut::with_capacity(table.len() as usize * 8);
        table.iter().for_each(|id| out.put_u64_le(id));
        return Ok(Frame::Bulk(out.freeze()));
    }
    Ok(Frame::Array(table.iter().map(id_frame).collect()))
}

/// IDSET.SCAN key cursor [COUNT n]: the cursor is a slot position, and COUNT the
/// number of slots a call reads (see [`setcore::scan_page`] for what a full
/// iteration guarantees).
fn scan(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(args[2])?;
    let opts = ScanOpts::parse(&args[3..], false)?;
    let v = ctx.view();
    let Some(e) = v.get(args[1]) else {
        return Ok(Frame::NullArray);
    };
    let table = e.value().as_idset()?.table();
    let (next, ids) = scan_page(&table, cursor, PageLimit::slots(opts.count));
    Ok(scan_reply(next, ids))
}

fn info(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let v = ctx.view();
    let Some(e) = v.peek(args[1]) else {
        return Ok(Frame::Null);
    };
    let set = e.value().as_idset()?;
    let t = set.table();
    let field = |k: &'static str, v: Frame| (Frame::Simple(Bytes::from_static(k.as_bytes())), v);
    Ok(Frame::Map(vec![
        field("version", Frame::Integer(i64::from(idset::VERSION))),
        field("ids", Frame::Integer(t.len() as i64)),
        field("capacity", Frame::Integer(i64::from(t.capacity()))),
        field("deleted", Frame::Integer(i64::from(t.deleted()))),
        field("load_factor", Frame::Double(t.load_factor())),
        field(
            "room_in_place",
            Frame::Integer(i64::from(t.room_in_place())),
        ),
        field("bytes", Frame::Integer(set.heap_size() as i64)),
        field(
            "bytes_per_id",
            Frame::Double(if t.is_empty() {
                0.0
            } else {
                set.heap_size() as f64 / t.len() as f64
            }),
        ),
        // Unsigned, as FORMAT.md specifies: a decimal string like every id, since a
        // RESP integer would print seeds past 2^63 as negative numbers.
        field("seed", id_frame(t.seed())),
        field("seq", Frame::Integer(set.seq() as i64)),
    ]))
}

fn which(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let id = parse_id(args[1])?;
    let v = ctx.view();
    let mut out = Vec::with_capacity(args.len() - 2);
    for key in &args[2..] {
        out.push(match v.get(key) {
            None => Frame::Null,
            Some(e) => Frame::Integer(e.value().as_idset()?.contains(id) as i64),
        });
    }
    Ok(Frame::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpack_rejects_ragged_input() {
        assert_eq!(
            unpack(&7u64.to_le_bytes()).unwrap().collect::<Vec<_>>(),
            vec![7]
        );
        assert!(unpack(&[1, 2, 3])
            .unwrap_err()
            .to_string()
            .contains("multiple of 8"));
    }
}
