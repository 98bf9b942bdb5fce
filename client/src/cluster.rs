//! Routing by hash slot over a Redis Cluster (relcache or Redis in cluster mode).
//!
//! A [`ClusterPool`] reads the slot map (`CLUSTER SLOTS`) from any node it is given,
//! keeps one [`Pool`] per node, and sends each command to the node serving its
//! key's slot ([`key_slot`]). The map is a cache of the cluster's state, and the
//! cluster corrects it:
//!
//! - `-MOVED <slot> <host:port>`: the slot is served elsewhere for good. The entry
//!   for that slot is fixed at once, the command is sent there, and the whole map is
//!   read again in the background (at most once per `refresh_interval`), since one
//!   moved slot often means a resharding that moved many.
//! - `-ASK <slot> <host:port>`: the slot is migrating and this key is already on the
//!   importing node. The command is sent there once, preceded by `ASKING` on the
//!   same connection; the map is not changed (the slot still belongs to the source
//!   until the migration ends).
//! - `-TRYAGAIN`: a multi-key command whose keys are split by a migration; it is
//!   sent again after `tryagain_delay`.
//!
//! A redirect means the command did not run, so following it is always safe; after
//! `max_redirects` the call fails with [`Error::TooManyRedirects`]. A transport
//! failure is not retried (as with [`Pool`], whether the command ran is the
//! caller's to judge), but it schedules a refresh, since a failover may have moved
//! the node's slots.
//!
//! Pipelines ([`ClusterPool::run_pipeline`]) are split by node, the parts sent in
//! parallel, redirected commands sent again one by one, and the answers put back in
//! the caller's order. A command over several keys must keep them in one slot
//! (`-CROSSSLOT` otherwise, as in Redis); [`ClusterPool::run_split`] splits one
//! such command (`IDSET.WHICH`, `MGET`) into one per slot and merges the answers.
//!
//! Not here: replicas (every command goes to the slot's primary), pub/sub, and
//! transactions, which need a connection of one's own on the right node
//! ([`ClusterPool::node_for_key`], then [`Pool::get`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use relcache_protocol::slot::{key_slot, SLOTS};

use crate::commands::finish;
use crate::{Cmd, Error, Frame, Pool, PoolConfig};

/// How a [`ClusterPool`] finds the cluster, connects and follows redirects.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// `host:port` of some of the cluster's nodes: the slot map is read from the
    /// first that answers, and from them again if every known node fails.
    pub seeds: Vec<String>,
    /// How each node's [`Pool`] connects and times out; its `addr` is ignored.
    pub pool: PoolConfig,
    /// Redirects (and `-TRYAGAIN`s) a call follows before it gives up. Redis's own
    /// clients use 16 or so: enough for a slot to move twice during a call.
    pub max_redirects: u32,
    /// How long to wait before sending a command again after `-TRYAGAIN`.
    pub tryagain_delay: Duration,
    /// The least time between two background reads of the slot map.
    pub refresh_interval: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            seeds: vec!["127.0.0.1:6379".into()],
            pool: PoolConfig::default(),
            max_redirects: 16,
            tryagain_delay: Duration::from_millis(20),
            refresh_interval: Duration::from_millis(500),
        }
    }
}

/// Connections to every primary of a cluster, routed by slot; shared by cloning.
///
/// ```no_run
/// # async fn example() -> Result<(), relcache_client::Error> {
/// use relcache_client::{ClusterConfig, ClusterPool, Cmd};
///
/// let cluster = ClusterPool::connect(ClusterConfig {
///     seeds: vec!["127.0.0.1:7000".into()],
///     ..ClusterConfig::default()
/// })
/// .await?;
/// // Sent to the node that serves the key's slot, following MOVED and ASK.
/// cluster.run(Cmd::set("{user:1}:name", "ada")).await?;
/// let name = cluster.run(Cmd::get("{user:1}:name")).await?;
/// # let _ = name;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ClusterPool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClusterConfig,
    /// The node serving each slot, as last heard. A std lock: read on every call,
    /// written on a redirect or a refresh, never held across an await.
    slots: RwLock<Vec<Option<Arc<str>>>>,
    /// One pool per node ever routed to, by address.
    nodes: Mutex<HashMap<Arc<str>, Pool>>,
    refresh: Mutex<Refresh>,
}

