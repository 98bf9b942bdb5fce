//! The cluster bus: a listener on the bus port for peers' messages, and one
//! outgoing link per peer that pings it every second (at once after a change),
//! so every node hears every other's claims within a second or two.
//!
//! A message from a known peer updates what this node knows of it: address,
//! epochs, the slots it claims (a newer config epoch wins), and the nodes it
//! knows (gossip: an unknown one is met). A MEET from an unknown node adds it —
//! that is how CLUSTER MEET joins two clusters. A peer that claims slots whose
//! owner this node knows under a newer epoch is sent an UPDATE first, so a node
//! that missed a move (it was down) learns it from the first peer it talks to.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::node::{Node, NodeId};
use super::state::{SlotBits, State};
use super::wire::{self, Gossip, Header, Kind, Message};
use crate::db::now_ms;
use crate::server::Server;

/// How often each link pings its peer when nothing changes.
const PING_EVERY: Duration = Duration::from_millis(1000);
/// An inbound link quiet this long is closed (its peer pings every second).
const INBOUND_IDLE: Duration = Duration::from_secs(60);

/// Binds the bus port on every `bind` address (`cport` 0: one the system
/// picks, the same on each); returns the listeners and the port.
pub fn bind(bind: &[IpAddr], cport: u16) -> anyhow::Result<(Vec<std::net::TcpListener>, u16)> {
    let mut port = cport;
    let mut listeners = Vec::new();
    for ip in bind {
        let l = std::net::TcpListener::bind((*ip, port))
            .map_err(|e| anyhow::anyhow!("cannot open the cluster bus port {ip}:{port}: {e}"))?;
        l.set_nonblocking(true)?;
        port = l.local_addr()?.port();
        listeners.push(l);
    }
    Ok((listeners, port))
}

/// Serves the bus on `listeners`, and starts the task that keeps a link to each
/// peer.
pub fn start(server: &Arc<Server>, listeners: Vec<std::net::TcpListener>) {
    for l in listeners {
        match TcpListener::from_std(l) {
            Ok(l) => {
                tokio::spawn(accept(l, server.clone()));
            }
            Err(e) => tracing::warn!(error = %e, "cluster bus listener failed"),
        }
    }
    tokio::spawn(links(server.clone()));
}

