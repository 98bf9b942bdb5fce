//! One client connection: read, parse every complete request, execute, write once.
//!
//! The loop keeps reading while replies wait to be written, as Redis does, so a
//! client's pending output is a real buffer with real limits: past the hard
//! `client-output-buffer-limit`, or over the soft one for too long, the client is
//! disconnected, and nobody else notices. Input is bounded too: a request larger than
//! `proto-max-bulk-len` allows, or a query buffer past `client-query-buffer-limit`,
//! closes this connection only. A framing error gets Redis's `-ERR Protocol error`
//! and a close; a bad *command* gets an error reply and the connection stays open.
//!
//! An idle connection holds no buffer: every buffer, the argument vector and the
//! decoder's table are given back once empty (Redis 7 frees idle query buffers in
//! its cron; here it happens at the end of each batch), small ones to the thread's
//! spares ([`crate::spare`]), where its next connection with input reads. What the
//! buffers hold is published as the client's memory ([`crate::client_memory`]),
//! apart from data.
//!
//! This is only the I/O loop: what each request asks of it comes back from
//! [`cmd::dispatch`] as a [`Flow`], and a command that has to wait is kept and
//! woken by [`crate::blocking`].

use std::future::Future;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use relcache_protocol::resp::{Frame, Limits, RequestDecoder};
use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::blocking::{self, Parked};
use crate::client_memory::{self, Footprint};
use crate::clock::Stamp;
use crate::cmd::{self, Flow};
use crate::config::OutputLimit;
use crate::observe::monitor;
use crate::offload::{offload, LARGE_ARGS, LARGE_REQUEST};
use crate::output::Output;
use crate::pubsub;
use crate::server::Server;
use crate::session::{ClientInfo, Session};
use crate::spare;

const READ_CHUNK: usize = 16 * 1024;
/// Most room made at once for the rest of a big argument: the buffer grows straight
/// to what a 20,000-id table needs instead of doubling from 16 KB (four copies), while
/// a declared length or argument count alone can make a connection allocate at
/// most this much ahead of the bytes.
const MAX_READ_AHEAD: usize = 1024 * 1024;
/// Past this much pending output mid-batch, try to write before executing more, so
/// a client that reads promptly never makes us hold a large buffer.
const EAGER_FLUSH: usize = 64 * 1024;
/// Redis's `PROTO_REPLY_CHUNK_BYTES`: the size of a client's fixed reply buffer.
const REPLY_CHUNK: usize = 16 * 1024;
/// Argument slots kept from one request to the next; a request with more gets a
/// vector of its own (a 5M-id SADD needs 160 MB of slots), freed once it has run.
const ARGS_KEEP: usize = 16;

