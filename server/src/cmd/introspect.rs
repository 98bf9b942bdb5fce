//! COMMAND: the command table as clients see it (COUNT, LIST, INFO, DOCS, GETKEYS,
//! GETKEYSANDFLAGS).
//!
//! Everything here is read from [`registry`] and the [`CommandSpec`]s, so what
//! COMMAND INFO and GETKEYS report is exactly what dispatch uses to check arity
//! and to lock shards. Cluster-aware clients route by these key positions and
//! redis-cli builds its hints from them, so the reply shapes follow Redis 7
//! (sets where Redis sends sets, a nil entry for an unknown name).
//!
//! What Redis has and this does not: per-argument summaries and `since` (the
//! `arguments` trees come from [`super::docs`] without them, which Redis allows),
//! history, and modules (none exist, so `FILTERBY MODULE` matches nothing). Key-spec flags and command tips are not part
//! of the spec; the few tables below give Redis's values for the commands relcache
//! has, and a default from the read/write flag for the rest.

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64_opt, registry, Ctx};
use crate::error::{CmdError, CmdResult};

const INTROSPECT: u32 = spec::LOADING | spec::STALE;

// COMMAND's ACL category in Redis is @connection while its docs group is
// "server"; the spec derives the category from the group, so the group is
// Connection here (COMMAND DOCS reports "connection").
pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "command",
    arity: -1,
    flags: INTROSPECT,
    group: Group::Connection,
    since: "2.8.13",
    summary: "Returns detailed information about all commands.",
    complexity: "O(N) where N is the total number of Redis commands",
    handler: command_all,
    subcommands: SUBCOMMANDS,
    ..CommandSpec::DEFAULT
}];

const SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "command|count",
        arity: 2,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "2.8.13",
        summary: "Returns a count of commands.",
        handler: command_count,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "command|list",
        arity: -2,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "7.0.0",
        summary: "Returns a list of command names.",
        complexity: "O(N) where N is the total number of Redis commands",
        handler: command_list,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "command|info",
        arity: -2,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "2.8.13",
        summary: "Returns information about one, multiple or all commands.",
        complexity: "O(N) where N is the number of commands to look up",
        handler: command_info,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "command|docs",
        arity: -2,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "7.0.0",
        summary: "Returns documentary information about one, multiple or all commands.",
        complexity: "O(N) where N is the number of commands to look up",
        handler: command_docs,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "command|getkeys",
        arity: -4,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "2.8.13",
        summary: "Extracts the key names from an arbitrary command.",
        complexity: "O(N) where N is the number of arguments to the command",
        handler: command_getkeys,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "command|getkeysandflags",
        arity: -4,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "7.0.0",
        summary: "Extracts the key names and access flags for an arbitrary command.",
        complexity: "O(N) where N is the number of arguments to the command",
        handler: command_getkeysandflags,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "command|help",
        arity: 2,
        flags: INTROSPECT,
        group: Group::Connection,
        since: "5.0.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: command_help,
        ..CommandSpec::DEFAULT
    },
];

// Redis's metadata that the spec does not carry.

/// Command tips (COMMAND INFO's 8th field), as Redis 7 reports them.
fn tips(name: &str) -> &'static [&'static str] {
    const OUTPUT: &[&str] = &["nondeterministic_output"];
    const ORDER: &[&str] = &["nondeterministic_output_order"];
    const MULTI_SUM: &[&str] = &["request_policy:multi_shard", "response_policy:agg_sum"];
    const ALL_OK: &[&str] = &["request_policy:all_shards", "response_policy:all_succeeded"];
    match name {
        "ping" | "flushall" | "flushdb" => ALL_OK,
        "keys" => &["request_policy:all_shards", "nondeterministic_output_order"],
        "scan" => &["nondeterministic_output", "request_policy:special"],
        "dbsize" => &["request_policy:all_shards", "response_policy:agg_sum"],
        "randomkey" => &["request_policy:all_shards", "nondeterministic_output"],
        "mset" => &[
            "request_policy:multi_shard",
            "response_policy:all_succeeded",
        ],
        "msetnx" => &["request_policy:multi_shard", "response_policy:agg_min"],
        "mget" => &["request_policy:multi_shard"],
        "del" | "unlink" | "exists" | "touch" => MULTI_SUM,
        "info" => &[
            "nondeterministic_output",
            "request_policy:all_shards",
            "response_policy:special",
        ],
        "config|set" => &["request_policy:all_nodes", "response_policy:all_succeeded"],
        "time" | "lastsave" | "ttl" | "pttl" | "client|list" | "client|info" | "sscan" | "spop"
        | "srandmember" | "object|idletime" | "object|freq" | "dump" | "migrate" => OUTPUT,
        "command" | "command|list" | "command|info" | "command|docs" | "smembers" | "sinter"
        | "sunion" | "sdiff" => ORDER,
        _ => &[],
    }
}

