//! Pub/sub: who listens to which channel and pattern, and delivery to them.
//!
//! The registry maps each channel, and each pattern, to its subscribers. PUBLISH
//! encodes a message once per protocol and hands the bytes to every receiver's
//! queue; the receiver's connection loop moves them into its output like any reply
//! ([`poll_next`], [`deliver`]). Publishing never waits on a subscriber, so a subscriber
//! that stops reading could make the server hold an unbounded backlog: every send
//! is therefore checked against the `pubsub` class of `client-output-buffer-limit`
//! (what is queued plus what waits in the connection's output), and a subscriber
//! past it is killed instead of being sent more, as Redis closes it.
//!
//! Shard channels (SSUBSCRIBE, SPUBLISH) are a namespace of their own, and no
//! pattern ever matches one. In cluster mode a shard channel is placed by its slot
//! like a key (`cluster::route`), so its subscribers and publishers all meet on
//! the slot's node; PUBLISH's messages also go to every other node over the
//! cluster bus (`cluster::Cluster::publish`).
//!
//! Channels and patterns are kept apart from the per-connection [`Subscription`],
//! which lists what one connection listens to, so that RESET and a closing
//! connection can leave everything without scanning the registry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use parking_lot::RwLock;
use relcache_protocol::resp::{write_array_header, write_bulk, Frame, Protocol};
use tokio::sync::mpsc;

use crate::config::OutputLimit;
use crate::server::Server;
use crate::session::{ClientInfo, Session};

type Map<K, V> = HashMap<K, V, ahash::RandomState>;
/// In subscription order, so UNSUBSCRIBE with no arguments answers in the order
/// the client subscribed.
type Set<K> = indexmap::IndexSet<K, ahash::RandomState>;

/// A channel name, a glob pattern over channel names, or a shard channel name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    fn subscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"subscribe",
            Kind::Pattern => b"psubscribe",
            Kind::Shard => b"ssubscribe",
        }
    }

    fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
}

/// One subscribed connection, as publishers see it.
pub struct Subscriber {
    info: Arc<ClientInfo>,
    tx: mpsc::UnboundedSender<Bytes>,
    /// Bytes sent and not yet moved into the connection's output.
    queued: AtomicUsize,
    /// When its pending output went over the soft limit, in milliseconds since the
    /// client connected, plus one (0: not over).
    over_soft_since: AtomicU64,
    /// Tracking's invalidations held back while the client's command runs.
    held: parking_lot::Mutex<Held>,
}

/// While a tracking client's command runs (parked included), its invalidations
/// wait for the command's reply. A read registers its keys before its reply is
/// written: an invalidation sent in between and written first would reach the
/// client before the value it invalidates, which the client would then keep.
/// Its own changes reach it after its reply too, as in Redis 7.2.
#[derive(Default)]
struct Held {
    running: bool,
    messages: Vec<Bytes>,
}

impl Subscriber {
    pub fn info(&self) -> &Arc<ClientInfo> {
        &self.info
    }

    /// Queues a message outside any channel (client-side caching's
    /// invalidations), held to the limit of the client's class; while the
    /// client's own command runs it waits for that command's reply ([`Held`]).
    pub fn push(&self, server: &Server, msg: Bytes) {
        let limit = if self.info.is_pubsub() {
            server.config.pubsub_output_limit()
        } else {
            server.config.output_limit()
        };
        let mut held = self.held.lock();
        if held.running {
            if self.admit(server, limit, msg.len()) {
                self.queued.fetch_add(msg.len(), Relaxed);
                held.messages.push(msg);
            }
            return;
        }
        drop(held);
        self.send(server, limit, msg);
    }

    /// Queues one encoded message, unless that takes the client past its limit,
    /// in which case the client is closed instead.
    fn send(&self, server: &Server, limit: OutputLimit, msg: Bytes) {
        if !self.admit(server, limit, msg.len()) {
            return;
        }
        self.queued.fetch_add(msg.len(), Relaxed);
        if self.tx.send(msg).is_err() {
            // The connection is gone and is leaving the registry.
            self.queued.store(0, Relaxed);
        }
    }

