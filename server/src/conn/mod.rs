//! One client connection: read, parse every complete request, execute; then, when
//! its loop says ([`Conn::flush`]), write once.
//!
//! The loop keeps reading while replies wait to be written, as Redis does, so a
//! client's pending output is a real buffer with real limits: past the hard
//! `client-output-buffer-limit`, or over the soft one for too long, the client is
//! disconnected, and nobody else notices. Input is bounded too: a request larger than
//! `proto-max-bulk-len` allows, or a query buffer past `client-query-buffer-limit`,
//! closes this connection only. A framing error gets Redis's `-ERR Protocol error`
//! and a close; a bad *command* gets an error reply and the connection stays open.
//!
//! An idle connection holds no buffer: every buffer, and the argument tables of a
//! request of many arguments, are given back once empty (Redis 7 frees idle query
//! buffers in its cron; here it happens at the end of each batch, and for the
//! reply buffer once its replies are written), small ones to the
//! thread's spares ([`crate::spare`]), where its next connection with input reads. What the
//! buffers hold is published as the client's memory ([`crate::client_memory`]),
//! apart from data.
//!
//! [`Conn`] is a connection's state and what it does between two waits; the
//! waiting is its loop's. A connection is served by an event loop of its core
//! ([`crate::evloop`]), which waits for its socket, its kill, its message
//! queue, a MONITOR's feed and its parked command's signals; one that broke the
//! protocol gets its lingering close from a task of that core's runtime
//! ([`task`]). What each request asks of it comes back from [`cmd::dispatch`] as a
//! [`Flow`], and a command that has to wait is kept and woken by
//! [`crate::blocking`].

mod socket;
pub mod task;

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use relcache_protocol::resp::{Frame, Limits, Request, RequestDecoder};
use tokio::time::Instant;

use crate::blocking::{self, Parked};
use crate::client_memory::{self, Footprint};
use crate::clock::Stamp;
use crate::cmd::{self, Argv, Flow};
use crate::config::OutputLimit;
use crate::observe::monitor;
use crate::offload::{offload, LARGE_ARGS, LARGE_REQUEST};
use crate::output::Output;
use crate::pubsub;
use crate::server::Server;
use crate::session::{ClientInfo, Session};
use crate::spare;

pub(crate) use socket::Socket;

const READ_CHUNK: usize = 16 * 1024;
/// Most room made at once for the rest of a big argument: the buffer grows straight
/// to what a 20,000-id table needs instead of doubling from 16 KB (four copies), while
/// a declared length or argument count alone can make a connection allocate at
/// most this much ahead of the bytes.
const MAX_READ_AHEAD: usize = 1024 * 1024;
/// Arguments a request may have for the list of them to be made on the stack.
const INLINE_ARGS: usize = 16;
/// Past this much pending output mid-batch, try to write before executing more, so
/// a client that reads promptly never makes us hold a large buffer.
const EAGER_FLUSH: usize = 64 * 1024;
/// Redis's `PROTO_REPLY_CHUNK_BYTES`: the size of a client's fixed reply buffer.
const REPLY_CHUNK: usize = 16 * 1024;
/// How long a pass may run one connection's requests before it lets the loop's
/// other connections have theirs: a pipeline of moderately heavy commands
/// (each well under the offload threshold, hundreds of them in one read) would
/// otherwise hold every other client of the loop for as long as they take.
/// Redis has no such bound: it runs all that a client's read brought at once.
/// The time is the commands' own, as their statistics measure it
/// ([`Session::busy_ns`]; a transaction's or a script's as a whole): a pass of
/// cheap requests never comes near it, and looking costs nothing the command
/// did not already pay.
const PASS_BUDGET_NS: u64 = 1_000_000;