/// Key-spec flags, one list per key spec (a command whose keys play different
/// roles, like RENAME's source and destination, has several).
fn key_spec_flags(spec: &CommandSpec) -> &'static [&'static [&'static str]] {
    const RO: &[&[&str]] = &[&["RO"]];
    const RO_ACCESS: &[&[&str]] = &[&["RO", "access"]];
    const RW_UPDATE: &[&[&str]] = &[&["RW", "update"]];
    const RW_ACCESS_UPDATE: &[&[&str]] = &[&["RW", "access", "update"]];
    const RW_ACCESS_DELETE: &[&[&str]] = &[&["RW", "access", "delete"]];
    const OW_UPDATE: &[&[&str]] = &[&["OW", "update"]];
    const OW_INSERT: &[&[&str]] = &[&["OW", "insert"]];
    const RW_INSERT: &[&[&str]] = &[&["RW", "insert"]];
    match spec.name {
        "strlen" | "exists" | "type" | "touch" | "watch" | "memory|usage" | "sismember"
        | "scard" => RO,
        n if n.starts_with("object|") => RO,
        "del" | "unlink" => &[&["RM", "delete"]],
        "getdel" | "spop" => RW_ACCESS_DELETE,
        "getex" | "incr" | "incrby" | "decr" | "decrby" | "incrbyfloat" | "getset" => {
            RW_ACCESS_UPDATE
        }
        "set" => &[&["RW", "access", "update", "variable_flags"]],
        "eval" | "evalsha" => RW_ACCESS_UPDATE,
        "mset" | "setex" | "psetex" => OW_UPDATE,
        "msetnx" | "setnx" => OW_INSERT,
        "append" | "sadd" => RW_INSERT,
        "srem" => &[&["RW", "delete"]],
        "rename" => &[&["RW", "access", "delete"], &["OW", "update"]],
        "renamenx" => &[&["RW", "access", "delete"], &["OW", "insert"]],
        "copy" => &[&["RO", "access"], &["OW", "update"]],
        "sinterstore" | "sunionstore" | "sdiffstore" => &[&["RW", "update"], &["RO", "access"]],
        "smove" => &[&["RW", "access", "delete"], &["RW", "insert"]],
        "ssubscribe" | "sunsubscribe" | "spublish" => &[&["not_key"]],
        "dump" => RO_ACCESS,
        "restore" | "restore-asking" => OW_UPDATE,
        "migrate" => &[
            &["RW", "access", "delete"],
            &["RW", "access", "delete", "incomplete"],
        ],
        _ if spec.has(spec::WRITE) => RW_UPDATE,
        _ if spec.has(spec::READONLY) => RO_ACCESS,
        _ => RO,
    }
}

/// The flags GETKEYSANDFLAGS reports for the key at `args[idx]`: Redis resolves
/// SET's variable flags from its arguments.
fn flags_for_key(spec: &CommandSpec, args: &[&[u8]], idx: usize) -> &'static [&'static str] {
    if spec.name == "set" {
        return if args[3..].iter().any(|a| eq_ic(a, "GET")) {
            &["RW", "access", "update"]
        } else {
            &["OW", "update"]
        };
    }
    let specs = key_spec_flags(spec);
    let first = match spec.keys {
        Keys::Range { first, .. } => first.max(0) as usize,
        _ => idx,
    };
    specs[idx.saturating_sub(first).min(specs.len() - 1)]
}

