//! The event loop of a core: one thread, one epoll (`mio`), and the core's
//! connections, kept in a slab and served in the order their sockets become
//! ready, as Redis's `ae` loop serves its clients.
//!
//! A task per connection on a tokio runtime cost a `-P 1` request ~500
//! instructions more than Redis's (callgrind): registering readiness with the
//! runtime (~240), waking the task from the driver (~220), and scheduling and
//! parking it. Here a ready socket is a slab index: the loop reads it and runs
//! its requests, with nothing between epoll and the connection, and writes
//! their replies: at once in a round of a few ready connections, and in a round
//! of many once they have all run theirs (or a millisecond has gone in them),
//! as Redis writes in `beforeSleep` ([`write_replies`]).
//!
//! Besides its socket, the loop waits for a connection's kill (CLIENT KILL,
//! eviction, shutdown), its message queue (a subscriber's messages, the
//! invalidations of client-side caching, which any RESP3 client may be sent),
//! a MONITOR's feed and its parked command's signals (a lease ending, CLIENT
//! UNBLOCK): each is a future polled with a waker that queues the connection's
//! slot in the loop's inbox and wakes it through [`mio::Waker`] ([`Signal`]).
//! The idle timeout, the soft output limit and a parked command's recheck are
//! a timer heap. A connection lives on its loop until it closes, unless the
//! server's connections gather on one loop or spread again ([`crate::gather`]),
//! or its scripts keep waiting for another loop's over one key: then it moves,
//! between two passes, to the loop it is sent to, or the one that key's shard
//! calls home ([`crate::script::affinity`]). One that broke the protocol goes
//! to a task of its core's tokio runtime, for its lingering close
//! ([`crate::conn::task`]).
//!
//! Long work ([`crate::offload`]) does what tokio's `block_in_place` does for a
//! runtime worker: the thread running it gives the loop to a spare thread, which
//! goes on serving the other connections, and sends its own connection back to
//! the loop when it is done, then becomes the spare. The loop (its epoll, slab,
//! timers and the round's replies not yet written) is one value, [`Poller`],
//! handed from thread to thread through a thread-local while a connection is
//! served; only the thread holding it polls.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use parking_lot::{Condvar, Mutex};
use slab::Slab;
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::blocking;
use crate::clock::Stamp;
use crate::conn::{task, Closed, Conn, Pass, Replies, Socket};
use crate::loops::Tenancy;
use crate::server::Server;

const WAKE: Token = Token(usize::MAX);
/// Readiness events taken from epoll at once.
const EVENTS: usize = 1024;
/// How long a round may run before the replies it has wait no more for the
/// rest of it ([`write_replies`]).
const ROUND_REPLIES_NS: u64 = 1_000_000;
/// How many connections a round must start with for their replies to wait
/// for each other ([`write_replies`]). With a few, the client, on a core of its
/// own, works on the first replies while the loop runs the next connection's
/// requests; held back to the end of the round, they lost that overlap: with
/// 4 connections, unpipelined loads on a miss ran 20–25% slower
/// (`scripts/compare.sh`'s load-on-miss, alternating, 3 rounds). With dozens,
/// the client woken for each connection's replies is what costs.
const DEFER_REPLIES_MIN: usize = 8;

/// A core's event loop, as the rest of the server sees it.
pub(crate) struct EvLoop {
    shared: Arc<Shared>,
}

/// What other threads reach of a loop.
struct Shared {
    index: usize,
    waker: mio::Waker,
    inbox: Mutex<Inbox>,
    /// The runtime of the loop's core: where its connections go when they have
    /// more to wait for than the loop waits for.
    rt: tokio::runtime::Handle,
    /// Raised by the thread that polls last, as it stops.
    stopped: Mutex<bool>,
    stopped_cv: Condvar,
    spares: Mutex<Spares>,
    spares_cv: Condvar,
    /// Connections living on this loop now (a connection's [`Tenancy`] counts
    /// itself here, and moves its count with it).
    conns: Arc<AtomicUsize>,
    /// Every loop of the server, this one among them, by index: where a
    /// connection moves to ([`Poller::move_home`]).
    peers: OnceLock<Box<[Weak<Shared>]>>,
    /// How many loops, from the first, take connections now: one while the
    /// server's connections are gathered ([`crate::gather`]), else all.
    active: Arc<AtomicUsize>,
    /// The time the loop has slept in epoll waiting for work: what it had to
    /// spare ([`crate::gather`]).
    sleeps: Mutex<Sleeps>,
    /// Most threads the loop has at once (`loop-max-threads`). Each long command
    /// running makes one more when none is spare; past this many, the next runs
    /// on the thread that polls, and the loop's other clients wait for it as
    /// they would in Redis, rather than a flood of big requests making a thread
    /// each.
    max_threads: usize,
}

/// The loop's threads, and the spares among them: those not polling or busy
/// with long work. The one that gave the loop away last, once done with its
/// long work, waits here for the next hand-over, so a hand-over wakes a thread
/// rather than making one: making one maps its stack,
/// which waits behind the `munmap` of the very value a DEL is freeing (a PING
/// waited 34 ms behind a DEL of 256 MB that way). One spare is made with the
/// loop; more, made when hand-overs overlap, end after [`SPARE_KEEP`] idle.
#[derive(Default)]
struct Spares {
    /// The loop's threads, polling, spare or busy with long work.
    threads: usize,
    idle: usize,
    /// The loop, handed over and not yet taken by a spare.
    baton: Option<Box<Poller>>,
    stop: bool,
}

