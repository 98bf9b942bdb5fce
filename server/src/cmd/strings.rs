//! The string family: GET / SET and their variants (SETNX, SETEX, PSETEX, GETEX,
//! GETDEL, GETSET), the multi-key MGET / MSET / MSETNX, the counters (INCR, DECR,
//! INCRBY, DECRBY, INCRBYFLOAT) and the in-place edits (APPEND, SETRANGE, GETRANGE,
//! SUBSTR, STRLEN), with Redis 7.2's options, error texts and check order.
//!
//! Not here: LCS and the bit commands, which relcache does not offer, and the key
//! commands (TTL, EXPIRE …), which live in `keys.rs`.
//!
//! Every handler parses and validates its arguments before it takes the shard lock;
//! where Redis reports an argument error only after looking the key up (GETEX's
//! expiry, INCRBYFLOAT's increment), the parse result is kept and reported at the
//! point Redis would. Stored values are always fresh copies: request arguments are
//! slices of the connection's read buffer, and keeping one would pin that buffer.
//!
//! One relcache addition: a whole-value write (SET and its variants, GETSET, MSET,
//! MSETNX) of bytes that start with the idset table magic stores an idset (TYPE
//! `set`), validated before the lock, or fails with "invalid idset table" and writes
//! nothing — a relation service fills a follow set with one SET. The commands that
//! read a whole value the way GET does (GET, MGET, GETEX, GETDEL, GETSET, SET … GET)
//! return such a set's table bytes; every other string command treats it as the
//! wrong type.
//!
//! INCRBYFLOAT computes in x87 80-bit extended precision and prints with `%.17Lf`
//! like Redis on x86-64, emulated exactly by [`long_double`], so its replies match
//! Redis digit for digit (`1000 + 0.1` is `1000.09999999999999998` there too).

use bytes::{Bytes, BytesMut};
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, parse_i64_opt, Ctx};
use crate::db::{Entry, Value};
use crate::error::{CmdError, CmdResult};

const GETRANGE_COMPLEXITY: &str = "O(N) where N is the length of the returned string. The complexity is ultimately determined by the returned length, but because creating a substring from an existing string is very cheap, it can be considered O(1) for small strings.";

/// Shorthand for the table below: a single-key string command.
const fn one(
    name: &'static str,
    arity: i32,
    flags: u32,
    since: &'static str,
    summary: &'static str,
    handler: spec::Handler,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        keys: Keys::ONE,
        group: Group::String,
        since,
        summary,
        complexity: "O(1)",
        handler,
        subcommands: &[],
    }
}

const W_OOM: u32 = spec::WRITE | spec::DENYOOM;
const W_OOM_FAST: u32 = spec::WRITE | spec::DENYOOM | spec::FAST;
const R_FAST: u32 = spec::READONLY | spec::FAST;

pub(super) const COMMANDS: &[CommandSpec] = &[
    one("get", 2, R_FAST, "1.0.0", "Returns the string value of a key.", get),
    one(
        "set",
        -3,
        W_OOM,
        "1.0.0",
        "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
        set,
    ),
    one(
        "setnx",
        3,
        W_OOM_FAST,
        "1.0.0",
        "Set the string value of a key only when the key doesn't exist.",
        setnx,
    ),
    one(
        "setex",
        4,
        W_OOM,
        "2.0.0",
        "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.",
        setex,
    ),
    one(
        "psetex",
        4,
        W_OOM,
        "2.6.0",
        "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.",
        psetex,
    ),
    one(
        "getex",
        -2,
        spec::WRITE | spec::FAST,
        "6.2.0",
        "Returns the string value of a key after setting its expiration time.",
        getex,
    ),
    one(
        "getdel",
        2,
        spec::WRITE | spec::FAST,
        "6.2.0",
        "Returns the string value of a key after deleting the key.",
        getdel,
    ),
    one(
        "getset",
        3,
        W_OOM_FAST,
        "1.0.0",
        "Returns the previous string value of a key after setting it to a new value.",
        getset,
    ),
    CommandSpec {
        name: "mget",
        arity: -2,
        flags: R_FAST,
        keys: Keys::ALL_ARGS,
        group: Group::String,
        since: "1.0.0",
        summary: "Atomically returns the string values of one or more keys.",
        complexity: "O(N) where N is the number of keys to retrieve.",
        handler: mget,
        subcommands: &[],
    },
    CommandSpec {
        name: "mset",
        arity: -3,
        flags: W_OOM,
        keys: Keys::PAIRS,
        group: Group::String,
        since: "1.0.1",
        summary: "Atomically creates or modifies the string values of one or more keys.",
        complexity: "O(N) where N is the number of keys to set.",
        handler: mset,
        subcommands: &[],
    },
    CommandSpec {
        name: "msetnx",
        arity: -3,
        flags: W_OOM,
        keys: Keys::PAIRS,
        group: Group::String,
        since: "1.0.1",
        summary: "Atomically modifies the string values of one or more keys only when all keys don't exist.",
        complexity: "O(N) where N is the number of keys to set.",
        handler: msetnx,
        subcommands: &[],
    },
    CommandSpec {
        complexity: "O(1). The amortized time complexity is O(1) assuming the appended value is small and the already present value is of any size, since the dynamic string library used by Redis will double the free space available on every reallocation.",
        ..one(
            "append",
            3,
            W_OOM_FAST,
            "2.0.0",
            "Appends a string to the value of a key. Creates the key if it doesn't exist.",
            append,
        )
    },
    one("strlen", 2, R_FAST, "2.2.0", "Returns the length of a string value.", strlen),
    CommandSpec {
        complexity: GETRANGE_COMPLEXITY,
        ..one(
            "getrange",
            4,
            spec::READONLY,
            "2.4.0",
            "Returns a substring of the string stored at a key.",
            getrange,
        )
    },
    CommandSpec {
        complexity: GETRANGE_COMPLEXITY,
        ..one("substr", 4, spec::READONLY, "1.0.0", "Returns a substring from a string value.", getrange)
    },
    CommandSpec {
        complexity: "O(1), not counting the time taken to copy the new string in place. Usually, this string is very small so the amortized complexity is O(1). Otherwise, complexity is O(M) with M being the length of the value argument.",
        ..one(
            "setrange",
            4,
            W_OOM,
            "2.2.0",
            "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.",
            setrange,
        )
    },
    one(
        "incr",
        2,
        W_OOM_FAST,
        "1.0.0",
        "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.",
        incr,
    ),
    one(
        "decr",
        2,
        W_OOM_FAST,
        "1.0.0",
        "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.",
        decr,
    ),
    one(
        "incrby",
        3,
        W_OOM_FAST,
        "1.0.0",
        "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.",
        incrby,
    ),
    one(
        "decrby",
        3,
        W_OOM_FAST,
        "1.0.0",
        "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.",
        decrby,
    ),
    one(
        "incrbyfloat",
        3,
        W_OOM_FAST,
        "2.6.0",
        "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.",
        incrbyfloat,
    ),
];

// ---------------------------------------------------------------------------------
// Options and expiry