enum Closed {
    /// Client went away, QUIT, idle timeout, kill or shutdown: nothing to report.
    Normal,
    Io(io::Error),
    /// We decided to drop the client; the reason goes to the log.
    Limit(&'static str),
}

/// Serves one connection until it closes.
pub async fn serve(server: Arc<Server>, stream: TcpStream, info: Arc<ClientInfo>) {
    let authenticated = server.config.requirepass.read().is_none();
    let mut session = Session::new(info.clone(), authenticated);
    match connection_loop(&server, &stream, &mut session).await {
        Closed::Normal => {}
        Closed::Io(e) => tracing::debug!(client = info.id, error = %e, "connection error"),
        Closed::Limit(why) => tracing::warn!(client = info.id, addr = %info.addr, "{why}"),
    }
    blocking::set_blocked(&server, &info, false);
    // Closing from here on: whoever redirects invalidations to this connection
    // learns the redirect is broken once its queue goes, below.
    info.kill.cancel();
    crate::tracking::disable(&server, &mut session);
    pubsub::leave(&server, &mut session);
    if session.watched.is_empty() || !server.scripts.any_running() {
        cmd::discard_session_state(&server, &mut session);
    } else {
        // Unwatching locks the watched keys' shards, which a script may hold for
        // as long as it runs.
        crate::offload::offload(|| cmd::discard_session_state(&server, &mut session));
    }
    server.clients.unregister(info.id);
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

async fn connection_loop(server: &Server, stream: &TcpStream, session: &mut Session) -> Closed {
    let info = session.info.clone();
    let config = &server.config;
    let mut rbuf = BytesMut::new();
    let mut wbuf = Output::default();
    let mut args = Vec::new();
    let mut decoder = RequestDecoder::new(limits(server, session));
    let mut published = Footprint::default();
    // Reads and writes both count, as Redis's `lastinteraction` does: a client
    // that has just been answered (a parked command that ran at last, say) is not
    // idle.
    let mut last_interaction = Stamp::now();
    // Whether this pass's requests came with the read just made: its time then
    // stands for the write's too (the clock is read once per round trip).
    let mut read_since_write = false;
    let mut over_soft_since: Option<Instant> = None;
    let mut closing = false;
    // Created once, and cheap to poll on every pass (see `cancel`).
    let mut killed = crate::cancel::Cancelled::new(info.kill.clone());

    // A blocking command waiting for its key; requests behind it wait with it, so
    // replies stay in order.
    let mut parked: Option<Parked> = None;

    loop {
        // 1. Run the parked command again if it was woken or its time is up, then
        // every complete request in the buffer.
        if let Some((args, deadline)) = blocking::take_due(&mut parked) {
            let wait = match cmd::dispatch(server, session, &args, &mut wbuf, deadline) {
                Flow::Park(wait) => Some(wait),
                // A lease command run again never asks to close.
                Flow::Continue | Flow::Close => None,
            };
            parked = blocking::rerun_ended(server, &info, args, wait);
        }
        decoder.set_limits(limits(server, session));
        if args.capacity() == 0 && !rbuf.is_empty() {
            args = spare::take_args();
        }
        let mut held = false;
        while !closing && parked.is_none() {
            if held_back(output_limit(server, session).soft, &wbuf) {
                held = true;
                break;
            }
            match decode(&mut decoder, &mut rbuf, &mut args) {
                Ok(true) => {
                    let authenticated = session.authenticated;
                    let size: usize = args.iter().map(|a| a.len()).sum();
                    if size > READ_CHUNK {
                        // Its bytes are this client's until a command stores them:
                        // published first, so making room for it under maxmemory
                        // does not take them for data. (A smaller request counts
                        // as data for the moment it runs: the slack is a read.)
                        let now = footprint(&rbuf, &wbuf, &args, size, &decoder, session);
                        client_memory::publish(server, &info, &mut published, now);
                    }
                    // After that: the reply buffer is not the request's memory.
                    wbuf.buf();
                    let flow = if size > LARGE_REQUEST || args.len() > LARGE_ARGS {
                        offload(|| cmd::dispatch(server, session, &args, &mut wbuf, None))
                    } else {
                        cmd::dispatch(server, session, &args, &mut wbuf, None)
                    };
                    if session.authenticated != authenticated {
                        // AUTH, HELLO … AUTH or RESET: the next request, maybe already
                        // in the buffer, is read under the new state's limits.
                        decoder.set_limits(limits(server, session));
                    }
                    match flow {
                        Flow::Continue => {}
                        Flow::Close => closing = true,
                        Flow::Park(wait) => {
                            parked = Some(blocking::park(server, &info, &mut args, wait));
                            break;
                        }
                    }
                    if args.capacity() > ARGS_KEEP {
                        release_args(std::mem::take(&mut args));
                    } else {
                        args.clear();
                    }
                    if wbuf.len() >= EAGER_FLUSH {
                        match try_write(server, stream, &mut wbuf) {
                            Ok(n) => took_output(n, &mut over_soft_since),
                            Err(e) => return Closed::Io(e),
                        }
                    }
                    // Between requests the limits matter only once the output has
                    // outgrown what Redis keeps in a client's fixed reply buffer
                    // (it checks them as replies spill past it); after the batch
                    // they are checked whatever the size.
                    if wbuf.len() > REPLY_CHUNK {
                        if let Some(why) =
                            output_over_limit(server, session, &wbuf, &mut over_soft_since)
                        {
                            wbuf.discard();
                            return Closed::Limit(why);
                        }
                    }
                }
                Ok(false) => break,
                Err(e) => {
                    Frame::error(format!("ERR {e}")).encode(session.proto, wbuf.buf());
                    // The error quotes a byte of the request (`got 'X'`): user
                    // data, which Redis 7.4's `hide-user-data-from-log` keeps out.
                    if server.config.hide_user_data_from_log.load(Relaxed) {
                        tracing::debug!(client = info.id, "protocol error, closing");
                    } else {
                        tracing::debug!(client = info.id, error = %e, "protocol error, closing");
                    }
                    lingering_close(server, stream, &mut wbuf).await;
                    return Closed::Normal;
                }
            }
        }

        if rbuf.is_empty() {
            // No request under way: the buffer (which may still be part of the
            // last large request's allocation), the argument vector and the
            // decoder's table go, so an idle connection holds nothing. Small ones
            // go to the thread's spares for the next connection with input.
            // Before the write, so a client that has its reply finds them gone.
            spare::give_bytes(std::mem::take(&mut rbuf));
            spare::give_args(std::mem::take(&mut args));
            if decoder.scratch_bytes() > 0 {
                decoder = RequestDecoder::new(limits(server, session));
            }
        }
        // What the batch left on the input side (and in MULTI's queue) is published
        // before its replies go out, so a client that has its reply sees it; the
        // reply buffer is published after the write, which usually frees it (a
        // batch of small requests thus publishes nothing).
        let mut now = footprint(&rbuf, &wbuf, &args, 0, &decoder, session);
        (now.output_len, now.output_alloc) = (published.output_len, published.output_alloc);
        client_memory::publish(server, &info, &mut published, now);

        // 2. One write for the whole batch.
        if wbuf.is_empty() {
            // Taken for a reply that did not come (the command was parked).
            wbuf.release_if_empty();
        } else {
            match try_write(server, stream, &mut wbuf) {
                Ok(n) => took_output(n, &mut over_soft_since),
                Err(e) => return Closed::Io(e),
            }
            if !read_since_write {
                last_interaction = Stamp::now();
                info.last_active.store(last_interaction.ticks(), Relaxed);
            }
        }
        read_since_write = false;
        if closing && wbuf.is_empty() {
            return Closed::Normal;
        }
        if let Some(why) = output_over_limit(server, session, &wbuf, &mut over_soft_since) {
            wbuf.discard();
            return Closed::Limit(why);
        }
        let now = footprint(&rbuf, &wbuf, &args, 0, &decoder, session);
        client_memory::publish(server, &info, &mut published, now);
        // Requests held back while the output was over the soft limit are already
        // here: once the write brought it under, run them rather than wait for input
        // that may never come (yielding first, so a fast reader cannot keep this
        // worker from its other connections).
        if held && !held_back(output_limit(server, session).soft, &wbuf) {
            tokio::task::yield_now().await;
            continue;
        }

        // 3. Wait for input, for the socket to drain, or for a reason to stop.
        // A blocked client, a subscriber and a MONITOR are not idle: Redis
        // exempts them from `timeout` too (they wait for the server, not it for
        // them).
        let timeout = config.timeout.load(Relaxed);
        let exempt = parked.is_some() || session.monitor.is_some() || pubsub::subscribed(session);
        let idle_deadline = (timeout > 0 && !exempt).then(|| {
            let idle = Duration::from_nanos(last_interaction.elapsed_ns());
            Instant::now() + Duration::from_secs(timeout).saturating_sub(idle)
        });
        let soft_seconds = output_limit(server, session).soft_seconds;
        let soft_deadline = over_soft_since.map(|t| t + Duration::from_secs(soft_seconds));
        let recheck = parked.as_ref().map(|p| Instant::from_std(p.recheck_at()));
        let deadline = [idle_deadline, soft_deadline, recheck]
            .into_iter()
            .flatten()
            .min();
        // Input is read even while requests are held back: a client that writes a
        // whole pipeline before reading any reply (redis-py, hiredis) must be able
        // to finish writing, or it would never read. What waits is bounded by
        // `client-query-buffer-limit`, as any unread input is.
        let want_read = !closing;
        let want_write = !wbuf.is_empty();
        let event = if parked.is_none() && session.monitor.is_none() && session.pubsub.is_none() {
            wait_plain(stream, &mut killed, want_read, want_write, deadline).await
        } else {
            tokio::select! {
                biased;
                _ = &mut killed => Event::Killed,
                _ = blocking::woken(&mut parked) => Event::Handled,
                _ = info.unblock_signal.notified(), if parked.is_some() => {
                    blocking::on_unblock(server, session, &mut parked, wbuf.buf());
                    Event::Handled
                }
                line = monitor::next(&mut session.monitor) => {
                    monitor::deliver(line, &mut session.monitor, wbuf.buf());
                    Event::Handled
                }
                msg = pubsub::next(&mut session.pubsub) => {
                    pubsub::deliver(msg, session, wbuf.buf());
                    Event::Handled
                }
                r = stream.writable(), if want_write => Event::from_ready(r, Event::Handled),
                r = stream.readable(), if want_read => Event::from_ready(r, Event::Readable),
                _ = sleep_until(deadline) => Event::Deadline,
            }
        };
        match event {
            Event::Handled => {}
            Event::Killed => {
                // Shutdown or CLIENT KILL: hand over what is already computed.
                let _ = try_write(server, stream, &mut wbuf);
                return Closed::Normal;
            }
            Event::Failed(e) => return Closed::Io(e),
            Event::Readable => {
                match try_read(server, stream, &mut rbuf, &mut decoder) {
                    Ok(0) => return Closed::Normal,
                    Ok(_) => {
                        last_interaction = Stamp::now();
                        read_since_write = true;
                        info.last_active.store(last_interaction.ticks(), Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Closed::Io(e),
                }
                if over_query_limit(server, session, rbuf.len() + decoder.big_buffered().0) {
                    server.stats.client_query_buffer_limit_disconnections.incr();
                    return Closed::Limit("closing client that reached max query buffer length");
                }
            }
            Event::Deadline => {
                if idle_deadline.is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!(client = info.id, "closing idle client");
                    return Closed::Normal;
                }
                // Soft output limit and parked commands: re-checked at the top of
                // the loop.
            }
        }
    }
}

/// What ended a connection's wait.
enum Event {
    Killed,
    Readable,
    /// A time to look at: the idle timeout, the soft output limit, a parked
    /// command's recheck.
    Deadline,
    /// The socket failed.
    Failed(io::Error),
    /// Something the wait handled itself (a message delivered, a parked command
    /// woken), or the socket took output: back to the top of the loop.
    Handled,
}

impl Event {
    fn from_ready(r: io::Result<()>, ok: Event) -> Event {
        r.map_or_else(Event::Failed, |()| ok)
    }
}

/// The wait of a connection that is only reading requests and writing replies
/// (nothing parked, no subscription, not MONITOR): most of them, and at `-P 1`
/// one wait a request. The socket's readiness is polled in place
/// (`poll_read_ready` keeps one waker in the socket's slot) rather than through
/// `readable()` futures, which link a waiter into the socket's list and unlink
/// it again each time, and only the sources this connection has are polled.
async fn wait_plain(
    stream: &TcpStream,
    killed: &mut crate::cancel::Cancelled,
    want_read: bool,
    want_write: bool,
    deadline: Option<Instant>,
) -> Event {
    let mut sleep = std::pin::pin!(sleep_until(deadline));
    std::future::poll_fn(|cx| {
        if std::pin::Pin::new(&mut *killed).poll(cx).is_ready() {
            return Poll::Ready(Event::Killed);
        }
        if want_write {
            if let Poll::Ready(r) = stream.poll_write_ready(cx) {
                return Poll::Ready(Event::from_ready(r, Event::Handled));
            }
        }
        if want_read {
            if let Poll::Ready(r) = stream.poll_read_ready(cx) {
                return Poll::Ready(Event::from_ready(r, Event::Readable));
            }
        }
        if deadline.is_some() && sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Event::Deadline);
        }
        Poll::Pending
    })
    .await
}

/// Sends what is pending (the error that explains the close), then reads and
/// discards the client's input for a moment before closing. Closing a socket with
/// unread input makes the kernel send a reset, which can destroy the error reply
/// before the client reads it; draining first lets it arrive, followed by a clean
/// EOF. Bounded in time and bytes, so a client cannot keep the task alive.
async fn lingering_close(server: &Server, stream: &TcpStream, wbuf: &mut Output) {
    const LINGER: Duration = Duration::from_secs(2);
    const MAX_DRAIN: usize = 64 * 1024 * 1024;
    let deadline = Instant::now() + LINGER;
    // On the heap: an array here would be part of every connection's task.
    let mut sink = vec![0u8; 16 * 1024];
    let mut drained = 0;
    while Instant::now() < deadline && drained < MAX_DRAIN {
        if !wbuf.is_empty() {
            if try_write(server, stream, wbuf).is_err() {
                return;
            }
            if !wbuf.is_empty() {
                let _ = tokio::time::timeout_at(deadline, stream.writable()).await;
                continue;
            }
            // All written: half-close so the client sees EOF after the error.
            let _ = socket_shutdown_write(stream);
        }
        match tokio::time::timeout_at(deadline, stream.readable()).await {
            Ok(Ok(())) => match stream.try_read(&mut sink) {
                Ok(0) => return,
                Ok(n) => drained += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            },
            _ => return,
        }
    }
}

fn socket_shutdown_write(stream: &TcpStream) -> io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    sock.shutdown(std::net::Shutdown::Write)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What this connection holds now, `argv` being the bytes of a request split off
/// the read buffer and not yet run.
#[inline]
fn footprint(
    rbuf: &BytesMut,
    wbuf: &Output,
    args: &Vec<Bytes>,
    argv: usize,
    decoder: &RequestDecoder,
    session: &Session,
) -> Footprint {
    // A big argument's data, read into a buffer of its own, is query buffer too.
    let (big_len, big_room) = decoder.big_buffered();
    Footprint {
        query_len: rbuf.len() + big_len,
        query_free: rbuf.capacity() - rbuf.len() + big_room,
        argv,
        scratch: args.capacity() * std::mem::size_of::<Bytes>() + decoder.scratch_bytes(),
        multi: session.multi.as_ref().map_or(0, |m| m.bytes),
        output_len: wbuf.len(),
        output_alloc: wbuf.allocated(),
        pubsub: pubsub::queued(session),
    }
}

/// One read: into the buffer of a big argument under way, which becomes the
/// stored value without a copy ([`RequestDecoder::big_buffer`]), or into `rbuf`,
/// sized for what the request under way is expected to need
/// ([`RequestDecoder::bytes_wanted`]).
fn try_read(
    server: &Server,
    stream: &TcpStream,
    rbuf: &mut BytesMut,
    decoder: &mut RequestDecoder,
) -> io::Result<usize> {
    if let Some(big) = decoder.big_buffer() {
        let n = recv_spare(stream, big.spare_capacity_mut())?;
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
    let n = read_into(stream, rbuf)?;
    server.stats.total_net_input_bytes.add(n as u64);
    Ok(n)
}

/// One `recv` into `buf`'s spare capacity. A read that does not fill it has
/// drained the socket, and says so to the runtime (as tokio's own `poll_read`
/// does), so the next wait goes straight to epoll: otherwise every round trip
/// would cost a second `recv` that finds nothing (1.8 per request at `-P 1`
/// before, by the syscall tracepoints). Data arriving meanwhile is not lost: epoll
/// reports it, and the runtime sets the readiness again.
fn read_into(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    let n = recv_spare(stream, buf.spare_capacity_mut())?;
    // SAFETY: `recv_spare` initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// One `recv` into `spare`, as [`read_into`] describes; returns how many of its
/// bytes it initialised (0 when the closure did not run or `recv` failed).
fn recv_spare(stream: &TcpStream, spare: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    let room = spare.len();
    let mut n = 0;
    let read = stream.try_io(Interest::READABLE, || {
        n = SockRef::from(stream).recv(spare)?;
        if n > 0 && n < room {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(())
        }
    });
    match read {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => Ok(n),
        r => r.map(|()| n),
    }
}

/// Writes as much of `wbuf` as the socket takes now; returns how much that was.
fn try_write(server: &Server, stream: &TcpStream, wbuf: &mut Output) -> io::Result<usize> {
    let written = wbuf.write_to(stream)?;
    server.stats.total_net_output_bytes.add(written as u64);
    Ok(written)
}

/// Decodes the next request. The request that completes a big multibulk turns
/// each of its arguments into a slice of it at once (5M of them for a 5M-id
/// SADD, 100 ms), and one that arrived whole (held back behind a slow reader, or
/// read 1 MB at a time) is parsed in the same call: past [`LARGE_ARGS`] that is
/// done off the worker.
#[inline]
fn decode(
    decoder: &mut RequestDecoder,
    rbuf: &mut BytesMut,
    args: &mut Vec<Bytes>,
) -> Result<bool, relcache_protocol::resp::ProtocolError> {
    // A request that arrived whole is decoded in one call: its announced count
    // is looked at too, once the buffer could hold that many arguments.
    let large = decoder.args_read() > LARGE_ARGS
        || (rbuf.len() / 6 > LARGE_ARGS && decoder.args_announced(rbuf) > LARGE_ARGS);
    if large {
        offload(|| decoder.decode(rbuf, args))
    } else {
        decoder.decode(rbuf, args)
    }
}

/// Lets go of a request's arguments once it has run. Those of a big multibulk each
/// hold a reference to the request (5M for a 5M-id SADD): they are dropped off
/// the worker, but before the reply goes, so a client that has its reply finds
/// the memory given back.
fn release_args(args: Vec<Bytes>) {
    if args.len() > LARGE_ARGS {
        offload(|| drop(args));
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

/// The client took `written` bytes of its output: it is reading, so the soft
/// limit's clock starts again. The soft limit catches clients that stop reading,
/// not clients that read a large answer slowly.
fn took_output(written: usize, over_soft_since: &mut Option<Instant>) {
    if written > 0 {
        if let Some(since) = over_soft_since {
            *since = Instant::now();
        }
    }
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
