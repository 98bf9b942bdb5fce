//! CLUSTER and its subcommands, ASKING, READONLY and READWRITE: what clients
//! read the slot map with and what `redis-cli --cluster` drives a cluster with,
//! with Redis 7's replies and error texts. The state they read and change is
//! `crate::cluster`; this file only parses, checks and answers.

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use relcache_protocol::resp::Frame;
use relcache_protocol::slot::{key_slot, SLOTS};

use super::introspect::help_reply;
use super::spec::{self, CommandSpec, Group};
use super::{parse_i64, Ctx};
use crate::cluster::node::{Node, NodeId};
use crate::cluster::state::State;
use crate::db::now_ms;
use crate::error::{CmdError, CmdResult};

const ADMIN: u32 = spec::ADMIN | spec::NOSCRIPT | spec::STALE;
const INFO: u32 = spec::LOADING | spec::STALE;

macro_rules! sub {
    ($name:literal, $arity:expr, $flags:expr, $since:literal, $summary:literal, $handler:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            group: Group::Cluster,
            since: $since,
            summary: $summary,
            handler: $handler,
            ..CommandSpec::DEFAULT
        }
    };
}

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "cluster",
        arity: -2,
        group: Group::Cluster,
        since: "3.0.0",
        summary: "A container for Redis Cluster commands.",
        complexity: "Depends on subcommand.",
        subcommands: SUBCOMMANDS,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "asking",
        arity: 1,
        flags: spec::FAST,
        group: Group::Cluster,
        since: "3.0.0",
        summary: "Signals that a cluster client is following an -ASK redirect.",
        handler: asking,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "readonly",
        arity: 1,
        flags: spec::FAST | spec::LOADING | spec::STALE,
        group: Group::Cluster,
        since: "3.0.0",
        summary: "Enables read-only queries for a connection to a Redis Cluster replica node.",
        handler: readonly,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "readwrite",
        arity: 1,
        flags: spec::FAST | spec::LOADING | spec::STALE,
        group: Group::Cluster,
        since: "3.0.0",
        summary: "Enables read-write queries for a connection to a Reids Cluster replica node.",
        handler: readwrite,
        ..CommandSpec::DEFAULT
    },
];

