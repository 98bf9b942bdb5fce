//! Client memory: what each connection's buffers hold, kept apart from the data.
//!
//! relcache's `maxmemory` bounds the dataset. Were the clients' buffers counted in
//! it, as Redis counts them, a thousand idle connections or one client still
//! sending a 100 MB value would evict keys and get other clients' writes refused
//! with `-OOM`. So eviction compares `used_memory` minus client memory with
//! `maxmemory` ([`crate::server::Server::data_memory`]), the way Redis leaves
//! replica buffers out, and client memory has a bound of its own,
//! `maxmemory-clients`: past it the clients using the most are closed, as Redis 7
//! does, and data is never touched. A request's bytes turn into data only once a
//! command stores them.
//!
//! Accounting is cheap: a connection publishes its [`Footprint`] only when it
//! changed — at the end of a batch, and before running a large request — and the
//! total is a striped gauge. A connection gives its buffers back once they are
//! empty, so a round trip of small requests ends where it began and publishes
//! nothing.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::server::Server;
use crate::session::ClientInfo;

/// What a connection costs before any buffer: its state on its loop (the
/// connection's session and slot), registry entry, session and socket registration. Measured: `used_memory`
/// grows by this much per idle connection (`tests/client_memory.rs` checks that the
/// figure stays honest).
pub const FIXED: u64 = 2_560;

/// What one connection holds beyond [`FIXED`], as the connection sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Input not yet parsed (Redis's `qbuf`) and the spare room of the buffer
    /// holding it (`qbuf-free`).
    pub query_len: usize,
    pub query_free: usize,
    /// The bytes of the arguments of the request being run (`argv-mem`): slices of
    /// the buffer they arrived in, no longer part of the query buffer.
    pub argv: usize,
    /// The tables of where the arguments lie (the decoder's and the request's),
    /// once a request had more arguments than they hold in place, and the list
    /// of a request of many arguments while it runs.
    pub scratch: usize,
    /// The commands MULTI has queued (`multi-mem`).
    pub multi: usize,
    /// Reply bytes waiting to be written, and the reply buffer's allocation.
    pub output_len: usize,
    pub output_alloc: usize,
    /// Messages published to it and not yet moved into its reply buffer: output
    /// it holds as surely as its replies (`crate::pubsub`).
    pub pubsub: usize,
}

impl Footprint {
    /// Redis's `tot-mem`: every byte this client holds.
    pub fn total(&self) -> u64 {
        FIXED
            + (self.query_len
                + self.query_free
                + self.argv
                + self.scratch
                + self.multi
                + self.output_alloc
                + self.pubsub) as u64
    }
}

/// The published footprint of one client, for CLIENT LIST and for eviction.
#[derive(Debug)]
pub struct ClientMem {
    pub qbuf: AtomicU64,
    pub qbuf_free: AtomicU64,
    pub argv: AtomicU64,
    pub multi: AtomicU64,
    pub output_len: AtomicU64,
    pub output_alloc: AtomicU64,
    pub pubsub: AtomicU64,
    pub total: AtomicU64,
}

impl Default for ClientMem {
    fn default() -> Self {
        ClientMem {
            qbuf: AtomicU64::new(0),
            qbuf_free: AtomicU64::new(0),
            argv: AtomicU64::new(0),
            multi: AtomicU64::new(0),
            output_len: AtomicU64::new(0),
            output_alloc: AtomicU64::new(0),
            pubsub: AtomicU64::new(0),
            total: AtomicU64::new(FIXED),
        }
    }
}

impl ClientMem {
    pub fn total(&self) -> u64 {
        self.total.load(Relaxed)
    }
}

/// Publishes `now` as `info`'s footprint if it differs from `last` (what was
/// published before), and closes clients if that took client memory past
/// `maxmemory-clients`.
///
/// Called twice a batch, and a batch at `-P 1` is one request whose footprint
/// is usually what it was: the comparison is inlined into the caller, the
/// publishing is not.
#[inline]
pub fn publish(server: &Server, info: &ClientInfo, last: &mut Footprint, now: Footprint) {
    if now != *last {
        publish_changed(server, info, last, now);
    }
}

#[inline(never)]
fn publish_changed(server: &Server, info: &ClientInfo, last: &mut Footprint, now: Footprint) {
    let m = &info.mem;
    m.qbuf.store(now.query_len as u64, Relaxed);
    m.qbuf_free.store(now.query_free as u64, Relaxed);
    m.argv.store(now.argv as u64, Relaxed);
    m.multi.store(now.multi as u64, Relaxed);
    m.output_len.store(now.output_len as u64, Relaxed);
    m.output_alloc.store(now.output_alloc as u64, Relaxed);
    m.pubsub.store(now.pubsub as u64, Relaxed);
    let (before, after) = (last.total(), now.total());
    m.total.store(after, Relaxed);
    server.clients.add_memory(after as i64 - before as i64);
    *last = now;
    if after > before {
        evict_clients(server);
    }
}

/// Redis 7's client eviction: while client memory is over `maxmemory-clients`,
/// closes the client using the most (never one that asked for `CLIENT NO-EVICT
/// on`). A closed client's memory is freed by its own task a moment later, so
/// clients already told to close are counted as gone, and one caller at a time
/// chooses.
pub fn evict_clients(server: &Server) {
    let Some(limit) = server.config.maxmemory_clients() else {
        return;
    };
    let clients = &server.clients;
    if clients.memory() <= limit {
        return;
    }
    let Some(_choosing) = clients.evicting.try_lock() else {
        return;
    };
    let all = clients.all();
    let mut total = clients.memory();
    let mut candidates = Vec::new();
    for c in &all {
        let mem = c.mem.total();
        if c.kill.is_cancelled() {
            total = total.saturating_sub(mem);
        } else if !c.no_evict.load(Relaxed) {
            candidates.push((mem, c));
        }
    }
    candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    for (mem, c) in candidates {
        if total <= limit {
            break;
        }
        tracing::info!(client = c.id, addr = %c.addr, tot_mem = mem, "evicting client: maxmemory-clients reached");
        c.kill.cancel();
        server.stats.evicted_clients.incr();
        total = total.saturating_sub(mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_counts_every_buffer_once() {
        let f = Footprint {
            query_len: 10,
            query_free: 90,
            argv: 1000,
            scratch: 64,
            multi: 300,
            output_len: 5,
            output_alloc: 8,
            pubsub: 7,
        };
        // Pending output lives inside its allocation: counted once.
        assert_eq!(f.total(), FIXED + 10 + 90 + 1000 + 64 + 300 + 8 + 7);
        assert_eq!(Footprint::default().total(), FIXED);
    }
}
