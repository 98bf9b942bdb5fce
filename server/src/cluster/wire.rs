//! The cluster bus's messages, as bytes. relcache nodes talk to each other only;
//! this is not Redis's binary bus, and a Redis node cannot join.
//!
//! A frame is
//!
//! ```text
//! "RCB1" | body length: u32 LE | body | CRC-32 (IEEE) of the body: u32 LE
//! ```
//!
//! and a body is one message (all integers little-endian):
//!
//! ```text
//! kind: u8            1 PING, 2 PONG, 3 MEET, 4 UPDATE
//! PING / PONG / MEET:
//!   sender id: 40 bytes (lowercase hex)   port: u16   cport: u16
//!   current epoch: u64   config epoch: u64
//!   ip length: u8, ip   (the address the sender announces; empty: use the
//!                        address the connection comes from)
//!   slots the sender owns: 2,048 bytes, bit (slot % 8) of byte (slot / 8)
//!   gossip count: u16, then per node: id: 40 bytes, ip length: u8, ip, port: u16,
//!                 cport: u16
//! UPDATE (a node's newer claim, sent to a node that claims its slots with an
//! older epoch):
//!   node id: 40 bytes   config epoch: u64   slots: 2,048 bytes
//! ```
//!
//! Decoding checks every length against the bytes there are, names against the
//! 40-hex-digit form, addresses against IP syntax, and the gossip count against
//! [`MAX_GOSSIP`]; a body may not exceed [`MAX_BODY`]. A peer that sends anything
//! else is disconnected: it can cost a node one bounded buffer, never a crash or
//! unbounded growth.

use std::net::IpAddr;

use super::node::NodeId;
use super::state::SlotBits;
use relcache_protocol::slot::SLOTS;

pub const MAGIC: &[u8; 4] = b"RCB1";
/// Gossip entries one message may carry.
pub const MAX_GOSSIP: usize = 1_000;
/// The largest body: a full gossip section with the longest addresses, and room.
pub const MAX_BODY: usize = 128 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Ping = 1,
    Pong = 2,
    Meet = 3,
}

/// A node as gossip describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gossip {
    pub id: NodeId,
    pub ip: String,
    pub port: u16,
    pub cport: u16,
}

/// What a PING, PONG or MEET carries: the sender's own view of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub sender: NodeId,
    pub port: u16,
    pub cport: u16,
    pub current_epoch: u64,
    pub config_epoch: u64,
    pub ip: String,
    pub slots: SlotBits,
    pub gossip: Vec<Gossip>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Header(Header),
    Update {
        node: NodeId,
        config_epoch: u64,
        slots: SlotBits,
    },
}

/// Appends `msg` as one frame.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0; 4]);
    let body = out.len();
    match msg {
        Message::Header(h) => {
            out.push(h.kind as u8);
            out.extend_from_slice(&h.sender.0);
            out.extend_from_slice(&h.port.to_le_bytes());
            out.extend_from_slice(&h.cport.to_le_bytes());
            out.extend_from_slice(&h.current_epoch.to_le_bytes());
            out.extend_from_slice(&h.config_epoch.to_le_bytes());
            put_ip(out, &h.ip);
            out.extend_from_slice(&h.slots.0[..]);
            let count = h.gossip.len().min(MAX_GOSSIP);
            out.extend_from_slice(&(count as u16).to_le_bytes());
            for g in &h.gossip[..count] {
                out.extend_from_slice(&g.id.0);
                put_ip(out, &g.ip);
                out.extend_from_slice(&g.port.to_le_bytes());
                out.extend_from_slice(&g.cport.to_le_bytes());
            }
        }
        Message::Update {
            node,
            config_epoch,
            slots,
        } => {
            out.push(4);
            out.extend_from_slice(&node.0);
            out.extend_from_slice(&config_epoch.to_le_bytes());
            out.extend_from_slice(&slots.0[..]);
        }
    }
    let len = (out.len() - body) as u32;
    out[start + 4..body].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&out[body..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

fn put_ip(out: &mut Vec<u8>, ip: &str) {
    // Addresses are IP literals, at most 45 bytes; longer never gets here.
    let ip = if ip.len() > u8::MAX as usize { "" } else { ip };
    out.push(ip.len() as u8);
    out.extend_from_slice(ip.as_bytes());
}

/// Why a peer's bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("not a relcache cluster bus frame")]
    Magic,
    #[error("frame body of {0} bytes is over the limit")]
    TooLong(usize),
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("malformed message: {0}")]
    Malformed(&'static str),
}

