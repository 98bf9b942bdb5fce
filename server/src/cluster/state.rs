//! What a node believes about the cluster: who is in it, who owns which slot, the
//! epochs that settle disagreements, and the slots being moved.
//!
//! Pure state and the rules that change it; the bus (`bus`), the commands
//! (`cmd::cluster`) and the config file (`file`) all go through here, under the
//! one lock in [`super::Cluster`].

use std::collections::BTreeMap;

use relcache_protocol::slot::SLOTS;

use super::node::{Node, NodeId};

/// How long a forgotten node stays out, so gossip from a node that has not
/// forgotten it yet does not bring it back (Redis: 60 s).
pub const FORGET_MS: u64 = 60_000;

/// Most nodes a node keeps, so gossip cannot grow it without bound.
pub const MAX_NODES: usize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub myself: NodeId,
    pub shard_id: NodeId,
    pub current_epoch: u64,
    pub last_vote_epoch: u64,
    /// Every known node, this one included.
    pub nodes: Vec<Node>,
    /// The owner of each slot.
    pub owner: Vec<Option<NodeId>>,
    /// Slots this node is handing to another (`SETSLOT … MIGRATING`).
    pub migrating: BTreeMap<u16, NodeId>,
    /// Slots this node is taking from another (`SETSLOT … IMPORTING`).
    pub importing: BTreeMap<u16, NodeId>,
    /// Forgotten nodes, until when (Unix ms).
    pub forgotten: BTreeMap<NodeId, u64>,
}

impl State {
    /// A node that knows only itself.
    pub fn new(myself: NodeId, port: u16, cport: u16, now: u64) -> State {
        State {
            myself,
            shard_id: NodeId::random(),
            current_epoch: 0,
            last_vote_epoch: 0,
            nodes: vec![Node::new(myself, String::new(), port, cport, now)],
            owner: vec![None; SLOTS],
            migrating: BTreeMap::new(),
            importing: BTreeMap::new(),
            forgotten: BTreeMap::new(),
        }
    }