#[derive(Debug, Default)]
struct Refresh {
    /// When the map was last read (or a read started).
    last: Option<Instant>,
    /// A background read is under way; others need not start one.
    running: bool,
}

/// What a cluster error reply asks of the client.
#[derive(Debug, PartialEq, Eq)]
enum Redirect {
    Moved { slot: u16, addr: Arc<str> },
    Ask { addr: Arc<str> },
    TryAgain,
}

impl Redirect {
    /// Reads `-MOVED 3999 127.0.0.1:6381`, `-ASK …` or `-TRYAGAIN …` from the node
    /// at `from` (an address with an empty host, `:6381`, is on `from`'s host).
    fn parse(e: &Error, from: &str) -> Option<Redirect> {
        let Error::Server(text) = e else {
            return None;
        };
        let mut words = text.split_ascii_whitespace();
        let code = words.next()?;
        if code == "TRYAGAIN" {
            return Some(Redirect::TryAgain);
        }
        if code != "MOVED" && code != "ASK" {
            return None;
        }
        let slot: u16 = words.next()?.parse().ok()?;
        let addr = words.next()?;
        let addr: Arc<str> = match addr.strip_prefix(':') {
            Some(port) => format!("{}:{port}", host_of(from)).into(),
            None => addr.into(),
        };
        Some(match code {
            "MOVED" => Redirect::Moved { slot, addr },
            _ => Redirect::Ask { addr },
        })
    }
}

/// The host part of `host:port` (an IPv6 host keeps its colons).
fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(host, _)| host)
}

/// The key a command is routed by: the first argument after the name, except for
/// `IDSET.WHICH id key …`; `None` for commands without keys, which any node answers.
fn routing_key(args: &[Bytes]) -> Option<&Bytes> {
    let name = args.first()?;
    const KEYLESS: &[&str] = &[
        "PING",
        "INFO",
        "CLUSTER",
        "COMMAND",
        "HELLO",
        "AUTH",
        "ECHO",
        "TIME",
        "DBSIZE",
        "CONFIG",
        "CLIENT",
        "ASKING",
        "READONLY",
        "READWRITE",
        "LASTSAVE",
    ];
    if KEYLESS
        .iter()
        .any(|k| name.eq_ignore_ascii_case(k.as_bytes()))
    {
        return None;
    }
    if name.eq_ignore_ascii_case(b"IDSET.WHICH") {
        return args.get(2);
    }
    args.get(1)
}

/// A command as sent, for routing and re-sending.
struct Sent {
    args: Vec<Bytes>,
    slot: Option<u16>,
    blocks_for: Duration,
}

impl Sent {
    fn of<T>(cmd: Cmd<T>) -> (Sent, crate::commands::Parser<T>) {
        let (args, parse, blocks_for) = cmd.into_parts();
        let slot = routing_key(&args).map(|k| key_slot(k));
        (
            Sent {
                args,
                slot,
                blocks_for,
            },
            parse,
        )
    }

    fn raw(&self) -> Cmd<Frame> {
        Cmd::new(self.args.clone(), Ok).blocking(self.blocks_for)
    }
}

fn asking() -> Cmd<Frame> {
    Cmd::new(vec![Bytes::from_static(b"ASKING")], Ok)
}

impl ClusterPool {
    /// A pool over the cluster `config.seeds` belong to, with its slot map read.
    ///
    /// # Errors
    ///
    /// The last seed's error if no seed answered `CLUSTER SLOTS` (a node not in
    /// cluster mode answers `-ERR This instance has cluster support disabled`).
    pub async fn connect(config: ClusterConfig) -> Result<ClusterPool, Error> {
        let cluster = ClusterPool {
            inner: Arc::new(Inner {
                config,
                slots: RwLock::new(vec![None; SLOTS]),
                nodes: Mutex::default(),
                refresh: Mutex::default(),
            }),
        };
        cluster.refresh().await?;
        Ok(cluster)
    }

    /// The configuration this pool was made with.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// The address of the node serving `key`'s slot, as last heard (without asking
    /// the cluster).
    pub fn node_for_key(&self, key: &[u8]) -> Option<Arc<str>> {
        self.inner.owner(key_slot(key))
    }