/// How long a spare thread beyond the first waits for a hand-over before it
/// ends (tokio's blocking pool keeps its threads as long).
const SPARE_KEEP: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Inbox {
    /// Connections to serve: accepted ones, and ones back from a task.
    arriving: Vec<Arriving>,
    /// Connections whose thread gave the loop away while serving them
    /// ([`hand_over`]), with what serving them came to.
    returning: Vec<(usize, Box<Client>, Verdict)>,
    /// Connections whose kill token fired, whose queue has messages or whose
    /// parked command was signalled: (slot, client id, which).
    signalled: Vec<(usize, u64, Cause)>,
    /// Connections moving here from another loop ([`Poller::move_home`]),
    /// boxed as in the slab, so a move copies a pointer, not the connection.
    #[allow(clippy::vec_box)]
    moving: Vec<Box<Client>>,
    /// Connections to send to other loops ([`crate::gather`]).
    sending: Vec<Sending>,
    stop: bool,
}

/// A loop told to send some of its connections to another
/// ([`EvLoop::send_away`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sending {
    /// The loop they go to, by index.
    pub to: usize,
    /// At most this many.
    pub count: usize,
    /// Those that moved to the loop their scripts call home go too: they are
    /// all going to one loop, where no script waits for another loop's.
    pub homed_too: bool,
}

/// The loop's sleeps in epoll.
#[derive(Default)]
struct Sleeps {
    /// Nanoseconds slept, those of the sleep in progress left out.
    total_ns: u64,
    /// When the sleep in progress began.
    since: Option<Stamp>,
}

/// A connection on its way to a loop.
pub(crate) struct Arriving {
    pub stream: std::net::TcpStream,
    pub server: Arc<Server>,
    pub info: Arc<crate::session::ClientInfo>,
    pub tenancy: Tenancy,
}

/// A connection on the loop.
struct Client {
    sock: Sock,
    conn: Conn,
    server: Arc<Server>,
    tenancy: Tenancy,
    /// The kill token's future, polled once with a [`Signal`] as its waker, and
    /// kept so the signal stays registered (until the client closes, which
    /// cancels the token itself).
    kill: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// The [`Signal`] its message queue wakes, made when it first has one.
    messages: Option<Waker>,
    /// The queue that signal is registered with, until it fires: looking into
    /// the queue again after each request would cost a RESP3 client ~150
    /// instructions a request. Held, so that a later queue (after a RESET and
    /// another HELLO 3) cannot have its address.
    listening: Option<Arc<crate::pubsub::Subscriber>>,
    /// Its queue signalled: move the messages into its output when serving it.
    messages_due: bool,
    /// Its parked command's signals, made when it first parks.
    park: Option<Box<ParkSignals>>,
    /// CLIENT UNBLOCK's signal fired: have its parked command answer.
    unblocked: bool,
    /// In the ready queue.
    queued: bool,
    /// The time it has in the timer heap, if any.
    timer: Option<Instant>,
    /// Its time in the heap has come: look at the idle timeout (a parked
    /// command's recheck is looked at by the pass itself).
    due: bool,
    /// Its kill token fired (a flag, not the token: reading that takes a lock).
    killed: bool,
    /// It moved to the loop its scripts call home: spreading leaves it there.
    homed: bool,
}

/// A parked command's wake-up and CLIENT UNBLOCK's, polled with the client's
/// [`Signal`].
struct ParkSignals {
    waker: Waker,
    /// The futures of the park numbered `.0`, kept so they stay registered;
    /// dropped once one fires, or the park ends.
    live: Option<(u64, [blocking::Signal; 2])>,
}

/// A socket and the readiness epoll last reported for it, cleared when a read or
/// a write finds it drained or full (see [`crate::conn::Socket`]).
struct Sock {
    stream: TcpStream,
    readable: Cell<bool>,
    writable: Cell<bool>,
    /// The peer has shut its side (or the socket failed): reported once, with
    /// the last data, so a read that drains that data must not take the
    /// readiness away, or the end of the stream would never be read.
    read_closed: Cell<bool>,
}

impl Socket for Sock {
    fn recv_spare(&self, spare: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
        let room = spare.len();
        match socket2::SockRef::from(&self.stream).recv(spare) {
            Ok(n) => {
                if n < room && !self.read_closed.get() {
                    self.readable.set(false);
                }
                Ok(n)
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::WouldBlock {
                    self.readable.set(false);
                }
                Err(e)
            }
        }
    }

    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let r = io::Write::write(&mut &self.stream, buf);
        self.sent(&r, buf.len());
        r
    }

    fn send_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let r = io::Write::write_vectored(&mut &self.stream, bufs);
        self.sent(&r, bufs.iter().map(|b| b.len()).sum());
        r
    }
}

impl Sock {
    fn sent(&self, r: &io::Result<usize>, len: usize) {
        let full = match r {
            Ok(n) => *n < len,
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        };
        if full {
            self.writable.set(false);
        }
    }
}

/// What serving a connection came to.
enum Verdict {
    /// Wait for its socket, its kill, its messages, its parked command's
    /// signals or its time.
    Wait,
    /// Serve it again after the others ready now.
    Again,
    /// It has closed and let go of its place.
    Closed,
    /// It broke the protocol: to a task, which sends the error and closes after
    /// draining its input for a moment.
    Linger,
}

/// What serving a connection came to before its replies went out.
enum Served {
    Settled(Verdict),
    /// It ran requests: their replies go out once the round's other ready
    /// connections have run theirs ([`write_replies`]).
    Replies(Replies),
}

impl Served {
    /// The verdict, once any replies waiting are written: for a connection
    /// going back to its loop from a thread that gave the loop away.
    fn written(c: &mut Client, served: Served) -> Verdict {
        match served {
            Served::Settled(verdict) => verdict,
            Served::Replies(ran) => flush_guarded(c, ran),
        }
    }
}

