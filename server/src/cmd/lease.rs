//! Leases: read-through fills that concurrent misses and writes cannot make stale.
//!
//! The protocol (the storage side is `db::lease`):
//! - A caller that misses a key asks for a lease: `IDSET.LEASE key`, or a membership
//!   read with the `LEASE` option (`IDSET.MEXISTSBIN key ids LEASE`), which answers
//!   from the set when it is there and asks for the lease in the same round trip
//!   when it is not. The first asker gets a token and reads the database.
//! - Whoever misses while the lease is out is told so (nil), or with `BLOCK ms`
//!   waits: when the fill lands the parked command runs again and answers from the
//!   set; if the lease ends without a fill (released, revoked by a write, lapsed) a
//!   waiter is granted the next lease instead.
//! - The holder fills with `IDSET.LOAD … LEASE token`, stored only while its lease is
//!   still out; or gives up with `IDSET.RELEASE key token`.
//! - Every write to the key revokes the lease (see `Ctx::view`), so a fill built from
//!   a database read older than that write is refused.
//!
//! `BLOCK` follows XREAD: milliseconds, 0 for as long as it takes — which is never
//! longer than the lease's own lifetime, since a lapsed lease passes to a waiter.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, Ctx};
use crate::blocking::Wait;
use crate::db::LeaseState;
use crate::error::{CmdError, CmdResult};
use crate::server::Server;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "idset.lease",
        arity: -2,
        // Exclusive: granting a lease changes the shard, though not the key.
        flags: spec::LOCK_WRITE | spec::BLOCKING | spec::FAST,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Asks for the lease to fill a missing key: 0 if the key is present, a token if granted, nil if another caller holds it (after waiting up to BLOCK ms).",
        handler: lease,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "idset.release",
        arity: 3,
        flags: spec::LOCK_WRITE | spec::FAST,
        keys: Keys::ONE,
        group: Group::Idset,
        since: "0.1.0",
        summary: "Gives up a lease without filling the key, waking its waiters: 1 if the token was the key's live lease, else 0.",
        handler: release,
        ..CommandSpec::DEFAULT
    },
];

/// The lease options of a read: `[PX ms] [BLOCK ms]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LeaseOpts {
    /// How long a granted lease lasts.
    pub ttl_ms: u64,
    /// How long to wait for another caller's lease: `None` not at all,
    /// `Some(ZERO)` until it resolves.
    pub block: Option<Duration>,
}

impl LeaseOpts {
    /// Parses `[PX ms] [BLOCK ms]` in any order.
    pub fn parse(ctx: &Ctx<'_, '_>, opts: &[&[u8]]) -> Result<LeaseOpts, CmdError> {
        let mut parsed = LeaseOpts {
            ttl_ms: ctx.server.config.lease_timeout.load(Relaxed),
            block: None,
        };
        let mut it = opts.iter();
        while let Some(opt) = it.next() {
            let value = it.next().ok_or(CmdError::Syntax)?;
            let n = parse_i64(value)?;
            if eq_ic(opt, "PX") {
                let max = ctx.server.config.lease_max_ttl.load(Relaxed);
                if n <= 0 {
                    return Err(CmdError::err(format!(
                        "invalid lease time in '{}' command",
                        ctx.spec.name
                    )));
                }
                if n as u64 > max {
                    return Err(CmdError::err(format!(
                        "invalid lease time in '{}' command: longer than lease-max-ttl ({max} ms)",
                        ctx.spec.name
                    )));
                }
                parsed.ttl_ms = n as u64;
            } else if eq_ic(opt, "BLOCK") {
                if n < 0 {
                    return Err(CmdError::err("timeout is negative"));
                }
                parsed.block = Some(Duration::from_millis(n as u64));
            } else {
                return Err(CmdError::Syntax);
            }
        }
        Ok(parsed)
    }
}

/// IDSET.LEASE key [PX ms] [BLOCK ms]
fn lease(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let opts = LeaseOpts::parse(ctx, &args[2..])?;
    if ctx.view().get(args[1]).is_some() {
        return Ok(Frame::Integer(0));
    }
    on_miss(ctx, args[1], opts)
}

/// IDSET.RELEASE key token
fn release(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let token = parse_token(args[2])?;
    let released = ctx.view().end_lease(args[1], token);
    if released {
        ctx.server.stats.lease_releases.incr();
    }
    Ok(Frame::Integer(released as i64))
}

/// A lease token argument: a positive integer.
pub(super) fn parse_token(arg: &[u8]) -> Result<u64, CmdError> {
    match relcache_protocol::resp::parse_strict_i64(arg) {
        Some(t) if t > 0 => Ok(t as u64),
        _ => Err(CmdError::err("invalid lease token")),
    }
}

/// What a lease-asking command answers for a missing `key`, with the view locked
/// exclusively: a new lease's token; nil when another caller holds the lease and
/// the caller will not (or no longer) wait; or, to wait, nothing yet — the command
/// is parked ([`Ctx::park`]) and runs again when the lease ends or lapses.
pub(super) fn on_miss(ctx: &mut Ctx<'_, '_>, key: &[u8], opts: LeaseOpts) -> CmdResult {
    let now = Instant::now();
    let deadline = match (ctx.resumed(), opts.block) {
        (Some(d), _) => Some(d),
        (None, Some(Duration::ZERO)) => Some(far_future(now)),
        (None, Some(wait)) => Some(now + wait),
        (None, None) => None,
    };
    // Inside EXEC nothing may wait: the transaction holds its locks.
    let deadline = deadline.filter(|_| !ctx.in_exec());
    let server: &Server = ctx.server;
    let stats = &server.stats;
    let resumed = ctx.resumed().is_some();
    let v = ctx.view();
    match v.lease_state(key) {
        LeaseState::Free => {
            // Leases are state a client can create at will and no eviction frees:
            // bounded in number, and refused when memory is over the limit (the
            // request got its chance to evict first, like any other).
            let max = server.config.lease_max_count.load(Relaxed);
            if v.db().leases_out() as u64 >= max {
                stats.lease_refusals.incr();
                return Err(CmdError::err(format!(
                    "too many leases out (lease-max-count is {max}): fill or release them"
                )));
            }
            if server.over_maxmemory() {
                stats.lease_refusals.incr();
                return Err(CmdError::Oom);
            }
            let (token, replaced_lapsed) = v.grant_lease(key, opts.ttl_ms);
            stats.lease_grants.incr();
            if replaced_lapsed {
                stats.lease_lapses.incr();
            }
            Ok(Frame::Integer(token as i64))
        }
        LeaseState::Held { expires_at, ended } => match deadline {
            Some(deadline) if now < deadline => {
                let lease_left = Duration::from_millis(expires_at.saturating_sub(v.now_ms()));
                if !resumed {
                    stats.lease_waits.incr();
                }
                ctx.park(Wait {
                    wake: ended,
                    recheck_at: deadline.min(now + lease_left),
                    deadline: Some(deadline),
                });
                Ok(Frame::Null)
            }
            _ => {
                stats.lease_busy.incr();
                Ok(Frame::Null)
            }
        },
    }
}

/// A deadline no wait reaches (`BLOCK 0`).
fn far_future(now: Instant) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(CENTURY).unwrap_or(now)
}
