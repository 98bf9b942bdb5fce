//! Blocked clients: parking a command that has to wait, waking it, and CLIENT UNBLOCK.
//!
//! A command that cannot answer yet (IDSET.LEASE … BLOCK while another caller holds
//! the lease) asks its [`Ctx`](crate::cmd::Ctx) to park with a [`Wait`]; dispatch
//! hands that back to the connection as [`Flow::Park`](crate::cmd::Flow), and the
//! connection keeps a [`Parked`] command instead of reading on: requests behind it
//! wait with it, so replies stay in order, as with Redis's blocked clients. The
//! command runs again, from the top, when its wait is woken or its recheck time
//! passes, carrying the deadline it was first parked with so a wake-up never extends
//! the wait; it answers once it no longer parks.
//!
//! Everything about being blocked lives here: the wait, the parked command, the
//! `blocked_clients` count and CLIENT LIST's `b` flag, and CLIENT UNBLOCK's request,
//! which crosses from another connection through the [`ClientInfo`] registry entry.
//! The connection's loop only runs a due command again and waits on the signals. This
//! module depends on no command code (commands depend on its [`Wait`]), so the
//! command families and the connection loop form no cycle.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use relcache_protocol::resp::Frame;

use crate::server::Server;
use crate::session::{ClientInfo, Session};

/// Why and until when a parked command waits.
pub struct Wait {
    /// Fires (value or sender dropped) when whatever the command waits for changes.
    pub wake: tokio::sync::watch::Receiver<()>,
    /// When to run the command again even if nothing woke it: a lapsing lease sends
    /// no signal.
    pub recheck_at: Instant,
    /// When the command stops waiting and answers that it timed out; `None` for a
    /// command that waits, unrun, for another client's script to let go of its
    /// shards: it is not a blocked client (CLIENT UNBLOCK does not apply), and it
    /// runs again as if fresh.
    pub deadline: Option<Instant>,
}

/// A command waiting to run again.
pub struct Parked {
    args: Vec<Bytes>,
    wait: Wait,
    woken: bool,
}

impl Parked {
    /// Whether it should run again now: woken, or its recheck time has come.
    pub fn due(&self) -> bool {
        self.woken || Instant::now() >= self.wait.recheck_at
    }

    /// When to look at it again if nothing wakes it.
    pub fn recheck_at(&self) -> Instant {
        self.wait.recheck_at
    }
}

/// Parks a freshly dispatched command that asked to wait, with its arguments
/// owned ([`crate::cmd::Argv::to_owned_vec`]): slices would keep the whole read
/// buffer they arrived in (16 KB) for as long as the command waits, which for
/// thousands of lease waiters adds up.
pub fn park(server: &Server, info: &ClientInfo, args: Vec<Bytes>, wait: Wait) -> Parked {
    // A CLIENT UNBLOCK that raced with the end of an earlier wait must not end this
    // one. (One that comes while this command waits is kept.)
    info.take_unblock();
    if wait.deadline.is_some() {
        info.parks.fetch_add(1, Relaxed);
        set_blocked(server, info, true);
    }
    Parked {
        args,
        wait,
        woken: false,
    }
}

/// Takes a due parked command to run again: its arguments, and the deadline it was
/// first parked with (so that waking up never extends its wait).
pub fn take_due(parked: &mut Option<Parked>) -> Option<(Vec<Bytes>, Option<Instant>)> {
    let p = parked.take_if(|p| p.due())?;
    Some((p.args, p.wait.deadline))
}

/// Records how a re-run parked command went: parked again with a new `wait`, or
/// answered (`None`).
pub fn rerun_ended(
    server: &Server,
    info: &ClientInfo,
    args: Vec<Bytes>,
    wait: Option<Wait>,
) -> Option<Parked> {
    match wait {
        Some(wait) => {
            // Run again after waiting for a script, it may now block for real.
            if wait.deadline.is_some() && !info.blocked.load(Relaxed) {
                info.take_unblock();
                info.parks.fetch_add(1, Relaxed);
            }
            set_blocked(server, info, wait.deadline.is_some());
            Some(Parked {
                args,
                wait,
                woken: false,
            })
        }
        None => {
            set_blocked(server, info, false);
            None
        }
    }
}

