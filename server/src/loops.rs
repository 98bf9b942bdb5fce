//! The loops that serve clients: per core, an event loop ([`crate::evloop`]),
//! and a runtime of its own, with one worker, its own epoll and its own timers,
//! for a lingering close and the tasks commands spawn. A connection is handed,
//! when it is accepted, to the loop with the fewest connections among those
//! taking them: the first alone while the server's load is light enough for
//! one loop ([`crate::gather`]), else all of them. It lives on its event loop
//! until it closes, as in Redis's I/O threads, Pelikan's workers or
//! Dragonfly's shards, but for three moves, each made between two passes over
//! its requests: to the first loop when the connections gather, to a loop
//! under an even share when they spread, and to the loop its scripts' keys call
//! home when its scripts keep waiting for other loops' scripts over the same
//! keys ([`crate::script::affinity`]), as Dragonfly moves a script's
//! connection.
//!
//! One runtime with a worker per core (tokio's work-stealing scheduler) cost ~15%
//! more CPU per pipelined GET than a single worker serving the same load (1.3×
//! Redis's against 1.03–1.07×, `vs_redis`-style runs on 2 cores): a task
//! woken by one worker's epoll ran on whichever worker took it, with its session
//! and buffers cold in that core's cache, and every batch of readiness woke a
//! sleeping sibling (a futex round trip) to steal half of it. Loops that share
//! nothing on the request path pay neither. What a loop gives up is stealing: a
//! loop with more busy clients than another stays busier. Spread connections
//! are evened in number as they spread and as they arrive, not after, and a
//! command that runs long still hands its loop's other clients to a fresh
//! thread ([`crate::offload`]), because each loop is a multi-threaded runtime
//! that happens to have one worker, not a current-thread one.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use crate::evloop::{Arriving, EvLoop, Sending};
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
    /// How many loops, from the first, take connections now.
    active: Arc<AtomicUsize>,
}

/// The loops as INFO sees them.
pub struct View {
    /// The connections living on each loop now, by loop.
    pub connections: Box<[Arc<AtomicUsize>]>,
    /// How many loops take connections now: 1 while gathered.
    pub active: Arc<AtomicUsize>,
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
    /// (`loop-max-threads`), taking connections on the first alone if
    /// `gathered` ([`crate::gather`]).
    pub fn start(n: usize, max_threads: usize, gathered: bool) -> io::Result<Loops> {
        let n = n.max(1);
        let active = Arc::new(AtomicUsize::new(if gathered { 1 } else { n }));
        let loops = (0..n)
            .map(|i| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(format!("relcache-io-{i}"))
                    .enable_all()
                    .build()?;
                let conns = Arc::new(AtomicUsize::new(0));
                let ev = EvLoop::start(
                    i,
                    rt.handle().clone(),
                    max_threads,
                    conns.clone(),
                    active.clone(),
                )?;
                Ok(Loop { rt, ev, conns })
            })
            .collect::<io::Result<Vec<_>>>()?;
        EvLoop::link(&loops.iter().map(|l| &l.ev).collect::<Vec<_>>());
        Ok(Loops { loops, active })
    }

    /// What INFO shows of the loops.
    pub fn view(&self) -> View {
        View {
            connections: self.loops.iter().map(|l| l.conns.clone()).collect(),
            active: self.active.clone(),
        }
    }

    /// Nanoseconds each loop has slept waiting for work, by loop.
    pub fn idle_ns(&self) -> Vec<u64> {
        self.loops.iter().map(|l| l.ev.idle_ns()).collect()
    }

    /// How many loops there are.
    pub fn len(&self) -> usize {
        self.loops.len()
    }

    /// Whether the connections are gathered on the first loop (always, with
    /// one loop).
    pub fn gathered(&self) -> bool {
        self.active.load(Relaxed) == 1
    }

    /// Gathers every connection on the first loop: new ones go there, and the
    /// other loops are told to send theirs, those they can send now (a
    /// connection being served, or parked, goes once it settles).
    pub fn gather(&self) {
        self.active.store(1, Relaxed);
        for l in &self.loops[1..] {
            if l.conns.load(Relaxed) > 0 {
                l.ev.send_away([Sending {
                    to: 0,
                    count: usize::MAX,
                    homed_too: true,
                }]);
            }
        }
    }

    /// Spreads the connections over every loop again: new ones go to the loop
    /// with the fewest, and loops over an even share send the surplus to
    /// those under it.
    pub fn spread(&self) {
        self.active.store(self.loops.len(), Relaxed);
        let counts: Vec<usize> = self.loops.iter().map(|l| l.conns.load(Relaxed)).collect();
        for (from, sending) in plan_spread(&counts) {
            self.loops[from].ev.send_away(sending);
        }
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

    /// The core with the fewest connections among those taking them, counting
    /// one more.
    fn choose(&self) -> (usize, Leaving) {
        let active = self.active.load(Relaxed).clamp(1, self.loops.len());
        let (i, chosen) = self.loops[..active]
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

/// Which loops send how many connections to which, for `counts` (each loop's
/// connections) to end as even as they can: (from, what it sends).
fn plan_spread(counts: &[usize]) -> Vec<(usize, Vec<Sending>)> {
    let n = counts.len();
    let total: usize = counts.iter().sum();
    // The first `total % n` loops take one more than the rest.
    let share = |i: usize| total / n + usize::from(i < total % n);
    let mut under: Vec<(usize, usize)> = (0..n)
        .filter(|&i| counts[i] < share(i))
        .map(|i| (i, share(i) - counts[i]))
        .collect();
    let mut plan = Vec::new();
    for (from, &count) in counts.iter().enumerate() {
        let mut surplus = count.saturating_sub(share(from));
        let mut sending = Vec::new();
        while surplus > 0 {
            let Some((to, short)) = under.last_mut() else {
                break;
            };
            let moved = surplus.min(*short);
            sending.push(Sending {
                to: *to,
                count: moved,
                homed_too: false,
            });
            surplus -= moved;
            *short -= moved;
            if *short == 0 {
                under.pop();
            }
        }
        if !sending.is_empty() {
            plan.push((from, sending));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each loop holds once the plan has run.
    fn after(counts: &[usize]) -> Vec<usize> {
        let mut held = counts.to_vec();
        for (from, sending) in plan_spread(counts) {
            for s in sending {
                assert_ne!(s.to, from);
                assert!(s.count > 0);
                held[from] -= s.count;
                held[s.to] += s.count;
            }
        }
        held
    }

    #[test]
    fn spreading_evens_the_loops_and_keeps_every_connection() {
        assert_eq!(after(&[50, 0]), vec![25, 25]);
        assert_eq!(after(&[51, 0, 0]), vec![17, 17, 17]);
        assert_eq!(after(&[7, 0, 0, 0]), vec![2, 2, 2, 1]);
        assert_eq!(after(&[0, 9, 1]), vec![4, 3, 3]);
        assert_eq!(after(&[3, 3]), vec![3, 3]);
        assert!(plan_spread(&[3, 3]).is_empty());
        assert!(plan_spread(&[0, 0]).is_empty());
        // However the counts lie, no loop ends more than one over another.
        for counts in [[1, 30, 2, 0], [100, 0, 99, 3], [0, 0, 0, 5]] {
            let held = after(&counts);
            assert_eq!(held.iter().sum::<usize>(), counts.iter().sum::<usize>());
            let (lo, hi) = (held.iter().min().unwrap(), held.iter().max().unwrap());
            assert!(hi - lo <= 1, "{counts:?} -> {held:?}");
        }
    }
}