/// Why a connection ends.
pub(crate) enum Closed {
    /// Client went away, QUIT, idle timeout, kill or shutdown: nothing to report.
    Normal,
    Io(io::Error),
    /// We decided to drop the client; the reason goes to the log.
    Limit(&'static str),
    /// The client broke the protocol: the error reply is in the output, to be
    /// sent before a lingering close ([`task::lingering_close`]).
    Protocol,
}

/// A pass that ran its requests, its replies not yet written: what
/// [`Conn::flush`] needs of it.
#[must_use = "the replies are written by Conn::flush"]
pub(crate) struct Replies {
    /// Requests were held back, the output being over the soft limit.
    held: bool,
}

/// What a pass over the buffered requests leaves to do.
#[derive(PartialEq, Eq, Debug)]
pub(crate) enum Pass {
    /// Wait for input, for the socket to drain, or for a reason to stop.
    Wait,
    /// Requests are left in the buffer: the pass ran out of time, or they were
    /// held back while the output was over the soft limit and the write brought
    /// it under. Run them again soon, without waiting for input that may never
    /// come (but after the loop's other clients).
    Again,
}

/// A connection's state between two waits: its session, its buffers and what it
/// has published about them.
pub(crate) struct Conn {
    pub(crate) session: Session,
    rbuf: BytesMut,
    wbuf: Output,
    /// The request being run: its bytes, and where its arguments lie in them.
    request: Request,
    decoder: RequestDecoder,
    published: Footprint,
    /// Reads and writes both count, as Redis's `lastinteraction` does: a client
    /// that has just been answered (a parked command that ran at last, say) is not
    /// idle.
    last_interaction: Stamp,
    /// Whether this pass's requests came with the read just made: its time then
    /// stands for the write's too (the clock is read once per round trip).
    read_since_write: bool,
    over_soft_since: Option<Instant>,
    closing: bool,
    /// A blocking command waiting for its key; requests behind it wait with it, so
    /// replies stay in order.
    parked: Option<Parked>,
    /// Parks so far: which park a loop's registered signals are for.
    parks: u64,
    /// The last pass ran out of time with requests left in the buffer: they
    /// run before any more is read, so a client pipelining faster than its
    /// requests run is held back by TCP, not by its query buffer's limit.
    yielded: bool,
}

impl Conn {
    pub(crate) fn new(server: &Server, info: Arc<ClientInfo>) -> Conn {
        let authenticated = server.config.requirepass.read().is_none();
        let session = Session::new(info, authenticated);
        let decoder = RequestDecoder::new(limits(server, &session));
        Conn {
            session,
            rbuf: BytesMut::new(),
            wbuf: Output::default(),
            request: Request::default(),
            decoder,
            published: Footprint::default(),
            last_interaction: Stamp::now(),
            read_since_write: false,
            over_soft_since: None,
            closing: false,
            parked: None,
            parks: 0,
            yielded: false,
        }
    }

    pub(crate) fn info(&self) -> &Arc<ClientInfo> {
        &self.session.info
    }

    /// Whether this connection is a MONITOR, fed every command others run.
    pub(crate) fn is_monitor(&self) -> bool {
        self.session.monitor.is_some()
    }

    /// Moves the MONITOR lines waiting into the output, or registers `cx`'s
    /// waker for the next one; true if it moved any, or the feed ended.
    pub(crate) fn poll_monitor(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        match monitor::poll_next(&mut self.session.monitor, cx) {
            std::task::Poll::Ready(line) => {
                monitor::deliver(line, &mut self.session.monitor, self.wbuf.buf());
                true
            }
            std::task::Poll::Pending => false,
        }
    }

    /// While a parked command waits for its signals: which park it is (a loop
    /// registers the signals of each park once).
    pub(crate) fn park_waiting(&self) -> Option<u64> {
        blocking::waiting(&self.parked).then_some(self.parks)
    }

    /// The parked command's wake-up and CLIENT UNBLOCK's, as futures for a loop
    /// to poll with its own wakers; for a connection [`park_waiting`](Self::park_waiting).
    pub(crate) fn park_signals(&self) -> Option<[blocking::Signal; 2]> {
        let parked = self.parked.as_ref()?;
        Some(blocking::signals(parked, &self.session.info))
    }

    /// The parked command's signal fired: it runs again in the next pass.
    pub(crate) fn wake_parked(&mut self) {
        blocking::wake(&mut self.parked);
    }

    /// CLIENT UNBLOCK's signal fired: the parked command answers now, if the
    /// request is for it.
    pub(crate) fn unblock(&mut self, server: &Server) {
        blocking::on_unblock(server, &self.session, &mut self.parked, self.wbuf.buf());
    }