/// The loop itself: owned by the one thread that polls.
struct Poller {
    shared: Arc<Shared>,
    poll: Poll,
    events: Events,
    /// `None` while its connection is being served (and its thread may have
    /// given the loop away): the slot stays taken until it comes back.
    clients: Slab<Option<Box<Client>>>,
    ready: VecDeque<usize>,
    /// Connections to serve again without waiting for their sockets: those
    /// just served that have more to do (their pass ran out of time, left
    /// input unread or output unwritten, or was held back by the output
    /// limit), and those back from another thread or loop. They join the ready
    /// queue behind those the next poll finds, which have waited longer. Served
    /// first, they had a PING arriving behind a pipeline of 4 ms commands wait
    /// for two of them.
    again: Vec<usize>,
    /// Connections served this round whose replies wait to be written, out of
    /// their slots as while they are served.
    replies: VecDeque<(usize, Box<Client>, Replies)>,
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

thread_local! {
    /// The loop of the connection this thread is serving, while it serves it.
    static BATON: Cell<Option<Box<Poller>>> = const { Cell::new(None) };
}

impl EvLoop {
    /// Starts the event loop of core `index`, handing connections that have more
    /// to wait for to `rt`. It starts with two threads (the poller and a spare)
    /// and grows to at most `max_threads`.
    pub(crate) fn start(
        index: usize,
        rt: tokio::runtime::Handle,
        max_threads: usize,
        conns: Arc<AtomicUsize>,
        active: Arc<AtomicUsize>,
    ) -> io::Result<EvLoop> {
        let poll = Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKE)?;
        let shared = Arc::new(Shared {
            index,
            waker,
            inbox: Mutex::new(Inbox::default()),
            rt,
            stopped: Mutex::new(false),
            stopped_cv: Condvar::new(),
            spares: Mutex::new(Spares::default()),
            spares_cv: Condvar::new(),
            conns,
            peers: OnceLock::new(),
            active,
            sleeps: Mutex::new(Sleeps::default()),
            max_threads: max_threads.max(2),
        });
        let poller = Box::new(Poller {
            shared: shared.clone(),
            poll,
            events: Events::with_capacity(EVENTS),
            clients: Slab::new(),
            ready: VecDeque::new(),
            again: Vec::new(),
            replies: VecDeque::new(),
            timers: BinaryHeap::new(),
        });
        shared.spares.lock().threads += 1;
        spawn_thread(&shared, Some(poller))?;
        shared.spares.lock().threads += 1;
        spawn_thread(&shared, None)?;
        Ok(EvLoop { shared })
    }

    /// Tells each of `loops` (all of the server's, in index order) of the
    /// others, so a connection can move between them.
    pub(crate) fn link(loops: &[&EvLoop]) {
        let peers: Box<[Weak<Shared>]> = loops.iter().map(|l| Arc::downgrade(&l.shared)).collect();
        for l in loops {
            let _ = l.shared.peers.set(peers.clone());
        }
    }

    /// Hands connections to the loop, waking it once.
    pub(crate) fn arrive(&self, conns: impl IntoIterator<Item = Arriving>) {
        self.shared.arrive(conns);
    }

    /// Nanoseconds the loop has slept waiting for work since it started, the
    /// sleep it is in counted.
    pub(crate) fn idle_ns(&self) -> u64 {
        let sleeps = self.shared.sleeps.lock();
        sleeps.total_ns + sleeps.since.map_or(0, Stamp::elapsed_ns)
    }

    /// Tells the loop to send connections to other loops, waking it once. It
    /// sends those that wait between two passes, with nothing parked; the
    /// others stay, or, gathering, follow once they settle
    /// ([`Poller::leave_for_first`]).
    pub(crate) fn send_away(&self, sending: impl IntoIterator<Item = Sending>) {
        self.shared.inbox.lock().sending.extend(sending);
        let _ = self.shared.waker.wake();
    }

    /// Stops the loop and waits for it. Its connections must have ended.
    pub(crate) fn stop(self) {
        self.shared.inbox.lock().stop = true;
        let _ = self.shared.waker.wake();
        let mut stopped = self.shared.stopped.lock();
        while !*stopped {
            self.shared.stopped_cv.wait(&mut stopped);
        }
        self.shared.spares.lock().stop = true;
        self.shared.spares_cv.notify_all();
    }
}

impl Shared {
    fn arrive(&self, conns: impl IntoIterator<Item = Arriving>) {
        self.inbox.lock().arriving.extend(conns);
        let _ = self.waker.wake();
    }
}

/// Starts a thread of the loop: its poller when given the loop, else a spare.
/// The caller has counted it in `threads`, under the lock it decided under, so
/// that two hand-overs cannot both pass the cap; if it cannot start it is
/// counted out here.
fn spawn_thread(shared: &Arc<Shared>, poller: Option<Box<Poller>>) -> io::Result<()> {
    let name = format!("relcache-loop-{}", shared.index);
    let counted = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(name)
        .spawn(move || thread_main(counted, poller));
    if spawned.is_err() {
        shared.spares.lock().threads -= 1;
    }
    spawned.map(drop)
}

fn thread_main(shared: Arc<Shared>, mut poller: Option<Box<Poller>>) {
    // Commands may spawn tasks (a cluster link, say) or read tokio's clock.
    let rt = shared.rt.clone();
    let _entered = rt.enter();
    loop {
        // A spare told to end has been counted out already (`wait_for_loop`).
        let Some(p) = poller.take().or_else(|| wait_for_loop(&shared)) else {
            return;
        };
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| run(&shared, p)));
        match ran {
            Ok(Ran::Stopped) => break,
            Ok(Ran::HandedOver) => {}
            Err(_) => {
                // A bug in the loop's own bookkeeping (a command's panic is
                // caught around its connection): the loop is gone with its
                // clients' state, and every connection of this core would hang
                // in silence. Redis ends on a failed assertion; so does this.
                tracing::error!(core = shared.index, "event loop panicked: aborting");
                std::process::abort();
            }
        }
    }
    shared.spares.lock().threads -= 1;
}

