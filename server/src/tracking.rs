//! Client-side caching (CLIENT TRACKING): which connections hear of which
//! changes, and the invalidation messages Redis sends them.
//!
//! The keyspace keeps the tracking table and notices every change
//! (`db::track`); this module holds the other half: the clients that track, in
//! default mode (told of the keys they read) or BCAST mode (told of every key
//! under their prefixes), and delivery through each connection's message queue
//! (`pubsub::Subscriber`), held to its output limit like any message. A RESP3
//! client is sent `invalidate` pushes on its own connection; a client that
//! redirects (`REDIRECT id`) has them sent to that connection instead — as
//! pushes if it speaks RESP3, or as messages on `__redis__:invalidate` if it is
//! a subscribed RESP2 client, as Redis does. A change a client's own command
//! makes reaches it after that command's reply (Redis 7.2's order).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::RwLock;
use relcache_protocol::resp::{Frame, Protocol};

use crate::db::track::{ClientId, Invalidate};
use crate::pubsub::Subscriber;
use crate::server::Server;
use crate::session::{ClientInfo, Session};

type Map<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

/// The channel a RESP2 client subscribes to for redirected invalidations.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// CLIENT LIST flags kept in [`ClientInfo::tracking`].
pub const FLAG_ON: u8 = 1;
pub const FLAG_BROKEN_REDIRECT: u8 = 2;
pub const FLAG_BCAST: u8 = 4;

/// How a client asked to track (CLIENT TRACKING ON …).
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub redirect: ClientId,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    pub prefixes: Vec<Bytes>,
}

/// One tracking client, as the senders of invalidations see it.
pub struct Tracker {
    info: Arc<ClientInfo>,
    queue: Arc<Subscriber>,
    redirect: ClientId,
    noloop: bool,
    bcast: bool,
}

impl Tracker {
    /// Whether it is told of a change `writer` made: not of its own under NOLOOP.
    fn hears_of(&self, writer: ClientId) -> bool {
        !(self.noloop && self.info.id == writer)
    }
}

/// A connection's tracking state.
pub struct State {
    tracker: Arc<Tracker>,
    pub optin: bool,
    pub optout: bool,
    /// CLIENT CACHING was given for the next command (YES under OPTIN, NO under
    /// OPTOUT).
    pub caching: bool,
    /// BCAST prefixes, in the order given (CLIENT TRACKINGINFO).
    pub prefixes: Vec<Bytes>,
}

impl State {
    pub fn bcast(&self) -> bool {
        self.tracker.bcast
    }

    pub fn noloop(&self) -> bool {
        self.tracker.noloop
    }

    pub fn redirect(&self) -> ClientId {
        self.tracker.redirect
    }

    /// Whether the keys of a read now run are to be remembered.
    pub fn remembers_reads(&self) -> bool {
        !self.tracker.bcast
            && if self.optin {
                self.caching
            } else {
                !(self.optout && self.caching)
            }
    }
}

/// Every tracking client, and the BCAST prefixes.
#[derive(Default)]
pub struct Registry {
    trackers: RwLock<Map<ClientId, Arc<Tracker>>>,
    /// (prefix, client) pairs. A handful in practice, so a change scans them;
    /// prefixes of one client never overlap, so a key matches at most one of
    /// each client's.
    prefixes: RwLock<Vec<(Bytes, Arc<Tracker>)>>,
}

impl Registry {
    /// INFO's `tracking_total_prefixes`: distinct prefixes.
    pub fn prefix_count(&self) -> usize {
        let mut p: Vec<Bytes> = self
            .prefixes
            .read()
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    }
}

/// Connects the keyspace's change notices to this registry (once, at start).
pub fn install(server: &Arc<Server>) {
    server
        .db
        .tracking
        .install(Arc::new(Sink(Arc::downgrade(server))));
}

struct Sink(Weak<Server>);

impl Invalidate for Sink {
    fn key(&self, key: &[u8], readers: &[ClientId], writer: ClientId) {
        let Some(server) = self.0.upgrade() else {
            return;
        };
        let reg = &server.tracking;
        let mut msg = Message::Keys(key);
        if !readers.is_empty() {
            let trackers = reg.trackers.read();
            for id in readers {
                match trackers.get(id) {
                    Some(t) if !t.bcast && t.hears_of(writer) => {
                        send(&server, t, &mut msg, writer);
                    }
                    _ => {}
                }
            }
        }
        let prefixes = reg.prefixes.read();
        for (prefix, t) in prefixes.iter() {
            if key.starts_with(prefix) && t.hears_of(writer) {
                send(&server, t, &mut msg, writer);
            }
        }
    }

    fn flush(&self, writer: ClientId) {
        let Some(server) = self.0.upgrade() else {
            return;
        };
        let trackers = server.tracking.trackers.read();
        for t in trackers.values() {
            send(&server, t, &mut Message::Flush, writer);
        }
    }
}

/// What an invalidation says: these keys changed, or every key is gone.
enum Message<'k> {
    Keys(&'k [u8]),
    Flush,
}

impl Message<'_> {
    fn payload(&self) -> Frame {
        match self {
            Message::Keys(k) => Frame::Array(vec![Frame::Bulk(Bytes::copy_from_slice(k))]),
            Message::Flush => Frame::Null,
        }
    }
}

