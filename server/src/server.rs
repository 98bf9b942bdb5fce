//! The server: shared state, the accept loop, and the background cron.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cmd::registry;
use crate::config::Config;
use crate::db::evict::Evictor;
use crate::db::{expire, Db, View};
use crate::error::CmdError;
use crate::session::Clients;
use crate::stats::{CommandStats, Stats};

/// Everything connections share.
pub struct Server {
    pub db: Db,
    pub config: Config,
    pub stats: Stats,
    /// Per command and subcommand, indexed like `cmd::registry().all`.
    pub cmdstats: Vec<CommandStats>,
    pub clients: Clients,
    pub evictor: Evictor,
    /// Cancelled to shut down: by the caller of [`run`], or by SHUTDOWN.
    pub shutdown: CancellationToken,
    pub started: Instant,
    pub run_id: String,
    pub local_addr: SocketAddr,
    /// `used_memory` once the server was set up, before any client (INFO's
    /// `used_memory_startup`).
    pub startup_memory: usize,
}

impl Server {
    pub fn new(config: Config, local_addr: SocketAddr, shutdown: CancellationToken) -> Server {
        let run_id: String = {
            use rand::Rng;
            let mut rng = rand::thread_rng();
            (0..40)
                .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap())
                .collect()
        };
        Server {
            db: Db::new(),
            config,
            stats: Stats::default(),
            cmdstats: registry()
                .all
                .iter()
                .map(|_| CommandStats::default())
                .collect(),
            clients: Clients::default(),
            evictor: Evictor::default(),
            shutdown,
            started: Instant::now(),
            run_id,
            local_addr,
            startup_memory: crate::alloc::allocated().unwrap_or(0),
        }
    }

    /// Bytes in use as the maxmemory limit sees them: the counting allocator's live
    /// heap, or 0 where it is not installed (the limit is then not enforced).
    pub fn used_memory(&self) -> usize {
        crate::alloc::allocated().unwrap_or(0)
    }

    /// Makes room under `maxmemory` for a command about to store `incoming` bytes,
    /// evicting by the configured policy. Called before the command takes any lock.
    /// `Err(Oom)` when memory stays over the limit and the command would add data
    /// (`denyoom`); commands that only read or delete always proceed.
    pub fn make_room(&self, incoming: usize, denyoom: bool) -> Result<(), CmdError> {
        let max = self.config.maxmemory.load(Relaxed) as usize;
        if max == 0 || self.used_memory() + incoming <= max {
            return Ok(());
        }
        let policy = self.config.policy();
        let samples = self.config.maxmemory_samples.load(Relaxed) as usize;
        let (evicted, still_over) = self.evictor.evict(&self.db, policy, samples, || {
            self.used_memory() + incoming > max
        });
        if evicted > 0 {
            self.stats.evicted_keys.add(evicted);
        }
        if still_over && denyoom {
            return Err(CmdError::Oom);
        }
        Ok(())
    }

    /// Whether memory is over `maxmemory` now (never without a limit).
    pub fn over_maxmemory(&self) -> bool {
        let max = self.config.maxmemory.load(Relaxed) as usize;
        max > 0 && self.used_memory() > max
    }

    /// Adds what a command's view counted (hits, misses, lazily expired keys).
    pub fn absorb_view_stats(&self, v: &View<'_>) {
        let (hits, misses) = v.hits_misses();
        if hits > 0 {
            self.stats.keyspace_hits.add(hits);
        }
        if misses > 0 {
            self.stats.keyspace_misses.add(misses);
        }
        if v.expired > 0 {
            self.stats.expired_keys.add(v.expired);
        }
    }
}

/// Serves `listeners` (one per bound address) until `shutdown` is cancelled (or a
/// client sends SHUTDOWN), then stops accepting, tells every connection to finish,
/// and waits for them.
pub async fn run(
    listeners: Vec<TcpListener>,
    config: Config,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let first = listeners
        .first()
        .ok_or_else(|| anyhow::anyhow!("no address to listen on"))?;
    let local_addr = first.local_addr()?;
    let server = Arc::new(Server::new(config, local_addr, shutdown.clone()));
    for l in &listeners {
        tracing::info!(local_addr = %l.local_addr()?, "relcache ready to accept connections");
    }

    let cron = {
        let server = server.clone();
        std::thread::Builder::new()
            .name("relcache-cron".into())
            .spawn(move || cron(&server))?
    };

    let tracker = TaskTracker::new();
    let accepting: Vec<_> = listeners
        .into_iter()
        .map(|l| tokio::spawn(accept_loop(l, server.clone(), tracker.clone())))
        .collect();
    for a in accepting {
        let _ = a.await;
    }
    tracing::info!("shutting down: closing connections");
    tracker.close();
    tracker.wait().await;
    let _ = tokio::task::spawn_blocking(move || cron.join()).await;
    tracing::info!("relcache is now ready to exit, bye bye");
    Ok(())
}

/// Accepts connections on one listener until shutdown, handing each to its own task.
async fn accept_loop(listener: TcpListener, server: Arc<Server>, tracker: TaskTracker) {
    let local_addr = listener.local_addr().unwrap_or(server.local_addr);
    let shutdown = server.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        let (mut stream, addr) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on accept.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if let Some(keepalive) = server.config.keepalive() {
            let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        }
        server.stats.total_connections_received.incr();
        let max = server.config.maxclients.load(Relaxed) as usize;
        match server.clients.register(addr, local_addr, &shutdown, max) {
            Some(info) => {
                tracker.spawn(crate::conn::serve(server.clone(), stream, info));
            }
            None => {
                server.stats.rejected_connections.incr();
                tracker.spawn(async move {
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
        }
    }
}

/// The background loop: active expiry, forgetting lapsed leases, `hz` times a second, on its own thread so a
/// sweep never occupies a runtime worker that serves clients.
fn cron(server: &Server) {
    while !server.shutdown.is_cancelled() {
        let hz = server.config.hz.load(Relaxed).clamp(1, 500);
        let period = Duration::from_millis(1000 / hz);
        if let Some(used) = crate::alloc::allocated() {
            crate::alloc::note_peak(used as u64);
        }
        // Redis gives the slow expiry cycle 25% of a cron period.
        let removed = expire::active_expire_cycle(&server.db, period / 4);
        if removed > 0 {
            server.stats.expired_keys.add(removed);
        }
        let lapsed = server.db.sweep_leases();
        server.stats.lease_lapses.add(lapsed as u64);
        std::thread::sleep(period);
    }
}