    /// Its message queue, as senders see it (which queue a waker was
    /// registered with), if messages can come to it unasked: made by HELLO 3 (a
    /// RESP3 client takes the invalidations another client redirects to it), a
    /// SUBSCRIBE or CLIENT TRACKING.
    pub(crate) fn queue(&self) -> Option<&Arc<pubsub::Subscriber>> {
        self.session.pubsub.as_ref().map(|s| s.me())
    }

    /// Moves the messages waiting in the queue into the output, ahead of
    /// whatever this pass answers.
    pub(crate) fn take_messages(&mut self) {
        pubsub::drain(&mut self.session, self.wbuf.buf());
    }

    /// Registers `cx`'s waker for the next message, or moves the messages that
    /// are already waiting into the output and says so: the connection then has
    /// output to write instead of a wait.
    pub(crate) fn poll_messages(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let Some(msg) = pubsub::poll_next(&mut self.session, cx) else {
            return false;
        };
        pubsub::deliver(Some(msg), &mut self.session, self.wbuf.buf());
        true
    }

    /// Whether the next wait is for input: not once the connection is closing,
    /// nor while requests a pass ran out of time for are left to run.
    pub(crate) fn wants_read(&self) -> bool {
        !self.closing && !self.yielded
    }

    /// Whether the next wait is for the socket to take output.
    pub(crate) fn wants_write(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// Runs the parked command again if it was woken or its time is up, then
    /// every complete request in the buffer; their replies wait in the output
    /// for [`flush`](Self::flush) (only a batch's output past 64 KB is written
    /// as it runs).
    pub(crate) fn run(&mut self, server: &Server, sock: &impl Socket) -> Result<Replies, Closed> {
        let info = self.session.info.clone();
        if let Some((args, deadline)) = blocking::take_due(&mut self.parked) {
            let (session, wbuf) = (&mut self.session, &mut self.wbuf);
            let flow = cmd::with_owned(&args, |argv| {
                cmd::dispatch(server, session, argv, wbuf, deadline)
            });
            let wait = match flow {
                Flow::Park(wait) => Some(wait),
                // A lease command run again never asks to close.
                Flow::Continue | Flow::Close => None,
            };
            self.parked = blocking::rerun_ended(server, &info, args, wait);
            self.parks += u64::from(self.parked.is_some());
        }
        self.decoder.set_limits(limits(server, &self.session));
        let (mut held, mut yielded) = (false, false);
        let budget_end = self.session.busy_ns + PASS_BUDGET_NS;
        while !self.closing && self.parked.is_none() {
            if held_back(output_limit(server, &self.session).soft, &self.wbuf) {
                held = true;
                break;
            }
            match decode(&mut self.decoder, &mut self.rbuf, &mut self.request) {
                Ok(true) => {
                    self.execute(server, sock)?;
                    // Past its time, with requests left, on a thread that
                    // holds the loop (after a hand-over it holds nobody up).
                    if self.session.busy_ns > budget_end
                        && !self.rbuf.is_empty()
                        && crate::evloop::holds_loop()
                    {
                        yielded = true;
                        break;
                    }
                }
                Ok(false) => break,
                Err(e) => {
                    Frame::error(format!("ERR {e}")).encode(self.session.proto, self.wbuf.buf());
                    // The error quotes a byte of the request (`got 'X'`): user
                    // data, which Redis 7.4's `hide-user-data-from-log` keeps out.
                    if server.config.hide_user_data_from_log.load(Relaxed) {
                        tracing::debug!(client = info.id, "protocol error, closing");
                    } else {
                        tracing::debug!(client = info.id, error = %e, "protocol error, closing");
                    }
                    return Err(Closed::Protocol);
                }
            }
        }

        if self.rbuf.is_empty() {
            // No request under way: the buffer (which may still be part of the
            // last large request's allocation) and the argument tables of a
            // request of many arguments go, so an idle connection holds
            // nothing. A small buffer goes to the thread's spares for the next
            // connection with input. Before the write, so a client that has
            // its reply finds them gone.
            spare::give_bytes(std::mem::take(&mut self.rbuf));
            if self.request.scratch_bytes() > 0 {
                self.request = Request::default();
            }
            if self.decoder.scratch_bytes() > 0 {
                self.decoder = RequestDecoder::new(limits(server, &self.session));
            }
        }
        // What the batch left on the input side (and in MULTI's queue) is published
        // before its replies go out, so a client that has its reply sees it; the
        // reply buffer is published after the write, which usually frees it (a
        // batch of small requests thus publishes nothing).
        // The replies wait for the round's other connections before they go:
        // past Redis's reply chunk they are published now, so they count as
        // this client's and not as data meanwhile.
        let mut now = self.footprint();
        if self.wbuf.len() <= REPLY_CHUNK {
            (now.output_len, now.output_alloc) =
                (self.published.output_len, self.published.output_alloc);
        }
        client_memory::publish(server, &info, &mut self.published, now);
        self.yielded = yielded;
        Ok(Replies { held })
    }

    /// Writes the replies of a pass ([`run`](Self::run)) in one go, and checks
    /// the output against its limits.
    pub(crate) fn flush(
        &mut self,
        server: &Server,
        sock: &impl Socket,
        ran: Replies,
    ) -> Result<Pass, Closed> {
        if self.wbuf.is_empty() {
            // Taken for a reply that did not come (the command was parked).
            self.wbuf.release_if_empty();
        } else {
            self.write(server, sock)?;
            if !self.read_since_write {
                self.last_interaction = Stamp::now();
                let ticks = self.last_interaction.ticks();
                self.session.info.last_active.store(ticks, Relaxed);
            }
        }
        self.read_since_write = false;
        if self.closing && self.wbuf.is_empty() {
            return Err(Closed::Normal);
        }
        self.check_output(server)?;
        let now = self.footprint();
        client_memory::publish(server, &self.session.info, &mut self.published, now);
        if self.yielded
            || (ran.held && !held_back(output_limit(server, &self.session).soft, &self.wbuf))
        {
            return Ok(Pass::Again);
        }
        Ok(Pass::Wait)
    }

    /// Runs the request just decoded into `request`.
    #[inline]
    fn execute(&mut self, server: &Server, sock: &impl Socket) -> Result<(), Closed> {
        let session = &mut self.session;
        let authenticated = session.authenticated;
        let size = self.request.size();
        if size > READ_CHUNK {
            // Its bytes are this client's until a command stores them: published
            // first, so making room for it under maxmemory does not take them for
            // data. (A smaller request counts as data for the moment it runs: the
            // slack is a read.)
            let now = footprint(
                &self.rbuf,
                &self.wbuf,
                &self.request,
                &self.decoder,
                session,
            );
            client_memory::publish(server, &session.info, &mut self.published, now);
        }
        // After that: the reply buffer is not the request's memory.
        self.wbuf.buf();
        // Past a few million arguments even listing them takes milliseconds.
        let request = &self.request;
        let large = size.max(request.wire_len()) > LARGE_REQUEST || request.len() > LARGE_ARGS;
        let (flow, parked) = if large {
            let (request, rbuf, wbuf) = (&mut self.request, &mut self.rbuf, &mut self.wbuf);
            offload(|| {
                let ran = run_request(server, session, request, rbuf, wbuf);
                // Its table of places and its read buffer (80 MB and 70 MB for
                // a 5M-id SADD) are let go here too, off the loop.
                request.consume(rbuf);
                if rbuf.is_empty() {
                    *rbuf = BytesMut::new();
                }
                ran
            })
        } else {
            let ran = run_request(server, session, &self.request, &self.rbuf, &mut self.wbuf);
            self.request.consume(&mut self.rbuf);
            ran
        };
        if session.authenticated != authenticated {
            // AUTH, HELLO … AUTH or RESET: the next request, maybe already in the
            // buffer, is read under the new state's limits.
            self.decoder.set_limits(limits(server, session));
        }
        match (flow, parked) {
            (Flow::Continue, _) => {}
            (Flow::Close, _) => self.closing = true,
            (Flow::Park(wait), Some(args)) => {
                self.parked = Some(blocking::park(server, &session.info, args, wait));
                self.parks += 1;
                return Ok(());
            }
            (Flow::Park(_), None) => unreachable!("a parked command's arguments are kept"),
        }
        if self.wbuf.len() >= EAGER_FLUSH {
            self.write(server, sock)?;
        }
        // Between requests the limits matter only once the output has outgrown
        // what Redis keeps in a client's fixed reply buffer (it checks them as
        // replies spill past it); after the batch they are checked whatever the
        // size.
        if self.wbuf.len() > REPLY_CHUNK {
            self.check_output(server)?;
        }
        Ok(())
    }

    /// Writes as much of the output as the socket takes now.
    fn write(&mut self, server: &Server, sock: &impl Socket) -> Result<(), Closed> {
        let written = self.wbuf.write_to(sock).map_err(Closed::Io)?;
        server.stats.total_net_output_bytes.add(written as u64);
        // The client took some of its output: it is reading, so the soft limit's
        // clock starts again. The soft limit catches clients that stop reading,
        // not clients that read a large answer slowly.
        if written > 0 {
            if let Some(since) = &mut self.over_soft_since {
                *since = Instant::now();
            }
        }
        Ok(())
    }

    /// Hands over what is already computed, as far as the socket takes it: for a
    /// connection killed or shut down.
    pub(crate) fn write_last(&mut self, server: &Server, sock: &impl Socket) {
        let _ = self.write(server, sock);
    }

    /// Checks the output against its limits; past them, drops it and says why.
    fn check_output(&mut self, server: &Server) -> Result<(), Closed> {
        match output_over_limit(server, &self.session, &self.wbuf, &mut self.over_soft_since) {
            None => Ok(()),
            Some(why) => {
                self.wbuf.discard();
                Err(Closed::Limit(why))
            }
        }
    }

    /// Reads what the socket has (once), and checks the query buffer's limit.
    pub(crate) fn read(&mut self, server: &Server, sock: &impl Socket) -> Result<(), Closed> {
        match try_read(server, sock, &mut self.rbuf, &mut self.decoder) {
            Ok(0) => return Err(Closed::Normal),
            Ok(_) => {
                self.last_interaction = Stamp::now();
                self.read_since_write = true;
                let ticks = self.last_interaction.ticks();
                self.session.info.last_active.store(ticks, Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Closed::Io(e)),
        }
        let unparsed = self.rbuf.len() + self.decoder.big_buffered().0;
        if over_query_limit(server, &self.session, unparsed) {
            server.stats.client_query_buffer_limit_disconnections.incr();
            return Err(Closed::Limit(
                "closing client that reached max query buffer length",
            ));
        }
        Ok(())
    }

    /// When this connection next needs looking at if nothing happens on its
    /// socket: its idle timeout, the end of its time over the soft output
    /// limit, or its parked command's recheck. A blocked client, a subscriber
    /// and a MONITOR are not idle: Redis exempts them from `timeout` too (they
    /// wait for the server, not it for them).
    /// `now` is read only if there is an idle timeout, and is the caller's: an
    /// idle deadline not yet passed comes out after it, one that has comes out
    /// as it (a passed recheck comes out as itself, before it).
    pub(crate) fn deadline(
        &self,
        server: &Server,
        now: impl FnOnce() -> Instant,
    ) -> Option<Instant> {
        let idle = self.idle_timeout(server).map(|timeout| {
            let idle = Duration::from_nanos(self.last_interaction.elapsed_ns());
            now() + timeout.saturating_sub(idle)
        });
        let soft = self.over_soft_since.map(|since| {
            since + Duration::from_secs(output_limit(server, &self.session).soft_seconds)
        });
        let recheck = self
            .parked
            .as_ref()
            .map(|p| Instant::from_std(p.recheck_at()));
        idle.into_iter().chain(soft).chain(recheck).min()
    }

    /// Whether the client has been idle past `timeout`.
    pub(crate) fn idle_expired(&self, server: &Server) -> bool {
        self.idle_timeout(server)
            .is_some_and(|t| Duration::from_nanos(self.last_interaction.elapsed_ns()) >= t)
    }

    fn idle_timeout(&self, server: &Server) -> Option<Duration> {
        let timeout = server.config.timeout.load(Relaxed);
        if timeout == 0
            || self.parked.is_some()
            || self.session.monitor.is_some()
            || pubsub::subscribed(&self.session)
        {
            return None;
        }
        Some(Duration::from_secs(timeout))
    }

    #[inline]
    fn footprint(&self) -> Footprint {
        footprint(
            &self.rbuf,
            &self.wbuf,
            &self.request,
            &self.decoder,
            &self.session,
        )
    }

    /// Closes a connection one of whose commands panicked, as any closing
    /// connection (its subscriptions, tracking, blocked count and watches go
    /// with it); should that panic too, it is at least killed and unlisted.
    pub(crate) fn finish_after_panic(&mut self, server: &Server) {
        let info = self.session.info.clone();
        tracing::error!(client = info.id, "a command panicked: closing its client");
        let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.finish(server, Closed::Normal)
        }));
        if finished.is_err() {
            info.kill.cancel();
            server.clients.unregister(info.id);
        }
    }

