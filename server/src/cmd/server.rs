//! The keyspace-wide and process commands: DBSIZE, FLUSHDB / FLUSHALL, TIME,
//! SHUTDOWN, SWAPDB. INFO, CONFIG, MEMORY and the snapshot commands (SAVE, BGSAVE,
//! LASTSAVE) have their own files.
//!
//! What relcache does not have, it says so rather than pretending: there is a
//! single database (SWAPDB 0 0 is the only swap). DBSIZE reads the lock-free key counts; only FLUSHDB / FLUSHALL
//! (keyspace-wide writes) go through a [`View`](crate::db::View).

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, Ctx};
use crate::error::{CmdError, CmdResult};
use crate::script::Holder;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "dbsize",
        arity: 1,
        flags: spec::READONLY | spec::FAST,
        // The key count is kept lock-free per shard: DBSIZE locks nothing.
        keys: Keys::None,
        group: Group::Server,
        summary: "Returns the number of keys in the database.",
        handler: dbsize,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "flushdb",
        arity: -1,
        flags: spec::WRITE,
        keys: Keys::All,
        group: Group::Server,
        summary: "Remove all keys from the current database.",
        complexity: "O(N) where N is the number of keys in the selected database",
        handler: flush,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "flushall",
        arity: -1,
        flags: spec::WRITE,
        keys: Keys::All,
        group: Group::Server,
        summary: "Removes all keys from all databases.",
        complexity: "O(N) where N is the total number of keys in all databases",
        handler: flush,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "time",
        arity: 1,
        flags: spec::LOADING | spec::STALE | spec::FAST,
        group: Group::Server,
        since: "2.6.0",
        summary: "Returns the server time.",
        handler: time,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "shutdown",
        arity: -1,
        flags: spec::ADMIN | spec::NOSCRIPT | spec::LOADING | spec::STALE | spec::NO_MULTI | spec::ALLOW_BUSY,
        group: Group::Server,
        summary: "Synchronously saves the database(s) to disk and shuts down the Redis server.",
        complexity:
            "O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)",
        handler: shutdown,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "swapdb",
        arity: 3,
        flags: spec::WRITE | spec::FAST,
        group: Group::Server,
        since: "4.0.0",
        summary: "Swaps two Redis databases.",
        complexity: "O(N) where N is the count of clients watching or blocking on keys from both databases.",
        handler: swapdb,
        ..CommandSpec::DEFAULT
    },
];

pub(super) fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// Keyspace-wide and time commands

fn dbsize(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Integer(ctx.server.db.len() as i64))
}

/// FLUSHDB and FLUSHALL (one database: the same thing). The shards are emptied
/// under their write locks and their old contents freed on the lazy-free thread.
/// `ASYNC` replies at once, as Redis's; `SYNC`, the default (relcache has no
/// `lazyfree-lazy-user-flush`), replies once the memory is back — waiting off the
/// worker and, outside a transaction, with the shards unlocked.
fn flush(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let sync = match args {
        [_] => true,
        [_, mode] if eq_ic(mode, "async") => false,
        [_, mode] if eq_ic(mode, "sync") => true,
        _ => return Err(CmdError::Syntax),
    };
    ctx.view().clear_all();
    if sync && crate::offload::pending_frees() > 0 {
        ctx.release_view();
        crate::offload::offload(crate::offload::wait_freed);
    }
    Ok(Frame::ok())
}

fn time(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let now = unix_now();
    Ok(Frame::Array(vec![
        Frame::bulk(now.as_secs().to_string()),
        Frame::bulk(now.subsec_micros().to_string()),
    ]))
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]. Saves first when asked (SAVE) or
/// when a save policy is set (unless NOSAVE), as Redis does; a failed save keeps
/// the server up unless FORCE. There is no replica to wait for, so NOW changes
/// nothing and no shutdown is ever in progress to ABORT. The server then stops
/// accepting, every connection is closed, and the process exits with status 0.
/// Like Redis, the client gets no reply — the connection just closes.
fn shutdown(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let (mut save, mut nosave, mut abort) = (false, false, false);
    let (mut force, mut now) = (false, false);
    for arg in &args[1..] {
        if eq_ic(arg, "nosave") {
            nosave = true;
        } else if eq_ic(arg, "save") {
            save = true;
        } else if eq_ic(arg, "now") {
            now = true;
        } else if eq_ic(arg, "force") {
            force = true;
        } else if eq_ic(arg, "abort") {
            abort = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if (abort && (save || nosave || now || force)) || (save && nosave) {
        return Err(CmdError::Syntax);
    }
    if abort {
        // A shutdown never waits for anything here, so none is ever in progress.
        return Err(CmdError::err("No shutdown in progress."));
    }
    if ctx.in_exec() {
        // SHUTDOWN is no_multi; this only guards a transaction that queued it anyway.
        return Err(CmdError::err("Command not allowed inside a transaction"));
    }
    let server = ctx.server;
    if nosave {
        // As in Redis, the way out from under a script that will not end.
        server.scripts.running.kill_all();
    } else {
        // Saving would wait for the shards a script holds: wait for it as other
        // commands do, and past `busy-reply-threshold` answer BUSY, as Redis does.
        let ms = server.config.busy_reply_threshold.load(Relaxed);
        if let Err(held) =
            server
                .scripts
                .running
                .holder(ctx.session.id(), None, Duration::from_millis(ms))
        {
            let Holder::Running { busy_at } = held.standing else {
                return Err(CmdError::Busy);
            };
            ctx.park(super::script_wait(held.wake, busy_at));
            return Ok(Frame::Null);
        }
    }
    let policy = !server.config.save_policy.read().is_empty();
    // Redis never saves over the file it is still loading.
    if (save || (policy && !nosave)) && !server.persist.loading() {
        if let Err(e) = crate::offload::offload(|| crate::persist::save_final(server)) {
            tracing::warn!(error = %e, "error trying to save the DB before shutdown");
            if !force {
                return Err(CmdError::err("Errors trying to SHUTDOWN. Check logs."));
            }
        }
    }
    crate::persist::settle_shutdown(server);
    tracing::warn!(client = ctx.session.id(), "user requested shutdown");
    server.shutdown.cancel();
    ctx.close_without_reply();
    Ok(Frame::ok())
}

fn swapdb(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let index = |arg: &[u8], which: &str| {
        super::parse_i64_opt(arg)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| CmdError::err(format!("invalid {which} DB index")))
    };
    let a = index(args[1], "first")?;
    let b = index(args[2], "second")?;
    if a != 0 || b != 0 {
        return Err(CmdError::err("DB index is out of range"));
    }
    Ok(Frame::ok())
}