const SUBCOMMANDS: &[CommandSpec] = &[
    sub!(
        "cluster|addslots",
        -3,
        ADMIN,
        "3.0.0",
        "Assigns new hash slots to a node.",
        addslots
    ),
    sub!(
        "cluster|addslotsrange",
        -4,
        ADMIN,
        "7.0.0",
        "Assigns new hash slot ranges to a node.",
        addslotsrange
    ),
    sub!(
        "cluster|bumpepoch",
        2,
        ADMIN,
        "3.0.0",
        "Advances the cluster config epoch.",
        bumpepoch
    ),
    sub!(
        "cluster|count-failure-reports",
        3,
        ADMIN,
        "3.0.0",
        "Returns the number of active failure reports active for a node.",
        count_failure_reports
    ),
    sub!(
        "cluster|countkeysinslot",
        3,
        spec::STALE,
        "3.0.0",
        "Returns the number of keys in a hash slot.",
        countkeysinslot
    ),
    sub!(
        "cluster|delslots",
        -3,
        ADMIN,
        "3.0.0",
        "Sets hash slots as unbound for a node.",
        delslots
    ),
    sub!(
        "cluster|delslotsrange",
        -4,
        ADMIN,
        "7.0.0",
        "Sets hash slot ranges as unbound for a node.",
        delslotsrange
    ),
    sub!(
        "cluster|failover",
        -2,
        ADMIN,
        "3.0.0",
        "Forces a replica to perform a manual failover of its master.",
        no_replicas
    ),
    sub!(
        "cluster|flushslots",
        2,
        ADMIN,
        "3.0.0",
        "Deletes all slots information from a node.",
        flushslots
    ),
    sub!(
        "cluster|forget",
        3,
        ADMIN,
        "3.0.0",
        "Removes a node from the nodes table.",
        forget
    ),
    sub!(
        "cluster|getkeysinslot",
        4,
        spec::STALE,
        "3.0.0",
        "Returns the key names in a hash slot.",
        getkeysinslot
    ),
    sub!(
        "cluster|help",
        2,
        INFO,
        "5.0.0",
        "Returns helpful text about the different subcommands.",
        help
    ),
    sub!(
        "cluster|info",
        2,
        spec::STALE,
        "3.0.0",
        "Returns information about the state of a node.",
        info
    ),
    sub!(
        "cluster|keyslot",
        3,
        spec::STALE,
        "3.0.0",
        "Returns the hash slot for a key.",
        keyslot
    ),
    sub!(
        "cluster|links",
        2,
        spec::STALE,
        "7.0.0",
        "Returns a list of all TCP links to and from peer nodes.",
        links
    ),
    sub!(
        "cluster|meet",
        -4,
        ADMIN,
        "3.0.0",
        "Forces a node to handshake with another node.",
        meet
    ),
    sub!(
        "cluster|myid",
        2,
        spec::STALE,
        "3.0.0",
        "Returns the ID of a node.",
        myid
    ),
    sub!(
        "cluster|myshardid",
        2,
        spec::STALE,
        "7.2.0",
        "Returns the shard ID of a node.",
        myshardid
    ),
    sub!(
        "cluster|nodes",
        2,
        spec::STALE,
        "3.0.0",
        "Returns the cluster configuration for a node.",
        nodes
    ),
    sub!(
        "cluster|replicas",
        3,
        ADMIN,
        "5.0.0",
        "Lists the replica nodes of a master node.",
        replicas
    ),
    sub!(
        "cluster|replicate",
        3,
        ADMIN,
        "3.0.0",
        "Configure a node as replica of a master node.",
        no_replicas
    ),
    sub!("cluster|reset", -2, ADMIN, "3.0.0", "Resets a node.", reset),
    sub!(
        "cluster|saveconfig",
        2,
        ADMIN,
        "3.0.0",
        "Forces a node to save the cluster configuration to disk.",
        saveconfig
    ),
    sub!(
        "cluster|set-config-epoch",
        3,
        ADMIN,
        "3.0.0",
        "Sets the configuration epoch for a new node.",
        set_config_epoch
    ),
    sub!(
        "cluster|setslot",
        -4,
        ADMIN,
        "3.0.0",
        "Binds a hash slot to a node.",
        setslot
    ),
    sub!(
        "cluster|shards",
        2,
        spec::STALE,
        "7.0.0",
        "Returns the mapping of cluster slots to shards.",
        shards
    ),
    sub!(
        "cluster|slaves",
        3,
        ADMIN,
        "3.0.0",
        "Lists the replica nodes of a master node.",
        replicas
    ),
    sub!(
        "cluster|slots",
        2,
        spec::STALE,
        "3.0.0",
        "Returns the mapping of cluster slots to nodes.",
        slots
    ),
];

/// For the subcommands that read the keyspace by slot: inside EXEC or a script
/// this command's thread already holds shard locks, and the slot's shard may be
/// one of them (the locks are not reentrant).
fn not_in_exec(ctx: &Ctx<'_, '_>) -> Result<(), CmdError> {
    if ctx.in_exec() {
        return Err(CmdError::err(format!(
            "CLUSTER {} is not allowed inside MULTI or scripts in relcache",
            ctx.spec
                .name
                .trim_start_matches("cluster|")
                .to_ascii_uppercase()
        )));
    }
    Ok(())
}

fn enabled(ctx: &Ctx<'_, '_>) -> Result<(), CmdError> {
    if ctx.server.cluster.enabled() {
        Ok(())
    } else {
        Err(CmdError::err("This instance has cluster support disabled"))
    }
}

fn asking(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    ctx.session.asking = true;
    Ok(Frame::ok())
}

fn readonly(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    ctx.session.readonly = true;
    Ok(Frame::ok())
}

