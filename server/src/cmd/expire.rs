//! The expiry commands: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX / XX / GT /
//! LT), TTL, PTTL, EXPIRETIME, PEXPIRETIME and PERSIST — Redis 7.2's `expire.c`.
//!
//! Times are milliseconds since the Unix epoch throughout; each command reads the
//! clock once, through its view, so it sees one instant. A deadline already past
//! deletes the key at once, as Redis does. The active expiry sweep is `db::expire`.

use relcache_protocol::resp::Frame;

use super::keys::reap_if_expired;
use super::spec::{self, CommandSpec, Keys};
use super::{eq_ic, parse_i64, Ctx};
use crate::db::Free;
use crate::error::{CmdError, CmdResult};
use crate::notify;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "expire",
        arity: -3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        summary: "Sets the expiration time of a key in seconds.",
        handler: expire,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pexpire",
        arity: -3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        since: "2.6.0",
        summary: "Sets the expiration time of a key in milliseconds.",
        handler: pexpire,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "expireat",
        arity: -3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        since: "1.2.0",
        summary: "Sets the expiration time of a key to a Unix timestamp.",
        handler: expireat,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pexpireat",
        arity: -3,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        since: "2.6.0",
        summary: "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        handler: pexpireat,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "ttl",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        summary: "Returns the expiration time in seconds of a key.",
        handler: ttl,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pttl",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        since: "2.6.0",
        summary: "Returns the expiration time in milliseconds of a key.",
        handler: pttl,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "persist",
        arity: 2,
        flags: spec::WRITE | spec::FAST,
        keys: Keys::ONE,
        since: "2.2.0",
        summary: "Removes the expiration time of a key.",
        handler: persist,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "expiretime",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        since: "7.0.0",
        summary: "Returns the expiration time of a key as a Unix timestamp.",
        handler: expiretime,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pexpiretime",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        since: "7.0.0",
        summary: "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        handler: pexpiretime,
        ..CommandSpec::DEFAULT
    },
];

/// EXPIRE's condition options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn parse_expire_flags(opts: &[&[u8]]) -> Result<ExpireFlags, CmdError> {
    let mut f = ExpireFlags::default();
    for o in opts {
        if eq_ic(o, "NX") {
            f.nx = true;
        } else if eq_ic(o, "XX") {
            f.xx = true;
        } else if eq_ic(o, "GT") {
            f.gt = true;
        } else if eq_ic(o, "LT") {
            f.lt = true;
        } else {
            return Err(CmdError::err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(o)
            )));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

/// Whether the options allow replacing expiry `current` (Unix ms, -1 = none) with
/// `when`. No expiry counts as an infinite TTL for GT and LT.
fn expire_allowed(f: ExpireFlags, current: i64, when: i64) -> bool {
    if f.nx && current != -1 {
        return false;
    }
    if f.xx && current == -1 {
        return false;
    }
    if f.gt && (current == -1 || when <= current) {
        return false;
    }
    if f.lt && current != -1 && when >= current {
        return false;
    }
    true
}

fn expire(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, args, 1000, true)
}

fn pexpire(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, args, 1, true)
}

fn expireat(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, args, 1000, false)
}

fn pexpireat(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, args, 1, false)
}

/// `unit_ms` is 1000 for the seconds forms; `relative` adds the current time.
fn expire_generic(
    ctx: &mut Ctx<'_, '_>,
    args: &[&[u8]],
    unit_ms: i64,
    relative: bool,
) -> CmdResult {
    // Redis checks the options before the number.
    let flags = parse_expire_flags(&args[3..])?;
    let name = ctx.spec.name;
    let invalid = || CmdError::err(format!("invalid expire time in '{name}' command"));
    let when = parse_i64(args[2])?
        .checked_mul(unit_ms)
        .ok_or_else(invalid)?;
    let key = args[1];
    // The base time is the view's, so the whole command sees one instant; the
    // overflow check that needs it runs under the lock, which costs nothing.
    let v = ctx.view();
    let now = v.now_ms() as i64;
    let when = if relative {
        when.checked_add(now).ok_or_else(invalid)?
    } else {
        when
    };
    let Some(current) = v.peek(key).map(|e| e.expire_at().map_or(-1, |t| t as i64)) else {
        reap_if_expired(v, key);
        return Ok(Frame::Integer(0));
    };
    if !expire_allowed(flags, current, when) {
        return Ok(Frame::Integer(0));
    }
    if when <= now {
        // A deadline already past deletes the key at once (and WATCHers see it).
        v.delete(key, Free::Now);
        ctx.notify(notify::GENERIC, "del", key);
    } else {
        v.set_expire(key, when as u64);
        ctx.notify(notify::GENERIC, "expire", key);
    }
    Ok(Frame::Integer(1))
}

fn ttl(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    ttl_generic(ctx, args, false)
}

fn pttl(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    ttl_generic(ctx, args, true)
}

/// -2 for a missing key, -1 for no expiry, else the time left (seconds rounded to
/// the nearest, as Redis does).
fn ttl_generic(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], ms: bool) -> CmdResult {
    let v = ctx.view();
    let now = v.now_ms();
    let left = match v.get_notouch(args[1]) {
        None => -2,
        Some(e) => match e.expire_at() {
            None => -1,
            Some(at) => {
                let left = at.saturating_sub(now);
                (if ms { left } else { (left + 500) / 1000 }) as i64
            }
        },
    };
    ctx.integer(left)
}

fn expiretime(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    expiretime_generic(ctx, args, false)
}

fn pexpiretime(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    expiretime_generic(ctx, args, true)
}

fn expiretime_generic(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], ms: bool) -> CmdResult {
    let Some(e) = ctx.view().get_notouch(args[1]) else {
        return Ok(Frame::Integer(-2));
    };
    Ok(Frame::Integer(match e.expire_at() {
        None => -1,
        Some(at) if ms => at as i64,
        Some(at) => (at / 1000) as i64,
    }))
}

fn persist(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let key = args[1];
    let v = ctx.view();
    match v.peek(key).map(|e| e.expire_at().is_some()) {
        None => {
            reap_if_expired(v, key);
            Ok(Frame::Integer(0))
        }
        Some(false) => Ok(Frame::Integer(0)),
        Some(true) => {
            v.set_expire(key, 0);
            ctx.notify(notify::GENERIC, "persist", key);
            Ok(Frame::Integer(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expire_conditions() {
        let f = |s: &str| {
            let opts: Vec<&[u8]> = s.split_whitespace().map(str::as_bytes).collect();
            parse_expire_flags(&opts)
        };
        assert!(f("nx xx")
            .unwrap_err()
            .to_string()
            .starts_with("ERR NX and XX, GT or LT"));
        assert!(f("gt lt")
            .unwrap_err()
            .to_string()
            .starts_with("ERR GT and LT"));
        assert_eq!(
            f("foo").unwrap_err().to_string(),
            "ERR Unsupported option foo"
        );
        let gt = f("GT").unwrap();
        assert!(
            !expire_allowed(gt, -1, 10),
            "no TTL is infinite: GT never wins"
        );
        assert!(expire_allowed(gt, 5, 10));
        let lt = f("lt").unwrap();
        assert!(expire_allowed(lt, -1, 10));
        assert!(!expire_allowed(lt, 5, 10));
        assert!(!expire_allowed(f("nx").unwrap(), 5, 10));
        assert!(!expire_allowed(f("xx").unwrap(), -1, 10));
    }
}