/// Waits, as a spare, for the loop to be handed over; `None` once this thread
/// is to end, counted out of `threads` under the same lock as out of `idle`, so
/// a hand-over never counts a thread on its way out.
fn wait_for_loop(shared: &Shared) -> Option<Box<Poller>> {
    let mut spares = shared.spares.lock();
    spares.idle += 1;
    let mut deadline = std::time::Instant::now() + SPARE_KEEP;
    loop {
        if let Some(p) = spares.baton.take() {
            spares.idle -= 1;
            return Some(p);
        }
        if spares.stop {
            spares.idle -= 1;
            spares.threads -= 1;
            return None;
        }
        if shared
            .spares_cv
            .wait_until(&mut spares, deadline)
            .timed_out()
            && spares.baton.is_none()
        {
            if spares.idle > 1 {
                spares.idle -= 1;
                spares.threads -= 1;
                return None;
            }
            // The last spare stays.
            deadline = std::time::Instant::now() + SPARE_KEEP;
        }
    }
}

/// Whether this thread holds its loop now: not on a thread that has handed it
/// over (or never had one), where holding a connection up holds nobody else.
pub(crate) fn holds_loop() -> bool {
    let p = BATON.take();
    let held = p.is_some();
    BATON.set(p);
    held
}

/// Gives the loop this thread holds, if it holds one, to a spare thread, which
/// serves the loop's other connections while this one does long work for its
/// own; this thread becomes a spare when done. For [`crate::offload`].
pub(crate) fn hand_over() -> bool {
    let Some(poller) = BATON.take() else {
        return false;
    };
    let shared = poller.shared.clone();
    let mut spares = shared.spares.lock();
    if spares.idle == 0 && spares.threads >= shared.max_threads {
        drop(spares);
        BATON.set(Some(poller));
        return false;
    }
    spares.baton = Some(poller);
    let idle = spares.idle;
    if idle == 0 {
        // The thread about to be made, counted before the lock goes.
        spares.threads += 1;
    }
    drop(spares);
    if idle > 0 {
        shared.spares_cv.notify_one();
        return true;
    }
    // Hand-overs overlap: one more spare.
    if let Err(e) = spawn_thread(&shared, None) {
        if let Some(p) = shared.spares.lock().baton.take() {
            // No thread to be had: the work runs here, and the loop's other
            // clients wait for it, as they would in Redis.
            tracing::warn!(error = %e, "cannot hand the event loop over");
            BATON.set(Some(p));
            return false;
        }
    }
    true
}

/// A kill, messages, or a parked command's wake-up reach a connection's loop
/// as a wake: the waker of the kill token's future, of the message queue's
/// receiver or of the park's signals queues the connection's slot in the inbox.
struct Signal {
    shared: Arc<Shared>,
    slot: usize,
    id: u64,
    cause: Cause,
}

#[derive(Clone, Copy)]
enum Cause {
    Killed,
    Messages,
    /// The parked command's wake-up, or CLIENT UNBLOCK's.
    Parked,
}

impl Signal {
    fn waker(shared: &Arc<Shared>, slot: usize, id: u64, cause: Cause) -> Waker {
        Waker::from(Arc::new(Signal {
            shared: shared.clone(),
            slot,
            id,
            cause,
        }))
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut inbox = self.shared.inbox.lock();
        inbox.signalled.push((self.slot, self.id, self.cause));
        // A PUBLISH to many subscribers of one loop signals each of them: the
        // first signal since the loop last took its inbox wakes it, and the
        // loop takes all of them at once.
        let first = inbox.signalled.len() == 1;
        drop(inbox);
        if first {
            let _ = self.shared.waker.wake();
        }
    }
}

/// How a thread's turn at polling ended.
enum Ran {
    Stopped,
    /// It gave the loop away during a long command.
    HandedOver,
}