    /// Lets go of the connection's place on the server once it has closed, and
    /// says why it closed, if that is worth saying.
    pub(crate) fn finish(&mut self, server: &Server, closed: Closed) {
        // The buffers go first (a big argument half read may be 100 MB): they
        // are the client's memory, not data, only until it is unregistered, and
        // counted as data after that they could make room for themselves by
        // evicting keys.
        drop(std::mem::take(&mut self.rbuf));
        self.request = Request::default();
        self.decoder = RequestDecoder::new(limits(server, &self.session));
        self.wbuf.discard();
        let info = self.session.info.clone();
        match closed {
            Closed::Normal | Closed::Protocol => {}
            Closed::Io(e) => tracing::debug!(client = info.id, error = %e, "connection error"),
            Closed::Limit(why) => tracing::warn!(client = info.id, addr = %info.addr, "{why}"),
        }
        blocking::set_blocked(server, &info, false);
        // Closing from here on: whoever redirects invalidations to this connection
        // learns the redirect is broken once its queue goes, below.
        info.kill.cancel();
        let session = &mut self.session;
        crate::tracking::disable(server, session);
        pubsub::leave(server, session);
        if session.watched.is_empty() || !server.scripts.running.any() {
            cmd::discard_session_state(server, session);
        } else {
            // Unwatching locks the watched keys' shards, which a script may hold
            // for as long as it runs.
            offload(|| cmd::discard_session_state(server, session));
        }
        server.clients.unregister(info.id);
    }
}

