//! Commands: the dispatch table and the execution context.
//!
//! A request becomes a command here: look it up by name (case-insensitive), resolve
//! a subcommand, check arity and authentication, queue it if a MULTI is open, or run
//! its handler. Handlers live one family per file and return a [`Frame`] or a
//! [`CmdError`]; they never touch sockets, and reach the keyspace only through
//! [`Ctx::view`], which locks exactly the shards the command's keys live in (or, in
//! EXEC, hands out the view the whole transaction holds). A handler that must wait
//! or end the connection says so through its context ([`Ctx::park`],
//! [`Ctx::close_after_reply`]), and [`dispatch`] hands the connection a [`Flow`]:
//! control travels as values, never as flags left on the session.

mod argv;
pub mod spec;

mod cluster;
mod config;
mod connection;
mod docs;
mod expire;
pub mod ids;
mod idset;
mod info;
mod introspect;
mod keys;
mod latency;
mod lease;
mod memory;
mod migrate;
mod monitor;
mod persistence;
mod pubsub;
mod scripting;
mod server;
mod setcore;
mod sets;
mod slowlog;
mod strings;
mod tracking;
mod transactions;

pub use transactions::discard_session_state;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use relcache_protocol::resp::{Frame, Protocol};

use crate::blocking::Wait;
use crate::db::{LockMode, View};
use crate::error::CmdError;
use crate::output::Output;
use crate::server::{Evicted, Room, Server};
use crate::session::Session;
pub use argv::{with_owned, Argv};
pub use spec::{CommandSpec, Keys};

/// Every top-level command family's table.
fn families() -> [&'static [CommandSpec]; 21] {
    [
        cluster::COMMANDS,
        config::COMMANDS,
        connection::COMMANDS,
        expire::COMMANDS,
        idset::COMMANDS,
        info::COMMANDS,
        introspect::COMMANDS,
        keys::COMMANDS,
        latency::COMMANDS,
        lease::COMMANDS,
        memory::COMMANDS,
        migrate::COMMANDS,
        monitor::COMMANDS,
        persistence::COMMANDS,
        pubsub::COMMANDS,
        scripting::COMMANDS,
        server::COMMANDS,
        sets::COMMANDS,
        slowlog::COMMANDS,
        strings::COMMANDS,
        transactions::COMMANDS,
    ]
}

/// The command table, with a dense id per command and subcommand (for stats).
pub struct Registry {
    /// Keyed by the name's bytes: a lookup need not check the client's are UTF-8.
    by_name: HashMap<&'static [u8], (usize, &'static CommandSpec), ahash::RandomState>,
    /// Every command and subcommand, by id.
    pub all: Vec<&'static CommandSpec>,
}

impl Registry {
    fn build() -> Registry {
        let mut r = Registry {
            by_name: HashMap::default(),
            all: Vec::new(),
        };
        for family in families() {
            for spec in family {
                let id = r.all.len();
                r.all.push(spec);
                let dup = r.by_name.insert(spec.name.as_bytes(), (id, spec));
                assert!(dup.is_none(), "command {} defined twice", spec.name);
                for sub in spec.subcommands {
                    r.all.push(sub);
                    r.by_name
                        .insert(sub.name.as_bytes(), (r.all.len() - 1, sub));
                }
            }
        }
        r
    }

    /// Looks up a command by the name a client sent, in any case.
    pub fn get(&self, name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        // Lower-case into a stack buffer: no allocation on the hot path.
        let mut buf = [0u8; 64];
        let lower = buf.get_mut(..name.len())?;
        for (d, s) in lower.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        self.by_name.get(&lower[..]).copied()
    }

    /// The command with id `id`.
    pub fn by_id(&self, id: usize) -> &'static CommandSpec {
        self.all[id]
    }

    /// Looks up the command a request names in its first argument: a top-level
    /// command only, so `CONFIG|GET` sent as a name is unknown, as in Redis.
    pub fn command(&self, name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        self.get(name).filter(|(_, spec)| !spec.name.contains('|'))
    }

    /// The subcommand of `parent` named `sub`.
    pub fn sub(&self, parent: &CommandSpec, sub: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        let mut full = Vec::with_capacity(parent.name.len() + 1 + sub.len());
        full.extend_from_slice(parent.name.as_bytes());
        full.push(b'|');
        full.extend_from_slice(sub);
        self.get(&full)
    }

    /// Top-level commands (no subcommands), in table order.
    pub fn top_level(&self) -> impl Iterator<Item = &'static CommandSpec> + '_ {
        self.all.iter().copied().filter(|s| !s.name.contains('|'))
    }
}

/// The command table.
pub fn registry() -> &'static Registry {
    static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::build);
    &REGISTRY
}

enum ViewSlot<'a, 'v> {
    Unlocked,
    Own(View<'a>),
    Exec(&'v mut View<'a>),
}

/// What a handler runs with. `'a` is the server's lifetime (views borrow its
/// shards); `'v` is this one command's.
pub struct Ctx<'a, 'v> {
    pub server: &'a Server,
    pub session: &'v mut Session,
    pub spec: &'static CommandSpec,
    args: Argv<'v>,
    view: ViewSlot<'a, 'v>,
    /// Set for write commands until their view has revoked their keys' leases.
    revoke_leases: bool,
    /// A fill carrying its own lease token, which must not revoke it.
    keeps_leases: bool,
    /// Set for a read by a tracking client until its view has registered the
    /// keys it reads (client-side caching): under the shards' locks, so no write
    /// can come between the read and the registration.
    track_reads: bool,
    start: Start,
    then: Then,
    /// Replies that go out before the handler's own (one per channel a
    /// SUBSCRIBE names).
    earlier: Vec<Frame>,
    /// The client's output, when a reply may be written into it as the handler
    /// finds it ([`Ctx::view_and_output`]).
    output: Option<&'v mut BytesMut>,
}

impl<'a, 'v> Ctx<'a, 'v> {
    /// What the command stores of `arg`, one of its arguments ([`Argv::stored`]).
    pub fn stored(&self, arg: &[u8]) -> Bytes {
        self.args.stored(arg)
    }