/// Polls and serves until the loop is stopped or this thread gives it away.
fn run(shared: &Shared, mut p: Box<Poller>) -> Ran {
    loop {
        // The last round's replies, written after all its requests had run, as
        // Redis writes in `beforeSleep`: a client with several connections
        // ready is woken once for their replies, not once for each. A pipelining
        // client woken by the first write, while the loop still ran the next
        // connection's requests, read that one reply, found nothing more and
        // slept again: with 50 connections on one loop, waking it (on a core of
        // its own, idle meanwhile) was a fifth of the loop's CPU.
        p = match write_replies(shared, p) {
            Ok(p) => p,
            Err(ran) => return ran,
        };
        // Connections still ready from the last round are served before any more
        // time goes in waiting.
        let timeout = if p.ready.is_empty() && p.again.is_empty() {
            p.timers
                .peek()
                .map(|Reverse((t, ..))| t.saturating_duration_since(Instant::now()))
        } else {
            Some(Duration::ZERO)
        };
        let Poller {
            poll,
            events,
            clients,
            ready,
            ..
        } = &mut *p;
        // Only a poll that may sleep is timed: a loop with work waiting polls
        // without, once a round.
        // A lock, not two atomics: the sleep in progress and the total must
        // be read on the same side of a wake-up, or the sleep counts twice or
        // not at all. Taken twice a sleep, which costs a system call anyway.
        let may_sleep = timeout != Some(Duration::ZERO);
        if may_sleep {
            shared.sleeps.lock().since = Some(Stamp::now());
        }
        let polled = poll.poll(events, timeout);
        if may_sleep {
            let mut sleeps = shared.sleeps.lock();
            if let Some(since) = sleeps.since.take() {
                sleeps.total_ns += since.elapsed_ns();
            }
        }
        if let Err(e) = polled {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "event loop cannot poll");
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        let mut woken = false;
        for ev in events.iter() {
            if ev.token() == WAKE {
                woken = true;
                continue;
            }
            let k = ev.token().0;
            let Some(Some(c)) = clients.get_mut(k) else {
                // Being served by a thread that gave the loop away: it is served
                // again when it comes back.
                continue;
            };
            if ev.is_read_closed() || ev.is_error() {
                c.sock.read_closed.set(true);
            }
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                c.sock.readable.set(true);
            }
            if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                c.sock.writable.set(true);
            }
            if !c.queued {
                c.queued = true;
                ready.push_back(k);
            }
        }
        if woken && p.take_inbox() {
            *p.shared.stopped.lock() = true;
            p.shared.stopped_cv.notify_all();
            return Ran::Stopped;
        }
        p.fire_timers();
        let Poller { ready, again, .. } = &mut *p;
        ready.extend(again.drain(..));

        let round = Stamp::now();
        let defer = p.ready.len() >= DEFER_REPLIES_MIN;
        for _ in 0..p.ready.len() {
            let Some(k) = p.ready.pop_front() else { break };
            // A round that has run long writes what it has so far: a reply waits
            // for the round's other requests only while they are quick.
            if !p.replies.is_empty() && round.elapsed_ns() > ROUND_REPLIES_NS {
                p = match write_replies(shared, p) {
                    Ok(p) => p,
                    Err(ran) => return ran,
                };
            }
            let Some(mut c) = p.clients.get_mut(k).and_then(Option::take) else {
                continue;
            };
            c.queued = false;
            let serve = |c: &mut Client| match serve_guarded(c) {
                Served::Replies(ran) if !defer => Served::Settled(flush_guarded(c, ran)),
                served => served,
            };
            let (back, c, served) = match with_baton(shared, p, k, c, serve, Served::written) {
                Ok(held) => held,
                Err(ran) => return ran,
            };
            p = back;
            match served {
                Served::Settled(verdict) => p.settle(k, c, verdict),
                Served::Replies(ran) => p.replies.push_back((k, c, ran)),
            }
        }
    }
}

/// Writes the replies waiting in `p` and settles their connections, with the
/// loop in [`BATON`] as while serving: closing one may wait (its WATCHed key's
/// shard held by a script, say) and give the loop to a spare thread, which then
/// writes the rest. `Err` once this thread no longer has the loop.
fn write_replies(shared: &Shared, mut p: Box<Poller>) -> Result<Box<Poller>, Ran> {
    while let Some((k, c, ran)) = p.replies.pop_front() {
        let flush = |c: &mut Client| flush_guarded(c, ran);
        let (back, c, verdict) = with_baton(shared, p, k, c, flush, |_, verdict| verdict)?;
        p = back;
        p.settle(k, c, verdict);
    }
    Ok(p)
}

/// Runs `work` on connection `c` (out of slot `k`) with the loop in [`BATON`],
/// so that a long step in it can give the loop to a spare thread: the loop
/// back, or, if it went, `c` sent back to it with the verdict `away` makes of
/// what `work` came to, and `Err`: this thread is done with the loop.
fn with_baton<T>(
    shared: &Shared,
    p: Box<Poller>,
    k: usize,
    mut c: Box<Client>,
    work: impl FnOnce(&mut Client) -> T,
    away: impl FnOnce(&mut Client, T) -> Verdict,
) -> Result<(Box<Poller>, Box<Client>, T), Ran> {
    BATON.set(Some(p));
    let done = work(&mut c);
    if let Some(p) = BATON.take() {
        return Ok((p, c, done));
    }
    let verdict = away(&mut c, done);
    shared.inbox.lock().returning.push((k, c, verdict));
    let _ = shared.waker.wake();
    Err(Ran::HandedOver)
}

/// [`serve`], with a panic (a bug in a command) costing the connection that
/// caused it and nobody else, as a task's panic does on a tokio runtime: the
/// loop and its other connections go on.
fn serve_guarded(c: &mut Client) -> Served {
    match std::panic::catch_unwind(AssertUnwindSafe(|| serve(c))) {
        Ok(served) => served,
        Err(_) => {
            c.conn.finish_after_panic(&c.server);
            Served::Settled(Verdict::Closed)
        }
    }
}

/// Serves a connection that is ready (or killed, or due): reads what it sent
/// and runs it; its replies are written by [`flush`].
fn serve(c: &mut Client) -> Served {
    let server = &*c.server;
    let conn = &mut c.conn;
    if c.killed {
        // Shutdown or CLIENT KILL: hand over what is already computed.
        conn.write_last(server, &c.sock);
        return Served::Settled(closed(c, Closed::Normal));
    }
    if std::mem::take(&mut c.messages_due) {
        conn.take_messages();
    }
    if std::mem::take(&mut c.unblocked) {
        conn.unblock(server);
    }
    if std::mem::take(&mut c.due) && conn.idle_expired(server) {
        tracing::debug!(client = conn.info().id, "closing idle client");
        return Served::Settled(closed(c, Closed::Normal));
    }
    if c.sock.readable.get() && conn.wants_read() {
        if let Err(why) = conn.read(server, &c.sock) {
            return Served::Settled(closed(c, why));
        }
    }
    match c.conn.run(server, &c.sock) {
        Err(Closed::Protocol) => Served::Settled(Verdict::Linger),
        Err(why) => Served::Settled(closed(c, why)),
        Ok(ran) => Served::Replies(ran),
    }
}

/// [`flush`], with a panic costing only its connection, as in [`serve_guarded`].
fn flush_guarded(c: &mut Client, ran: Replies) -> Verdict {
    match std::panic::catch_unwind(AssertUnwindSafe(|| flush(c, ran))) {
        Ok(verdict) => verdict,
        Err(_) => {
            c.conn.finish_after_panic(&c.server);
            Verdict::Closed
        }
    }
}

