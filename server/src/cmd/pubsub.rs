//! SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, their sharded
//! forms (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH) and PUBSUB: the command side of
//! pub/sub. The registry and delivery are `crate::pubsub`; this family parses
//! arguments and shapes replies.
//!
//! Shard channels are declared as keys, as Redis's command table declares them
//! (a cluster routes them by slot like keys): COMMAND INFO reports their key
//! specs, and a script that publishes to one declares it in KEYS.

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group, Keys};
use super::Ctx;
use crate::error::{CmdError, CmdResult};
use crate::pubsub::{self, Kind};

const SUBSCRIBING: u32 = spec::PUBSUB | spec::NOSCRIPT | spec::LOADING | spec::STALE;
const INSPECTING: u32 = spec::PUBSUB | spec::LOADING | spec::STALE;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "subscribe",
        arity: -2,
        flags: SUBSCRIBING,
        group: Group::Pubsub,
        since: "2.0.0",
        summary: "Listens for messages published to channels.",
        complexity: "O(N) where N is the number of channels to subscribe to.",
        handler: subscribe,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "unsubscribe",
        arity: -1,
        flags: SUBSCRIBING,
        group: Group::Pubsub,
        since: "2.0.0",
        summary: "Stops listening to messages posted to channels.",
        complexity: "O(N) where N is the number of channels to unsubscribe from.",
        handler: unsubscribe,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "psubscribe",
        arity: -2,
        flags: SUBSCRIBING,
        group: Group::Pubsub,
        since: "2.0.0",
        summary: "Listens for messages published to channels that match one or more patterns.",
        complexity: "O(N) where N is the number of patterns to subscribe to.",
        handler: psubscribe,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "punsubscribe",
        arity: -1,
        flags: SUBSCRIBING,
        group: Group::Pubsub,
        since: "2.0.0",
        summary: "Stops listening to messages published to channels that match one or more patterns.",
        complexity: "O(N) where N is the number of patterns to unsubscribe from.",
        handler: punsubscribe,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "publish",
        arity: 3,
        flags: INSPECTING | spec::FAST,
        group: Group::Pubsub,
        since: "2.0.0",
        summary: "Posts a message to a channel.",
        complexity: "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).",
        handler: publish,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "ssubscribe",
        arity: -2,
        flags: SUBSCRIBING,
        keys: Keys::ALL_ARGS,
        group: Group::Pubsub,
        since: "7.0.0",
        summary: "Listens for messages published to shard channels.",
        complexity: "O(N) where N is the number of shard channels to subscribe to.",
        handler: ssubscribe,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "sunsubscribe",
        arity: -1,
        flags: SUBSCRIBING,
        keys: Keys::ALL_ARGS,
        group: Group::Pubsub,
        since: "7.0.0",
        summary: "Stops listening to messages posted to shard channels.",
        complexity: "O(N) where N is the number of shard channels to unsubscribe.",
        handler: sunsubscribe,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "spublish",
        arity: 3,
        flags: INSPECTING | spec::FAST,
        keys: Keys::ONE,
        group: Group::Pubsub,
        since: "7.0.0",
        summary: "Post a message to a shard channel",
        complexity: "O(N) where N is the number of clients subscribed to the receiving shard channel.",
        handler: spublish,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pubsub",
        arity: -2,
        group: Group::Pubsub,
        since: "2.8.0",
        summary: "A container for Pub/Sub commands.",
        complexity: "Depends on subcommand.",
        subcommands: PUBSUB_SUBCOMMANDS,
        ..CommandSpec::DEFAULT
    },
];

