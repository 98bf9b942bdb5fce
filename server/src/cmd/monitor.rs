//! MONITOR: turns this connection into a monitor (see [`crate::observe::monitor`]).

use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group};
use super::Ctx;
use crate::error::{CmdError, CmdResult};

pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "monitor",
    arity: 1,
    flags: spec::ADMIN | spec::NOSCRIPT | spec::LOADING | spec::STALE,
    group: Group::Server,
    since: "1.0.0",
    summary: "Listens for all requests received by the server in real-time.",
    handler: monitor,
    ..CommandSpec::DEFAULT
}];

fn monitor(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    // A transaction expects one reply per command; a feed has no end.
    if ctx.in_exec() {
        return Err(CmdError::err(
            "MONITOR isn't allowed for DENY BLOCKING client",
        ));
    }
    let server = ctx.server;
    server.observe.monitors.start(server, ctx.session);
    Ok(Frame::ok())
}