/// Writes the replies of the requests [`serve`] ran, and says what is next.
fn flush(c: &mut Client, ran: Replies) -> Verdict {
    match c.conn.flush(&c.server, &c.sock, ran) {
        Err(why) => closed(c, why),
        Ok(Pass::Again) => Verdict::Again,
        Ok(Pass::Wait) => {
            let more_input = c.sock.readable.get() && c.conn.wants_read();
            let more_output = c.sock.writable.get() && c.conn.wants_write();
            if more_input || more_output {
                Verdict::Again
            } else {
                Verdict::Wait
            }
        }
    }
}

fn closed(c: &mut Client, why: Closed) -> Verdict {
    // Or closing would wake the loop for nothing.
    c.kill = None;
    c.conn.finish(&c.server, why);
    Verdict::Closed
}

impl Poller {
    /// Takes what other threads left in the inbox; true once the loop is to stop.
    fn take_inbox(&mut self) -> bool {
        let inbox = std::mem::take(&mut *self.shared.inbox.lock());
        for a in inbox.arriving {
            self.admit(a);
        }
        for (k, mut c, verdict) in inbox.returning {
            // Whatever epoll said of it, a kill, messages, or its time coming,
            // while it was away went unrecorded: the kill is read from its
            // token, the queue looked at, the readiness asked of epoll again (a
            // modification reports what is ready now, the peer's shutdown
            // included), and its time is set anew.
            c.killed |= c.conn.info().kill.is_cancelled();
            c.messages_due = c.conn.queue().is_some();
            c.listening = None;
            if let Some(park) = &mut c.park {
                park.live = None;
            }
            c.timer = None;
            let _ = self.poll.registry().reregister(
                &mut c.sock.stream,
                Token(k),
                Interest::READABLE | Interest::WRITABLE,
            );
            c.sock.readable.set(true);
            c.sock.writable.set(true);
            let verdict = match verdict {
                Verdict::Wait => Verdict::Again,
                v => v,
            };
            self.settle(k, c, verdict);
        }
        for c in inbox.moving {
            self.admit_moved(c);
        }
        for s in inbox.sending {
            self.send_away(s);
        }
        for (k, id, cause) in inbox.signalled {
            self.wake_client(k, id, Some(cause));
        }
        inbox.stop
    }