fn readwrite(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    ctx.session.readonly = false;
    Ok(Frame::ok())
}

/// A slot argument for ADDSLOTS, DELSLOTS and SETSLOT.
fn slot_arg(arg: &[u8]) -> Result<u16, CmdError> {
    match super::parse_i64_opt(arg) {
        Some(n) if (0..SLOTS as i64).contains(&n) => Ok(n as u16),
        _ => Err(CmdError::err("Invalid or out of range slot")),
    }
}

fn node_arg(arg: &[u8]) -> Option<NodeId> {
    NodeId::parse(arg)
}

fn unknown_node(arg: &[u8]) -> CmdError {
    CmdError::err(format!("Unknown node {}", String::from_utf8_lossy(arg)))
}

fn text(s: String) -> Frame {
    Frame::Verbatim {
        format: *b"txt",
        text: Bytes::from(s),
    }
}

fn info(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let server = ctx.server;
    let cluster = &server.cluster;
    let ok = cluster.ok(server);
    let s = cluster.read();
    let now = now_ms();
    let timeout = server.config.cluster_node_timeout.load(Relaxed);
    let assigned = s.assigned();
    let pfail = s
        .owner
        .iter()
        .flatten()
        .filter(|id| **id != s.myself && s.node(id).is_some_and(|n| n.failing(now, timeout)))
        .count();
    let mut out = format!(
        "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{}\r\ncluster_slots_pfail:{pfail}\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\n",
        if ok { "ok" } else { "fail" },
        assigned - pfail,
        s.nodes.len(),
        s.size(),
        s.current_epoch,
        s.me().config_epoch,
    );
    let names = ["ping", "pong", "meet", "update", "publish"];
    let stats = &cluster.stats;
    let (mut sent, mut received) = (0, 0);
    for (i, name) in names.iter().enumerate() {
        let n = stats.sent[i].load(Relaxed);
        sent += n;
        if n > 0 {
            out.push_str(&format!("cluster_stats_messages_{name}_sent:{n}\r\n"));
        }
    }
    out.push_str(&format!("cluster_stats_messages_sent:{sent}\r\n"));
    for (i, name) in names.iter().enumerate() {
        let n = stats.received[i].load(Relaxed);
        received += n;
        if n > 0 {
            out.push_str(&format!("cluster_stats_messages_{name}_received:{n}\r\n"));
        }
    }
    out.push_str(&format!(
        "cluster_stats_messages_received:{received}\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n"
    ));
    Ok(text(out))
}

fn myid(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    Ok(Frame::bulk(ctx.server.cluster.read().myself.to_string()))
}

fn myshardid(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    Ok(Frame::bulk(ctx.server.cluster.read().shard_id.to_string()))
}

fn nodes(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let timeout = ctx.server.config.cluster_node_timeout.load(Relaxed);
    let s = ctx.server.cluster.read();
    Ok(text(crate::cluster::text::nodes(&s, now_ms(), timeout)))
}

/// The address clients are told for `n`: this node's own, if it has not learnt
/// it yet, is the one the client reached it at.
fn client_ip(ctx: &Ctx<'_, '_>, s: &State, n: &Node) -> String {
    if n.ip.is_empty() && n.id == s.myself {
        return ctx.server.local_addr.ip().to_string();
    }
    n.ip.clone()
}

fn slots(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let s = ctx.server.cluster.read();
    let mut out = Vec::new();
    let mut start = 0usize;
    while start < SLOTS {
        let Some(owner) = s.owner[start] else {
            start += 1;
            continue;
        };
        let mut end = start;
        while end + 1 < SLOTS && s.owner[end + 1] == Some(owner) {
            end += 1;
        }
        if let Some(n) = s.node(&owner) {
            out.push(Frame::Array(vec![
                Frame::Integer(start as i64),
                Frame::Integer(end as i64),
                Frame::Array(vec![
                    Frame::bulk(client_ip(ctx, &s, n)),
                    Frame::Integer(n.port as i64),
                    Frame::bulk(n.id.to_string()),
                    Frame::Map(Vec::new()),
                ]),
            ]));
        }
        start = end + 1;
    }
    Ok(Frame::Array(out))
}