/// A parked command's two wake-ups as owned futures, for a loop that polls
/// them with wakers of its own ([`crate::evloop`]) rather than awaiting them:
/// its wait's signal, and CLIENT UNBLOCK's. Made afresh for each wait, they
/// miss nothing: the wait's signal is a version the copy compares with, and a
/// CLIENT UNBLOCK that came first is kept by the signal as a permit.
pub fn signals(parked: &Parked, info: &Arc<ClientInfo>) -> [Signal; 2] {
    let mut wake = parked.wait.wake.clone();
    let info = info.clone();
    [
        Box::pin(async move {
            // An error means the sender is gone: the lease ended, a wake-up too.
            let _ = wake.changed().await;
        }),
        Box::pin(async move { info.unblock_signal.notified().await }),
    ]
}

/// One of a parked command's wake-ups ([`signals`]).
pub type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Marks the parked command woken (its signal fired), so it runs again next.
pub fn wake(parked: &mut Option<Parked>) {
    if let Some(p) = parked {
        p.woken = true;
    }
}

/// Whether the parked command waits for its signal: parked and not woken.
pub fn waiting(parked: &Option<Parked>) -> bool {
    parked.as_ref().is_some_and(|p| !p.woken)
}

/// How CLIENT UNBLOCK ends a parked command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Unblock {
    /// As if its wait had run out.
    Timeout = 1,
    /// With `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error = 2,
}

impl ClientInfo {
    /// Asks this client, if parked, to answer its parked command at once (CLIENT
    /// UNBLOCK, from another connection). Answers whether it was parked.
    pub fn unblock(&self, how: Unblock) -> bool {
        if !self.blocked.load(Relaxed) {
            return false;
        }
        // Tagged with the park it was meant for: if that wait ends and another
        // begins before the request is taken, the request is stale and ignored.
        let park = self.parks.load(Relaxed);
        self.unblock.store(park << 2 | how as u64, Relaxed);
        self.unblock_signal.notify_one();
        true
    }

    /// Takes a pending CLIENT UNBLOCK request for the current park, if any.
    fn take_unblock(&self) -> Option<Unblock> {
        let asked = self.unblock.swap(0, Relaxed);
        if asked == 0 || asked >> 2 != self.parks.load(Relaxed) {
            return None;
        }
        match asked & 3 {
            1 => Some(Unblock::Timeout),
            2 => Some(Unblock::Error),
            _ => None,
        }
    }
}

/// Acts on a CLIENT UNBLOCK signal for this connection: the parked command answers
/// now, as if its wait had run out or with an error, and requests behind it run
/// next. A stale signal (the command already answered) does nothing.
pub fn on_unblock(
    server: &Server,
    session: &Session,
    parked: &mut Option<Parked>,
    out: &mut BytesMut,
) {
    let Some(how) = session.info.take_unblock() else {
        return;
    };
    // A command waiting for a script is not blocked: CLIENT UNBLOCK leaves it.
    if parked.take_if(|p| p.wait.deadline.is_some()).is_none() {
        return;
    }
    let reply = match how {
        Unblock::Timeout => {
            server.stats.lease_busy.incr();
            Frame::Null
        }
        Unblock::Error => Frame::error("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
    };
    crate::observe::error_reply(server, &reply);
    reply.encode(session.proto, out);
    set_blocked(server, &session.info, false);
}

/// Records whether the client is parked (CLIENT LIST's `b`, INFO's
/// `blocked_clients`). Idempotent, so a closing connection can always clear it.
pub fn set_blocked(server: &Server, info: &ClientInfo, blocked: bool) {
    if info.blocked.swap(blocked, Relaxed) != blocked {
        server
            .stats
            .blocked_clients
            .add(if blocked { 1 } else { -1 });
    }
}
