//! Per-connection state, and the registry of connected clients (CLIENT LIST/KILL).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use relcache_protocol::resp::Protocol;
use tokio_util::sync::CancellationToken;

use crate::client_memory::{ClientMem, FIXED};
use crate::db::WatchFlag;
use crate::stats::Gauge;

/// What CLIENT LIST / INFO / KILL see of a connection; shared between the
/// connection task and the registry.
pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created: Instant,
    pub name: Mutex<Option<Bytes>>,
    pub lib_name: Mutex<Option<Bytes>>,
    pub lib_ver: Mutex<Option<Bytes>>,
    /// When it last sent input or was sent a reply it had not just asked for
    /// (Redis's `lastinteraction`), as [`crate::clock::Stamp`] ticks: a counter
    /// read, where an `Instant` is a serialising clock read on every round trip.
    pub last_active: AtomicU64,
    /// The last command's id in `cmd::registry().all` (`usize::MAX` before the
    /// first): an atomic, because it is written on every command.
    pub last_cmd: AtomicUsize,
    pub proto: AtomicU8,
    /// Pending queued commands (-1 outside MULTI), for the `multi=` field.
    pub multi: AtomicU64,
    /// Keys it WATCHes (CLIENT LIST's `watch=`, Redis 7.4), published by the
    /// connection, which alone keeps the list.
    pub watching: AtomicU64,
    /// What its buffers hold (CLIENT LIST's `qbuf` … `tot-mem`), published by the
    /// connection as they change.
    pub mem: ClientMem,
    /// `CLIENT NO-EVICT on`: never closed to bring client memory under
    /// `maxmemory-clients` (the `e` flag).
    pub no_evict: AtomicBool,
    /// Parked in a blocking command (the `b` flag of CLIENT LIST); kept by
    /// [`crate::blocking`], like the two fields below.
    pub(crate) blocked: std::sync::atomic::AtomicBool,
    /// Which park this is: counted up each time a command parks, so a CLIENT
    /// UNBLOCK meant for one wait cannot end the next.
    pub(crate) parks: AtomicU64,
    /// Set by CLIENT UNBLOCK for a parked client, which then answers its parked
    /// command at once: the park's number and a [`crate::blocking::Unblock`] in one
    /// word (0: not asked).
    pub(crate) unblock: AtomicU64,
    /// Wakes the connection to act on `unblock`.
    pub(crate) unblock_signal: tokio::sync::Notify,
    /// Channels and patterns it is subscribed to (`sub=`, `psub=`), kept by
    /// [`crate::pubsub`].
    pub sub: AtomicU64,
    pub psub: AtomicU64,
    /// Client-side caching's CLIENT LIST flags (`crate::tracking::FLAG_*`) and
    /// the client its invalidations go to (`redir=`), kept by [`crate::tracking`].
    pub tracking: AtomicU8,
    pub redirect: AtomicU64,
    /// Shard channels (`ssub=`).
    pub ssub: AtomicU64,
    /// Cancelled by CLIENT KILL (and by shutdown, as a child of the server token).
    pub kill: CancellationToken,
}

impl ClientInfo {
    /// Seconds since it connected: CLIENT LIST's `age`, and what CLIENT KILL
    /// MAXAGE compares.
    pub fn age_secs(&self) -> u64 {
        self.created.elapsed().as_secs()
    }

    pub fn idle_secs(&self) -> u64 {
        crate::clock::Stamp::from_ticks(self.last_active.load(Relaxed)).elapsed_ns() / 1_000_000_000
    }