    /// Whether `len` more bytes keep the client within `limit`; if not, the
    /// client is closed.
    fn admit(&self, server: &Server, limit: OutputLimit, len: usize) -> bool {
        if self.info.kill.is_cancelled() {
            return false;
        }
        let pending =
            (self.queued.load(Relaxed) + len) as u64 + self.info.mem.output_len.load(Relaxed);
        if over_limit(limit, pending, &self.info, &self.over_soft_since) {
            tracing::warn!(
                client = self.info.id,
                addr = %self.info.addr,
                "client scheduled to be closed ASAP for overcoming of output buffer limits"
            );
            server
                .stats
                .client_output_buffer_limit_disconnections
                .incr();
            self.info.kill.cancel();
            return false;
        }
        true
    }
}

/// Whether `pending` bytes break `limit`: past the hard limit at once, over the
/// soft one for `soft_seconds` in a row.
fn over_limit(limit: OutputLimit, pending: u64, info: &ClientInfo, since: &AtomicU64) -> bool {
    if limit.hard > 0 && pending > limit.hard {
        return true;
    }
    if limit.soft == 0 || pending <= limit.soft {
        since.store(0, Relaxed);
        return false;
    }
    let now = info.created.elapsed().as_millis() as u64 + 1;
    let start = match since.compare_exchange(0, now, Relaxed, Relaxed) {
        Ok(_) => now,
        Err(start) => start,
    };
    now - start >= limit.soft_seconds * 1000
}

/// What one connection listens to, and the queue its messages arrive on.
pub struct Subscription {
    me: Arc<Subscriber>,
    rx: mpsc::UnboundedReceiver<Bytes>,
    channels: Set<Bytes>,
    patterns: Set<Bytes>,
    shard: Set<Bytes>,
}

impl Subscription {
    /// Every subscription of every kind: whether the client is subscribed at all.
    fn count(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard.len()
    }

    /// The count a (un)subscribe confirmation carries: Redis counts shard channels
    /// apart from channels and patterns together.
    fn confirmed_count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Channel | Kind::Pattern => self.channels.len() + self.patterns.len(),
            Kind::Shard => self.shard.len(),
        }
    }

    fn names(&mut self, kind: Kind) -> &mut Set<Bytes> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }
}

type Subscribers = Map<Bytes, Map<u64, Arc<Subscriber>>>;

#[derive(Default)]
struct Inner {
    channels: Subscribers,
    patterns: Subscribers,
    shard: Subscribers,
}

impl Inner {
    fn names(&mut self, kind: Kind) -> &mut Subscribers {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }

    fn names_ref(&self, kind: Kind) -> &Subscribers {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard,
        }
    }
}

/// The server's channels and patterns.
#[derive(Default)]
pub struct PubSub {
    inner: RwLock<Inner>,
    /// Connections with at least one subscription (INFO `pubsub_clients`).
    clients: AtomicUsize,
    /// Every connection that can be sent messages (it subscribed once, speaks
    /// RESP3 or tracks keys), by client id: where tracking's invalidations for
    /// another client are redirected.
    endpoints: RwLock<Map<u64, Arc<Subscriber>>>,
}

impl PubSub {
    /// The message queue of client `id`, if it has one.
    pub fn endpoint(&self, id: u64) -> Option<Arc<Subscriber>> {
        self.endpoints.read().get(&id).cloned()
    }

    /// Channels with at least one subscriber, and distinct patterns (INFO).
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.inner.read();
        (inner.channels.len(), inner.patterns.len())
    }

    /// Shard channels with at least one subscriber (INFO `pubsubshard_channels`).
    pub fn shard_count(&self) -> usize {
        self.inner.read().shard.len()
    }

    pub fn clients(&self) -> usize {
        self.clients.load(Relaxed)
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: the active channels of `kind` matching
    /// `pattern` (all without one).
    pub fn channels(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let inner = self.inner.read();
        inner
            .names_ref(kind)
            .keys()
            .filter(|c| pattern.is_none_or(|p| crate::glob::matches(p, c, false)))
            .cloned()
            .collect()
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: subscribers of one channel of `kind`,
    /// patterns not counted.
    pub fn numsub(&self, kind: Kind, channel: &[u8]) -> usize {
        self.inner
            .read()
            .names_ref(kind)
            .get(channel)
            .map_or(0, |s| s.len())
    }
}

/// Whether this connection is subscribed to anything (Redis's pubsub client
/// class, and RESP2's subscribed mode).
pub fn subscribed(session: &Session) -> bool {
    session.pubsub.as_ref().is_some_and(|s| s.count() > 0)
}

/// Bytes published to this connection and not yet in its output.
pub fn queued(session: &Session) -> usize {
    session
        .pubsub
        .as_ref()
        .map_or(0, |s| s.me.queued.load(Relaxed))
}

/// SUBSCRIBE / PSUBSCRIBE: one confirmation per name, each with the count of
/// subscriptions after it.
/// This connection's message queue, made on first use: by a SUBSCRIBE, by
/// HELLO 3 (a RESP3 client takes push messages at any time) or by CLIENT
/// TRACKING.
pub fn endpoint<'s>(server: &Server, session: &'s mut Session) -> &'s mut Subscription {
    let info = session.info.clone();
    session.pubsub.get_or_insert_with(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        let me = Arc::new(Subscriber {
            info,
            tx,
            queued: AtomicUsize::new(0),
            over_soft_since: AtomicU64::new(0),
            held: parking_lot::Mutex::default(),
        });
        server
            .pubsub
            .endpoints
            .write()
            .insert(me.info.id, me.clone());
        Box::new(Subscription {
            me,
            rx,
            channels: Set::default(),
            patterns: Set::default(),
            shard: Set::default(),
        })
    })
}