/// Reads one frame from the front of `buf`: `Ok(None)` if it is not all there
/// yet, else the message and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    if buf.len() < 8 {
        if !MAGIC.starts_with(&buf[..buf.len().min(4)]) {
            return Err(WireError::Magic);
        }
        return Ok(None);
    }
    if &buf[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    let len = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
    if len > MAX_BODY {
        return Err(WireError::TooLong(len));
    }
    let total = 8 + len + 4;
    if buf.len() < total {
        return Ok(None);
    }
    let body = &buf[8..8 + len];
    let crc = u32::from_le_bytes(buf[8 + len..total].try_into().expect("4 bytes"));
    if crc32fast::hash(body) != crc {
        return Err(WireError::Checksum);
    }
    let msg = body_of(&mut Reader(body))?;
    Ok(Some((msg, total)))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn id(&mut self) -> Result<NodeId, WireError> {
        NodeId::parse(self.take(40)?).ok_or(WireError::Malformed("node id"))
    }

    fn ip(&mut self) -> Result<String, WireError> {
        let n = self.u8()? as usize;
        let raw = self.take(n)?;
        let ip = std::str::from_utf8(raw).map_err(|_| WireError::Malformed("address"))?;
        if !ip.is_empty() && ip.parse::<IpAddr>().is_err() {
            return Err(WireError::Malformed("address"));
        }
        Ok(ip.to_string())
    }

    fn slots(&mut self) -> Result<SlotBits, WireError> {
        let mut bits = SlotBits::default();
        let raw = self.take(SLOTS / 8)?;
        bits.0.copy_from_slice(raw);
        Ok(bits)
    }
}

fn body_of(r: &mut Reader<'_>) -> Result<Message, WireError> {
    let kind = match r.u8()? {
        1 => Kind::Ping,
        2 => Kind::Pong,
        3 => Kind::Meet,
        4 => {
            let msg = Message::Update {
                node: r.id()?,
                config_epoch: r.u64()?,
                slots: r.slots()?,
            };
            return finish(r, msg);
        }
        _ => return Err(WireError::Malformed("unknown message kind")),
    };
    let sender = r.id()?;
    let port = r.u16()?;
    let cport = r.u16()?;
    let current_epoch = r.u64()?;
    let config_epoch = r.u64()?;
    let ip = r.ip()?;
    let slots = r.slots()?;
    let count = r.u16()? as usize;
    if count > MAX_GOSSIP {
        return Err(WireError::Malformed("too many gossip entries"));
    }
    let mut gossip = Vec::with_capacity(count);
    for _ in 0..count {
        gossip.push(Gossip {
            id: r.id()?,
            ip: r.ip()?,
            port: r.u16()?,
            cport: r.u16()?,
        });
    }
    let msg = Message::Header(Header {
        kind,
        sender,
        port,
        cport,
        current_epoch,
        config_epoch,
        ip,
        slots,
        gossip,
    });
    finish(r, msg)
}

fn finish(r: &Reader<'_>, msg: Message) -> Result<Message, WireError> {
    if !r.0.is_empty() {
        return Err(WireError::Malformed("trailing bytes"));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Message {
        let mut slots = SlotBits::default();
        slots.set(0);
        slots.set(16383);
        Message::Header(Header {
            kind: Kind::Meet,
            sender: NodeId([b'a'; 40]),
            port: 7000,
            cport: 17000,
            current_epoch: 9,
            config_epoch: 4,
            ip: "127.0.0.1".into(),
            slots,
            gossip: vec![Gossip {
                id: NodeId([b'b'; 40]),
                ip: "::1".into(),
                port: 7001,
                cport: 17001,
            }],
        })
    }

    #[test]
    fn messages_round_trip_and_wait_for_their_last_byte() {
        let update = Message::Update {
            node: NodeId([b'c'; 40]),
            config_epoch: 2,
            slots: SlotBits::default(),
        };
        for msg in [header(), update] {
            let mut buf = Vec::new();
            encode(&msg, &mut buf);
            for cut in 0..buf.len() {
                assert_eq!(decode(&buf[..cut]), Ok(None), "cut at {cut}");
            }
            assert_eq!(decode(&buf), Ok(Some((msg, buf.len()))));
        }
    }

    #[test]
    fn damage_and_oversize_are_refused() {
        let mut buf = Vec::new();
        encode(&header(), &mut buf);
        let mut flipped = buf.clone();
        flipped[20] ^= 1;
        assert_eq!(decode(&flipped), Err(WireError::Checksum));
        let mut big = buf.clone();
        big[4..8].copy_from_slice(&(MAX_BODY as u32 + 1).to_le_bytes());
        assert!(matches!(decode(&big), Err(WireError::TooLong(_))));
        assert_eq!(decode(b"GET "), Err(WireError::Magic));
    }

    proptest! {
        #[test]
        fn any_bytes_are_refused_or_read(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn any_body_with_a_good_frame_is_refused_or_read(body in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let mut buf = MAGIC.to_vec();
            buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
            buf.extend_from_slice(&body);
            buf.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            let _ = decode(&buf);
        }
    }
}