fn bulk(s: &'static str) -> Frame {
    Frame::Bulk(Bytes::from_static(s.as_bytes()))
}

fn status(s: &'static str) -> Frame {
    Frame::Simple(Bytes::from_static(s.as_bytes()))
}

fn map(pairs: Vec<(&'static str, Frame)>) -> Frame {
    Frame::Map(pairs.into_iter().map(|(k, v)| (bulk(k), v)).collect())
}

fn key_spec(flags: &'static [&'static str], index: i64, find_keys: Frame) -> Frame {
    map(vec![
        (
            "flags",
            Frame::Set(flags.iter().map(|&f| status(f)).collect()),
        ),
        (
            "begin_search",
            map(vec![
                ("type", bulk("index")),
                ("spec", map(vec![("index", Frame::Integer(index))])),
            ]),
        ),
        ("find_keys", find_keys),
    ])
}

fn range(lastkey: i64, keystep: i64) -> Frame {
    map(vec![
        ("type", bulk("range")),
        (
            "spec",
            map(vec![
                ("lastkey", Frame::Integer(lastkey)),
                ("keystep", Frame::Integer(keystep)),
                ("limit", Frame::Integer(0)),
            ]),
        ),
    ])
}

/// COMMAND INFO's key specifications, consistent with first/last/step.
fn key_specs(spec: &CommandSpec) -> Vec<Frame> {
    let flags = key_spec_flags(spec);
    match spec.keys {
        Keys::None | Keys::All => Vec::new(),
        Keys::Range { first, last, step } => {
            let (first, last, step) = (first as i64, last as i64, step as i64);
            // With several roles, the leading keys are one spec each and the last
            // spec covers the rest of the range.
            let n = flags.len() as i64;
            let mut out: Vec<Frame> = (0..n - 1)
                .map(|i| key_spec(flags[i as usize], first + i, range(0, 1)))
                .collect();
            let start = first + n - 1;
            let lastkey = if last < 0 { last } else { last - start };
            out.push(key_spec(
                flags[flags.len() - 1],
                start,
                range(lastkey, step),
            ));
            out
        }
        Keys::Counted { at } => {
            let find = map(vec![
                ("type", bulk("keynum")),
                (
                    "spec",
                    map(vec![
                        ("keynumidx", Frame::Integer(0)),
                        ("firstkey", Frame::Integer(1)),
                        ("keystep", Frame::Integer(1)),
                    ]),
                ),
            ]);
            vec![key_spec(flags[0], at as i64, find)]
        }
        // The key at 3, or the keys after the last KEYS (searched for from the
        // end, two arguments back: Redis's `startfrom -2`).
        Keys::Migrate => {
            let keyword = map(vec![
                ("type", bulk("keyword")),
                (
                    "spec",
                    map(vec![
                        ("keyword", bulk("KEYS")),
                        ("startfrom", Frame::Integer(-2)),
                    ]),
                ),
            ]);
            let Frame::Map(mut after_keys) = key_spec(flags[1], 0, range(-1, 1)) else {
                unreachable!("key_spec builds a map")
            };
            after_keys[1].1 = keyword;
            vec![key_spec(flags[0], 3, range(0, 1)), Frame::Map(after_keys)]
        }
    }
}

/// One COMMAND INFO entry: name, arity, flags, first, last, step, ACL
/// categories, tips, key specs, subcommands.
fn info_entry(spec: &CommandSpec) -> Frame {
    let (first, last, step) = spec.key_range();
    let mut flags: Vec<Frame> = spec.flag_names().map(status).collect();
    if matches!(spec.keys, Keys::Counted { .. } | Keys::Migrate) && !spec.has(spec::MOVABLE_KEYS) {
        flags.push(status("movablekeys"));
    }
    // A bare container (CLIENT, CONFIG …) is only @slow in Redis.
    let acl = if !spec.subcommands.is_empty() && spec.flags == 0 {
        vec!["@slow"]
    } else {
        spec.acl_categories()
    };
    let subcommands = if spec.subcommands.is_empty() {
        Frame::Set(Vec::new())
    } else {
        Frame::Array(spec.subcommands.iter().map(info_entry).collect())
    };
    Frame::Array(vec![
        bulk(spec.name),
        Frame::Integer(spec.arity as i64),
        Frame::Set(flags),
        Frame::Integer(first),
        Frame::Integer(last),
        Frame::Integer(step),
        Frame::Set(acl.into_iter().map(status).collect()),
        Frame::Set(tips(spec.name).iter().map(|&t| bulk(t)).collect()),
        Frame::Set(key_specs(spec)),
        subcommands,
    ])
}