    /// Every node that serves at least one slot, as last heard, each once, sorted.
    pub fn primaries(&self) -> Vec<Arc<str>> {
        let slots = self.inner.slots();
        let mut nodes: Vec<Arc<str>> = slots.iter().flatten().cloned().collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The pool of connections to the node at `addr` (made on first use).
    pub fn node(&self, addr: &str) -> Pool {
        self.inner.node(addr)
    }

    /// Reads the slot map again, now, from the first node that answers (known
    /// primaries first, then the seeds), and replaces the one held.
    ///
    /// # Errors
    ///
    /// The last node's error if none answered with a slot map.
    pub async fn refresh(&self) -> Result<(), Error> {
        self.refresh_now().await
    }

    /// Tells the pool that a command it did not route (one pinned to a node's
    /// connection, from [`node`](Self::node)) was answered with `e`: a `-MOVED`
    /// fixes that slot's entry, and any redirect or lost connection has the map
    /// read again soon. Other errors change nothing.
    pub fn redirected(&self, e: &Error) {
        match Redirect::parse(e, "") {
            Some(Redirect::Moved { slot, addr }) if !addr.starts_with(':') => {
                self.moved(slot, &addr)
            }
            Some(_) => self.refresh_soon(),
            None => self.failed(e),
        }
    }

    /// Runs `cmd` on the node serving its key's slot (the first argument after the
    /// name; `IDSET.WHICH`'s first key), following redirects. A command without a
    /// key goes to any node.
    ///
    /// # Errors
    ///
    /// As [`Pool::run`]; [`Error::TooManyRedirects`] if the slot kept moving;
    /// [`Error::SlotUnserved`] if no node serves it.
    pub async fn run<T>(&self, cmd: Cmd<T>) -> Result<T, Error> {
        let (sent, parse) = Sent::of(cmd);
        let reply = self.send(&sent).await;
        finish_result(parse, reply)
    }

    /// Runs `cmds` as one pipeline per node, the nodes in parallel, and returns the
    /// answers in the order of `cmds`. A command redirected inside its node's
    /// pipeline is sent again on its own, following the redirect.
    ///
    /// # Errors
    ///
    /// The first transport failure of any node's pipeline (as [`Pool::run_pipeline`]:
    /// the answers of that node are lost, and the others are dropped with them);
    /// [`Error::SlotUnserved`] before anything is sent if a slot has no node.
    pub async fn run_pipeline<T>(&self, cmds: Vec<Cmd<T>>) -> Result<Vec<Result<T, Error>>, Error> {
        let (sent, parsers): (Vec<Sent>, Vec<_>) = cmds.into_iter().map(Sent::of).unzip();
        let mut by_node: Vec<(Arc<str>, Vec<usize>)> = Vec::new();
        for (i, s) in sent.iter().enumerate() {
            let addr = self.route(s.slot).await?;
            match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, ids)) => ids.push(i),
                None => by_node.push((addr, vec![i])),
            }
        }
        let parts = by_node.iter().map(|(addr, ids)| {
            let pool = self.inner.node(addr);
            let batch = ids.iter().map(|&i| sent[i].raw()).collect();
            async move { pool.run_pipeline(batch).await }
        });
        let mut replies: Vec<Option<Result<Frame, Error>>> =
            (0..sent.len()).map(|_| None).collect();
        for ((addr, ids), part) in by_node.iter().zip(join_all(parts).await) {
            let part = part.inspect_err(|e| self.failed(e))?;
            for (&i, reply) in ids.iter().zip(part) {
                replies[i] = Some(match reply {
                    Err(e) => self.follow(&sent[i], addr, e).await,
                    ok => ok,
                });
            }
        }
        Ok(parsers
            .into_iter()
            .zip(replies)
            .map(|(parse, reply)| finish_result(parse, reply.expect("every command answered")))
            .collect())
    }

    /// Runs a command over many keys that must share a slot (`IDSET.WHICH`,
    /// `MGET`) over keys in any slots: `build` makes one command for the keys of
    /// each slot, answering one item per key in order; the commands are pipelined
    /// per node ([`run_pipeline`](Self::run_pipeline)) and the items put back in the
    /// order of `keys`.
    ///
    /// ```no_run
    /// # async fn example(cluster: relcache_client::ClusterPool, keys: Vec<bytes::Bytes>) -> Result<(), relcache_client::Error> {
    /// use relcache_client::Cmd;
    ///
    /// // Which of these users' sets hold 42: one IDSET.WHICH per slot.
    /// let answers = cluster.run_split(&keys, |keys| Cmd::idset_which(42, keys)).await?;
    /// assert_eq!(answers.len(), keys.len());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run_pipeline`](Self::run_pipeline), or the first command's error;
    /// [`Error::UnexpectedReply`] if a command answered a different number of items
    /// than it had keys.
    pub async fn run_split<T>(
        &self,
        keys: &[Bytes],
        build: impl Fn(&[Bytes]) -> Cmd<Vec<T>>,
    ) -> Result<Vec<T>, Error> {
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let slot = key_slot(key);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, ids)) => ids.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        let cmds = groups
            .iter()
            .map(|(_, ids)| {
                let group: Vec<Bytes> = ids.iter().map(|&i| keys[i].clone()).collect();
                build(&group)
            })
            .collect();
        let mut items: Vec<Option<T>> = (0..keys.len()).map(|_| None).collect();
        for ((_, ids), answer) in groups.iter().zip(self.run_pipeline(cmds).await?) {
            let answer = answer?;
            if answer.len() != ids.len() {
                return Err(Error::UnexpectedReply(format!(
                    "{} items for {} keys",
                    answer.len(),
                    ids.len()
                )));
            }
            for (&i, item) in ids.iter().zip(answer) {
                items[i] = Some(item);
            }
        }
        Ok(items
            .into_iter()
            .map(|i| i.expect("every key answered"))
            .collect())
    }
}