/// Which expiry option was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// EX seconds (relative).
    Ex,
    /// PX milliseconds (relative).
    Px,
    /// EXAT unix-seconds.
    ExAt,
    /// PXAT unix-milliseconds.
    PxAt,
}

/// The options of SET (`for_set`) or GETEX, as given; the expiry value is still raw.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(Unit, &'a [u8])>,
}

/// Parses SET's or GETEX's trailing options with Redis's rules: NX and XX exclude
/// each other, one kind of expiry at most (repeating the same one is allowed, the
/// last wins), KEEPTTL (SET) and PERSIST (GETEX) exclude any expiry, and anything
/// else — including an expiry keyword with no value after it — is a syntax error.
fn parse_options(opts: &[Bytes], for_set: bool) -> Result<Options<'_>, CmdError> {
    let mut o = Options::default();
    let mut i = 0;
    while i < opts.len() {
        let a = &opts[i][..];
        let unit = if eq_ic(a, "EX") {
            Some(Unit::Ex)
        } else if eq_ic(a, "PX") {
            Some(Unit::Px)
        } else if eq_ic(a, "EXAT") {
            Some(Unit::ExAt)
        } else if eq_ic(a, "PXAT") {
            Some(Unit::PxAt)
        } else {
            None
        };
        if for_set && eq_ic(a, "NX") && !o.xx {
            o.nx = true;
        } else if for_set && eq_ic(a, "XX") && !o.nx {
            o.xx = true;
        } else if for_set && eq_ic(a, "GET") {
            o.get = true;
        } else if for_set && eq_ic(a, "KEEPTTL") && o.expire.is_none() {
            o.keepttl = true;
        } else if !for_set && eq_ic(a, "PERSIST") && o.expire.is_none() {
            o.persist = true;
        } else if let (Some(unit), Some(value)) = (unit, opts.get(i + 1)) {
            if o.keepttl || o.persist || o.expire.is_some_and(|(u, _)| u != unit) {
                return Err(CmdError::Syntax);
            }
            o.expire = Some((unit, &value[..]));
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

/// A validated expiry, not yet tied to the clock of the command's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    /// This many ms after the command runs.
    In(u64),
    /// At this Unix time in ms.
    At(u64),
}

impl Expiry {
    /// The absolute expiry in Unix ms.
    fn resolve(self, now_ms: u64) -> u64 {
        match self {
            Expiry::In(ms) => now_ms.saturating_add(ms),
            Expiry::At(at) => at,
        }
    }

    fn is_absolute(self) -> bool {
        matches!(self, Expiry::At(_))
    }
}

/// Validates an expiry value like Redis: an integer (else "not an integer"), > 0,
/// and not overflowing a signed 64-bit ms time once converted (and, for relative
/// ones, once added to now), else "invalid expire time in '<cmd>' command".
fn parse_expiry(unit: Unit, arg: &[u8], cmd: &str, now_ms: u64) -> Result<Expiry, CmdError> {
    let n = parse_i64(arg)?;
    let invalid = || CmdError::err(format!("invalid expire time in '{cmd}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let ms = match unit {
        Unit::Ex | Unit::ExAt => n.checked_mul(1000).ok_or_else(invalid)?,
        Unit::Px | Unit::PxAt => n,
    };
    match unit {
        Unit::Ex | Unit::Px => {
            ms.checked_add(now_ms as i64).ok_or_else(invalid)?;
            Ok(Expiry::In(ms as u64))
        }
        Unit::ExAt | Unit::PxAt => Ok(Expiry::At(ms as u64)),
    }
}

/// Redis's `checkStringLength`: `current + extra` must fit `proto-max-bulk-len`.
fn check_length(ctx: &Ctx<'_, '_>, current: u64, extra: u64) -> Result<(), CmdError> {
    let limit = ctx
        .server
        .config
        .proto_max_bulk_len
        .load(std::sync::atomic::Ordering::Relaxed);
    match current.checked_add(extra) {
        Some(total) if total <= limit => Ok(()),
        _ => Err(CmdError::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        )),
    }
}

/// Takes a live entry's string out as a `BytesMut`, to grow it in place: without a
/// copy when the entry holds the only reference, so repeated APPENDs are amortised
/// O(1) like Redis's. The caller puts the result back.
fn take_string(entry: &mut Entry) -> Result<BytesMut, CmdError> {
    let Value::Str(stored) = entry.value_mut() else {
        return Err(CmdError::WrongType);
    };
    let bytes = std::mem::take(stored);
    Ok(bytes
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..])))
}

/// The value a whole-value write stores: a copy of the argument, or an idset when
/// it is meant as a table (validated here, before any lock is taken).
fn value_from_client(arg: &[u8]) -> Result<Value, CmdError> {
    if relcache_protocol::idset::looks_like_table(arg) {
        return Ok(Value::IdSet(crate::db::IdSet::from_client(arg)?));
    }
    Ok(Value::Str(Bytes::copy_from_slice(arg)))
}

/// Values up to this size are copied into the reply rather than shared.
const COPY_REPLY_MAX: usize = 512;

/// GET's reply for a live entry: the string, or WRONGTYPE for a set, as Redis
/// answers (IDSET.TABLE hands out a set's table bytes).
///
/// Sharing the stored `Bytes` costs an atomic update of its reference count — a
/// cache line of its own, and on the first share an allocation — while copying a
/// small value touches only the data the reply needs anyway; large values are
/// shared, never copied.
fn get_reply(e: &Entry) -> CmdResult {
    let v = e.value().as_str()?;
    if v.len() <= COPY_REPLY_MAX {
        return Ok(Frame::Bulk(Bytes::copy_from_slice(v)));
    }
    Ok(Frame::Bulk(v.clone()))
}

fn int_bytes(n: i64) -> Bytes {
    Bytes::copy_from_slice(itoa::Buffer::new().format(n).as_bytes())
}

// ---------------------------------------------------------------------------------
// GET / SET and variants

fn get(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    match ctx.view().get(&args[1]) {
        Some(e) => get_reply(e),
        None => Ok(Frame::Null),
    }
}

/// What a SET-like command does once its arguments are parsed.
struct SetPlan {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    expiry: Option<Expiry>,
    /// Reply on success (when not GET).
    ok: Frame,
    /// Reply when NX / XX stops the write (when not GET).
    aborted: Frame,
}

impl SetPlan {
    fn plain(expiry: Option<Expiry>) -> SetPlan {
        SetPlan {
            nx: false,
            xx: false,
            get: false,
            keepttl: false,
            expiry,
            ok: Frame::ok(),
            aborted: Frame::Null,
        }
    }
}

