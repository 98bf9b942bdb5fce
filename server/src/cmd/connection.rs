//! Connection commands: PING, ECHO, QUIT, SELECT, AUTH, HELLO, RESET and CLIENT.
//!
//! They act on the calling connection's [`Session`] (protocol version,
//! authentication, name) or, for CLIENT LIST and CLIENT KILL, on the registry of
//! connected clients; none of them touches the keyspace, so none takes a view.
//!
//! What this is not: ACL. The only user is `default`, guarded by `requirepass`
//! (a missing password means `nopass`). There is one database (SELECT 0), and no
//! client-side caching, pause or reply modes.

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use relcache_protocol::resp::{Frame, Protocol};

use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group};
use super::{eq_ic, parse_i64, parse_i64_opt, transactions, Ctx};
use crate::blocking::Unblock;
use crate::error::{CmdError, CmdResult};
use crate::session::{ClientInfo, Session};

const CONN: u32 = spec::NOSCRIPT | spec::LOADING | spec::STALE;
/// AUTH, HELLO, QUIT and RESET: usable before authenticating, and while busy.
const PRE_AUTH: u32 = CONN | spec::FAST | spec::NO_AUTH | spec::ALLOW_BUSY;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "ping",
        arity: -1,
        flags: spec::FAST,
        group: Group::Connection,
        summary: "Returns the server's liveliness response.",
        handler: ping,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "echo",
        arity: 2,
        flags: spec::LOADING | spec::STALE | spec::FAST,
        group: Group::Connection,
        summary: "Returns the given string.",
        handler: echo,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "quit",
        arity: -1,
        // Runs at once inside MULTI, as in Redis.
        flags: PRE_AUTH | spec::NOT_QUEUED | spec::UNWATCHES,
        group: Group::Connection,
        summary: "Closes the connection.",
        handler: quit,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "select",
        arity: 2,
        flags: spec::LOADING | spec::STALE | spec::FAST,
        group: Group::Connection,
        summary: "Changes the selected database.",
        handler: select,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "auth",
        arity: -2,
        flags: PRE_AUTH,
        group: Group::Connection,
        summary: "Authenticates the connection.",
        complexity: "O(N) where N is the number of passwords defined for the user",
        handler: auth,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "hello",
        arity: -1,
        flags: PRE_AUTH,
        group: Group::Connection,
        since: "6.0.0",
        summary: "Handshakes with the Redis server.",
        handler: hello,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "reset",
        arity: 1,
        // Runs at once inside MULTI, as in Redis.
        flags: PRE_AUTH | spec::NOT_QUEUED,
        group: Group::Connection,
        since: "6.2.0",
        summary: "Resets the connection.",
        handler: reset,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client",
        arity: -2,
        group: Group::Connection,
        since: "2.4.0",
        summary: "A container for client connection commands.",
        complexity: "Depends on subcommand.",
        subcommands: CLIENT,
        ..CommandSpec::DEFAULT
    },
];