impl Subscription {
    pub fn me(&self) -> &Arc<Subscriber> {
        &self.me
    }
}

pub fn subscribe(
    server: &Server,
    session: &mut Session,
    kind: Kind,
    names: &[&[u8]],
) -> Vec<Frame> {
    let sub = endpoint(server, session);
    let before = sub.count();
    let mut replies = Vec::with_capacity(names.len());
    let registry = &server.pubsub;
    for name in names {
        // Kept for as long as the subscription lasts: a copy, not a slice that
        // would keep the whole read buffer it arrived in.
        let name = &Bytes::copy_from_slice(name);
        if sub.names(kind).insert(name.clone()) {
            let mut inner = registry.inner.write();
            let me = sub.me.clone();
            inner
                .names(kind)
                .entry(name.clone())
                .or_default()
                .insert(me.info.id, me);
        }
        replies.push(confirmation(
            kind.subscribe_word(),
            Frame::Bulk(name.clone()),
            sub.confirmed_count(kind),
        ));
    }
    if before == 0 && sub.count() > 0 {
        registry.clients.fetch_add(1, Relaxed);
    }
    publish_counts(session);
    replies
}

/// UNSUBSCRIBE / PUNSUBSCRIBE: the names given, or every one of `kind` when none
/// is; one confirmation each, or a single one with a nil name when there was
/// nothing to leave.
pub fn unsubscribe(
    server: &Server,
    session: &mut Session,
    kind: Kind,
    names: &[&[u8]],
) -> Vec<Frame> {
    let word = kind.unsubscribe_word();
    let Some(sub) = session.pubsub.as_mut() else {
        return match names.is_empty() {
            true => vec![confirmation(word, Frame::Null, 0)],
            false => names
                .iter()
                .map(|n| confirmation(word, Frame::Bulk(Bytes::copy_from_slice(n)), 0))
                .collect(),
        };
    };
    let before = sub.count();
    let names: Vec<Bytes> = if names.is_empty() {
        sub.names(kind).iter().cloned().collect()
    } else {
        names.iter().map(|n| Bytes::copy_from_slice(n)).collect()
    };
    if names.is_empty() {
        return vec![confirmation(word, Frame::Null, sub.confirmed_count(kind))];
    }
    let mut replies = Vec::with_capacity(names.len());
    for name in names {
        if sub.names(kind).shift_remove(&name) {
            leave_one(server, kind, &name, sub.me.info.id);
        }
        replies.push(confirmation(
            word,
            Frame::Bulk(name),
            sub.confirmed_count(kind),
        ));
    }
    if before > 0 && sub.count() == 0 {
        server.pubsub.clients.fetch_sub(1, Relaxed);
    }
    publish_counts(session);
    replies
}

/// Leaves every channel and pattern and drops the queue (RESET, disconnect).
pub fn leave(server: &Server, session: &mut Session) {
    let Some(sub) = session.pubsub.take() else {
        return;
    };
    server.pubsub.endpoints.write().remove(&sub.me.info.id);
    if sub.count() > 0 {
        server.pubsub.clients.fetch_sub(1, Relaxed);
    }
    for name in &sub.channels {
        leave_one(server, Kind::Channel, name, sub.me.info.id);
    }
    for name in &sub.patterns {
        leave_one(server, Kind::Pattern, name, sub.me.info.id);
    }
    for name in &sub.shard {
        leave_one(server, Kind::Shard, name, sub.me.info.id);
    }
    publish_counts(session);
}