    pub fn node(&self, id: &NodeId) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == *id)
    }

    pub fn node_mut(&mut self, id: &NodeId) -> Option<&mut Node> {
        self.nodes.iter_mut().find(|n| n.id == *id)
    }

    pub fn me(&self) -> &Node {
        self.node(&self.myself).expect("a node always knows itself")
    }

    pub fn me_mut(&mut self) -> &mut Node {
        let id = self.myself;
        self.node_mut(&id).expect("a node always knows itself")
    }

    /// Whether `id` is a known node (not a handshake placeholder).
    pub fn knows(&self, id: &NodeId) -> bool {
        self.node(id).is_some_and(|n| !n.handshake)
    }

    pub fn owns(&self, slot: u16, id: &NodeId) -> bool {
        self.owner[slot as usize] == Some(*id)
    }

    /// Every owner's slots as inclusive ranges in order, in one pass over the
    /// slot table (CLUSTER NODES and the config file list every node's).
    pub fn all_ranges(&self) -> std::collections::HashMap<NodeId, Vec<(u16, u16)>> {
        let mut all: std::collections::HashMap<NodeId, Vec<(u16, u16)>> = Default::default();
        for (slot, owner) in self.owner.iter().enumerate() {
            let Some(owner) = owner else {
                continue;
            };
            let slot = slot as u16;
            let ranges = all.entry(*owner).or_default();
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == slot => *end = slot,
                _ => ranges.push((slot, slot)),
            }
        }
        all
    }

    pub fn assigned(&self) -> usize {
        self.owner.iter().filter(|o| o.is_some()).count()
    }

    /// The config epoch of `slot`'s owner (0 when unowned).
    fn owner_epoch(&self, slot: usize) -> u64 {
        self.owner[slot]
            .and_then(|id| self.node(&id))
            .map_or(0, |n| n.config_epoch)
    }

    /// Nodes that own at least one slot (INFO's `cluster_size`).
    pub fn size(&self) -> usize {
        let mut owners: Vec<NodeId> = self.owner.iter().flatten().copied().collect();
        owners.sort_unstable();
        owners.dedup();
        owners.len()
    }

    /// Takes `epoch` into the cluster's current epoch if newer.
    pub fn see_epoch(&mut self, epoch: u64) -> bool {
        if epoch > self.current_epoch {
            self.current_epoch = epoch;
            return true;
        }
        false
    }

    /// Gives this node a config epoch greater than every other node's without
    /// asking them (Redis's bump without consensus): how a node that takes a slot
    /// by SETSLOT NODE makes its claim win. Returns whether it changed.
    pub fn bump_epoch(&mut self) -> bool {
        let newest = self.nodes.iter().map(|n| n.config_epoch).max().unwrap_or(0);
        let max = newest.max(self.current_epoch);
        let mine = self.me().config_epoch;
        if mine == 0
            || mine != max
            || self.nodes.iter().filter(|n| n.config_epoch == max).count() > 1
        {
            // Saturating: a peer may announce any epoch, and a wrap to 0 would
            // make this node's claims the oldest.
            self.current_epoch = self.current_epoch.saturating_add(1);
            let epoch = self.current_epoch;
            self.me_mut().config_epoch = epoch;
            return true;
        }
        false
    }

    /// Two masters with one config epoch would let neither win a slot both
    /// claim: the one with the smaller name takes a new epoch (Redis's rule).
    /// Returns whether this node's epoch changed.
    pub fn settle_collision(&mut self, sender: &NodeId, sender_epoch: u64) -> bool {
        if sender_epoch != self.me().config_epoch || *sender <= self.myself {
            return false;
        }
        self.current_epoch = self.current_epoch.saturating_add(1);
        let epoch = self.current_epoch;
        self.me_mut().config_epoch = epoch;
        true
    }

    /// Takes what `sender` (config epoch `epoch`) claims: every slot it claims whose
    /// owner has an older epoch, unless this node is importing it. Returns the
    /// slots this node lost (their keys must go) and whether anything changed;
    /// slots where this node knows a newer owner are in `stale`, for an UPDATE
    /// back to the sender.
    pub fn take_claims(&mut self, sender: &NodeId, epoch: u64, claims: &SlotBits) -> Claims {
        let mut out = Claims::default();
        for slot in claims.iter() {
            let s = slot as usize;
            if self.owner[s] == Some(*sender) || self.importing.contains_key(&slot) {
                continue;
            }
            let current = self.owner_epoch(s);
            if self.owner[s].is_none() || current < epoch {
                if self.owner[s] == Some(self.myself) {
                    out.lost.push(slot);
                    self.migrating.remove(&slot);
                }
                self.owner[s] = Some(*sender);
                out.changed = true;
            } else if current > epoch {
                out.stale = self.owner[s];
            }
        }
        out
    }

    /// Drops placeholders that never answered, nodes heard of through gossip
    /// that never answered either (gossip cannot fill the table with nodes that
    /// do not exist), and forget-list entries that ran out.
    pub fn expire(&mut self, now: u64, handshake_ms: u64) -> bool {
        let before = self.nodes.len();
        let owner = &self.owner;
        self.nodes.retain(|n| {
            let unanswered = n.handshake || (n.meet && n.pong_received == 0);
            !unanswered
                || now.saturating_sub(n.created) <= handshake_ms
                || owner.contains(&Some(n.id))
        });
        self.forgotten.retain(|_, until| *until > now);
        self.nodes.len() != before
    }

    /// Removes `id` (CLUSTER FORGET): its slots become unowned here, and gossip
    /// cannot bring it back for [`FORGET_MS`].
    pub fn forget(&mut self, id: &NodeId, now: u64) {
        self.nodes.retain(|n| n.id != *id);
        for o in self.owner.iter_mut().filter(|o| **o == Some(*id)) {
            *o = None;
        }
        self.migrating.retain(|_, to| to != id);
        self.importing.retain(|_, from| from != id);
        self.forgotten.insert(*id, now + FORGET_MS);
    }

    /// A node this one has heard of through gossip, or been told to meet.
    pub fn add(&mut self, node: Node) -> bool {
        if self.nodes.len() >= MAX_NODES
            || self.node(&node.id).is_some()
            || self.forgotten.contains_key(&node.id)
        {
            return false;
        }
        self.nodes.push(node);
        true
    }
}

/// What taking a sender's claims did.
#[derive(Default, Debug)]
pub struct Claims {
    pub changed: bool,
    pub lost: Vec<u16>,
    /// A node that owns one of the claimed slots under a newer epoch.
    pub stale: Option<NodeId>,
}