const CLIENT: &[CommandSpec] = &[
    CommandSpec {
        name: "client|id",
        arity: 2,
        flags: CONN,
        group: Group::Connection,
        since: "5.0.0",
        summary: "Returns the unique client ID of the connection.",
        handler: client_id,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|setname",
        arity: 3,
        flags: CONN,
        group: Group::Connection,
        since: "2.6.9",
        summary: "Sets the connection name.",
        handler: client_setname,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|getname",
        arity: 2,
        flags: CONN,
        group: Group::Connection,
        since: "2.6.9",
        summary: "Returns the name of the connection.",
        handler: client_getname,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|setinfo",
        arity: 4,
        flags: CONN,
        group: Group::Connection,
        since: "7.2.0",
        summary: "Sets information specific to the client or connection.",
        handler: client_setinfo,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|list",
        arity: -2,
        flags: spec::ADMIN | CONN,
        group: Group::Connection,
        since: "2.4.0",
        summary: "Lists open connections.",
        complexity: "O(N) where N is the number of client connections",
        handler: client_list,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|info",
        arity: 2,
        flags: CONN,
        group: Group::Connection,
        since: "6.2.0",
        summary: "Returns information about the connection.",
        handler: client_info,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|kill",
        arity: -3,
        flags: spec::ADMIN | CONN,
        group: Group::Connection,
        since: "2.4.0",
        summary: "Terminates open connections.",
        complexity: "O(N) where N is the number of client connections",
        handler: client_kill,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|unblock",
        arity: -3,
        flags: spec::ADMIN | CONN,
        group: Group::Connection,
        since: "5.0.0",
        summary: "Unblocks a client blocked by a blocking command from a different connection.",
        complexity: "O(log N) where N is the number of client connections",
        handler: client_unblock,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|no-evict",
        arity: 3,
        flags: spec::ADMIN | CONN,
        group: Group::Connection,
        since: "7.0.0",
        summary: "Sets the client eviction mode of the connection.",
        handler: client_no_evict,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|no-touch",
        arity: 3,
        flags: CONN,
        group: Group::Connection,
        since: "7.2.0",
        summary:
            "Controls whether commands sent by the client affect the LRU/LFU of accessed keys.",
        handler: client_on_off,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|tracking",
        arity: -3,
        flags: CONN,
        group: Group::Connection,
        since: "6.0.0",
        summary: "Controls server-assisted client-side caching for the connection.",
        complexity: "O(1). Some options may introduce additional complexity.",
        handler: super::tracking::client_tracking,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|caching",
        arity: 3,
        flags: CONN,
        group: Group::Connection,
        since: "6.0.0",
        summary: "Instructs the server whether to track the keys in the next request.",
        handler: super::tracking::client_caching,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|getredir",
        arity: 2,
        flags: CONN,
        group: Group::Connection,
        since: "6.0.0",
        summary:
            "Returns the client ID to which the connection's tracking notifications are redirected.",
        handler: super::tracking::client_getredir,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|trackinginfo",
        arity: 2,
        flags: CONN,
        group: Group::Connection,
        since: "6.2.0",
        summary:
            "Returns information about server-assisted client-side caching for the connection.",
        handler: super::tracking::client_trackinginfo,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "client|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Connection,
        since: "5.0.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: client_help,
        ..CommandSpec::DEFAULT
    },
];

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The configured password of the `default` user (`None`: nopass).
fn password(ctx: &Ctx<'_, '_>) -> Option<String> {
    ctx.server.config.requirepass.read().clone()
}

/// Compares in time that depends only on the lengths, so a wrong password's
/// reply time says nothing about how much of it was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks `username`/`password` against the `default` user and marks the session
/// authenticated on success. A failure leaves the session as it was, as in Redis.
fn authenticate(ctx: &mut Ctx<'_, '_>, username: &[u8], pass: &[u8]) -> Result<(), CmdError> {
    let ok = username == b"default"
        && match password(ctx) {
            None => true,
            Some(p) => same_secret(p.as_bytes(), pass),
        };
    if !ok {
        return Err(CmdError::Coded(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        ));
    }
    ctx.session.authenticated = true;
    Ok(())
}

/// Client names and SETINFO values: printable ASCII without spaces, so CLIENT
/// LIST stays splittable on spaces.
fn valid_attr(v: &[u8]) -> bool {
    v.iter().all(|b| (b'!'..=b'~').contains(b))
}