    /// The locked keyspace for this command's keys, locked on first use so a handler
    /// can parse and validate its arguments before taking any lock.
    ///
    /// A write command's first view also revokes the leases out on its keys (see
    /// `db::lease`): whatever a filler read from the database before this write may
    /// no longer be true, so its fill must be refused. Every write counts, even one
    /// that finds the key missing and changes nothing (`IDSET.ADD … XX`): that is
    /// exactly the write-through of a change the filler may have missed.
    pub fn view(&mut self) -> &mut View<'a> {
        if matches!(self.view, ViewSlot::Unlocked) {
            let mode = if self.spec.has(spec::WRITE) || self.spec.has(spec::LOCK_WRITE) {
                LockMode::Write
            } else {
                LockMode::Read
            };
            let db = &self.server.db;
            let mut v = match command_keys(self.spec, &self.args) {
                Some(keys) => db.view_of(keys.iter().copied(), mode),
                None => db.view::<&[u8]>(&[], true, mode),
            };
            v.set_client(self.session.id());
            self.view = ViewSlot::Own(v);
        }
        let v = match &mut self.view {
            ViewSlot::Own(v) => v,
            ViewSlot::Exec(v) => v,
            ViewSlot::Unlocked => unreachable!(),
        };
        if std::mem::take(&mut self.track_reads) {
            if let Some(keys) = command_keys(self.spec, &self.args) {
                let id = self.session.id();
                keys.iter().for_each(|k| v.track(k, id));
            }
        }
        if std::mem::take(&mut self.revoke_leases) && v.db().leases_out() > 0 {
            let ended = match command_keys(self.spec, &self.args) {
                Some(keys) => v.revoke_leases(keys.iter().copied()),
                None => v.revoke_all_leases(),
            };
            let stats = &self.server.stats;
            stats.lease_revocations.add(ended.revoked as u64);
            stats.lease_lapses.add(ended.lapsed as u64);
        }
        v
    }

    /// [`view`](Self::view) for a fill carrying a lease token: the fill ends its own
    /// lease (or is refused), so it must not revoke it on the way in.
    pub fn view_keeping_leases(&mut self) -> &mut View<'a> {
        self.revoke_leases = false;
        self.keeps_leases = true;
        self.view()
    }

    /// Re-takes this command's locks exclusively: a read that turns out to need a
    /// write (granting a lease on a key it missed). The locks are released in
    /// between, so the caller must look again at what it saw. Returns false inside
    /// EXEC when the transaction holds its shards shared.
    pub fn lock_exclusive(&mut self) -> bool {
        let server: &'a Server = self.server;
        let db = &server.db;
        match &mut self.view {
            ViewSlot::Exec(v) => v.mode() == LockMode::Write,
            ViewSlot::Own(v) if v.mode() == LockMode::Write => true,
            _ => {
                self.release_view();
                let mut v = match command_keys(self.spec, &self.args) {
                    Some(keys) => db.view_of(keys.iter().copied(), LockMode::Write),
                    None => db.view::<&[u8]>(&[], true, LockMode::Write),
                };
                v.set_client(self.session.id());
                self.view = ViewSlot::Own(v);
                true
            }
        }
    }

    /// Releases this command's locks so it can do long work (rebuilding a table)
    /// without blocking other keys of the shard; the next [`view`](Self::view)
    /// locks again, and the caller must re-check what it saw. Returns false (and
    /// keeps the locks) inside EXEC, where the transaction must stay atomic.
    ///
    /// A write command revokes its keys' leases again when it locks again: a lease
    /// may have been granted on a key that went missing while the locks were free.
    pub fn release_view(&mut self) -> bool {
        match std::mem::replace(&mut self.view, ViewSlot::Unlocked) {
            ViewSlot::Own(v) => {
                self.server.absorb_view_stats(&v);
                self.revoke_leases = self.spec.has(spec::WRITE) && !self.keeps_leases;
                true
            }
            ViewSlot::Unlocked => true,
            exec @ ViewSlot::Exec(_) => {
                self.view = exec;
                false
            }
        }
    }

    /// Whether this command runs inside EXEC.
    pub fn in_exec(&self) -> bool {
        matches!(self.view, ViewSlot::Exec(_))
    }

    /// For a parked command that runs again: the deadline it was first parked with,
    /// so that waking up never extends its wait.
    pub fn resumed(&self) -> Option<Instant> {
        self.start.resumed
    }

    /// Whether memory stayed over `maxmemory` after the eviction before the
    /// command, with no key left to evict (Redis's `pre_command_oom_state`):
    /// inside EXEC, the transaction's. A script then refuses its writes that
    /// may add data until it has written, deciding once rather than at each
    /// write, where its own compilation and Lua stack could tip memory over.
    pub fn oom_at_start(&self) -> bool {
        self.start.oom
    }

    /// Asks to answer nothing yet and wait ([`crate::blocking`]): the command runs
    /// again, with [`resumed`](Self::resumed) set, when the wait is woken or its
    /// recheck time passes. The handler's own reply is dropped.
    pub fn park(&mut self, wait: Wait) {
        self.then = Then::Park(wait);
    }

    /// Publishes a keyspace notification for `key` (`crate::notify`), after the
    /// expiries this command's view has met so far, so subscribers see them in
    /// Redis's order (`expired`, then `new`, then the command's event). Costs one
    /// relaxed load while notifications are off.
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        let server = self.server;
        if server.config.notify_keyspace_events.get() & (class | crate::notify::EXPIRED) == 0 {
            return;
        }
        let view = match &mut self.view {
            ViewSlot::Own(v) => Some(v),
            ViewSlot::Exec(v) => Some(&mut **v),
            ViewSlot::Unlocked => None,
        };
        if let Some(v) = view.filter(|v| !v.expired_keys.is_empty()) {
            let expired = std::mem::take(&mut v.expired_keys);
            crate::notify::events(
                server,
                crate::notify::EXPIRED,
                "expired",
                expired.iter().map(|k| &k[..]),
            );
        }
        crate::notify::event(server, class, event, key);
    }

    /// [`notify`](Self::notify) of `new` when a write created `key`, then of
    /// `event`.
    pub fn notify_write(&mut self, class: u32, event: &'static str, key: &[u8], created: bool) {
        if created {
            self.notify(crate::notify::NEW, "new", key);
        }
        self.notify(class, event, key);
    }

    /// The command's view, and the client's output buffer when the reply may be
    /// written into it directly, under the view's locks, instead of returned as a
    /// [`Frame`]: Redis's `addReply` of a small string copies it straight into
    /// the client's buffer, where a `Frame` would copy it into an allocation of
    /// its own first and free that after encoding (~230 instructions of an
    /// unpipelined GET's ~5,400 in a callgrind profile). There is an output only
    /// for a plain command of a client with nothing to deliver around its reply:
    /// not in EXEC or a script, neither subscribed nor tracking (see
    /// [`dispatch`]). A handler that
    /// writes its reply there calls [`replied`](Self::replied) and returns
    /// nothing else of use.
    pub fn view_and_output(&mut self) -> (&mut View<'a>, Option<&mut BytesMut>) {
        self.view();
        let view = match &mut self.view {
            ViewSlot::Own(v) => v,
            ViewSlot::Exec(v) => &mut **v,
            ViewSlot::Unlocked => unreachable!("locked above"),
        };
        (view, self.output.as_deref_mut())
    }

    /// Says the reply is already in the output ([`view_and_output`](Self::view_and_output)):
    /// the `Frame` the handler returns is dropped.
    pub fn replied(&mut self) {
        debug_assert!(self.output.is_some(), "no output to have replied into");
        self.wrote_reply();
    }

    /// The reply is in the output: nothing else may have been asked of this
    /// command's answer (a park, a close, replies before it), or it would be lost.
    fn wrote_reply(&mut self) {
        debug_assert!(
            matches!(self.then, Then::Reply) && self.earlier.is_empty(),
            "a reply written directly would drop what else the command asked for"
        );
        self.then = Then::Written;
    }

    /// `frame` as the reply: an integer or a simple string (`+OK`), which read
    /// the same in both protocols, is written straight into the client's output
    /// when that is allowed (see [`view_and_output`](Self::view_and_output));
    /// anything else, or with no output, is returned.
    pub fn reply(&mut self, frame: Frame) -> crate::error::CmdResult {
        match frame {
            Frame::Integer(n) => self.integer(n),
            Frame::Simple(s) if self.output.is_some() => {
                if let Some(out) = self.output.as_deref_mut() {
                    out.reserve(s.len() + 3);
                    out.put_u8(b'+');
                    out.put_slice(&s);
                    out.put_slice(b"\r\n");
                }
                self.wrote_reply();
                Ok(Frame::Null)
            }
            other => Ok(other),
        }
    }

    /// The integer `n` as the reply, written straight into the client's output
    /// when that is allowed (see [`view_and_output`](Self::view_and_output)):
    /// a check's 0 or 1 is then a four-byte copy instead of a `Frame` returned,
    /// matched, encoded and dropped. For the commands a relation service sends
    /// most (SISMEMBER, IDSET.EXISTS, SADD, SREM, EXISTS) and the counters, DEL
    /// and TTL that every Redis client does.
    pub fn integer(&mut self, n: i64) -> crate::error::CmdResult {
        match self.output.as_deref_mut() {
            Some(out) => {
                relcache_protocol::resp::write_integer(out, n);
                self.wrote_reply();
                Ok(Frame::Null)
            }
            None => Ok(Frame::Integer(n)),
        }
    }

    /// Sends `frame` as a reply of its own, before the one the handler returns:
    /// for commands that answer once per argument (SUBSCRIBE).
    pub fn reply_before(&mut self, frame: Frame) {
        self.earlier.push(frame);
    }

    /// Asks to close the connection once this reply is written (QUIT).
    pub fn close_after_reply(&mut self) {
        self.then = Then::Close { reply: true };
    }

    /// Asks to close the connection without answering (SHUTDOWN: Redis sends no
    /// reply, and clients such as redis-py take one as a failure).
    pub fn close_without_reply(&mut self) {
        self.then = Then::Close { reply: false };
    }
}