/// Redis's `setGenericCommand`, after the expiry has been validated: GET's read
/// (and its WRONGTYPE, which stops the write) first, then NX / XX, then the write.
fn set_generic(ctx: &mut Ctx<'_, '_>, key: &[u8], value: Value, plan: SetPlan) -> CmdResult {
    let view = ctx.view();
    let old = if plan.get {
        Some(match view.get(key) {
            Some(e) => get_reply(e)?,
            None => Frame::Null,
        })
    } else {
        None
    };
    // `Some(expiry)` when the key exists; not a read, so no keyspace hit or miss.
    let found = view.peek(key).map(|e| e.expire_at());
    if (plan.nx && found.is_some()) || (plan.xx && found.is_none()) {
        return Ok(old.unwrap_or(plan.aborted));
    }
    let now = view.now_ms();
    let expire_at = match plan.expiry {
        Some(x) => x.resolve(now),
        None if plan.keepttl => found.flatten().unwrap_or(0),
        None => 0,
    };
    if expire_at != 0 && expire_at <= now {
        // An absolute time already past: the key is set and expires at once.
        view.remove(key);
    } else {
        view.insert(key, value, expire_at);
    }
    Ok(old.unwrap_or(plan.ok))
}

fn set(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let o = parse_options(&args[3..], true)?;
    let expiry = match o.expire {
        Some((unit, arg)) => Some(parse_expiry(unit, arg, ctx.spec.name, crate::db::now_ms())?),
        None => None,
    };
    let plan = SetPlan {
        nx: o.nx,
        xx: o.xx,
        get: o.get,
        keepttl: o.keepttl,
        ..SetPlan::plain(expiry)
    };
    set_generic(ctx, &args[1], value_from_client(&args[2])?, plan)
}

fn setnx(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let plan = SetPlan {
        nx: true,
        ok: Frame::Integer(1),
        aborted: Frame::Integer(0),
        ..SetPlan::plain(None)
    };
    set_generic(ctx, &args[1], value_from_client(&args[2])?, plan)
}

fn setex(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    set_with_ttl(ctx, args, Unit::Ex)
}

fn psetex(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    set_with_ttl(ctx, args, Unit::Px)
}

fn set_with_ttl(ctx: &mut Ctx<'_, '_>, args: &[Bytes], unit: Unit) -> CmdResult {
    let expiry = parse_expiry(unit, &args[2], ctx.spec.name, crate::db::now_ms())?;
    set_generic(
        ctx,
        &args[1],
        value_from_client(&args[3])?,
        SetPlan::plain(Some(expiry)),
    )
}

fn getex(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let o = parse_options(&args[2..], false)?;
    // Redis validates the expiry only once it has found a string under the key.
    let expiry = o
        .expire
        .map(|(unit, arg)| parse_expiry(unit, arg, ctx.spec.name, crate::db::now_ms()));
    let key = &args[1][..];
    let view = ctx.view();
    let Some(e) = view.get(key) else {
        return Ok(Frame::Null);
    };
    let value = get_reply(e)?;
    let has_ttl = e.expire_at().is_some();
    match expiry {
        Some(x) => {
            let x = x?;
            let at = x.resolve(view.now_ms());
            if x.is_absolute() && at <= view.now_ms() {
                view.remove(key);
            } else {
                view.set_expire(key, at);
            }
        }
        // Only an actual change counts as a write (WATCH).
        None if o.persist && has_ttl => {
            view.set_expire(key, 0);
        }
        None => {}
    }
    Ok(value)
}

fn getdel(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let view = ctx.view();
    let Some(e) = view.get(&args[1]) else {
        return Ok(Frame::Null);
    };
    let value = get_reply(e)?;
    view.remove(&args[1]);
    Ok(value)
}

fn getset(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let value = value_from_client(&args[2])?;
    let view = ctx.view();
    let old = match view.get(&args[1]) {
        Some(e) => get_reply(e)?,
        None => Frame::Null,
    };
    // A plain SET: the old TTL goes.
    view.insert(&args[1], value, 0);
    Ok(old)
}

// ---------------------------------------------------------------------------------
// Multi-key

fn mget(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let view = ctx.view();
    let values = args[1..]
        .iter()
        .map(|k| match view.get(k).map(get_reply) {
            Some(Ok(value)) => value,
            // Missing keys and keys GET refuses both read as nil.
            _ => Frame::Null,
        })
        .collect();
    Ok(Frame::Array(values))
}

/// MSET's and MSETNX's pairs (key index, value), values made outside the lock;
/// `key value` pairs must come complete, else the arity error Redis gives.
fn pairs(ctx: &Ctx<'_, '_>, args: &[Bytes]) -> Result<Vec<(usize, Value)>, CmdError> {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::WrongArity(ctx.spec.name.to_string()));
    }
    (1..args.len())
        .step_by(2)
        .map(|i| Ok((i, value_from_client(&args[i + 1])?)))
        .collect()
}

fn mset(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let pairs = pairs(ctx, args)?;
    let view = ctx.view();
    for (i, value) in pairs {
        view.insert(&args[i], value, 0);
    }
    Ok(Frame::ok())
}

/// All or nothing: the view holds every key's shard for the whole command, so no
/// other client can create one of the keys between the check and the writes.
fn msetnx(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let pairs = pairs(ctx, args)?;
    let view = ctx.view();
    if pairs.iter().any(|(i, _)| view.contains(&args[*i])) {
        return Ok(Frame::Integer(0));
    }
    for (i, value) in pairs {
        view.insert(&args[i], value, 0);
    }
    Ok(Frame::Integer(1))
}

// ---------------------------------------------------------------------------------
// In-place edits

fn append(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let (key, extra) = (&args[1][..], &args[2][..]);
    let current = match ctx.view().peek(key) {
        Some(e) => Some(e.value().as_str()?.len()),
        None => None,
    };
    let Some(current) = current else {
        ctx.view()
            .insert(key, Value::Str(Bytes::copy_from_slice(extra)), 0);
        return Ok(Frame::Integer(extra.len() as i64));
    };
    check_length(ctx, current as u64, extra.len() as u64)?;
    let entry = ctx
        .view()
        .get_mut(key)
        .expect("checked live under the same lock");
    let mut buf = take_string(entry)?;
    buf.extend_from_slice(extra);
    let len = buf.len();
    *entry.value_mut() = Value::Str(buf.freeze());
    Ok(Frame::Integer(len as i64))
}

fn strlen(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    match ctx.view().get(&args[1]) {
        Some(e) => Ok(Frame::Integer(e.value().as_str()?.len() as i64)),
        None => Ok(Frame::Integer(0)),
    }
}

/// The inclusive byte range GETRANGE returns for `start..=end` of a `len`-byte
/// string (negative indices count from the end), or `None` for an empty reply.
fn substring_range(start: i64, end: i64, len: usize) -> Option<std::ops::Range<usize>> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    if len == 0 {
        return None;
    }
    let len = len as i64;
    let from_end = |i: i64| if i < 0 { i + len } else { i };
    let start = from_end(start).max(0);
    let end = from_end(end).clamp(0, len - 1);
    if start > end {
        return None;
    }
    Some(start as usize..end as usize + 1)
}

fn getrange(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let start = parse_i64(&args[2])?;
    let end = parse_i64(&args[3])?;
    let Some(e) = ctx.view().get(&args[1]) else {
        return Ok(Frame::Bulk(Bytes::new()));
    };
    let s = e.value().as_str()?;
    Ok(Frame::Bulk(match substring_range(start, end, s.len()) {
        Some(r) => s.slice(r),
        None => Bytes::new(),
    }))
}