/// Redis 7.4's query buffer check, made after each read: a MULTI's queued
/// commands have not run yet, so they count as unread input, which keeps a
/// transaction from growing without bound; and a client that still has to
/// authenticate may hold at most 1 MB.
fn over_query_limit(server: &Server, session: &Session, unparsed: usize) -> bool {
    let held = (unparsed + session.multi.as_ref().map_or(0, |m| m.bytes)) as u64;
    held > server.config.client_query_buffer_limit.load(Relaxed)
        || (!session.authenticated && held > 1024 * 1024)
}

/// The decoder's limits for this client now: `proto-max-bulk-len`, and Redis 7's
/// tighter ones until a client that must authenticate has done so.
pub(crate) fn limits(server: &Server, session: &Session) -> Limits {
    Limits {
        max_bulk_len: server.config.proto_max_bulk_len.load(Relaxed) as usize,
        unauthenticated: !session.authenticated,
        ..Limits::default()
    }
}

/// What this connection holds now, `request` being the one decoded and not yet
/// run, if any: its arguments' bytes are `argv-mem`, no longer query buffer
/// (the framing around them still is, as it is still in the read buffer).
#[inline]
fn footprint(
    rbuf: &BytesMut,
    wbuf: &Output,
    request: &Request,
    decoder: &RequestDecoder,
    session: &Session,
) -> Footprint {
    // A big argument's data, read into a buffer of its own, is query buffer too.
    let (big_len, big_room) = decoder.big_buffered();
    Footprint {
        query_len: rbuf.len().saturating_sub(request.data_in_buffer()) + big_len,
        query_free: rbuf.capacity() - rbuf.len() + big_room,
        argv: request.size(),
        scratch: request.scratch_bytes() + decoder.scratch_bytes() + arg_list_bytes(request),
        multi: session.multi.as_ref().map_or(0, |m| m.bytes),
        output_len: wbuf.len(),
        output_alloc: wbuf.allocated(),
        pubsub: pubsub::queued(session),
    }
}

