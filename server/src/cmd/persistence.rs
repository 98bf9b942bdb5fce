//! The snapshot commands: SAVE, BGSAVE [SCHEDULE], LASTSAVE (SHUTDOWN's save is in
//! `server.rs`; the saving itself is `crate::persist`). Replies and errors are
//! Redis 7's. Unlike Redis's SAVE, which stops the whole server, relcache's SAVE
//! makes only its own client wait: the save runs off the runtime's workers.

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group};
use super::{eq_ic, Ctx};
use crate::error::{CmdError, CmdResult};
use crate::persist;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "lastsave",
        arity: 1,
        flags: spec::LOADING | spec::STALE | spec::FAST,
        group: Group::Server,
        summary: "Returns the Unix timestamp of the last successful save to disk.",
        handler: lastsave,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "save",
        arity: 1,
        flags: spec::ADMIN | spec::NOSCRIPT | spec::NO_MULTI,
        group: Group::Server,
        summary: "Synchronously saves the database(s) to disk.",
        complexity: "O(N) where N is the total number of keys in all databases",
        handler: save,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "bgsave",
        arity: -1,
        flags: spec::ADMIN | spec::NOSCRIPT,
        group: Group::Server,
        summary: "Asynchronously saves the database(s) to disk.",
        handler: bgsave,
        ..CommandSpec::DEFAULT
    },
];

const IN_PROGRESS: &str = "Background save already in progress";

fn lastsave(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let secs = ctx
        .server
        .persist
        .last_save_secs
        .load(std::sync::atomic::Ordering::Relaxed);
    Ok(Frame::Integer(secs as i64))
}

fn save(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let server = ctx.server;
    match crate::offload::offload(|| persist::save_now(server)) {
        Ok(()) => Ok(Frame::ok()),
        Err(None) => Err(CmdError::err(IN_PROGRESS)),
        // Redis answers a failed SAVE with a bare "ERR"; the log says why.
        Err(Some(_)) => Err(CmdError::Coded("ERR".into())),
    }
}

fn bgsave(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let schedule = match args {
        [_] => false,
        [_, s] if eq_ic(s, "schedule") => true,
        _ => return Err(CmdError::Syntax),
    };
    // Inside EXEC Redis will not fork (the transaction must stay atomic); it
    // schedules the save for after it, if asked to.
    if ctx.in_exec() {
        if !schedule {
            return Err(CmdError::err(
                "Another child process is active (AOF?): can't BGSAVE right now. \
                 Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.",
            ));
        }
        persist::schedule_bgsave(ctx.server);
        return Ok(Frame::Simple(Bytes::from_static(
            b"Background saving scheduled",
        )));
    }
    match persist::bgsave(ctx.server) {
        Ok(()) => Ok(Frame::Simple(Bytes::from_static(
            b"Background saving started",
        ))),
        Err(persist::BgsaveRefused::InProgress) => Err(CmdError::err(IN_PROGRESS)),
    }
}