fn setrange(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let offset = parse_i64(&args[2])?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let (key, patch) = (&args[1][..], &args[3][..]);
    let offset_u = offset as u64;
    let current = match ctx.view().peek(key) {
        Some(e) => Some(e.value().as_str()?.len()),
        None => None,
    };
    match current {
        // Nothing to write: no key is created, an existing one is untouched.
        None if patch.is_empty() => Ok(Frame::Integer(0)),
        Some(len) if patch.is_empty() => Ok(Frame::Integer(len as i64)),
        None => {
            check_length(ctx, offset_u, patch.len() as u64)?;
            let mut buf = vec![0u8; offset as usize + patch.len()];
            buf[offset as usize..].copy_from_slice(patch);
            let len = buf.len();
            ctx.view().insert(key, Value::Str(Bytes::from(buf)), 0);
            Ok(Frame::Integer(len as i64))
        }
        Some(_) => {
            check_length(ctx, offset_u, patch.len() as u64)?;
            let entry = ctx
                .view()
                .get_mut(key)
                .expect("checked live under the same lock");
            let mut buf = take_string(entry)?;
            let end = offset as usize + patch.len();
            if buf.len() < end {
                buf.resize(end, 0);
            }
            buf[offset as usize..end].copy_from_slice(patch);
            let len = buf.len();
            *entry.value_mut() = Value::Str(buf.freeze());
            Ok(Frame::Integer(len as i64))
        }
    }
}

// ---------------------------------------------------------------------------------
// Counters

fn incr(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    incr_by(ctx, &args[1], 1)
}

fn decr(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    incr_by(ctx, &args[1], -1)
}

fn incrby(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let by = parse_i64(&args[2])?;
    incr_by(ctx, &args[1], by)
}