/// Runs `request`, decoded from `rbuf`, with its arguments listed on the stack
/// (on the heap past [`INLINE_ARGS`]); a command that waits gets them back,
/// owned, to keep.
#[inline]
fn run_request(
    server: &Server,
    session: &mut Session,
    request: &Request,
    rbuf: &[u8],
    wbuf: &mut Output,
) -> (Flow, Option<Vec<bytes::Bytes>>) {
    let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
    let many: Vec<&[u8]>;
    let list = if request.len() <= INLINE_ARGS {
        for (slot, arg) in inline.iter_mut().zip(request.args(rbuf)) {
            *slot = arg;
        }
        &inline[..request.len()]
    } else {
        many = request.args(rbuf).collect();
        &many[..]
    };
    let argv = Argv::new(list, request.owned());
    let flow = cmd::dispatch(server, session, argv, wbuf, None);
    let parked = matches!(flow, Flow::Park(_)).then(|| argv.to_owned_vec());
    (flow, parked)
}

/// Heap bytes the list of a request's arguments takes while it runs: none for
/// a request of up to [`INLINE_ARGS`] arguments, listed on the stack.
fn arg_list_bytes(request: &Request) -> usize {
    match request.len() {
        n if n > INLINE_ARGS => n * std::mem::size_of::<&[u8]>(),
        _ => 0,
    }
}