fn check_name(name: &[u8]) -> Result<(), CmdError> {
    if valid_attr(name) {
        Ok(())
    } else {
        Err(CmdError::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

/// Sets (or, when empty, clears) the connection name; `name` is already checked.
fn set_name(session: &Session, name: &[u8]) {
    *session.info.name.lock() = (!name.is_empty()).then(|| Bytes::copy_from_slice(name));
}

fn ping(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    if args.len() <= 2
        && ctx.session.proto == Protocol::Resp2
        && crate::pubsub::subscribed(ctx.session)
    {
        // A subscribed RESP2 client reads every reply as a message: Redis answers
        // in that shape, with an empty payload when PING has none.
        let payload = args.get(1).map_or_else(Bytes::new, |a| ctx.stored(a));
        return Ok(Frame::Array(vec![
            Frame::Bulk(Bytes::from_static(b"pong")),
            Frame::Bulk(payload),
        ]));
    }
    match args.len() {
        1 => Ok(Frame::Simple(Bytes::from_static(b"PONG"))),
        // Not copied again when big: the reply shares the argument's allocation.
        2 => Ok(Frame::Bulk(ctx.stored(args[1]))),
        _ => Err(CmdError::WrongArity("ping".into())),
    }
}

fn echo(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    Ok(Frame::Bulk(ctx.stored(args[1])))
}

fn quit(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    ctx.close_after_reply();
    Ok(Frame::ok())
}

fn select(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let id = parse_i64_opt(args[1]).ok_or(CmdError::NotInteger)?;
    if i32::try_from(id).is_err() {
        return Err(CmdError::err(format!(
            "value is out of range, value must between {} and {}",
            i32::MIN,
            i32::MAX
        )));
    }
    if id != 0 {
        return Err(CmdError::err("DB index is out of range"));
    }
    Ok(Frame::ok())
}

fn auth(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    match args.len() {
        2 => {
            if password(ctx).is_none() {
                return Err(CmdError::err(
                    "AUTH <password> called without any password configured for the default user. \
                     Are you sure your configuration is correct?",
                ));
            }
            authenticate(ctx, b"default", args[1])?;
        }
        3 => authenticate(ctx, args[1], args[2])?,
        _ => return Err(CmdError::Syntax),
    }
    Ok(Frame::ok())
}

fn hello(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let mut proto = None;
    let mut i = 1;
    if args.len() >= 2 {
        let ver = parse_i64_opt(args[1])
            .ok_or_else(|| CmdError::err("Protocol version is not an integer or out of range"))?;
        proto = Some(match ver {
            2 => Protocol::Resp2,
            3 => Protocol::Resp3,
            _ => {
                return Err(CmdError::Coded(
                    "NOPROTO unsupported protocol version".into(),
                ))
            }
        });
        i = 2;
    }
    let mut credentials = None;
    let mut name = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq_ic(args[i], "AUTH") && more >= 2 {
            credentials = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if eq_ic(args[i], "SETNAME") && more >= 1 {
            check_name(args[i + 1])?;
            name = Some(&args[i + 1]);
            i += 2;
        } else {
            return Err(CmdError::err(format!(
                "Syntax error in HELLO option '{}'",
                lossy(args[i])
            )));
        }
    }
    if let Some((user, pass)) = credentials {
        authenticate(ctx, user, pass)?;
    }
    if !ctx.session.authenticated && password(ctx).is_some() {
        return Err(CmdError::Coded(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        ));
    }
    if let Some(name) = name {
        set_name(ctx.session, name);
    }
    if let Some(proto) = proto {
        ctx.session.set_proto(proto);
        if proto == Protocol::Resp3 {
            // A RESP3 client takes pushes at any time: invalidations another
            // client redirects to it need a queue before it subscribes to
            // anything.
            crate::pubsub::endpoint(ctx.server, ctx.session);
        }
    }
    let field = |k: &'static str| Frame::Bulk(Bytes::from_static(k.as_bytes()));
    Ok(Frame::Map(vec![
        (field("server"), field("redis")),
        (field("version"), field(crate::REDIS_VERSION)),
        (field("proto"), Frame::Integer(ctx.session.proto.version())),
        (field("id"), Frame::Integer(ctx.session.id() as i64)),
        (field("mode"), field("standalone")),
        (field("role"), field("master")),
        (field("modules"), Frame::Array(Vec::new())),
    ]))
}

fn reset(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    // RESET is never queued nor run inside EXEC, so no view is held here and the
    // watched keys' shards can be locked to drop the WATCHes.
    ctx.session.multi = None;
    ctx.session.info.multi.store(u64::MAX, Relaxed);
    transactions::unwatch_all(ctx.server, ctx.session);
    crate::observe::monitor::stop(ctx.server, ctx.session);
    crate::tracking::disable(ctx.server, ctx.session);
    crate::pubsub::leave(ctx.server, ctx.session);
    ctx.session.set_proto(Protocol::Resp2);
    ctx.session.authenticated = password(ctx).is_none();
    ctx.session.asking = false;
    ctx.session.readonly = false;
    // lib-name and lib-ver stay: they still describe the library on this socket.
    *ctx.session.info.name.lock() = None;
    Ok(Frame::Simple(Bytes::from_static(b"RESET")))
}

fn client_id(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Integer(ctx.session.id() as i64))
}

fn client_setname(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    check_name(args[2])?;
    set_name(ctx.session, args[2]);
    Ok(Frame::ok())
}

fn client_getname(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(match &*ctx.session.info.name.lock() {
        Some(name) => Frame::Bulk(name.clone()),
        None => Frame::Null,
    })
}

fn client_setinfo(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (attr, value) = (&args[2], &args[3]);
    let slot = if eq_ic(attr, "LIB-NAME") {
        &ctx.session.info.lib_name
    } else if eq_ic(attr, "LIB-VER") {
        &ctx.session.info.lib_ver
    } else {
        return Err(CmdError::err(format!(
            "Unrecognized option '{}'",
            lossy(attr)
        )));
    };
    if !valid_attr(value) {
        return Err(CmdError::err(format!(
            "{} cannot contain spaces, newlines or special characters.",
            lossy(attr)
        )));
    }
    // A copy, not a slice that would keep the read buffer for the connection's life.
    *slot.lock() = (!value.is_empty()).then(|| Bytes::copy_from_slice(value));
    Ok(Frame::ok())
}

/// The kinds of client CLIENT LIST and CLIENT KILL select by `TYPE`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientType {
    Normal,
    /// Subscribed to a channel or pattern.
    Pubsub,
    /// Replicas and masters, which relcache never has.
    Replication,
}

impl ClientType {
    fn matches(self, c: &ClientInfo) -> bool {
        match self {
            ClientType::Normal => !c.is_pubsub(),
            ClientType::Pubsub => c.is_pubsub(),
            ClientType::Replication => false,
        }
    }
}

fn client_type(name: &[u8]) -> Result<ClientType, CmdError> {
    if eq_ic(name, "normal") {
        Ok(ClientType::Normal)
    } else if eq_ic(name, "pubsub") {
        Ok(ClientType::Pubsub)
    } else if ["slave", "replica", "master"]
        .iter()
        .any(|t| eq_ic(name, t))
    {
        Ok(ClientType::Replication)
    } else {
        Err(CmdError::err(format!(
            "Unknown client type '{}'",
            lossy(name)
        )))
    }
}

fn verbatim(text: String) -> Frame {
    Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from(text),
    }
}