fn shards(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let s = ctx.server.cluster.read();
    let mut all = s.all_ranges();
    let out = s
        .nodes
        .iter()
        .filter(|n| !n.handshake)
        .map(|n| {
            let ranges = all
                .remove(&n.id)
                .unwrap_or_default()
                .into_iter()
                .flat_map(|(a, b)| [Frame::Integer(a as i64), Frame::Integer(b as i64)])
                .collect();
            let ip = client_ip(ctx, &s, n);
            // Redis says "fail" only for a node the cluster agreed is down
            // (FAIL); relcache has only one node's suspicion (`fail?`, PFAIL),
            // which Redis reports as online.
            let health = "online";
            let node = Frame::Map(vec![
                (Frame::bulk("id"), Frame::bulk(n.id.to_string())),
                (Frame::bulk("port"), Frame::Integer(n.port as i64)),
                (Frame::bulk("ip"), Frame::bulk(ip.clone())),
                (Frame::bulk("endpoint"), Frame::bulk(ip)),
                (Frame::bulk("role"), Frame::bulk("master")),
                (Frame::bulk("replication-offset"), Frame::Integer(0)),
                (Frame::bulk("health"), Frame::bulk(health)),
            ]);
            Frame::Map(vec![
                (Frame::bulk("slots"), Frame::Array(ranges)),
                (Frame::bulk("nodes"), Frame::Array(vec![node])),
            ])
        })
        .collect();
    Ok(Frame::Array(out))
}

fn links(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let s = ctx.server.cluster.read();
    let out = s
        .nodes
        .iter()
        .filter(|n| n.id != s.myself && n.connected)
        .map(|n| {
            Frame::Map(vec![
                (Frame::bulk("direction"), Frame::bulk("to")),
                (Frame::bulk("node"), Frame::bulk(n.id.to_string())),
                (Frame::bulk("create-time"), Frame::Integer(n.created as i64)),
                (Frame::bulk("events"), Frame::bulk("rw")),
                (Frame::bulk("send-buffer-allocated"), Frame::Integer(0)),
                (Frame::bulk("send-buffer-used"), Frame::Integer(0)),
            ])
        })
        .collect();
    Ok(Frame::Array(out))
}

fn keyslot(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    Ok(Frame::Integer(key_slot(args[2]) as i64))
}

fn countkeysinslot(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    not_in_exec(ctx)?;
    let slot = parse_i64(args[2])?;
    if !(0..SLOTS as i64).contains(&slot) {
        return Err(CmdError::err("Invalid slot"));
    }
    Ok(Frame::Integer(
        ctx.server.db.count_in_slot(slot as u16) as i64
    ))
}

fn getkeysinslot(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    not_in_exec(ctx)?;
    let slot = parse_i64(args[2])?;
    let count = parse_i64(args[3])?;
    if count < 0 || !(0..SLOTS as i64).contains(&slot) {
        return Err(CmdError::err("Invalid slot or number of keys"));
    }
    let keys = ctx.server.db.keys_in_slot(slot as u16, count as usize);
    Ok(Frame::Array(
        keys.into_iter()
            .map(|k| Frame::Bulk(Bytes::copy_from_slice(&k)))
            .collect(),
    ))
}

/// Slots named one by one, refused whole if any is bad or repeated.
fn slot_list(args: &[&[u8]]) -> Result<Vec<u16>, CmdError> {
    let mut slots = Vec::with_capacity(args.len());
    let mut seen = vec![false; SLOTS];
    for a in args {
        let slot = slot_arg(a)?;
        if std::mem::replace(&mut seen[slot as usize], true) {
            return Err(CmdError::err(format!(
                "Slot {slot} specified multiple times"
            )));
        }
        slots.push(slot);
    }
    Ok(slots)
}