/// One read: into the buffer of a big argument under way, which becomes the
/// stored value without a copy ([`RequestDecoder::big_buffer`]), or into `rbuf`,
/// sized for what the request under way is expected to need
/// ([`RequestDecoder::bytes_wanted`]).
fn try_read(
    server: &Server,
    stream: &impl Socket,
    rbuf: &mut BytesMut,
    decoder: &mut RequestDecoder,
) -> io::Result<usize> {
    if let Some(big) = decoder.big_buffer() {
        let n = stream.recv_spare(big.spare_capacity_mut())?;
        // SAFETY: `recv_spare` initialised the first `n` bytes of the spare capacity.
        unsafe { big.set_len(big.len() + n) };
        server.stats.total_net_input_bytes.add(n as u64);
        return Ok(n);
    }
    let wanted = decoder.bytes_wanted(rbuf.len());
    // Room for the rest of the request under way as far as it is expected, and
    // at least a chunk; but a large buffer that already has room for the
    // expected rest is not grown by a chunk more: that regrowth copied a whole
    // 20,000-id SADD for its last few kilobytes.
    let room = if wanted > 0 && rbuf.len() > READ_CHUNK {
        wanted.min(MAX_READ_AHEAD)
    } else {
        wanted.clamp(READ_CHUNK, MAX_READ_AHEAD)
    };
    if rbuf.capacity() == 0 {
        // No request under way: read into one of the thread's spare buffers.
        *rbuf = spare::take_bytes();
    } else if rbuf.capacity() - rbuf.len() < room {
        // Part of a request is here: the rest goes straight after it. Growing a
        // large buffer copies it (64 MB of a 5M-id SADD): off the worker.
        let room = room.max(READ_CHUNK);
        if rbuf.len() > LARGE_REQUEST {
            offload(|| rbuf.reserve(room));
        } else {
            rbuf.reserve(room);
        }
    }
    let n = stream.recv_spare(rbuf.spare_capacity_mut())?;
    // SAFETY: `recv_spare` initialised the first `n` bytes of the spare capacity.
    unsafe { rbuf.set_len(rbuf.len() + n) };
    server.stats.total_net_input_bytes.add(n as u64);
    Ok(n)
}