/// Appends `info`'s line; `args` are the running command's, shown as the
/// caller's own `argv-mem`.
fn push_line(out: &mut String, info: &ClientInfo, caller: u64, args: &[&[u8]]) {
    out.push_str(&info.line((info.id == caller).then_some(args)));
    out.push('\n');
}

fn client_list(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let all = ctx.server.clients.all();
    let me = ctx.session.id();
    let mut out = String::new();
    if args.len() == 4 && eq_ic(args[2], "TYPE") {
        let kind = client_type(args[3])?;
        all.iter()
            .filter(|c| kind.matches(c))
            .for_each(|c| push_line(&mut out, c, me, args));
    } else if args.len() > 3 && eq_ic(args[2], "ID") {
        let ids = args[3..]
            .iter()
            .map(|a| parse_i64_opt(a).ok_or_else(|| CmdError::err("Invalid client ID")))
            .collect::<Result<Vec<_>, _>>()?;
        // `all` is in id order.
        for id in ids {
            if let Ok(pos) = all.binary_search_by(|c| (c.id as i128).cmp(&(id as i128))) {
                push_line(&mut out, &all[pos], me, args);
            }
        }
    } else if args.len() == 2 {
        all.iter().for_each(|c| push_line(&mut out, c, me, args));
    } else {
        return Err(CmdError::Syntax);
    }
    Ok(verbatim(out))
}

fn client_info(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let mut out = String::new();
    push_line(&mut out, &ctx.session.info, ctx.session.id(), args);
    Ok(verbatim(out))
}

/// What CLIENT KILL's filter form selects.
#[derive(Default)]
struct KillFilter {
    id: Option<u64>,
    kind: Option<ClientType>,
    addr: Option<Bytes>,
    laddr: Option<Bytes>,
    /// `MAXAGE`: only connections at least this many seconds old (Redis 7.4).
    max_age: Option<u64>,
}

impl KillFilter {
    fn matches(&self, c: &ClientInfo) -> bool {
        self.kind.is_none_or(|k| k.matches(c))
            && self.id.is_none_or(|id| c.id == id)
            && self
                .addr
                .as_ref()
                .is_none_or(|a| c.addr.to_string().as_bytes() == &a[..])
            && self
                .laddr
                .as_ref()
                .is_none_or(|a| c.laddr.to_string().as_bytes() == &a[..])
            && self.max_age.is_none_or(|age| c.age_secs() >= age)
    }
}

