//! Nodes as a cluster member knows them: identity, address, epoch, link health.

use std::fmt;

/// A node's 40-character lowercase hex name, as Redis Cluster names nodes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub [u8; 40]);

impl NodeId {
    /// A fresh random name.
    pub fn random() -> NodeId {
        use rand::Rng;
        let mut rng = rand::thread_rng();
        let mut id = [0u8; 40];
        for b in &mut id {
            *b = b"0123456789abcdef"[rng.gen_range(0..16)];
        }
        NodeId(id)
    }

    /// Parses a name: exactly 40 lowercase hex digits.
    pub fn parse(s: &[u8]) -> Option<NodeId> {
        let id: [u8; 40] = s.try_into().ok()?;
        id.iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            .then_some(NodeId(id))
    }

    pub fn as_str(&self) -> &str {
        // Only ever built from hex digits.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.as_str())
    }
}

/// Another node, or this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    /// Empty until learnt (this node learns its own from the first MEET, unless
    /// `cluster-announce-ip` says).
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    pub config_epoch: u64,
    /// Met by address (CLUSTER MEET) and not yet answered: `id` is a placeholder
    /// until the node's first PONG names it.
    pub handshake: bool,
    /// The next message to it is a MEET, which makes it add this node.
    pub meet: bool,
    /// Unix ms of a PING not yet answered (0: none outstanding).
    pub ping_sent: u64,
    /// Unix ms of the last PONG.
    pub pong_received: u64,
    /// Whether this node's link to it is up.
    pub connected: bool,
    /// Unix ms it was added (a handshake that never completes is dropped).
    pub created: u64,
}

impl Node {
    pub fn new(id: NodeId, ip: String, port: u16, cport: u16, now: u64) -> Node {
        Node {
            id,
            ip,
            port,
            cport,
            config_epoch: 0,
            handshake: false,
            meet: false,
            ping_sent: 0,
            pong_received: 0,
            connected: false,
            created: now,
        }
    }

    /// `ip:port`, as MOVED and ASK name it.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// Whether its PING has gone unanswered past `timeout_ms` (Redis's PFAIL,
    /// shown as `fail?`).
    pub fn failing(&self, now: u64, timeout_ms: u64) -> bool {
        self.ping_sent != 0 && now.saturating_sub(self.ping_sent) > timeout_ms
    }
}