fn decrby(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let by = parse_i64(&args[2])?;
    if by == i64::MIN {
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_by(ctx, &args[1], -by)
}

/// Adds `by` to the integer under `key` (0 when absent), keeping its TTL.
fn incr_by(ctx: &mut Ctx<'_, '_>, key: &[u8], by: i64) -> CmdResult {
    let view = ctx.view();
    let (current, expire_at) = match view.peek(key) {
        Some(e) => (
            parse_i64_opt(e.value().as_str()?).ok_or(CmdError::NotInteger)?,
            e.expire_at().unwrap_or(0),
        ),
        None => (0, 0),
    };
    let new = current.checked_add(by).ok_or(CmdError::Overflow)?;
    view.insert(key, Value::Str(int_bytes(new)), expire_at);
    Ok(Frame::Integer(new))
}

fn incrbyfloat(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    // Parsed before the lock; an invalid increment is reported after the key's own
    // checks, as Redis orders them.
    let by = long_double::Ld::parse(&args[2]);
    let key = &args[1][..];
    let view = ctx.view();
    let (current, expire_at) = match view.peek(key) {
        Some(e) => (
            long_double::Ld::parse(e.value().as_str()?).ok_or(CmdError::NotFloat)?,
            e.expire_at().unwrap_or(0),
        ),
        None => (long_double::Ld::ZERO, 0),
    };
    let by = by.ok_or(CmdError::NotFloat)?;
    let sum = current
        .add(by)
        .ok_or_else(|| CmdError::err("increment would produce NaN or Infinity"))?;
    let text = Bytes::from(sum.to_human());
    view.insert(key, Value::Str(text.clone()), expire_at);
    Ok(Frame::Bulk(text))
}

// ---------------------------------------------------------------------------------

/// Exact emulation of the x87 80-bit `long double` Redis uses for INCRBYFLOAT on
/// x86-64: `strtold` parsing (as Redis's `string2ld` accepts it), correctly
/// rounded addition, and `%.17Lf` printing with trailing zeros trimmed.
///
/// Values are `mant * 2^exp` with a 64-bit significand and exponents down to the
/// subnormal floor; all rounding is round-half-to-even on the exact value, done
/// with a small arbitrary-precision integer. Inputs are at most 5119 bytes (Redis
/// rejects longer ones), which bounds every computation here to well under a
/// millisecond.
mod long_double {
    use std::cmp::Ordering;

    /// Redis's `MAX_LONG_DOUBLE_CHARS`: longer strings are not floats.
    const MAX_CHARS: usize = 5 * 1024;
    /// Significand bits.
    const PREC: i64 = 64;
    /// Exponent of the lowest bit of the smallest subnormal (2^-16445).
    const MIN_EXP: i64 = -16445;
    /// Values must stay below 2^MAX_BITS.
    const MAX_BITS: i64 = 16384;
    /// Exponent clamp while parsing: far beyond any finite or nonzero result.
    const EXP_CLAMP: i64 = 1_000_000;

    /// An extended-precision value (never NaN: NaN is never accepted or stored).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Ld {
        /// `(-1)^neg * mant * 2^exp`.
        Finite {
            neg: bool,
            mant: u64,
            exp: i64,
        },
        Inf {
            neg: bool,
        },
    }

    impl Ld {
        pub(crate) const ZERO: Ld = Ld::Finite {
            neg: false,
            mant: 0,
            exp: 0,
        };

        /// Parses like Redis's `string2ld`: the whole string must be one `strtold`
        /// number (decimal, hex with `p` exponent, `inf`/`infinity`), no leading
        /// space, no NaN, not overflowing and not underflowing to zero.
        pub(crate) fn parse(s: &[u8]) -> Option<Ld> {
            if s.is_empty() || s.len() >= MAX_CHARS {
                return None;
            }
            let (neg, body) = match s[0] {
                b'-' => (true, &s[1..]),
                b'+' => (false, &s[1..]),
                _ => (false, s),
            };
            if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
                return Some(Ld::Inf { neg });
            }
            if body.len() > 1 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
                if let Some(v) = parse_hex(&body[2..], neg) {
                    return Some(v);
                }
                // "0x" without hex digits: strtold reads just the "0" and the rest
                // is left over, which Redis rejects.
                return None;
            }
            parse_decimal(body, neg)
        }

        /// The sum, or `None` when it is infinite or NaN.
        pub(crate) fn add(self, other: Ld) -> Option<Ld> {
            let (
                Ld::Finite {
                    neg: an,
                    mant: am,
                    exp: ae,
                },
                Ld::Finite {
                    neg: bn,
                    mant: bm,
                    exp: be,
                },
            ) = (self, other)
            else {
                return None;
            };
            if am == 0 && bm == 0 {
                return Some(Ld::Finite {
                    neg: an && bn,
                    mant: 0,
                    exp: 0,
                });
            }
            if am == 0 {
                return Some(other);
            }
            if bm == 0 {
                return Some(self);
            }
            let e = ae.min(be);
            let a = Big::from_u64(am).shl((ae - e) as u64);
            let b = Big::from_u64(bm).shl((be - e) as u64);
            let (sum, neg) = if an == bn {
                (a.add(&b), an)
            } else {
                match a.cmp(&b) {
                    Ordering::Greater => (a.sub(&b), an),
                    Ordering::Less => (b.sub(&a), bn),
                    Ordering::Equal => return Some(Ld::ZERO),
                }
            };
            match round(&sum, e, false, neg) {
                v @ Ld::Finite { .. } => Some(v),
                Ld::Inf { .. } => None,
            }
        }

        /// `%.17Lf` with trailing zeros (and a bare point) removed, and "-0" as
        /// "0": Redis's human-friendly `ld2string`. Infinity prints as "inf".
        pub(crate) fn to_human(self) -> String {
            let (neg, mant, exp) = match self {
                Ld::Finite { neg, mant, exp } => (neg, mant, exp),
                Ld::Inf { neg } => return if neg { "-inf".into() } else { "inf".into() },
            };
            // The value times 10^17, rounded to an integer: its last 17 digits are
            // the decimals.
            let scaled = {
                let mut m = Big::from_u64(mant);
                m.mul_small(100_000_000); // 10^8
                m.mul_small(1_000_000_000); // 10^9
                if exp >= 0 {
                    m.shl(exp as u64)
                } else {
                    m.shr_round_even((-exp) as u64, false)
                }
            };
            let digits = scaled.to_decimal();
            let digits = format!("{digits:0>18}");
            let (int, frac) = digits.split_at(digits.len() - 17);
            let frac = frac.trim_end_matches('0');
            let mut out = String::with_capacity(digits.len() + 2);
            if neg {
                out.push('-');
            }
            out.push_str(int);
            if !frac.is_empty() {
                out.push('.');
                out.push_str(frac);
            }
            if out == "-0" {
                out.remove(0);
            }
            out
        }
    }

    /// `digits[.digits][(e|E)[sign]digits]`, at least one mantissa digit.
    fn parse_decimal(s: &[u8], neg: bool) -> Option<Ld> {
        let mut i = 0;
        let mut big = Big::zero();
        let mut chunk = 0u32;
        let mut chunk_len = 0;
        let (mut digits, mut frac_digits, mut significant) = (0usize, 0i64, 0i64);
        let mut seen_point = false;
        while i < s.len() {
            let c = s[i];
            if c == b'.' && !seen_point {
                seen_point = true;
            } else if c.is_ascii_digit() {
                digits += 1;
                if seen_point {
                    frac_digits += 1;
                }
                if significant > 0 || c != b'0' {
                    significant += 1;
                    chunk = chunk * 10 + (c - b'0') as u32;
                    chunk_len += 1;
                    if chunk_len == 9 {
                        big.mul_small(1_000_000_000);
                        big.add_small(chunk);
                        (chunk, chunk_len) = (0, 0);
                    }
                }
            } else {
                break;
            }
            i += 1;
        }
        if digits == 0 {
            return None;
        }
        if chunk_len > 0 {
            big.mul_small(10u32.pow(chunk_len));
            big.add_small(chunk);
        }
        let mut exp10 = 0i64;
        if i < s.len() && (s[i] | 0x20) == b'e' {
            exp10 = parse_exponent(&s[i + 1..])?;
            i = s.len();
        }
        if i != s.len() {
            return None;
        }
        if big.is_zero() {
            return Some(Ld::Finite {
                neg,
                mant: 0,
                exp: 0,
            });
        }
        // Significant digits were counted after leading zeros only; the value's
        // magnitude is 10^(mag-1) <= v < 10^mag.
        let e10 = exp10 - frac_digits;
        let mag = significant + e10;
        if mag > 4934 {
            return None; // overflow (ERANGE): not a valid float
        }
        if mag < -4960 {
            return None; // underflows to zero (ERANGE): not a valid float
        }
        let v = if e10 >= 0 {
            let mut n = big;
            for _ in 0..e10 / 9 {
                n.mul_small(1_000_000_000);
            }
            n.mul_small(10u32.pow((e10 % 9) as u32));
            round(&n, 0, false, neg)
        } else {
            let p = Big::pow10((-e10) as u32);
            // Scale so the quotient has 66 bits: 64 kept, a rounding bit, and one
            // spare; what is shifted out or left over only matters as "sticky".
            let k = p.bits() as i64 + PREC + 2 - big.bits() as i64;
            let (num, sticky_shift) = if k >= 0 {
                (big.shl(k as u64), false)
            } else {
                (big.shr((-k) as u64), big.any_below((-k) as u64))
            };
            let (q, r) = num.div_rem(&p);
            round(&q, -k, sticky_shift || !r.is_zero(), neg)
        };
        match v {
            Ld::Finite { mant: 0, .. } | Ld::Inf { .. } => None,
            v => Some(v),
        }
    }

    /// `hexdigits[.hexdigits][(p|P)[sign]digits]` after "0x".
    fn parse_hex(s: &[u8], neg: bool) -> Option<Ld> {
        let mut i = 0;
        let mut big = Big::zero();
        let (mut digits, mut frac_digits) = (0usize, 0i64);
        let mut seen_point = false;
        while i < s.len() {
            let c = s[i];
            if c == b'.' && !seen_point {
                seen_point = true;
            } else if let Some(d) = (c as char).to_digit(16) {
                digits += 1;
                if seen_point {
                    frac_digits += 1;
                }
                big.mul_small(16);
                big.add_small(d);
            } else {
                break;
            }
            i += 1;
        }
        if digits == 0 {
            return None;
        }
        let mut exp2 = 0i64;
        if i < s.len() && (s[i] | 0x20) == b'p' {
            exp2 = parse_exponent(&s[i + 1..])?;
            i = s.len();
        }
        if i != s.len() {
            return None;
        }
        if big.is_zero() {
            return Some(Ld::Finite {
                neg,
                mant: 0,
                exp: 0,
            });
        }
        match round(&big, exp2 - 4 * frac_digits, false, neg) {
            Ld::Finite { mant: 0, .. } | Ld::Inf { .. } => None,
            v => Some(v),
        }
    }

    /// `[sign]digits` to the end of the string, clamped far beyond any exponent
    /// that could give a finite nonzero value.
    fn parse_exponent(s: &[u8]) -> Option<i64> {
        let (neg, digits) = match s.first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut e = 0i64;
        for &d in digits {
            e = (e * 10 + (d - b'0') as i64).min(EXP_CLAMP);
        }
        Some(if neg { -e } else { e })
    }

    /// Rounds `n * 2^scale` (plus a nonzero tail below it when `sticky`) to the
    /// nearest representable value, ties to even.
    fn round(n: &Big, scale: i64, sticky: bool, neg: bool) -> Ld {
        let bits = n.bits() as i64;
        if bits == 0 {
            return Ld::Finite {
                neg,
                mant: 0,
                exp: 0,
            };
        }
        // Keep the top 64 bits, or fewer where the value is subnormal.
        let cut = (bits - PREC).max(MIN_EXP - scale);
        let (mant, exp) = if cut <= 0 {
            (n.shl((-cut) as u64).low_u64(), scale + cut)
        } else {
            let kept = n.shr_round_even(cut as u64, sticky);
            if kept.bits() as i64 > PREC {
                // Rounded up to 2^64.
                (1u64 << 63, scale + cut + 1)
            } else {
                (kept.low_u64(), scale + cut)
            }
        };
        if mant != 0 && (64 - mant.leading_zeros() as i64) + exp > MAX_BITS {
            return Ld::Inf { neg };
        }
        Ld::Finite { neg, mant, exp }
    }

    /// A little-endian unsigned big integer, just enough for the conversions.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Big(Vec<u32>);

    impl Big {
        fn zero() -> Big {
            Big(Vec::new())
        }

        fn from_u64(v: u64) -> Big {
            let mut b = Big(vec![v as u32, (v >> 32) as u32]);
            b.trim();
            b
        }

        fn pow10(n: u32) -> Big {
            let mut b = Big::from_u64(1);
            for _ in 0..n / 9 {
                b.mul_small(1_000_000_000);
            }
            b.mul_small(10u32.pow(n % 9));
            b
        }

        fn trim(&mut self) {
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
        }

        fn is_zero(&self) -> bool {
            self.0.is_empty()
        }

        fn bits(&self) -> u64 {
            match self.0.last() {
                None => 0,
                Some(&top) => self.0.len() as u64 * 32 - top.leading_zeros() as u64,
            }
        }

        fn bit(&self, i: u64) -> bool {
            self.0
                .get((i / 32) as usize)
                .is_some_and(|w| w >> (i % 32) & 1 == 1)
        }

        /// Whether any bit below position `i` is set.
        fn any_below(&self, i: u64) -> bool {
            let (whole, part) = ((i / 32) as usize, i % 32);
            self.0.iter().take(whole).any(|&w| w != 0)
                || (part > 0
                    && self
                        .0
                        .get(whole)
                        .is_some_and(|&w| w & ((1u32 << part) - 1) != 0))
        }

        fn low_u64(&self) -> u64 {
            let lo = self.0.first().copied().unwrap_or(0) as u64;
            let hi = self.0.get(1).copied().unwrap_or(0) as u64;
            lo | hi << 32
        }

        fn mul_small(&mut self, m: u32) {
            let mut carry = 0u64;
            for w in &mut self.0 {
                let v = *w as u64 * m as u64 + carry;
                *w = v as u32;
                carry = v >> 32;
            }
            if carry != 0 {
                self.0.push(carry as u32);
            }
            self.trim();
        }

        fn add_small(&mut self, a: u32) {
            let mut carry = a as u64;
            for w in &mut self.0 {
                if carry == 0 {
                    return;
                }
                let v = *w as u64 + carry;
                *w = v as u32;
                carry = v >> 32;
            }
            if carry != 0 {
                self.0.push(carry as u32);
            }
        }

        /// Divides in place by `d`, returning the remainder.
        fn div_small(&mut self, d: u32) -> u32 {
            let mut rem = 0u64;
            for w in self.0.iter_mut().rev() {
                let cur = rem << 32 | *w as u64;
                *w = (cur / d as u64) as u32;
                rem = cur % d as u64;
            }
            self.trim();
            rem as u32
        }

        fn shl(&self, n: u64) -> Big {
            if self.is_zero() {
                return Big::zero();
            }
            let (whole, part) = ((n / 32) as usize, (n % 32) as u32);
            let mut out = vec![0u32; whole];
            out.reserve(self.0.len() + 1);
            if part == 0 {
                out.extend_from_slice(&self.0);
            } else {
                let mut carry = 0u32;
                for &w in &self.0 {
                    out.push(w << part | carry);
                    carry = w >> (32 - part);
                }
                out.push(carry);
            }
            let mut b = Big(out);
            b.trim();
            b
        }

        fn shr(&self, n: u64) -> Big {
            let (whole, part) = ((n / 32) as usize, (n % 32) as u32);
            if whole >= self.0.len() {
                return Big::zero();
            }
            let src = &self.0[whole..];
            let mut out = Vec::with_capacity(src.len());
            for (i, &w) in src.iter().enumerate() {
                let hi = if part == 0 {
                    0
                } else {
                    src.get(i + 1).map_or(0, |&h| h << (32 - part))
                };
                out.push(if part == 0 { w } else { w >> part | hi });
            }
            let mut b = Big(out);
            b.trim();
            b
        }

        /// `self >> n`, rounded half to even on the exact value (`sticky`: there is
        /// a nonzero tail below `self`'s lowest bit).
        fn shr_round_even(&self, n: u64, sticky: bool) -> Big {
            if n == 0 {
                return self.clone();
            }
            let mut q = self.shr(n);
            let half = self.bit(n - 1);
            let below = sticky || self.any_below(n - 1);
            if half && (below || q.bit(0)) {
                q.add_small(1);
            }
            q
        }

        fn add(&self, other: &Big) -> Big {
            let (long, short) = if self.0.len() >= other.0.len() {
                (self, other)
            } else {
                (other, self)
            };
            let mut out = Vec::with_capacity(long.0.len() + 1);
            let mut carry = 0u64;
            for (i, &w) in long.0.iter().enumerate() {
                let v = w as u64 + short.0.get(i).copied().unwrap_or(0) as u64 + carry;
                out.push(v as u32);
                carry = v >> 32;
            }
            if carry != 0 {
                out.push(carry as u32);
            }
            Big(out)
        }

        /// `self - other`; `self >= other`.
        fn sub(&self, other: &Big) -> Big {
            let mut out = self.clone();
            out.sub_assign(other);
            out
        }

        fn sub_assign(&mut self, other: &Big) {
            let mut borrow = 0i64;
            for (i, w) in self.0.iter_mut().enumerate() {
                let v = *w as i64 - other.0.get(i).copied().unwrap_or(0) as i64 - borrow;
                (*w, borrow) = if v < 0 {
                    ((v + (1 << 32)) as u32, 1)
                } else {
                    (v as u32, 0)
                };
            }
            debug_assert_eq!(borrow, 0, "subtraction underflow");
            self.trim();
        }

        /// Quotient and remainder. Shift-and-subtract: the callers' quotients
        /// have about 66 bits, so this takes that many steps.
        fn div_rem(&self, d: &Big) -> (Big, Big) {
            let mut r = self.clone();
            let mut q = Big::zero();
            if self.cmp(d) == Ordering::Less {
                return (q, r);
            }
            let top = self.bits() - d.bits();
            q.0 = vec![0; (top / 32 + 1) as usize];
            for i in (0..=top).rev() {
                let t = d.shl(i);
                if r.cmp(&t) != Ordering::Less {
                    r.sub_assign(&t);
                    q.0[(i / 32) as usize] |= 1 << (i % 32);
                }
            }
            q.trim();
            (q, r)
        }

        fn cmp(&self, other: &Big) -> Ordering {
            self.0
                .len()
                .cmp(&other.0.len())
                .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
        }

        fn to_decimal(&self) -> String {
            if self.is_zero() {
                return "0".into();
            }
            let mut n = self.clone();
            let mut groups = Vec::new();
            while !n.is_zero() {
                groups.push(n.div_small(1_000_000_000));
            }
            let mut out = groups.pop().map(|g| g.to_string()).unwrap_or_default();
            for g in groups.iter().rev() {
                out.push_str(&format!("{g:09}"));
            }
            out
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn incr(from: &str, by: &str) -> Option<String> {
            let a = Ld::parse(from.as_bytes())?;
            let b = Ld::parse(by.as_bytes())?;
            a.add(b).map(Ld::to_human)
        }

        fn human(s: &str) -> Option<String> {
            Ld::parse(s.as_bytes()).map(Ld::to_human)
        }

        #[test]
        fn big_integer_basics() {
            let n = Big::pow10(30);
            assert_eq!(n.to_decimal(), format!("1{}", "0".repeat(30)));
            let (q, r) = n.div_rem(&Big::from_u64(7));
            assert_eq!(q.to_decimal(), "142857142857142857142857142857");
            assert_eq!(r.to_decimal(), "1");
            assert_eq!(Big::from_u64(5).shr_round_even(1, false).to_decimal(), "2"); // 2.5 -> 2
            assert_eq!(Big::from_u64(7).shr_round_even(1, false).to_decimal(), "4"); // 3.5 -> 4
            assert_eq!(Big::from_u64(5).shr_round_even(1, true).to_decimal(), "3"); // 2.5+ -> 3
            assert_eq!(Big::from_u64(u64::MAX).shl(70).shr(70).low_u64(), u64::MAX);
            assert!(Big::from_u64(0b1000).any_below(4) && !Big::from_u64(0b1000).any_below(3));
        }

        #[test]
        fn formats_like_redis() {
            // Every expected string below is what Redis 7 on x86-64 replied.
            assert_eq!(incr("10.50", "0.1").as_deref(), Some("10.6"));
            assert_eq!(incr("5.0e3", "0").as_deref(), Some("5000"));
            assert_eq!(incr("0", "3.0").as_deref(), Some("3"));
            assert_eq!(
                incr("1000", "0.1").as_deref(),
                Some("1000.09999999999999998")
            );
            assert_eq!(
                incr("1000.09999999999999998", "0.1").as_deref(),
                Some("1000.19999999999999996")
            );
            assert_eq!(
                incr("123456789.123", "0.001").as_deref(),
                Some("123456789.12399999999615829")
            );
            assert_eq!(incr("0.1", "0.1").as_deref(), Some("0.2"));
            assert_eq!(incr("0.2", "0.1").as_deref(), Some("0.3"));
            assert_eq!(incr("16", "-1e-20").as_deref(), Some("16"));
            assert_eq!(incr("0", "-1.5").as_deref(), Some("-1.5"));
            for (input, out) in [
                ("0.000003814697265625", "0.00000381469726562"), // a tie: to even
                ("0.000011444091796875", "0.00001144409179688"), // a tie: to even
                ("0.000001234", "0.000001234"),
                ("1e-17", "0.00000000000000001"),
                ("1e-18", "0"),
                ("-1e-18", "0"),
                ("-0", "0"),
                ("-0.0", "0"),
                ("0x10", "16"),
                ("0x.8", "0.5"),
                ("0x1p-1", "0.5"),
                ("0X1P+2", "4"),
                ("0x1.8p1", "3"),
                ("1e+5", "100000"),
                ("1E5", "100000"),
                ("1.5e-3", "0.0015"),
                ("00012.5000", "12.5"),
                ("123.456e-2", "1.23456"),
                ("99999999999999999999.5", "100000000000000000000"),
                ("0.1e1", "1"),
                ("-9.999999999999999999", "-10"),
                ("9.99999999999999999999", "10"),
                ("18446744073709551615", "18446744073709551615"),
                ("18446744073709551617", "18446744073709551616"),
                ("36893488147419103231", "36893488147419103232"),
                (
                    "123456789012345678901234567890",
                    "123456789012345678899921813504",
                ),
                ("1.2345678901234567", "1.2345678901234567"),
                ("+1.5", "1.5"),
                (".5", "0.5"),
                ("5.", "5"),
                ("1e-4940", "0"),
                ("3e-4951", "0"),
            ] {
                assert_eq!(human(input).as_deref(), Some(out), "{input}");
            }
        }

        #[test]
        fn huge_values_print_every_digit() {
            let near_max = "1.18973149535723176502e+4932";
            let s = human(near_max).unwrap();
            assert!(s.starts_with("11897314953572317650212638530309702051690633222946242004403237338917370055229707226164102903365288828535456978074955773144274431536702884341981255738537436786735932007069732632019159182829615243655295"));
            assert_eq!(s.len(), 4933);
            let s = human("0x1p16383").unwrap();
            assert!(s.starts_with("59486574767861588254287966331400356538172234354825511873633741061663067909024184345224429773630601995755771874241965462944883369065434371313726234917078250304043581718300244876107162580976572342297617"));
            assert_eq!(
                incr("0.3", "1e308").as_deref(),
                Some("99999999999999999996685879655845645660560099847415567207797047994921734868838061872100126921888539320446747225054013223152134749593960583597420814430196418767959100019603190778663109604507106667939153395788938914560543563061268364901618630217086589253444881623791300855757318142424510452728255046343928578048")
            );
            // Past f64's range, still finite in long double.
            let twice = incr("99999999999999999996685879655845645660560099847415567207797047994921734868838061872100126921888539320446747225054013223152134749593960583597420814430196418767959100019603190778663109604507106667939153395788938914560543563061268364901618630217086589253444881623791300855757318142424510452728255046343928578048", "1e308");
            assert_eq!(twice.as_deref(), Some("199999999999999999993371759311691291321120199694831134415594095989843469737676123744200253843777078640893494450108026446304269499187921167194841628860392837535918200039206381557326219209014213335878306791577877829121087126122536729803237260434173178506889763247582601711514636284849020905456510092687857156096"));
        }

        #[test]
        fn rejects_what_string2ld_rejects() {
            for bad in [
                "",
                " 1",
                "1 ",
                "abc",
                "1e",
                "1e+",
                "e5",
                ".",
                "-",
                "+",
                "0x",
                "0x.",
                "0xg",
                "0x1p",
                "nan",
                "NaN",
                "-nan",
                "nan(1)",
                "infinit",
                "1.5\0",
                "\x001",
                "1e5000",
                "1.19e4932",
                "0x1p16384",
                "1.8e-4951",
                "1e-5000",
                "1..5",
                "1.5.",
                "--1",
                "+-1",
            ] {
                assert_eq!(Ld::parse(bad.as_bytes()), None, "{bad:?}");
            }
            assert_eq!(
                Ld::parse(format!("1{}", "0".repeat(5119)).as_bytes()),
                None,
                "too long"
            );
            assert!(Ld::parse(format!("0.{}1", "0".repeat(5000)).as_bytes()).is_none()); // underflow
            assert!(Ld::parse(format!("0.{}1", "0".repeat(4900)).as_bytes()).is_some());
            assert!(
                Ld::parse(b"0e-99999999999999999999999").is_some(),
                "exact zero"
            );
        }

        #[test]
        fn infinities_parse_but_never_add() {
            assert_eq!(Ld::parse(b"inf"), Some(Ld::Inf { neg: false }));
            assert_eq!(Ld::parse(b"-INFINITY"), Some(Ld::Inf { neg: true }));
            let one = Ld::parse(b"1").unwrap();
            assert_eq!(one.add(Ld::Inf { neg: false }), None);
            let max = Ld::parse(b"1.18973149535723176502e+4932").unwrap();
            assert_eq!(max.add(max), None, "overflow");
            assert_eq!(
                max.add(Ld::parse(b"-1.18973149535723176502e+4932").unwrap()),
                Some(Ld::ZERO)
            );
        }

        #[test]
        fn subnormals_round_trip() {
            let tiny = Ld::parse(b"3.6e-4951").unwrap();
            assert_eq!(
                tiny,
                Ld::Finite {
                    neg: false,
                    mant: 1,
                    exp: MIN_EXP
                }
            );
            assert_eq!(
                tiny.add(tiny),
                Some(Ld::Finite {
                    neg: false,
                    mant: 2,
                    exp: MIN_EXP
                })
            );
            assert_eq!(tiny.to_human(), "0");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    fn set_opts(v: &[&str]) -> Result<(bool, bool, bool, bool, Option<Unit>), CmdError> {
        let a = args(v);
        let o = parse_options(&a, true)?;
        Ok((o.nx, o.xx, o.get, o.keepttl, o.expire.map(|(u, _)| u)))
    }

    #[test]
    fn set_options_follow_redis_rules() {
        assert_eq!(set_opts(&[]), Ok((false, false, false, false, None)));
        assert_eq!(
            set_opts(&["nx", "GET", "ex", "10"]),
            Ok((true, false, true, false, Some(Unit::Ex)))
        );
        assert_eq!(
            set_opts(&["NX", "NX"]),
            Ok((true, false, false, false, None))
        );
        assert_eq!(
            set_opts(&["EX", "1", "EX", "2"]),
            Ok((false, false, false, false, Some(Unit::Ex)))
        );
        assert_eq!(
            set_opts(&["keepttl", "keepttl", "xx"]),
            Ok((false, true, false, true, None))
        );
        assert_eq!(
            set_opts(&["pxat", "5"]),
            Ok((false, false, false, false, Some(Unit::PxAt)))
        );
        for bad in [
            &["nx", "xx"][..],
            &["xx", "nx"],
            &["ex", "1", "px", "1"],
            &["exat", "1", "pxat", "1"],
            &["keepttl", "ex", "1"],
            &["px", "1", "keepttl"],
            &["ex"],
            &["get", "px"],
            &["persist"],
            &["foo"],
            &["nx", "1"],
        ] {
            assert_eq!(set_opts(bad), Err(CmdError::Syntax), "{bad:?}");
        }
        let a = args(&["EX", "10", "EX", "20"]);
        assert_eq!(
            parse_options(&a, true).unwrap().expire,
            Some((Unit::Ex, &b"20"[..]))
        );
    }

    #[test]
    fn getex_options_follow_redis_rules() {
        let ok = |v: &[&str]| {
            parse_options(&args(v), false).map(|o| (o.persist, o.expire.map(|(u, _)| u)))
        };
        assert_eq!(ok(&["persist", "PERSIST"]), Ok((true, None)));
        assert_eq!(ok(&["px", "5"]), Ok((false, Some(Unit::Px))));
        for bad in [
            &["nx"][..],
            &["xx"],
            &["get"],
            &["keepttl"],
            &["persist", "ex", "1"],
            &["ex", "1", "persist"],
            &["ex", "1", "exat", "1"],
            &["exat"],
        ] {
            assert_eq!(ok(bad), Err(CmdError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn expiry_values_are_checked_like_redis() {
        let now = 1_700_000_000_000;
        assert_eq!(
            parse_expiry(Unit::Ex, b"10", "set", now),
            Ok(Expiry::In(10_000))
        );
        assert_eq!(
            parse_expiry(Unit::Px, b"10", "set", now),
            Ok(Expiry::In(10))
        );
        assert_eq!(
            parse_expiry(Unit::ExAt, b"10", "set", now),
            Ok(Expiry::At(10_000))
        );
        assert_eq!(
            parse_expiry(Unit::PxAt, b"1", "set", now),
            Ok(Expiry::At(1))
        );
        assert_eq!(
            parse_expiry(Unit::ExAt, b"9223372036854775", "set", now),
            Ok(Expiry::At(9_223_372_036_854_775_000))
        );
        assert_eq!(
            parse_expiry(Unit::PxAt, b"9223372036854775807", "getex", now),
            Ok(Expiry::At(i64::MAX as u64))
        );
        assert_eq!(
            parse_expiry(Unit::Ex, b"abc", "set", now),
            Err(CmdError::NotInteger)
        );
        let invalid = |cmd: &str| {
            Err(CmdError::err(format!(
                "invalid expire time in '{cmd}' command"
            )))
        };
        assert_eq!(parse_expiry(Unit::Ex, b"0", "set", now), invalid("set"));
        assert_eq!(
            parse_expiry(Unit::Px, b"-1", "psetex", now),
            invalid("psetex")
        );
        assert_eq!(
            parse_expiry(Unit::ExAt, b"9223372036854776", "set", now),
            invalid("set")
        );
        assert_eq!(
            parse_expiry(Unit::Ex, b"9223372036854775807", "setex", now),
            invalid("setex")
        );
        assert_eq!(
            parse_expiry(Unit::Px, b"9223372036854775807", "getex", now),
            invalid("getex")
        );
        assert_eq!(Expiry::In(100).resolve(now), now + 100);
        assert_eq!(Expiry::At(5).resolve(now), 5);
    }

    #[test]
    fn substring_ranges_match_getrange() {
        let r = |s: i64, e: i64, len: usize| substring_range(s, e, len);
        assert_eq!(r(0, -1, 11), Some(0..11));
        assert_eq!(r(-3, -1, 11), Some(8..11));
        assert_eq!(r(-1, -5, 11), None);
        assert_eq!(r(5, 3, 11), None);
        assert_eq!(r(-100, 100, 11), Some(0..11));
        assert_eq!(r(100, 200, 11), None);
        assert_eq!(r(3, -100, 11), None);
        assert_eq!(r(i64::MIN, i64::MAX, 11), Some(0..11));
        assert_eq!(r(0, -1, 0), None);
        assert_eq!(r(0, 0, 1), Some(0..1));
    }

    #[test]
    fn every_command_has_redis_metadata() {
        for c in COMMANDS {
            assert!(
                !c.summary.is_empty() && c.summary.ends_with('.'),
                "{}",
                c.name
            );
            assert_eq!(c.group, Group::String);
            assert!(c.has(spec::WRITE) != c.has(spec::READONLY), "{}", c.name);
        }
        let mset = COMMANDS.iter().find(|c| c.name == "mset").unwrap();
        assert_eq!(
            mset.key_indices(&args(&["mset", "a", "1", "b", "2"])),
            Some(vec![1, 3])
        );
    }
}