async fn accept(listener: TcpListener, server: Arc<Server>) {
    loop {
        let (stream, _) = tokio::select! {
            _ = server.shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cluster bus accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        tokio::spawn(inbound(stream, server.clone()));
    }
}

/// Serves one peer's link to this node: answers each PING and MEET with a PONG.
async fn inbound(mut stream: TcpStream, server: Arc<Server>) {
    let (Ok(peer), Ok(local)) = (stream.peer_addr(), stream.local_addr()) else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    loop {
        let msg = tokio::select! {
            _ = server.shutdown.cancelled() => return,
            m = tokio::time::timeout(INBOUND_IDLE, read_frame(&mut stream, &mut buf)) => m,
        };
        let msg = match msg {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    tracing::warn!(%peer, error = %e, "closing a cluster bus link");
                }
                return;
            }
            Err(_) => return,
        };
        let mut out = Vec::new();
        if receive(&server, msg, peer.ip(), local.ip(), &mut out) {
            let pong = header(&server.cluster.read(), Kind::Pong);
            count_sent(&server, &pong);
            wire::encode(&pong, &mut out);
        }
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Reads one frame: an error ends the link (closed, malformed, over the limit).
async fn read_frame(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Message> {
    loop {
        match wire::decode(buf) {
            Ok(Some((msg, used))) => {
                buf.drain(..used);
                return Ok(msg);
            }
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// This node's PING, PONG or MEET: who it is, what it owns, whom it knows.
fn header(state: &State, kind: Kind) -> Message {
    let me = state.me();
    let gossip = state
        .nodes
        .iter()
        .filter(|n| n.id != state.myself && !n.handshake && !n.ip.is_empty())
        .take(wire::MAX_GOSSIP)
        .map(|n| Gossip {
            id: n.id,
            ip: n.ip.clone(),
            port: n.port,
            cport: n.cport,
        })
        .collect();
    Message::Header(Header {
        kind,
        sender: state.myself,
        port: me.port,
        cport: me.cport,
        current_epoch: state.current_epoch,
        config_epoch: me.config_epoch,
        ip: me.ip.clone(),
        slots: SlotBits::of(state, &state.myself),
        gossip,
    })
}

fn kind_index(msg: &Message) -> usize {
    match msg {
        Message::Header(h) => h.kind as usize - 1,
        Message::Update { .. } => 3,
    }
}

fn count_sent(server: &Server, msg: &Message) {
    server.cluster.stats.sent[kind_index(msg)].fetch_add(1, Relaxed);
}

/// Takes in one message. Returns whether it asks for a PONG (a PING or a MEET);
/// UPDATEs for stale claims go into `out`, to be sent before it.
fn receive(
    server: &Arc<Server>,
    msg: Message,
    peer: IpAddr,
    local: IpAddr,
    out: &mut Vec<u8>,
) -> bool {
    let cluster = &server.cluster;
    cluster.stats.received[kind_index(&msg)].fetch_add(1, Relaxed);
    let announce_set = !server.config.cluster_announce_ip.read().is_empty();
    let h = match msg {
        Message::Update {
            node,
            config_epoch,
            slots,
        } => {
            let lost = cluster
                .update(|s| {
                    let known = s
                        .node(&node)
                        .filter(|n| !n.handshake && n.config_epoch < config_epoch);
                    if known.is_none() {
                        return Err(());
                    }
                    s.node_mut(&node).expect("known").config_epoch = config_epoch;
                    s.see_epoch(config_epoch);
                    Ok(s.take_claims(&node, config_epoch, &slots).lost)
                })
                .unwrap_or_default();
            super::drop_lost(server, lost);
            return false;
        }
        Message::Header(h) => h,
    };
    let asks_pong = matches!(h.kind, Kind::Ping | Kind::Meet);
    let now = now_ms();
    // The address peers reach this node at is the one they connect to: learnt
    // from every MEET, and from any PING while unknown (Redis's rule).
    if asks_pong && !announce_set {
        let learn = {
            let s = cluster.read();
            (h.kind == Kind::Meet && s.me().ip != local.to_string()) || s.me().ip.is_empty()
        };
        if learn {
            let _ = cluster.update(|s| {
                s.me_mut().ip = local.to_string();
                Ok::<_, ()>(())
            });
        }
    }
    let ip = if h.ip.is_empty() {
        peer.to_string()
    } else {
        h.ip.clone()
    };
    let known = cluster.read().knows(&h.sender);
    if !known {
        if h.kind == Kind::Meet && h.sender != cluster.read().myself {
            let _ = cluster.update(|s| {
                let mut n = Node::new(h.sender, ip.clone(), h.port, h.cport, now);
                n.config_epoch = h.config_epoch;
                s.add(n).then_some(()).ok_or(())
            });
        } else {
            return asks_pong;
        }
    }
    let outcome = absorb(server, &h, ip, now);
    if let Some(owner) = outcome.stale {
        let s = cluster.read();
        if let Some(n) = s.node(&owner) {
            let update = Message::Update {
                node: owner,
                config_epoch: n.config_epoch,
                slots: SlotBits::of(&s, &owner),
            };
            count_sent(server, &update);
            wire::encode(&update, out);
        }
    }
    asks_pong
}

/// What absorbing a header found.
struct Absorbed {
    stale: Option<NodeId>,
}

/// Takes a known sender's header: its address and epochs, its slot claims, the
/// nodes it gossips about.
fn absorb(server: &Arc<Server>, h: &Header, ip: String, now: u64) -> Absorbed {
    let cluster = &server.cluster;
    let quiet = {
        let s = cluster.read();
        let n = s.node(&h.sender);
        n.is_some_and(|n| {
            n.ip == ip && n.port == h.port && n.cport == h.cport && n.config_epoch == h.config_epoch
        }) && h.current_epoch <= s.current_epoch
            && h.config_epoch != s.me().config_epoch
            && h.slots == SlotBits::of(&s, &h.sender)
            && h.gossip.iter().all(|g| {
                g.id == s.myself || s.node(&g.id).is_some() || s.forgotten.contains_key(&g.id)
            })
    };
    if h.kind == Kind::Pong {
        cluster.touch(|s| {
            if let Some(n) = s.node_mut(&h.sender) {
                n.pong_received = now;
                n.ping_sent = 0;
                n.meet = false;
            }
        });
    }
    if quiet {
        // Nothing to save: the common case, every second from every peer.
        return Absorbed { stale: None };
    }
    let r = cluster.update(|s| {
        let Some(n) = s.node_mut(&h.sender) else {
            return Err(());
        };
        n.ip = ip;
        n.port = h.port;
        n.cport = h.cport;
        n.config_epoch = h.config_epoch;
        s.see_epoch(h.current_epoch);
        let claims = s.take_claims(&h.sender, h.config_epoch, &h.slots);
        s.settle_collision(&h.sender, h.config_epoch);
        for g in &h.gossip {
            if g.id != s.myself && !g.ip.is_empty() && s.node(&g.id).is_none() {
                let mut n = Node::new(g.id, g.ip.clone(), g.port, g.cport, now);
                n.meet = true;
                s.add(n);
            }
        }
        Ok((claims.lost, claims.stale))
    });
    match r {
        Ok((lost, stale)) => {
            super::drop_lost(server, lost);
            Absorbed { stale }
        }
        Err(()) => Absorbed { stale: None },
    }
}

/// Keeps one link task per peer, and drops placeholders of handshakes that
/// never completed.
async fn links(server: Arc<Server>) {
    let mut running: std::collections::HashMap<NodeId, tokio::task::JoinHandle<()>> =
        Default::default();
    loop {
        tokio::select! {
            _ = server.shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let timeout = server.config.cluster_node_timeout.load(Relaxed).max(1000);
        let now = now_ms();
        if server.cluster.touch(|s| s.expire(now, timeout)) {
            let _ = server.cluster.update(|_| Ok::<_, ()>(()));
        }
        let peers: Vec<NodeId> = {
            let s = server.cluster.read();
            s.nodes
                .iter()
                .filter(|n| n.id != s.myself)
                .map(|n| n.id)
                .collect()
        };
        running.retain(|id, task| !task.is_finished() && peers.contains(id));
        for id in peers {
            running
                .entry(id)
                .or_insert_with(|| tokio::spawn(link(server.clone(), id)));
        }
    }
}

/// One outgoing link: connects to the peer, and pings it every second or when
/// something changed, reading its PONG each time. Ends when the node is gone
/// (forgotten), or renamed (a handshake's placeholder learnt the real name: the
/// link under the real name takes over).
async fn link(server: Arc<Server>, id: NodeId) {
    let cluster = &server.cluster;
    loop {
        let Some((ip, cport)) = cluster.read().node(&id).map(|n| (n.ip.clone(), n.cport)) else {
            return;
        };
        let timeout =
            Duration::from_millis(server.config.cluster_node_timeout.load(Relaxed).max(100));
        let stream = match ip.parse::<IpAddr>() {
            Ok(addr) => {
                tokio::time::timeout(
                    timeout.min(Duration::from_secs(5)),
                    TcpStream::connect(SocketAddr::new(addr, cport)),
                )
                .await
            }
            Err(_) => {
                tokio::time::sleep(PING_EVERY).await;
                continue;
            }
        };
        let mut stream = match stream {
            Ok(Ok(s)) => s,
            _ => {
                set_link(&server, &id, false);
                tokio::select! {
                    _ = server.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(PING_EVERY) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        set_link(&server, &id, true);
        match ping_loop(&server, &mut stream, id).await {
            Ok(Ended::Gone) => return,
            Ok(Ended::Broken) | Err(_) => set_link(&server, &id, false),
        }
        tokio::select! {
            _ = server.shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

enum Ended {
    /// The node was forgotten or renamed: this link is done.
    Gone,
    /// The connection failed: connect again.
    Broken,
}

async fn ping_loop(
    server: &Arc<Server>,
    stream: &mut TcpStream,
    id: NodeId,
) -> std::io::Result<Ended> {
    let cluster = &server.cluster;
    let mut buf = Vec::new();
    let local = stream.local_addr()?.ip();
    let peer = stream.peer_addr()?.ip();
    loop {
        let spread = cluster.spread.notified();
        let msg = {
            let s = cluster.read();
            let Some(n) = s.node(&id) else {
                return Ok(Ended::Gone);
            };
            header(
                &s,
                if n.meet || n.handshake {
                    Kind::Meet
                } else {
                    Kind::Ping
                },
            )
        };
        let mut out = Vec::new();
        wire::encode(&msg, &mut out);
        count_sent(server, &msg);
        cluster.touch(|s| {
            if let Some(n) = s.node_mut(&id) {
                if n.ping_sent == 0 {
                    n.ping_sent = now_ms();
                }
            }
        });
        stream.write_all(&out).await?;
        let timeout =
            Duration::from_millis(server.config.cluster_node_timeout.load(Relaxed).max(100));
        // UPDATEs come before the PONG.
        loop {
            let msg = tokio::select! {
                _ = server.shutdown.cancelled() => return Ok(Ended::Gone),
                m = tokio::time::timeout(timeout, read_frame(stream, &mut buf)) => match m {
                    Ok(m) => m?,
                    Err(_) => return Ok(Ended::Broken),
                },
            };
            let Message::Header(h) = &msg else {
                receive(server, msg, peer, local, &mut Vec::new());
                continue;
            };
            if h.kind != Kind::Pong {
                return Ok(Ended::Broken);
            }
            if cluster.read().node(&id).is_some_and(|n| n.handshake) {
                // The placeholder learns the real name, or goes if that name is
                // already known (two MEETs of one node).
                let real = h.sender;
                let _ = cluster.update(|s| {
                    if s.node(&real).is_some() || real == s.myself {
                        s.nodes.retain(|n| n.id != id);
                    } else if let Some(n) = s.node_mut(&id) {
                        n.id = real;
                        n.handshake = false;
                    }
                    Ok::<_, ()>(())
                });
                receive(server, msg, peer, local, &mut Vec::new());
                return Ok(Ended::Gone);
            }
            receive(server, msg, peer, local, &mut Vec::new());
            break;
        }
        tokio::select! {
            _ = server.shutdown.cancelled() => return Ok(Ended::Gone),
            _ = spread => {}
            _ = tokio::time::sleep(PING_EVERY) => {}
        }
    }
}

fn set_link(server: &Server, id: &NodeId, up: bool) {
    server.cluster.touch(|s| {
        if let Some(n) = s.node_mut(id) {
            n.connected = up;
            if !up && n.ping_sent == 0 {
                n.ping_sent = now_ms();
            }
        }
    });
}