fn finish_result<T>(
    parse: crate::commands::Parser<T>,
    reply: Result<Frame, Error>,
) -> Result<T, Error> {
    finish(parse, reply?)
}

impl Inner {
    fn slots(&self) -> std::sync::RwLockReadGuard<'_, Vec<Option<Arc<str>>>> {
        // Every write replaces one entry or the whole map: never half-updated.
        self.slots.read().unwrap_or_else(|e| e.into_inner())
    }

    fn owner(&self, slot: u16) -> Option<Arc<str>> {
        self.slots()[usize::from(slot)].clone()
    }

    fn node(&self, addr: &str) -> Pool {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = nodes.get(addr) {
            return pool.clone();
        }
        let pool = Pool::new(PoolConfig {
            addr: addr.to_owned(),
            ..self.config.pool.clone()
        });
        nodes.insert(addr.into(), pool.clone());
        pool
    }
}

impl ClusterPool {
    /// The node to send a command for `slot` to: its owner (the map read again
    /// first if none is known), or any node for a keyless command.
    async fn route(&self, slot: Option<u16>) -> Result<Arc<str>, Error> {
        let known = match slot {
            Some(slot) => self.inner.owner(slot),
            None => self.inner.slots().iter().flatten().next().cloned(),
        };
        if let Some(addr) = known {
            return Ok(addr);
        }
        self.refresh_now().await?;
        match slot {
            Some(slot) => self.inner.owner(slot).ok_or(Error::SlotUnserved(slot)),
            None => self
                .inner
                .slots()
                .iter()
                .flatten()
                .next()
                .cloned()
                .ok_or(Error::SlotUnserved(0)),
        }
    }

    /// Sends `sent` to its slot's node, following redirects.
    async fn send(&self, sent: &Sent) -> Result<Frame, Error> {
        let addr = self.route(sent.slot).await?;
        let reply = self.node(&addr).run(sent.raw()).await;
        match reply {
            Err(e) => self.follow(sent, &addr, e).await,
            ok => ok,
        }
    }

