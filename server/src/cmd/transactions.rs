//! MULTI / EXEC / DISCARD / WATCH / UNWATCH.
//!
//! EXEC is atomic the way Redis's is: before running the queued commands it locks,
//! in shard order, every shard any of them touches (all shards if one of them is
//! keyspace-wide), so no other client's command can interleave, and releases them
//! only after the last reply. WATCH registers the connection's flag in the watched
//! keys' shards; every write to such a key raises it, and EXEC refuses to run (null
//! reply) when it is raised or a watched key has expired since WATCH.

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{registry, resolve, run, Ctx, Outcome};
use crate::db::{now_ms, LockMode};
use crate::error::{CmdError, CmdResult};
use crate::offload::StepAside;
use crate::server::Server;
use crate::session::{Multi, Session};

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "multi",
        arity: 1,
        flags: spec::NOSCRIPT
            | spec::LOADING
            | spec::STALE
            | spec::FAST
            | spec::ALLOW_BUSY
            | spec::NOT_QUEUED,
        group: Group::Transactions,
        since: "1.2.0",
        summary: "Starts a transaction.",
        handler: multi,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "exec",
        arity: 1,
        flags: spec::NOSCRIPT
            | spec::LOADING
            | spec::STALE
            | spec::SKIP_SLOWLOG
            | spec::NOT_QUEUED
            | spec::RUNS_QUEUED
            | spec::UNWATCHES,
        group: Group::Transactions,
        since: "1.2.0",
        summary: "Executes all commands in a transaction.",
        complexity: "Depends on commands in the transaction",
        handler: exec,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "discard",
        arity: 1,
        flags: spec::NOSCRIPT
            | spec::LOADING
            | spec::STALE
            | spec::FAST
            | spec::ALLOW_BUSY
            | spec::NOT_QUEUED
            | spec::UNWATCHES,
        group: Group::Transactions,
        since: "2.0.0",
        summary: "Discards a transaction.",
        complexity: "O(N), when N is the number of queued commands",
        handler: discard,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "watch",
        arity: -2,
        flags: spec::NOSCRIPT
            | spec::LOADING
            | spec::STALE
            | spec::FAST
            | spec::ALLOW_BUSY
            | spec::LOCK_WRITE
            | spec::NOT_QUEUED,
        keys: Keys::ALL_ARGS,
        group: Group::Transactions,
        since: "2.2.0",
        summary: "Monitors changes to keys to determine the execution of a transaction.",
        complexity: "O(1) for every key.",
        handler: watch,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "unwatch",
        arity: 1,
        flags: spec::NOSCRIPT
            | spec::LOADING
            | spec::STALE
            | spec::FAST
            | spec::ALLOW_BUSY
            | spec::UNWATCHES,
        group: Group::Transactions,
        since: "2.2.0",
        summary: "Forgets about watched keys of a transaction.",
        handler: unwatch,
        ..CommandSpec::DEFAULT
    },
];

/// What EXEC may bring into memory: the size of its queued commands that add
/// data (`None` when none does, so EXEC is then not refused under maxmemory).
pub(super) fn incoming(multi: &Multi) -> Option<usize> {
    let reg = registry();
    let mut adding = multi
        .queued
        .iter()
        .filter(|a| {
            reg.command(&a[0])
                .is_some_and(|(_, s)| s.has(spec::DENYOOM))
        })
        .peekable();
    adding.peek()?;
    Some(adding.flat_map(|a| a.iter()).map(|a| a.len()).sum())
}

/// Commands that refuse writes or leases by themselves while memory is over
/// (a script's first write, a lease on a miss), and so evict until under
/// before they run.
pub(super) const DECIDES_ITSELF: u32 = spec::RUNS_SCRIPT | spec::LOCK_WRITE | spec::BLOCKING;

/// Whether a queued command is one of [`DECIDES_ITSELF`]: EXEC then evicts as
/// it would.
pub(super) fn decides_itself(multi: &Multi) -> bool {
    let reg = registry();
    multi.queued.iter().any(|a| {
        reg.command(&a[0])
            .is_some_and(|(_, s)| s.has(DECIDES_ITSELF))
    })
}

fn multi(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    if ctx.session.multi.is_some() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    ctx.session.multi = Some(Multi::default());
    ctx.session.info.multi.store(0, Relaxed);
    Ok(Frame::ok())
}

fn discard(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    if ctx.session.multi.take().is_none() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    ctx.session.info.multi.store(u64::MAX, Relaxed);
    unwatch_all(ctx.server, ctx.session);
    Ok(Frame::ok())
}

fn watch(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    if ctx.session.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    let flag = ctx.session.watch_flag.clone();
    let mut added = Vec::new();
    {
        let v = ctx.view();
        for key in &args[1..] {
            let expire = v.peek(key).map(|e| e.expire_at());
            v.watch(key, &flag);
            added.push((Bytes::copy_from_slice(key), expire.flatten()));
        }
    }
    for (k, e) in added {
        if !ctx.session.watched.iter().any(|(w, _)| *w == k) {
            ctx.session.watched.push((k, e));
        }
    }
    publish_watched(ctx.server, ctx.session);
    Ok(Frame::ok())
}

fn unwatch(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    unwatch_all(ctx.server, ctx.session);
    Ok(Frame::ok())
}