/// Slots named as `start end` pairs.
fn slot_ranges(ctx: &Ctx<'_, '_>, args: &[&[u8]]) -> Result<Vec<u16>, CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::WrongArity(ctx.spec.name.into()));
    }
    let mut slots = Vec::new();
    let mut seen = vec![false; SLOTS];
    for pair in args.chunks(2) {
        let (start, end) = (slot_arg(pair[0])?, slot_arg(pair[1])?);
        if start > end {
            return Err(CmdError::err(format!(
                "start slot number {start} is greater than end slot number {end}"
            )));
        }
        for slot in start..=end {
            if std::mem::replace(&mut seen[slot as usize], true) {
                return Err(CmdError::err(format!(
                    "Slot {slot} specified multiple times"
                )));
            }
            slots.push(slot);
        }
    }
    Ok(slots)
}

fn assign(ctx: &Ctx<'_, '_>, slots: Vec<u16>, add: bool) -> CmdResult {
    ctx.server.cluster.update(|s| {
        for &slot in &slots {
            match (add, s.owner[slot as usize]) {
                (true, Some(_)) => {
                    return Err(CmdError::err(format!("Slot {slot} is already busy")))
                }
                (false, None) => {
                    return Err(CmdError::err(format!("Slot {slot} is already unassigned")))
                }
                _ => {}
            }
        }
        let me = s.myself;
        for &slot in &slots {
            s.owner[slot as usize] = add.then_some(me);
            if add {
                s.importing.remove(&slot);
            }
        }
        Ok(Frame::ok())
    })
}

fn addslots(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let slots = slot_list(&args[2..])?;
    assign(ctx, slots, true)
}

fn addslotsrange(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let slots = slot_ranges(ctx, &args[2..])?;
    assign(ctx, slots, true)
}

fn delslots(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let slots = slot_list(&args[2..])?;
    assign(ctx, slots, false)
}

fn delslotsrange(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let slots = slot_ranges(ctx, &args[2..])?;
    assign(ctx, slots, false)
}

fn flushslots(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    if !ctx.server.db.is_empty() {
        return Err(CmdError::err(
            "DB must be empty to perform CLUSTER FLUSHSLOTS.",
        ));
    }
    ctx.server.cluster.update(|s| {
        let me = s.myself;
        for o in s.owner.iter_mut().filter(|o| **o == Some(me)) {
            *o = None;
        }
        Ok(Frame::ok())
    })
}

fn setslot(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    not_in_exec(ctx)?;
    let slot = slot_arg(args[2])?;
    let action = args[3].to_ascii_lowercase();
    let bad_action =
        || CmdError::err("Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP");
    let node = match (&action[..], args.len()) {
        (b"stable", 4) => None,
        (b"migrating" | b"importing" | b"node", 5) => Some(&args[4]),
        _ => return Err(bad_action()),
    };
    // Counted before the lock: the keys of a slot this node is giving away.
    let keys_here = if action == b"node" {
        ctx.server.db.count_in_slot(slot)
    } else {
        0
    };
    let reply = ctx.server.cluster.update(|s| {
        let me = s.myself;
        let known = |s: &State, arg: &[u8]| node_arg(arg).filter(|id| s.knows(id));
        match &action[..] {
            b"migrating" => {
                let arg = node.expect("checked");
                if !s.owns(slot, &me) {
                    return Err(CmdError::err(format!("I'm not the owner of hash slot {slot}")));
                }
                let Some(to) = known(s, arg) else {
                    return Err(CmdError::err(format!(
                        "I don't know about node {}",
                        String::from_utf8_lossy(arg)
                    )));
                };
                s.migrating.insert(slot, to);
            }
            b"importing" => {
                let arg = node.expect("checked");
                if s.owns(slot, &me) {
                    return Err(CmdError::err(format!("I'm already the owner of hash slot {slot}")));
                }
                let Some(from) = known(s, arg) else {
                    return Err(CmdError::err(format!(
                        "I don't know about node {}",
                        String::from_utf8_lossy(arg)
                    )));
                };
                s.importing.insert(slot, from);
            }
            b"stable" => {
                s.migrating.remove(&slot);
                s.importing.remove(&slot);
            }
            _ => {
                let arg = node.expect("checked");
                let Some(to) = known(s, arg) else {
                    return Err(unknown_node(arg));
                };
                if to != me && s.owns(slot, &me) {
                    if keys_here > 0 {
                        return Err(CmdError::err(format!("Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot.")));
                    }
                    s.migrating.remove(&slot);
                }
                if to == me && s.importing.remove(&slot).is_some() {
                    // The import is done: this node's claim must beat the old
                    // owner's, so it takes the newest epoch.
                    if s.bump_epoch() {
                        tracing::info!(epoch = s.me().config_epoch, slot, "new config epoch after importing a slot");
                    }
                }
                s.owner[slot as usize] = Some(to);
            }
        }
        Ok(Frame::ok())
    })?;
    // A slot that starts to move (or moves) takes its leases with it: a fill
    // granted here before must be refused, since the writes it would miss now go
    // to the other node.
    if action != b"stable" {
        let ended = ctx.server.db.revoke_slot_leases(slot);
        ctx.server.stats.lease_revocations.add(ended.revoked as u64);
        ctx.server.stats.lease_lapses.add(ended.lapsed as u64);
    }
    Ok(reply)
}