    /// Follows the redirect `e` (from the node at `from`) until `sent` is answered
    /// by a node that serves it, or `max_redirects` have been followed. Any other
    /// error is the answer.
    async fn follow(&self, sent: &Sent, from: &str, mut e: Error) -> Result<Frame, Error> {
        let mut from: Arc<str> = from.into();
        for _ in 0..self.inner.config.max_redirects {
            let (addr, ask) = match Redirect::parse(&e, &from) {
                None => {
                    self.failed(&e);
                    return Err(e);
                }
                Some(Redirect::Moved { slot, addr }) => {
                    self.moved(slot, &addr);
                    (addr, false)
                }
                Some(Redirect::Ask { addr }) => (addr, true),
                Some(Redirect::TryAgain) => {
                    tokio::time::sleep(self.inner.config.tryagain_delay).await;
                    (self.route(sent.slot).await?, false)
                }
            };
            let pool = self.node(&addr);
            let reply = if ask {
                // ASKING lets the next command on the same connection in.
                pool.run_pipeline(vec![asking(), sent.raw()])
                    .await
                    .and_then(|mut r| r.pop().expect("two replies"))
            } else {
                pool.run(sent.raw()).await
            };
            match reply {
                Ok(frame) => return Ok(frame),
                Err(next) => (e, from) = (next, addr),
            }
        }
        Err(Error::TooManyRedirects(e.to_string()))
    }

    /// A node said `slot` is served at `addr`: remember it, and read the whole map
    /// again soon.
    fn moved(&self, slot: u16, addr: &Arc<str>) {
        self.inner.slots.write().unwrap_or_else(|e| e.into_inner())[usize::from(slot)] =
            Some(addr.clone());
        self.refresh_soon();
    }

    /// A call failed: if the node may be gone or the cluster unsettled, read the
    /// map again soon.
    fn failed(&self, e: &Error) {
        if e.is_connection_lost() || matches!(e.code(), Some("CLUSTERDOWN")) {
            self.refresh_soon();
        }
    }