    /// One CLIENT LIST / CLIENT INFO line (without the trailing newline), with the
    /// fields Redis 7.4 prints, in its order. `running` is the arguments of the
    /// command being run, when the line is the caller's own (its `argv-mem`, as in
    /// Redis; other clients show what their connection published).
    ///
    /// The buffer fields keep Redis's meanings where relcache has the same buffer:
    /// relcache has one contiguous reply buffer and no reply list, so `rbs` is that
    /// buffer's allocation, `obl` and `omem` the reply bytes waiting in it (what
    /// `client-output-buffer-limit` counts), and `oll` is 0.
    pub fn line(&self, running: Option<&[&[u8]]>) -> String {
        let lossy = |b: &Mutex<Option<Bytes>>| {
            b.lock()
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let multi = self.multi.load(Relaxed);
        let multi = if multi == u64::MAX { -1 } else { multi as i64 };
        // In Redis's order.
        let mut flags = String::new();
        let (sub, psub) = (self.sub.load(Relaxed), self.psub.load(Relaxed));
        let ssub = self.ssub.load(Relaxed);
        if sub + psub + ssub > 0 {
            flags.push('P');
        }
        if multi >= 0 {
            flags.push('x');
        }
        if self.blocked.load(Relaxed) {
            flags.push('b');
        }
        let tracking = self.tracking.load(Relaxed);
        crate::tracking::list_flags(tracking, &mut flags);
        if self.no_evict.load(Relaxed) {
            flags.push('e');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let m = &self.mem;
        let published_argv = m.argv.load(Relaxed);
        let (argv, total) = match running {
            Some(args) => {
                let running: u64 = args.iter().map(|a| a.len() as u64).sum();
                (running, m.total() - published_argv + running)
            }
            None => (published_argv, m.total()),
        };
        // Messages still queued for a subscriber are output it has not taken.
        let (rbs, pending) = (
            m.output_alloc.load(Relaxed),
            m.output_len.load(Relaxed) + m.pubsub.load(Relaxed),
        );
        let multi_mem = m.multi.load(Relaxed);
        let redir = match tracking & crate::tracking::FLAG_ON {
            0 => -1,
            _ => self.redirect.load(Relaxed) as i64,
        };
        format!(
            "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags={flags} db=0 sub={sub} psub={psub} ssub={ssub} multi={multi} watch={} qbuf={} qbuf-free={} argv-mem={argv} multi-mem={multi_mem} rbs={rbs} rbp={rbs} obl={pending} oll=0 omem={pending} tot-mem={total} events=r cmd={} user=default redir={redir} resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            lossy(&self.name),
            self.age_secs(),
            self.idle_secs(),
            self.watching.load(Relaxed),
            m.qbuf.load(Relaxed),
            m.qbuf_free.load(Relaxed),
            match self.last_cmd.load(Relaxed) {
                usize::MAX => "NULL",
                id => crate::cmd::registry().all[id].name,
            },
            self.proto.load(Relaxed),
            lossy(&self.lib_name),
            lossy(&self.lib_ver),
        )
    }
}

/// All connected clients.
#[derive(Default)]
pub struct Clients {
    map: Mutex<std::collections::BTreeMap<u64, Arc<ClientInfo>>>,
    next_id: AtomicU64,
    /// The sum of every client's `tot-mem` (INFO `mem_clients_normal`): striped,
    /// as connections on every worker change it.
    memory: Gauge,
    /// Clients that WATCH at least one key (INFO `watching_clients`).
    watching: AtomicUsize,
    /// Held by whoever is choosing clients to evict (see
    /// [`crate::client_memory::evict_clients`]).
    pub(crate) evicting: Mutex<()>,
}

impl Clients {
    /// Registers a new connection, unless `max` are already connected.
    pub fn register(
        &self,
        addr: SocketAddr,
        laddr: SocketAddr,
        parent: &CancellationToken,
        max: usize,
    ) -> Option<Arc<ClientInfo>> {
        let mut map = self.map.lock();
        if map.len() >= max {
            return None;
        }
        let id = self.next_id.fetch_add(1, Relaxed) + 1;
        let info = Arc::new(ClientInfo {
            id,
            addr,
            laddr,
            created: Instant::now(),
            name: Mutex::new(None),
            lib_name: Mutex::new(None),
            lib_ver: Mutex::new(None),
            last_active: AtomicU64::new(crate::clock::Stamp::now().ticks()),
            last_cmd: AtomicUsize::new(usize::MAX),
            proto: AtomicU8::new(2),
            multi: AtomicU64::new(u64::MAX),
            watching: AtomicU64::new(0),
            mem: ClientMem::default(),
            no_evict: AtomicBool::new(false),
            blocked: std::sync::atomic::AtomicBool::new(false),
            parks: AtomicU64::new(0),
            unblock: AtomicU64::new(0),
            unblock_signal: tokio::sync::Notify::new(),
            sub: AtomicU64::new(0),
            psub: AtomicU64::new(0),
            tracking: AtomicU8::new(0),
            redirect: AtomicU64::new(0),
            ssub: AtomicU64::new(0),
            kill: parent.child_token(),
        });
        map.insert(id, info.clone());
        self.memory.add(FIXED as i64);
        Some(info)
    }

    /// Forgets a client that has closed, and the memory it held.
    pub fn unregister(&self, id: u64) {
        if let Some(info) = self.map.lock().remove(&id) {
            self.memory.add(-(info.mem.total() as i64));
        }
    }

    /// Bytes every client holds, together (Redis's `mem_clients_normal`).
    pub fn memory(&self) -> u64 {
        self.memory.get().max(0) as u64
    }

    /// A client's footprint changed by `delta` bytes.
    pub(crate) fn add_memory(&self, delta: i64) {
        self.memory.add(delta);
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Clients that WATCH at least one key.
    pub fn watching(&self) -> usize {
        self.watching.load(Relaxed)
    }

    /// A client started (`1`) or stopped (`-1`) watching keys.
    pub(crate) fn watching_changed(&self, delta: isize) {
        if delta > 0 {
            self.watching.fetch_add(1, Relaxed);
        } else {
            self.watching.fetch_sub(1, Relaxed);
        }
    }

    /// The client with this id, if connected.
    pub fn get(&self, id: i64) -> Option<Arc<ClientInfo>> {
        let id = u64::try_from(id).ok()?;
        self.map.lock().get(&id).cloned()
    }

    /// A snapshot, in id order.
    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.map.lock().values().cloned().collect()
    }
}

/// State of an open MULTI.
#[derive(Default)]
pub struct Multi {
    pub queued: Vec<Vec<Bytes>>,
    /// What the queued commands hold (CLIENT LIST's `multi-mem`).
    pub bytes: usize,
    /// A command failed to queue (unknown, wrong arity): EXEC will abort.
    pub failed: bool,
}

impl Multi {
    /// Queues a command for EXEC: `args` owned ([`crate::cmd::Argv::to_owned_vec`]),
    /// not slices of the read buffer, which would keep the whole buffer — with
    /// whatever else had arrived in it — alive and uncounted until EXEC.
    pub fn queue(&mut self, args: Vec<Bytes>) {
        self.bytes += args.iter().map(|a| a.len()).sum::<usize>()
            + std::mem::size_of_val(&args[..])
            + std::mem::size_of::<Vec<Bytes>>();
        self.queued.push(args);
    }
}

/// What one connection knows about itself.
pub struct Session {
    pub info: Arc<ClientInfo>,
    pub proto: Protocol,
    pub authenticated: bool,
    pub multi: Option<Multi>,
    /// Raised by any shard when a watched key changes.
    pub watch_flag: WatchFlag,
    /// Watched keys, with the expiry each had at WATCH time (a key that expires
    /// before EXEC counts as changed, as in Redis 7).
    pub watched: Vec<(Bytes, Option<u64>)>,
    /// Set while this connection is a MONITOR: the lines it is sent.
    pub monitor: Option<crate::observe::monitor::Feed>,
    /// Set once this connection first subscribes: what it listens to and the
    /// messages on their way to it.
    pub pubsub: Option<Box<crate::pubsub::Subscription>>,
    /// Set while CLIENT TRACKING is on.
    pub tracking: Option<Box<crate::tracking::State>>,
    /// Cluster mode: ASKING was sent, so the next command (or transaction) may
    /// touch a slot this node is importing.
    pub asking: bool,
    /// Cluster mode: READONLY was sent (reads may be served by replicas, which
    /// relcache does not have yet: kept so READWRITE and CLIENT INFO agree).
    pub readonly: bool,
    /// The command this connection sent last, to skip looking its name up again.
    pub last_command: crate::cmd::LastCommand,
    /// Its scripts' run of waits for other clients' scripts, which may move it
    /// to another loop.
    pub affinity: crate::script::affinity::Affinity,
    /// How long its commands have run, all told, as their statistics count
    /// it: what a loop's pass reads to know when to let the loop's other
    /// connections have their turn (`PASS_BUDGET_NS` in `crate::conn`).
    pub busy_ns: u64,
}

impl ClientInfo {
    /// Subscribed to a channel or pattern: Redis's `pubsub` client class.
    pub fn is_pubsub(&self) -> bool {
        self.sub.load(Relaxed) + self.psub.load(Relaxed) + self.ssub.load(Relaxed) > 0
    }
}

impl Session {
    pub fn new(info: Arc<ClientInfo>, authenticated: bool) -> Session {
        Session {
            info,
            proto: Protocol::Resp2,
            authenticated,
            multi: None,
            watch_flag: WatchFlag::default(),
            watched: Vec::new(),
            monitor: None,
            pubsub: None,
            tracking: None,
            asking: false,
            readonly: false,
            last_command: Default::default(),
            affinity: Default::default(),
            busy_ns: 0,
        }
    }

    pub fn id(&self) -> u64 {
        self.info.id
    }

    pub fn set_proto(&mut self, proto: Protocol) {
        self.proto = proto;
        self.info.proto.store(proto.version() as u8, Relaxed);
    }
}