fn meet(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    if args.len() > 5 {
        return Err(CmdError::Syntax);
    }
    let lossy = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
    let port = super::parse_i64_opt(args[3])
        .ok_or_else(|| CmdError::err(format!("Invalid base port specified: {}", lossy(args[3]))))?;
    let cport = match args.get(4) {
        Some(a) => super::parse_i64_opt(a)
            .ok_or_else(|| CmdError::err(format!("Invalid bus port specified: {}", lossy(a))))?,
        None => port + 10_000,
    };
    let ip = std::str::from_utf8(args[2])
        .ok()
        .and_then(|s| s.parse::<std::net::IpAddr>().ok());
    let valid = |p: i64| (1..=65535).contains(&p);
    let (Some(ip), true, true) = (ip, valid(port), valid(cport)) else {
        return Err(CmdError::err(format!(
            "Invalid node address specified: {}:{}",
            lossy(args[2]),
            lossy(args[3])
        )));
    };
    let ip = ip.to_string();
    let now = now_ms();
    ctx.server.cluster.update(|s| {
        // Already meeting it: nothing more to do (Redis answers OK too).
        if !s
            .nodes
            .iter()
            .any(|n| n.handshake && n.ip == ip && n.port == port as u16)
        {
            let mut n = Node::new(NodeId::random(), ip, port as u16, cport as u16, now);
            n.handshake = true;
            n.meet = true;
            s.add(n);
        }
        Ok(Frame::ok())
    })
}

fn forget(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let now = now_ms();
    ctx.server.cluster.update(|s| {
        let Some(id) = node_arg(args[2]).filter(|id| s.node(id).is_some()) else {
            return Err(unknown_node(args[2]));
        };
        if id == s.myself {
            return Err(CmdError::err("I tried hard but I can't forget myself..."));
        }
        s.forget(&id, now);
        Ok(Frame::ok())
    })
}