fn leave_one(server: &Server, kind: Kind, name: &[u8], id: u64) {
    let mut inner = server.pubsub.inner.write();
    let map = inner.names(kind);
    if let Some(subs) = map.get_mut(name) {
        subs.remove(&id);
        if subs.is_empty() {
            map.remove(name);
        }
    }
}

/// CLIENT LIST's `sub=` / `psub=` / `ssub=` and the `P` flag.
fn publish_counts(session: &Session) {
    let (c, p, s) = session.pubsub.as_ref().map_or((0, 0, 0), |s| {
        (s.channels.len(), s.patterns.len(), s.shard.len())
    });
    session.info.sub.store(c as u64, Relaxed);
    session.info.psub.store(p as u64, Relaxed);
    session.info.ssub.store(s as u64, Relaxed);
}

/// `[subscribe, name, count]`: a push in RESP3, an array in RESP2.
fn confirmation(word: &'static [u8], name: Frame, count: usize) -> Frame {
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(word)),
        name,
        Frame::Integer(count as i64),
    ])
}

/// A message to subscribers: a push of bulk strings (`message`, channel,
/// payload; or `pmessage` with the pattern first), encoded once per protocol,
/// on first need, straight from the publisher's arguments.
struct Encoded<'a> {
    parts: &'a [&'a [u8]],
    resp2: Option<Bytes>,
    resp3: Option<Bytes>,
}

impl<'a> Encoded<'a> {
    fn new(parts: &'a [&'a [u8]]) -> Encoded<'a> {
        Encoded {
            parts,
            resp2: None,
            resp3: None,
        }
    }

    fn for_client(&mut self, info: &ClientInfo) -> Bytes {
        let (slot, proto) = if info.proto.load(Relaxed) >= 3 {
            (&mut self.resp3, Protocol::Resp3)
        } else {
            (&mut self.resp2, Protocol::Resp2)
        };
        let parts = self.parts;
        slot.get_or_insert_with(|| {
            let size: usize = parts.iter().map(|p| p.len() + 24).sum();
            let mut out = BytesMut::with_capacity(size + 24);
            write_array_header(&mut out, parts.len());
            if proto == Protocol::Resp3 {
                // A push is an array with its own type byte.
                out[0] = b'>';
            }
            for part in parts {
                write_bulk(&mut out, part);
            }
            out.freeze()
        })
        .clone()
    }
}

/// PUBLISH: sends `message` to the channel's subscribers and to every pattern
/// subscription matching it; returns how many that was.
pub fn publish(server: &Server, channel: &[u8], message: &[u8]) -> usize {
    let limit = server.config.pubsub_output_limit();
    let inner = server.pubsub.inner.read();
    let mut receivers = 0;
    let send = |s: &Subscriber, msg: &mut Encoded| s.send(server, limit, msg.for_client(&s.info));
    if let Some(subs) = inner.channels.get(channel) {
        let parts = [&b"message"[..], channel, message];
        let mut msg = Encoded::new(&parts);
        for s in subs.values() {
            send(s, &mut msg);
        }
        receivers += subs.len();
    }
    for (pattern, subs) in &inner.patterns {
        if !crate::glob::matches(pattern, channel, false) {
            continue;
        }
        let parts = [&b"pmessage"[..], pattern, channel, message];
        let mut msg = Encoded::new(&parts);
        for s in subs.values() {
            send(s, &mut msg);
        }
        receivers += subs.len();
    }
    receivers
}

/// SPUBLISH: sends `message` to the shard channel's subscribers (patterns never
/// see shard channels); returns how many there were.
pub fn spublish(server: &Server, channel: &[u8], message: &[u8]) -> usize {
    let limit = server.config.pubsub_output_limit();
    let inner = server.pubsub.inner.read();
    let Some(subs) = inner.shard.get(channel) else {
        return 0;
    };
    let parts = [&b"smessage"[..], channel, message];
    let mut msg = Encoded::new(&parts);
    for s in subs.values() {
        s.send(server, limit, msg.for_client(&s.info));
    }
    subs.len()
}