/// One COMMAND DOCS entry (the value; the key is the command's name).
fn docs_entry(spec: &CommandSpec) -> Frame {
    let mut fields = Vec::with_capacity(5);
    if !spec.summary.is_empty() {
        fields.push(("summary", bulk(spec.summary)));
    }
    if !spec.since.is_empty() {
        fields.push(("since", bulk(spec.since)));
    }
    fields.push(("group", bulk(spec.group.name())));
    if !spec.complexity.is_empty() {
        fields.push(("complexity", bulk(spec.complexity)));
    }
    if let Some(arguments) = super::docs::arguments(spec.name) {
        fields.push(("arguments", arguments));
    }
    if !spec.subcommands.is_empty() {
        let subs = spec
            .subcommands
            .iter()
            .map(|s| (bulk(s.name), docs_entry(s)))
            .collect();
        fields.push(("subcommands", Frame::Map(subs)));
    }
    map(fields)
}

fn command_all(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Array(
        registry().top_level().map(info_entry).collect(),
    ))
}

fn command_count(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Integer(registry().top_level().count() as i64))
}

fn command_list(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let all = registry().all.iter();
    let names: Vec<Frame> = if args.len() == 2 {
        all.map(|s| bulk(s.name)).collect()
    } else if args.len() == 5 && eq_ic(args[2], "FILTERBY") {
        let arg = &args[4];
        if eq_ic(args[3], "MODULE") {
            Vec::new() // relcache loads no modules
        } else if eq_ic(args[3], "ACLCAT") {
            all.filter(|s| {
                s.acl_categories()
                    .iter()
                    .any(|c| c.as_bytes()[1..].eq_ignore_ascii_case(arg))
            })
            .map(|s| bulk(s.name))
            .collect()
        } else if eq_ic(args[3], "PATTERN") {
            all.filter(|s| crate::glob::matches(arg, s.name.as_bytes(), true))
                .map(|s| bulk(s.name))
                .collect()
        } else {
            return Err(CmdError::Syntax);
        }
    } else {
        return Err(CmdError::Syntax);
    };
    Ok(Frame::Array(names))
}

fn command_info(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    if args.len() == 2 {
        return Ok(Frame::Array(
            registry().top_level().map(info_entry).collect(),
        ));
    }
    let reg = registry();
    Ok(Frame::Array(
        args[2..]
            .iter()
            .map(|name| reg.get(name).map_or(Frame::Null, |(_, s)| info_entry(s)))
            .collect(),
    ))
}

fn command_docs(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let reg = registry();
    let entries: Vec<(Frame, Frame)> = if args.len() == 2 {
        reg.top_level()
            .map(|s| (bulk(s.name), docs_entry(s)))
            .collect()
    } else {
        // Unknown names are left out, as Redis does.
        args[2..]
            .iter()
            .filter_map(|name| reg.get(name))
            .map(|(_, s)| (bulk(s.name), docs_entry(s)))
            .collect()
    };
    Ok(Frame::Map(entries))
}