/// What the connection does after a request ran.
pub enum Flow {
    /// Its reply, if it has one, is in the output: go on with the next request.
    Continue,
    /// Close the connection once the output is written (QUIT, SHUTDOWN, a CLIENT
    /// KILL of itself).
    Close,
    /// It answered nothing yet: park it, and run it again when the wait ends
    /// ([`crate::blocking`]).
    Park(Wait),
}

/// One command's result: its reply, and what the connection does next.
pub(crate) enum Outcome {
    Reply(Frame),
    /// Its reply is already in the output ([`Ctx::replied`]).
    Written,
    /// More than one reply, in order (SUBSCRIBE a b).
    Replies(Vec<Frame>),
    /// This reply, if any, then close the connection.
    Close(Option<Frame>),
    /// No reply yet.
    Park(Wait),
}

/// What a handler asked for besides its reply, through [`Ctx`].
enum Then {
    Reply,
    Written,
    Close { reply: bool },
    Park(Wait),
}

/// Runs one request and appends its reply, if it answers now, to `out`.
/// `resumed` is the deadline of a parked command that runs again.
pub fn dispatch(
    server: &Server,
    session: &mut Session,
    args: Argv<'_>,
    out: &mut Output,
    resumed: Option<Instant>,
) -> Flow {
    // Only a tracking client holds messages back; the others skip the lock.
    let tracking = session.tracking.is_some();
    if tracking {
        crate::pubsub::command_starts(session);
    }
    // A reply may go straight into the output only if nothing is to be delivered
    // around it. A subscriber's messages and a tracking client's invalidations
    // are (below): what its own command publishes comes before its reply, and
    // what it reads is registered before invalidations are let out after it.
    // The queue of a RESP3 client that is neither (HELLO 3 makes one, for the
    // invalidations another client may redirect to it) only gets what other
    // clients send: what came before the command goes out before its reply.
    let direct = !tracking && !crate::pubsub::subscribed(session);
    if direct {
        crate::pubsub::drain(session, out.buf());
    }
    let outcome = execute(server, session, args, resumed, direct.then(|| out.buf()));
    // ASKING covers the next command (until it answers: a parked one keeps it),
    // or the next transaction.
    if session.asking
        && session.multi.is_none()
        && !matches!(outcome, Outcome::Park(_))
        && !eq_ic(args[0], "asking")
    {
        session.asking = false;
    }
    let holds = tracking || session.tracking.is_some();
    // CLIENT CACHING covers the next command (once it answers), or the next
    // transaction.
    if let Some(t) = session.tracking.as_deref_mut() {
        let answered = !matches!(outcome, Outcome::Park(_));
        if t.caching && answered && session.multi.is_none() && !eq_ic(args[0], "client") {
            t.caching = false;
        }
    }
    // A subscriber's messages that came in before this reply go out before it,
    // those its own command published included (PUBLISH, or EXEC and EVAL
    // publishing, in RESP3).
    crate::pubsub::drain(session, out.buf());
    let (reply, flow) = match outcome {
        Outcome::Reply(reply) => (Some(reply), Flow::Continue),
        Outcome::Written => (None, Flow::Continue),
        Outcome::Replies(replies) => {
            for reply in replies {
                crate::observe::error_reply(server, &reply);
                encode_reply(reply, session.proto, out);
            }
            if holds {
                crate::pubsub::after_reply(session, out.buf());
            }
            return Flow::Continue;
        }
        Outcome::Close(reply) => (reply, Flow::Close),
        Outcome::Park(wait) => (None, Flow::Park(wait)),
    };
    if let Some(reply) = reply {
        crate::observe::error_reply(server, &reply);
        encode_reply(reply, session.proto, out);
    }
    if holds && !matches!(flow, Flow::Park(_)) {
        crate::pubsub::after_reply(session, out.buf());
    }
    flow
}