fn client_kill(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let old_form = args.len() == 3;
    let mut filter = KillFilter::default();
    // The old form may kill the caller itself; the filter form skips it by default.
    let mut skipme = !old_form;
    if old_form {
        filter.addr = Some(Bytes::copy_from_slice(args[2]));
    } else {
        let mut i = 2;
        while i < args.len() {
            let (opt, value) = (&args[i], args.get(i + 1));
            let Some(value) = value else {
                return Err(CmdError::Syntax);
            };
            if eq_ic(opt, "ID") {
                let id = parse_i64_opt(value)
                    .filter(|&id| id >= 1)
                    .ok_or_else(|| CmdError::err("client-id should be greater than 0"))?;
                filter.id = Some(id as u64);
            } else if eq_ic(opt, "MAXAGE") {
                // Two errors, as 7.4 tells a bad number from one that is not positive.
                let age = parse_i64_opt(value)
                    .ok_or_else(|| CmdError::err("maxage is not an integer or out of range"))?;
                if age <= 0 {
                    return Err(CmdError::err("maxage should be greater than 0"));
                }
                filter.max_age = Some(age as u64);
            } else if eq_ic(opt, "TYPE") {
                filter.kind = Some(client_type(value)?);
            } else if eq_ic(opt, "ADDR") {
                filter.addr = Some(Bytes::copy_from_slice(value));
            } else if eq_ic(opt, "LADDR") {
                filter.laddr = Some(Bytes::copy_from_slice(value));
            } else if eq_ic(opt, "USER") {
                if &value[..] != b"default" {
                    return Err(CmdError::err(format!("No such user '{}'", lossy(value))));
                }
            } else if eq_ic(opt, "SKIPME") {
                skipme = if eq_ic(value, "yes") {
                    true
                } else if eq_ic(value, "no") {
                    false
                } else {
                    return Err(CmdError::Syntax);
                };
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
    }

    let me = ctx.session.id();
    let mut killed = 0i64;
    for c in ctx.server.clients.all() {
        // A client already told to go is on its way out: don't count it twice.
        if !filter.matches(&c) || c.kill.is_cancelled() {
            continue;
        }
        if c.id == me {
            if skipme {
                continue;
            }
            // Our own reply must still go out: close after writing it.
            ctx.close_after_reply();
        } else {
            c.kill.cancel();
        }
        killed += 1;
    }
    if old_form {
        if killed == 0 {
            return Err(CmdError::err("No such client"));
        }
        return Ok(Frame::ok());
    }
    Ok(Frame::Integer(killed))
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: a client parked on a lease answers its parked
/// command now — nil, as when its wait runs out, or `-UNBLOCKED …` — and goes on
/// with what it sent after it. 1 if that client was parked, else 0.
fn client_unblock(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    if args.len() > 4 {
        return Err(CmdError::WrongArity(ctx.spec.name.into()));
    }
    let id = parse_i64(args[2])?;
    let how = match args.get(3) {
        None => Unblock::Timeout,
        Some(a) if eq_ic(a, "TIMEOUT") => Unblock::Timeout,
        Some(a) if eq_ic(a, "ERROR") => Unblock::Error,
        Some(_) => {
            return Err(CmdError::err(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ))
        }
    };
    let unblocked = ctx.server.clients.get(id).is_some_and(|c| c.unblock(how));
    Ok(Frame::Integer(unblocked as i64))
}

/// ON or OFF, as CLIENT's switches take it.
fn on_off(arg: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(arg, "ON") {
        Ok(true)
    } else if eq_ic(arg, "OFF") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// NO-TOUCH: a read's LRU update is the shard's business, so the mode is accepted
/// and has no effect.
fn client_on_off(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    on_off(args[2])?;
    Ok(Frame::ok())
}

/// NO-EVICT: `maxmemory-clients` never closes this connection.
fn client_no_evict(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let on = on_off(args[2])?;
    ctx.session
        .info
        .no_evict
        .store(on, std::sync::atomic::Ordering::Relaxed);
    Ok(Frame::ok())
}

fn client_help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "CLIENT",
        &[
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are:",
            "    * ADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made from the specified address",
            "    * LADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made to specified local address",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Kill connections by type.",
            "    * USER <username>",
            "      Kill connections authenticated by <username>.",
            "    * SKIPME (YES|NO)",
            "      Skip killing current connection (default: yes).",
            "    * ID <client-id>",
            "      Kill connections by client id.",
            "    * MAXAGE <maxage>",
            "      Kill connections older than the specified age.",
            "LIST [options ...]",
            "    Return information about client connections. Options:",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
            "    * ID <client-id> [<client-id> ...]",
            "      Return clients of specified IDs only.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "    Unblock the specified blocked client.",
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are:",
            "    * LIB-NAME: the client lib name.",
            "    * LIB-VER: the client lib version.",
            "NO-EVICT (ON|OFF)",
            "    Protect current client connection from eviction.",
            "NO-TOUCH (ON|OFF)",
            "    Will not touch LRU/LFU stats when this mode is on.",
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_printable_ascii_without_spaces() {
        assert!(valid_attr(b"redis-py"));
        assert!(valid_attr(b""));
        for bad in [&b"a b"[..], b"a\nb", b"\xc3\xa9", b"\x7f", b"tab\t"] {
            assert!(!valid_attr(bad), "{bad:?}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"secret", b"secret"));
        assert!(!same_secret(b"secret", b"secreT"));
        assert!(!same_secret(b"secret", b"secret2"));
        assert!(!same_secret(b"", b"x"));
    }
}