/// For a loop that waits on a waker of its own rather than a future
/// ([`crate::evloop`]): the next message if one is waiting, or `None` with
/// `cx`'s waker registered to be woken by the next one sent. A message another
/// pass takes first ([`drain`]) still wakes it: a spurious wake, never a lost one.
pub fn poll_next(session: &mut Session, cx: &mut Context<'_>) -> Option<Bytes> {
    match session.pubsub.as_mut()?.rx.poll_recv(cx) {
        Poll::Ready(msg) => msg,
        Poll::Pending => None,
    }
}

/// Appends a received message, and whatever else is waiting, to the output.
pub fn deliver(msg: Option<Bytes>, session: &mut Session, out: &mut BytesMut) {
    let Some(sub) = session.pubsub.as_mut() else {
        return;
    };
    if let Some(msg) = msg {
        sub.me.queued.fetch_sub(msg.len(), Relaxed);
        out.extend_from_slice(&msg);
    }
    drain(session, out);
}

/// A tracking client's command starts: invalidations wait for its reply.
pub fn command_starts(session: &Session) {
    if let Some(sub) = &session.pubsub {
        sub.me.held.lock().running = true;
    }
}

/// The command's reply is written: what waited for it follows it.
pub fn after_reply(session: &mut Session, out: &mut BytesMut) {
    let Some(sub) = session.pubsub.as_mut() else {
        return;
    };
    let messages = {
        let mut held = sub.me.held.lock();
        held.running = false;
        std::mem::take(&mut held.messages)
    };
    for msg in messages {
        sub.me.queued.fetch_sub(msg.len(), Relaxed);
        out.extend_from_slice(&msg);
    }
}

/// Moves what is already queued into the output. Called before a reply is
/// written, so that messages published before it was (by this very command,
/// too: a PUBLISH to a channel the client listens to) come first, as Redis
/// writes them.
pub fn drain(session: &mut Session, out: &mut BytesMut) {
    let Some(sub) = session.pubsub.as_mut() else {
        return;
    };
    // A RESP3 client's queue is mostly empty: one load instead of a look into
    // the channel (its sender counts a message before sending it, so a message
    // this misses is one that is still being sent, which then comes after).
    if sub.me.queued.load(Relaxed) == 0 {
        return;
    }
    // Bounded per call, so a busy channel cannot keep this connection from
    // writing (and from being checked against its output limit).
    for _ in 0..1024 {
        match sub.rx.try_recv() {
            Ok(msg) => {
                sub.me.queued.fetch_sub(msg.len(), Relaxed);
                out.extend_from_slice(&msg);
            }
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Arc<ClientInfo> {
        let clients = crate::session::Clients::default();
        let addr = "127.0.0.1:7".parse().unwrap();
        clients
            .register(addr, addr, &Default::default(), 1)
            .unwrap()
    }

    #[test]
    fn hard_limit_at_once_soft_limit_after_its_seconds() {
        let info = info();
        let since = AtomicU64::new(0);
        let limit = OutputLimit {
            hard: 100,
            soft: 10,
            soft_seconds: 0,
        };
        assert!(over_limit(limit, 101, &info, &since));
        assert!(!over_limit(limit, 10, &info, &since));
        // Zero seconds: over the soft limit at all is too long.
        assert!(over_limit(limit, 11, &info, &since));
        let patient = OutputLimit {
            soft_seconds: 60,
            ..limit
        };
        let since = AtomicU64::new(0);
        assert!(!over_limit(patient, 50, &info, &since));
        assert_ne!(since.load(Relaxed), 0, "the clock started");
        assert!(!over_limit(patient, 5, &info, &since));
        assert_eq!(since.load(Relaxed), 0, "back under: the clock stops");
        let unlimited = OutputLimit {
            hard: 0,
            soft: 0,
            soft_seconds: 0,
        };
        assert!(!over_limit(unlimited, u64::MAX / 2, &info, &since));
    }

    #[test]
    fn messages_are_encoded_once_per_protocol() {
        let info = info();
        let mut msg = Encoded::new(&[b"m"]);
        assert_eq!(&msg.for_client(&info)[..], b"*1\r\n$1\r\nm\r\n");
        info.proto.store(3, Relaxed);
        assert_eq!(&msg.for_client(&info)[..], b">1\r\n$1\r\nm\r\n");
    }
}
