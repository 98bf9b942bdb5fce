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
//! `set`), checked before the lock as `idset-table-check` says, or fails with
//! "invalid idset table" and writes nothing — a relation service fills a follow set
//! with one SET. Read back, such a set is a set, as in Redis: GET and the commands
//! that read a value the way GET does answer WRONGTYPE (MGET reads it as nil), and
//! IDSET.TABLE hands out the table bytes.
//!
//! INCRBYFLOAT computes in x87 80-bit extended precision and prints with `%.17Lf`
//! like Redis on x86-64, emulated exactly by [`crate::longdouble`], so its replies match
//! Redis digit for digit (`1000 + 0.1` is `1000.09999999999999998` there too).

use bytes::{Bytes, BytesMut};
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, parse_i64_opt, Ctx};
use crate::db::{Entry, Free, Value};
use crate::error::{CmdError, CmdResult};
use crate::longdouble::Ld;
use crate::notify;

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
fn parse_options<'a>(opts: &[&'a [u8]], for_set: bool) -> Result<Options<'a>, CmdError> {
    let mut o = Options::default();
    let mut i = 0;
    while i < opts.len() {
        let a = opts[i];
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
    // Shared with a reply still being sent (a GET of it): written to a copy, which
    // for a big value is made off the loop.
    Ok(bytes.try_into_mut().unwrap_or_else(|shared| {
        if shared.len() > crate::offload::LARGE_REQUEST {
            crate::offload::offload(|| BytesMut::from(&shared[..]))
        } else {
            BytesMut::from(&shared[..])
        }
    }))
}

/// The value a whole-value write stores: the argument ([`super::stored`]), or an
/// idset when it is meant as a table (checked here, before any lock is taken).
fn value_from_client(ctx: &Ctx<'_, '_>, arg: &[u8]) -> Result<Value, CmdError> {
    if relcache_protocol::idset::looks_like_table(arg) {
        let how = ctx.server.config.table_check();
        return Ok(Value::IdSet(crate::db::IdSet::from_client(
            ctx.stored(arg),
            how,
        )?));
    }
    Ok(Value::Str(ctx.stored(arg)))
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

fn get(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (view, output) = ctx.view_and_output();
    let Some(e) = view.get(args[1]) else {
        return Ok(Frame::Null);
    };
    match output {
        // A small string is copied once, into the client's output.
        Some(out) if e.value().as_str()?.len() <= COPY_REPLY_MAX => {
            relcache_protocol::resp::write_bulk(out, e.value().as_str()?);
            ctx.replied();
            Ok(Frame::Null)
        }
        _ => get_reply(e),
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
    let created = if expire_at != 0 && expire_at <= now {
        // An absolute time already past: the key is set and expires at once.
        !view.delete(key, Free::Now)
    } else {
        !view.insert(key, value, expire_at)
    };
    ctx.notify_write(notify::STRING, "set", key, created);
    if plan.expiry.is_some() {
        ctx.notify(notify::GENERIC, "expire", key);
    }
    match old {
        Some(old) => Ok(old),
        // `+OK` (SETNX's `:1`) straight into the output when it may be.
        None => ctx.reply(plan.ok),
    }
}

fn set(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
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
    set_generic(ctx, args[1], value_from_client(ctx, args[2])?, plan)
}

fn setnx(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let plan = SetPlan {
        nx: true,
        ok: Frame::Integer(1),
        aborted: Frame::Integer(0),
        ..SetPlan::plain(None)
    };
    set_generic(ctx, args[1], value_from_client(ctx, args[2])?, plan)
}

fn setex(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_with_ttl(ctx, args, Unit::Ex)
}

fn psetex(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    set_with_ttl(ctx, args, Unit::Px)
}

fn set_with_ttl(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], unit: Unit) -> CmdResult {
    let expiry = parse_expiry(unit, args[2], ctx.spec.name, crate::db::now_ms())?;
    set_generic(
        ctx,
        args[1],
        value_from_client(ctx, args[3])?,
        SetPlan::plain(Some(expiry)),
    )
}

fn getex(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let o = parse_options(&args[2..], false)?;
    // Redis validates the expiry only once it has found a string under the key.
    let expiry = o
        .expire
        .map(|(unit, arg)| parse_expiry(unit, arg, ctx.spec.name, crate::db::now_ms()));
    let key = args[1];
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
                view.delete(key, Free::Now);
                ctx.notify(notify::GENERIC, "del", key);
            } else {
                view.set_expire(key, at);
                ctx.notify(notify::GENERIC, "expire", key);
            }
        }
        // Only an actual change counts as a write (WATCH).
        None if o.persist && has_ttl => {
            view.set_expire(key, 0);
            ctx.notify(notify::GENERIC, "persist", key);
        }
        None => {}
    }
    Ok(value)
}

fn getdel(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let view = ctx.view();
    let Some(e) = view.get(args[1]) else {
        return Ok(Frame::Null);
    };
    let value = get_reply(e)?;
    // The reply holds the value, and frees it once sent (a big one on the
    // lazy-free thread): nothing to wait for here.
    view.delete(args[1], Free::Later);
    ctx.notify(notify::GENERIC, "del", args[1]);
    Ok(value)
}