/// Drops every WATCH of the session and lowers its flag. Must not be called while
/// the session holds a view (it locks the watched keys' shards).
pub(super) fn unwatch_all(server: &Server, session: &mut Session) {
    if session.watched.is_empty() {
        session.watch_flag.store(false, Relaxed);
        return;
    }
    let keys: Vec<Bytes> = session.watched.drain(..).map(|(k, _)| k).collect();
    publish_watched(server, session);
    let mut v = server.db.view(&keys, false, LockMode::Write);
    for k in &keys {
        v.unwatch(k, &session.watch_flag);
    }
    drop(v);
    session.watch_flag.store(false, Relaxed);
}

/// Shows how many keys the session watches to CLIENT LIST (`watch=`) and INFO
/// (`watching_clients`), which read them from other connections.
fn publish_watched(server: &Server, session: &Session) {
    let now = session.watched.len() as u64;
    let before = session.info.watching.swap(now, Relaxed);
    match (before, now) {
        (0, 1..) => server.clients.watching_changed(1),
        (1.., 0) => server.clients.watching_changed(-1),
        _ => {}
    }
}

/// Releases what a closing connection holds in shared structures.
pub fn discard_session_state(server: &Server, session: &mut Session) {
    session.multi = None;
    unwatch_all(server, session);
}

fn exec(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let Some(multi) = ctx.session.multi.take() else {
        return Err(CmdError::err("EXEC without MULTI"));
    };
    // Its commands start with the transaction's memory state, as Redis's do.
    let start = super::Start {
        resumed: None,
        oom: ctx.oom_at_start(),
    };
    let (server, session) = (ctx.server, &mut *ctx.session);
    session.info.multi.store(u64::MAX, Relaxed);
    if multi.failed {
        unwatch_all(server, session);
        return Err(CmdError::Coded(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    // Resolve every queued command (they were checked when queued) and collect the
    // keys of all of them, so one view locks everything the transaction touches.
    let reg = registry();
    let mut resolved = Vec::with_capacity(multi.queued.len());
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut all = false;
    let mut write = false;
    for args in &multi.queued {
        let (id, spec) = resolve(reg, args).expect("queued commands were resolved when queued");
        match spec.key_indices(args) {
            None => all = true,
            Some(idx) => keys.extend(idx.iter().map(|&i| &args[i][..])),
        }
        // A read that may grant a lease on a miss (`IDSET.MEXISTSBIN … LEASE`)
        // needs its shards exclusively, as it does outside a transaction.
        write |= spec.has(spec::WRITE) || spec.has(spec::LOCK_WRITE) || spec.has(spec::BLOCKING);
        resolved.push((id, spec));
    }
    // The watched keys are locked with the transaction's own (exclusively: their
    // watchers are removed through this view), and checked under those locks, so
    // no write can land between the check and the commands.
    let watched = std::mem::take(&mut session.watched);
    publish_watched(server, session);
    keys.extend(watched.iter().map(|(k, _)| &k[..]));
    let mode = if write || !watched.is_empty() {
        LockMode::Write
    } else {
        LockMode::Read
    };
    let mut view = server.db.view(&keys, all, mode);
    view.set_client(session.id());
    let now = now_ms();
    let watched_expired = watched.iter().any(|(_, e)| e.is_some_and(|at| at <= now));
    let aborted = session.watch_flag.load(Relaxed) || watched_expired;
    for (k, _) in &watched {
        view.unwatch(k, &session.watch_flag);
    }
    session.watch_flag.store(false, Relaxed);
    if aborted {
        server.absorb_view_stats(&view);
        return Ok(Frame::NullArray);
    }
    let mut replies = Vec::with_capacity(resolved.len());
    let mut close = false;
    // A transaction of many heavy commands runs as long as they take: past a
    // millisecond the loop's other clients go on without it. Those that need
    // the shards it holds wait for it, as its atomicity requires (each on a
    // thread of its own after a millisecond, up to `loop-max-threads`).
    let mut aside = StepAside::start();
    for ((id, spec), args) in resolved.into_iter().zip(&multi.queued) {
        aside.check();
        let outcome = super::with_owned(args, |args| {
            run(server, session, id, spec, args, Some(&mut view), start)
        });
        let reply = match outcome {
            Outcome::Reply(reply) => reply,
            // SUBSCRIBE a b: each confirmation is an element, as Redis writes them.
            Outcome::Replies(mut more) => {
                let last = more.pop().unwrap_or(Frame::Null);
                for reply in more {
                    crate::observe::error_reply(server, &reply);
                    replies.push(reply);
                }
                last
            }
            // A queued CLIENT KILL of this very client: answered, then closed.
            Outcome::Close(reply) => {
                close = true;
                reply.unwrap_or(Frame::Null)
            }
            // Nothing waits inside a transaction (it holds its locks): a lease
            // command answers busy instead.
            Outcome::Park(_) => unreachable!("a queued command parked"),
            Outcome::Written => unreachable!("a queued command has no output to write into"),
        };
        crate::observe::error_reply(server, &reply);
        replies.push(reply);
    }
    server.absorb_view_stats(&view);
    drop(view);
    if close {
        ctx.close_after_reply();
    }
    Ok(Frame::Array(replies))
}