fn reset(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let hard = match args.get(2).map(|a| a.to_ascii_lowercase()) {
        None => false,
        Some(a) if a == b"soft" && args.len() == 3 => false,
        Some(a) if a == b"hard" && args.len() == 3 => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    if !ctx.server.db.is_empty() {
        return Err(CmdError::err(
            "CLUSTER RESET can't be called with master nodes containing keys",
        ));
    }
    ctx.server.cluster.update(|s| {
        let me = s.me().clone();
        let mut fresh = State::new(
            if hard { NodeId::random() } else { me.id },
            me.port,
            me.cport,
            now_ms(),
        );
        fresh.me_mut().ip = me.ip;
        if !hard {
            fresh.current_epoch = s.current_epoch;
            fresh.last_vote_epoch = s.last_vote_epoch;
            fresh.me_mut().config_epoch = me.config_epoch;
            fresh.shard_id = s.shard_id;
        }
        *s = fresh;
        Ok(Frame::ok())
    })
}

fn set_config_epoch(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let epoch = parse_i64(args[2])?;
    ctx.server.cluster.update(|s| {
        if epoch < 0 {
            return Err(CmdError::err(format!("Invalid config epoch specified: {epoch}")));
        }
        if s.nodes.len() > 1 {
            return Err(CmdError::err(
                "The user can assign a config epoch only when the node does not know any other node.",
            ));
        }
        if s.me().config_epoch != 0 {
            return Err(CmdError::err("Node config epoch is already non-zero"));
        }
        s.me_mut().config_epoch = epoch as u64;
        s.see_epoch(epoch as u64);
        Ok(Frame::ok())
    })
}

fn bumpepoch(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    ctx.server.cluster.update(|s| {
        let bumped = s.bump_epoch();
        let word = if bumped { "BUMPED" } else { "STILL" };
        Ok(Frame::simple(format!("{word} {}", s.me().config_epoch)))
    })
}

fn saveconfig(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    ctx.server
        .cluster
        .save_now()
        .map_err(|e| CmdError::err(format!("error saving the cluster node config: {e}")))?;
    Ok(Frame::ok())
}

fn count_failure_reports(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let s = ctx.server.cluster.read();
    match node_arg(args[2]).filter(|id| s.node(id).is_some()) {
        // Failure reports come with failure detection, which is not built yet.
        Some(_) => Ok(Frame::Integer(0)),
        None => Err(unknown_node(args[2])),
    }
}

fn replicas(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    let s = ctx.server.cluster.read();
    match node_arg(args[2]).filter(|id| s.node(id).is_some()) {
        Some(_) => Ok(Frame::Array(Vec::new())),
        None => Err(unknown_node(args[2])),
    }
}

fn no_replicas(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    enabled(ctx)?;
    Err(CmdError::err(
        "relcache has no replicas yet: every node is a master (see the README)",
    ))
}

fn help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "CLUSTER",
        &[
            "ADDSLOTS <slot> [<slot> ...]",
            "    Assign slots to current node.",
            "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
            "    Assign slots which are between <start-slot> and <end-slot> to current node.",
            "BUMPEPOCH",
            "    Advance the cluster config epoch.",
            "COUNT-FAILURE-REPORTS <node-id>",
            "    Return number of failure reports for <node-id>.",
            "COUNTKEYSINSLOT <slot>",
            "    Return the number of keys in <slot>.",
            "DELSLOTS <slot> [<slot> ...]",
            "    Delete slots information from current node.",
            "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
            "    Delete slots information which are between <start-slot> and <end-slot>.",
            "FLUSHSLOTS",
            "    Delete current node own slots information.",
            "FORGET <node-id>",
            "    Remove a node from the cluster.",
            "GETKEYSINSLOT <slot> <count>",
            "    Return key names stored by current node in a slot.",
            "INFO",
            "    Return information about the cluster.",
            "KEYSLOT <key>",
            "    Return the hash slot for <key>.",
            "LINKS",
            "    Return information about all network links between this node and its peers.",
            "MEET <ip> <port> [<bus-port>]",
            "    Connect nodes into a working cluster.",
            "MYID",
            "    Return the node id.",
            "MYSHARDID",
            "    Return the node's shard id.",
            "NODES",
            "    Return cluster configuration seen by node.",
            "RESET [HARD|SOFT]",
            "    Reset current node (default: soft).",
            "SET-CONFIG-EPOCH <epoch>",
            "    Set config epoch of current node.",
            "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
            "    Set slot state.",
            "SAVECONFIG",
            "    Force saving cluster configuration on disk.",
            "SHARDS",
            "    Return information about slot range mappings and the nodes associated with them.",
            "SLOTS",
            "    Return information about slots range mappings. Each range is made of:",
            "    start, end, master and replicas IP addresses, ports and ids",
        ],
    ))
}