fn getset(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let value = value_from_client(ctx, args[2])?;
    let view = ctx.view();
    let old = match view.get(args[1]) {
        Some(e) => get_reply(e)?,
        None => Frame::Null,
    };
    // A plain SET: the old TTL goes.
    let created = !view.insert(args[1], value, 0);
    ctx.notify_write(notify::STRING, "set", args[1], created);
    Ok(old)
}

// ---------------------------------------------------------------------------------
// Multi-key

fn mget(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
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
fn pairs(ctx: &Ctx<'_, '_>, args: &[&[u8]]) -> Result<Vec<(usize, Value)>, CmdError> {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::WrongArity(ctx.spec.name.to_string()));
    }
    (1..args.len())
        .step_by(2)
        .map(|i| Ok((i, value_from_client(ctx, args[i + 1])?)))
        .collect()
}

fn mset(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let pairs = pairs(ctx, args)?;
    for (i, value) in pairs {
        let created = !ctx.view().insert(args[i], value, 0);
        ctx.notify_write(notify::STRING, "set", args[i], created);
    }
    Ok(Frame::ok())
}

/// All or nothing: the view holds every key's shard for the whole command, so no
/// other client can create one of the keys between the check and the writes.
fn msetnx(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let pairs = pairs(ctx, args)?;
    let view = ctx.view();
    if pairs.iter().any(|(i, _)| view.contains(args[*i])) {
        return Ok(Frame::Integer(0));
    }
    for (i, value) in pairs {
        ctx.view().insert(args[i], value, 0);
        ctx.notify_write(notify::STRING, "set", args[i], true);
    }
    Ok(Frame::Integer(1))
}

// ---------------------------------------------------------------------------------
// In-place edits

fn append(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (key, extra) = (args[1], args[2]);
    let current = match ctx.view().peek(key) {
        Some(e) => Some(e.value().as_str()?.len()),
        None => None,
    };
    let Some(current) = current else {
        ctx.view()
            .insert(key, Value::Str(Bytes::copy_from_slice(extra)), 0);
        ctx.notify_write(notify::STRING, "append", key, true);
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
    ctx.notify(notify::STRING, "append", key);
    Ok(Frame::Integer(len as i64))
}

fn strlen(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    match ctx.view().get(args[1]) {
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

fn getrange(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let start = parse_i64(args[2])?;
    let end = parse_i64(args[3])?;
    let Some(e) = ctx.view().get(args[1]) else {
        return Ok(Frame::Bulk(Bytes::new()));
    };
    let s = e.value().as_str()?;
    Ok(Frame::Bulk(match substring_range(start, end, s.len()) {
        Some(r) if r.len() == s.len() => s.clone(),
        // A copy: a slice would keep the whole value alive, and shared, for as
        // long as the reply is being sent (see `crate::output`).
        Some(r) if r.len() > crate::offload::LARGE_REQUEST => {
            crate::offload::offload(|| Bytes::copy_from_slice(&s[r]))
        }
        Some(r) => Bytes::copy_from_slice(&s[r]),
        None => Bytes::new(),
    }))
}

fn setrange(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let offset = parse_i64(args[2])?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let (key, patch) = (args[1], args[3]);
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
            ctx.notify_write(notify::STRING, "setrange", key, true);
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
            ctx.notify(notify::STRING, "setrange", key);
            Ok(Frame::Integer(len as i64))
        }
    }
}

// ---------------------------------------------------------------------------------
// Counters

fn incr(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    incr_by(ctx, args[1], 1)
}

fn decr(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    incr_by(ctx, args[1], -1)
}

fn incrby(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let by = parse_i64(args[2])?;
    incr_by(ctx, args[1], by)
}

fn decrby(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let by = parse_i64(args[2])?;
    if by == i64::MIN {
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_by(ctx, args[1], -by)
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
    let created = !view.insert(key, Value::Str(int_bytes(new)), expire_at);
    ctx.notify_write(notify::STRING, "incrby", key, created);
    ctx.integer(new)
}

fn incrbyfloat(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    // Parsed before the lock; an invalid increment is reported after the key's own
    // checks, as Redis orders them.
    let by = Ld::parse(args[2]);
    let key = args[1];
    let view = ctx.view();
    let (current, expire_at) = match view.peek(key) {
        Some(e) => (
            Ld::parse(e.value().as_str()?).ok_or(CmdError::NotFloat)?,
            e.expire_at().unwrap_or(0),
        ),
        None => (Ld::ZERO, 0),
    };
    let by = by.ok_or(CmdError::NotFloat)?;
    let sum = current
        .add(by)
        .ok_or_else(|| CmdError::err("increment would produce NaN or Infinity"))?;
    let text = Bytes::from(sum.to_human());
    let created = !view.insert(key, Value::Str(text.clone()), expire_at);
    ctx.notify_write(notify::STRING, "incrbyfloat", key, created);
    Ok(Frame::Bulk(text))
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
