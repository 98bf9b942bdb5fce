//! Serving: one accept loop per bound address, each connection on one of the
//! client loops ([`crate::loops`]), and an orderly shutdown that stops
//! accepting, tells every connection to finish and waits for them (mini-redis's
//! shape, with tokio-util's `TaskTracker`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::loops::Loops;
use crate::server::Server;
use crate::session::ClientInfo;

/// Serves `listeners` (one per bound address) on `loops` client loops until
/// `shutdown` is cancelled (or a client sends SHUTDOWN), then stops accepting,
/// tells every connection to finish, and waits for them.
pub async fn run(
    listeners: Vec<TcpListener>,
    config: Config,
    loops: usize,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let first = listeners
        .first()
        .ok_or_else(|| anyhow::anyhow!("no address to listen on"))?;
    let local_addr = first.local_addr()?;
    let server = Arc::new(Server::new(config, local_addr, shutdown.clone()));
    crate::tracking::install(&server);
    let bind: Vec<std::net::IpAddr> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok().map(|a| a.ip()))
        .collect();
    crate::cluster::start(&server, &bind)?;
    crate::persist::init(&server);
    let loader = crate::persist::start_load(&server)?;
    let saver = crate::persist::start_saver(server.clone())?;
    for l in &listeners {
        tracing::info!(local_addr = %l.local_addr()?, "relcache ready to accept connections");
    }

    let cron = {
        let server = server.clone();
        std::thread::Builder::new()
            .name("relcache-cron".into())
            .spawn(move || crate::cron::run(&server))?
    };

    let tracker = TaskTracker::new();
    let max_threads = server.config.loop_max_threads.load(Relaxed) as usize;
    let gathered = crate::gather::starts_gathered(&server, loops);
    let loops = Arc::new(Loops::start(loops, max_threads, gathered)?);
    let _ = server.loops.set(loops.view());
    let gathering = tokio::spawn(crate::gather::run(server.clone(), loops.clone()));
    let accepting: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let (server, loops, tracker) = (server.clone(), loops.clone(), tracker.clone());
            tokio::spawn(accept_loop(l, server, loops, tracker))
        })
        .collect();
    for a in accepting {
        let _ = a.await;
    }
    // It holds the loops, which are let go of below.
    gathering.abort();
    let _ = gathering.await;
    tracing::info!("shutting down: closing connections");
    tracker.close();
    // A script that never ends would hold its connection, and so the exit, forever.
    server.scripts.running.kill_all();
    while tokio::time::timeout(Duration::from_millis(100), tracker.wait())
        .await
        .is_err()
    {
        server.scripts.running.kill_all();
    }
    if let Ok(loops) = Arc::try_unwrap(loops) {
        let _ = tokio::task::spawn_blocking(move || loops.shutdown()).await;
    }
    let _ = tokio::task::spawn_blocking(move || cron.join()).await;
    let _ = tokio::task::spawn_blocking(move || (saver.join(), loader.map(|l| l.join()))).await;
    if let Some(e) = server.persist.load_error.lock().take() {
        return Err(anyhow::anyhow!(e));
    }
    let exiting = server.clone();
    tokio::task::spawn_blocking(move || crate::persist::at_exit(&exiting)).await??;
    tracing::info!("relcache is now ready to exit, bye bye");
    Ok(())
}

/// Accepts connections on one listener until shutdown, handing each to a task of
/// its own on a client loop.
///
/// The listener is watched for readiness and drained with plain `accept4` calls
/// (mio's), so an accepted socket is never registered with this runtime's epoll
/// only to be taken off it again for its loop: accepting costs one system call
/// per connection and the hand-off, and socket options are set on the loop. On
/// a machine with one busy core that is the difference between a burst of a
/// thousand connects fitting in the listen queue and overflowing it.
async fn accept_loop(
    listener: TcpListener,
    server: Arc<Server>,
    loops: Arc<Loops>,
    tracker: TaskTracker,
) {
    let local_addr = listener.local_addr().unwrap_or(server.local_addr);
    let watched = listener.into_std().and_then(|l| {
        let l = mio::net::TcpListener::from_std(l);
        // SAFETY: the mio listener owns its descriptor and is only dropped with
        // the `AsyncFd` that holds it, so the registered descriptor stays open
        // and the same for as long as it is registered.
        unsafe { AsyncFd::register_with_interest(l, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)
    });
    let listener = match watched {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, %local_addr, "cannot watch the listener");
            return;
        }
    };
    let shutdown = server.shutdown.clone();
    loop {
        let mut ready = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.readable() => match r {
                Ok(ready) => ready,
                Err(e) => {
                    tracing::error!(error = %e, %local_addr, "listener failed");
                    return;
                }
            },
        };
        // The runtime also runs the cluster bus: as Redis 7.4 accepts at most
        // `max-new-connections-per-cycle` per event-loop cycle, a burst of
        // connects lets its other tasks run after every that many accepts.
        let cap = server.config.max_new_connections_per_cycle.load(Relaxed) as usize;
        let (mut admitted, mut refused) = (Vec::new(), Vec::new());
        let (mut drained, mut failed) = (false, false);
        while admitted.len() + refused.len() < cap {
            match listener.get_ref().accept() {
                Ok((stream, addr)) => match admit(addr, local_addr, &server) {
                    Some(info) => admitted.push((stream.into(), info)),
                    None => refused.push((stream.into(), server.clone())),
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    drained = true;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    failed = true;
                    break;
                }
            }
        }
        drop(ready);
        loops.serve_clients(&tracker, &server, admitted);
        if !refused.is_empty() {
            loops.serve(&tracker, refused, refuse);
        }
        if failed {
            // EMFILE and friends: back off instead of spinning on accept.
            tokio::time::sleep(Duration::from_millis(10)).await;
        } else if !drained {
            tokio::task::yield_now().await;
        }
    }
}

/// Registers an accepted connection, or refuses it (`None`) past `maxclients`.
fn admit(
    addr: SocketAddr,
    local_addr: SocketAddr,
    server: &Arc<Server>,
) -> Option<Arc<ClientInfo>> {
    server.stats.total_connections_received.incr();
    let max = server.config.maxclients.load(Relaxed) as usize;
    server
        .clients
        .register(addr, local_addr, &server.shutdown, max)
}

/// Tells a connection over `maxclients` so, and closes it.
async fn refuse(stream: std::io::Result<TcpStream>, server: Arc<Server>) {
    server.stats.rejected_connections.incr();
    if let Ok(mut stream) = stream {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        let _ = stream.shutdown().await;
    }
}