const PUBSUB_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "pubsub|channels",
        arity: -2,
        flags: INSPECTING,
        group: Group::Pubsub,
        since: "2.8.0",
        summary: "Returns the active channels.",
        complexity: "O(N) where N is the number of active channels, and assuming constant time pattern matching (relatively short channels and patterns)",
        handler: channels,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pubsub|numsub",
        arity: -2,
        flags: INSPECTING,
        group: Group::Pubsub,
        since: "2.8.0",
        summary: "Returns a count of subscribers to channels.",
        complexity: "O(N) for the NUMSUB subcommand, where N is the number of requested channels",
        handler: numsub,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pubsub|numpat",
        arity: 2,
        flags: INSPECTING,
        group: Group::Pubsub,
        since: "2.8.0",
        summary: "Returns a count of unique pattern subscriptions.",
        handler: numpat,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pubsub|shardchannels",
        arity: -2,
        flags: INSPECTING,
        group: Group::Pubsub,
        since: "7.0.0",
        summary: "Returns the active shard channels.",
        complexity: "O(N) where N is the number of active shard channels, and assuming constant time pattern matching (relatively short shard channels).",
        handler: shardchannels,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pubsub|shardnumsub",
        arity: -2,
        flags: INSPECTING,
        group: Group::Pubsub,
        since: "7.0.0",
        summary: "Returns the count of subscribers of shard channels.",
        complexity: "O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels",
        handler: shardnumsub,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "pubsub|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Pubsub,
        since: "6.2.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: help,
        ..CommandSpec::DEFAULT
    },
];

/// Answers one confirmation per name: all but the last go out ahead of the reply.
fn confirmations(ctx: &mut Ctx<'_, '_>, mut replies: Vec<Frame>) -> CmdResult {
    let last = replies.pop().expect("at least one confirmation");
    for r in replies {
        ctx.reply_before(r);
    }
    Ok(last)
}

fn subscribe(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let replies = pubsub::subscribe(ctx.server, ctx.session, Kind::Channel, &args[1..]);
    confirmations(ctx, replies)
}

fn psubscribe(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let replies = pubsub::subscribe(ctx.server, ctx.session, Kind::Pattern, &args[1..]);
    confirmations(ctx, replies)
}

fn unsubscribe(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let replies = pubsub::unsubscribe(ctx.server, ctx.session, Kind::Channel, &args[1..]);
    confirmations(ctx, replies)
}

fn punsubscribe(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let replies = pubsub::unsubscribe(ctx.server, ctx.session, Kind::Pattern, &args[1..]);
    confirmations(ctx, replies)
}

fn ssubscribe(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let replies = pubsub::subscribe(ctx.server, ctx.session, Kind::Shard, &args[1..]);
    confirmations(ctx, replies)
}

fn sunsubscribe(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let replies = pubsub::unsubscribe(ctx.server, ctx.session, Kind::Shard, &args[1..]);
    confirmations(ctx, replies)
}

fn publish(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let receivers = pubsub::publish(ctx.server, args[1], args[2]);
    // In a cluster a message reaches every node's subscribers; the count, as
    // Redis's, is this node's.
    if ctx.server.cluster.enabled() {
        ctx.server.cluster.publish(args[1], args[2]);
    }
    Ok(Frame::Integer(receivers as i64))
}

fn spublish(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let receivers = pubsub::spublish(ctx.server, args[1], args[2]);
    Ok(Frame::Integer(receivers as i64))
}

fn channels(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    channels_of(ctx, args, Kind::Channel)
}

fn shardchannels(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    channels_of(ctx, args, Kind::Shard)
}

fn channels_of(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], kind: Kind) -> CmdResult {
    if args.len() > 3 {
        return Err(syntax_error(args[1]));
    }
    let pattern = args.get(2).map(|p| &p[..]);
    let names = ctx.server.pubsub.channels(kind, pattern);
    Ok(Frame::Array(names.into_iter().map(Frame::Bulk).collect()))
}

fn numsub(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    numsub_of(ctx, args, Kind::Channel)
}

fn shardnumsub(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    numsub_of(ctx, args, Kind::Shard)
}

fn numsub_of(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], kind: Kind) -> CmdResult {
    let mut out = Vec::with_capacity(2 * (args.len() - 2));
    for channel in &args[2..] {
        let n = ctx.server.pubsub.numsub(kind, channel);
        out.push(Frame::Bulk(Bytes::copy_from_slice(channel)));
        out.push(Frame::Integer(n as i64));
    }
    Ok(Frame::Array(out))
}

fn numpat(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let (_, patterns) = ctx.server.pubsub.counts();
    Ok(Frame::Integer(patterns as i64))
}

/// Redis's reply to a subcommand given more arguments than it takes, naming the
/// subcommand as the client spelled it.
fn syntax_error(sub: &[u8]) -> CmdError {
    CmdError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
        String::from_utf8_lossy(sub)
    ))
}

fn help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "PUBSUB",
        &[
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
        ],
    ))
}
