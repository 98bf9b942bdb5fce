//! The text form of a node's view: CLUSTER NODES, and the config file the node
//! keeps (`cluster-config-file`), which is the same lines plus a `vars` line.
//!
//! ```text
//! <id> <ip>:<port>@<cport> <flags> - <ping-sent> <pong-recv> <config-epoch> <link> <slot|from-to>…
//! vars currentEpoch <n> lastVoteEpoch <n> shardId <id>
//! ```
//!
//! This node's line also lists the slots it is moving: `[slot->-<to>]` and
//! `[slot-<-<from>]`. Reading is strict: any line that does not parse refuses the
//! whole file with its line number, so a damaged file stops the node instead of
//! starting it with a wrong slot map.

use std::fmt::Write;

use relcache_protocol::slot::SLOTS;

use super::node::{Node, NodeId};
use super::state::State;

/// CLUSTER NODES: one line per node (placeholders of unfinished handshakes
/// included, flagged `handshake`), as of `now` (Unix ms).
pub fn nodes(state: &State, now: u64, timeout_ms: u64) -> String {
    let mut out = String::new();
    for n in &state.nodes {
        line(&mut out, state, n, now, timeout_ms);
    }
    out
}

fn line(out: &mut String, state: &State, n: &Node, now: u64, timeout_ms: u64) {
    let mine = n.id == state.myself;
    let mut flags = String::new();
    if mine {
        flags.push_str("myself,");
    }
    flags.push_str("master");
    if !mine && n.failing(now, timeout_ms) {
        flags.push_str(",fail?");
    }
    if n.handshake {
        flags.push_str(",handshake");
    }
    if n.ip.is_empty() && !mine {
        flags.push_str(",noaddr");
    }
    let link = if mine || n.connected {
        "connected"
    } else {
        "disconnected"
    };
    let _ = write!(
        out,
        "{} {}:{}@{} {} - {} {} {} {}",
        n.id, n.ip, n.port, n.cport, flags, n.ping_sent, n.pong_received, n.config_epoch, link
    );
    for (start, end) in state.ranges_of(&n.id) {
        if start == end {
            let _ = write!(out, " {start}");
        } else {
            let _ = write!(out, " {start}-{end}");
        }
    }
    if mine {
        // Redis lists each moving slot once, migrating first.
        for slot in 0..SLOTS as u16 {
            if let Some(to) = state.migrating.get(&slot) {
                let _ = write!(out, " [{slot}->-{to}]");
            } else if let Some(from) = state.importing.get(&slot) {
                let _ = write!(out, " [{slot}-<-{from}]");
            }
        }
    }
    out.push('\n');
}

/// The config file's text: every known node (not placeholders) and the epochs.
pub fn config(state: &State) -> String {
    let mut out = String::new();
    for n in state.nodes.iter().filter(|n| !n.handshake) {
        // Link times are not configuration: written as 0.
        let n = Node {
            ping_sent: 0,
            pong_received: 0,
            connected: true,
            ..n.clone()
        };
        line(&mut out, state, &n, 0, u64::MAX);
    }
    let _ = writeln!(
        out,
        "vars currentEpoch {} lastVoteEpoch {} shardId {}",
        state.current_epoch, state.last_vote_epoch, state.shard_id
    );
    out
}

/// Reads a config file's text back (see the module doc); `now` stamps the nodes.
pub fn parse(text: &str, now: u64) -> Result<State, String> {
    let mut myself = None;
    let mut nodes = Vec::new();
    let mut owner: Vec<Option<NodeId>> = vec![None; SLOTS];
    let mut moving = Vec::new();
    let mut vars = None;
    for (i, raw) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}", i + 1);
        let fields: Vec<&str> = raw.split(' ').filter(|f| !f.is_empty()).collect();
        if fields.is_empty() {
            continue;
        }
        if fields[0] == "vars" {
            vars = Some(parse_vars(&fields[1..]).map_err(|e| at(&e))?);
            continue;
        }
        if fields.len() < 8 {
            return Err(at("a node line has at least 8 fields"));
        }
        let id = NodeId::parse(fields[0].as_bytes()).ok_or_else(|| at("bad node id"))?;
        let (ip, port, cport) = parse_addr(fields[1]).ok_or_else(|| at("bad address"))?;
        let flags: Vec<&str> = fields[2].split(',').collect();
        if !flags.contains(&"master") {
            return Err(at("only masters are supported (no replicas yet)"));
        }
        if flags.contains(&"myself") && myself.replace(id).is_some() {
            return Err(at("a second node flagged myself"));
        }
        let config_epoch = fields[6].parse().map_err(|_| at("bad config epoch"))?;
        if nodes.iter().any(|n: &Node| n.id == id) {
            return Err(at("node listed twice"));
        }
        let mut node = Node::new(id, ip, port, cport, now);
        node.config_epoch = config_epoch;
        nodes.push(node);
        for slot in &fields[8..] {
            if let Some(inner) = slot.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                moving.push((i, id, inner.to_string()));
                continue;
            }
            let (start, end) = match slot.split_once('-') {
                Some((a, b)) => (parse_slot(a), parse_slot(b)),
                None => (parse_slot(slot), parse_slot(slot)),
            };
            let (Some(start), Some(end)) = (start, end) else {
                return Err(at("bad slot"));
            };
            if start > end {
                return Err(at("bad slot range"));
            }
            for s in start..=end {
                if owner[s as usize].replace(id).is_some() {
                    return Err(at(&format!("slot {s} has two owners")));
                }
            }
        }
    }
    let myself = myself.ok_or("no node flagged myself")?;
    let (current_epoch, last_vote_epoch, shard_id) = vars.ok_or("no vars line")?;
    let mut state = State {
        myself,
        shard_id,
        current_epoch,
        last_vote_epoch,
        nodes,
        owner,
        migrating: Default::default(),
        importing: Default::default(),
        forgotten: Default::default(),
    };
    for (i, id, inner) in moving {
        let at = |why: &str| format!("line {}: {why}", i + 1);
        if id != myself {
            return Err(at("only this node's line lists moving slots"));
        }
        let (slot, other, migrating) = if let Some((s, to)) = inner.split_once("->-") {
            (s, to, true)
        } else if let Some((s, from)) = inner.split_once("-<-") {
            (s, from, false)
        } else {
            return Err(at("bad moving slot"));
        };
        let slot = parse_slot(slot).ok_or_else(|| at("bad moving slot"))?;
        let other = NodeId::parse(other.as_bytes())
            .filter(|o| state.node(o).is_some())
            .ok_or_else(|| at("a moving slot names an unknown node"))?;
        if migrating {
            state.migrating.insert(slot, other);
        } else {
            state.importing.insert(slot, other);
        }
    }
    Ok(state)
}

