//! The loops that serve clients: per core, an event loop ([`crate::evloop`]),
//! and a runtime of its own, with one worker, its own epoll and its own timers,
//! for a lingering close and the tasks commands spawn. A connection is handed
//! to the core with the fewest connections when it is accepted and lives on its
//! event loop until it closes, as in Redis's I/O threads, Pelikan's workers or
//! Dragonfly's shards, unless its scripts keep waiting for other loops' scripts
//! over the same keys: then it moves to the loop those keys call home
//! ([`crate::script::affinity`]), as Dragonfly moves a script's connection.
//!
//! One runtime with a worker per core (tokio's work-stealing scheduler) cost ~15%
//! more CPU per pipelined GET than a single worker serving the same load (1.3×
//! Redis's against 1.03–1.07×, `vs_redis`-style runs on 2 cores): a task
//! woken by one worker's epoll ran on whichever worker took it, with its session
//! and buffers cold in that core's cache, and every batch of readiness woke a
//! sleeping sibling (a futex round trip) to steal half of it. Loops that share
//! nothing on the request path pay neither. What a loop gives up is stealing: a
//! loop with more busy clients than another stays busier. Connections are spread
//! evenly as they arrive, and a command that runs long still hands its loop's
//! other clients to a fresh thread ([`crate::offload`]), because each loop is a
//! multi-threaded runtime that happens to have one worker, not a current-thread
//! one.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use crate::evloop::{Arriving, EvLoop};
use crate::server::Server;
use crate::session::ClientInfo;

struct Loop {
    rt: Runtime,
    ev: EvLoop,
    /// Connections living on this core now.
    conns: Arc<AtomicUsize>,
}

/// A connection's hold on its core and on the server's shutdown, on its event
/// loop or in its lingering close: the server waits for every tenancy to end,
/// and the core counts its tenancies.
pub(crate) struct Tenancy {
    _tracked: TaskTrackerToken,
    leaving: Leaving,
}

impl Tenancy {
    /// The connection moved to the core counting its connections in `conns`.
    pub(crate) fn move_to(&mut self, conns: &Arc<AtomicUsize>) {
        conns.fetch_add(1, Relaxed);
        // The old count's drop takes it off the core it left.
        self.leaving = Leaving(conns.clone());
    }
}

pub struct Loops {
    loops: Vec<Loop>,
}

/// Takes one off its loop's count when the connection ends, however it ends.
struct Leaving(Arc<AtomicUsize>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Loops {
    /// Starts `n` loops (at least one), each of at most `max_threads` threads
    /// (`loop-max-threads`).
    pub fn start(n: usize, max_threads: usize) -> io::Result<Loops> {
        let loops = (0..n.max(1))
            .map(|i| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(format!("relcache-io-{i}"))
                    .enable_all()
                    .build()?;
                let conns = Arc::new(AtomicUsize::new(0));
                let ev = EvLoop::start(i, rt.handle().clone(), max_threads, conns.clone())?;
                Ok(Loop { rt, ev, conns })
            })
            .collect::<io::Result<Vec<_>>>()?;
        EvLoop::link(&loops.iter().map(|l| &l.ev).collect::<Vec<_>>());
        Ok(Loops { loops })
    }

    /// How many connections live on each loop now, by loop.
    pub fn connections(&self) -> Box<[Arc<AtomicUsize>]> {
        self.loops.iter().map(|l| l.conns.clone()).collect()
    }

    /// Serves each of `conns` on the event loop of the core with the fewest
    /// connections. The streams must be in non-blocking mode.
    pub fn serve_clients(
        &self,
        tracker: &TaskTracker,
        server: &Arc<Server>,
        conns: Vec<(std::net::TcpStream, Arc<ClientInfo>)>,
    ) {
        let mut batches: Vec<Vec<_>> = self.loops.iter().map(|_| Vec::new()).collect();
        for (stream, info) in conns {
            let (i, leaving) = self.choose();
            batches[i].push(Arriving {
                stream,
                server: server.clone(),
                info,
                tenancy: Tenancy {
                    _tracked: tracker.token(),
                    leaving,
                },
            });
        }
        for (l, batch) in self.loops.iter().zip(batches) {
            if !batch.is_empty() {
                l.ev.arrive(batch);
            }
        }
    }

    /// The core with the fewest connections, counting one more.
    fn choose(&self) -> (usize, Leaving) {
        let (i, chosen) = self
            .loops
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| l.conns.load(Relaxed))
            .expect("at least one loop");
        chosen.conns.fetch_add(1, Relaxed);
        (i, Leaving(chosen.conns.clone()))
    }

    /// Serves each of `conns` on the runtime of the core with the fewest
    /// connections: `serve` gets the stream registered with that runtime's
    /// epoll, and what came with it, and runs there until it returns. The
    /// streams must be in non-blocking mode.
    ///
    /// A batch reaches each loop as one task that spawns its connections from
    /// inside, so handing over a burst of accepts wakes a loop once, not once per
    /// connection (each wake of a loop sharing a core with the acceptor can
    /// preempt it, and a burst of connects then outruns the listen queue).
    pub fn serve<T, F, Fut>(
        &self,
        tracker: &TaskTracker,
        conns: Vec<(std::net::TcpStream, T)>,
        serve: F,
    ) where
        T: Send + 'static,
        F: Fn(io::Result<TcpStream>, T) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut batches: Vec<Vec<_>> = self.loops.iter().map(|_| Vec::new()).collect();
        for (stream, with) in conns {
            let (i, leaving) = self.choose();
            batches[i].push((stream, with, leaving));
        }
        for (l, batch) in self.loops.iter().zip(batches) {
            if batch.is_empty() {
                continue;
            }
            let (tracker, serve) = (tracker.clone(), serve.clone());
            l.rt.spawn(async move {
                for (stream, with, leaving) in batch {
                    let serve = serve.clone();
                    tokio::spawn(tracker.track_future(async move {
                        let _leaving = leaving;
                        // Registered from inside the loop: a stream belongs to
                        // the epoll of the runtime it is made in.
                        serve(TcpStream::from_std(stream), with).await
                    }));
                }
            });
        }
    }

    /// Stops the loops once their connections have ended. Blocks: call it from a
    /// blocking thread, never from inside a runtime's worker.
    pub fn shutdown(self) {
        for l in self.loops {
            l.ev.stop();
            // What is left is background work a client started (a cluster link
            // opened by CLUSTER MEET, say): it ends with the server.
            l.rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}