/// Encodes `reply` into `out` and lets go of it. A long string (a GET of a big
/// value) is queued by reference, not copied (see [`crate::output`]). Another big
/// reply is encoded off the loop (a KEYS over 1M keys encodes 1M bulk strings:
/// the loop's other clients waited ~600 ms behind it) and freed on the lazy-free
/// thread.
fn encode_reply(reply: Frame, proto: Protocol, out: &mut Output) {
    if let Frame::Bulk(b) = &reply {
        if b.len() >= crate::output::SHARED_MIN {
            let buf = out.buf();
            buf.put_u8(b'$');
            buf.put_slice(itoa::Buffer::new().format(b.len()).as_bytes());
            buf.put_slice(b"\r\n");
            let Frame::Bulk(b) = reply else {
                unreachable!("matched above")
            };
            out.push_shared(b);
            out.buf().put_slice(b"\r\n");
            return;
        }
    }
    if is_big(&reply) {
        crate::offload::offload(|| reply.encode(proto, out.buf()));
        crate::offload::free_later(reply);
    } else {
        reply.encode(proto, out.buf());
    }
}

/// Whether a reply is worth a thread hand-over to encode: an aggregate of more
/// than 16k elements (a long string is not copied at all).
fn is_big(reply: &Frame) -> bool {
    const MANY: usize = 16 * 1024;
    match reply {
        Frame::Array(v) | Frame::Set(v) | Frame::Push(v) => v.len() > MANY,
        Frame::Integers(v) => v.len() > MANY,
        Frame::Map(v) => v.len() > MANY / 2,
        _ => false,
    }
}