fn parse_slot(s: &str) -> Option<u16> {
    s.parse::<u16>().ok().filter(|&n| (n as usize) < SLOTS)
}

/// `ip:port@cport`, with Redis 7's optional `,hostname…` tail ignored.
fn parse_addr(s: &str) -> Option<(String, u16, u16)> {
    let s = s.split(',').next()?;
    let (hostport, cport) = s.split_once('@')?;
    let (ip, port) = hostport.rsplit_once(':')?;
    if !ip.is_empty() && ip.parse::<std::net::IpAddr>().is_err() {
        return None;
    }
    Some((ip.to_string(), port.parse().ok()?, cport.parse().ok()?))
}

fn parse_vars(fields: &[&str]) -> Result<(u64, u64, NodeId), String> {
    let (mut current, mut vote, mut shard) = (None, None, None);
    for pair in fields.chunks(2) {
        let [name, value] = pair else {
            return Err("vars come in name value pairs".into());
        };
        match *name {
            "currentEpoch" => current = value.parse().ok(),
            "lastVoteEpoch" => vote = value.parse().ok(),
            "shardId" => shard = NodeId::parse(value.as_bytes()),
            _ => {}
        }
    }
    match (current, vote) {
        (Some(c), Some(v)) => Ok((c, v, shard.unwrap_or_else(NodeId::random))),
        _ => Err("vars needs currentEpoch and lastVoteEpoch".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(c: u8) -> NodeId {
        NodeId([c; 40])
    }

    #[test]
    fn a_saved_view_reads_back_the_same() {
        let mut s = State::new(id(b'a'), 7000, 17000, 5);
        s.me_mut().ip = "127.0.0.1".into();
        s.me_mut().config_epoch = 3;
        s.current_epoch = 7;
        s.add(Node::new(id(b'b'), "10.0.0.2".into(), 7001, 17001, 5));
        for slot in 0..100 {
            s.owner[slot] = Some(id(b'a'));
        }
        s.owner[200] = Some(id(b'b'));
        s.migrating.insert(3, id(b'b'));
        s.importing.insert(200, id(b'b'));
        let text = config(&s);
        assert!(text.contains(" 0-99 [3->-bbbb"), "{text}");
        assert_eq!(parse(&text, 5).unwrap(), s);
    }

    #[test]
    fn damage_is_refused_with_its_line() {
        let mut s = State::new(id(b'a'), 7000, 17000, 0);
        s.owner[1] = Some(id(b'a'));
        let good = config(&s);
        assert!(parse(&good, 0).is_ok());
        for (bad, why) in [
            (good.replace(" 1\n", " 1-0\n"), "range"),
            (good.replace(" 1\n", " 16384\n"), "slot"),
            (good.replace("myself,", ""), "myself"),
            (good.replace("vars", "vers"), "line 2"),
            (good.replace("currentEpoch 0", "currentEpoch x"), "vars"),
            (good.replacen("aaaa", "zzzz", 1), "node id"),
        ] {
            let e = parse(&bad, 0).unwrap_err();
            assert!(e.contains(why), "{e} for {bad:?}");
        }
    }

    proptest! {
        #[test]
        fn any_text_is_refused_or_read(text in "\\PC{0,400}") {
            let _ = parse(&text, 0);
        }

        #[test]
        fn owners_survive_a_round_trip(owned in proptest::collection::btree_set(0u16..16384, 0..200)) {
            let mut s = State::new(id(b'a'), 1, 2, 0);
            s.add(Node::new(id(b'b'), "127.0.0.1".into(), 3, 4, 0));
            for slot in &owned {
                s.owner[*slot as usize] = Some(if slot % 3 == 0 { id(b'a') } else { id(b'b') });
            }
            prop_assert_eq!(parse(&config(&s), 0).unwrap(), s);
        }
    }
}