/// Resolves the command in `target` (a full command line) and finds its keys,
/// with Redis's COMMAND GETKEYS errors.
fn keys_of(target: &[&[u8]]) -> Result<(&'static CommandSpec, Vec<usize>), CmdError> {
    let reg = registry();
    let invalid = || CmdError::err("Invalid command specified");
    let (_, mut spec) = reg.command(target[0]).ok_or_else(invalid)?;
    if !spec.subcommands.is_empty() && target.len() >= 2 {
        spec = reg.sub(spec, target[1]).ok_or_else(invalid)?.1;
    }
    if !spec.arity_ok(target.len()) {
        return Err(CmdError::err(
            "Invalid number of arguments specified for command",
        ));
    }
    let keys = match spec.keys {
        Keys::Counted { at } => {
            // Redis refuses a key count that is not a number or runs past the end.
            let n = parse_i64_opt(target[at])
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| at + n < target.len())
                .ok_or_else(|| CmdError::err("Invalid arguments specified for command"))?;
            (at + 1..=at + n).collect()
        }
        // Shard channels sit in key positions for routing, but are not keys.
        _ if key_spec_flags(spec) == [&["not_key"][..]] => Vec::new(),
        _ => spec.key_indices(target).unwrap_or_default(),
    };
    if keys.is_empty() {
        return Err(CmdError::err("The command has no key arguments"));
    }
    Ok((spec, keys))
}

fn command_getkeys(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let target = &args[2..];
    let (_, keys) = keys_of(target)?;
    Ok(Frame::Array(
        keys.into_iter()
            .map(|i| Frame::Bulk(Bytes::copy_from_slice(target[i])))
            .collect(),
    ))
}

fn command_getkeysandflags(_: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let target = &args[2..];
    let (spec, keys) = keys_of(target)?;
    Ok(Frame::Array(
        keys.into_iter()
            .map(|i| {
                let flags = flags_for_key(spec, target, i)
                    .iter()
                    .map(|&f| status(f))
                    .collect();
                Frame::Array(vec![
                    Frame::Bulk(Bytes::copy_from_slice(target[i])),
                    Frame::Set(flags),
                ])
            })
            .collect(),
    ))
}

/// Every `<CMD> HELP` reply, built here so they share Redis's exact shape (its
/// `addReplyHelp`): the header line, `lines` (each subcommand and its indented
/// description), then the HELP entry, each a status reply.
pub(super) fn help_reply(cmd: &str, lines: &[&'static str]) -> Frame {
    let header = format!("{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
    let mut out = Vec::with_capacity(lines.len() + 3);
    out.push(Frame::simple(header));
    out.extend(lines.iter().map(|&l| Frame::simple(l)));
    out.push(Frame::simple("HELP"));
    out.push(Frame::simple("    Prints this help."));
    Frame::Array(out)
}

fn command_help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "COMMAND",
        &[
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    #[test]
    fn getkeys_errors_follow_redis() {
        let err = |v: &[&str]| keys_of(&args(v)).map(|(_, k)| k).unwrap_err().to_string();
        assert_eq!(
            err(&["nosuchcommand", "x"]),
            "ERR Invalid command specified"
        );
        assert_eq!(
            err(&["client", "nosuchsub"]),
            "ERR Invalid command specified"
        );
        assert_eq!(
            err(&["get", "a", "b"]),
            "ERR Invalid number of arguments specified for command"
        );
        assert_eq!(
            err(&["client", "list"]),
            "ERR The command has no key arguments"
        );
        assert_eq!(keys_of(&args(&["get", "k"])).unwrap().1, vec![1]);
    }

    #[test]
    fn range_key_specs_agree_with_first_last_step() {
        let rename = CommandSpec {
            name: "rename",
            keys: Keys::TWO,
            ..CommandSpec::DEFAULT
        };
        let specs = key_specs(&rename);
        assert_eq!(specs.len(), 2, "source and destination are separate specs");
        let del = CommandSpec {
            name: "del",
            keys: Keys::ALL_ARGS,
            ..CommandSpec::DEFAULT
        };
        let Frame::Map(fields) = &key_specs(&del)[0] else {
            panic!("a key spec is a map")
        };
        let Frame::Map(find) = &fields[2].1 else {
            panic!()
        };
        let Frame::Map(range) = &find[1].1 else {
            panic!()
        };
        assert_eq!(range[0], (bulk("lastkey"), Frame::Integer(-1)));
    }

    #[test]
    fn every_registered_command_has_consistent_metadata() {
        for spec in &registry().all {
            // Building the entries must not panic (flag lookups index by key position).
            let _ = info_entry(spec);
            let _ = docs_entry(spec);
            assert_eq!(
                spec.name,
                spec.name.to_ascii_lowercase(),
                "{} must be lower-case",
                spec.name
            );
        }
    }
}
