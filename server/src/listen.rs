//! Serving: one accept loop per bound address, a task per connection on one of
//! the client loops ([`crate::loops`]), and an orderly shutdown that stops
//! accepting, tells every connection to finish and waits for them (mini-redis's
//! shape, with tokio-util's `TaskTracker`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::loops::Loops;
use crate::server::Server;

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
    let loops = Arc::new(Loops::start(loops)?);
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
    tracing::info!("shutting down: closing connections");
    tracker.close();
    // A script that never ends would hold its connection, and so the exit, forever.
    server.scripts.kill_all();
    while tokio::time::timeout(Duration::from_millis(100), tracker.wait())
        .await
        .is_err()
    {
        server.scripts.kill_all();
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
async fn accept_loop(
    listener: TcpListener,
    server: Arc<Server>,
    loops: Arc<Loops>,
    tracker: TaskTracker,
) {
    let local_addr = listener.local_addr().unwrap_or(server.local_addr);
    let shutdown = server.shutdown.clone();
    let mut since_yield = 0u64;
    loop {
        // A burst of connects would otherwise keep this task accepting while the
        // clients already on its worker thread wait (tokio's own budget lets it
        // take 128 first): as Redis 7.4 accepts at most
        // `max-new-connections-per-cycle` per event-loop cycle, this listener
        // lets the worker's other tasks run after every that many accepts.
        since_yield += 1;
        if since_yield > server.config.max_new_connections_per_cycle.load(Relaxed) {
            since_yield = 1;
            tokio::task::yield_now().await;
        }
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
                // Taken off this runtime's epoll, to join its loop's.
                let stream = match stream.into_std() {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot hand over a connection");
                        server.clients.unregister(info.id);
                        continue;
                    }
                };
                let server = server.clone();
                loops.serve(&tracker, stream, move |stream| async move {
                    match stream {
                        Ok(stream) => crate::conn::serve(server, stream, info).await,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot serve a connection");
                            server.clients.unregister(info.id);
                        }
                    }
                });
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
