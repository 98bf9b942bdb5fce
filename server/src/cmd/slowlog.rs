//! SLOWLOG GET / LEN / RESET / HELP over the slow log kept in
//! [`crate::observe::slowlog`].

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group};
use super::{parse_i64_opt, Ctx};
use crate::error::{CmdError, CmdResult};

const ADMIN: u32 = spec::ADMIN | spec::LOADING | spec::STALE;

pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "slowlog",
    arity: -2,
    group: Group::Server,
    since: "2.2.12",
    summary: "A container for slow log commands.",
    complexity: "Depends on subcommand.",
    subcommands: SUBCOMMANDS,
    ..CommandSpec::DEFAULT
}];

const SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "slowlog|get",
        arity: -2,
        flags: ADMIN,
        group: Group::Server,
        since: "2.2.12",
        summary: "Returns the slow log's entries.",
        complexity: "O(N) where N is the number of entries returned",
        handler: get,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "slowlog|len",
        arity: 2,
        flags: ADMIN,
        group: Group::Server,
        since: "2.2.12",
        summary: "Returns the number of entries in the slow log.",
        handler: len,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "slowlog|reset",
        arity: 2,
        flags: ADMIN,
        group: Group::Server,
        since: "2.2.12",
        summary: "Clears all entries from the slow log.",
        complexity: "O(N) where N is the number of entries in the slowlog",
        handler: reset,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "slowlog|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Server,
        since: "6.2.0",
        summary: "Show helpful text about the different subcommands",
        handler: help,
        ..CommandSpec::DEFAULT
    },
];

fn get(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let count = match args {
        [_, _] => Some(10),
        [_, _, n] => match parse_i64_opt(n) {
            Some(-1) => None,
            Some(n) if n >= 0 => Some(n as usize),
            _ => return Err(CmdError::err("count should be greater than or equal to -1")),
        },
        _ => {
            return Err(CmdError::err(
                "unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP.",
            ))
        }
    };
    let entries = ctx.server.observe.slowlog.with_newest(count, |it| {
        it.map(|e| {
            Frame::Array(vec![
                Frame::Integer(e.id as i64),
                Frame::Integer(e.time as i64),
                Frame::Integer(e.micros as i64),
                Frame::Array(e.args.iter().cloned().map(Frame::Bulk).collect()),
                Frame::Bulk(Bytes::from(e.addr.clone())),
                Frame::Bulk(e.name.clone()),
            ])
        })
        .collect()
    });
    Ok(Frame::Array(entries))
}

fn len(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Integer(ctx.server.observe.slowlog.len() as i64))
}

fn reset(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    ctx.server.observe.slowlog.reset();
    Ok(Frame::ok())
}

fn help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "SLOWLOG",
        &[
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
        ],
    ))
}