    /// Takes a connection onto the loop.
    fn admit(&mut self, a: Arriving) {
        let Arriving {
            stream,
            server,
            info,
            tenancy,
        } = a;
        let _ = stream.set_nodelay(true);
        if let Some(keepalive) = server.config.keepalive() {
            let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        }
        let mut conn = Conn::new(&server, info.clone());
        let entry = self.clients.vacant_entry();
        let k = entry.key();
        let mut stream = TcpStream::from_std(stream);
        let registered = self.poll.registry().register(
            &mut stream,
            Token(k),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(e) = registered {
            tracing::warn!(error = %e, "cannot serve a connection");
            conn.finish(&server, Closed::Normal);
            return;
        }
        let mut kill = Box::pin(info.kill.clone().cancelled_owned());
        let signal = Signal::waker(&self.shared, k, info.id, Cause::Killed);
        let killed = kill
            .as_mut()
            .poll(&mut Context::from_waker(&signal))
            .is_ready();
        entry.insert(Some(Box::new(Client {
            sock: Sock {
                stream,
                readable: Cell::new(false),
                writable: Cell::new(false),
                read_closed: Cell::new(false),
            },
            messages_due: false,
            conn,
            server,
            tenancy,
            kill: Some(kill),
            messages: None,
            listening: None,
            park: None,
            unblocked: false,
            queued: false,
            timer: None,
            due: false,
            killed,
            homed: false,
        })));
        if killed {
            self.wake_client(k, info.id, None);
            return;
        }
        // A client that connects and never sends still has an idle timeout.
        self.arm_timer(k);
        // Accepted here as the loops gathered: it follows the others now, not
        // at the end of a first request that may never come.
        if self.shared.index >= self.shared.active.load(Relaxed) {
            if let Some(c) = self.clients[k].take() {
                if let Some(stays) = self.leave_for_first(k, c) {
                    self.clients[k] = Some(stays);
                }
            }
        }
    }

    /// Sends the connection in slot `k`, just served, to the loop its scripts
    /// call home, if they asked to go ([`crate::script::affinity`]) and it
    /// can: `None` once it is on its way, else the connection back. The home
    /// is among the loops taking connections now: none while they are
    /// gathered on one.
    fn move_home(&mut self, k: usize, mut c: Box<Client>) -> Option<Box<Client>> {
        let Some(shard) = c.conn.session.affinity.wants_move() else {
            return Some(c);
        };
        // A script that waited parked: it goes once the command has run again
        // and answered, at a later pass.
        if c.killed || c.conn.park_waiting().is_some() {
            return Some(c);
        }
        c.conn.session.affinity.clear();
        let to = self.shared.peers.get().and_then(|peers| {
            let active = self.shared.active.load(Relaxed).clamp(1, peers.len());
            let home = shard % active;
            let go =
                home != self.shared.index && c.server.config.script_loop_affinity.load(Relaxed);
            go.then(|| peers[home].upgrade()).flatten()
        });
        let Some(to) = to else {
            return Some(c);
        };
        let (server, homed) = (c.server.clone(), c.homed);
        c.homed = true;
        match self.send_to(k, c, &to) {
            None => {
                server.stats.connection_moves.incr();
                None
            }
            Some(mut stays) => {
                stays.homed = homed;
                Some(stays)
            }
        }
    }

    /// Sends connections waiting in their slots to another loop, as `s` says.
    fn send_away(&mut self, s: Sending) {
        let to = self
            .shared
            .peers
            .get()
            .and_then(|peers| peers.get(s.to)?.upgrade());
        // A spread's plan overtaken by a gathering is dropped.
        let takes = |to: &Shared| to.index < self.shared.active.load(Relaxed);
        let Some(to) = to.filter(|to| to.index != self.shared.index && takes(to)) else {
            return;
        };
        let going: Vec<usize> = self
            .clients
            .iter()
            .filter_map(|(k, c)| {
                let c = c.as_ref()?;
                let stays =
                    c.killed || (c.homed && !s.homed_too) || c.conn.park_waiting().is_some();
                (!stays).then_some(k)
            })
            .take(s.count)
            .collect();
        for k in going {
            let Some(c) = self.clients[k].take() else {
                continue;
            };
            if let Some(stays) = self.rebalance(k, c, &to) {
                self.clients[k] = Some(stays);
            }
        }
    }

    /// Sends the connection in slot `k`, just served or just accepted, to the
    /// first loop if this one takes no connections now (they gathered there)
    /// and it can go: `None` once it is on its way. One that was parked, or
    /// being served, when the loops gathered goes once it settles with nothing
    /// parked, so the gatherer asks each loop once, not every round.
    fn leave_for_first(&mut self, k: usize, c: Box<Client>) -> Option<Box<Client>> {
        if self.shared.index < self.shared.active.load(Relaxed)
            || c.killed
            || c.conn.park_waiting().is_some()
        {
            return Some(c);
        }
        let first = self.shared.peers.get().and_then(|p| p.first()?.upgrade());
        match first {
            Some(first) => self.rebalance(k, c, &first),
            None => Some(c),
        }
    }

    /// [`send_to`](Self::send_to) for gathering or spreading: the connection
    /// leaves its scripts' home, and is counted.
    fn rebalance(&mut self, k: usize, mut c: Box<Client>, to: &Shared) -> Option<Box<Client>> {
        let (server, homed) = (c.server.clone(), c.homed);
        c.homed = false;
        match self.send_to(k, c, to) {
            None => {
                server.stats.balance_moves.incr();
                None
            }
            Some(mut stays) => {
                stays.homed = homed;
                Some(stays)
            }
        }
    }

    /// Sends the connection from slot `k` to loop `to`: `None` once it is on
    /// its way, else the connection back, for its slot.
    ///
    /// It goes between two passes, with nothing parked, so all that ties it to
    /// this loop is its slot: its socket's registration, and the signals and
    /// timer that name the slot. Those are dropped here (a signal that fires
    /// meanwhile finds the slot empty, or another client's, and is ignored;
    /// so is the slot's place in the ready queue) and made again there, as
    /// for a connection back from a hand-over: the kill read from its token,
    /// its queue looked into, and readiness asked of the new epoll, which
    /// reports what is ready already.
    fn send_to(&mut self, k: usize, mut c: Box<Client>, to: &Shared) -> Option<Box<Client>> {
        if self.poll.registry().deregister(&mut c.sock.stream).is_err() {
            return Some(c);
        }
        self.clients.remove(k);
        c.kill = None;
        c.messages = None;
        c.listening = None;
        c.park = None;
        c.timer = None;
        c.due = false;
        c.queued = false;
        c.tenancy.move_to(&to.conns);
        let first = {
            let mut inbox = to.inbox.lock();
            inbox.moving.push(c);
            inbox.moving.len() == 1
        };
        if first {
            let _ = to.waker.wake();
        }
        None
    }

    /// Takes on a connection another loop sent ([`move_home`](Self::move_home)).
    fn admit_moved(&mut self, mut c: Box<Client>) {
        let entry = self.clients.vacant_entry();
        let k = entry.key();
        let registered = self.poll.registry().register(
            &mut c.sock.stream,
            Token(k),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(e) = registered {
            tracing::warn!(error = %e, "cannot serve a connection that moved");
            c.conn.finish(&c.server, Closed::Normal);
            return;
        }
        entry.insert(None);
        let id = c.conn.info().id;
        let mut kill = Box::pin(c.conn.info().kill.clone().cancelled_owned());
        let signal = Signal::waker(&self.shared, k, id, Cause::Killed);
        c.killed |= kill
            .as_mut()
            .poll(&mut Context::from_waker(&signal))
            .is_ready();
        c.kill = Some(kill);
        c.messages_due = c.conn.queue().is_some();
        c.sock.readable.set(true);
        c.sock.writable.set(true);
        self.settle(k, c, Verdict::Again);
    }

    /// Queues client `id` in slot `k` to be served, if it is still there, with
    /// what signalled it.
    fn wake_client(&mut self, k: usize, id: u64, cause: Option<Cause>) {
        if let Some(Some(c)) = self.clients.get_mut(k) {
            if c.conn.info().id != id {
                return;
            }
            match cause {
                Some(Cause::Killed) => c.killed = true,
                Some(Cause::Messages) => {
                    c.messages_due = true;
                    c.listening = None;
                }
                Some(Cause::Parked) => {
                    // The fired future is done: both are made again and
                    // polled once the client has been served, and say which.
                    if let Some(park) = &mut c.park {
                        park.live = None;
                    }
                }
                None => {}
            }
            if !c.queued {
                c.queued = true;
                self.ready.push_back(k);
            }
        }
    }

    /// Puts a connection that was served back in its slot, or lets it go.
    fn settle(&mut self, k: usize, mut c: Box<Client>, verdict: Verdict) {
        if matches!(verdict, Verdict::Wait | Verdict::Again) {
            // Gathering first: on the first loop, a script's home is that loop.
            c = match self.leave_for_first(k, c) {
                Some(stays) => stays,
                None => return,
            };
            c = match self.move_home(k, c) {
                Some(stays) => stays,
                None => return,
            };
        }
        let verdict = match verdict {
            // Messages that came while it was served are written now, and a
            // parked command whose signal came runs again.
            // Both are looked at: one must not keep the other from registering.
            Verdict::Wait => {
                let messages = self.messages_waiting(k, &mut c);
                let parked = self.park_signalled(k, &mut c);
                if messages || parked {
                    Verdict::Again
                } else {
                    Verdict::Wait
                }
            }
            v => v,
        };
        match verdict {
            Verdict::Wait => {
                self.clients[k] = Some(c);
                self.arm_timer(k);
            }
            Verdict::Again => {
                c.queued = true;
                self.clients[k] = Some(c);
                self.again.push(k);
            }
            Verdict::Closed => {
                self.clients.remove(k);
            }
            Verdict::Linger => {
                self.clients.remove(k);
                self.linger(*c);
            }
        }
    }

    /// For a connection with a message queue or a MONITOR feed that is to
    /// wait: registers its signal with them, or, if messages are already
    /// there, moves them into its output and says so.
    fn messages_waiting(&self, k: usize, c: &mut Client) -> bool {
        let monitor = c.conn.is_monitor();
        let registered = match c.conn.queue() {
            None => {
                // No queue (a RESET): the old one is let go.
                c.listening = None;
                true
            }
            // Registered, and not fired since: every message sent fires it,
            // one a pass then takes first too, and so does a pass that finds
            // one half sent.
            Some(queue) => c.listening.as_ref().is_some_and(|l| Arc::ptr_eq(l, queue)),
        };
        if registered && !monitor {
            return false;
        }
        let id = c.conn.info().id;
        let Client {
            conn,
            messages,
            listening,
            ..
        } = c;
        let waker =
            messages.get_or_insert_with(|| Signal::waker(&self.shared, k, id, Cause::Messages));
        let cx = &mut Context::from_waker(waker);
        // A MONITOR's feed, looked into after every pass: it sends nothing of
        // its own, so a pass follows a line.
        let mut moved = monitor && conn.poll_monitor(cx);
        if !registered {
            let queue = conn.queue().cloned();
            if conn.poll_messages(cx) {
                *listening = None;
                moved = true;
            } else {
                *listening = queue;
            }
        }
        moved
    }

    /// For a connection whose parked command is to wait: registers its
    /// signals, once a park, or, if one has fired, marks the command woken or
    /// has it answer CLIENT UNBLOCK, and says so.
    fn park_signalled(&self, k: usize, c: &mut Client) -> bool {
        let Some(seq) = c.conn.park_waiting() else {
            if let Some(park) = &mut c.park {
                park.live = None;
            }
            return false;
        };
        let id = c.conn.info().id;
        let park = c.park.get_or_insert_with(|| {
            Box::new(ParkSignals {
                waker: Signal::waker(&self.shared, k, id, Cause::Parked),
                live: None,
            })
        });
        if park.live.as_ref().is_some_and(|(live, _)| *live == seq) {
            return false;
        }
        park.live = None;
        let Some(mut signals) = c.conn.park_signals() else {
            return false;
        };
        let [woken, unblocked] = &mut signals;
        let cx = &mut Context::from_waker(&park.waker);
        if woken.as_mut().poll(cx).is_ready() {
            c.conn.wake_parked();
            return true;
        }
        if unblocked.as_mut().poll(cx).is_ready() {
            // Answered when it is served, where a panic costs this client only.
            c.unblocked = true;
            return true;
        }
        park.live = Some((seq, signals));
        false
    }

    /// Hands a connection that broke the protocol to a task of the core's
    /// runtime, for its lingering close.
    fn linger(&mut self, c: Client) {
        let Client {
            sock,
            conn,
            server,
            tenancy,
            ..
        } = c;
        let mut stream = sock.stream;
        let _ = self.poll.registry().deregister(&mut stream);
        let stream = std::net::TcpStream::from(stream);
        self.shared.rt.spawn(async move {
            task::linger(server, stream, conn).await;
            // The connection is the server's until it has closed.
            drop(tenancy);
        });
    }

    /// Puts the client in slot `k` in the timer heap if it has a time to be
    /// looked at. The heap may hold a later time for it (an idle timeout): one
    /// that comes sooner (the soft output limit's) goes in too, and the later
    /// one is skipped when it comes.
    fn arm_timer(&mut self, k: usize) {
        let Some(Some(c)) = self.clients.get_mut(k) else {
            return;
        };
        if let Some(t) = c.conn.deadline(&c.server, Instant::now) {
            if c.timer.is_none_or(|armed| t < armed) {
                c.timer = Some(t);
                self.timers.push(Reverse((t, k, c.conn.info().id)));
            }
        }
        // Entries of clients gone or re-armed stay until their time: with many
        // short connections under a long `timeout`, only the live ones are kept.
        if self.timers.len() > 2 * self.clients.len() + 1024 {
            let clients = &self.clients;
            self.timers.retain(|&Reverse((t, k, id))| {
                matches!(clients.get(k), Some(Some(c)) if c.timer == Some(t) && c.conn.info().id == id)
            });
        }
    }

    /// Looks at connections whose time has come: those idle past `timeout`
    /// close, those over the soft output limit are checked against it, a
    /// parked command whose recheck has come runs again; the others, active
    /// since, go back in the heap at their new time.
    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(&Reverse((t, k, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(Some(c)) = self.clients.get_mut(k) else {
                continue;
            };
            if c.conn.info().id != id || c.timer != Some(t) {
                continue;
            }
            c.timer = None;
            match c.conn.deadline(&c.server, || now) {
                Some(next) if next > now => {
                    c.timer = Some(next);
                    self.timers.push(Reverse((next, k, id)));
                }
                Some(_) => {
                    c.due = true;
                    self.wake_client(k, id, None);
                }
                None => {}
            }
        }
    }
}