    /// Starts a background read of the map, unless one is running or the last was
    /// less than `refresh_interval` ago. Outside a tokio runtime, does nothing.
    fn refresh_soon(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut r = self.inner.refresh.lock().unwrap_or_else(|e| e.into_inner());
            let recent = r
                .last
                .is_some_and(|at| at.elapsed() < self.inner.config.refresh_interval);
            if r.running || recent {
                return;
            }
            r.running = true;
        }
        let this = self.clone();
        runtime.spawn(async move {
            if let Err(e) = this.refresh().await {
                tracing::warn!(error = %e, "could not read the cluster's slot map");
            }
            this.inner
                .refresh
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .running = false;
        });
    }

    async fn refresh_now(&self) -> Result<(), Error> {
        self.inner
            .refresh
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last = Some(Instant::now());
        let mut candidates: Vec<String> = {
            let slots = self.inner.slots();
            let mut known: Vec<String> = slots.iter().flatten().map(|a| a.to_string()).collect();
            known.sort_unstable();
            known.dedup();
            known
        };
        candidates.extend(self.inner.config.seeds.iter().cloned());
        let mut last = Error::SlotUnserved(0);
        for addr in candidates {
            let reply = self
                .node(&addr)
                .run(Cmd::new(
                    vec![Bytes::from_static(b"CLUSTER"), Bytes::from_static(b"SLOTS")],
                    Ok,
                ))
                .await;
            match reply.and_then(|f| slot_map(f, &addr)) {
                Ok(map) => {
                    *self.inner.slots.write().unwrap_or_else(|e| e.into_inner()) = map;
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// The slot map in a `CLUSTER SLOTS` reply from the node at `from`: for each range,
/// `[start, end, [host, port, id …], replicas …]`. An empty host means `from`'s.
fn slot_map(reply: Frame, from: &str) -> Result<Vec<Option<Arc<str>>>, Error> {
    let bad = |what: &str| Error::UnexpectedReply(format!("CLUSTER SLOTS: {what}"));
    let Frame::Array(ranges) = reply else {
        return Err(bad("not an array"));
    };
    let mut map = vec![None; SLOTS];
    for range in ranges {
        let Frame::Array(fields) = range else {
            return Err(bad("a range is not an array"));
        };
        let (Some(Frame::Integer(start)), Some(Frame::Integer(end)), Some(Frame::Array(node))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad("a range is not [start, end, node …]"));
        };
        let (Some(Frame::Bulk(host)), Some(Frame::Integer(port))) = (node.first(), node.get(1))
        else {
            return Err(bad("a node is not [host, port …]"));
        };
        let host = match std::str::from_utf8(host) {
            Ok("" | "?") => host_of(from),
            Ok(host) => host,
            Err(_) => return Err(bad("a host is not text")),
        };
        let addr: Arc<str> = format!("{host}:{port}").into();
        let (start, end) = (usize::try_from(*start), usize::try_from(*end));
        let (Ok(start), Ok(end)) = (start, end) else {
            return Err(bad("a negative slot"));
        };
        if start > end || end >= SLOTS {
            return Err(bad("a slot out of range"));
        }
        for owner in &mut map[start..=end] {
            *owner = Some(addr.clone());
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(text: &str) -> Error {
        Error::Server(text.into())
    }

    #[test]
    fn redirects_are_read_as_redis_sends_them() {
        let from = "10.0.0.1:7000";
        assert_eq!(
            Redirect::parse(&server("MOVED 3999 127.0.0.1:6381"), from),
            Some(Redirect::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            Redirect::parse(&server("ASK 3999 127.0.0.1:6381"), from),
            Some(Redirect::Ask {
                addr: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            Redirect::parse(&server("MOVED 1 :7001"), from),
            Some(Redirect::Moved {
                slot: 1,
                addr: "10.0.0.1:7001".into()
            }),
            "an unknown endpoint is on the replying node's host"
        );
        assert_eq!(
            Redirect::parse(
                &server("TRYAGAIN Multiple keys request during rehashing of slot"),
                from
            ),
            Some(Redirect::TryAgain)
        );
        for other in [
            "ERR unknown command",
            "MOVED",
            "MOVED x 1:2",
            "CROSSSLOT Keys",
        ] {
            assert_eq!(Redirect::parse(&server(other), from), None, "{other}");
        }
        assert_eq!(Redirect::parse(&Error::Closed, from), None);
    }

    #[test]
    fn commands_are_routed_by_their_key() {
        let args = |a: &[&'static str]| a.iter().map(|s| Bytes::from(*s)).collect::<Vec<_>>();
        assert_eq!(routing_key(&args(&["GET", "k"])).unwrap(), "k");
        assert_eq!(
            routing_key(&args(&["IDSET.WHICH", "42", "a", "b"])).unwrap(),
            "a"
        );
        assert_eq!(routing_key(&args(&["ping"])), None);
        assert_eq!(routing_key(&args(&["CLUSTER", "SLOTS"])), None);
        assert_eq!(routing_key(&args(&["INFO", "server"])), None);
    }

    fn node(host: &str, port: i64) -> Frame {
        Frame::Array(vec![
            Frame::bulk(host.to_owned()),
            Frame::Integer(port),
            Frame::bulk("id"),
        ])
    }

    #[test]
    fn the_slot_map_is_read_from_cluster_slots() {
        let reply = Frame::Array(vec![
            Frame::Array(vec![
                Frame::Integer(0),
                Frame::Integer(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Frame::Array(vec![
                Frame::Integer(5461),
                Frame::Integer(16383),
                node("", 7001),
            ]),
        ]);
        let map = slot_map(reply, "10.1.1.1:7001").unwrap();
        assert_eq!(map[0].as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(map[5460].as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(map[5461].as_deref(), Some("10.1.1.1:7001"));
        assert_eq!(map[16383].as_deref(), Some("10.1.1.1:7001"));
        let partial = Frame::Array(vec![Frame::Array(vec![
            Frame::Integer(10),
            Frame::Integer(10),
            node("h", 1),
        ])]);
        let map = slot_map(partial, "x:1").unwrap();
        assert_eq!(
            map.iter().flatten().count(),
            1,
            "unserved slots stay unknown"
        );
        for bad in [
            Frame::Integer(1),
            Frame::Array(vec![Frame::Array(vec![Frame::Integer(0)])]),
            Frame::Array(vec![Frame::Array(vec![
                Frame::Integer(5),
                Frame::Integer(16384),
                node("h", 1),
            ])]),
        ] {
            assert!(slot_map(bad, "x:1").unwrap_err().is_unexpected_reply());
        }
    }
}