/// Sends one invalidation for tracker `t`, to its own connection or to the one
/// it redirects to.
fn send(server: &Server, t: &Tracker, msg: &mut Message<'_>, writer: ClientId) {
    if t.redirect == 0 {
        // A RESP2 connection cannot take a message between replies: without a
        // redirect it is told nothing, as in Redis.
        if t.info.proto.load(Relaxed) < 3 {
            return;
        }
        let bytes = encode(Protocol::Resp3, invalidate(msg));
        if t.info.id == writer {
            t.queue.push_after_reply(bytes);
        } else {
            t.queue.push(server, bytes);
        }
        return;
    }
    let Some(target) = server.pubsub.endpoint(t.redirect) else {
        if server.clients.get(t.redirect as i64).is_none() {
            broken_redirect(server, t, writer);
        }
        // Connected but neither RESP3 nor ever subscribed: nothing can be sent.
        return;
    };
    let info = target.info();
    let bytes = if info.proto.load(Relaxed) >= 3 {
        encode(Protocol::Resp3, invalidate(msg))
    } else if info.is_pubsub() {
        encode(
            Protocol::Resp2,
            Frame::Push(vec![
                Frame::Bulk(Bytes::from_static(b"message")),
                Frame::Bulk(Bytes::from_static(CHANNEL)),
                msg.payload(),
            ]),
        )
    } else {
        return;
    };
    target.push(server, bytes);
}

fn invalidate(msg: &Message<'_>) -> Frame {
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(b"invalidate")),
        msg.payload(),
    ])
}

/// The client `t` redirects to is gone: `t` is flagged (CLIENT LIST `R`,
/// TRACKINGINFO `broken_redirect`) and, in RESP3, told.
fn broken_redirect(server: &Server, t: &Tracker, writer: ClientId) {
    t.info.tracking.fetch_or(FLAG_BROKEN_REDIRECT, Relaxed);
    if t.info.proto.load(Relaxed) < 3 {
        return;
    }
    let bytes = encode(
        Protocol::Resp3,
        Frame::Push(vec![
            Frame::Bulk(Bytes::from_static(b"tracking-redir-broken")),
            Frame::Integer(t.redirect as i64),
        ]),
    );
    if t.info.id == writer {
        t.queue.push_after_reply(bytes);
    } else {
        t.queue.push(server, bytes);
    }
}

fn encode(proto: Protocol, frame: Frame) -> Bytes {
    let mut out = BytesMut::new();
    frame.encode(proto, &mut out);
    out.freeze()
}

/// Turns tracking on for `session` (or changes its options: BCAST prefixes
/// given again are added to those it has, as in Redis). The options are
/// checked by the caller.
pub fn enable(server: &Server, session: &mut Session, opts: Options) {
    let mut prefixes = match session.tracking.take() {
        Some(old) => {
            unregister(server, &old);
            if opts.bcast {
                old.prefixes
            } else {
                Vec::new()
            }
        }
        None => Vec::new(),
    };
    if opts.bcast {
        let wanted = if opts.prefixes.is_empty() {
            vec![Bytes::new()]
        } else {
            opts.prefixes.clone()
        };
        for p in wanted {
            if !prefixes.contains(&p) {
                prefixes.push(p);
            }
        }
    }
    let queue = crate::pubsub::endpoint(server, session).me().clone();
    let tracker = Arc::new(Tracker {
        info: session.info.clone(),
        queue,
        redirect: opts.redirect,
        noloop: opts.noloop,
        bcast: opts.bcast,
    });
    server
        .tracking
        .trackers
        .write()
        .insert(session.info.id, tracker.clone());
    if opts.bcast {
        let mut table = server.tracking.prefixes.write();
        for p in &prefixes {
            table.push((p.clone(), tracker.clone()));
        }
    }
    server.db.tracking.client_on(opts.bcast);
    let flags = FLAG_ON | if opts.bcast { FLAG_BCAST } else { 0 };
    session.info.tracking.store(flags, Relaxed);
    session.info.redirect.store(opts.redirect, Relaxed);
    session.tracking = Some(Box::new(State {
        tracker,
        optin: opts.optin,
        optout: opts.optout,
        caching: false,
        prefixes,
    }));
}

/// Turns tracking off (CLIENT TRACKING OFF, RESET, disconnect). The keys it
/// read stay in the table until they change, as in Redis: their readers are
/// looked up then, and a client no longer tracking is skipped.
pub fn disable(server: &Server, session: &mut Session) {
    if let Some(state) = session.tracking.take() {
        unregister(server, &state);
        session.info.tracking.store(0, Relaxed);
    }
}

fn unregister(server: &Server, state: &State) {
    let id = state.tracker.info.id;
    server.tracking.trackers.write().remove(&id);
    if state.tracker.bcast {
        server
            .tracking
            .prefixes
            .write()
            .retain(|(_, t)| t.info.id != id);
    }
    server.db.tracking.client_off(state.tracker.bcast);
}

/// CLIENT LIST's letters for [`ClientInfo::tracking`]'s bits.
pub fn list_flags(bits: u8, flags: &mut String) {
    if bits & FLAG_ON != 0 {
        flags.push('t');
    }
    if bits & FLAG_BROKEN_REDIRECT != 0 {
        flags.push('R');
    }
    if bits & FLAG_BCAST != 0 {
        flags.push('B');
    }
}

/// Keeps the tracking table within `tracking-table-max-keys` (the cron calls it
/// each tick, as Redis does in its event loop).
pub fn enforce_limit(server: &Server) {
    let max = server.config.tracking_table_max_keys.load(Relaxed) as usize;
    if max == 0 || server.db.tracking.totals().0 <= max {
        return;
    }
    // Enough per tick to keep up with a client reading a thousand new keys a
    // millisecond, without holding the cron for long.
    server.db.shed_tracked(max, 100_000);
}
