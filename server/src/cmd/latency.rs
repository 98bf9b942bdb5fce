//! LATENCY LATEST / HISTORY / RESET / HISTOGRAM / HELP, over the events and the
//! per-command histograms kept in [`crate::observe`]. DOCTOR and GRAPH (Redis's
//! prose report and ASCII chart) are left out: they answer "unknown subcommand".

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group};
use super::{registry, Ctx};
use crate::error::CmdResult;

const ADMIN: u32 = spec::ADMIN | spec::NOSCRIPT | spec::LOADING | spec::STALE;

pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "latency",
    arity: -2,
    group: Group::Server,
    since: "2.8.13",
    summary: "A container for latency diagnostics commands.",
    complexity: "Depends on subcommand.",
    subcommands: SUBCOMMANDS,
    ..CommandSpec::DEFAULT
}];

const SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "latency|latest",
        arity: 2,
        flags: ADMIN,
        group: Group::Server,
        since: "2.8.13",
        summary: "Returns the latest latency samples for all events.",
        handler: latest,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "latency|history",
        arity: 3,
        flags: ADMIN,
        group: Group::Server,
        since: "2.8.13",
        summary: "Returns timestamp-latency samples for an event.",
        handler: history,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "latency|reset",
        arity: -2,
        flags: ADMIN,
        group: Group::Server,
        since: "2.8.13",
        summary: "Resets the latency data for one or more events.",
        handler: reset,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "latency|histogram",
        arity: -2,
        flags: ADMIN,
        group: Group::Server,
        since: "7.0.0",
        summary: "Returns the cumulative distribution of latencies of a subset or all commands.",
        complexity:
            "O(N) where N is the number of commands with latency information being retrieved.",
        handler: histogram,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "latency|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Server,
        since: "2.8.13",
        summary: "Returns helpful text about the different subcommands.",
        handler: help,
        ..CommandSpec::DEFAULT
    },
];

fn latest(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let rows = ctx
        .server
        .observe
        .latency
        .all()
        .into_iter()
        .filter_map(|(name, h)| {
            let &(time, ms) = h.samples.back()?;
            Some(Frame::Array(vec![
                Frame::Bulk(Bytes::from_static(name.as_bytes())),
                Frame::Integer(time as i64),
                Frame::Integer(ms as i64),
                Frame::Integer(h.max as i64),
            ]))
        })
        .collect();
    Ok(Frame::Array(rows))
}

fn history(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let samples = ctx
        .server
        .observe
        .latency
        .history(args[2])
        .map(|h| h.samples)
        .unwrap_or_default();
    Ok(Frame::Array(
        samples
            .into_iter()
            .map(|(t, ms)| Frame::Array(vec![Frame::Integer(t as i64), Frame::Integer(ms as i64)]))
            .collect(),
    ))
}

fn reset(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let names: Vec<&[u8]> = args[2..].iter().map(|a| &a[..]).collect();
    Ok(Frame::Integer(
        ctx.server.observe.latency.reset(&names) as i64
    ))
}

/// A map of command name to its calls and cumulative distribution; every command
/// called so far without arguments, else the named ones (a container names its
/// subcommands). Unknown names are skipped, as in Redis.
fn histogram(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let wanted: Vec<String> = args[2..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let picks = |name: &str| {
        wanted.is_empty()
            || wanted.iter().any(|w| {
                name == w
                    || name
                        .strip_prefix(w.as_str())
                        .is_some_and(|r| r.starts_with('|'))
            })
    };
    let mut out = Vec::new();
    for (spec, h) in registry().all.iter().zip(&ctx.server.observe.histograms) {
        if !picks(spec.name) {
            continue;
        }
        let Some(snap) = h.snapshot() else { continue };
        let buckets = snap
            .cumulative_usec()
            .into_iter()
            .map(|(usec, n)| (Frame::Integer(usec as i64), Frame::Integer(n as i64)))
            .collect();
        out.push((
            Frame::Bulk(Bytes::from_static(spec.name.as_bytes())),
            Frame::Map(vec![
                (Frame::bulk("calls"), Frame::Integer(snap.total as i64)),
                (Frame::bulk("histogram_usec"), Frame::Map(buckets)),
            ]),
        ));
    }
    Ok(Frame::Map(out))
}

fn help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "LATENCY",
        &[
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
        ],
    ))
}