/// A set of slots, one bit each (2 KiB), as the bus carries them.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotBits(pub Box<[u8; SLOTS / 8]>);

impl Default for SlotBits {
    fn default() -> Self {
        SlotBits(Box::new([0; SLOTS / 8]))
    }
}

impl std::fmt::Debug for SlotBits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotBits({} slots)", self.iter().count())
    }
}

impl SlotBits {
    /// The slots `id` owns in `state`.
    pub fn of(state: &State, id: &NodeId) -> SlotBits {
        let mut bits = SlotBits::default();
        for (slot, owner) in state.owner.iter().enumerate() {
            if *owner == Some(*id) {
                bits.set(slot as u16);
            }
        }
        bits
    }

    pub fn set(&mut self, slot: u16) {
        self.0[slot as usize / 8] |= 1 << (slot % 8);
    }

    pub fn get(&self, slot: u16) -> bool {
        self.0[slot as usize / 8] & (1 << (slot % 8)) != 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..SLOTS as u16).filter(|&s| self.get(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: u8) -> NodeId {
        NodeId([c; 40])
    }

    fn three() -> State {
        let mut s = State::new(id(b'a'), 7000, 17000, 0);
        s.add(Node::new(id(b'b'), "127.0.0.1".into(), 7001, 17001, 0));
        s.add(Node::new(id(b'c'), "127.0.0.1".into(), 7002, 17002, 0));
        s
    }

    #[test]
    fn a_newer_claim_wins_and_an_older_one_is_stale() {
        let mut s = three();
        s.owner[10] = Some(id(b'a'));
        s.me_mut().config_epoch = 2;
        let mut bits = SlotBits::default();
        bits.set(10);
        let c = s.take_claims(&id(b'b'), 1, &bits);
        assert!(!c.changed);
        assert_eq!(c.stale, Some(id(b'a')));
        assert!(s.owns(10, &id(b'a')));
        let c = s.take_claims(&id(b'b'), 3, &bits);
        assert!(c.changed);
        assert_eq!(c.lost, vec![10]);
        assert!(s.owns(10, &id(b'b')));
    }

    #[test]
    fn an_importing_slot_is_not_taken_from_under_the_importer() {
        let mut s = three();
        s.importing.insert(5, id(b'b'));
        let mut bits = SlotBits::default();
        bits.set(5);
        assert!(!s.take_claims(&id(b'b'), 9, &bits).changed);
        assert_eq!(s.owner[5], None);
    }

    #[test]
    fn the_smaller_name_moves_on_a_collision() {
        let mut s = three();
        s.me_mut().config_epoch = 1;
        s.current_epoch = 1;
        assert!(s.settle_collision(&id(b'b'), 1), "a < b: a moves");
        assert_eq!(s.me().config_epoch, 2);
        let mut t = State::new(id(b'c'), 1, 2, 0);
        t.me_mut().config_epoch = 1;
        assert!(!t.settle_collision(&id(b'b'), 1), "c > b: b moves, not c");
    }

    #[test]
    fn bumping_makes_this_node_the_newest() {
        let mut s = three();
        s.current_epoch = 3;
        s.node_mut(&id(b'b')).unwrap().config_epoch = 3;
        s.me_mut().config_epoch = 1;
        assert!(s.bump_epoch());
        assert_eq!(s.me().config_epoch, 4);
        assert!(!s.bump_epoch(), "already the only newest");
    }

    #[test]
    fn ranges_are_inclusive_and_ordered() {
        let mut s = three();
        for slot in [0, 1, 2, 5, 16383] {
            s.owner[slot] = Some(id(b'a'));
        }
        assert_eq!(
            s.all_ranges()[&id(b'a')],
            vec![(0, 2), (5, 5), (16383, 16383)]
        );
    }

    #[test]
    fn a_forgotten_node_is_not_re_added_by_gossip() {
        let mut s = three();
        s.owner[1] = Some(id(b'b'));
        s.forget(&id(b'b'), 1000);
        assert_eq!(s.owner[1], None);
        assert!(!s.add(Node::new(id(b'b'), "127.0.0.1".into(), 7001, 17001, 1000)));
        s.expire(1000 + FORGET_MS + 1, 5000);
        assert!(s.add(Node::new(id(b'b'), "127.0.0.1".into(), 7001, 17001, 1000)));
    }
}