fn execute(
    server: &Server,
    session: &mut Session,
    args: Argv<'_>,
    resumed: Option<Instant>,
    output: Option<&mut BytesMut>,
) -> Outcome {
    let reg = registry();
    let resolved = resolve_cached(reg, &mut session.last_command, &args);
    let (id, spec) = match resolved {
        Ok(found) => found,
        Err(e) => {
            if let Some(m) = &mut session.multi {
                m.failed = true;
            }
            return Outcome::Reply(e.to_frame());
        }
    };
    if !session.authenticated
        && !spec.has(spec::NO_AUTH)
        && server.config.requirepass.read().is_some()
    {
        return reject(server, session, id, spec, CmdError::NoAuth);
    }
    if session.proto == Protocol::Resp2
        && crate::pubsub::subscribed(session)
        && !allowed_subscribed(spec)
    {
        let e = CmdError::err(format!(
            "Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        ));
        return reject(server, session, id, spec, e);
    }
    let mut moving = None;
    if server.cluster.enabled() {
        match cluster_route(server, session, spec, args) {
            Err(redirect) => return redirected(server, session, id, spec, redirect),
            Ok(crate::cluster::route::Placed::Here) => {}
            Ok(crate::cluster::route::Placed::Moving(m)) => moving = Some(m),
        }
    }
    if server.persist.loading() && !spec.has(spec::LOADING) {
        return reject(server, session, id, spec, CmdError::Loading);
    }
    // A script registers as running only if no other client's script holds its
    // shards, and otherwise waits or answers BUSY itself: the gate would look at
    // them first for nothing. Not in a transaction (an EVAL queued while a script
    // is busy fails it, as any command does) nor on a slot being moved (whose
    // keys' shards are locked before the command runs).
    let gated = !spec.has(spec::RUNS_SCRIPT) || session.multi.is_some() || moving.is_some();
    let gate = if gated {
        script_gate(server, session, spec, args, resumed)
    } else {
        Gate::Go
    };
    match gate {
        Gate::Go => {}
        Gate::Busy => return reject(server, session, id, spec, CmdError::Busy),
        // Queueing touches no key: only what runs now waits.
        Gate::Wait(_) if session.multi.is_some() && !spec.has(spec::NOT_QUEUED) => {}
        Gate::Wait(wait) => return Outcome::Park(wait),
    }
    if let Some(m) = &mut session.multi {
        if spec.has(spec::NO_MULTI) {
            m.failed = true;
            let e = CmdError::err("Command not allowed inside a transaction");
            return Outcome::Reply(e.to_frame());
        }
    }
    if let Some(m) = &moving {
        // Queued, or a transaction: placed by a look at its keys without their
        // locks (a transaction's commands are looked at as queued, as in Redis).
        // Any other command looks under its own locks, in `run_moving`.
        let queued_or_exec = session.multi.is_some() || spec.has(spec::RUNS_QUEUED);
        if queued_or_exec {
            let placed = if spec.has(spec::RUNS_QUEUED) {
                let reg = registry();
                let queued = session.multi.as_ref().map_or(&[][..], |m| &m.queued[..]);
                let keys = queued.iter().filter_map(|q| {
                    let (_, spec) = resolve(reg, q).ok()?;
                    command_keys(spec, q)
                });
                m.decide_unlocked(server, keys.flatten())
            } else {
                m.decide_unlocked(
                    server,
                    command_keys(spec, &args).unwrap_or_default().into_iter(),
                )
            };
            if let Err(redirect) = placed {
                return redirected(server, session, id, spec, redirect);
            }
            moving = None;
        }
    }
    if session.multi.is_some() && !spec.has(spec::NOT_QUEUED) {
        // Redis 7.4 refuses a command to queue under maxmemory only if it may add
        // data itself (the queue's own growth is held to `client-query-buffer-limit`
        // instead, see `conn.rs`), so a read-only transaction still runs when
        // memory is full.
        if spec.has(spec::DENYOOM) {
            if let Err(e) = server.make_room(Room::For(0)) {
                return reject(server, session, id, spec, e);
            }
        }
        if let Some(m) = &mut session.multi {
            m.queue(args.to_owned_vec());
            session
                .info
                .multi
                .store(m.queued.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        return Outcome::Reply(Frame::Simple(Bytes::from_static(b"QUEUED")));
    }
    // Memory is made (or refused) before a command that may add data runs. EXEC
    // adds data when one of its queued commands does, and may bring in their size.
    let incoming = if spec.has(spec::RUNS_QUEUED) {
        session.multi.as_ref().and_then(transactions::incoming)
    } else if spec.has(spec::DENYOOM) {
        Some(args.iter().map(|a| a.len()).sum())
    } else {
        None
    };
    // A command that may grant a lease or run a script's writes refuses them
    // itself while memory is over: it evicts until under first, as all did;
    // so does a transaction that queued one.
    let decides_itself = if spec.has(spec::RUNS_QUEUED) {
        session
            .multi
            .as_ref()
            .is_some_and(transactions::decides_itself)
    } else {
        spec.has(transactions::DECIDES_ITSELF)
    };
    let room = match incoming {
        Some(bytes) => Room::For(bytes),
        None if decides_itself => Room::All,
        None => Room::Moment,
    };
    let start = match server.make_room(room) {
        Ok(ended) => Start {
            resumed,
            oom: ended == Evicted::Stuck,
        },
        // An EXEC refused here ends its transaction with EXECABORT, as Redis's.
        Err(e) => return reject(server, session, id, spec, e),
    };
    match moving {
        Some(m) => run_moving(server, session, id, spec, args, m, start),
        None => run_in(
            server,
            session,
            id,
            spec,
            args,
            ViewSlot::Unlocked,
            start,
            output,
        ),
    }
}

/// Runs a command in a slot being moved, placed by which of its keys are here
/// as seen under the locks it then runs with: a key MIGRATE takes away cannot
/// be written back here between the look and the write.
fn run_moving(
    server: &Server,
    session: &mut Session,
    id: usize,
    spec: &'static CommandSpec,
    args: Argv<'_>,
    moving: crate::cluster::route::Moving,
    start: Start,
) -> Outcome {
    let keys = command_keys(spec, &args).unwrap_or_default();
    let mode = if spec.has(spec::WRITE) || spec.has(spec::LOCK_WRITE) {
        LockMode::Write
    } else {
        LockMode::Read
    };
    let mut view = server.db.view_of(keys.iter().copied(), mode);
    let existing = keys.iter().filter(|k| view.peek(k).is_some()).count();
    if let Err(redirect) = moving.decide(keys.len() - existing, existing) {
        drop(view);
        return redirected(server, session, id, spec, redirect);
    }
    view.set_client(session.id());
    run_in(
        server,
        session,
        id,
        spec,
        args,
        ViewSlot::Own(view),
        start,
        None,
    )
}

/// Cluster mode: whether this node serves the command, or which redirect it
/// gets (`crate::cluster::route`). EXEC is placed by every command it queued.
fn cluster_route(
    server: &Server,
    session: &Session,
    spec: &'static CommandSpec,
    args: Argv<'_>,
) -> Result<crate::cluster::route::Placed, crate::cluster::route::Redirect> {
    let asking = session.asking;
    if !spec.has(spec::RUNS_QUEUED) {
        return crate::cluster::route::route(server, std::iter::once((spec, &args[..])), asking);
    }
    let Some(multi) = &session.multi else {
        return Ok(crate::cluster::route::Placed::Here);
    };
    let reg = registry();
    let queued = multi
        .queued
        .iter()
        .filter_map(|q| resolve(reg, q).ok().map(|(_, spec)| (spec, &q[..])));
    crate::cluster::route::route(server, queued, asking)
}

/// A command this node does not serve: the redirect is its reply. Inside MULTI
/// the transaction is flagged to fail; an EXEC redirected ends its transaction
/// with the redirect itself, not EXECABORT (Redis's behaviour).
fn redirected(
    server: &Server,
    session: &mut Session,
    id: usize,
    spec: &CommandSpec,
    redirect: crate::cluster::route::Redirect,
) -> Outcome {
    server.cmdstats[id].rejected_calls.incr();
    if spec.has(spec::RUNS_QUEUED) {
        session.multi = None;
        session.info.multi.store(u64::MAX, Relaxed);
        if !session.watched.is_empty() {
            crate::offload::offload(|| transactions::unwatch_all(server, session));
        }
    } else if let Some(m) = &mut session.multi {
        m.failed = true;
    }
    Outcome::Reply(redirect.to_error().to_frame())
}

/// What a RESP2 connection may still send once subscribed: its replies would
/// otherwise be mistaken for messages.
fn allowed_subscribed(spec: &CommandSpec) -> bool {
    matches!(
        spec.name,
        "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// A command refused before it ran. Inside MULTI the transaction is flagged to
/// fail at EXEC; a refused EXEC ends any transaction and answers EXECABORT with
/// the reason, as Redis does (even without MULTI).
fn reject(
    server: &Server,
    session: &mut Session,
    id: usize,
    spec: &CommandSpec,
    e: CmdError,
) -> Outcome {
    server.cmdstats[id].rejected_calls.incr();
    if !spec.has(spec::RUNS_QUEUED) {
        if let Some(m) = &mut session.multi {
            m.failed = true;
        }
        return Outcome::Reply(e.to_frame());
    }
    session.multi = None;
    session.info.multi.store(u64::MAX, Relaxed);
    if !session.watched.is_empty() {
        // Unwatching locks the watched keys' shards, which a script may hold.
        crate::offload::offload(|| transactions::unwatch_all(server, session));
    }
    let why = match e.to_frame() {
        Frame::Error(text) => String::from_utf8_lossy(&text).into_owned(),
        _ => String::new(),
    };
    Outcome::Reply(
        CmdError::Coded(format!("EXECABORT Transaction discarded because of: {why}")).to_frame(),
    )
}

/// What a command does about other clients' scripts (see `scripting`).
enum Gate {
    /// None holds a shard it needs.
    Go,
    /// One has held a shard it needs past `busy-reply-threshold`: answered BUSY,
    /// as Redis answers every command then.
    Busy,
    /// One holds a shard it needs and has not run that long: the command waits,
    /// parked rather than blocking its worker on the shard lock, and runs again
    /// when a script ends or the threshold passes.
    Wait(Wait),
}

/// `resumed` is the deadline of a blocked command run again: it keeps it while it
/// waits for the script.
fn script_gate(
    server: &Server,
    session: &Session,
    spec: &CommandSpec,
    args: Argv<'_>,
    resumed: Option<Instant>,
) -> Gate {
    use crate::script::Holder;
    let scripts = &server.scripts.running;
    if !scripts.any() {
        return Gate::Go;
    }
    let shards = gate_shards(server, session, spec, args);
    // Allowed while busy and needing no shard (SCRIPT KILL, AUTH, MULTI): nothing
    // of a script's to wait for, not even a script's over every shard, which holds
    // the commands that name no key (a SCRIPT KILL that waited for the script it
    // was sent to stop would wait for good).
    if spec.has(spec::ALLOW_BUSY) && shards.as_deref().is_some_and(<[usize]>::is_empty) {
        return Gate::Go;
    }
    let threshold = Duration::from_millis(server.config.busy_reply_threshold.load(Relaxed));
    // A command being queued waits for nothing (it only hears BUSY).
    let looked = if session.multi.is_some() && !spec.has(spec::NOT_QUEUED) {
        scripts.holder(session.id(), shards.as_deref(), threshold)
    } else {
        scripts.holder_after_waiting(session.id(), shards.as_deref(), threshold)
    };
    let Err(held) = looked else {
        return Gate::Go;
    };
    let busy_at = match held.standing {
        // Commands allowed while busy (UNWATCH, DISCARD …) still need their shards.
        Holder::Busy if !spec.has(spec::ALLOW_BUSY) => return Gate::Busy,
        Holder::Running { busy_at } => busy_at,
        Holder::Busy => Instant::now(),
    };
    Gate::Wait(Wait {
        deadline: resumed,
        ..script_wait(held.wake, busy_at)
    })
}

/// Parks until a script ends, or until `busy_at`; looked at again at least every
/// 100 ms, so a `busy-reply-threshold` lowered meanwhile takes effect.
pub(super) fn script_wait(wake: tokio::sync::watch::Receiver<()>, busy_at: Instant) -> Wait {
    let now = Instant::now();
    Wait {
        wake,
        recheck_at: busy_at.clamp(
            now + Duration::from_millis(1),
            now + Duration::from_millis(100),
        ),
        deadline: None,
    }
}

/// The shards a command will lock (`None`: all of them): its keys', EXEC's queued
/// commands', and the watched keys', which EXEC, DISCARD, UNWATCH and RESET lock
/// to unwatch them.
fn gate_shards(
    server: &Server,
    session: &Session,
    spec: &CommandSpec,
    args: Argv<'_>,
) -> Option<Vec<usize>> {
    let mut shards: Vec<usize> = match spec.has(spec::UNWATCHES) {
        true => session
            .watched
            .iter()
            .map(|(k, _)| server.db.shard_index(k))
            .collect(),
        false => Vec::new(),
    };
    let mut add = |keys: Option<smallvec::SmallVec<[&[u8]; 4]>>| -> Option<()> {
        shards.extend(keys?.iter().map(|k| server.db.shard_index(k)));
        Some(())
    };
    match &session.multi {
        Some(m) if spec.has(spec::RUNS_QUEUED) => {
            for queued in &m.queued {
                if let Ok((_, spec)) = resolve(registry(), queued) {
                    add(command_keys(spec, queued))?;
                }
            }
        }
        _ => add(command_keys(spec, &args))?,
    }
    Some(shards)
}

/// A connection's last plain command, by the exact bytes it was named with: a
/// client sends the same few commands in the same case, and matching ≤ 16 bytes is
/// a tenth of the registry's lowercasing, hashing and probing (callgrind: ~160
/// instructions a pipelined GET).
#[derive(Clone, Copy, Debug, Default)]
pub struct LastCommand {
    name: [u8; LastCommand::MAX_NAME],
    /// Length of `name`; 0 when nothing is remembered.
    len: u8,
    id: u32,
}

impl LastCommand {
    const MAX_NAME: usize = 16;

    fn get(&self, name: &[u8]) -> Option<usize> {
        (self.len != 0 && name == &self.name[..self.len as usize]).then_some(self.id as usize)
    }

    /// Remembers a plain command: not a container (CONFIG, CLIENT …) called bare,
    /// nor one of its subcommands, which resolve on their second argument too.
    fn remember(&mut self, name: &[u8], id: usize, spec: &CommandSpec) {
        let plain = spec.subcommands.is_empty() && !spec.name.contains('|');
        if plain && name.len() <= Self::MAX_NAME {
            self.name[..name.len()].copy_from_slice(name);
            self.len = name.len() as u8;
            self.id = id as u32;
        }
    }
}

/// [`resolve`] through the connection's [`LastCommand`].
fn resolve_cached(
    reg: &Registry,
    last: &mut LastCommand,
    args: &[&[u8]],
) -> Result<(usize, &'static CommandSpec), CmdError> {
    if let Some(id) = last.get(args[0]) {
        let spec = reg.by_id(id);
        if spec.arity_ok(args.len()) {
            return Ok((id, spec));
        }
    }
    let (id, spec) = resolve(reg, args)?;
    last.remember(args[0], id, spec);
    Ok((id, spec))
}

/// Finds the command (and subcommand) for `args` and checks its arity.
fn resolve(
    reg: &Registry,
    args: &[impl AsRef<[u8]>],
) -> Result<(usize, &'static CommandSpec), CmdError> {
    let Some((mut id, mut spec)) = reg.command(args[0].as_ref()) else {
        return Err(unknown_command(args));
    };
    // A container called bare runs its own handler when its arity allows that
    // (COMMAND); otherwise (CLIENT …) it is an arity error, as in Redis.
    if !spec.subcommands.is_empty() && (args.len() >= 2 || !spec.arity_ok(1)) {
        if args.len() < 2 {
            return Err(CmdError::WrongArity(spec.name.to_string()));
        }
        let sub = args[1].as_ref();
        (id, spec) = reg
            .sub(spec, sub)
            .ok_or_else(|| CmdError::unknown_subcommand(spec.name, sub))?;
    }
    if !spec.arity_ok(args.len()) {
        return Err(CmdError::WrongArity(spec.name.to_string()));
    }
    Ok((id, spec))
}

/// Redis's text: the name and up to the first few arguments, each quoted, each
/// followed by a space.
fn unknown_command(args: &[impl AsRef<[u8]>]) -> CmdError {
    let name = args[0].as_ref();
    let mut msg = format!(
        "unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&name[..name.len().min(128)])
    );
    for a in args.iter().skip(1).map(AsRef::as_ref) {
        if msg.len() >= 128 {
            break;
        }
        let a = String::from_utf8_lossy(&a[..a.len().min(128)]);
        msg.push_str(&format!("'{a}' "));
    }
    CmdError::Err(msg)
}

/// The keys of a command, in argument order; `None` for the whole keyspace. Held
/// inline for the handful of keys nearly every command has.
pub(crate) fn command_keys<'x>(
    spec: &CommandSpec,
    args: &'x [impl AsRef<[u8]>],
) -> Option<smallvec::SmallVec<[&'x [u8]; 4]>> {
    match spec.keys {
        // One key at a fixed place (GET, SET, SISMEMBER …): most requests.
        Keys::Range { first, last, .. } if first == last && first > 0 => {
            Some(match args.get(first as usize) {
                Some(arg) => smallvec::smallvec![arg.as_ref()],
                None => smallvec::SmallVec::new(),
            })
        }
        // The common shape, without collecting key positions first.
        Keys::Range { first, last, step } if last < 0 || last >= first => {
            let end = if last < 0 {
                args.len() as i64 + last as i64
            } else {
                last as i64
            };
            Some(
                (first as i64..=end.min(args.len() as i64 - 1))
                    .step_by(step.max(1) as usize)
                    .map(|i| args[i as usize].as_ref())
                    .collect(),
            )
        }
        _ => spec
            .key_indices(args)
            .map(|idx| idx.iter().map(|&i| args[i].as_ref()).collect()),
    }
}

/// What a command starts with besides its arguments and locks.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Start {
    /// The deadline of a parked command that runs again.
    pub resumed: Option<Instant>,
    /// Memory stayed over after the eviction before it ([`Ctx::oom_at_start`]).
    pub oom: bool,
}

/// Runs a resolved command; `exec_view` is the transaction's view inside EXEC.
pub(crate) fn run<'a, 'v>(
    server: &'a Server,
    session: &'v mut Session,
    id: usize,
    spec: &'static CommandSpec,
    args: Argv<'v>,
    exec_view: Option<&'v mut View<'a>>,
    start: Start,
) -> Outcome {
    let view = match exec_view {
        Some(v) => ViewSlot::Exec(v),
        None => ViewSlot::Unlocked,
    };
    run_in(server, session, id, spec, args, view, start, None)
}

/// [`run`] with the view the command starts with: the transaction's, its own
/// already taken ([`run_moving`]), or none yet; and the client's output, when
/// the reply may be written into it directly ([`Ctx::view_and_output`]).
#[allow(clippy::too_many_arguments)]
fn run_in<'a, 'v>(
    server: &'a Server,
    session: &'v mut Session,
    id: usize,
    spec: &'static CommandSpec,
    args: Argv<'v>,
    view: ViewSlot<'a, 'v>,
    start: Start,
    output: Option<&'v mut BytesMut>,
) -> Outcome {
    let began = crate::clock::Stamp::now();
    let in_exec = matches!(view, ViewSlot::Exec(_));
    // Inside EXEC or a script, CLIENT LIST goes on showing exec or eval, as Redis's.
    if !in_exec {
        session.info.last_cmd.store(id, Relaxed);
    }
    let track_reads = spec.has(spec::READONLY)
        && !spec.has(spec::PUBSUB)
        && session
            .tracking
            .as_deref()
            .is_some_and(|t| t.remembers_reads());
    let mut ctx = Ctx {
        server,
        session,
        spec,
        args,
        view,
        revoke_leases: spec.has(spec::WRITE),
        keeps_leases: false,
        track_reads,
        start,
        then: Then::Reply,
        earlier: Vec::new(),
        output,
    };
    let result = (spec.handler)(&mut ctx, &args);
    let then = ctx.then;
    if let ViewSlot::Own(v) = &ctx.view {
        server.absorb_view_stats(v);
    }
    // Releases this command's locks before the rest of the stats work. Dropped
    // in place: moving the view out to drop it copied its ~200 bytes.
    ctx.view = ViewSlot::Unlocked;
    if let Then::Park(wait) = then {
        // Counted once, when it answers (as Redis counts a blocked command).
        return Outcome::Park(wait);
    }
    let stats = &server.cmdstats[id];
    if matches!(result, Err(CmdError::Busy)) && matches!(then, Then::Reply) && !in_exec {
        // A script holds its shards, found by the command itself (EVAL registers
        // as running or hears BUSY in one step, past the script gate): refused,
        // as the gate's BUSY is. Inside EXEC it is one of the transaction's
        // failed calls, as Redis counts errors there.
        stats.rejected_calls.incr();
        return Outcome::Reply(CmdError::Busy.to_frame());
    }
    stats.calls.incr();
    let nanos = began.elapsed_ns();
    stats.nanos.add(nanos);
    if !in_exec {
        // Inside EXEC or a script, the transaction's or script's own time
        // counts it already.
        ctx.session.busy_ns += nanos;
    }
    server.stats.total_commands_processed.incr();
    crate::observe::after_command(server, &ctx.session.info, id, spec, &args, nanos);
    let reply = result.unwrap_or_else(|e| {
        stats.failed_calls.incr();
        e.to_frame()
    });
    if matches!(then, Then::Reply) && !ctx.earlier.is_empty() {
        let mut replies = ctx.earlier;
        replies.push(reply);
        return Outcome::Replies(replies);
    }
    match then {
        Then::Reply => Outcome::Reply(reply),
        Then::Written => Outcome::Written,
        Then::Close { reply: true } => Outcome::Close(Some(reply)),
        Then::Close { reply: false } => Outcome::Close(None),
        Then::Park(_) => unreachable!("returned above"),
    }
}

// Argument parsing shared by the families.

/// Parses a Redis integer argument (`string2ll` rules: no spaces, no `+`, fits i64).
pub fn parse_i64(arg: &[u8]) -> Result<i64, CmdError> {
    parse_i64_opt(arg).ok_or(CmdError::NotInteger)
}

/// [`parse_i64`] without the error.
pub fn parse_i64_opt(arg: &[u8]) -> Option<i64> {
    // The same rules as the protocol's own header numbers.
    relcache_protocol::resp::parse_strict_i64(arg)
}

/// Case-insensitive comparison of an argument with an ASCII keyword.
pub fn eq_ic(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Arguments from string literals, for the families' unit tests.
#[cfg(test)]
pub(crate) fn test_args<'a>(v: &[&'a str]) -> Vec<&'a [u8]> {
    v.iter().map(|s| s.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server with no listener and one client's session on it.
    fn server_and_session() -> (Server, Session) {
        use std::net::{Ipv4Addr, SocketAddr};
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6379));
        let shutdown = tokio_util::sync::CancellationToken::new();
        let server = Server::new(Default::default(), addr, shutdown.clone());
        let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 40000));
        let info = server
            .clients
            .register(peer, addr, &shutdown, usize::MAX)
            .expect("no client limit");
        (server, Session::new(info, true))
    }

    /// The checks' integer replies take the direct path when given an output and
    /// come back as frames when not, with the same bytes either way.
    #[test]
    fn integer_replies_go_into_the_output_when_they_may() {
        let (server, mut session) = server_and_session();
        let run = |session: &mut Session, args: &[&str], out: Option<&mut BytesMut>| {
            execute(
                &server,
                session,
                Argv::new(&test_args(args), &[]),
                None,
                out,
            )
        };
        let mut out = BytesMut::new();
        assert!(matches!(
            run(&mut session, &["SADD", "s", "1", "2"], Some(&mut out)),
            Outcome::Written
        ));
        for (args, reply) in [
            (&["SISMEMBER", "s", "2"][..], 1),
            (&["SCARD", "s"], 2),
            (&["EXISTS", "s", "s", "t"], 2),
            (&["IDSET.EXISTS", "s", "3"], 0),
            (&["SREM", "s", "1", "3"], 1),
            (&["TTL", "s"], -1),
            (&["PTTL", "nokey"], -2),
        ] {
            out.clear();
            let written = run(&mut session, args, Some(&mut out));
            assert!(matches!(written, Outcome::Written), "{args:?}");
            assert_eq!(&out[..], format!(":{reply}\r\n").as_bytes(), "{args:?}");
            if args[0] == "SREM" {
                // Back as it was, for the second run.
                run(&mut session, &["SADD", "s", "1"], None);
            }
            let returned = run(&mut session, args, None);
            match returned {
                Outcome::Reply(Frame::Integer(n)) => assert_eq!(n, reply, "{args:?}"),
                _ => panic!("{args:?}: not an integer frame"),
            }
        }
        out.clear();
        assert!(matches!(
            run(&mut session, &["INCR", "c"], Some(&mut out)),
            Outcome::Written
        ));
        assert!(matches!(
            run(&mut session, &["DEL", "c", "c"], Some(&mut out)),
            Outcome::Written
        ));
        assert_eq!(&out[..], b":1\r\n:1\r\n");
        // A missing key's null and an error are frames even with an output.
        out.clear();
        let missing = run(
            &mut session,
            &["IDSET.EXISTS", "nokey", "1"],
            Some(&mut out),
        );
        assert!(matches!(missing, Outcome::Reply(Frame::Null)));
        assert!(out.is_empty());
        let wrong = run(&mut session, &["SISMEMBER", "s", "1", "x"], Some(&mut out));
        assert!(matches!(wrong, Outcome::Reply(Frame::Error(_))));
        assert!(out.is_empty());
    }

    #[test]
    fn integers_follow_string2ll() {
        assert_eq!(parse_i64(b"42"), Ok(42));
        assert_eq!(parse_i64(b"-42"), Ok(-42));
        assert_eq!(parse_i64(b"0"), Ok(0));
        assert_eq!(parse_i64(b"9223372036854775807"), Ok(i64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.0",
            b"9223372036854775808",
            b"abc",
        ] {
            assert_eq!(parse_i64(bad), Err(CmdError::NotInteger), "{:?}", bad);
        }
    }

    #[test]
    fn registry_is_case_insensitive_and_resolves_subcommands() {
        let r = registry();
        let (_, get) = r.get(b"GeT").expect("get is registered");
        assert_eq!(get.name, "get");
        let (_, client) = r.get(b"client").unwrap();
        let (_, sub) = r.sub(client, b"SETNAME").unwrap();
        assert_eq!(sub.name, "client|setname");
        assert!(r.get(&[b'x'; 100]).is_none());
        // By its full name for COMMAND INFO, but never as a request's command.
        assert!(r.get(b"config|get").is_some());
        assert!(r.command(b"config|get").is_none());
    }

    #[test]
    fn unknown_command_text_matches_redis() {
        let args: Vec<Bytes> = ["foo", "a", "b"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        assert_eq!(
            unknown_command(&args).to_string(),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
    }
}