/// Decodes the next request. The request that completes a big multibulk hands
/// over where each of its arguments lies at once (5M of them for a 5M-id SADD),
/// and one that arrived whole (held back behind a slow reader, or read 1 MB at a
/// time) is parsed in the same call: past [`LARGE_ARGS`] that is done off the
/// worker.
#[inline]
fn decode(
    decoder: &mut RequestDecoder,
    rbuf: &mut BytesMut,
    request: &mut Request,
) -> Result<bool, relcache_protocol::resp::ProtocolError> {
    // A request that arrived whole is decoded in one call: its announced count
    // is looked at too, once the buffer could hold that many arguments.
    let large = decoder.args_read() > LARGE_ARGS
        || (rbuf.len() / 6 > LARGE_ARGS && decoder.args_announced(rbuf) > LARGE_ARGS);
    if large {
        offload(|| decoder.decode_request(rbuf, request))
    } else {
        decoder.decode_request(rbuf, request)
    }
}

/// Whether to stop running this client's requests until its pending output is back
/// under the soft `client-output-buffer-limit`: a client that sends faster than it
/// reads waits for its own replies instead of growing its output here. Its input
/// is still read (see the loop), so it is never stuck writing. A client reading one
/// large reply (a 300 MB GET) is never held back mid-reply: the check comes
/// between requests.
fn held_back(soft_limit: u64, wbuf: &Output) -> bool {
    soft_limit > 0 && wbuf.len() as u64 > soft_limit
}

/// The `client-output-buffer-limit` class this client is held to: `pubsub` while
/// it is subscribed, as in Redis, else `normal`.
fn output_limit(server: &Server, session: &Session) -> OutputLimit {
    if pubsub::subscribed(session) {
        server.config.pubsub_output_limit()
    } else {
        server.config.output_limit()
    }
}

/// Checks the pending output (replies, and messages still queued for a
/// subscriber) against its `client-output-buffer-limit` class: past the hard
/// limit at once, as Redis; over the soft limit for `soft_seconds` *without
/// reading any of it* (Redis counts the time even while the client reads, which
/// cuts off a client reading one large reply).
fn output_over_limit(
    server: &Server,
    session: &Session,
    wbuf: &Output,
    soft_since: &mut Option<Instant>,
) -> Option<&'static str> {
    let limit = output_limit(server, session);
    let pending = (wbuf.len() + pubsub::queued(session)) as u64;
    let hard = limit.hard > 0 && pending > limit.hard;
    let soft = if limit.soft > 0 && pending > limit.soft {
        let since = *soft_since.get_or_insert_with(Instant::now);
        since.elapsed() >= Duration::from_secs(limit.soft_seconds)
    } else {
        *soft_since = None;
        false
    };
    if hard || soft {
        server
            .stats
            .client_output_buffer_limit_disconnections
            .incr();
        return Some("client scheduled to be closed ASAP for overcoming of output buffer limits");
    }
    None
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};

    use super::*;

    /// While a request runs, every byte of the read buffer is counted once: its
    /// arguments as `argv-mem`, the framing around them and whatever follows
    /// as query buffer (they are the client's, not data, for `maxmemory`).
    #[test]
    fn a_request_under_way_is_counted_once() {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6379));
        let shutdown = tokio_util::sync::CancellationToken::new();
        let server = Server::new(Default::default(), addr, shutdown.clone());
        let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 40000));
        let info = server.clients.register(peer, addr, &shutdown, 1).unwrap();
        let session = Session::new(info, true);
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut request = Request::default();
        for wire in [
            &b"*3\r\n$4\r\nSADD\r\n$1\r\ns\r\n$6\r\n123456\r\n*1\r\n$4\r\nPI"[..],
            b"SADD  s 123456\r\n*1\r\n$4\r\nPI",
        ] {
            let mut rbuf = BytesMut::from(wire);
            assert!(decoder.decode_request(&mut rbuf, &mut request).unwrap());
            let now = footprint(&rbuf, &Output::default(), &request, &decoder, &session);
            assert_eq!(now.argv, 11, "{wire:?}");
            let words = if rbuf.starts_with(b"*") { 0 } else { 11 };
            assert_eq!(now.query_len + now.argv, rbuf.len() + words, "{wire:?}");
            request.consume(&mut rbuf);
            let after = footprint(&rbuf, &Output::default(), &request, &decoder, &session);
            assert_eq!((after.query_len, after.argv), (10, 0));
        }
    }
}
